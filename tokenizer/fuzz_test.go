package tokenizer

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// roundTripVocabs have no clean_up_tokenization_spaces, so decoding gives the text back.
var roundTripVocabs = []string{
	vocabDir + "/ggml-vocab-qwen3.gguf",
	vocabDir + "/ggml-vocab-deepseek-v3.gguf",
	"../testdata/models/tiny-deepseek2.gguf",
}

// FuzzRoundTrip: tokenizing then detokenizing any input never panics and gives back the
// text (with each invalid UTF-8 byte read as U+FFFD), special tokens parsed or not; the
// streaming decoder gives the same text and never emits half a character.
func FuzzRoundTrip(f *testing.F) {
	for _, s := range []string{"Hello world", "<|im_start|>user\nhi<|im_end|>", "<think>x</think>", "日本語 👍", "\xff\xfe ok \xe2\x82", "<｜User｜>a<｜Assistant｜>", "  \n\t12345"} {
		f.Add(s, true)
	}
	vocabs := make([]*Vocab, len(roundTripVocabs))
	for i, p := range roundTripVocabs {
		vocabs[i] = loadVocab(f, p)
	}
	f.Fuzz(func(t *testing.T, text string, parseSpecial bool) {
		want := sanitizeUTF8(text)
		for i, v := range vocabs {
			ids := v.Encode(text, false, parseSpecial)
			if got := v.Decode(ids, false, true); got != want {
				t.Fatalf("%s: %q → %v → %q", roundTripVocabs[i], text, ids, got)
			}
			d := v.NewStreamDecoder(true)
			var streamed strings.Builder
			for _, id := range ids {
				chunk := d.Add(id)
				if !utf8.ValidString(chunk) {
					t.Fatalf("%s: stream chunk %q is not valid UTF-8", roundTripVocabs[i], chunk)
				}
				streamed.WriteString(chunk)
			}
			streamed.WriteString(d.Flush())
			if streamed.String() != want {
				t.Fatalf("%s: streamed %q, want %q", roundTripVocabs[i], streamed.String(), want)
			}
		}
	})
}
