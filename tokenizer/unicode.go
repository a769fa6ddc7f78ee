package tokenizer

import (
	"sync"
	"unicode"
	"unicode/utf8"
)

// charClass is the set of Unicode properties the pre-tokenizers ask about, one bit each.
// They mirror the regex classes \p{L}, \p{N}, \p{M}, \p{P}, \p{S} and \s; a rune has at
// most one of the category bits and may also be whitespace (a tab is a control character
// and whitespace).
type charClass uint8

const (
	classLetter charClass = 1 << iota
	classNumber
	classMark
	classPunct
	classSymbol
	classSpace
)

// classTableSize covers the Basic Multilingual Plane, where nearly all text lives; rarer
// runes are classified on the fly.
const classTableSize = 0x10000

var classTable = sync.OnceValue(func() *[classTableSize]charClass {
	var t [classTableSize]charClass
	for r := range rune(classTableSize) {
		t[r] = computeClass(r)
	}
	return &t
})

// computeClass derives a rune's classes from Go's Unicode tables (the same tables regexp2
// uses for \p{..}, so the regex oracle and the hand-written splitters agree).
func computeClass(r rune) charClass {
	var c charClass
	switch {
	case unicode.IsLetter(r):
		c = classLetter
	case unicode.IsNumber(r):
		c = classNumber
	case unicode.IsMark(r):
		c = classMark
	case unicode.IsPunct(r):
		c = classPunct
	case unicode.IsSymbol(r):
		c = classSymbol
	}
	if unicode.Is(unicode.White_Space, r) {
		c |= classSpace
	}
	return c
}

func classOf(r rune) charClass {
	if r >= 0 && r < classTableSize {
		return classTable()[r]
	}
	return computeClass(r)
}

// The GPT-2 byte-level alphabet: every byte value is shown as a printable rune, so that
// vocabulary entries are valid text. Printable Latin-1 bytes stand for themselves; the
// others (controls, space, 0x7F-0xA0, 0xAD) are moved to 256, 257, … in byte order.
var (
	byteToRune [256]rune
	runeToByte = map[rune]byte{}
)

func init() {
	next := rune(256)
	for b := range 256 {
		r := rune(b)
		printable := (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
		if !printable {
			r = next
			next++
		}
		byteToRune[b] = r
		runeToByte[r] = byte(b)
	}
}

// byteEncode maps raw bytes to their byte-level (GPT-2 alphabet) spelling.
func byteEncode(s string) string {
	buf := make([]byte, 0, 2*len(s))
	for i := 0; i < len(s); i++ {
		buf = utf8.AppendRune(buf, byteToRune[s[i]])
	}
	return string(buf)
}

// sanitizeUTF8 replaces every byte that does not start a valid UTF-8 sequence by U+FFFD,
// one replacement per byte, which is what llama.cpp's decoder does with broken input
// (a truncated sequence becomes one U+FFFD per byte, not one for the whole run).
func sanitizeUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	buf := make([]byte, 0, len(s)+8)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			buf = utf8.AppendRune(buf, utf8.RuneError)
		} else {
			buf = append(buf, s[i:i+n]...)
		}
		i += n
	}
	return string(buf)
}
