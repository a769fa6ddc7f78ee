package placement

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/dlclark/regexp2"
	"github.com/dlclark/regexp2/syntax"
)

// matchTimeout bounds one regex match; tensor names are short, so only a pathological
// backtracking pattern can get near it.
const matchTimeout = time.Second

// matcher tests tensor names against one override pattern with llama.cpp's semantics:
// std::regex's ECMAScript grammar, searched anywhere in the name (std::regex_search).
//
// regexp2 in ECMAScript|RE2 mode is the engine of record. Two shortcuts give the same
// verdicts much faster: every match must contain the pattern's required literal runs (a
// plain substring test rejects most names), and a pattern in the small syntax subset where
// Go's RE2 engine provably agrees with ECMAScript is run by Go's regexp on printable-ASCII
// names.
type matcher struct {
	pattern  string
	re       *regexp2.Regexp // compiled on first need when the fast path covers the pattern
	fast     *regexp.Regexp  // nil outside the shared subset
	literals []string        // substrings every match contains
	// A pattern of literal characters only, maybe anchored, needs no regex engine at all.
	plainLiteral           bool
	anchorStart, anchorEnd bool
	text                   string
}

// PatternError is an override pattern that does not compile.
type PatternError struct {
	Pattern string
	Pos     int    // rune offset of the error, -1 when unknown
	Msg     string // what is wrong
}

func (e *PatternError) Error() string {
	if e.Pos < 0 {
		return fmt.Sprintf("invalid regular expression '%s': %s", e.Pattern, e.Msg)
	}
	return fmt.Sprintf("invalid regular expression '%s': %s at position %d\n  %s\n  %s^",
		e.Pattern, e.Msg, e.Pos, e.Pattern, strings.Repeat(" ", e.Pos))
}

func compileMatcher(pattern string) (*matcher, error) {
	m := &matcher{pattern: pattern}
	toks, ok := scanRegex(pattern)
	ok = ok && isASCII(pattern) // regexp2 reads UTF-8 as runes; the shortcuts compare bytes
	if ok && inSharedSubset(pattern, toks) {
		m.fast, _ = regexp.Compile(pattern)
	}
	if m.fast == nil {
		if err := m.compile(); err != nil {
			return nil, err
		}
	}
	if ok {
		m.literals = requiredLiterals(pattern, toks)
		m.literalOnly(toks)
	}
	return m, nil
}

// compile builds the engine of record.
func (m *matcher) compile() error {
	re, err := regexp2.Compile(m.pattern, regexp2.ECMAScript|regexp2.RE2)
	if err != nil {
		return patternError(m.pattern, err)
	}
	re.MatchTimeout = matchTimeout
	m.re = re
	return nil
}

// literalOnly recognises patterns made of literal characters, maybe with ^ and $.
func (m *matcher) literalOnly(toks []regexTok) {
	if len(toks) > 0 && toks[0].kind == tokAnchor && m.pattern[toks[0].start] == '^' {
		m.anchorStart, toks = true, toks[1:]
	}
	if n := len(toks); n > 0 && toks[n-1].kind == tokAnchor && m.pattern[toks[n-1].start] == '$' {
		m.anchorEnd, toks = true, toks[:n-1]
	}
	text := make([]byte, 0, len(toks))
	for _, t := range toks {
		if t.kind != tokLiteral {
			return
		}
		text = append(text, t.lit)
	}
	m.plainLiteral, m.text = true, string(text)
}

// match reports whether the pattern occurs in name. plain says the name is printable ASCII,
// where the Go engine may stand in for regexp2.
func (m *matcher) match(name string, plain bool) (bool, error) {
	if m.plainLiteral {
		switch {
		case m.anchorStart && m.anchorEnd:
			return name == m.text, nil
		case m.anchorStart:
			return strings.HasPrefix(name, m.text), nil
		case m.anchorEnd:
			return strings.HasSuffix(name, m.text), nil
		}
		return strings.Contains(name, m.text), nil
	}
	for _, lit := range m.literals {
		if !strings.Contains(name, lit) {
			return false, nil
		}
	}
	if m.fast != nil && plain {
		return m.fast.MatchString(name), nil
	}
	if m.re == nil {
		if err := m.compile(); err != nil {
			return false, err
		}
	}
	ok, err := m.re.MatchString(name)
	if err != nil {
		return false, fmt.Errorf("pattern '%s' on tensor %s: %w", m.pattern, name, err)
	}
	return ok, nil
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

func isPlainASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// tokKind classifies one element of a regex at the level the shortcuts and lints need.
type tokKind int

const (
	tokLiteral tokKind = iota // one literal character (lit holds it)
	tokEscape                 // a backslash escape that is not a plain literal (\d, \b, \1, …)
	tokDot                    // .
	tokClass                  // a whole [...] set
	tokOpen                   // ( or (?: (?= (?! …; text holds the opener
	tokClose                  // )
	tokAlt                    // |
	tokAnchor                 // ^ or $
	tokQuant                  // * + ? or {…}, with a lazy ? folded in
)

type regexTok struct {
	kind       tokKind
	start, end int // byte offsets in the pattern
	lit        byte
}

// scanRegex splits a pattern into tokens. It reports false for a pattern it cannot follow
// (unterminated set, trailing backslash), which then gets no shortcuts.
func scanRegex(p string) ([]regexTok, bool) {
	var toks []regexTok
	for i := 0; i < len(p); {
		c := p[i]
		t := regexTok{start: i}
		switch c {
		case '\\':
			if i+1 >= len(p) {
				return nil, false
			}
			e := p[i+1]
			i += 2
			if isPunct(e) {
				t.kind, t.lit = tokLiteral, e
			} else {
				t.kind = tokEscape
			}
		case '[':
			j := classEnd(p, i)
			if j < 0 || nestedBracket(p[i+1:j-1]) {
				return nil, false // .NET-style subtraction [a-[b]] reads differently in regexp2
			}
			t.kind, i = tokClass, j
		case '(':
			j := i + 1
			if j < len(p) && p[j] == '?' {
				j++
				if j < len(p) {
					j++
				}
			}
			t.kind, i = tokOpen, j
		case ')':
			t.kind, i = tokClose, i+1
		case '|':
			t.kind, i = tokAlt, i+1
		case '^', '$':
			t.kind, i = tokAnchor, i+1
		case '.':
			t.kind, i = tokDot, i+1
		case '*', '+', '?':
			t.kind, i = tokQuant, i+1
		case '{':
			j := strings.IndexByte(p[i:], '}')
			if j < 0 {
				t.kind, t.lit, i = tokLiteral, c, i+1
				break
			}
			t.kind, i = tokQuant, i+j+1
		default:
			t.kind, t.lit, i = tokLiteral, c, i+1
		}
		if t.kind == tokQuant && i < len(p) && p[i] == '?' { // lazy form
			i++
		}
		t.end = i
		toks = append(toks, t)
	}
	return toks, true
}

// classEnd returns the offset just past the set that starts at p[i] == '[', or -1. In
// ECMAScript a ']' right after '[' or '[^' closes the set (it is empty), and POSIX
// [:name:] classes nest.
func classEnd(p string, i int) int {
	for j := i + 1; j < len(p); j++ {
		switch p[j] {
		case '\\':
			j++
		case '[':
			if j+1 < len(p) && p[j+1] == ':' {
				if k := strings.Index(p[j+2:], ":]"); k >= 0 {
					j += k + 3
				}
			}
		case ']':
			return j + 1
		}
	}
	return -1
}

// nestedBracket reports a '[' inside a set other than a POSIX [:class:].
func nestedBracket(body string) bool {
	for i := 0; i < len(body); i++ {
		switch {
		case body[i] == '\\':
			i++
		case body[i] == '[' && !(i+1 < len(body) && body[i+1] == ':'):
			return true
		}
	}
	return false
}

func isPunct(c byte) bool {
	return c > 0x20 && c < 0x7f && !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z')
}

// requiredLiterals returns the literal runs every match must contain: the runs of literal
// characters at the top level of a pattern without top-level alternation. A character
// followed by a quantifier that allows zero repetitions is not required; one followed by +
// is, but ends its run.
func requiredLiterals(p string, toks []regexTok) []string {
	depth := 0
	for _, t := range toks {
		switch t.kind {
		case tokEscape:
			if !strings.Contains("dDwWsSbB", p[t.start+1:t.end]) {
				return nil // \x41, \u0041, \1, \cJ …: the scanner does not follow their operands
			}
		case tokOpen:
			if g := p[t.start:t.end]; g != "(" && g != "(?:" && g != "(?=" && g != "(?!" {
				return nil // inline flags such as (?i) change what the literals match
			}
			depth++
		case tokClose:
			depth--
		case tokAlt:
			if depth == 0 {
				return nil
			}
		}
	}
	var runs []string
	var cur []byte
	flush := func() {
		if len(cur) > 0 {
			runs = append(runs, string(cur))
			cur = cur[:0]
		}
	}
	depth = 0
	for i, t := range toks {
		switch {
		case t.kind == tokOpen:
			flush()
			depth++
		case t.kind == tokClose:
			depth--
		case depth > 0:
		case t.kind == tokLiteral:
			next := tokKind(-1)
			if i+1 < len(toks) {
				next = toks[i+1].kind
			}
			if next != tokQuant {
				cur = append(cur, t.lit)
				continue
			}
			flush()
		default:
			flush()
		}
	}
	flush()
	return runs
}

// inSharedSubset reports whether a pattern uses only syntax that Go's regexp and
// ECMAScript read the same way on printable-ASCII names: literals, escaped punctuation,
// \d \D \w \W \s \S \b \B, '.', sets of literals and those escapes, plain and (?:)
// groups, alternation, anchors and the * + ? quantifiers.
func inSharedSubset(p string, toks []regexTok) bool {
	for i, t := range toks {
		text := p[t.start:t.end]
		switch t.kind {
		case tokEscape:
			if !strings.Contains("dDwWsSbB", text[1:]) {
				return false
			}
		case tokOpen:
			if text != "(" && text != "(?:" {
				return false
			}
		case tokQuant:
			if text[0] == '{' || i == 0 || !quantifiable(p, toks[i-1]) {
				return false
			}
		case tokClass:
			if !simpleClass(text) {
				return false
			}
		case tokLiteral:
			if t.lit < 0x20 || t.lit > 0x7e || t.lit == '}' || t.lit == '{' || t.lit == ']' {
				return false
			}
		}
	}
	return true
}

// quantifiable reports whether a token is an atom a quantifier may follow in the subset.
func quantifiable(p string, t regexTok) bool {
	switch t.kind {
	case tokLiteral, tokDot, tokClass, tokClose:
		return true
	case tokEscape:
		return strings.Contains("dDwWsS", p[t.start+1:t.end])
	}
	return false
}

// simpleClass accepts sets of letters, digits, '_', '.', '-' ranges and \d \w \s escapes.
func simpleClass(set string) bool {
	body := strings.TrimPrefix(set[1:len(set)-1], "^")
	if body == "" || body[0] == '-' || body[len(body)-1] == '-' {
		return false
	}
	for i := 0; i < len(body); i++ {
		c := body[i]
		switch {
		case c == '\\':
			if i+1 >= len(body) || !strings.ContainsRune("dws.-_", rune(body[i+1])) {
				return false
			}
			i++
		case c == '-':
			if body[i-1] == '\\' || !isAlnum(body[i-1]) || !isAlnum(body[i+1]) || body[i-1] > body[i+1] {
				return false
			}
		case !isAlnum(c) && c != '_' && c != '.':
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// patternError turns a regexp2 compile error into a PatternError with the position of the
// mistake.
func patternError(pattern string, err error) *PatternError {
	pe := &PatternError{Pattern: pattern, Pos: -1, Msg: err.Error()}
	var se *syntax.Error
	if !errors.As(err, &se) {
		return pe
	}
	pe.Msg = string(se.Code)
	if len(se.Args) > 0 {
		pe.Msg = fmt.Sprintf(string(se.Code), se.Args...)
	}
	pe.Pos = errorPos(pattern, se.Code)
	return pe
}

// errorPos finds where a pattern goes wrong: the stray ')', the unclosed '(' or '[' or the
// trailing backslash for those errors, else the end of the shortest prefix that fails with
// the same error.
func errorPos(p string, code syntax.ErrorCode) int {
	var open []int
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '\\':
			if i+1 >= len(p) && code == syntax.ErrIllegalEndEscape {
				return runeOffset(p, i)
			}
			i++
		case '[':
			j := classEnd(p, i)
			if j < 0 {
				if code == syntax.ErrUnterminatedBracket {
					return runeOffset(p, i)
				}
				i = len(p)
				continue
			}
			i = j - 1
		case '(':
			open = append(open, i)
		case ')':
			if len(open) == 0 {
				if code == syntax.ErrUnexpectedParen {
					return runeOffset(p, i)
				}
				continue
			}
			open = open[:len(open)-1]
		}
	}
	if len(open) > 0 && code == syntax.ErrMissingParen {
		return runeOffset(p, open[len(open)-1])
	}
	for i := 1; i <= len(p); i++ {
		_, err := regexp2.Compile(p[:i], regexp2.ECMAScript|regexp2.RE2)
		var se *syntax.Error
		if errors.As(err, &se) && se.Code == code {
			return runeOffset(p, i-1)
		}
	}
	return -1
}

func runeOffset(s string, byteOff int) int {
	return len([]rune(s[:byteOff]))
}

// stdRegexUnsupported names syntax regexp2 accepts but C++ std::regex (ECMAScript) rejects,
// so llama.cpp would fail to load the model; "" when there is none.
func stdRegexUnsupported(p string) string {
	toks, ok := scanRegex(p)
	if !ok {
		return ""
	}
	for i, t := range toks {
		text := p[t.start:t.end]
		switch t.kind {
		case tokOpen:
			switch text {
			case "(", "(?:", "(?=", "(?!":
			default:
				return fmt.Sprintf("the group '%s' (lookbehind, named groups, inline flags and atomic groups are not ECMAScript)", text)
			}
		case tokEscape:
			if strings.ContainsAny(text[1:], "pPkAzZGQE") {
				return fmt.Sprintf("the escape '%s'", text)
			}
		case tokQuant:
			if i+1 < len(toks) && toks[i+1].kind == tokQuant && toks[i+1].start == t.end && p[t.end] == '+' {
				return fmt.Sprintf("the possessive quantifier '%s'", p[t.start:t.end+1])
			}
		}
	}
	return ""
}

// escapeBareDots escapes every '.' that is not followed by a quantifier, turning the
// pattern into what its author most likely meant by "blk.1." (the dots as literal dots).
// It reports false when the pattern has no such dot.
func escapeBareDots(p string) (string, bool) {
	toks, ok := scanRegex(p)
	if !ok {
		return p, false
	}
	var b strings.Builder
	changed := false
	for i, t := range toks {
		if t.kind == tokDot && (i+1 >= len(toks) || toks[i+1].kind != tokQuant) {
			b.WriteString(`\.`)
			changed = true
			continue
		}
		b.WriteString(p[t.start:t.end])
	}
	return b.String(), changed
}
