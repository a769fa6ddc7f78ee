package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// A model whose own chat template cannot render a one-message conversation is served with
// ChatML: a chat request evaluates exactly the prompt ChatML writes, which the same text
// sent to /v1/completions shows (the same prompt tokens, the same greedy answer).
func TestModelTemplateFallsBackToChatML(t *testing.T) {
	v := vocabOf(t, tinyModel) // the model's vocabulary, with a template of its own
	v.ChatTemplate = "{{ raise_exception('Conversation roles must alternate') }}"
	ts := newTestServer(t, func(c *Config) { c.Vocab = v; c.Slots = 1 })
	type answer struct {
		Choices []struct {
			Text    string `json:"text"`
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	ask := func(path, body string) answer {
		t.Helper()
		status, b := call(t, ts, http.MethodPost, path, body)
		if status != http.StatusOK {
			t.Fatalf("%s: %d %s", path, status, b)
		}
		var a answer
		if err := json.Unmarshal(b, &a); err != nil || len(a.Choices) != 1 {
			t.Fatalf("%s: %s (%v)", path, b, err)
		}
		return a
	}
	chat := ask("/v1/chat/completions", `{"messages": [{"role": "user", "content": "hi"}], "temperature": 0, "max_tokens": 6, "cache_prompt": false}`)
	text := ask("/v1/completions", `{"prompt": "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", "temperature": 0, "max_tokens": 6, "cache_prompt": false}`)
	if chat.Usage.PromptTokens != text.Usage.PromptTokens || chat.Choices[0].Message.Content != text.Choices[0].Text {
		t.Errorf("chat: %d prompt tokens, %q; ChatML's text as a completion: %d, %q", chat.Usage.PromptTokens, chat.Choices[0].Message.Content,
			text.Usage.PromptTokens, text.Choices[0].Text)
	}
}

// A template given explicitly (--chat-template, --chat-template-file) that cannot render a
// one-message conversation stops the server from starting, as in llama-server.
func TestExplicitTemplateMustRender(t *testing.T) {
	for _, tpl := range []string{"{% for m in messages %}", "{{ raise_exception('system messages only') }}"} {
		c := testConfig()
		c.ChatTemplate = tpl
		_, err := New(c)
		if err == nil || !strings.Contains(err.Error(), "chat template given") {
			t.Errorf("%q: error %v, want one about the chat template given", tpl, err)
		}
	}
}
