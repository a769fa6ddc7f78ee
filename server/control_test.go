package server

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// controlledStream streams a greedy chat completion on the thinking template and calls
// act with the completion's id once the first reasoning text has arrived; it returns the
// reasoning and the content the stream carried. Its prompt is evaluated whole (no cached
// prefix), as the other requests of the test: a prefix evaluated in another batch rounds
// differently, and the random tiny model's greedy text then parts from the other runs'.
func controlledStream(t *testing.T, url, fields string, act func(id string)) (reasoning, content string) {
	t.Helper()
	body := fmt.Sprintf(`{"messages": [{"role": "user", "content": "Think about the sea."}], "max_tokens": 160,
		"temperature": 0, "cache_prompt": false, "stream": true%s}`, fields)
	// With one slot and no queue, the request before may still hold its place for a moment
	// after its client read the end of its answer: a 503 then is retried.
	var resp *http.Response
	for try := 0; ; try++ {
		var err error
		if resp, err = http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body)); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusServiceUnavailable || try == 100 {
			break
		}
		resp.Body.Close()
		time.Sleep(10 * time.Millisecond)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	var r, c strings.Builder
	acted := false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			return r.String(), c.String()
		}
		var chunk struct {
			ID      string `json:"id"`
			Choices []struct {
				Delta struct {
					Content          string `json:"content"`
					ReasoningContent string `json:"reasoning_content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			t.Fatalf("chunk %s: %v", data, err)
		}
		for _, ch := range chunk.Choices {
			r.WriteString(ch.Delta.ReasoningContent)
			c.WriteString(ch.Delta.Content)
		}
		if !acted && r.Len() > 0 {
			acted = true
			act(chunk.ID)
		}
	}
	t.Fatalf("stream ended without [DONE] (%v)", sc.Err())
	return "", ""
}

func controlCall(t *testing.T, url, body string) (int, controlResult, string) {
	t.Helper()
	resp, err := http.Post(url+"/v1/chat/completions/control", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
		t.Fatal(err)
	}
	var res controlResult
	_ = json.Unmarshal(raw, &res)
	return resp.StatusCode, res, string(raw)
}

// POST /v1/chat/completions/control ends a running completion's reasoning, as
// llama-server's does, on the tiny model with one slot and no queue (the control request
// must not wait for a slot): the reasoning stops where the request found it, with the
// budget message and the closing tag, and the answer follows; a completion not sent with
// reasoning_control, one that has ended, a missing id and an unknown action are refused.
func TestReasoningControl(t *testing.T) {
	ts := newTestServer(t, func(c *Config) { c.ChatTemplate, c.Slots, c.QueueSize = thinkingTemplate, 1, 0 })
	free, _ := chatAnswer(t, ts, `{"messages": [{"role": "user", "content": "Think about the sea."}], "max_tokens": 160, "temperature": 0, "cache_prompt": false}`)
	full := free.Message.ReasoningContent
	if free.Message.Content != "" || len(full) < 40 {
		t.Fatalf("the model closes its reasoning by itself (reasoning %q, content %q): the test shows nothing", full, free.Message.Content)
	}

	var id string
	reasoning, content := controlledStream(t, ts.URL, `, "reasoning_control": true, "reasoning_budget_message": " Stop."`, func(cmpl string) {
		id = cmpl
		status, res, raw := controlCall(t, ts.URL, fmt.Sprintf(`{"id": %q, "action": "reasoning_end"}`, cmpl))
		if status != http.StatusOK || !res.Success {
			t.Errorf("control: %d %s", status, raw)
		}
	})
	cut, ok := strings.CutSuffix(reasoning, " Stop.")
	if !ok || cut == "" || len(cut) >= len(full) || !strings.HasPrefix(full, cut) {
		t.Errorf("controlled reasoning %q: want a shorter prefix of %q followed by the message", reasoning, full)
	}
	if content == "" {
		t.Error("no answer after the ended reasoning")
	}
	if status, res, raw := controlCall(t, ts.URL, fmt.Sprintf(`{"id": %q, "action": "reasoning_end"}`, id)); status != http.StatusOK || res.Success || !strings.Contains(res.Message, "no active completion") {
		t.Errorf("control of an ended completion: %d %s", status, raw)
	}

	reasoning, _ = controlledStream(t, ts.URL, "", func(cmpl string) {
		status, res, raw := controlCall(t, ts.URL, fmt.Sprintf(`{"id": %q, "action": "reasoning_end"}`, cmpl))
		if status != http.StatusOK || res.Success || !strings.Contains(res.Message, "reasoning control not enabled") {
			t.Errorf("control of a completion not armed: %d %s", status, raw)
		}
	})
	if reasoning != full {
		t.Errorf("a completion not armed was changed: reasoning %q, want %q", reasoning, full)
	}

	for body, want := range map[string]string{
		`{"action": "reasoning_end"}`:                    `"id"`,
		`{"id": "chatcmpl-x", "action": "stop"}`:         `stop`,
		`{"id": "chatcmpl-x"}`:                           `"action"`,
		`{"id": 7, "action": "reasoning_end"}`:           `"id"`,
		`["chatcmpl-x", "reasoning_end"]`:                `JSON object`,
		`{"id": "chatcmpl-x", "action": "reasoning_end"`: `not valid JSON`,
	} {
		status, _, raw := controlCall(t, ts.URL, body)
		if status != http.StatusBadRequest || !strings.Contains(raw, want) {
			t.Errorf("%s: %d %s, want a 400 naming %s", body, status, raw, want)
		}
	}
}
