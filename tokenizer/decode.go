package tokenizer

import (
	"fmt"
	"slices"
	"unicode/utf8"
)

// renderPiece is a token's output text when special tokens are shown (llama.cpp's
// token_to_piece with special=true, which it caches for every token).
func (v *Vocab) renderPiece(id int32) string {
	a, t := v.attrs[id], v.tokens[id]
	switch {
	case a&(AttrUnknown|AttrControl|AttrUserDefined) != 0:
		return t
	case a&AttrNormal != 0:
		return byteDecode(t)
	case a&AttrByte != 0:
		return string([]byte{byteTokenValue(t)})
	}
	return "" // unused or undefined tokens print nothing
}

// byteDecode maps a byte-level spelling back to raw bytes. A rune outside the GPT-2
// alphabet is shown as llama.cpp shows it: "[UNK_BYTE_0x<utf-8 hex><token text>]".
func byteDecode(t string) string {
	buf := make([]byte, 0, len(t))
	for _, r := range t {
		if b, ok := runeToByte[r]; ok {
			buf = append(buf, b)
			continue
		}
		buf = append(buf, "[UNK_BYTE_0x"...)
		for _, c := range utf8.AppendRune(nil, r) {
			buf = fmt.Appendf(buf, "%02x", c)
		}
		buf = append(buf, t...)
		buf = append(buf, ']')
	}
	return string(buf)
}

// byteTokenValue reads a byte token "<0xAB>": the two hex digits at offset 3.
func byteTokenValue(t string) byte {
	var b byte
	for i := 3; i < min(5, len(t)); i++ {
		c := t[i]
		switch {
		case c >= '0' && c <= '9':
			b = b<<4 | (c - '0')
		case (c|0x20) >= 'a' && (c|0x20) <= 'f':
			b = b<<4 | ((c | 0x20) - 'a' + 10)
		default:
			return b
		}
	}
	return b
}

// Piece is a token's text (llama_token_to_piece): control and unknown tokens are empty
// unless special is set; user-defined tokens always show. An id out of range is empty.
func (v *Vocab) Piece(id int32, special bool) string {
	if id < 0 || int(id) >= len(v.pieces) {
		return ""
	}
	if !special && v.attrs[id]&(AttrUnknown|AttrControl) != 0 {
		return ""
	}
	return v.pieces[id]
}

// Decode turns ids back into text as llama_detokenize does: with removeSpecial a leading
// BOS and trailing EOS that the vocabulary adds are dropped; with unparseSpecial control
// tokens are written out. Vocabularies of the GPT-2 era also get their spaces cleaned
// (" ," → ","). The result may hold invalid UTF-8 when ids end inside a character.
func (v *Vocab) Decode(ids []int32, removeSpecial, unparseSpecial bool) string {
	removeSpace := v.addSpacePrefix
	if removeSpecial && v.AddBOS && len(ids) > 0 && ids[0] == v.BOS {
		removeSpace = false
		ids = ids[1:]
	}
	if removeSpecial && v.AddEOS && len(ids) > 0 && ids[len(ids)-1] == v.EOS {
		ids = ids[:len(ids)-1]
	}
	var buf []byte
	for _, id := range ids {
		p := v.Piece(id, unparseSpecial)
		if removeSpace && len(p) > 0 && p[0] == ' ' {
			p = p[1:]
		}
		removeSpace = false
		buf = append(buf, p...)
	}
	if v.cleanSpaces {
		buf = cleanSpaces(buf)
	}
	return string(buf)
}

// cleanSpaces is Hugging Face's clean_up_tokenization_spaces as llama.cpp implements it,
// in three in-place passes: drop the space before ? ! . , ; drop both spaces around a lone
// apostrophe; drop the space before 's 'm 're 've.
func cleanSpaces(t []byte) []byte {
	if len(t) == 0 {
		return t
	}
	t = cleanPass(t, func(t []byte, i int) (bool, bool) {
		x := t[i]
		return t[i-1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ','), false
	})
	t = cleanPass(t, func(t []byte, i int) (bool, bool) {
		lone := t[i] == '\'' && i+1 < len(t) && t[i-1] == ' ' && t[i+1] == ' '
		return lone, lone
	})
	return cleanPass(t, func(t []byte, i int) (bool, bool) {
		if t[i-1] != ' ' || t[i] != '\'' || i+1 >= len(t) {
			return false, false
		}
		x1 := t[i+1]
		return x1 == 's' || x1 == 'm' || ((x1 == 'r' || x1 == 'v') && i+2 < len(t) && t[i+2] == 'e'), false
	})
}

// cleanPass rewrites t in place, keeping the first byte and asking rule about each later
// one: drop removes the byte written before it, skip also drops the byte after it (which
// is zeroed, so that the next rule does not see it as a space).
func cleanPass(t []byte, rule func(t []byte, i int) (drop, skip bool)) []byte {
	n := 1
	for i := 1; i < len(t); i++ {
		x := t[i]
		drop, skip := rule(t, i)
		if drop {
			n--
		}
		if skip {
			i++
			t[i] = 0
		}
		t[n] = x
		n++
	}
	return t[:n]
}

// StreamDecoder turns generated tokens into text as they arrive without ever splitting a
// UTF-8 character: bytes of a character whose end has not been generated yet are held
// back until it is complete. It is not safe for concurrent use.
type StreamDecoder struct {
	v         *Vocab
	special   bool
	preserved []int32 // control tokens written out though special is false
	pending   []byte
}

// NewStreamDecoder starts a stream; special says whether control tokens are written out.
func (v *Vocab) NewStreamDecoder(special bool) *StreamDecoder {
	return &StreamDecoder{v: v, special: special}
}

// Preserve writes these control tokens out even without special: the tags a chat
// format's parser reads (llama-server's preserved tokens), such as DeepSeek's tool-call
// markers, which are control tokens of its vocabulary.
func (d *StreamDecoder) Preserve(ids ...int32) { d.preserved = append(d.preserved, ids...) }

// Add appends a token and returns the text that is now complete (possibly "").
func (d *StreamDecoder) Add(id int32) string {
	d.pending = append(d.pending, d.v.Piece(id, d.special || slices.Contains(d.preserved, id))...)
	keep := incompleteTail(d.pending)
	out := string(d.pending[:len(d.pending)-keep])
	d.pending = append(d.pending[:0], d.pending[len(d.pending)-keep:]...)
	return out
}

// Flush returns whatever is held back, complete or not, and resets the stream.
func (d *StreamDecoder) Flush() string {
	out := string(d.pending)
	d.pending = d.pending[:0]
	return out
}

// incompleteTail is the length of the trailing bytes of b that start a UTF-8 character
// but do not finish it. Bytes that can never become valid are not held.
func incompleteTail(b []byte) int {
	for k := 1; k <= utf8.UTFMax-1 && k <= len(b); k++ {
		c := b[len(b)-k]
		if c&0xC0 == 0x80 { // continuation byte: look further back for the lead
			continue
		}
		if c >= 0xC0 && !utf8.FullRune(b[len(b)-k:]) {
			return k
		}
		return 0
	}
	return 0
}
