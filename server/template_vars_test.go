package server

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/moerun/moerun/tokenizer"
)

// TestTemplateVars: /apply-template renders a chat request as the chat route does, with
// llama-server's template variables: enable_thinking true unless chat_template_kwargs
// (the request's over --chat-template-kwargs) or reasoning_effort "none" turn it off, which
// Qwen3's template answers with an empty reasoning block.
func TestTemplateVars(t *testing.T) {
	tpl, err := os.ReadFile("../tokenizer/testdata/chat/qwen3.chat_template.jinja")
	if err != nil {
		t.Fatal(err)
	}
	serverOff, err := tokenizer.DecodeJSON([]byte(`{"enable_thinking": false, "unused": [1]}`))
	if err != nil {
		t.Fatal(err)
	}
	plain := newTestServer(t, func(c *Config) { c.ChatTemplate = string(tpl) })
	off := newTestServer(t, func(c *Config) { c.ChatTemplate, c.ChatTemplateKwargs = string(tpl), serverOff.(*tokenizer.Object) })
	const thinking, notThinking = "<|im_start|>assistant\n", "<|im_start|>assistant\n<think>\n\n</think>\n\n"
	for _, c := range []struct {
		name   string
		off    bool // the server has --chat-template-kwargs '{"enable_thinking": false}'
		fields string
		want   string // the prompt's end, or the error's text
		status int
	}{
		{"default", false, ``, thinking, 200},
		{"kwargs off", false, `, "chat_template_kwargs": {"enable_thinking": false}`, notThinking, 200},
		{"reasoning_effort none", false, `, "reasoning_effort": "none"`, notThinking, 200},
		{"reasoning_effort high", false, `, "reasoning_effort": "high"`, thinking, 200},
		{"server off", true, ``, notThinking, 200},
		{"server off, request on", true, `, "chat_template_kwargs": {"enable_thinking": true}`, thinking, 200},
		{"a string", false, `, "chat_template_kwargs": {"enable_thinking": "no"}`, "enable_thinking must be true or false, not a string", 400},
		{"not an object", false, `, "chat_template_kwargs": [1]`, "chat_template_kwargs must be an object", 400},
	} {
		ts := plain
		if c.off {
			ts = off
		}
		status, b := call(t, ts, "POST", "/apply-template", `{"messages": [{"role": "user", "content": "Hi"}]`+c.fields+`}`)
		var r struct {
			Prompt string `json:"prompt"`
		}
		if status != c.status || status == 200 && (json.Unmarshal(b, &r) != nil || !strings.HasSuffix(r.Prompt, c.want) ||
			c.want == thinking && strings.HasSuffix(r.Prompt, notThinking)) || status != 200 && !strings.Contains(string(b), c.want) {
			t.Errorf("%s: %d %s; want %d and %q", c.name, status, b, c.status, c.want)
		}
	}
}

// /props tells clients the server's defaults and the chat template in use, as llama-server
// does: here the ChatML a template-less choice falls back to is what it reports.
func TestProps(t *testing.T) {
	ts := newTestServer(t, func(c *Config) { c.ChatTemplate = "chatml"; c.MaxTokens = 77 })
	status, b := call(t, ts, "GET", "/props", "")
	var p struct {
		Settings struct {
			NCtx   int `json:"n_ctx"`
			Params struct {
				NPredict    int     `json:"n_predict"`
				Temperature float64 `json:"temperature"`
				Seed        int64   `json:"seed"`
			} `json:"params"`
		} `json:"default_generation_settings"`
		TotalSlots   int    `json:"total_slots"`
		Alias        string `json:"model_alias"`
		ChatTemplate string `json:"chat_template"`
	}
	if status != 200 || json.Unmarshal(b, &p) != nil || p.Settings.NCtx != 256 || p.Settings.Params.NPredict != 77 ||
		p.Settings.Params.Temperature != 0.8 || p.Settings.Params.Seed != -1 || p.TotalSlots != 2 || p.Alias != "tiny" ||
		!strings.Contains(p.ChatTemplate, "<|im_start|>") {
		t.Errorf("/props: %d %s", status, b)
	}
}
