package server

import (
	"strings"
	"testing"
)

// TestHarmonyParser: gpt-oss's messages are split by channel, in pieces of every size; text
// that is not harmony, or a header that never ends, is content as written.
func TestHarmonyParser(t *testing.T) {
	for _, c := range []struct {
		name, text         string
		noReasoning        bool // --reasoning-format none
		reasoning, content string
		calls              []string
	}{
		{name: "reasoning then an answer", text: "<|channel|>analysis<|message|>Think.\n<|end|><|start|>assistant<|channel|>final<|message|>Hi there.",
			reasoning: "Think.\n", content: "Hi there."},
		{name: "a preamble and a call, the recipient after the channel",
			text:    "<|channel|>commentary<|message|>Let me look.<|end|><|start|>assistant<|channel|>commentary to=functions.search <|constrain|>json<|message|>{\"q\": \"x\"}",
			content: "Let me look.", calls: []string{`search({"q": "x"})`}},
		{name: "the recipient before the channel, arguments ended by <|call|>",
			text:  "<|start|>assistant to=functions.f<|channel|>commentary json<|message|> {} <|call|>",
			calls: []string{"f({})"}},
		{name: "without --reasoning-format, analysis is content", noReasoning: true,
			text: "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Done.", content: "Think.Done."},
		{name: "not harmony", text: "Plain words <|end|> and more.", content: "Plain words <|end|> and more."},
		{name: "a header that never ends", text: "<|channel|>analys", content: "<|channel|>analys"},
		{name: "an answer that stops inside a tag", text: "<|channel|>final<|message|>Almost <|en", content: "Almost <|en"},
	} {
		for n := 1; n <= len(c.text); n++ {
			p := newHarmonyParser(!c.noReasoning)
			var got parsed
			for i := 0; i < len(c.text); i += n {
				got.append(p.add(c.text[i:min(i+n, len(c.text))]))
			}
			got.append(p.flush())
			var calls []string
			for i, call := range got.calls {
				if call.Index != i || !strings.HasPrefix(call.ID, "call_") {
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
}
