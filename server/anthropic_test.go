package server

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A Claude Code style conversation becomes the chat request it means: the system blocks
// joined, thinking as reasoning_content, tool_use as tool_calls with the input as JSON
// text, and a user turn's tool results as tool messages before its text.
func TestAnthropicToChat(t *testing.T) {
	body := `{"model": "m", "max_tokens": 300, "system": [{"type": "text", "text": "You are a coder. "}, {"type": "text", "text": "Be brief."}],
		"messages": [
			{"role": "user", "content": "List the files."},
			{"role": "assistant", "content": [{"type": "thinking", "thinking": "Use ls.", "signature": "x"}, {"type": "text", "text": "Listing."},
				{"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "ls", "timeout": 5}}]},
			{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "a.go\nb.go"}]},
				{"type": "text", "text": "Now count them."}]}],
		"tools": [{"name": "bash", "description": "Run a command.", "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}}],
		"tool_choice": {"type": "auto"}, "stop_sequences": ["END"], "temperature": 0.2, "thinking": {"type": "disabled"}, "stream": true}`
	want := `{"max_tokens":300,"messages":[{"content":"You are a coder. Be brief.","role":"system"},{"content":"List the files.","role":"user"},
		{"content":[{"text":"Listing.","type":"text"}],"reasoning_content":"Use ls.","role":"assistant","tool_calls":[{"function":{"arguments":"{\"command\":\"ls\",\"timeout\":5}","name":"bash"},"id":"toolu_1","type":"function"}]},
		{"content":"a.go\nb.go","role":"tool","tool_call_id":"toolu_1"},{"content":[{"text":"Now count them.","type":"text"}],"role":"user"}],
		"reasoning_effort":"none","stop":["END"],"stream":true,"temperature":0.2,"tool_choice":"auto",
		"tools":[{"function":{"description":"Run a command.","name":"bash","parameters":{"type": "object", "properties": {"command": {"type": "string"}}}},"type":"function"}]}`
	checkChatMeaning(t, &anthropicRequest{}, body, want)
}

// The Messages route: a response in Anthropic's shape; a stream of named events from
// message_start to message_stop without [DONE]; the prompt count /apply-template gives;
// errors in Anthropic's shape, from the headers and from the body.
func TestAnthropicMessages(t *testing.T) {
	tpl, err := os.ReadFile("../tokenizer/testdata/chat/qwen3.chat_template.jinja")
	if err != nil {
		t.Fatal(err)
	}
	ts := newTestServer(t, func(c *Config) { c.ChatTemplate, c.Context.Size = string(tpl), 1024; c.APIKeys = []string{"k"} })
	const ask = `{"model": "tiny", "max_tokens": 5, "messages": [{"role": "user", "content": "Hello"}], "temperature": 0`
	status, b := call(t, ts, "POST", "/v1/messages", ask+`}`, "X-Api-Key", "k")
	var msg struct {
		ID, Type, Role, Model, StopReason string
		Content                           []struct{ Type, Text string }
		Usage                             struct {
			InputTokens  int `json:"input_tokens"`
			OutputTokens int `json:"output_tokens"`
		}
	}
	if err := json.Unmarshal(b, &msg); err != nil || status != 200 {
		t.Fatalf("%d %s (%v)", status, b, err)
	}
	if !strings.HasPrefix(msg.ID, "msg_") || msg.Type != "message" || msg.Role != "assistant" || msg.Model != "tiny" || msg.Usage.OutputTokens != 5 ||
		!strings.Contains(string(b), `"stop_reason":"max_tokens"`) || len(msg.Content) == 0 {
		t.Errorf("message: %s", b)
	}
	var text strings.Builder
	for _, c := range msg.Content {
		text.WriteString(c.Text)
	}

	_, b = call(t, ts, "POST", "/v1/messages/count_tokens", ask+`}`, "X-Api-Key", "k")
	_, applied := call(t, ts, "POST", "/apply-template", `{"messages": [{"role": "user", "content": "Hello"}]}`, "X-Api-Key", "k")
	var count struct {
		InputTokens int `json:"input_tokens"`
	}
	var prompt struct{ Prompt string }
	if json.Unmarshal(b, &count) != nil || json.Unmarshal(applied, &prompt) != nil || count.InputTokens != msg.Usage.InputTokens || count.InputTokens == 0 ||
		!strings.HasSuffix(prompt.Prompt, "<|im_start|>assistant\n") {
		t.Errorf("count_tokens %s, usage %d, template %q", b, msg.Usage.InputTokens, prompt.Prompt)
	}

	req, _ := http.NewRequest("POST", ts.URL+"/v1/messages", strings.NewReader(ask+`, "stream": true}`))
	req.Header.Set("X-Api-Key", "k")
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var names []string
	var streamed strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if name, ok := strings.CutPrefix(line, "event: "); ok {
			names = append(names, name)
		} else if data, ok := strings.CutPrefix(line, "data: "); ok {
			var e struct {
				Type  string
				Delta struct{ Type, Text string }
			}
			if err := json.Unmarshal([]byte(data), &e); err != nil || e.Type != names[len(names)-1] {
				t.Fatalf("event %v: data %s", names, data)
			}
			streamed.WriteString(e.Delta.Text)
		}
	}
	joined := strings.Join(names, " ")
	if !strings.HasPrefix(joined, "message_start content_block_start content_block_delta") ||
		!strings.HasSuffix(joined, "content_block_stop message_delta message_stop") || streamed.String() != text.String() {
		t.Errorf("events %s; streamed %q, whole %q", joined, streamed.String(), text.String())
	}

	for _, c := range []struct{ body, key, want string }{
		{ask + `}`, "", `"authentication_error"`},
		{`{"max_tokens": 5, "messages": [{"role": "system", "content": "x"}]}`, "k", `want user or assistant`},
		{`{"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}`, "k", `blocks are not supported`},
	} {
		status, b := call(t, ts, "POST", "/v1/messages", c.body, "X-Api-Key", c.key)
		var e struct {
			Type  string
			Error struct{ Type, Message string }
		}
		if status < 400 || json.Unmarshal(b, &e) != nil || e.Type != "error" || e.Error.Type == "" || !strings.Contains(string(b), c.want) {
			t.Errorf("%s: %d %s", c.body, status, b)
		}
	}
}

// The stream of a turn with reasoning, text and a call: a thinking block, a text block and
// a whole tool_use block, in order, with stop_reason tool_use.
func TestAnthropicStreamBlocks(t *testing.T) {
	s := qwen3Server(t)
	text := "<think>\nPlan.\n</think>\n\nRunning it.\n<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"command\": \"ls\"}}\n</tool_call>"
	j := &job{tools: true}
	events := streamEvents(&anthropicFormat{s: s, j: j, id: "msg_1", textParser: textParser{s.outputParser(j)}}, text, 4, result{finishReason: "stop"})
	var got []string
	blocks := map[int]string{}
	for _, e := range events {
		d := e.data.(map[string]any)
		step := e.name
		if idx, ok := d["index"].(int); ok {
			switch e.name {
			case "content_block_start":
				blocks[idx] = d["content_block"].(map[string]any)["type"].(string)
				step += ":" + blocks[idx]
			case "content_block_delta":
				delta := d["delta"].(map[string]any)
				for _, k := range []string{"thinking", "text", "partial_json"} {
					if v, ok := delta[k]; ok {
						step += ":" + v.(string)
					}
				}
			}
		}
		if e.name == "message_delta" {
			step += ":" + d["delta"].(map[string]any)["stop_reason"].(string)
		}
		got = append(got, step)
	}
	// Consecutive deltas of one block joined, to compare with the whole text.
	var joined []string
	for _, g := range got {
		if n := len(joined); n > 0 && strings.HasPrefix(g, "content_block_delta:") && strings.HasPrefix(joined[n-1], "content_block_delta:") &&
			!strings.HasPrefix(g, "content_block_delta:{") {
			joined[n-1] += strings.TrimPrefix(g, "content_block_delta:")
			continue
		}
		joined = append(joined, g)
	}
	want := []string{"message_start", "content_block_start:thinking", "content_block_delta:Plan.", "content_block_stop",
		"content_block_start:text", "content_block_delta:Running it.", "content_block_stop",
		"content_block_start:tool_use", `content_block_delta:{"command": "ls"}`, "content_block_stop", "message_delta:tool_use", "message_stop"}
	if diff := cmp.Diff(want, joined); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// checkChatMeaning decodes body as req, converts it to the chat request it means and
// compares that with want, as JSON values.
func checkChatMeaning(t *testing.T, req chatMeaning, body, want string) {
	t.Helper()
	if err := json.Unmarshal([]byte(body), req); err != nil {
		t.Fatal(err)
	}
	chat, aerr := req.toChat()
	if aerr != nil {
		t.Fatal(aerr)
	}
	got, _ := json.Marshal(chat)
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(w, g); diff != "" {
		t.Errorf("chat request (-want +got):\n%s", diff)
	}
}
