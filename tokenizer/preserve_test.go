package tokenizer

import "testing"

// DeepSeek-V3's tool-call markers are control tokens: a stream writes them out only when
// told to preserve them, and then byte for byte as the vocabulary spells them.
func TestStreamDecoderPreserve(t *testing.T) {
	v := loadVocab(t, vocabDir+"/ggml-vocab-deepseek-v3.gguf")
	begin, ok := v.ID("<｜tool▁call▁begin｜>")
	if !ok || v.Attr(begin)&AttrControl == 0 {
		t.Fatalf("<｜tool▁call▁begin｜>: id %d, found %v, attributes %v; want a control token", begin, ok, v.Attr(begin))
	}
	sep, _ := v.ID("<｜tool▁sep｜>")
	ids := append([]int32{begin}, v.Encode("function", false, false)...)
	ids = append(ids, sep)
	decode := func(preserve ...int32) string {
		d := v.NewStreamDecoder(false)
		d.Preserve(preserve...)
		var out string
		for _, id := range ids {
			out += d.Add(id)
		}
		return out + d.Flush()
	}
	if got := decode(); got != "function" {
		t.Errorf("without preserving: %q, want the markers left out", got)
	}
	if got := decode(begin, sep); got != "<｜tool▁call▁begin｜>function<｜tool▁sep｜>" {
		t.Errorf("preserving the markers: %q", got)
	}
	if got := decode(begin); got != "<｜tool▁call▁begin｜>function" {
		t.Errorf("preserving one marker: %q", got)
	}
}
