package tokenizer

import (
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

// BenchmarkRender renders Qwen3's chat template for a long agentic conversation: 202
// messages (user turns, assistant turns with reasoning and tool calls, tool results,
// answers; about 2 KB each) and a tool, the shape of a coding agent's prompt.
func BenchmarkRender(b *testing.B) {
	src, err := os.ReadFile("testdata/chat/qwen3.chat_template.jinja")
	if err != nil {
		b.Fatal(err)
	}
	tpl, err := ParseTemplate(string(src))
	if err != nil {
		b.Fatal(err)
	}
	in := longConversation(b, 50)
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
