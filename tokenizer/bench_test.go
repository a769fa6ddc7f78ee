package tokenizer

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// benchText is ~100 KB of mixed English prose, Go code and CJK text.
var benchText = strings.Repeat(`The quick brown fox jumps over the lazy dog; it's 2024 and prices rose 3.5% to $19.99!
func (v *Vocab) Encode(text string, addSpecial bool) []int32 {
	for i := 0; i < len(text); i++ { out = append(out, int32(text[i])) }
}
日本語のテキストと中文文本混合在一起，包括カタカナ・ひらがな。한국어 문장도 있습니다.
`, 300)

// BenchmarkEncode measures tokenizer throughput (MB/s of input) with the hand-written
// splitters and, for comparison, with llama.cpp's regexes run by regexp2.
func BenchmarkEncode(b *testing.B) {
	for _, tc := range []struct{ name, path string }{
		{"qwen2", vocabDir + "/ggml-vocab-qwen3.gguf"},
		{"deepseek-v3", vocabDir + "/ggml-vocab-deepseek-v3.gguf"},
	} {
		v := loadVocab(b, tc.path)
		for _, useRegex := range []bool{false, true} {
			name := tc.name + "/splitter"
			if useRegex {
				name = tc.name + "/regex"
			}
			b.Run(name, func(b *testing.B) {
				pre, _, err := newPreTokenizer(v.Pre, useRegex)
				if err != nil {
					b.Fatal(err)
				}
				saved := v.pre
				v.pre = pre
				defer func() { v.pre = saved }()
				b.SetBytes(int64(len(benchText)))
				for b.Loop() {
					v.Encode(benchText, false, true)
				}
			})
		}
	}
}

// BenchmarkSplit isolates the pre-tokenizer.
func BenchmarkSplit(b *testing.B) {
	for _, pre := range fastPres {
		for _, useRegex := range []bool{false, true} {
			p, _, err := newPreTokenizer(pre, useRegex)
			if err != nil {
				b.Fatal(err)
			}
			name := pre + "/splitter"
			if useRegex {
				name = pre + "/regex"
			}
			b.Run(name, func(b *testing.B) {
				b.SetBytes(int64(len(benchText)))
				var out []string
				for b.Loop() {
					out = p.split(benchText, out[:0])
				}
			})
		}
	}
}

// BenchmarkRender renders Qwen3's chat template for a long agentic conversation: 200
// messages (user turns, assistant turns with reasoning and tool calls, tool results) and
// two tools, the shape of a coding agent's prompt.
func BenchmarkRender(b *testing.B) {
	src, err := os.ReadFile("testdata/chat/qwen3.chat_template.jinja")
	if err != nil {
		b.Fatal(err)
	}
	tpl, err := ParseTemplate(string(src))
	if err != nil {
		b.Fatal(err)
	}
	in := benchConversation(b)
	out, err := tpl.Render(in)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(out)))
	for b.Loop() {
		if _, err := tpl.Render(in); err != nil {
			b.Fatal(err)
		}
	}
}

func benchConversation(b *testing.B) ChatInput {
	var msgs strings.Builder
	msgs.WriteString(`[{"role": "system", "content": "You are a coding agent."}`)
	for i := range 50 {
		fmt.Fprintf(&msgs, `, {"role": "user", "content": "Step %d: fix the failing test in pkg/%d and explain why it failed."}`, i, i)
		fmt.Fprintf(&msgs, `, {"role": "assistant", "content": "", "reasoning_content": "I should read the file first (%d).", "tool_calls": [{"type": "function", "function": {"name": "read_file", "arguments": {"path": "pkg/%d/x.go", "lines": [1, 200]}}}]}`, i, i)
		fmt.Fprintf(&msgs, `, {"role": "tool", "content": "%s"}`, strings.Repeat("func f() { return 1 }\\n", 20))
		fmt.Fprintf(&msgs, `, {"role": "assistant", "content": "<think>\nThe test expects 2.\n</think>\n\nFixed: f returned 1 where the test wants 2 (step %d)."}`, i)
	}
	msgs.WriteString(`]`)
	m, err := DecodeJSON([]byte(msgs.String()))
	if err != nil {
		b.Fatal(err)
	}
	tools, err := DecodeJSON([]byte(`[{"type": "function", "function": {"name": "read_file", "description": "Read a file", "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "lines": {"type": "array", "items": {"type": "integer"}}}, "required": ["path"]}}},
		{"type": "function", "function": {"name": "write_file", "description": "Write a file", "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}, "required": ["path", "content"]}}}]`))
	if err != nil {
		b.Fatal(err)
	}
	return ChatInput{Messages: m.([]any), Tools: tools.([]any), AddGenerationPrompt: true, Vars: map[string]any{"enable_thinking": true}}
}
