package server

import (
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
)

// splitAll parses text given in pieces of n bytes and joins what came out.
func splitAll(syn chatSyntax, thinking bool, text string, n int) parsed {
	p := newChatParser(syn, thinking, nil)
	var all parsed
	add := func(x parsed) {
		all.reasoning += x.reasoning
		all.content += x.content
		all.calls = append(all.calls, x.calls...)
	}
	for len(text) > 0 {
		k := min(n, len(text))
		add(p.add(text[:k]))
		text = text[k:]
	}
	add(p.flush())
	return all
}

// TestChatParser: Qwen3's reasoning and Hermes tool calls come apart from the content the
// same way whatever pieces the text arrives in (every split of one to all bytes), tags
// split across pieces included.
func TestChatParser(t *testing.T) {
	for _, c := range []struct {
		name, text         string
		thinking           bool
		reasoning, content string
		calls              []string // name(arguments)
	}{
		{"plain", "Hello there.", false, "", "Hello there.", nil},
		{"reasoning then an answer", "<think>\nThe user greets me.\n</think>\n\nHello!", false, "The user greets me.", "Hello!", nil},
		{"the prompt opened the reasoning", "Let me think.\n</think>\n\nDone.", true, "Let me think.", "Done.", nil},
		{"a call", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", false, "", "",
			[]string{`get_weather({"city": "Paris"})`}},
		{"reasoning, words and two calls", "<think>I need both.</think>\nChecking.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": \"{\\\"x\\\": 1}\"}\n</tool_call>",
			false, "I need both.", "Checking.", []string{"a({})", `b({"x": 1})`}},
		{"a call cut off", "Sure. <tool_call>\n{\"name\": \"a\", \"argu", false, "", "Sure. <tool_call>\n{\"name\": \"a\", \"argu", nil},
		{"a lone angle bracket", "x < y and <thi", false, "", "x < y and <thi", nil},
		{"not a call object", "Sure. <tool_call>oops</tool_call> Done.", false, "", "Sure. <tool_call>oops</tool_call> Done.", nil},
		{"a bad call, then a call", "<tool_call>{\"nam</tool_call><tool_call>{\"name\": \"a\"}</tool_call>", false, "", "<tool_call>{\"nam</tool_call>", []string{"a({})"}},
	} {
		for n := 1; n <= len(c.text); n++ {
			got := splitAll(hermesSyntax, c.thinking, c.text, n)
			var calls []string
			for i, call := range got.calls {
				if call.Index != i || !strings.HasPrefix(call.ID, "call_") || call.Type != "function" {
					t.Errorf("%s: call %d: %+v", c.name, i, call)
				}
				calls = append(calls, call.Function.Name+"("+call.Function.Arguments+")")
			}
			if got.reasoning != c.reasoning || got.content != c.content || strings.Join(calls, ";") != strings.Join(c.calls, ";") {
				t.Errorf("%s in pieces of %d: reasoning %q, content %q, calls %q; want %q, %q, %q", c.name, n, got.reasoning, got.content, calls, c.reasoning, c.content, c.calls)
				break
			}
		}
	}
	// A family without the tags: everything is content.
	if got := splitAll(chatSyntax{}, false, "<think>a</think><tool_call>b</tool_call>", 3); got.content != "<think>a</think><tool_call>b</tool_call>" {
		t.Errorf("no syntax: %+v", got)
	}
}

// TestChatTools: tools reach the template (the Qwen3 fixture's renders them into the
// system turn, so the prompt grows), bad tools and forced calls are refused, and the chat
// format returns what the parser splits: reasoning_content, content and tool_calls with
// finish_reason "tool_calls", whole and as chunks.
func TestChatTools(t *testing.T) {
	tpl, err := os.ReadFile("../tokenizer/testdata/chat/qwen3.chat_template.jinja")
	if err != nil {
		t.Fatal(err)
	}
	withQwen3 := func(c *Config) { c.ChatTemplate, c.Context.Size = string(tpl), 1024 }
	ts := newTestServer(t, withQwen3)
	const tools = `[{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]`
	prompt := func(extra string) int {
		t.Helper()
		status, body := call(t, ts, http.MethodPost, "/v1/chat/completions", `{"messages": [{"role": "user", "content": "Weather in Paris?"}], "max_tokens": 1`+extra+`}`)
		if status != http.StatusOK {
			t.Fatalf("%s: %d %s", extra, status, body)
		}
		var r cachedCompletion
		if err := json.Unmarshal(body, &r); err != nil {
			t.Fatal(err)
		}
		return r.Usage.PromptTokens
	}
	plain, with, none := prompt(""), prompt(`, "tools": `+tools), prompt(`, "tools": `+tools+`, "tool_choice": "none"`)
	if with <= plain || none != plain {
		t.Errorf("prompt tokens: %d without tools, %d with, %d with tool_choice none", plain, with, none)
	}
	for body, want := range map[string]string{
		`"tools": [{"type": "code_interpreter"}]`: "tools[0]",
		`"tools": {"a": 1}`:                       "must be an array",
	} {
		status, got := call(t, ts, http.MethodPost, "/v1/chat/completions", `{"messages": [{"role": "user", "content": "hi"}], `+body+`}`)
		if status != http.StatusBadRequest || !strings.Contains(string(got), want) {
			t.Errorf("%s: %d %s", body, status, got)
		}
	}

	// The format, fed what a Qwen3 model writes.
	cfg := testConfig()
	withQwen3(&cfg)
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	text := "<think>\nThe user wants the weather.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
	res := result{text: text, finishReason: "stop"}
	f := &chatFormat{s: s, j: &job{tools: true}, first: true, parser: s.outputParser(&job{tools: true})}
	whole := f.whole(res).(chatResponse)
	m, fr := whole.Choices[0].Message, *whole.Choices[0].FinishReason
	if m.ReasoningContent != "The user wants the weather." || m.Content != "" || len(m.ToolCalls) != 1 || m.ToolCalls[0].Function.Name != "get_weather" ||
		m.ToolCalls[0].Function.Arguments != `{"city": "Paris"}` || fr != "tool_calls" {
		t.Errorf("whole: %+v, finish %s", m, fr)
	}
	f = &chatFormat{s: s, j: &job{tools: true}, first: true, parser: s.outputParser(&job{tools: true})}
	var reasoning, content strings.Builder
	var calls []toolCallDelta
	collect := func(c any) {
		if c == nil {
			return
		}
		d := c.(chatResponse).Choices[0].Delta
		if d.ReasoningContent != nil {
			reasoning.WriteString(*d.ReasoningContent)
		}
		if d.Content != nil {
			content.WriteString(*d.Content)
		}
		calls = append(calls, d.ToolCalls...)
	}
	for i := 0; i < len(text); i += 5 {
		collect(f.delta(text[i:min(i+5, len(text))], nil))
	}
	last := f.finish(res).(chatResponse)
	collect(last)
	if reasoning.String() != "The user wants the weather." || content.String() != "" || len(calls) != 1 || *last.Choices[0].FinishReason != "tool_calls" {
		t.Errorf("chunks: reasoning %q, content %q, calls %+v, finish %s", reasoning.String(), content.String(), calls, *last.Choices[0].FinishReason)
	}
	// Without tools, the tool-call syntax stays content; with --reasoning-format none, the
	// reasoning too.
	if p, ok := s.outputParser(&job{}).(*chatParser); !ok || p.syn.callOpen != "" {
		t.Errorf("parser without tools: %+v", p)
	}
	c := testConfig()
	withQwen3(&c)
	c.ReasoningFormat = "none"
	if s2, _ := New(c); s2.outputParser(&job{}) != nil {
		t.Error("--reasoning-format none still parses reasoning")
	}
}
