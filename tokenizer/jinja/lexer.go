package jinja

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

type tokenKind uint8

const (
	tokText       tokenKind = iota // template data between tags
	tokPrintOpen                   // {{
	tokPrintClose                  // }}
	tokStmtOpen                    // {%
	tokStmtClose                   // %}
	tokName
	tokString
	tokInt
	tokFloat
	tokOp // an operator or punctuation
	tokEOF
)

type token struct {
	kind tokenKind
	text string // the name, the operator, the decoded string or the data
	num  any    // tokInt: int; tokFloat: float64
	line int
}

func (t token) String() string {
	switch t.kind {
	case tokEOF:
		return "end of template"
	case tokPrintOpen:
		return "'{{'"
	case tokPrintClose:
		return "'}}'"
	case tokStmtOpen:
		return "'{%'"
	case tokStmtClose:
		return "'%}'"
	case tokString:
		return "string"
	case tokText:
		return "template data"
	}
	return "'" + t.text + "'"
}

// lexer splits a template into tokens, applying Jinja's whitespace control as Hugging Face
// configures it: trim_blocks (the first newline after a statement or comment tag goes),
// lstrip_blocks (spaces and tabs before a statement or comment tag at the start of a line
// go), "-" inside a tag's delimiter strips all whitespace on that side, "+" keeps it.
type lexer struct {
	src    string
	pos    int
	line   int
	tokens []token
	// lineStart: the text being scanned starts a line (the template's start, or the
	// previous tag ended with the newline trim_blocks took).
	lineStart bool
}

// normalizeNewlines does what Jinja does to a template's source before lexing (Python's
// splitlines joined with "\n"): every line break, \r\n and the rarer ones splitlines knows
// included, becomes "\n", and one trailing line break is dropped (keep_trailing_newline
// is off).
func normalizeNewlines(src string) string {
	if !strings.ContainsAny(src, "\r\v\f\x1c\x1d\x1e\u0085\u2028\u2029") {
		return strings.TrimSuffix(src, "\n")
	}
	var b strings.Builder
	for i := 0; i < len(src); {
		r, n := utf8.DecodeRuneInString(src[i:])
		switch r {
		case '\r':
			if i+1 < len(src) && src[i+1] == '\n' {
				n = 2
			}
			b.WriteByte('\n')
		case '\v', '\f', 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029:
			b.WriteByte('\n')
		default:
			b.WriteString(src[i : i+n])
		}
		i += n
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func lex(src string) ([]token, error) {
	l := &lexer{src: normalizeNewlines(src), line: 1, lineStart: true}
	if err := l.run(); err != nil {
		return nil, err
	}
	return l.tokens, nil
}

func (l *lexer) errorf(format string, args ...any) error {
	return &Error{Line: l.line, Msg: fmt.Sprintf(format, args...)}
}

func (l *lexer) emit(kind tokenKind, text string, num any) {
	l.tokens = append(l.tokens, token{kind: kind, text: text, num: num, line: l.line})
}

// advance moves past n bytes, counting lines.
func (l *lexer) advance(n int) {
	l.line += strings.Count(l.src[l.pos:l.pos+n], "\n")
	l.pos += n
}

func (l *lexer) run() error {
	for l.pos < len(l.src) {
		open := nextTagOpen(l.src, l.pos)
		if open < 0 {
			l.text(l.src[l.pos:])
			l.advance(len(l.src) - l.pos)
			break
		}
		kind := l.src[open+1] // '{', '%' or '#'
		control := byte(0)
		if open+2 < len(l.src) && (l.src[open+2] == '-' || l.src[open+2] == '+') {
			control = l.src[open+2]
		}
		text := l.src[l.pos:open]
		switch {
		case control == '-':
			text = strings.TrimRightFunc(text, unicode.IsSpace)
		case control != '+' && kind != '{':
			text = l.lstrip(text)
		}
		l.text(text)
		l.advance(open - l.pos)
		tagLen := 2
		if control != 0 {
			tagLen = 3
		}
		l.advance(tagLen)
		var err error
		switch kind {
		case '#':
			err = l.comment()
		case '{':
			l.emit(tokPrintOpen, "", nil)
			err = l.tagBody('}')
		default:
			if l.rawBlock() {
				continue
			}
			l.emit(tokStmtOpen, "", nil)
			err = l.tagBody('%')
		}
		if err != nil {
			return err
		}
	}
	l.emit(tokEOF, "", nil)
	return nil
}

// nextTagOpen finds the next "{{", "{%" or "{#" at or after from.
func nextTagOpen(src string, from int) int {
	for {
		i := strings.IndexByte(src[from:], '{')
		if i < 0 || from+i+1 >= len(src) {
			return -1
		}
		i += from
		if c := src[i+1]; c == '{' || c == '%' || c == '#' {
			return i
		}
		from = i + 1
	}
}

// text emits template data.
func (l *lexer) text(text string) {
	if text != "" {
		l.emit(tokText, text, nil)
	}
	l.lineStart = false
}

// lstrip removes the white space between the start of the line and a tag, when nothing
// else is on the line before it.
func (l *lexer) lstrip(text string) string {
	start := strings.LastIndexByte(text, '\n') + 1
	if start == 0 && !l.lineStart {
		return text
	}
	if strings.TrimLeftFunc(text[start:], unicode.IsSpace) != "" {
		return text
	}
	return text[:start]
}

// closeTag reports whether a tag's closing delimiter (with its whitespace control)
// starts at the position, and consumes it, applying trim_blocks or "-".
func (l *lexer) closeTag(delim byte) bool {
	s := l.src[l.pos:]
	control := byte(0)
	if len(s) > 0 && (s[0] == '-' || s[0] == '+') {
		control = s[0]
		s = s[1:]
	}
	if len(s) < 2 || s[0] != delim || s[1] != '}' {
		return false
	}
	n := 2
	if control != 0 {
		n = 3
	}
	l.advance(n)
	l.afterTag(control, delim != '}')
	return true
}

// afterTag applies the closing delimiter's whitespace control to the text that follows.
func (l *lexer) afterTag(control byte, trimBlock bool) {
	switch {
	case control == '-':
		rest := l.src[l.pos:]
		l.advance(len(rest) - len(strings.TrimLeftFunc(rest, unicode.IsSpace)))
		l.lineStart = false
	case control != '+' && trimBlock && l.pos < len(l.src) && l.src[l.pos] == '\n':
		l.advance(1)
		l.lineStart = true
	}
}

func (l *lexer) comment() error {
	i := strings.Index(l.src[l.pos:], "#}")
	if i < 0 {
		return l.errorf("comment not closed")
	}
	control := byte(0)
	if i > 0 && (l.src[l.pos+i-1] == '-' || l.src[l.pos+i-1] == '+') {
		control = l.src[l.pos+i-1]
	}
	l.advance(i + 2)
	l.afterTag(control, true)
	return nil
}

// rawBlock handles {% raw %}…{% endraw %} (the opening delimiter already consumed): the
// text between the tags is data, unparsed. As in Jinja, trim_blocks does not apply to the
// opening tag, which takes "-" but not "+" before its "%}".
func (l *lexer) rawBlock() bool {
	s := l.src[l.pos:]
	t := strings.TrimLeft(s, " \t\n")
	if !strings.HasPrefix(t, "raw") {
		return false
	}
	t = strings.TrimLeft(t[3:], " \t\n")
	control := byte(0)
	if t != "" && t[0] == '-' {
		control = t[0]
		t = t[1:]
	}
	if !strings.HasPrefix(t, "%}") || rawEnd(t[2:]) == nil {
		return false // not a raw tag, or one the parser reports
	}
	l.advance(len(s) - len(t) + 2)
	l.afterTag(control, false)
	l.finishRaw()
	return true
}

// rawEnd finds "{% endraw %}" in s: its start, the end of the opening delimiter's
// control sign, and its end with the closing control sign.
func rawEnd(s string) []int {
	for from := 0; ; {
		i := strings.Index(s[from:], "{%")
		if i < 0 {
			return nil
		}
		i += from
		j := i + 2
		if j < len(s) && (s[j] == '-' || s[j] == '+') {
			j++
		}
		k := j
		for k < len(s) && (s[k] == ' ' || s[k] == '\t' || s[k] == '\n') {
			k++
		}
		if strings.HasPrefix(s[k:], "endraw") {
			m := k + len("endraw")
			for m < len(s) && (s[m] == ' ' || s[m] == '\t' || s[m] == '\n') {
				m++
			}
			if m < len(s) && (s[m] == '-' || s[m] == '+') {
				m++
			}
			if strings.HasPrefix(s[m:], "%}") {
				return []int{i, j, m + 2}
			}
		}
		from = i + 2
	}
}

// finishRaw emits the raw body and consumes {% endraw %}, the opening tag consumed.
func (l *lexer) finishRaw() {
	rest := l.src[l.pos:]
	end := rawEnd(rest)
	body := rest[:end[0]]
	openControl := rest[end[0]+2]
	switch {
	case end[1] == end[0]+3 && openControl == '-':
		body = strings.TrimRightFunc(body, unicode.IsSpace)
	case !(end[1] == end[0]+3 && openControl == '+'):
		body = l.lstrip(body)
	}
	if body != "" {
		l.emit(tokText, body, nil)
	}
	l.lineStart = false
	closeControl := rest[end[2]-3]
	l.advance(end[2])
	if closeControl != '-' && closeControl != '+' {
		closeControl = 0
	}
	l.afterTag(closeControl, true)
}

// operators, longest first so that "**" wins over "*".
var operators = []string{"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">", "=", "(", ")", "[", "]", "{", "}", ".", ",", ":", "|"}

// tagBody lexes the expression tokens of a tag up to its closing delimiter ('}' for
// "}}", '%' for "%}").
func (l *lexer) tagBody(delim byte) error {
	openLine := l.line
	depth := 0 // brackets: a "}}" inside braces closes a dict, not the tag
	for {
		for l.pos < len(l.src) && isSpace(l.src[l.pos]) {
			l.advance(1)
		}
		if l.pos >= len(l.src) {
			l.line = openLine
			return l.errorf("tag not closed")
		}
		if depth <= 0 && l.closeTag(delim) {
			if delim == '}' {
				l.emit(tokPrintClose, "", nil)
			} else {
				l.emit(tokStmtClose, "", nil)
			}
			return nil
		}
		c := l.src[l.pos]
		switch {
		case c == '"' || c == '\'':
			if err := l.stringLiteral(); err != nil {
				return err
			}
		case c >= '0' && c <= '9':
			if err := l.number(); err != nil {
				return err
			}
		case isNameStart(c):
			start := l.pos
			for l.pos < len(l.src) && isNameByte(l.src[l.pos]) {
				l.pos++
			}
			l.emit(tokName, l.src[start:l.pos], nil)
		default:
			op := ""
			for _, o := range operators {
				if strings.HasPrefix(l.src[l.pos:], o) {
					op = o
					break
				}
			}
			if op == "" {
				r, _ := utf8.DecodeRuneInString(l.src[l.pos:])
				return l.errorf("unexpected character %q", r)
			}
			switch op {
			case "(", "[", "{":
				depth++
			case ")", "]", "}":
				depth--
			}
			l.emit(tokOp, op, nil)
			l.pos += len(op)
		}
	}
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func isNameStart(c byte) bool { return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

func isNameByte(c byte) bool { return isNameStart(c) || c >= '0' && c <= '9' }

// number lexes an integer or float literal as Jinja does: digits with optional "_"
// separators, 0b/0o/0x prefixes, a fraction and/or an exponent.
func (l *lexer) number() error {
	s := l.src[l.pos:]
	end := 0
	digits := func(ok func(byte) bool) {
		for end < len(s) && (ok(s[end]) || s[end] == '_' && end+1 < len(s) && ok(s[end+1])) {
			end++
		}
	}
	isDec := func(c byte) bool { return c >= '0' && c <= '9' }
	if len(s) > 2 && s[0] == '0' && strings.ContainsRune("bBoOxX", rune(s[1])) {
		base := map[byte]int{'b': 2, 'o': 8, 'x': 16}[s[1]|0x20]
		end = 2
		digits(func(c byte) bool { return strings.IndexByte("0123456789abcdef"[:base], c|0x20) >= 0 })
		v, ok := parseInt(strings.ReplaceAll(s[2:end], "_", ""), base)
		if !ok {
			return l.errorf("invalid integer literal %q", s[:end])
		}
		l.emit(tokInt, s[:end], v)
		l.pos += end
		return nil
	}
	digits(isDec)
	float := false
	if end+1 < len(s) && s[end] == '.' && isDec(s[end+1]) {
		float = true
		end++
		digits(isDec)
	}
	if end < len(s) && (s[end] == 'e' || s[end] == 'E') {
		k := end + 1
		if k < len(s) && (s[k] == '+' || s[k] == '-') {
			k++
		}
		if k < len(s) && isDec(s[k]) {
			float = true
			end = k
			digits(isDec)
		}
	}
	lit := strings.ReplaceAll(s[:end], "_", "")
	if float {
		f, err := parseFloat(lit)
		if err != nil {
			return l.errorf("invalid number %q", s[:end])
		}
		l.emit(tokFloat, s[:end], f)
	} else {
		v, ok := parseInt(lit, 10)
		if !ok {
			return l.errorf("integer literal %s is too large", s[:end])
		}
		l.emit(tokInt, s[:end], v)
	}
	l.pos += end
	return nil
}

// stringLiteral lexes a quoted string, decoding Python's escape sequences (Jinja decodes
// string literals with Python's unicode-escape codec).
func (l *lexer) stringLiteral() error {
	quote := l.src[l.pos]
	startLine := l.line
	var b strings.Builder
	i := l.pos + 1
	for {
		if i >= len(l.src) {
			l.line = startLine
			return l.errorf("unterminated string")
		}
		c := l.src[i]
		if c == quote {
			break
		}
		if c != '\\' || i+1 >= len(l.src) {
			b.WriteByte(c)
			i++
			continue
		}
		n, ok := decodeEscape(&b, l.src[i+1:])
		if !ok {
			return l.errorf("invalid escape in string literal")
		}
		i += 1 + n
	}
	l.emit(tokString, b.String(), nil)
	l.advance(i + 1 - l.pos)
	return nil
}

// decodeEscape writes the character the escape sequence at the start of s (after the
// backslash) stands for and returns how many bytes of s it used. An unknown escape stays
// as written, backslash included, as in Python.
func decodeEscape(b *strings.Builder, s string) (int, bool) {
	simple := map[byte]string{'n': "\n", 't': "\t", 'r': "\r", '\\': "\\", '\'': "'", '"': "\"", 'a': "\a", 'b': "\b", 'f': "\f", 'v': "\v", '\n': ""}
	c := s[0]
	if r, ok := simple[c]; ok {
		b.WriteString(r)
		return 1, true
	}
	hexLen := map[byte]int{'x': 2, 'u': 4, 'U': 8}[c]
	switch {
	case hexLen > 0:
		if len(s) < 1+hexLen {
			return 0, false
		}
		v, ok := parseInt(s[1:1+hexLen], 16)
		if !ok || v > unicode.MaxRune {
			return 0, false
		}
		b.WriteRune(rune(v))
		return 1 + hexLen, true
	case c >= '0' && c <= '7':
		n := 1
		for n < 3 && n < len(s) && s[n] >= '0' && s[n] <= '7' {
			n++
		}
		v, _ := parseInt(s[:n], 8)
		b.WriteRune(rune(v))
		return n, true
	case c == 'N' && len(s) > 1 && s[1] == '{':
		return 0, false // named characters need Unicode's name table; templates do not use them
	}
	b.WriteByte('\\')
	return 0, true
}
