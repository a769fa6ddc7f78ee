package jinja

import (
	"fmt"
	"slices"
)

// maxParseNesting bounds how deeply brackets, unary operators and blocks nest in a
// template's source: the parser recurses once per level, and a hostile template with
// 100,000 open parentheses must be a syntax error, not a stack overflow. Real chat
// templates nest a dozen levels.
const maxParseNesting = 256

type parser struct {
	tokens []token
	pos    int
	depth  int
	// names collects the names read inside the macro being parsed (nil outside macros).
	names map[string]bool
	// loops counts the for loops around the statement being parsed, within its macro:
	// break and continue need one.
	loops int
}

func (p *parser) cur() token  { return p.tokens[p.pos] }
func (p *parser) peek() token { return p.tokens[min(p.pos+1, len(p.tokens)-1)] }
func (p *parser) next() token {
	t := p.tokens[p.pos]
	if p.pos < len(p.tokens)-1 {
		p.pos++
	}
	return t
}

func (p *parser) errorf(format string, args ...any) error {
	return &Error{Line: p.cur().line, Msg: fmt.Sprintf(format, args...)}
}

func (p *parser) isOp(op string) bool   { t := p.cur(); return t.kind == tokOp && t.text == op }
func (p *parser) isName(n string) bool  { t := p.cur(); return t.kind == tokName && t.text == n }
func (p *parser) skipOp(op string) bool { return p.isOp(op) && p.advance() }
func (p *parser) skipName(n string) bool {
	return p.isName(n) && p.advance()
}
func (p *parser) advance() bool { p.next(); return true }

func (p *parser) expectOp(op string) error {
	if !p.skipOp(op) {
		return p.errorf("expected '%s', got %s", op, p.cur())
	}
	return nil
}

func (p *parser) expectName() (string, error) {
	t := p.cur()
	if t.kind != tokName {
		return "", p.errorf("expected a name, got %s", t)
	}
	p.next()
	return t.text, nil
}

func (p *parser) expectStmtClose() error {
	if p.cur().kind != tokStmtClose {
		return p.errorf("expected end of statement '%%}', got %s", p.cur())
	}
	p.next()
	return nil
}

// enter counts one level of nesting; leave undoes it.
func (p *parser) enter() error {
	p.depth++
	if p.depth > maxParseNesting {
		return &Error{Line: p.cur().line, Err: ErrLimit, Msg: fmt.Sprintf("template nests deeper than %d levels", maxParseNesting)}
	}
	return nil
}

func (p *parser) leave() { p.depth-- }

// parseBody parses statements until one of the end tags (a name after "{%") is next,
// which it leaves unconsumed; at the end of the template it fails unless ends is empty.
func (p *parser) parseBody(ends ...string) ([]stmt, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	var body []stmt
	for {
		t := p.cur()
		switch t.kind {
		case tokEOF:
			if len(ends) > 0 {
				return nil, p.errorf("unexpected end of template, expected '%s'", ends[len(ends)-1])
			}
			return body, nil
		case tokText:
			p.next()
			body = append(body, &textStmt{text: t.text})
		case tokPrintOpen:
			p.next()
			x, err := p.parseTuple(false)
			if err != nil {
				return nil, err
			}
			if p.cur().kind != tokPrintClose {
				return nil, p.errorf("expected end of print statement '}}', got %s", p.cur())
			}
			p.next()
			body = append(body, &printStmt{x: x, line: t.line})
		case tokStmtOpen:
			if nt := p.peek(); nt.kind == tokName && slices.Contains(ends, nt.text) {
				return body, nil
			}
			p.next()
			s, err := p.parseStatement()
			if err != nil {
				return nil, err
			}
			body = append(body, s)
		default:
			return nil, p.errorf("unexpected %s", t)
		}
	}
}

// endBlock consumes "{% name %}".
func (p *parser) endBlock(name string) error {
	p.next() // {%
	p.next() // the name, which parseBody saw
	return p.expectStmtClose()
}

func (p *parser) parseStatement() (stmt, error) {
	t := p.cur()
	if t.kind != tokName {
		return nil, p.errorf("expected a statement name, got %s", t)
	}
	p.next()
	line := t.line
	switch t.text {
	case "if":
		return p.parseIf(line)
	case "for":
		return p.parseFor(line)
	case "set":
		return p.parseSet(line)
	case "macro":
		return p.parseMacro(line)
	case "call":
		return p.parseCallBlock(line)
	case "filter":
		return p.parseFilterBlock(line)
	case "with":
		return p.parseWith(line)
	case "break", "continue":
		if p.loops == 0 {
			return nil, &Error{Line: line, Msg: fmt.Sprintf("'%s' outside a loop", t.text)}
		}
		if err := p.expectStmtClose(); err != nil {
			return nil, err
		}
		if t.text == "break" {
			return &breakStmt{line: line}, nil
		}
		return &continueStmt{line: line}, nil
	case "generation", "block":
		return p.parsePlainBlock(t.text)
	case "include", "import", "from", "extends":
		return nil, &Error{Line: line, Err: ErrForbidden, Msg: fmt.Sprintf("templates cannot load other templates ('%s')", t.text)}
	}
	return nil, &Error{Line: line, Msg: fmt.Sprintf("unknown tag '%s'", t.text)}
}

func (p *parser) parseIf(line int) (stmt, error) {
	s := &ifStmt{line: line}
	for {
		cond, err := p.parseTuple(false)
		if err != nil {
			return nil, err
		}
		if err := p.expectStmtClose(); err != nil {
			return nil, err
		}
		body, err := p.parseBody("elif", "else", "endif")
		if err != nil {
			return nil, err
		}
		s.conds = append(s.conds, cond)
		s.bodies = append(s.bodies, body)
		p.next() // {%
		switch p.next().text {
		case "elif":
			continue
		case "else":
			if err := p.expectStmtClose(); err != nil {
				return nil, err
			}
			if s.els, err = p.parseBody("endif"); err != nil {
				return nil, err
			}
			return s, p.endBlock("endif")
		}
		return s, p.expectStmtClose()
	}
}

// parseTargets parses assignment targets: a name or several separated by commas,
// optionally in parentheses.
func (p *parser) parseTargets() ([]string, error) {
	paren := p.skipOp("(")
	var names []string
	for {
		n, err := p.expectName()
		if err != nil {
			return nil, err
		}
		names = append(names, n)
		if !p.skipOp(",") || p.isName("in") || p.isOp("=") || p.isOp(")") {
			break
		}
	}
	if paren {
		if err := p.expectOp(")"); err != nil {
			return nil, err
		}
	}
	return names, nil
}

func (p *parser) parseFor(line int) (stmt, error) {
	s := &forStmt{line: line}
	var err error
	if s.targets, err = p.parseTargets(); err != nil {
		return nil, err
	}
	if !p.skipName("in") {
		return nil, p.errorf("expected 'in' in for loop, got %s", p.cur())
	}
	// The iterable is a tuple without a conditional expression: "if" starts the filter.
	if s.iter, err = p.parseTupleNoCond(); err != nil {
		return nil, err
	}
	if p.skipName("if") {
		if s.filter, err = p.parseTuple(false); err != nil {
			return nil, err
		}
	}
	s.recursive = p.skipName("recursive")
	if err := p.expectStmtClose(); err != nil {
		return nil, err
	}
	p.loops++
	s.body, err = p.parseBody("endfor", "else")
	p.loops--
	if err != nil {
		return nil, err
	}
	p.next()
	if p.next().text == "else" {
		if err := p.expectStmtClose(); err != nil {
			return nil, err
		}
		if s.els, err = p.parseBody("endfor"); err != nil {
			return nil, err
		}
		return s, p.endBlock("endfor")
	}
	return s, p.expectStmtClose()
}

func (p *parser) parseSet(line int) (stmt, error) {
	if p.cur().kind == tokName && p.peek().kind == tokOp && p.peek().text == "." {
		ns := p.next().text
		p.next()
		attr, err := p.expectName()
		if err != nil {
			return nil, err
		}
		if err := p.expectOp("="); err != nil {
			return nil, err
		}
		v, err := p.parseTuple(false)
		if err != nil {
			return nil, err
		}
		return &setStmt{targets: []string{ns}, attr: attr, value: v, line: line}, p.expectStmtClose()
	}
	targets, err := p.parseTargets()
	if err != nil {
		return nil, err
	}
	if p.skipOp("=") {
		v, err := p.parseTuple(false)
		if err != nil {
			return nil, err
		}
		return &setStmt{targets: targets, value: v, line: line}, p.expectStmtClose()
	}
	if len(targets) != 1 {
		return nil, p.errorf("a block set assigns one name")
	}
	s := &setBlockStmt{target: targets[0], line: line}
	if s.filters, err = p.parseFilterChain(); err != nil {
		return nil, err
	}
	if err := p.expectStmtClose(); err != nil {
		return nil, err
	}
	if s.body, err = p.parseBody("endset"); err != nil {
		return nil, err
	}
	return s, p.endBlock("endset")
}

// parseFilterChain parses "| f(args) | g" of a set or filter block (the first "|" is
// optional in a filter block's tag).
func (p *parser) parseFilterChain() ([]*filterExpr, error) {
	var chain []*filterExpr
	for first := true; ; first = false {
		if !p.skipOp("|") && !(first && p.cur().kind == tokName) {
			return chain, nil
		}
		f, err := p.parseFilter(nil)
		if err != nil {
			return nil, err
		}
		chain = append(chain, f)
	}
}

// parseSignature parses a macro's or call block's parameters: "(a, b=1)".
func (p *parser) parseSignature(m *macroDef) error {
	if err := p.expectOp("("); err != nil {
		return err
	}
	for !p.skipOp(")") {
		if len(m.params) > 0 {
			if err := p.expectOp(","); err != nil {
				return err
			}
			if p.skipOp(")") {
				break
			}
		}
		name, err := p.expectName()
		if err != nil {
			return err
		}
		m.params = append(m.params, name)
		if p.skipOp("=") {
			d, err := p.parseExpr()
			if err != nil {
				return err
			}
			m.defaults = append(m.defaults, d)
		} else if len(m.defaults) > 0 {
			return p.errorf("non-default argument follows default argument")
		}
	}
	return nil
}

// parseMacroBody parses a macro's (or call block's) body, noting which of varargs,
// kwargs and caller it reads.
func (p *parser) parseMacroBody(m *macroDef, end string) error {
	outer, outerLoops := p.names, p.loops
	p.names, p.loops = map[string]bool{}, 0 // the body runs as a function of its own
	body, err := p.parseBody(end)
	names := p.names
	p.names, p.loops = outer, outerLoops
	for n := range names {
		if outer != nil {
			outer[n] = true
		}
	}
	if err != nil {
		return err
	}
	m.body = body
	m.usesVarargs, m.usesKwargs, m.usesCaller = names["varargs"], names["kwargs"], names["caller"]
	return p.endBlock(end)
}

func (p *parser) parseMacro(line int) (stmt, error) {
	name, err := p.expectName()
	if err != nil {
		return nil, err
	}
	m := &macroDef{name: name}
	if err := p.parseSignature(m); err != nil {
		return nil, err
	}
	if err := p.expectStmtClose(); err != nil {
		return nil, err
	}
	if err := p.parseMacroBody(m, "endmacro"); err != nil {
		return nil, err
	}
	return &macroStmt{m: m, line: line}, nil
}

func (p *parser) parseCallBlock(line int) (stmt, error) {
	caller := &macroDef{name: "caller"}
	if p.isOp("(") {
		if err := p.parseSignature(caller); err != nil {
			return nil, err
		}
	}
	x, err := p.parseExpr()
	if err != nil {
		return nil, err
	}
	call, ok := x.(*callExpr)
	if !ok {
		return nil, p.errorf("expected a call in a call block")
	}
	if err := p.expectStmtClose(); err != nil {
		return nil, err
	}
	if err := p.parseMacroBody(caller, "endcall"); err != nil {
		return nil, err
	}
	return &callBlockStmt{call: call, caller: caller, line: line}, nil
}

func (p *parser) parseFilterBlock(line int) (stmt, error) {
	s := &filterBlockStmt{line: line}
	var err error
	if s.filters, err = p.parseFilterChain(); err != nil {
		return nil, err
	}
	if len(s.filters) == 0 {
		return nil, p.errorf("expected a filter name, got %s", p.cur())
	}
	if err := p.expectStmtClose(); err != nil {
		return nil, err
	}
	if s.body, err = p.parseBody("endfilter"); err != nil {
		return nil, err
	}
	return s, p.endBlock("endfilter")
}

func (p *parser) parseWith(line int) (stmt, error) {
	s := &withStmt{line: line}
	for p.cur().kind != tokStmtClose {
		if len(s.targets) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		name, err := p.expectName()
		if err != nil {
			return nil, err
		}
		if err := p.expectOp("="); err != nil {
			return nil, err
		}
		v, err := p.parseExpr()
		if err != nil {
			return nil, err
		}
		s.targets = append(s.targets, name)
		s.values = append(s.values, v)
	}
	p.next()
	var err error
	if s.body, err = p.parseBody("endwith"); err != nil {
		return nil, err
	}
	return s, p.endBlock("endwith")
}

// parsePlainBlock parses a block rendered in place: Hugging Face's {% generation %},
// which marks the assistant's text for training masks, and {% block name %}, which
// without template inheritance is its body.
func (p *parser) parsePlainBlock(kind string) (stmt, error) {
	if kind == "block" {
		if _, err := p.expectName(); err != nil {
			return nil, err
		}
	}
	if err := p.expectStmtClose(); err != nil {
		return nil, err
	}
	body, err := p.parseBody("end" + kind)
	if err != nil {
		return nil, err
	}
	p.next()
	p.next()
	if kind == "block" && p.cur().kind == tokName {
		p.next() // {% endblock name %}
	}
	return &blockStmt{body: body}, p.expectStmtClose()
}

// Expressions, lowest precedence first, as Jinja's grammar orders them.

// parseTuple parses an expression or a tuple of them without parentheses ("a, b"); with
// explicitParen, "()" and a trailing comma are allowed.
func (p *parser) parseTuple(explicitParen bool) (expr, error) {
	return p.parseTupleOf(p.parseExpr, explicitParen)
}

func (p *parser) parseTupleNoCond() (expr, error) {
	return p.parseTupleOf(p.parseOr, false)
}

func (p *parser) parseTupleOf(item func() (expr, error), explicitParen bool) (expr, error) {
	var items []expr
	isTuple := false
	for {
		if len(items) > 0 {
			if !p.skipOp(",") {
				break
			}
			isTuple = true
		}
		if p.tupleEnds() {
			break
		}
		x, err := item()
		if err != nil {
			return nil, err
		}
		items = append(items, x)
	}
	if !isTuple {
		if len(items) == 1 {
			return items[0], nil
		}
		if !explicitParen {
			return nil, p.errorf("expected an expression, got %s", p.cur())
		}
	}
	return &tupleExpr{items: items}, nil
}

// tupleEnds reports whether the token ends a tuple (after a trailing comma).
func (p *parser) tupleEnds() bool {
	t := p.cur()
	switch t.kind {
	case tokPrintClose, tokStmtClose, tokEOF:
		return true
	case tokOp:
		return t.text == ")" || t.text == "=" || t.text == "]" || t.text == "}"
	case tokName:
		return t.text == "in" || t.text == "if" || t.text == "recursive"
	}
	return false
}

func (p *parser) parseExpr() (expr, error) {
	x, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	for p.skipName("if") {
		cond, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		c := &condExpr{cond: cond, yes: x}
		if p.skipName("else") {
			if err := p.enter(); err != nil {
				return nil, err
			}
			c.no, err = p.parseExpr()
			p.leave()
			if err != nil {
				return nil, err
			}
		}
		x = c
	}
	return x, nil
}

func (p *parser) parseOr() (expr, error) {
	l, err := p.parseAnd()
	for err == nil && p.skipName("or") {
		var r expr
		if r, err = p.parseAnd(); err == nil {
			l = &orExpr{l: l, r: r}
		}
	}
	return l, err
}

func (p *parser) parseAnd() (expr, error) {
	l, err := p.parseNot()
	for err == nil && p.skipName("and") {
		var r expr
		if r, err = p.parseNot(); err == nil {
			l = &andExpr{l: l, r: r}
		}
	}
	return l, err
}

func (p *parser) parseNot() (expr, error) {
	if p.skipName("not") {
		if err := p.enter(); err != nil {
			return nil, err
		}
		defer p.leave()
		x, err := p.parseNot()
		return &notExpr{x: x}, err
	}
	return p.parseCompare()
}

var compareOps = map[string]bool{"==": true, "!=": true, "<": true, "<=": true, ">": true, ">=": true}

func (p *parser) parseCompare() (expr, error) {
	first, err := p.parseMath1()
	if err != nil {
		return nil, err
	}
	c := &compareExpr{first: first}
	for {
		var op string
		switch t := p.cur(); {
		case t.kind == tokOp && compareOps[t.text]:
			op = t.text
			p.next()
		case p.isName("in"):
			op = "in"
			p.next()
		case p.isName("not") && p.peek().kind == tokName && p.peek().text == "in":
			op = "notin"
			p.next()
			p.next()
		default:
			if len(c.ops) == 0 {
				return first, nil
			}
			return c, nil
		}
		x, err := p.parseMath1()
		if err != nil {
			return nil, err
		}
		c.ops = append(c.ops, op)
		c.rest = append(c.rest, x)
	}
}

// parseBinary parses a left-associative chain of the operators ops over operands.
func (p *parser) parseBinary(operand func() (expr, error), ops ...string) (expr, error) {
	l, err := operand()
	if err != nil {
		return nil, err
	}
	for {
		t := p.cur()
		if t.kind != tokOp || !slices.Contains(ops, t.text) {
			return l, nil
		}
		p.next()
		r, err := operand()
		if err != nil {
			return nil, err
		}
		l = &binaryExpr{op: t.text, l: l, r: r}
	}
}

func (p *parser) parseMath1() (expr, error)  { return p.parseBinary(p.parseConcat, "+", "-") }
func (p *parser) parseConcat() (expr, error) { return p.parseBinary(p.parseMath2, "~") }
func (p *parser) parseMath2() (expr, error) {
	return p.parseBinary(p.parsePow, "*", "/", "//", "%")
}
func (p *parser) parsePow() (expr, error) {
	return p.parseBinary(func() (expr, error) { return p.parseUnary(true) }, "**")
}

// parseUnary: a unary minus or plus binds tighter than filters written after it
// applies to ("-x|abs" is "(-x)|abs"), as in Jinja.
func (p *parser) parseUnary(withFilters bool) (expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	var x expr
	var err error
	switch {
	case p.isOp("-") || p.isOp("+"):
		neg := p.next().text == "-"
		inner, err := p.parseUnary(false)
		if err != nil {
			return nil, err
		}
		x = &negExpr{x: inner, negate: neg}
	default:
		if x, err = p.parsePrimary(); err != nil {
			return nil, err
		}
	}
	if x, err = p.parsePostfix(x); err != nil {
		return nil, err
	}
	if withFilters {
		return p.parseFilterTests(x)
	}
	return x, nil
}

func (p *parser) parsePrimary() (expr, error) {
	t := p.cur()
	switch t.kind {
	case tokName:
		p.next()
		switch t.text {
		case "true", "True":
			return &constExpr{v: true}, nil
		case "false", "False":
			return &constExpr{v: false}, nil
		case "none", "None":
			return &constExpr{v: nil}, nil
		}
		if p.names != nil {
			p.names[t.text] = true
		}
		return &nameExpr{name: t.text}, nil
	case tokString:
		s := t.text
		for p.next(); p.cur().kind == tokString; p.next() {
			s += p.cur().text // adjacent literals concatenate
		}
		return &constExpr{v: s}, nil
	case tokInt, tokFloat:
		p.next()
		return &constExpr{v: t.num}, nil
	case tokOp:
		switch t.text {
		case "(":
			p.next()
			x, err := p.parseTuple(true)
			if err != nil {
				return nil, err
			}
			return x, p.expectOp(")")
		case "[":
			p.next()
			items, err := p.parseItems("]", p.parseExpr)
			return &listExpr{items: items}, err
		case "{":
			p.next()
			d := &dictExpr{}
			_, err := p.parseItems("}", func() (expr, error) {
				k, err := p.parseExpr()
				if err != nil {
					return nil, err
				}
				if err := p.expectOp(":"); err != nil {
					return nil, err
				}
				v, err := p.parseExpr()
				d.keys = append(d.keys, k)
				d.values = append(d.values, v)
				return v, err
			})
			return d, err
		}
	}
	return nil, p.errorf("unexpected %s", t)
}

// parseItems parses comma-separated items up to the closing bracket (a trailing comma
// allowed).
func (p *parser) parseItems(closing string, item func() (expr, error)) ([]expr, error) {
	var items []expr
	for !p.skipOp(closing) {
		if len(items) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
			if p.skipOp(closing) {
				break
			}
		}
		x, err := item()
		if err != nil {
			return nil, err
		}
		items = append(items, x)
	}
	return items, nil
}

func (p *parser) parsePostfix(x expr) (expr, error) {
	for {
		switch {
		case p.isOp("."):
			p.next()
			t := p.next()
			switch t.kind {
			case tokName:
				x = &attrExpr{obj: x, name: t.text}
			case tokInt:
				x = &itemExpr{obj: x, key: &constExpr{v: t.num}}
			default:
				return nil, p.errorf("expected a name after '.', got %s", t)
			}
		case p.isOp("["):
			p.next()
			var err error
			if x, err = p.parseSubscript(x); err != nil {
				return nil, err
			}
		case p.isOp("("):
			p.next()
			args, err := p.parseCallArgs()
			if err != nil {
				return nil, err
			}
			x = &callExpr{fn: x, args: args}
		default:
			return x, nil
		}
	}
}

// parseSubscript parses what follows "[": an index, a tuple of them ("d[1, 2]"), or a
// slice.
func (p *parser) parseSubscript(obj expr) (expr, error) {
	var parts [3]expr
	n := 0
	for {
		if !p.isOp(":") && !p.isOp("]") {
			x, err := p.parseExpr()
			if err != nil {
				return nil, err
			}
			parts[n] = x
		}
		if n == 0 && parts[0] != nil && p.isOp(",") {
			key := &tupleExpr{items: []expr{parts[0]}}
			for p.skipOp(",") && !p.isOp("]") {
				x, err := p.parseExpr()
				if err != nil {
					return nil, err
				}
				key.items = append(key.items, x)
			}
			return &itemExpr{obj: obj, key: key}, p.expectOp("]")
		}
		if p.skipOp("]") {
			break
		}
		if n == 2 || !p.skipOp(":") {
			return nil, p.errorf("expected ']', got %s", p.cur())
		}
		n++
	}
	if n == 0 {
		if parts[0] == nil {
			return nil, p.errorf("expected an index")
		}
		return &itemExpr{obj: obj, key: parts[0]}, nil
	}
	return &sliceExpr{obj: obj, start: parts[0], stop: parts[1], step: parts[2]}, nil
}

// parseCallArgs parses a call's arguments after "(".
func (p *parser) parseCallArgs() (callArgs, error) {
	var a callArgs
	first := true
	for !p.skipOp(")") {
		if !first {
			if err := p.expectOp(","); err != nil {
				return a, err
			}
			if p.skipOp(")") {
				break
			}
		}
		first = false
		switch {
		case p.skipOp("**"):
			x, err := p.parseExpr()
			if err != nil {
				return a, err
			}
			a.dstar = x
		case p.skipOp("*"):
			x, err := p.parseExpr()
			if err != nil {
				return a, err
			}
			a.star = x
		case p.cur().kind == tokName && p.peek().kind == tokOp && p.peek().text == "=":
			name := p.next().text
			p.next()
			x, err := p.parseExpr()
			if err != nil {
				return a, err
			}
			a.kw = append(a.kw, name)
			a.kwv = append(a.kwv, x)
		default:
			if len(a.kw) > 0 {
				return a, p.errorf("positional argument follows keyword argument")
			}
			x, err := p.parseExpr()
			if err != nil {
				return a, err
			}
			a.pos = append(a.pos, x)
		}
	}
	return a, nil
}

// parseFilterTests parses the filters ("|f") and tests ("is t") applied to x.
func (p *parser) parseFilterTests(x expr) (expr, error) {
	for {
		var err error
		switch {
		case p.skipOp("|"):
			x, err = p.parseFilter(x)
		case p.skipName("is"):
			x, err = p.parseTest(x)
		case p.isOp("("):
			p.next()
			var args callArgs
			args, err = p.parseCallArgs()
			x = &callExpr{fn: x, args: args}
		default:
			return x, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// dottedName parses a filter's or test's name (Jinja allows dots in them).
func (p *parser) dottedName() (string, error) {
	name, err := p.expectName()
	for err == nil && p.isOp(".") {
		p.next()
		var part string
		part, err = p.expectName()
		name += "." + part
	}
	return name, err
}

func (p *parser) parseFilter(arg expr) (*filterExpr, error) {
	name, err := p.dottedName()
	if err != nil {
		return nil, err
	}
	f := &filterExpr{arg: arg, name: name}
	if p.skipOp("(") {
		if f.args, err = p.parseCallArgs(); err != nil {
			return nil, err
		}
	}
	return f, nil
}

func (p *parser) parseTest(arg expr) (expr, error) {
	negated := p.skipName("not")
	name, err := p.dottedName()
	if err != nil {
		return nil, err
	}
	t := &testExpr{arg: arg, name: name}
	cur := p.cur()
	switch {
	case p.skipOp("("):
		if t.args, err = p.parseCallArgs(); err != nil {
			return nil, err
		}
	case cur.kind == tokString || cur.kind == tokInt || cur.kind == tokFloat ||
		cur.kind == tokOp && (cur.text == "(" || cur.text == "[" || cur.text == "{") ||
		cur.kind == tokName && cur.text != "else" && cur.text != "or" && cur.text != "and":
		// A test's single argument may follow without parentheses: "x is divisibleby 3".
		if cur.kind == tokName && cur.text == "is" {
			return nil, p.errorf("tests cannot be chained with 'is'")
		}
		a, err := p.parsePrimary()
		if err != nil {
			return nil, err
		}
		if a, err = p.parsePostfix(a); err != nil {
			return nil, err
		}
		t.args.pos = []expr{a}
	}
	if negated {
		return &notExpr{x: t}, nil
	}
	return t, nil
}
