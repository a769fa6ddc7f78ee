package server

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A Codex-style input becomes the chat request it means: instructions as the system
// message, an assistant's text, reasoning and function calls joined into one turn, call
// outputs as tool messages.
func TestResponsesToChat(t *testing.T) {
	body := `{"model": "m", "instructions": "Be brief.", "max_output_tokens": 50, "reasoning": {"effort": "low"}, "stream": true,
		"tools": [{"type": "function", "name": "shell", "description": "Run.", "parameters": {"type": "object"}}],
		"input": [
			{"role": "user", "content": [{"type": "input_text", "text": "List "}, {"type": "input_text", "text": "files."}]},
			{"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "Use ls."}]},
			{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Listing."}]},
			{"type": "function_call", "call_id": "call_1", "name": "shell", "arguments": "{\"cmd\":\"ls\"}"},
			{"type": "function_call_output", "call_id": "call_1", "output": "a.go"}]}`
	want := `{"max_tokens":50,"messages":[{"content":"Be brief.","role":"system"},{"content":"List files.","role":"user"},
		{"content":"Listing.","reasoning_content":"Use ls.","role":"assistant","tool_calls":[{"function":{"arguments":"{\"cmd\":\"ls\"}","name":"shell"},"id":"call_1","type":"function"}]},
		{"content":"a.go","role":"tool","tool_call_id":"call_1"}],"reasoning_effort":"low","stream":true,
		"tools":[{"function":{"description":"Run.","name":"shell","parameters":{"type":"object"}},"type":"function"}]}`
	checkChatMeaning(t, &responsesRequest{}, body, want)
	checkChatMeaning(t, &responsesRequest{}, `{"input": "x", "text": {"format": {"type": "json_schema", "name": "r", "strict": true, "schema": {"type": "object"}}}}`,
		`{"messages":[{"content":"x","role":"user"}],"response_format":{"json_schema":{"schema":{"type":"object"}},"type":"json_schema"},"stream":false}`)
	checkChatMeaning(t, &responsesRequest{}, `{"input": "x", "text": {"format": {"type": "json_object"}}}`,
		`{"messages":[{"content":"x","role":"user"}],"response_format":{"type":"json_object"},"stream":false}`)
	for bad, msg := range map[string]string{
		`{"input": "x", "text": {"format": {"type": "yaml"}}}`:                `not "yaml"`,
		`{"input": "x", "text": {"format": {"type": "json_schema"}}}`:         "needs its schema",
		`{"input": "x", "previous_response_id": "resp_1"}`:                    "does not store responses",
		`{"input": [{"type": "web_search_call"}]}`:                            "web_search_call",
		`{"input": [{"role": "user", "content": [{"type": "input_image"}]}]}`: "input_image",
		`{}`: "input is required",
		`{"input": "x", "tools": [{"type": "web_search"}]}`: "only function tools",
	} {
		var req responsesRequest
		if err := json.Unmarshal([]byte(bad), &req); err != nil {
			t.Fatal(err)
		}
		if _, aerr := req.toChat(); aerr == nil || !strings.Contains(aerr.Message, msg) {
			t.Errorf("%s: %v, want an error mentioning %q", bad, aerr, msg)
		}
	}
}

// The stream of a turn with reasoning, text and a call: the Responses events in order,
// numbered from 0, each item added, filled and done, and the completed response listing
// the three items.
func TestResponsesStream(t *testing.T) {
	s := qwen3Server(t)
	text := "<think>\nPlan.\n</think>\n\nRunning it.\n<tool_call>\n{\"name\": \"shell\", \"arguments\": {\"cmd\": \"ls\"}}\n</tool_call>"
	j := &job{tools: true}
	events := streamEvents(&responsesFormat{s: s, j: j, id: "resp_1", textParser: textParser{s.outputParser(j)}}, text, 3,
		result{finishReason: "stop", promptTokens: 7, completionTokens: 30})
	var got []string
	for i, e := range events {
		d := e.data.(map[string]any)
		if d["type"] != e.name || d["sequence_number"] != i {
			t.Fatalf("event %d: name %s, data %v", i, e.name, d)
		}
		if n := len(got); n > 0 && strings.HasSuffix(e.name, ".delta") && got[n-1] == e.name {
			continue // consecutive deltas as one
		}
		got = append(got, e.name)
	}
	want := []string{"response.created", "response.in_progress",
		"response.output_item.added", "response.reasoning_text.delta", "response.reasoning_text.done", "response.output_item.done",
		"response.output_item.added", "response.content_part.added", "response.output_text.delta", "response.output_text.done", "response.content_part.done", "response.output_item.done",
		"response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.done", "response.output_item.done",
		"response.completed"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	final, _ := json.Marshal(events[len(events)-1].data)
	for _, part := range []string{`"status":"completed"`, `"text":"Plan."`, `"text":"Running it."`, `"arguments":"{\"cmd\": \"ls\"}"`, `"name":"shell"`, `"total_tokens":37`} {
		if !strings.Contains(string(final), part) {
			t.Errorf("the completed response lacks %s: %s", part, final)
		}
	}
}
