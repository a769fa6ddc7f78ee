package main

import (
	"fmt"
	"strings"
	"testing"
)

// escapePrompt writes s so that processEscapes gives it back: backslash, newline, tab and
// carriage return as \\ \n \t \r, other control and non-ASCII bytes as \xHH.
func escapePrompt(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			b.WriteString(`\\`)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\t':
			b.WriteString(`\t`)
		case c == '\r':
			b.WriteString(`\r`)
		case c == '"' && i%2 == 0: // \" and a bare " both stand for "
			b.WriteString(`\"`)
		case c < 0x20 || c >= 0x7f:
			fmt.Fprintf(&b, `\x%02x`, c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// FuzzProcessEscapes: processEscapes handles -p/--prompt and tokenize's text unless
// --no-escape. It never panics, never lengthens the text, leaves text without a backslash
// alone, and gives back any text written with escapes (escapePrompt).
func FuzzProcessEscapes(f *testing.F) {
	for _, s := range []string{`a\nb\t\x41\\\q\`, `Hello\nworld`, `\x`, `\x4`, `\xzz`, `\x+1`, `\x-1`, `\'\"`, "日本\\n語", "no escapes", `\\\\n`} {
		f.Add(s, s)
	}
	f.Fuzz(func(t *testing.T, s, raw string) {
		got := processEscapes(s)
		if len(got) > len(s) {
			t.Fatalf("%q → %q is longer", s, got)
		}
		if !strings.Contains(s, `\`) && got != s {
			t.Fatalf("%q has no escape but became %q", s, got)
		}
		if strings.Count(got, `\`) > strings.Count(s, `\`) {
			t.Fatalf("%q → %q has more backslashes", s, got)
		}
		if esc := escapePrompt(raw); processEscapes(esc) != raw {
			t.Fatalf("%q escaped as %q reads as %q", raw, esc, processEscapes(esc))
		}
	})
}
