package jinja

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strings"
	"unicode/utf8"
)

func (e *constExpr) eval(*renderer) (any, error) { return e.v, nil }

func (e *nameExpr) eval(r *renderer) (any, error) {
	if v, ok := r.scope.lookup(e.name); ok {
		return v, nil
	}
	return undefinedName(e.name), nil
}

func (r *renderer) evalAll(xs []expr) ([]any, error) {
	if err := r.allocList(len(xs)); err != nil {
		return nil, err
	}
	out := make([]any, len(xs))
	for i, x := range xs {
		v, err := r.eval(x)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

func (e *listExpr) eval(r *renderer) (any, error) {
	items, err := r.evalAll(e.items)
	if items == nil && err == nil {
		items = []any{}
	}
	return items, err
}

func (e *tupleExpr) eval(r *renderer) (any, error) {
	items, err := r.evalAll(e.items)
	return tuple(items), err
}

func (e *dictExpr) eval(r *renderer) (any, error) {
	if err := r.allocList(2 * len(e.keys)); err != nil {
		return nil, err
	}
	d := NewDict()
	for i, kx := range e.keys {
		k, err := r.eval(kx)
		if err != nil {
			return nil, err
		}
		if !hashable(k) {
			return nil, fmt.Errorf("unhashable type: '%s'", typeName(k))
		}
		v, err := r.eval(e.values[i])
		if err != nil {
			return nil, err
		}
		d.Set(k, v)
	}
	return d, nil
}

func (e *attrExpr) eval(r *renderer) (any, error) {
	obj, err := r.eval(e.obj)
	if err != nil {
		return nil, err
	}
	return r.getattr(obj, e.name)
}

func (e *itemExpr) eval(r *renderer) (any, error) {
	obj, err := r.eval(e.obj)
	if err != nil {
		return nil, err
	}
	key, err := r.eval(e.key)
	if err != nil {
		return nil, err
	}
	return r.getitem(obj, key)
}

// getattr is Jinja's obj.name: an attribute (a method, a loop's field) first, else the
// item of that name; undefined when neither exists.
func (r *renderer) getattr(obj any, name string) (any, error) {
	obj = plain(obj)
	switch x := obj.(type) {
	case *Undefined:
		return nil, x.err()
	case *Dict:
		if m := dictMethod(x, name); m != nil {
			return m, nil
		}
		if v, ok := x.Get(name); ok {
			return v, nil
		}
	case *namespace:
		if v, ok := x.attrs.Get(name); ok {
			return v, nil
		}
	case *loopState:
		return x.attr(r, name), nil
	default:
		if m := method(obj, name); m != nil {
			return m, nil
		}
	}
	return undefinedAttr(obj, name), nil
}

// getitem is Jinja's obj[key]: the item first, else the attribute named key.
func (r *renderer) getitem(obj, key any) (any, error) {
	obj, key = plain(obj), plain(key)
	switch x := obj.(type) {
	case *Undefined:
		return nil, x.err()
	case *Dict:
		// An unhashable key raises TypeError in Python, which Jinja's getitem turns into
		// undefined, as it does a missing key (no key here is a tuple).
		if hashable(key) {
			if v, ok := x.Get(key); ok {
				return v, nil
			}
		}
	case []any, tuple, string, *rangeValue:
		i, isIndex := key.(int)
		if b, isBool := key.(bool); isBool {
			i, isIndex = map[bool]int{false: 0, true: 1}[b], true
		}
		if isIndex {
			if s, isString := x.(string); isString {
				if err := r.scan(len(s)); err != nil {
					return nil, err
				}
			}
			return indexValue(x, i), nil
		}
	}
	if name, ok := key.(string); ok {
		return r.getattr(obj, name)
	}
	return undefinedItem(obj, key), nil
}

// indexValue is seq[i] with Python's negative indices; undefined when out of range.
func indexValue(seq any, i int) any {
	switch s := seq.(type) {
	case []any:
		if i < 0 {
			i += len(s)
		}
		if i >= 0 && i < len(s) {
			return s[i]
		}
	case tuple:
		return indexValue([]any(s), i)
	case *rangeValue:
		if i < 0 {
			i += s.n
		}
		if i >= 0 && i < s.n {
			return s.at(i)
		}
	case string:
		if c, ok := runeAt(s, i); ok {
			return c
		}
	}
	return undefinedItem(seq, i)
}

// runeAt is s[i] in Python, counting characters, not bytes.
func runeAt(s string, i int) (string, bool) {
	n := len(s)
	ascii := isASCII(s)
	if !ascii {
		n = utf8.RuneCountInString(s)
	}
	if i < 0 {
		i += n
	}
	if i < 0 || i >= n {
		return "", false
	}
	if ascii {
		return s[i : i+1], true
	}
	for _, c := range s {
		if i == 0 {
			return string(c), true
		}
		i--
	}
	return "", false
}

// sliceString is s[start:stop:step] in Python, over characters.
func (r *renderer) sliceString(s string, start, stop, step any) (string, error) {
	if err := r.scan(len(s)); err != nil {
		return "", err
	}
	if isASCII(s) && (step == nil || step == 1) {
		sl, err := resolveSlice(len(s), start, stop, nil)
		if err != nil || sl.count == 0 {
			return "", err
		}
		return s[sl.first : sl.first+sl.count], nil // shares s's bytes: nothing to charge
	}
	if err := r.allocList(len(s)); err != nil { // the characters and their indices
		return "", err
	}
	chars := []rune(s)
	sl, err := resolveSlice(len(chars), start, stop, step)
	if err != nil {
		return "", err
	}
	out := make([]rune, sl.count)
	for k := range out {
		out[k] = chars[sl.index(k)]
	}
	return string(out), nil
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

func (e *sliceExpr) eval(r *renderer) (any, error) {
	obj, err := r.eval(e.obj)
	if err != nil {
		return nil, err
	}
	var bounds [3]any
	for i, x := range []expr{e.start, e.stop, e.step} {
		if x != nil {
			if bounds[i], err = r.eval(x); err != nil {
				return nil, err
			}
		}
	}
	switch s := plain(obj).(type) {
	case string:
		return r.sliceString(s, bounds[0], bounds[1], bounds[2])
	case *rangeValue:
		sl, err := resolveSlice(s.n, bounds[0], bounds[1], bounds[2])
		if err != nil {
			return nil, err
		}
		return &rangeValue{start: s.start + sl.first*s.step, step: s.step * sl.step, n: sl.count}, nil
	case []any, tuple:
		items, err := r.iterate(s)
		if err != nil {
			return nil, err
		}
		if err := r.allocList(len(items)); err != nil {
			return nil, err
		}
		sl, err := resolveSlice(len(items), bounds[0], bounds[1], bounds[2])
		if err != nil {
			return nil, err
		}
		out := make([]any, sl.count)
		for k := range out {
			out[k] = items[sl.index(k)]
		}
		if _, isTuple := s.(tuple); isTuple {
			return tuple(out), nil
		}
		return out, nil
	case *Undefined:
		return nil, s.err()
	}
	return nil, fmt.Errorf("'%s' object is not subscriptable", typeName(obj))
}

// args are a call's evaluated arguments.
type args struct {
	pos   []any
	names []string
	kw    []any
}

func (r *renderer) evalArgs(c *callArgs) (*args, error) {
	a := &args{}
	var err error
	if len(c.pos) > 0 {
		if a.pos, err = r.evalAll(c.pos); err != nil {
			return nil, err
		}
	}
	if c.star != nil {
		v, err := r.eval(c.star)
		if err != nil {
			return nil, err
		}
		items, err := r.iterate(v)
		if err != nil {
			return nil, err
		}
		a.pos = append(a.pos, items...)
	}
	for i, name := range c.kw {
		v, err := r.eval(c.kwv[i])
		if err != nil {
			return nil, err
		}
		a.names = append(a.names, name)
		a.kw = append(a.kw, v)
	}
	if c.dstar != nil {
		v, err := r.eval(c.dstar)
		if err != nil {
			return nil, err
		}
		d, ok := v.(*Dict)
		if !ok {
			return nil, fmt.Errorf("argument after ** must be a mapping, not %s", typeName(v))
		}
		for i, k := range d.keys {
			name, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("keywords must be strings")
			}
			a.names = append(a.names, name)
			a.kw = append(a.kw, d.values[i])
		}
	}
	return a, nil
}

// required marks a parameter without default in bind.
type requiredParam struct{}

var required any = requiredParam{}

// bind matches arguments to the parameters of a builtin named fn: positional first,
// then by keyword; a parameter neither gives takes its default (defaults aligned with
// params; required for none).
func (a *args) bind(fn string, params []string, defaults ...any) ([]any, error) {
	if len(a.pos) > len(params) {
		return nil, fmt.Errorf("%s() takes at most %d argument(s) (%d given)", fn, len(params), len(a.pos))
	}
	out := make([]any, len(params))
	set := make([]bool, len(params))
	for i, v := range a.pos {
		out[i], set[i] = v, true
	}
	for i, name := range a.names {
		j := indexOf(params, name)
		if j < 0 {
			return nil, fmt.Errorf("%s() got an unexpected keyword argument '%s'", fn, name)
		}
		if set[j] {
			return nil, fmt.Errorf("%s() got multiple values for argument '%s'", fn, name)
		}
		out[j], set[j] = a.kw[i], true
	}
	for i := range params {
		if set[i] {
			continue
		}
		if i >= len(defaults) || defaults[i] == required {
			return nil, fmt.Errorf("%s() missing required argument '%s'", fn, params[i])
		}
		out[i] = defaults[i]
	}
	return out, nil
}

// callable is a builtin function or a bound method.
type callable struct {
	name string
	fn   func(r *renderer, a *args) (any, error)
}

func (e *callExpr) eval(r *renderer) (any, error) {
	fn, err := r.eval(e.fn)
	if err != nil {
		return nil, err
	}
	a, err := r.evalArgs(&e.args)
	if err != nil {
		return nil, err
	}
	return r.call(fn, a)
}

func (r *renderer) call(fn any, a *args) (any, error) {
	if err := r.step(1); err != nil {
		return nil, err
	}
	switch f := fn.(type) {
	case *callable:
		return f.fn(r, a)
	case *macro:
		return r.callMacro(f, a, nil)
	case *loopState:
		if len(a.pos) != 1 || len(a.names) > 0 {
			return nil, fmt.Errorf("loop() takes one argument")
		}
		return f.recurse(r, a.pos[0])
	case Func:
		for i, v := range a.pos {
			a.pos[i] = plain(v)
		}
		var kw map[string]any
		if len(a.names) > 0 {
			kw = make(map[string]any, len(a.names))
			for i, n := range a.names {
				kw[n] = a.kw[i]
			}
		}
		v, err := f(a.pos, kw)
		if err != nil {
			return nil, &Error{Msg: err.Error(), Err: err}
		}
		if s, ok := v.(string); ok { // strftime_now('%A' * 10**7) builds 60 MB
			return v, r.alloc(len(s))
		}
		return v, nil
	case *Undefined:
		return nil, f.err()
	}
	return nil, fmt.Errorf("'%s' object is not callable", typeName(fn))
}

func (e *filterExpr) eval(r *renderer) (any, error) {
	v, err := r.eval(e.arg)
	if err != nil {
		return nil, err
	}
	return r.applyFilter(e, v)
}

func (r *renderer) applyFilter(e *filterExpr, v any) (any, error) {
	f, ok := filters[e.name]
	if !ok {
		return nil, fmt.Errorf("no filter named '%s'", e.name)
	}
	if e.name != "escape" && e.name != "e" {
		v = plain(v)
	}
	a, err := r.evalArgs(&e.args)
	if err != nil {
		return nil, err
	}
	return f(r, v, a)
}

func (e *testExpr) eval(r *renderer) (any, error) {
	v, err := r.eval(e.arg)
	if err != nil {
		return nil, err
	}
	t, ok := tests[e.name]
	if !ok {
		return nil, fmt.Errorf("no test named '%s'", e.name)
	}
	a, err := r.evalArgs(&e.args)
	if err != nil {
		return nil, err
	}
	return t(r, plain(v), a)
}

func (e *notExpr) eval(r *renderer) (any, error) {
	v, err := r.eval(e.x)
	return !truthy(v), err
}

func (e *andExpr) eval(r *renderer) (any, error) {
	l, err := r.eval(e.l)
	if err != nil || !truthy(l) {
		return l, err
	}
	return r.eval(e.r)
}

func (e *orExpr) eval(r *renderer) (any, error) {
	l, err := r.eval(e.l)
	if err != nil || truthy(l) {
		return l, err
	}
	return r.eval(e.r)
}

func (e *condExpr) eval(r *renderer) (any, error) {
	c, err := r.eval(e.cond)
	if err != nil {
		return nil, err
	}
	if truthy(c) {
		return r.eval(e.yes)
	}
	if e.no == nil {
		return &Undefined{msg: "the inline if expression evaluated to false and no else section was defined"}, nil
	}
	return r.eval(e.no)
}

func (e *compareExpr) eval(r *renderer) (any, error) {
	l, err := r.eval(e.first)
	if err != nil {
		return nil, err
	}
	for i, op := range e.ops {
		rv, err := r.eval(e.rest[i])
		if err != nil {
			return nil, err
		}
		ok, err := r.compareOp(op, l, rv)
		if err != nil || !ok {
			return false, err
		}
		l = rv
	}
	return true, nil
}

func (r *renderer) compareOp(op string, a, b any) (bool, error) {
	switch op {
	case "==":
		return r.equal(a, b, 0)
	case "!=":
		eq, err := r.equal(a, b, 0)
		return !eq, err
	case "in":
		return r.contains(b, a)
	case "notin":
		in, err := r.contains(b, a)
		return !in, err
	}
	c, err := r.compare(a, b, 0)
	if errors.Is(err, ErrLimit) {
		return false, err
	}
	if err != nil {
		return false, fmt.Errorf("'%s' not supported between instances of '%s' and '%s'", op, typeName(a), typeName(b))
	}
	switch op {
	case "<":
		return c < 0, nil
	case "<=":
		return c <= 0, nil
	case ">":
		return c > 0, nil
	}
	return c >= 0, nil
}

func (e *negExpr) eval(r *renderer) (any, error) {
	v, err := r.eval(e.x)
	if err != nil {
		return nil, err
	}
	i, f, isFloat, ok := asNumber(v)
	switch {
	case !ok:
		if u, isUndefined := v.(*Undefined); isUndefined {
			return nil, u.err()
		}
		return nil, fmt.Errorf("bad operand type for unary %s: '%s'", map[bool]string{true: "-", false: "+"}[e.negate], typeName(v))
	case !e.negate:
		if isFloat {
			return f, nil
		}
		return i, nil
	case isFloat:
		return -f, nil
	case i == math.MinInt:
		return nil, errOverflow
	}
	return -i, nil
}

var errOverflow = fmt.Errorf("integer overflow (this engine's integers have 64 bits)")

func (e *binaryExpr) eval(r *renderer) (any, error) {
	l, err := r.eval(e.l)
	if err != nil {
		return nil, err
	}
	rv, err := r.eval(e.r)
	if err != nil {
		return nil, err
	}
	return r.binary(e.op, l, rv)
}

func (r *renderer) binary(op string, l, rv any) (any, error) {
	if op == "~" {
		ls, err := r.str(l)
		if err != nil {
			return nil, err
		}
		rs, err := r.str(rv)
		if err != nil {
			return nil, err
		}
		return r.concat(ls, rs)
	}
	if u, ok := l.(*Undefined); ok {
		return nil, u.err()
	}
	if u, ok := rv.(*Undefined); ok {
		return nil, u.err()
	}
	if op == "+" {
		if v, ok, err := r.addMarkup(l, rv); ok {
			return v, err
		}
	}
	l, rv = plain(l), plain(rv)
	li, lf, lFloat, lNum := asNumber(l)
	ri, rf, rFloat, rNum := asNumber(rv)
	if lNum && rNum {
		if lFloat || rFloat || op == "/" {
			return floatOp(op, lf, rf)
		}
		return intOp(op, li, ri)
	}
	switch op {
	case "+":
		switch x := l.(type) {
		case string:
			if y, ok := rv.(string); ok {
				return r.concat(x, y)
			}
		case []any:
			if y, ok := rv.([]any); ok {
				return r.concatList(x, y)
			}
		case tuple:
			if y, ok := rv.(tuple); ok {
				out, err := r.concatList(x, y)
				return tuple(out), err
			}
		}
	case "*":
		if rNum && !rFloat {
			return r.repeat(l, ri)
		}
		if lNum && !lFloat {
			return r.repeat(rv, li)
		}
	case "%":
		if s, ok := l.(string); ok {
			return r.percentFormat(s, rv)
		}
	}
	return nil, fmt.Errorf("unsupported operand type(s) for %s: '%s' and '%s'", op, typeName(l), typeName(rv))
}

// addMarkup is + with a markup operand: the other string is escaped, as Markup's
// __add__ does.
func (r *renderer) addMarkup(l, rv any) (any, bool, error) {
	lm, lIsMarkup := l.(markup)
	rm, rIsMarkup := rv.(markup)
	ls, lIsStr := l.(string)
	rs, rIsStr := rv.(string)
	switch {
	case lIsMarkup && rIsMarkup:
		v, err := r.concat(string(lm), string(rm))
		return markupOf(v), true, err
	case lIsMarkup && rIsStr:
		v, err := r.concat(string(lm), htmlEscape(rs))
		return markupOf(v), true, err
	case lIsStr && rIsMarkup:
		v, err := r.concat(htmlEscape(ls), string(rm))
		return markupOf(v), true, err
	}
	return nil, false, nil
}

func markupOf(v any) any {
	if s, ok := v.(string); ok {
		return markup(s)
	}
	return v
}

func (r *renderer) concat(a, b string) (any, error) {
	if err := r.alloc(len(a) + len(b)); err != nil {
		return nil, err
	}
	return a + b, nil
}

func (r *renderer) concatList(a, b []any) ([]any, error) {
	if err := r.allocList(len(a) + len(b)); err != nil {
		return nil, err
	}
	out := make([]any, 0, len(a)+len(b))
	return append(append(out, a...), b...), nil
}

// repeat is seq * n for a string, list or tuple, refused before allocating when the
// result would exceed the budget.
func (r *renderer) repeat(seq any, n int) (any, error) {
	n = max(n, 0)
	switch s := seq.(type) {
	case string:
		if len(s) > 0 && n > (r.limits.MaxBytes-r.bytes)/len(s) {
			return nil, r.bytesError()
		}
		if err := r.alloc(len(s) * n); err != nil {
			return nil, err
		}
		return strings.Repeat(s, n), nil
	case []any, tuple:
		items, _ := iterate(s)
		if len(items) > 0 && n > r.limits.MaxBytes/16/len(items) {
			return nil, r.bytesError()
		}
		if err := r.allocList(len(items) * n); err != nil {
			return nil, err
		}
		out := make([]any, 0, len(items)*n)
		for range n {
			out = append(out, items...)
		}
		if _, isTuple := s.(tuple); isTuple {
			return tuple(out), nil
		}
		return out, nil
	}
	return nil, fmt.Errorf("can't multiply sequence by non-int of type '%s'", typeName(seq))
}

func intOp(op string, a, b int) (any, error) {
	switch op {
	case "+":
		s := a + b
		if (s > a) != (b > 0) {
			return nil, errOverflow
		}
		return s, nil
	case "-":
		s := a - b
		if (s < a) != (b > 0) {
			return nil, errOverflow
		}
		return s, nil
	case "*":
		if a == 0 || b == 0 {
			return 0, nil
		}
		hi, lo := bits.Mul64(uint64(abs(a)), uint64(abs(b)))
		if hi != 0 || lo > math.MaxInt64 || a == math.MinInt || b == math.MinInt {
			return nil, errOverflow
		}
		return a * b, nil
	case "//", "%":
		if b == 0 {
			return nil, fmt.Errorf("integer division or modulo by zero")
		}
		if a == math.MinInt && b == -1 {
			return nil, errOverflow
		}
		q, m := a/b, a%b
		if m != 0 && (m < 0) != (b < 0) {
			q--
			m += b
		}
		if op == "//" {
			return q, nil
		}
		return m, nil
	case "**":
		if b < 0 {
			return math.Pow(float64(a), float64(b)), nil
		}
		result, base := 1, a
		for e := b; e > 0; e >>= 1 {
			if e&1 == 1 {
				p, err := intOp("*", result, base)
				if err != nil {
					return nil, err
				}
				result = p.(int)
			}
			if e > 1 {
				sq, err := intOp("*", base, base)
				if err != nil {
					return nil, err
				}
				base = sq.(int)
			}
		}
		return result, nil
	}
	return nil, fmt.Errorf("unsupported operator %s", op)
}

func abs(a int) int {
	if a < 0 {
		return -a
	}
	return a
}

func floatOp(op string, a, b float64) (any, error) {
	switch op {
	case "+":
		return a + b, nil
	case "-":
		return a - b, nil
	case "*":
		return a * b, nil
	case "/":
		if b == 0 {
			return nil, fmt.Errorf("division by zero")
		}
		return a / b, nil
	case "//", "%":
		if b == 0 {
			return nil, fmt.Errorf("float floor division or modulo by zero")
		}
		// Python's float floor division and modulo: from the exact remainder, so that
		// 5 // 0.1 is 49.0 (0.1 is a little more than a tenth), not floor(5 / 0.1) = 50.0.
		m := math.Mod(a, b)
		div := (a - m) / b
		if m != 0 && (m < 0) != (b < 0) {
			m += b
			div--
		}
		if op == "%" {
			return m, nil
		}
		if div == 0 {
			return math.Copysign(0, a/b), nil
		}
		q := math.Floor(div)
		if div-q > 0.5 {
			q++
		}
		return q, nil
	case "**":
		return math.Pow(a, b), nil
	}
	return nil, fmt.Errorf("unsupported operator %s", op)
}
