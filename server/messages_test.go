package server

import (
	"slices"
	"testing"

	"github.com/moerun/moerun/tokenizer"
)

// TestHarmonyMessage: for gpt-oss's template an assistant turn's reasoning_content becomes
// the "thinking" the template reads, and a turn with reasoning and tool calls loses its
// content, as llama.cpp's common_chat_params_init_gpt_oss prepares messages; other
// messages are left alone.
func TestHarmonyMessage(t *testing.T) {
	for _, c := range []struct {
		name, in string
		keys     []string
		thinking any
	}{
		{"reasoning", `{"role":"assistant","reasoning_content":"r","content":"c"}`, []string{"role", "reasoning_content", "content", "thinking"}, "r"},
		{"reasoning and tool calls", `{"role":"assistant","content":"c","reasoning_content":"r","tool_calls":[{"id":"1"}]}`,
			[]string{"role", "reasoning_content", "tool_calls", "thinking"}, "r"},
		{"tool calls without reasoning", `{"role":"assistant","content":"c","tool_calls":[{"id":"1"}]}`, []string{"role", "content", "tool_calls"}, nil},
		{"a null content beside tool calls", `{"role":"assistant","content":null,"tool_calls":[{"id":"1"}]}`, []string{"role", "tool_calls"}, nil},
		{"existing thinking replaced", `{"role":"assistant","thinking":"old","reasoning_content":"r"}`, []string{"role", "thinking", "reasoning_content"}, "r"},
	} {
		m, err := decodeMessage([]byte(c.in))
		if err != nil {
			t.Fatal(err)
		}
		harmonyMessage(m)
		if !slices.Equal(m.Keys, c.keys) || m.Values["thinking"] != c.thinking || len(m.Values) != len(m.Keys) {
			t.Errorf("%s: keys %v, thinking %v; want %v, %v", c.name, m.Keys, m.Values["thinking"], c.keys, c.thinking)
		}
	}
}

// TestHarmonyDetected: the server recognises gpt-oss's template by its channel marker, and
// only that one.
func TestHarmonyDetected(t *testing.T) {
	for _, c := range []struct {
		template string
		harmony  bool
	}{
		{"{{ '<|start|>assistant<|channel|>final<|message|>' }}", true},
		{"{% for m in messages %}<|im_start|>{{ m.role }}{% endfor %}", false},
	} {
		s := &Server{vocab: &tokenizer.Vocab{BOS: -1, EOS: -1}}
		if err := s.useTemplate(c.template); err != nil {
			t.Fatal(err)
		}
		if s.harmony != c.harmony || s.template.Source != c.template {
			t.Errorf("%q: harmony %v, template %v", c.template, s.harmony, s.template)
		}
	}
}

// TestDecodeMessageParts: content given as text parts reaches the template as one string,
// the parts joined by newlines as llama.cpp joins them (none before the first non-empty
// text), and other part types are refused.
func TestDecodeMessageParts(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}`, "a\nb"},
		{`{"role":"user","content":[{"type":"text","text":""},{"type":"text","text":"b"}]}`, "b"},
		{`{"role":"user","content":[]}`, ""},
	} {
		m, err := decodeMessage([]byte(c.in))
		if err != nil || m.Values["content"] != c.want {
			t.Errorf("%s: content %q, %v; want %q", c.in, m.Values["content"], err, c.want)
		}
	}
	if _, err := decodeMessage([]byte(`{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}`)); err == nil {
		t.Error("an image part was accepted")
	}
}
