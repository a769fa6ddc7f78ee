package tokenizer

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// fastPres are the pre-tokenizers with a hand-written splitter.
var fastPres = []string{"qwen2", "llama-bpe", "qwen35", "deepseek-v3"}

// splitBoth runs a pre-tokenizer's hand-written splitter and its regexes on text.
func splitBoth(t testing.TB, pre, text string) (fast, regex []string) {
	t.Helper()
	f, _, err := newPreTokenizer(pre, false)
	if err != nil {
		t.Fatal(err)
	}
	r, _, err := newPreTokenizer(pre, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.stages) != 1 || len(r.stages) == 0 {
		t.Fatalf("%s: %d fast stages, %d regex stages", pre, len(f.stages), len(r.stages))
	}
	return f.split(text, nil), r.split(text, nil)
}

// splitCorpus is llama.cpp's tokenizer test inputs plus edge cases of the alternatives.
func splitCorpus(t *testing.T) []string {
	var corpus []string
	for _, name := range []string{"ggml-vocab-qwen2.gguf", "ggml-vocab-qwen35.gguf"} {
		in, _ := vocabCases(t, name)
		corpus = append(corpus, in...)
	}
	return append(corpus,
		"", " ", "  ", "a", " a", "  a", "\ta", "\t\ta", "\n\na", " \n a", "x  \n\n  y", "it's IT'S 'LL 're 'x",
		"1234567", " 12 345", "a1b22c333d4444", "½①٣", "!!a", "'s", "ÜBER über Ünïcödé", "e\u0301\u0301x",
		"日本語のテキスト・カタカナー", "ア゛イ", "a\u00a0\u00a0b", "\u2009\u2009!", "foo.bar_baz(x)", "  \r\n\r\n  x",
		"$$$a", "@#hello", "-->x", "\u200b\u200ba", "\x00\x01a", "\ufffd\ufffd", "👍👍 ok",
	)
}

// TestSplittersMatchRegex: each hand-written splitter splits exactly like the regexes it
// replaces (llama.cpp's patterns run by regexp2).
func TestSplittersMatchRegex(t *testing.T) {
	for _, pre := range fastPres {
		for _, text := range splitCorpus(t) {
			fast, regex := splitBoth(t, pre, text)
			if !slices.Equal(fast, regex) {
				t.Errorf("%s %q:\n fast  %q\n regex %q", pre, text, fast, regex)
			}
		}
	}
}

// TestSplitExamples pins a few splits that are easy to check by hand.
func TestSplitExamples(t *testing.T) {
	for _, tc := range []struct {
		pre, text string
		want      []string
	}{
		{"qwen2", "Hello  world's 123!\n\n", []string{"Hello", " ", " world", "'s", " ", "1", "2", "3", "!\n\n"}},
		{"llama-bpe", "x 1234567", []string{"x", " ", "123", "456", "7"}},
		{"qwen35", "e\u0301t\u00e9", []string{"e\u0301t\u00e9"}},
		{"qwen2", "e\u0301t", []string{"e", "\u0301t"}},
		{"deepseek-v3", "价格1234元 .NET x.NET", []string{"价格", "123", "4", "元", " .", "NET", " x", ".NET"}},
		{"gpt-2", "I'm  here", []string{"I", "'m", " ", " here"}},
		// Kimi-K2 as llama.cpp's hand-written splitter cuts it: Han runs apart from other
		// letters, a leading space or tab kept with the word after it but not with Han, digits
		// in threes, punctuation with the line breaks after it, a combining mark not a letter
		// (the model's regex would keep it in the word).
		{"kimi-k2", "I'm 12345 ok!!\n\nnext", []string{"I'm", " ", "123", "45", " ok", "!!\n\n", "next"}},
		{"kimi-k2", "abc中文def 中文", []string{"abc", "中文", "def", " ", "中文"}},
		{"kimi-k2", "  \tfoo's 1234567", []string{"  ", "\tfoo's", " ", "123", "456", "7"}},
		{"kimi-k2", "e\u0301x \u00e9t\u00e9 .NET", []string{"e", "\u0301x", " \u00e9t\u00e9", " .", "NET"}},
	} {
		p, _, err := newPreTokenizer(tc.pre, false)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.split(tc.text, nil); !slices.Equal(got, tc.want) {
			t.Errorf("%s %q: got %q, want %q", tc.pre, tc.text, got, tc.want)
		}
	}
}

func TestUnknownPreTokenizer(t *testing.T) {
	_, _, err := newPreTokenizer("tekken", false)
	if err == nil || !strings.Contains(err.Error(), `"tekken"`) {
		t.Fatalf("error %v does not name the pre-tokenizer", err)
	}
}

// FuzzSplitters compares the hand-written splitters with their regexes on any valid text
// (the tokenizer replaces invalid UTF-8 before splitting), and checks that Kimi-K2's covers
// it.
func FuzzSplitters(f *testing.F) {
	for _, s := range []string{"Hello world", "it's 12345 \n\n  x", "日本語・テキスト", "e\u0301 ½ \u00a0!", "$$a 'LL"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		text = sanitizeUTF8(text)
		for _, pre := range fastPres {
			fast, regex := splitBoth(t, pre, text)
			if !slices.Equal(fast, regex) {
				t.Fatalf("%s %q:\n fast  %q\n regex %q", pre, text, fast, regex)
			}
			if strings.Join(fast, "") != text || slices.Contains(fast, "") {
				t.Fatalf("%s %q: pieces %q do not cover the text", pre, text, fast)
			}
		}
		// Kimi-K2's splitter has no regex form to compare with: its pieces must cover the text.
		if pieces := (kimiK2Splitter{}).split(text, nil); strings.Join(pieces, "") != text || slices.Contains(pieces, "") {
			t.Fatalf("kimi-k2 %q: pieces %q do not cover the text", text, pieces)
		}
		if !utf8.ValidString(text) {
			t.Fatal("sanitizeUTF8 left invalid UTF-8")
		}
	})
}
