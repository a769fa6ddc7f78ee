package tokenizer

import "strings"

// fragment is a piece of the input: raw text still to tokenize, or a special token
// already recognised (token != None).
type fragment struct {
	text  string
	token int32
}

// Encode tokenizes text as llama_tokenize does. With addSpecial the BOS/EOS tokens the
// vocabulary asks for (add_bos_token/add_eos_token) are added. With parseSpecial, control
// tokens written in the text (such as "<|im_start|>") become those tokens; user-defined
// tokens (such as Qwen3's "<think>") are recognised either way, as in Hugging Face's
// tokenizers. Invalid UTF-8 is read as U+FFFD, one per bad byte.
func (v *Vocab) Encode(text string, addSpecial, parseSpecial bool) []int32 {
	out := make([]int32, 0, len(text)/3+2)
	if addSpecial && v.AddBOS && v.BOS != None {
		out = append(out, v.BOS)
	}
	var words []string
	for _, f := range v.partition(text, parseSpecial) {
		if f.token != None {
			out = append(out, f.token)
			continue
		}
		words = v.pre.split(sanitizeUTF8(f.text), words[:0])
		for _, w := range words {
			out = v.bpe(w, out)
		}
	}
	if addSpecial && v.AddEOS && v.EOS != None {
		out = append(out, v.EOS)
	}
	return out
}

// cSpaces is C's isspace set, which llama.cpp's lstrip/rstrip trim.
const cSpaces = " \t\n\v\f\r"

// partition cuts the special tokens out of text, longest token first, each token taking
// every occurrence in the text that is left (llama.cpp's tokenizer_st_partition).
func (v *Vocab) partition(text string, parseSpecial bool) []fragment {
	if text == "" {
		return nil
	}
	frags := []fragment{{text: text, token: None}}
	for _, id := range v.special {
		a := v.attrs[id]
		if !parseSpecial && a&(AttrControl|AttrUnknown) != 0 {
			continue
		}
		tok := v.tokens[id]
		var next []fragment // allocated only when the token occurs
		for i, f := range frags {
			if f.token != None || !strings.Contains(f.text, tok) {
				if next != nil {
					next = append(next, f)
				}
				continue
			}
			if next == nil {
				next = append(make([]fragment, 0, len(frags)+4), frags[:i]...)
			}
			next = splitOn(f.text, tok, id, a, next)
		}
		if next != nil {
			frags = next
		}
	}
	return frags
}

// splitOn cuts every occurrence of tok out of s, appending text and token fragments.
func splitOn(s, tok string, id int32, a Attr, out []fragment) []fragment {
	for {
		k := strings.Index(s, tok)
		if k < 0 {
			if s != "" {
				out = append(out, fragment{text: s, token: None})
			}
			return out
		}
		left := s[:k]
		if a&AttrLStrip != 0 {
			left = strings.TrimRight(left, cSpaces)
		}
		if left != "" {
			out = append(out, fragment{text: left, token: None})
		}
		out = append(out, fragment{token: id})
		s = s[k+len(tok):]
		if a&AttrRStrip != 0 {
			s = strings.TrimLeft(s, cSpaces)
		}
	}
}
