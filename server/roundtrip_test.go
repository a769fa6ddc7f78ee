package server

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/moerun/moerun/tokenizer"
)

// roundTripTools is the tool the round trips call: parameters of each JSON type.
const roundTripTools = `[{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city.",
	"parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
	"hours": {"type": "array"}, "opts": {"type": "object"}, "code": {"type": "string"}}, "required": ["city"]}}}]`

// roundTripCalls are the calls the assistant turn makes: arguments of every JSON type,
// strings with quotes, newlines and markup, and a string that looks like a number.
var roundTripCalls = []struct{ name, args string }{
	{"get_weather", `{"city": "Paris", "days": 3, "hours": [9, 18], "opts": {"rain": true, "note": "a \"b\"\n<x> & y"}}`},
	{"get_weather", `{"city": "Rome", "code": "42"}`},
}

// TestToolCallRoundTrip renders an assistant turn with reasoning, content and tool calls
// through each family's real chat template (copied from llama.cpp 3f545bec), takes what
// the model would have generated (the rendering after the generation prompt, up to the end
// of the turn), and parses it back as the server parses generated text: the reasoning,
// the content and each call's name and arguments must be the original ones, whole and in
// pieces of every size from 1 to 9 bytes.
func TestToolCallRoundTrip(t *testing.T) {
	for _, f := range []struct {
		name, template string
		reasoning      bool   // the template renders the turn's reasoning
		content        bool   // it renders content beside the calls
		argsAsText     bool   // it concatenates arguments, so they are given as JSON text
		thinking       bool   // enable_thinking
		oneCall        bool   // it renders one call per turn
		end            string // what ends the turn (an end-of-generation token)
	}{
		{name: "Qwen3 (Hermes)", template: "qwen3", reasoning: true, content: true, thinking: true, end: "<|im_end|>\n"},
		{name: "Qwen3.5 (XML)", template: "qwen35", reasoning: true, content: true, thinking: true, end: "<|im_end|>\n"},
		{name: "Qwen3-Coder (XML)", template: "qwen3_coder", content: true, end: "<|im_end|>\n"},
		{name: "GLM-4.6", template: "glm46", reasoning: true, content: true, thinking: true},
		{name: "GLM-4.7-Flash", template: "glm47_flash", reasoning: true, content: true, thinking: true},
		{name: "DeepSeek-V3", template: "deepseek_v3", argsAsText: true, end: "<｜end▁of▁sentence｜>"},
		{name: "DeepSeek-V3.1", template: "deepseek_v31", content: true, end: "<｜end▁of▁sentence｜>"},
		{name: "gpt-oss (harmony)", template: "gpt_oss", reasoning: true, oneCall: true, end: "<|call|>"},
	} {
		t.Run(f.name, func(t *testing.T) {
			src, err := os.ReadFile("../tokenizer/testdata/chat/" + f.template + ".chat_template.jinja")
			if err != nil {
				t.Fatal(err)
			}
			s := &Server{vocab: &tokenizer.Vocab{BOS: -1, EOS: -1}, reasoning: true}
			if err := s.useTemplate(string(src)); err != nil {
				t.Fatal(err)
			}
			tools := decodeJSON(t, roundTripTools).([]any)
			var want parsed
			turn := `{"role": "assistant"`
			if f.reasoning {
				want.reasoning = "The user wants the weather.\nTwo cities."
				key := "reasoning_content"
				if s.harmony {
					key = "thinking"
				}
				turn += `, "` + key + `": ` + quote(want.reasoning)
			}
			if f.content {
				want.content = "Checking both."
				turn += `, "content": ` + quote(want.content)
			} else if !s.harmony {
				turn += `, "content": null`
			}
			turn += `, "tool_calls": [`
			calls := roundTripCalls
			if f.oneCall {
				calls = calls[:1]
			}
			for i, c := range calls {
				want.calls = append(want.calls, toolCall{Index: i, Type: "function"})
				want.calls[i].Function.Name, want.calls[i].Function.Arguments = c.name, c.args
				args := c.args
				if f.argsAsText {
					args = quote(args)
				}
				turn += `{"type": "function", "id": "call_` + string(rune('a'+i)) + `", "function": {"name": "` + c.name + `", "arguments": ` + args + `}}`
				if i+1 < len(calls) {
					turn += ", "
				}
			}
			turn += `]}`
			ask := decodeJSON(t, `{"role": "user", "content": "Weather in Paris and Rome?"}`)
			render := func(messages []any, generationPrompt bool) string {
				out, err := s.template.Render(tokenizer.ChatInput{Messages: messages, Tools: tools, AddGenerationPrompt: generationPrompt,
					Vars: map[string]any{"enable_thinking": f.thinking}})
				if err != nil {
					t.Fatal(err)
				}
				return out
			}
			prompt := render([]any{ask}, true)
			full := render([]any{ask, decodeJSON(t, turn)}, false)
			generated, ok := strings.CutPrefix(full, prompt)
			if !ok {
				t.Fatalf("the turn's rendering does not continue the generation prompt:\nprompt %q\nfull   %q", prompt, full)
			}
			generated = strings.TrimSuffix(strings.TrimRight(generated, "\n"), strings.TrimRight(f.end, "\n"))
			j := &job{tools: true, argTypes: toolArgTypes(tools), thinking: strings.HasSuffix(strings.TrimRight(prompt, "\n"), "<think>")}
			for n := 1; n <= 10; n++ {
				if n == 10 {
					n = len(generated) // whole
				}
				p := s.outputParser(j)
				var got parsed
				for i := 0; i < len(generated); i += n {
					got.append(p.add(generated[i:min(i+n, len(generated))]))
				}
				got.append(p.flush())
				if msg := compareParsed(got, want); msg != "" {
					t.Fatalf("pieces of %d bytes: %s\ngenerated: %q", n, msg, generated)
				}
			}
		})
	}
}

// compareParsed says how got differs from want ("" when it does not): the same text, and
// the same calls with equal arguments (as JSON values) and fresh ids.
func compareParsed(got, want parsed) string {
	if got.reasoning != want.reasoning || got.content != want.content || len(got.calls) != len(want.calls) {
		return fmt.Sprintf("reasoning %q, content %q, calls %s", got.reasoning, got.content, callsText(got.calls))
	}
	for i, c := range got.calls {
		w := want.calls[i]
		var ga, wa any
		if json.Unmarshal([]byte(c.Function.Arguments), &ga) != nil || json.Unmarshal([]byte(w.Function.Arguments), &wa) != nil ||
			!reflect.DeepEqual(ga, wa) || c.Function.Name != w.Function.Name || c.Index != i || c.Type != "function" || !strings.HasPrefix(c.ID, "call_") {
			return fmt.Sprintf("call %s, want %s", callsText(got.calls[i:i+1]), callsText(want.calls[i:i+1]))
		}
	}
	return ""
}

func callsText(calls []toolCall) string {
	b, _ := json.Marshal(calls)
	return string(b)
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func decodeJSON(t *testing.T, s string) any {
	t.Helper()
	v, err := tokenizer.DecodeJSON([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestObjectArguments: the templates that read a call's arguments as an object are found
// by rendering (GLM's iterate over them; gpt-oss's, DeepSeek-V3.1's and Qwen3-Coder's go
// through tojson or items), and for them the JSON text an OpenAI client sends is parsed
// first: a request with text arguments gets the prompt of one with object arguments.
func TestObjectArguments(t *testing.T) {
	want := map[string]bool{"qwen3": false, "qwen35": true, "qwen3_coder": true, "glm46": true, "glm47_flash": true,
		"gpt_oss": true, "deepseek_v3": false, "deepseek_v31": true}
	for name, needs := range want {
		src, err := os.ReadFile("../tokenizer/testdata/chat/" + name + ".chat_template.jinja")
		if err != nil {
			t.Fatal(err)
		}
		s := &Server{vocab: &tokenizer.Vocab{BOS: -1, EOS: -1}}
		if err := s.useTemplate(string(src)); err != nil {
			t.Fatal(err)
		}
		if s.objectArgs != needs {
			t.Errorf("%s: needs object arguments %v, want %v", name, s.objectArgs, needs)
		}
	}
	src, err := os.ReadFile("../tokenizer/testdata/chat/glm46.chat_template.jinja")
	if err != nil {
		t.Fatal(err)
	}
	ts := newTestServer(t, func(c *Config) { c.ChatTemplate = string(src) })
	promptTokens := func(args string) int {
		t.Helper()
		body := `{"max_tokens": 1, "messages": [{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": null, "tool_calls": [
			{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": ` + args + `}}]},
			{"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]}`
		status, b := call(t, ts, "POST", "/v1/chat/completions", body)
		var r struct {
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
			} `json:"usage"`
		}
		if status != 200 || json.Unmarshal(b, &r) != nil {
			t.Fatalf("arguments %s: %d %s", args, status, b)
		}
		return r.Usage.PromptTokens
	}
	if text, obj := promptTokens(`"{\"city\": \"Paris\"}"`), promptTokens(`{"city": "Paris"}`); text != obj {
		t.Errorf("GLM-4.6: arguments as text give %d prompt tokens, as an object %d", text, obj)
	}
}

// TestPreservedTags: DeepSeek-V3's call markers are control tokens of its vocabulary, which
// the detokenizer leaves out; a request with tools has the parser's tags written out.
func TestPreservedTags(t *testing.T) {
	v := vocabOf(t, "../testdata/vocab/ggml-vocab-deepseek-v3.gguf")
	src, err := os.ReadFile("../tokenizer/testdata/chat/deepseek_v3.chat_template.jinja")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{vocab: v, reasoning: true}
	if err := s.useTemplate(string(src)); err != nil {
		t.Fatal(err)
	}
	j := &job{tools: true}
	s.outputParser(j)
	var got []string
	for _, id := range j.preserved {
		got = append(got, v.Text(id))
	}
	want := []string{deepseekCallBegin, deepseekCallEnd, deepseekCallsBegin, deepseekCallsEnd, deepseekSep}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("preserved %q, want %q", got, want)
	}
	if s.outputParser(&job{}) != nil {
		t.Error("without tools or reasoning tags, DeepSeek-V3's output is parsed")
	}
}
