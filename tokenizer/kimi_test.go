package tokenizer

import (
	"slices"
	"testing"

	"github.com/moerun/moerun/gguf/synth"
)

// TestKimiK2Tokens: the vocabulary `moerun synth` writes for Kimi-K2 (2,000 tokens of a
// small byte-level BPE with the "kimi-k2" pre-tokenizer) tokenizes as llama.cpp 3f545bec's
// llama-tokenize tokenized the same file (`moerun synth kimi-k2:q4_0 --vocab-size 2000`):
// Han runs, contractions, digits in threes, a combining mark, tabs and line breaks. The small
// vocabulary's merges never cross the places where this splitting differs from GPT-4o's
// (it passes with either), so the pieces themselves are checked against llama.cpp's
// splitter, case by case, in split_test.go.
func TestKimiK2Tokens(t *testing.T) {
	m, err := synth.Build("kimi-k2:q4_0", synth.Options{Layers: 1, Vocab: 2000})
	if err != nil {
		t.Fatal(err)
	}
	v, err := Load(m.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		text string
		want []int32 // llama-tokenize --ids
	}{
		{"你好, I'm Kimi 12345!", []int32{160, 121, 254, 161, 98, 121, 11, 220, 40, 6, 76, 220, 42, 517, 72, 220, 16, 17, 18, 19, 20, 0}},
		{"abc中文def 中文", []int32{1026, 160, 116, 255, 162, 244, 229, 378, 69, 220, 160, 116, 255, 162, 244, 229}},
		{"  \tfoo's 1234567", []int32{996, 197, 439, 78, 6, 82, 220, 16, 17, 18, 19, 20, 21, 22}},
		{"\u00e9te .NET x.NET", []int32{127, 102, 797, 220, 13, 45, 36, 51, 993, 13, 45, 36, 51}},
		{"e\u0301x \u00e9t\u00e9 ok", []int32{68, 136, 223, 87, 220, 127, 102, 83, 127, 102, 270, 74}},
		{"Hello  world's 123!", []int32{39, 68, 285, 78, 220, 266, 267, 586, 6, 82, 220, 16, 17, 18, 0}},
		{"next line\ttab", []int32{77, 421, 83, 987, 259, 68, 197, 83, 296}},
		{"Ünïcödé & 日本語 too; price: $19.99!!", []int32{127, 250, 77, 127, 107, 66, 127, 114, 67, 127, 102, 220, 5, 220, 162, 245, 98, 162, 250, 105, 164, 103, 252, 286, 78, 26, 284, 747, 351, 25, 220, 3, 16, 24, 13, 24, 24, 0, 0}},
	} {
		if got := v.Encode(c.text, false, false); !slices.Equal(got, c.want) {
			t.Errorf("%q: %v, want llama.cpp's %v", c.text, got, c.want)
		}
	}
}
