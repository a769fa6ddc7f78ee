package jinja

import (
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
)

// ErrLimit marks every error that a render's budgets (Limits) or the parser's nesting
// bound raised: the template, not the input, is at fault, or the input is hostile.
var ErrLimit = errors.New("template limit exceeded")

// ErrForbidden marks what the sandbox refuses: loading other templates, and methods
// that would mutate a value (Jinja's SecurityError).
var ErrForbidden = errors.New("forbidden by the template sandbox")

// Error is a template's syntax or runtime error, with the template line it is about
// (0 when unknown). Err, when set, is the cause errors.Is finds: ErrLimit,
// ErrForbidden, or an error a caller's function returned.
type Error struct {
	Line int
	Msg  string
	Err  error
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
	}
	return e.Msg
}

func (e *Error) Unwrap() error { return e.Err }

// Limits bound one render. Templates come from untrusted model files, and Jinja can
// recurse, loop and build strings without end; every budget ends the render with an
// error wrapping ErrLimit. A zero field takes its default.
type Limits struct {
	// MaxSteps bounds the work: every expression evaluated, statement run, loop
	// iteration, call, comparison, and every 16 bytes a string operation reads, is one
	// step.
	MaxSteps int
	// MaxDepth bounds nested macro calls, call blocks and recursive loop levels.
	MaxDepth int
	// MaxBytes bounds the bytes of every string and list the render builds, counted
	// cumulatively (a list element counts 16 bytes), the output included. A string is
	// refused before it is allocated.
	MaxBytes int
}

// Defaults. A million-token agent conversation with tools (2,000 messages, 4.3 MB of
// JSON) through the Qwen3, Qwen3.5, GLM-4.6, GLM-4.7 and DeepSeek-V3 templates takes
// 100k-215k steps (50-110 per message) and builds 7.5-13 MB (two to three times its input),
// so 20M steps leave room for a hundred times as many messages while a hostile loop stops
// after about a quarter of a second (some 12 ns a step). Callers that know their input's size
// should add to MaxBytes (and MaxSteps) in proportion, as the tokenizer does. The depth of
// 200 is far above what templates recurse (a JSON schema's nesting) and keeps the Go
// stack under a few MiB.
const (
	DefaultMaxSteps = 20_000_000
	DefaultMaxDepth = 200
	DefaultMaxBytes = 64 << 20
)

func (l Limits) withDefaults() Limits {
	if l.MaxSteps <= 0 {
		l.MaxSteps = DefaultMaxSteps
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = DefaultMaxDepth
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	return l
}

// maxEvalNesting bounds the interpreter's own recursion (expressions inside
// expressions, blocks inside blocks, across macro calls): a left-associative chain like
// 1+1+…+1 parses without recursion but evaluates with one Go frame per operator.
const maxEvalNesting = 10_000

// Template is a parsed template. It is immutable and safe for concurrent renders.
type Template struct {
	body []stmt
}

// Parse parses a template's source with Hugging Face's settings (trim_blocks,
// lstrip_blocks, the loopcontrols extension, {% generation %}).
func Parse(src string) (t *Template, err error) {
	defer recoverAsError(&err)
	tokens, err := lex(src)
	if err != nil {
		return nil, err
	}
	p := &parser{tokens: tokens}
	body, err := p.parseBody()
	if err != nil {
		return nil, err
	}
	return &Template{body: body}, nil
}

// Func is a function a caller makes available to the template (raise_exception,
// strftime_now). An error it returns ends the render, wrapped so that errors.Is finds it.
type Func func(args []any, kwargs map[string]any) (any, error)

// Render renders the template. vars are the template's variables: nil, bool, int,
// float64, string, []any, *Dict and Func values, nested as JSON is.
func (t *Template) Render(vars map[string]any, limits Limits) (out string, err error) {
	defer recoverAsError(&err)
	r := &renderer{limits: limits.withDefaults()}
	top := &scope{parent: &scope{globals: globals}}
	top.globals = vars
	r.scope = top
	w := r.newSink()
	if err := r.execBody(t.body, w); err != nil {
		return "", err
	}
	return w.b.String(), nil
}

// errInternal marks a panic inside the interpreter, returned as an error.
var errInternal = errors.New("internal error in the template engine")

// recoverAsError turns a panic into an error. The budgets never rely on it; it keeps
// a bug in the interpreter from taking the process down.
func recoverAsError(err *error) {
	if v := recover(); v != nil {
		*err = fmt.Errorf("%w: %v\n%s", errInternal, v, debug.Stack())
	}
}

type renderer struct {
	limits Limits
	steps  int
	bytes  int
	depth  int // macro calls, call blocks and recursive loops in progress
	nest   int // Go-level recursion of eval and exec
	scope  *scope
}

func (r *renderer) limitError(format string, args ...any) error {
	return &Error{Err: ErrLimit, Msg: fmt.Sprintf(format, args...)}
}

// step counts n steps of work.
func (r *renderer) step(n int) error {
	r.steps += n
	if r.steps > r.limits.MaxSteps {
		return r.limitError("template exceeded %d steps", r.limits.MaxSteps)
	}
	return nil
}

// scan counts the work of a string operation that reads n bytes: a step per 16 bytes,
// about the time a step of evaluation takes.
func (r *renderer) scan(n int) error { return r.step(1 + n>>4) }

// alloc charges n bytes about to be allocated for a string or list.
func (r *renderer) alloc(n int) error {
	if n < 0 || n > r.limits.MaxBytes-r.bytes {
		return r.bytesError()
	}
	r.bytes += n
	return nil
}

// allocList charges a list of n elements.
func (r *renderer) allocList(n int) error {
	if n > r.limits.MaxBytes/16 {
		return r.bytesError()
	}
	return r.alloc(16 * n)
}

func (r *renderer) bytesError() error {
	return r.limitError("template exceeded %s of text", formatBytes(r.limits.MaxBytes))
}

func formatBytes(n int) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}

// enterCall counts one level of macro call, call block or recursive loop.
func (r *renderer) enterCall() error {
	r.depth++
	if r.depth > r.limits.MaxDepth {
		return r.limitError("template exceeded a nesting depth of %d", r.limits.MaxDepth)
	}
	return nil
}

var errNesting = &Error{Err: ErrLimit, Msg: fmt.Sprintf("template exceeded an expression nesting of %d", maxEvalNesting)}

func (r *renderer) eval(e expr) (any, error) {
	r.steps++
	if r.steps > r.limits.MaxSteps {
		return nil, r.step(0)
	}
	r.nest++
	if r.nest > maxEvalNesting {
		r.nest--
		return nil, errNesting
	}
	v, err := e.eval(r)
	r.nest--
	return v, err
}

// sink collects output or a string being built, charging every byte to the render's
// budget before it is written.
type sink struct {
	b   strings.Builder
	r   *renderer // nil: unbounded (error messages)
	err error
}

func (r *renderer) newSink() *sink { return &sink{r: r} }

type output = sink

func (w *sink) write(s string) {
	if w.err != nil {
		return
	}
	if w.r != nil {
		if err := w.r.alloc(len(s)); err != nil {
			w.err = err
			return
		}
	}
	w.reserve(len(s))
	w.b.WriteString(s)
}

// reserve makes room for n more bytes, doubling the buffer: strings.Builder's own
// growth, append's, adds a quarter at a time for large buffers and would allocate five
// times the final size on the way.
func (w *sink) reserve(n int) {
	if w.b.Cap()-w.b.Len() < n {
		w.b.Grow(n)
	}
}

// writeEscape writes a backslash escape: the letter and v in digits hex digits
// ("\x01", "\u00e9"), without allocating.
func (w *sink) writeEscape(letter byte, v rune, digits int) {
	var buf [10]byte
	buf[0], buf[1] = '\\', letter
	for i := digits - 1; i >= 0; i-- {
		buf[2+i] = "0123456789abcdef"[v&0xf]
		v >>= 4
	}
	if w.err != nil {
		return
	}
	if w.r != nil {
		if err := w.r.alloc(2 + digits); err != nil {
			w.err = err
			return
		}
	}
	w.reserve(2 + digits)
	w.b.Write(buf[:2+digits])
}

func (w *sink) fail(err error) {
	if w.err == nil {
		w.err = err
	}
}

// repr is Python's repr, unbounded: for error messages about small values.
func repr(v any) string {
	var w sink
	writeRepr(&w, v, 0)
	return w.b.String()
}

// str is Python's str(v), charged to the budget.
func (r *renderer) str(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case *Undefined:
		return "", nil
	}
	w := r.newSink()
	writeStr(w, v)
	return w.b.String(), w.err
}

// scope holds the variables of a template level, macro call or loop iteration; reads
// go outward to the template's variables and the globals.
type scope struct {
	names   []string
	values  []any
	parent  *scope
	globals map[string]any // the render's variables (top scope) or the builtins
}

func (s *scope) lookup(name string) (any, bool) {
	for ; s != nil; s = s.parent {
		for i := len(s.names) - 1; i >= 0; i-- {
			if s.names[i] == name {
				return s.values[i], true
			}
		}
		if v, ok := s.globals[name]; ok {
			return v, true
		}
	}
	return nil, false
}

func (s *scope) set(name string, v any) {
	for i, n := range s.names {
		if n == name {
			s.values[i] = v
			return
		}
	}
	s.names = append(s.names, name)
	s.values = append(s.values, v)
}

// located gives an error the template line it happened on, unless it has one.
func located(err error, line int) error {
	var e *Error
	if errors.As(err, &e) {
		if e.Line == 0 && line > 0 {
			return &Error{Line: line, Msg: e.Msg, Err: e.Err}
		}
		return err
	}
	if err == errBreak || err == errContinue {
		return err
	}
	return &Error{Line: line, Msg: err.Error(), Err: err}
}

var (
	errBreak    = errors.New("break")
	errContinue = errors.New("continue")
)

func (r *renderer) execBody(body []stmt, out *output) error {
	r.nest++
	defer func() { r.nest-- }()
	if r.nest > maxEvalNesting {
		return errNesting
	}
	for _, s := range body {
		if err := r.step(1); err != nil {
			return err
		}
		if err := s.exec(r, out); err != nil {
			return err
		}
	}
	return out.err
}

func (s *textStmt) exec(r *renderer, out *output) error {
	out.write(s.text)
	return out.err
}

func (s *printStmt) exec(r *renderer, out *output) error {
	v, err := r.eval(s.x)
	if err != nil {
		return located(err, s.line)
	}
	writeStr(out, v)
	return located2(out.err, s.line)
}

// located2 is located for an error that may be nil.
func located2(err error, line int) error {
	if err == nil {
		return nil
	}
	return located(err, line)
}

func (s *ifStmt) exec(r *renderer, out *output) error {
	for i, c := range s.conds {
		v, err := r.eval(c)
		if err != nil {
			return located(err, s.line)
		}
		if truthy(v) {
			return r.execBody(s.bodies[i], out)
		}
	}
	return r.execBody(s.els, out)
}

func (s *blockStmt) exec(r *renderer, out *output) error { return r.execBody(s.body, out) }

func (s *breakStmt) exec(*renderer, *output) error    { return errBreak }
func (s *continueStmt) exec(*renderer, *output) error { return errContinue }

// assign sets targets to v, unpacking v when there are several.
func (r *renderer) assign(sc *scope, targets []string, v any) error {
	if len(targets) == 1 {
		sc.set(targets[0], v)
		return nil
	}
	items, err := r.iterate(v)
	if err != nil {
		return fmt.Errorf("cannot unpack non-iterable %s object", typeName(v))
	}
	if len(items) != len(targets) {
		if len(items) > len(targets) {
			return fmt.Errorf("too many values to unpack (expected %d)", len(targets))
		}
		return fmt.Errorf("not enough values to unpack (expected %d, got %d)", len(targets), len(items))
	}
	for i, t := range targets {
		sc.set(t, items[i])
	}
	return nil
}

func (s *setStmt) exec(r *renderer, out *output) error {
	v, err := r.eval(s.value)
	if err != nil {
		return located(err, s.line)
	}
	if s.attr != "" {
		target, _ := r.scope.lookup(s.targets[0])
		ns, ok := target.(*namespace)
		if !ok {
			return &Error{Line: s.line, Msg: "cannot assign attribute on non-namespace object"}
		}
		ns.attrs.Set(s.attr, v)
		return nil
	}
	return located2(r.assign(r.scope, s.targets, v), s.line)
}

// renderCaptured renders body into a string, through filters. The body has a scope of
// its own, as Jinja gives filter and set blocks: what it sets stays inside.
func (r *renderer) renderCaptured(body []stmt, filters []*filterExpr, line int) (any, error) {
	w := r.newSink()
	outer := r.scope
	r.scope = &scope{parent: outer}
	err := r.execBody(body, w)
	r.scope = outer
	if err != nil {
		return nil, err
	}
	var v any = w.b.String()
	for _, f := range filters {
		var err error
		if v, err = r.applyFilter(f, v); err != nil {
			return nil, located(err, line)
		}
	}
	return v, nil
}

func (s *setBlockStmt) exec(r *renderer, out *output) error {
	v, err := r.renderCaptured(s.body, s.filters, s.line)
	if err != nil {
		return err
	}
	r.scope.set(s.target, v)
	return nil
}

func (s *filterBlockStmt) exec(r *renderer, out *output) error {
	v, err := r.renderCaptured(s.body, s.filters, s.line)
	if err != nil {
		return err
	}
	writeStr(out, v)
	return located2(out.err, s.line)
}

func (s *withStmt) exec(r *renderer, out *output) error {
	inner := &scope{parent: r.scope}
	for i, x := range s.values {
		v, err := r.eval(x)
		if err != nil {
			return located(err, s.line)
		}
		inner.set(s.targets[i], v)
	}
	outer := r.scope
	r.scope = inner
	defer func() { r.scope = outer }()
	return r.execBody(s.body, out)
}

func (s *macroStmt) exec(r *renderer, out *output) error {
	r.scope.set(s.m.name, &macro{def: s.m, scope: r.scope})
	return nil
}

func (s *callBlockStmt) exec(r *renderer, out *output) error {
	fn, err := r.eval(s.call.fn)
	if err != nil {
		return located(err, s.line)
	}
	m, ok := fn.(*macro)
	if !ok {
		return &Error{Line: s.line, Msg: "a call block must call a macro"}
	}
	a, err := r.evalArgs(&s.call.args)
	if err != nil {
		return located(err, s.line)
	}
	v, err := r.callMacro(m, a, &macro{def: s.caller, scope: r.scope})
	if err != nil {
		return located(err, s.line)
	}
	writeStr(out, v)
	return out.err
}

// macro is a macro, or a call block's body as the caller() its macro sees.
type macro struct {
	def   *macroDef
	scope *scope // where it was defined: its body reads that scope's variables
}

func (r *renderer) callMacro(m *macro, a *args, caller *macro) (any, error) {
	if err := r.enterCall(); err != nil {
		return nil, err
	}
	defer func() { r.depth-- }()
	d := m.def
	sc := &scope{parent: m.scope}
	var extra []any
	for i, v := range a.pos {
		if i < len(d.params) {
			sc.set(d.params[i], v)
		} else {
			extra = append(extra, v)
		}
	}
	if len(extra) > 0 && !d.usesVarargs {
		return nil, fmt.Errorf("macro '%s' takes not more than %d argument(s)", d.name, len(d.params))
	}
	kwargs := NewDict()
	for i, name := range a.names {
		switch {
		case name == "caller" && d.usesCaller:
			if c, ok := a.kw[i].(*macro); ok {
				caller = c
			}
		case indexOf(d.params, name) >= 0:
			if indexOf(d.params, name) < len(a.pos) {
				return nil, fmt.Errorf("macro '%s' got multiple values for argument '%s'", d.name, name)
			}
			sc.set(name, a.kw[i])
		case d.usesKwargs:
			kwargs.Set(name, a.kw[i])
		default:
			return nil, fmt.Errorf("macro '%s' takes no keyword argument '%s'", d.name, name)
		}
	}
	// Defaults are evaluated at the call, in the macro's scope, so that a default can
	// read the parameters before it.
	outer := r.scope
	r.scope = sc
	defer func() { r.scope = outer }()
	firstDefault := len(d.params) - len(d.defaults)
	for i, p := range d.params {
		if _, set := lookupLocal(sc, p); set {
			continue
		}
		if i >= firstDefault {
			v, err := r.eval(d.defaults[i-firstDefault])
			if err != nil {
				return nil, err
			}
			sc.set(p, v)
		} else {
			sc.set(p, undefinedName(p))
		}
	}
	if d.usesVarargs {
		sc.set("varargs", tuple(extra))
	}
	if d.usesKwargs {
		sc.set("kwargs", kwargs)
	}
	if caller != nil {
		sc.set("caller", caller)
	}
	w := r.newSink()
	if err := r.execBody(d.body, w); err != nil {
		return nil, err
	}
	return w.b.String(), nil
}

func lookupLocal(sc *scope, name string) (any, bool) {
	i := indexOf(sc.names, name)
	if i < 0 {
		return nil, false
	}
	return sc.values[i], true
}

func indexOf(names []string, name string) int {
	for i, n := range names {
		if n == name {
			return i
		}
	}
	return -1
}

// loopState is the loop variable of a for loop.
type loopState struct {
	n     int           // the number of items
	at    func(int) any // the item at an index
	index int           // 0-based
	depth int           // 1-based, for recursive loops
	loop  *forStmt
	outer *scope // the scope the loop runs in, for recursive calls
	// changedLast is what loop.changed saw last.
	changedLast any
	changedSet  bool
}

func (s *forStmt) exec(r *renderer, out *output) error {
	v, err := r.eval(s.iter)
	if err != nil {
		return located(err, s.line)
	}
	return located2(s.run(r, v, 1, out), s.line)
}

// run runs the loop over the iterable v at a recursion depth.
func (s *forStmt) run(r *renderer, v any, depth int, out *output) error {
	outer := r.scope
	defer func() { r.scope = outer }()
	iter := &scope{parent: outer}
	r.scope = iter
	loop := &loopState{depth: depth, loop: s, outer: outer}
	if rv, ok := v.(*rangeValue); ok && s.filter == nil {
		loop.n, loop.at = rv.n, rv.at // no list: range(n) costs no memory
		return s.iterations(r, loop, iter, out)
	}
	items, err := r.iterate(v)
	if err != nil {
		return err
	}
	if s.filter != nil {
		kept := make([]any, 0, len(items))
		for _, item := range items {
			iter.names, iter.values = iter.names[:0], iter.values[:0]
			if err := r.assign(iter, s.targets, item); err != nil {
				return err
			}
			ok, err := r.eval(s.filter)
			if err != nil {
				return err
			}
			if truthy(ok) {
				kept = append(kept, item)
			}
		}
		items = kept
	}
	loop.n, loop.at = len(items), func(i int) any { return items[i] }
	return s.iterations(r, loop, iter, out)
}

// iterations runs the body for each of the loop's items, or the else body for none.
func (s *forStmt) iterations(r *renderer, loop *loopState, iter *scope, out *output) error {
	for i := range loop.n {
		if err := r.step(1); err != nil {
			return err
		}
		loop.index = i
		// A fresh scope every iteration: a set inside the body does not outlive it.
		iter.names, iter.values = iter.names[:0], iter.values[:0]
		iter.set("loop", loop)
		if err := r.assign(iter, s.targets, loop.at(i)); err != nil {
			return err
		}
		err := r.execBody(s.body, out)
		if err == errBreak {
			break
		}
		if err != nil && err != errContinue {
			return err
		}
	}
	if loop.n == 0 {
		r.scope = &scope{parent: loop.outer} // what the else body sets stays inside too
		return r.execBody(s.els, out)
	}
	return nil
}

// recurse is loop(items) in a recursive loop: the body rendered again over items, one
// level deeper.
func (l *loopState) recurse(r *renderer, items any) (any, error) {
	if !l.loop.recursive {
		return nil, errors.New("the loop is not recursive: mark it 'recursive' to call loop()")
	}
	if err := r.enterCall(); err != nil {
		return nil, err
	}
	defer func() { r.depth-- }()
	saved := r.scope
	r.scope = l.outer
	defer func() { r.scope = saved }()
	w := r.newSink()
	if err := l.loop.run(r, items, l.depth+1, w); err != nil {
		return nil, err
	}
	return w.b.String(), nil
}
