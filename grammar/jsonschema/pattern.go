package jsonschema

import (
	"strconv"
	"strings"
)

// maxPatternDepth bounds group nesting in a pattern (as llama.cpp does).
const maxPatternDepth = 100

// patternError is a pattern the translator cannot turn into grammar.
// invalid means the pattern is not a regular expression at all (an error);
// otherwise it is a valid regex outside the supported subset (a warning,
// and the string is left unconstrained, as in llama.cpp).
type patternError struct {
	msg     string
	invalid bool
}

func (e *patternError) Error() string { return e.msg }

func unsupportedPattern(msg string) *patternError { return &patternError{msg: msg} }
func invalidPattern(msg string) *patternError     { return &patternError{msg: msg, invalid: true} }

// visitPattern adds the rule for a string matching pattern. Rules added by a
// translation that fails half-way are taken back (from a log of the
// changes, not a copy of all rules, which would make many patterns cost
// quadratic time), so they do not leak into the grammar.
func (c *converter) visitPattern(pattern, ruleName string, path *schemaPath) string {
	c.spend(1 + len(pattern)/64)
	var undo []ruleChange
	c.undo = &undo
	name, err := c.patternRule(pattern, ruleName)
	c.undo = nil
	if err == nil {
		return name
	}
	for i := len(undo) - 1; i >= 0; i-- {
		u := undo[i]
		if u.existed {
			c.rules[u.name] = u.old
		} else {
			c.ruleBytes -= len(u.name) + len(c.rules[u.name])
			delete(c.rules, u.name)
		}
	}
	if err.invalid {
		c.fail(path, "invalid pattern %q: %s", pattern, err.msg)
	}
	c.warn(path.String() + ": pattern " + strconv.Quote(truncate(pattern)) + " is not supported (" + err.msg + "); accepting any string")
	return c.addRule(ruleName, c.addPrimitive("string", primitiveRules["string"]))
}

// patternSpecials end a run of literal text in a pattern; escapedLiterals
// are the same characters, which a backslash turns into literals.
const (
	patternSpecials = "|.()[]{}*+?^$"
	escapedLiterals = "^$.[]()|{}*+?"
)

// patternTranslator turns the supported regex subset into a GBNF expression:
// literals, ".", [classes] (with the escapes GBNF itself understands),
// groups (capturing or "(?:"), "|", and the quantifiers * + ? {n} {n,} {n,m}.
// The pattern must be anchored with ^ and $, since a grammar always matches
// the whole string.
type patternTranslator struct {
	c          *converter
	name       string
	src        string // the pattern without its anchors
	pos        int
	parenDepth int
	subRuleIDs map[string]string // repeated sub-expression -> its rule name
}

// seqItem is one element of a sequence: literal text (merged with adjacent
// literals and quoted at the end) or a grammar expression.
type seqItem struct {
	text    string
	literal bool
}

func (s seqItem) rule() string {
	if s.literal {
		return `"` + s.text + `"`
	}
	return s.text
}

func (c *converter) patternRule(pattern, name string) (string, *patternError) {
	if len(pattern) < 2 || pattern[0] != '^' || pattern[len(pattern)-1] != '$' {
		return "", unsupportedPattern("not anchored with '^' and '$'")
	}
	t := &patternTranslator{c: c, name: name, src: pattern[1 : len(pattern)-1], subRuleIDs: map[string]string{}}
	expr, err := t.sequence()
	if err != nil {
		return "", err
	}
	if t.parenDepth != 0 {
		return "", invalidPattern("unbalanced parentheses")
	}
	return c.addRule(name, `"\"" (`+expr+`) "\""`), nil
}

func (t *patternTranslator) dot() string {
	if t.c.dotAll {
		return t.c.addRule("dot", `[\U00000000-\U0010FFFF]`)
	}
	return t.c.addRule("dot", `[^\x0A\x0D]`)
}

// join renders a sequence, merging consecutive literals into one.
func join(seq []seqItem) string {
	var parts []string
	var literal strings.Builder
	flush := func() {
		if literal.Len() > 0 {
			parts = append(parts, `"`+literal.String()+`"`)
			literal.Reset()
		}
	}
	for _, item := range seq {
		if item.literal {
			literal.WriteString(item.text)
			continue
		}
		flush()
		parts = append(parts, item.text)
	}
	flush()
	return strings.Join(parts, " ")
}

// sequence translates up to the ")" closing the current group (consumed) or
// the end of the pattern.
func (t *patternTranslator) sequence() (string, *patternError) {
	var seq []seqItem
	src := t.src
	for t.pos < len(src) {
		t.c.spend(1)
		ch := src[t.pos]
		switch {
		case ch == '.':
			seq = append(seq, seqItem{text: t.dot()})
			t.pos++
		case ch == '(':
			t.pos++
			if t.pos < len(src) && src[t.pos] == '?' {
				if t.pos+1 < len(src) && src[t.pos+1] == ':' {
					t.pos += 2 // a non-capturing group is just a group here
				} else {
					return "", unsupportedPattern("unsupported group syntax")
				}
			}
			t.parenDepth++
			if t.parenDepth > maxPatternDepth {
				return "", unsupportedPattern("pattern nesting too deep")
			}
			inner, err := t.sequence()
			if err != nil {
				return "", err
			}
			seq = append(seq, seqItem{text: "(" + inner + ")"})
		case ch == ')':
			t.pos++
			if t.parenDepth == 0 {
				return "", invalidPattern("unbalanced parentheses")
			}
			t.parenDepth--
			return join(seq), nil
		case ch == '^' || ch == '$':
			return "", unsupportedPattern("anchor inside the pattern")
		case ch == '[':
			class, err := t.charClass()
			if err != nil {
				return "", err
			}
			seq = append(seq, seqItem{text: class})
		case ch == '|':
			seq = append(seq, seqItem{text: "|"})
			t.pos++
		case ch == '*' || ch == '+' || ch == '?':
			if len(seq) == 0 {
				return "", invalidPattern("nothing to repeat")
			}
			seq[len(seq)-1] = seqItem{text: seq[len(seq)-1].rule() + string(ch)}
			t.pos++
		case ch == '{':
			minCount, maxCount, err := t.braces()
			if err != nil {
				return "", err
			}
			if len(seq) == 0 {
				return "", invalidPattern("nothing to repeat")
			}
			last := seq[len(seq)-1]
			item := `"` + last.text + `"`
			if !last.literal {
				// A repeated expression gets a rule of its own, so {n,m}
				// repeats a name rather than the whole text.
				id, ok := t.subRuleIDs[last.text]
				if !ok {
					id = t.c.addRule(t.name+"-"+strconv.Itoa(len(t.subRuleIDs)+1), last.text)
					t.subRuleIDs[last.text] = id
				}
				item = id
			}
			seq[len(seq)-1] = seqItem{text: repetition(item, minCount, maxCount, "")}
		default:
			literal, err := t.literalRun()
			if err != nil {
				return "", err
			}
			if literal == "" { // a stray ']' or '}'
				return "", unsupportedPattern("unsupported character: " + string(ch))
			}
			seq = append(seq, seqItem{text: literal, literal: true})
		}
	}
	return join(seq), nil
}

// charClass copies a [...] class through, escapes and all; only escapes
// GBNF understands the same way are allowed.
func (t *patternTranslator) charClass() (string, *patternError) {
	src := t.src
	var b strings.Builder
	b.WriteByte('[')
	t.pos++
	for t.pos < len(src) && src[t.pos] != ']' {
		if src[t.pos] == '\\' {
			n := gbnfEscapeLength(src, t.pos)
			if n == 0 {
				return "", unsupportedPattern("unsupported escape in character class: " + src[t.pos:min(t.pos+2, len(src))])
			}
			b.WriteString(src[t.pos : t.pos+n])
			t.pos += n
			continue
		}
		b.WriteByte(src[t.pos])
		t.pos++
	}
	if t.pos >= len(src) {
		return "", invalidPattern("unterminated character class")
	}
	b.WriteByte(']')
	t.pos++
	return b.String(), nil
}

// braces reads a {n}, {n,}, {,m} or {n,m} quantifier.
func (t *patternTranslator) braces() (int, int, *patternError) {
	src := t.src
	start := t.pos + 1
	end := strings.IndexByte(src[start:], '}')
	if end < 0 {
		t.pos = len(src)
		return 0, 0, unsupportedPattern("unterminated curly brackets")
	}
	body := src[start : start+end]
	t.pos = start + end + 1
	nums := strings.Split(body, ",")
	minCount, maxCount := 0, unbounded
	var ok bool
	switch len(nums) {
	case 1:
		if minCount, ok = cInt(nums[0]); !ok {
			return 0, 0, unsupportedPattern("invalid number in curly brackets")
		}
		maxCount = minCount
	case 2:
		if nums[0] != "" {
			if minCount, ok = cInt(nums[0]); !ok {
				return 0, 0, unsupportedPattern("invalid number in curly brackets")
			}
		}
		if nums[1] != "" {
			if maxCount, ok = cInt(nums[1]); !ok {
				return 0, 0, unsupportedPattern("invalid number in curly brackets")
			}
		}
	default:
		return 0, 0, unsupportedPattern("wrong number of values in curly brackets")
	}
	if minCount < 0 || maxCount < 0 {
		return 0, 0, unsupportedPattern("negative count in curly brackets")
	}
	if minCount > maxCount {
		return 0, 0, invalidPattern("min repeat greater than max repeat")
	}
	return minCount, maxCount, nil
}

// cInt reads a count the way C's stoi does (leading blanks, a sign, digits,
// anything after them ignored), refusing values outside a C int.
func cInt(s string) (int, bool) {
	s = strings.TrimLeft(s, " \t\n\v\f\r")
	digits := s
	if strings.HasPrefix(s, "+") || strings.HasPrefix(s, "-") {
		digits = s[1:]
	}
	end := 0
	for end < len(digits) && digits[end] >= '0' && digits[end] <= '9' {
		end++
	}
	if end == 0 {
		return 0, false
	}
	n, err := strconv.ParseInt(s[:len(s)-len(digits)+end], 10, 32)
	if err != nil {
		return 0, false
	}
	return int(n), true
}

// literalRun consumes literal characters. A character directly before a
// quantifier is left for the next round, so the quantifier applies to it
// alone (in "ab*" only the "b" repeats).
func (t *patternTranslator) literalRun() (string, *patternError) {
	src := t.src
	var literal strings.Builder
	for t.pos < len(src) {
		t.c.spend(1)
		ch := src[t.pos]
		switch {
		case ch == '\\':
			if t.pos == len(src)-1 {
				return "", invalidPattern("trailing backslash")
			}
			next := src[t.pos+1]
			if strings.IndexByte(escapedLiterals, next) >= 0 {
				literal.WriteByte(next)
				t.pos += 2
				continue
			}
			n := gbnfEscapeLength(src, t.pos)
			if n == 0 {
				return "", unsupportedPattern("unsupported escape: " + src[t.pos:t.pos+2])
			}
			literal.WriteString(src[t.pos : t.pos+n])
			t.pos += n
		case ch == '"':
			literal.WriteString(`\"`)
			t.pos++
		case !isPatternSpecial(ch) && (t.pos == len(src)-1 || literal.Len() == 0 || src[t.pos+1] == '.' || !isPatternSpecial(src[t.pos+1])):
			literal.WriteByte(ch)
			t.pos++
		default:
			return literal.String(), nil
		}
	}
	return literal.String(), nil
}

func isPatternSpecial(ch byte) bool { return strings.IndexByte(patternSpecials, ch) >= 0 }

// gbnfEscapeLength returns the length of the escape at pattern[pos] when it
// means the same in a regex and in GBNF (\t \r \n \\ \" \[ \], \xHH, \uHHHH,
// \UHHHHHHHH), or 0.
func gbnfEscapeLength(pattern string, pos int) int {
	if pos+1 >= len(pattern) || pattern[pos] != '\\' {
		return 0
	}
	hexDigits := 0
	switch pattern[pos+1] {
	case 'x':
		hexDigits = 2
	case 'u':
		hexDigits = 4
	case 'U':
		hexDigits = 8
	case 't', 'r', 'n', '\\', '"', '[', ']':
		return 2
	default:
		return 0
	}
	if pos+2+hexDigits > len(pattern) {
		return 0
	}
	for _, h := range []byte(pattern[pos+2 : pos+2+hexDigits]) {
		if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
			return 0
		}
	}
	return 2 + hexDigits
}
