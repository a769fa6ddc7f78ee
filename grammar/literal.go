package grammar

import "strings"

// Literal writes text as a GBNF string literal, escaping what llama.cpp's
// json-schema-to-grammar escapes (carriage returns, newlines, quotes and
// backslashes) and leaving every other byte as it is, which Parse reads back.
func Literal(text string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(text); i++ {
		switch c := text[i]; c {
		case '\r':
			b.WriteString(`\r`)
		case '\n':
			b.WriteString(`\n`)
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
