package grammar

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Limits on what Parse accepts. They keep hostile grammar text from costing
// unbounded time or memory: every grammar llama.cpp ships fits well inside them.
const (
	// MaxGrammarBytes is the largest grammar text Parse reads.
	MaxGrammarBytes = 1 << 20
	// MaxNesting is how deeply parenthesised groups may nest.
	MaxNesting = 256
	// MaxRepetition bounds repetition counts, as llama.cpp's parser does: a
	// minimum above it is an error, a maximum above it means "no maximum", and
	// nested repetitions whose copies multiply to it or more are an error.
	MaxRepetition = 2000
	// MaxElements bounds the size of the compiled rules (after repetitions are
	// expanded), counted in grammar elements of 8 bytes each.
	MaxElements = 1 << 21
)

// ParseError reports why a grammar text was refused and, where the fault has
// a place, where it is. Line and Column start at 1; Column counts characters
// (code points). Both are 0 for faults of the grammar as a whole, such as a
// missing root rule.
type ParseError struct {
	Line, Column int
	Msg          string
}

func (e *ParseError) Error() string {
	if e.Line == 0 {
		return "grammar: " + e.Msg
	}
	return fmt.Sprintf("grammar:%d:%d: %s", e.Line, e.Column, e.Msg)
}

// elemKind mirrors the element types of llama.cpp's compiled grammars, so that
// repetition expansion and stack semantics match it exactly.
type elemKind uint8

const (
	kindEnd            elemKind = iota // end of a rule
	kindAlt                            // start of the next alternative of a rule
	kindRuleRef                        // reference to a rule; value is its id
	kindChar                           // a character, or the first of a positive class
	kindCharNot                        // the first character of a negated class
	kindCharRangeUpper                 // makes the preceding character a range ending here
	kindCharAlt                        // a further character of the same class
	kindCharAny                        // any character (.)
)

type element struct {
	kind  elemKind
	value uint32
}

// isCharStart reports whether e begins a terminal (a character or class).
func (e element) isCharStart() bool {
	return e.kind == kindChar || e.kind == kindCharNot || e.kind == kindCharAny
}

// endsAlternative reports whether e closes an alternative.
func (e element) endsAlternative() bool { return e.kind == kindEnd || e.kind == kindAlt }

// Grammar is a parsed, checked GBNF grammar. It is immutable and safe to
// share between goroutines; each generation needs its own Matcher.
type Grammar struct {
	elems     []element // every rule, one after another, each closed by kindEnd
	ruleStart []int32   // index in elems of each rule's first element
	ruleNames []string  // name of each rule id; generated rules are "name_N"
	root      int
	initial   [][]int32 // the stacks before any input, computed once by Parse

	spare spareTables // caches of released matchers, for the next ones
}

// Rules reports how many rules the grammar compiled to, counting the rules
// generated for groups and repetitions as llama.cpp does.
func (g *Grammar) Rules() int { return len(g.ruleStart) }

type parser struct {
	src     string
	pos     int
	depth   int
	symbols map[string]uint32
	names   []string
	// firstRef is where a name was first used, for "undefined rule" errors;
	// defined is where its definition (or, for a generated rule, the group or
	// repetition it came from) starts.
	firstRef []int
	defined  []int
	rules    [][]element
	built    int // elements produced so far, charged against MaxElements
}

// failure carries a ParseError up through the recursive descent; Parse
// recovers only this type.
type failure struct{ err *ParseError }

func (p *parser) failAt(offset int, format string, args ...any) {
	panic(failure{p.errorAt(offset, fmt.Sprintf(format, args...))})
}

func (p *parser) errorAt(offset int, msg string) *ParseError {
	if offset < 0 {
		return &ParseError{Msg: msg}
	}
	offset = min(offset, len(p.src))
	// Lines end at "\n", "\r\n" or a lone "\r", as the grammar syntax allows.
	line, lineStart := 1, 0
	for i := 0; i < offset; i++ {
		if c := p.src[i]; c == '\n' || c == '\r' && (i+1 >= len(p.src) || p.src[i+1] != '\n') {
			line, lineStart = line+1, i+1
		}
	}
	return &ParseError{Line: line, Column: 1 + utf8.RuneCountInString(p.src[lineStart:offset]), Msg: msg}
}

// Parse parses GBNF grammar text as llama.cpp does and checks it: every
// referenced rule is defined, a rule named root exists, no rule is left
// recursive, and the limits above hold. Errors are *ParseError.
func Parse(text string) (g *Grammar, err error) {
	if len(text) > MaxGrammarBytes {
		return nil, &ParseError{Msg: fmt.Sprintf("grammar text is %d bytes, more than the limit of %d", len(text), MaxGrammarBytes)}
	}
	p := &parser{src: text, symbols: map[string]uint32{}}
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(failure)
			if !ok {
				panic(r)
			}
			g, err = nil, f.err
		}
	}()
	p.parseGrammar()
	return p.compile()
}

func isWordChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-'
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func (p *parser) peek() byte {
	if p.pos < len(p.src) {
		return p.src[p.pos]
	}
	return 0
}

func (p *parser) atEnd() bool { return p.pos >= len(p.src) }

// skipSpace skips blanks and comments; newlines too where the syntax allows
// them (after "::=", after "|", inside parentheses).
func (p *parser) skipSpace(newlines bool) {
	for p.pos < len(p.src) {
		switch c := p.src[p.pos]; {
		case c == ' ' || c == '\t':
			p.pos++
		case c == '#':
			for p.pos < len(p.src) && p.src[p.pos] != '\n' && p.src[p.pos] != '\r' {
				p.pos++
			}
		case newlines && (c == '\n' || c == '\r'):
			p.pos++
		default:
			return
		}
	}
}

func (p *parser) parseName() string {
	start := p.pos
	for p.pos < len(p.src) && isWordChar(p.src[p.pos]) {
		p.pos++
	}
	if p.pos == start {
		p.failAt(start, "expected a rule name, found %s", p.describeHere())
	}
	return p.src[start:p.pos]
}

// describeHere names what is at the current position, for error messages.
func (p *parser) describeHere() string {
	if p.atEnd() {
		return "the end of the grammar"
	}
	r, _ := utf8.DecodeRuneInString(p.src[p.pos:])
	return strconv.QuoteRune(r)
}

func (p *parser) symbolID(name string, refAt int) uint32 {
	if id, ok := p.symbols[name]; ok {
		return id
	}
	id := uint32(len(p.names))
	p.symbols[name] = id
	p.names = append(p.names, name)
	p.firstRef = append(p.firstRef, refAt)
	p.defined = append(p.defined, -1)
	return id
}

// generateSymbol makes a rule for a group or repetition inside rule base,
// named as llama.cpp names it so rule ids and names match its parser.
func (p *parser) generateSymbol(base string, at int) uint32 {
	id := p.symbolID(base+"_"+strconv.Itoa(len(p.names)), at)
	p.defined[id] = at
	return id
}

func (p *parser) charge(n int, at int) {
	p.built += n
	if p.built > MaxElements {
		p.failAt(at, "grammar expands to more than %d elements (repetitions are expanded into copies)", MaxElements)
	}
}

func (p *parser) addRule(id uint32, rule []element) {
	for len(p.rules) <= int(id) {
		p.rules = append(p.rules, nil)
	}
	p.rules[id] = rule
}

func (p *parser) parseGrammar() {
	p.skipSpace(true)
	for !p.atEnd() {
		p.parseRule()
	}
}

func (p *parser) parseRule() {
	start := p.pos
	name := p.parseName()
	p.skipSpace(false)
	if !strings.HasPrefix(p.src[p.pos:], "::=") {
		p.failAt(p.pos, "expected '::=' after rule name %q, found %s", name, p.describeHere())
	}
	p.pos += 3
	p.skipSpace(true)
	id := p.symbolID(name, -1)
	// A second definition replaces the first, as in llama.cpp.
	p.defined[id] = start
	p.parseAlternates(name, id, false)
	switch {
	case strings.HasPrefix(p.src[p.pos:], "\r\n"):
		p.pos += 2
	case p.peek() == '\n' || p.peek() == '\r':
		p.pos++
	case !p.atEnd():
		p.failAt(p.pos, "unexpected %s in rule %q; expected a newline or the end of the grammar", p.describeHere(), name)
	}
	p.skipSpace(true)
}

func (p *parser) parseAlternates(name string, id uint32, nested bool) {
	var rule []element
	rule = p.parseSequence(name, rule, nested)
	for p.peek() == '|' {
		rule = append(rule, element{kind: kindAlt})
		p.pos++
		p.skipSpace(true)
		rule = p.parseSequence(name, rule, nested)
	}
	rule = append(rule, element{kind: kindEnd})
	p.addRule(id, rule)
}

// noMaximum marks an open-ended repetition.
const noMaximum = -1

func (p *parser) parseSequence(name string, rule []element, nested bool) []element {
	// lastItem is where the item a repetition operator applies to starts;
	// copiesSoFar is how many rules that item already stands for, so nested
	// repetitions are bounded by the product of their counts, as in llama.cpp.
	lastItem := len(rule)
	copiesSoFar := 1
	for !p.atEnd() {
		start := p.pos
		c := p.src[p.pos]
		switch {
		case c == '"':
			p.pos++
			lastItem, copiesSoFar = len(rule), 1
			for {
				if p.atEnd() {
					p.failAt(start, "unterminated string literal")
				}
				if p.src[p.pos] == '"' {
					break
				}
				p.charge(1, start)
				rule = append(rule, element{kindChar, p.parseChar(start)})
			}
			p.pos++
			p.skipSpace(nested)
		case c == '[':
			p.pos++
			first := kindChar
			if p.peek() == '^' {
				p.pos++
				first = kindCharNot
			}
			lastItem, copiesSoFar = len(rule), 1
			for {
				if p.atEnd() {
					p.failAt(start, "unterminated character class")
				}
				if p.src[p.pos] == ']' {
					break
				}
				kind := first
				if len(rule) > lastItem {
					kind = kindCharAlt
				}
				p.charge(2, start)
				rule = append(rule, element{kind, p.parseChar(start)})
				if p.peek() == '-' && p.pos+1 < len(p.src) && p.src[p.pos+1] != ']' {
					p.pos++
					rule = append(rule, element{kindCharRangeUpper, p.parseChar(start)})
				}
			}
			if len(rule) == lastItem {
				// llama.cpp silently compiles [] and [^] to nothing (matching
				// the empty string); that is never what was meant.
				p.failAt(start, "empty character class")
			}
			p.pos++
			p.skipSpace(nested)
		case c == '<' || c == '!':
			p.failAt(start, "token references (<[id]>, <token>, !<...>) are not supported")
		case isWordChar(c):
			ref := p.symbolID(p.parseName(), start)
			p.skipSpace(nested)
			lastItem, copiesSoFar = len(rule), 1
			p.charge(1, start)
			rule = append(rule, element{kindRuleRef, ref})
		case c == '(':
			if p.depth >= MaxNesting {
				p.failAt(start, "parentheses nested more than %d deep", MaxNesting)
			}
			p.pos++
			p.skipSpace(true)
			before := len(p.names)
			sub := p.generateSymbol(name, start)
			p.depth++
			p.parseAlternates(name, sub, true)
			p.depth--
			copiesSoFar = max(1, len(p.names)-before)
			lastItem = len(rule)
			p.charge(1, start)
			rule = append(rule, element{kindRuleRef, sub})
			if p.peek() != ')' {
				p.failAt(p.pos, "expected ')' to close the '(' at %s, found %s", p.lineCol(start), p.describeHere())
			}
			p.pos++
			p.skipSpace(nested)
		case c == '.':
			p.pos++
			p.skipSpace(nested)
			lastItem, copiesSoFar = len(rule), 1
			p.charge(1, start)
			rule = append(rule, element{kind: kindCharAny})
		case c == '*' || c == '+' || c == '?':
			p.pos++
			p.skipSpace(nested)
			minTimes, maxTimes := 0, noMaximum
			if c == '+' {
				minTimes = 1
			} else if c == '?' {
				maxTimes = 1
			}
			rule = p.repeat(name, rule, lastItem, &copiesSoFar, minTimes, maxTimes, start)
		case c == '{':
			p.pos++
			p.skipSpace(nested)
			minTimes := p.parseCount("{")
			p.skipSpace(nested)
			maxTimes := noMaximum
			switch p.peek() {
			case '}':
				maxTimes = minTimes
			case ',':
				p.pos++
				p.skipSpace(nested)
				if isDigit(p.peek()) {
					maxTimes = p.parseCount(",")
					p.skipSpace(nested)
				}
				if p.peek() != '}' {
					p.failAt(p.pos, "expected '}' to close the repetition at %s, found %s", p.lineCol(start), p.describeHere())
				}
			default:
				p.failAt(p.pos, "expected ',' or '}' in the repetition at %s, found %s", p.lineCol(start), p.describeHere())
			}
			p.pos++
			p.skipSpace(nested)
			if minTimes > MaxRepetition {
				p.failAt(start, "repetition minimum %d is more than the limit of %d", minTimes, MaxRepetition)
			}
			if maxTimes > MaxRepetition {
				// llama.cpp reads an over-large maximum as "no maximum".
				maxTimes = noMaximum
			}
			if maxTimes != noMaximum && maxTimes < minTimes {
				p.failAt(start, "repetition maximum %d is less than its minimum %d", maxTimes, minTimes)
			}
			rule = p.repeat(name, rule, lastItem, &copiesSoFar, minTimes, maxTimes, start)
		default:
			return rule
		}
	}
	return rule
}

// parseCount reads a decimal repetition count, saturating far above
// MaxRepetition so that huge numbers cannot overflow.
func (p *parser) parseCount(after string) int {
	if !isDigit(p.peek()) {
		p.failAt(p.pos, "expected a number after '%s', found %s", after, p.describeHere())
	}
	n := 0
	for isDigit(p.peek()) {
		n = min(n*10+int(p.src[p.pos]-'0'), 1<<30)
		p.pos++
	}
	return n
}

func (p *parser) lineCol(offset int) string {
	e := p.errorAt(offset, "")
	return fmt.Sprintf("%d:%d", e.Line, e.Column)
}

// repeat rewrites the item rule[lastItem:] repeated minTimes to maxTimes
// times, as llama.cpp does: the item is copied minTimes times in place, then
// followed by a chain of optional rules,
//
//	S{m,n}  ->  S…S (m times) R1   with Rk ::= S R(k+1) |  and the last ::= S |
//	S{m,}   ->  S…S (m times) R    with R  ::= S R |
//
// so *, + and ? are {0,}, {1,} and {0,1}.
func (p *parser) repeat(name string, rule []element, lastItem int, copiesSoFar *int, minTimes, maxTimes int, at int) []element {
	if lastItem == len(rule) {
		p.failAt(at, "%q has no item before it to repeat", p.src[at])
	}
	item := slices.Clone(rule[lastItem:])
	copies := 1
	if maxTimes > 0 {
		copies = maxTimes
	} else if minTimes > 0 {
		copies = minTimes
	}
	if *copiesSoFar*copies >= MaxRepetition {
		p.failAt(at, "nested repetitions make %d × %d copies, more than the limit of %d", *copiesSoFar, copies, MaxRepetition)
	}
	if minTimes == 0 {
		rule = rule[:lastItem]
	} else {
		p.charge(len(item)*(minTimes-1), at)
		for range minTimes - 1 {
			rule = append(rule, item...)
		}
	}
	optional := 1
	if maxTimes != noMaximum {
		optional = maxTimes - minTimes
	}
	var previous uint32
	for i := range optional {
		id := p.generateSymbol(name, at)
		p.charge(len(item)+3, at)
		rec := slices.Grow(slices.Clone(item), 3)
		if maxTimes == noMaximum {
			rec = append(rec, element{kindRuleRef, id})
		} else if i > 0 {
			rec = append(rec, element{kindRuleRef, previous})
		}
		rec = append(rec, element{kind: kindAlt}, element{kind: kindEnd})
		p.addRule(id, rec)
		previous = id
	}
	if optional > 0 {
		p.charge(1, at)
		rule = append(rule, element{kindRuleRef, previous})
	}
	*copiesSoFar *= copies
	return rule
}

// parseChar reads one character of a literal or class: a UTF-8 encoded code
// point or an escape. literalAt is where the literal or class began.
func (p *parser) parseChar(literalAt int) uint32 {
	if p.src[p.pos] != '\\' {
		r, size := utf8.DecodeRuneInString(p.src[p.pos:])
		if r == utf8.RuneError && size == 1 {
			p.failAt(p.pos, "invalid UTF-8 in grammar text")
		}
		p.pos += size
		return uint32(r)
	}
	start := p.pos
	if p.pos+1 >= len(p.src) {
		p.failAt(literalAt, "unterminated escape at the end of the grammar")
	}
	esc := p.src[p.pos+1]
	p.pos += 2
	switch esc {
	case 'x':
		return p.parseHex(start, 2)
	case 'u':
		return p.parseHex(start, 4)
	case 'U':
		return p.parseHex(start, 8)
	case 't':
		return '\t'
	case 'r':
		return '\r'
	case 'n':
		return '\n'
	case '\\', '"', '[', ']':
		return uint32(esc)
	}
	r, _ := utf8.DecodeRuneInString(p.src[start+1:])
	p.failAt(start, "unknown escape \\%c (known: \\n \\t \\r \\\\ \\\" \\[ \\] \\xHH \\uHHHH \\UHHHHHHHH)", r)
	return 0
}

func (p *parser) parseHex(escapeAt int, digits int) uint32 {
	var v uint32
	for range digits {
		var d byte
		switch c := p.peek(); {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			p.failAt(escapeAt, "escape %s needs %d hex digits", p.src[escapeAt:escapeAt+2], digits)
		}
		v = v<<4 | uint32(d)
		p.pos++
	}
	if v > utf8.MaxRune {
		p.failAt(escapeAt, "escape %s is beyond the last Unicode code point U+10FFFF", p.src[escapeAt:p.pos])
	}
	return v
}

// compile checks the parsed rules and lays them out for matching.
func (p *parser) compile() (*Grammar, error) {
	if len(p.names) == 0 {
		return nil, &ParseError{Msg: "grammar has no rules"}
	}
	for id := range p.names {
		if id >= len(p.rules) || p.rules[id] == nil {
			return nil, p.errorAt(p.firstRef[id], fmt.Sprintf("undefined rule %q", p.names[id]))
		}
	}
	root, ok := p.symbols["root"]
	if !ok {
		return nil, &ParseError{Msg: "grammar has no root rule (a rule named root is where matching starts)"}
	}
	if id, found := p.leftRecursive(); found {
		name := p.names[id]
		if base, _, generated := strings.Cut(name, "_"); generated {
			name = fmt.Sprintf("%s (in a group or repetition of rule %q)", name, base)
		} else {
			name = strconv.Quote(name)
		}
		return nil, p.errorAt(p.defined[id], "left recursion: rule "+name+" can begin with itself, which llama.cpp's matcher cannot follow")
	}
	g := &Grammar{ruleNames: p.names, root: int(root), ruleStart: make([]int32, len(p.rules))}
	total := 0
	for _, r := range p.rules {
		total += len(r)
	}
	g.elems = make([]element, 0, total)
	for id, r := range p.rules {
		g.ruleStart[id] = int32(len(g.elems))
		g.elems = append(g.elems, r...)
	}
	initial, err := g.initialStacks()
	if err != nil {
		return nil, &ParseError{Msg: "the root rule cannot be started: " + err.Error()}
	}
	size := 0
	for _, st := range initial {
		size += len(st) + 1
	}
	if size > tableSoftElements {
		return nil, &ParseError{Msg: fmt.Sprintf("the root rule starts with %d parse stacks of %d elements in all, more than the limit of %d", len(initial), size, tableSoftElements)}
	}
	g.initial = initial
	return g, nil
}

// leftRecursive looks for a rule that can begin with itself, the way
// llama.cpp does: a rule counts as possibly empty only when one of its
// alternatives is written empty. It walks the rules depth first with its own
// stack so that a long chain of rules cannot exhaust the goroutine stack.
func (p *parser) leftRecursive() (uint32, bool) {
	n := len(p.rules)
	visited := make([]bool, n)
	inProgress := make([]bool, n)
	mayBeEmpty := make([]bool, n)
	type frame struct {
		rule    uint32
		next    int  // index of the next element to look at
		leading bool // whether rule[next] can come first in its alternative
	}
	var stack []frame
	enter := func(id uint32) {
		inProgress[id] = true
		atStart := true
		for _, e := range p.rules[id] {
			if e.endsAlternative() {
				if atStart {
					mayBeEmpty[id] = true
					break
				}
				atStart = true
			} else {
				atStart = false
			}
		}
		stack = append(stack, frame{rule: id, leading: true})
	}
	for start := range n {
		if visited[start] {
			continue
		}
		enter(uint32(start))
		for len(stack) > 0 {
			f := &stack[len(stack)-1]
			rule := p.rules[f.rule]
			if f.next >= len(rule) {
				inProgress[f.rule] = false
				visited[f.rule] = true
				done := f.rule
				stack = stack[:len(stack)-1]
				if len(stack) > 0 {
					parent := &stack[len(stack)-1]
					parent.leading = mayBeEmpty[done]
					parent.next++
				}
				continue
			}
			e := rule[f.next]
			switch {
			case e.kind == kindRuleRef && f.leading:
				if inProgress[e.value] {
					return e.value, true
				}
				if visited[e.value] {
					f.leading = mayBeEmpty[e.value]
					f.next++
				} else {
					enter(e.value)
				}
			case e.endsAlternative():
				f.leading = true
				f.next++
			default:
				f.leading = false
				f.next++
			}
		}
	}
	return 0, false
}

// errLimit marks matching failures caused by this package's limits rather
// than by the grammar refusing the text.
var errLimit = errors.New("grammar: matching limit")
