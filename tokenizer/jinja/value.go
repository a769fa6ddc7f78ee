package jinja

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Values are Go values standing for Python's:
//
//	nil → None; bool; int → int (64-bit; overflow is an error, not a big integer);
//	float64 → float; string → str; markup → Markup; []any → list; tuple → tuple;
//	*Dict → dict; *dictView → dict_keys/values/items; *rangeValue → range;
//	*iterator → a generator or other one-pass iterator; *Undefined → jinja2.Undefined;
//	*namespace, *macro, *loopState, *callable and Func.
//
// Values are never mutated after they are built (the environment is Jinja's immutable
// sandbox), except a namespace's attributes, which {% set ns.x = … %} assigns, and an
// iterator, which a pass consumes.

// Dict is a dict in insertion order, as Python's dicts are: chat templates print tools
// and arguments with tojson and items, in the order the client sent the keys.
type Dict struct {
	keys, values []any
	index        map[any]int // built once the dict grows past linear-search size
}

// NewDict returns an empty Dict.
func NewDict() *Dict { return &Dict{} }

// Set sets key to value, keeping the key's first position if it is already there. Keys
// are strings, ints, floats, bools or None.
func (d *Dict) Set(key, value any) {
	if i, ok := d.find(key); ok {
		d.values[i] = value
		return
	}
	d.keys = append(d.keys, key)
	d.values = append(d.values, value)
	if d.index != nil {
		d.index[hashKey(key)] = len(d.keys) - 1
	} else if len(d.keys) > 8 {
		d.index = make(map[any]int, len(d.keys))
		for i, k := range d.keys {
			d.index[hashKey(k)] = i
		}
	}
}

// Get returns the value of key.
func (d *Dict) Get(key any) (any, bool) {
	if i, ok := d.find(key); ok {
		return d.values[i], true
	}
	return nil, false
}

// Len is the number of keys.
func (d *Dict) Len() int { return len(d.keys) }

func (d *Dict) find(key any) (int, bool) {
	key = hashKey(key)
	if d.index != nil {
		i, ok := d.index[key]
		return i, ok
	}
	for i, k := range d.keys {
		if hashKey(k) == key {
			return i, true
		}
	}
	return 0, false
}

// hashKey gives equal Python keys one Go key: True and 1, and 1.0 and 1, are the same
// key in a dict.
func hashKey(k any) any {
	switch x := plain(k).(type) {
	case string:
		return x
	case bool:
		if x {
			return 1
		}
		return 0
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<62 {
			return int(x)
		}
	}
	return k
}

// hashable reports whether v can be a dict key.
func hashable(v any) bool {
	switch v.(type) {
	case nil, bool, int, float64, string, markup:
		return true
	}
	return false
}

// tuple is a Python tuple: a list that prints with parentheses.
type tuple []any

// rangeValue is what range() returns: like Python's range it holds no items, so that a
// loop over range(n) costs no memory, and a template can run one per message.
type rangeValue struct{ start, step, n int }

func (rv *rangeValue) at(i int) any { return rv.start + i*rv.step }

// iterator is what Jinja's lazy filters return (map, select, unique, batch, items, a
// reversed list …): a one-pass iterator, true even when empty, without a length, not
// JSON, and empty on a second pass. Templates that forget |list behave as in Python.
type iterator struct {
	items []any
	kind  string // Python's type name: generator, list_reverseiterator, dict_itemiterator
}

// dictView is what a dict's keys(), values() and items() return: a list that prints
// as Python's view ("dict_keys(['a'])") and is not JSON.
type dictView struct {
	items []any
	kind  string // dict_keys, dict_values, dict_items
}

// markup is a string marked safe (Jinja's Markup), what |safe and |escape return: adding
// a plain string to it escapes the plain string. Everything else reads it as a string.
type markup string

// plain reads a markup value as the string it is.
func plain(v any) any {
	if m, ok := v.(markup); ok {
		return string(m)
	}
	return v
}

// Undefined is what a missing variable, attribute or item evaluates to. It prints as
// nothing, iterates as nothing and is false; using it in an operation is an error
// that says what was missing.
type Undefined struct {
	// msg is the error its use raises: "'x' is undefined", "'dict object' has no
	// attribute 'x'".
	msg string
	// unsafe marks the attribute the sandbox refused (a mutating method): calling it
	// raises Jinja's SecurityError.
	unsafe bool
}

func undefinedName(name string) *Undefined {
	return &Undefined{msg: fmt.Sprintf("'%s' is undefined", name)}
}

func undefinedAttr(obj any, name string) *Undefined {
	return &Undefined{msg: fmt.Sprintf("%s has no attribute '%s'", objectDescription(obj), name)}
}

func undefinedItem(obj any, key any) *Undefined {
	return &Undefined{msg: fmt.Sprintf("%s has no element %s", objectDescription(obj), repr(key))}
}

// objectDescription names a value's type in Jinja's messages ("'dict object'").
func objectDescription(v any) string {
	if v == nil {
		return "'None'"
	}
	return "'" + typeName(v) + " object'"
}

func (u *Undefined) err() error {
	if u.unsafe {
		return &Error{Err: ErrForbidden, Msg: u.msg}
	}
	return fmt.Errorf("%s", u.msg)
}

// namespace is the object namespace() makes, the one value a template can assign
// attributes of.
type namespace struct{ attrs *Dict }

// typeName is Python's type name of a value, for messages.
func typeName(v any) string {
	switch x := v.(type) {
	case nil:
		return "NoneType"
	case bool:
		return "bool"
	case int:
		return "int"
	case float64:
		return "float"
	case string, markup:
		return "str"
	case *iterator:
		return x.kind
	case *rangeValue:
		return "range"
	case *dictView:
		return x.kind
	case []any:
		return "list"
	case tuple:
		return "tuple"
	case *Dict:
		return "dict"
	case *Undefined:
		return "Undefined"
	case *namespace:
		return "Namespace"
	case *macro:
		return "Macro"
	case *loopState:
		return "LoopContext"
	}
	return "function"
}

// truthy is Python's bool().
func truthy(v any) bool {
	switch x := v.(type) {
	case nil:
		return false
	case bool:
		return x
	case int:
		return x != 0
	case float64:
		return x != 0
	case string:
		return x != ""
	case markup:
		return x != ""
	case *rangeValue:
		return x.n > 0
	case *dictView:
		return len(x.items) > 0
	case []any:
		return len(x) > 0
	case tuple:
		return len(x) > 0
	case *Dict:
		return x.Len() > 0
	case *Undefined:
		return false
	}
	return true
}

// maxValueDepth bounds recursion over nested values (printing, comparing, JSON): a
// template can nest a list in itself through a namespace, a million levels deep.
const maxValueDepth = 512

var errTooDeep = &Error{Err: ErrLimit, Msg: fmt.Sprintf("template built a value nested deeper than %d levels", maxValueDepth)}

// writeStr writes Python's str(v) (Jinja prints values so; undefined prints nothing).
func writeStr(w *sink, v any) {
	switch x := v.(type) {
	case string:
		w.write(x)
	case markup:
		w.write(string(x))
	case *Undefined:
	default:
		writeRepr(w, v, 0)
	}
}

// writeRepr writes Python's repr(v).
func writeRepr(w *sink, v any, depth int) {
	if depth > maxValueDepth {
		w.fail(errTooDeep)
		return
	}
	switch x := v.(type) {
	case nil:
		w.write("None")
	case bool:
		if x {
			w.write("True")
		} else {
			w.write("False")
		}
	case int:
		w.write(strconv.Itoa(x))
	case float64:
		w.write(pythonFloat(x))
	case string:
		writeQuoted(w, x)
	case markup:
		w.write("Markup(")
		writeQuoted(w, string(x))
		w.write(")")
	case *iterator:
		w.write("<" + x.kind + " object>")
	case *dictView:
		w.write(x.kind + "(")
		writeSeq(w, "[", "]", x.items, depth)
		w.write(")")
	case *rangeValue:
		stop := x.start + x.n*x.step
		if x.step == 1 {
			w.write(fmt.Sprintf("range(%d, %d)", x.start, stop))
		} else {
			w.write(fmt.Sprintf("range(%d, %d, %d)", x.start, stop, x.step))
		}
	case []any:
		writeSeq(w, "[", "]", x, depth)
	case tuple:
		if len(x) == 1 {
			writeSeq(w, "(", ",)", x, depth)
		} else {
			writeSeq(w, "(", ")", x, depth)
		}
	case *Dict:
		writeDictRepr(w, x, depth)
	case *namespace:
		w.write("<Namespace ")
		writeDictRepr(w, x.attrs, depth)
		w.write(">")
	case *Undefined:
		w.write("Undefined")
	case *macro:
		w.write("<Macro '" + x.def.name + "'>")
	case *loopState:
		w.write("<LoopContext>")
	default:
		w.write("<function>")
	}
}

func writeSeq(w *sink, open, close string, items []any, depth int) {
	w.write(open)
	for i, e := range items {
		if i > 0 {
			w.write(", ")
		}
		writeRepr(w, e, depth+1)
		if w.err != nil {
			return
		}
	}
	w.write(close)
}

func writeDictRepr(w *sink, d *Dict, depth int) {
	w.write("{")
	for i, k := range d.keys {
		if i > 0 {
			w.write(", ")
		}
		writeRepr(w, k, depth+1)
		w.write(": ")
		writeRepr(w, d.values[i], depth+1)
		if w.err != nil {
			return
		}
	}
	w.write("}")
}

// quotePython is Python's repr of a string, for messages.
func quotePython(s string) string {
	var w sink
	writeQuoted(&w, s)
	return w.b.String()
}

// writeQuoted writes Python's repr of a string: single quotes unless the string holds a
// single quote and no double quote, escapes for backslashes, control and unprintable
// characters. Runs of plain characters go to the sink whole, so that the budget sees
// the escaped text as it grows.
func writeQuoted(w *sink, s string) {
	q := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		q = '"'
	}
	w.write(string(q))
	plainFrom := 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		escaped := r == rune(q) || r == '\\' || r < 0x20 || r == 0x7f || r >= 0x80 && r != utf8.RuneError && !pythonPrintable(r)
		if !escaped {
			continue
		}
		w.write(s[plainFrom : i-size])
		plainFrom = i
		switch {
		case r == rune(q) || r == '\\':
			w.write("\\")
			w.write(string(rune(r)))
		case r == '\n':
			w.write(`\n`)
		case r == '\r':
			w.write(`\r`)
		case r == '\t':
			w.write(`\t`)
		case r < 0x100:
			w.writeEscape('x', r, 2)
		case r < 0x10000:
			w.writeEscape('u', r, 4)
		default:
			w.writeEscape('U', r, 8)
		}
	}
	w.write(s[plainFrom:])
	w.write(string(q))
}

// pythonPrintable approximates Python's str.isprintable for non-ASCII characters: not
// a separator other than the ordinary space, not a control, format or unassigned one.
func pythonPrintable(r rune) bool {
	if r == ' ' {
		return true
	}
	return unicode.IsPrint(r) && !unicode.Is(unicode.Zs, r)
}

// pythonFloat formats f as Python's repr: the shortest round-trip digits, fixed notation
// for exponents from -4 to 15 with at least one decimal ("1.0"), scientific otherwise.
func pythonFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64)
	k := strings.LastIndexByte(e, 'e')
	exp, _ := strconv.Atoi(e[k+1:])
	if f != 0 && (exp < -4 || exp >= 16) {
		mant := e[:k]
		sign := "+"
		if exp < 0 {
			sign = "-"
			exp = -exp
		}
		return fmt.Sprintf("%se%s%02d", mant, sign, exp)
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".") {
		s += ".0"
	}
	return s
}

func parseInt(s string, base int) (int, bool) {
	v, err := strconv.ParseInt(s, base, 64)
	return int(v), err == nil && s != ""
}

func parseFloat(s string) (float64, error) { return strconv.ParseFloat(s, 64) }

// asNumber gives a value's number for arithmetic: ints (and bools, which are ints in
// Python) as int, floats as float64.
func asNumber(v any) (i int, f float64, isFloat, ok bool) {
	switch x := v.(type) {
	case bool:
		if x {
			return 1, 1, false, true
		}
		return 0, 0, false, true
	case int:
		return x, float64(x), false, true
	case float64:
		return 0, x, true, true
	}
	return 0, 0, false, false
}

// equal is Python's ==.
func (r *renderer) equal(a, b any, depth int) (bool, error) {
	if depth > maxValueDepth {
		return false, errTooDeep
	}
	// Every comparison is a step: a template can build a list that holds another twice,
	// forty levels deep, whose comparison would visit 2**40 leaves.
	if err := r.step(1); err != nil {
		return false, err
	}
	a, b = plain(a), plain(b)
	if ai, af, aFloat, ok := asNumber(a); ok {
		bi, bf, bFloat, ok := asNumber(b)
		if !ok {
			return false, nil
		}
		if aFloat || bFloat {
			return af == bf, nil
		}
		return ai == bi, nil
	}
	switch x := a.(type) {
	case nil:
		return b == nil, nil
	case string:
		y, ok := b.(string)
		if !ok {
			return false, nil
		}
		return x == y, r.scan(min(len(x), len(y)))
	case []any:
		if y, ok := b.([]any); ok {
			return r.equalSeq(x, y, depth)
		}
		return false, nil
	case tuple:
		if y, ok := b.(tuple); ok {
			return r.equalSeq(x, y, depth)
		}
		return false, nil
	case *Dict:
		y, ok := b.(*Dict)
		if !ok || x.Len() != y.Len() {
			return false, nil
		}
		for i, k := range x.keys {
			v, found := y.Get(k)
			if !found {
				return false, nil
			}
			if eq, err := r.equal(x.values[i], v, depth+1); !eq || err != nil {
				return false, err
			}
		}
		return true, nil
	case *Undefined:
		_, ok := b.(*Undefined)
		return ok, nil
	case *rangeValue:
		y, ok := b.(*rangeValue)
		return ok && (*x == *y || x.n == 0 && y.n == 0), nil
	}
	return a == b, nil
}

func (r *renderer) equalSeq(x, y []any, depth int) (bool, error) {
	if len(x) != len(y) {
		return false, nil
	}
	for i := range x {
		if eq, err := r.equal(x[i], y[i], depth+1); !eq || err != nil {
			return false, err
		}
	}
	return true, nil
}

// compare is Python's ordering of two values: -1, 0 or 1, or an error for values that
// do not order (a string and a number, None, dicts).
func (r *renderer) compare(a, b any, depth int) (int, error) {
	if depth > maxValueDepth {
		return 0, errTooDeep
	}
	if err := r.step(1); err != nil {
		return 0, err
	}
	a, b = plain(a), plain(b)
	if ai, af, aFloat, ok := asNumber(a); ok {
		if bi, bf, bFloat, ok := asNumber(b); ok {
			if aFloat || bFloat {
				return cmpFloat(af, bf), nil
			}
			return cmp.Compare(ai, bi), nil
		}
	}
	switch x := a.(type) {
	case string:
		if y, ok := b.(string); ok {
			return strings.Compare(x, y), r.scan(min(len(x), len(y)))
		}
	case []any:
		if y, ok := b.([]any); ok {
			return r.compareSeq(x, y, depth)
		}
	case tuple:
		if y, ok := b.(tuple); ok {
			return r.compareSeq(x, y, depth)
		}
	case *Undefined:
		return 0, x.err()
	}
	if u, ok := b.(*Undefined); ok {
		return 0, u.err()
	}
	return 0, fmt.Errorf("'<' not supported between instances of '%s' and '%s'", typeName(a), typeName(b))
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (r *renderer) compareSeq(x, y []any, depth int) (int, error) {
	for i := range min(len(x), len(y)) {
		eq, err := r.equal(x[i], y[i], depth+1)
		if err != nil {
			return 0, err
		}
		if !eq {
			return r.compare(x[i], y[i], depth+1)
		}
	}
	return cmp.Compare(len(x), len(y)), nil
}

// iterate is iterate for any value, ranges included, charging the lists it makes for
// ranges and strings before it makes them.
func (r *renderer) iterate(v any) ([]any, error) {
	if s, ok := plain(v).(string); ok {
		if err := r.allocList(utf8.RuneCountInString(s)); err != nil {
			return nil, err
		}
		return stringChars(s), nil
	}
	rv, ok := v.(*rangeValue)
	if !ok {
		return iterate(v)
	}
	if err := r.allocList(rv.n); err != nil {
		return nil, err
	}
	out := make([]any, rv.n)
	for i := range out {
		out[i] = rv.at(i)
	}
	return out, nil
}

// iterate lists what a for loop over v visits: a list's or tuple's items, a string's
// characters, a dict's keys; nothing for undefined. A range must go through
// renderer.iterate.
func iterate(v any) ([]any, error) {
	switch x := plain(v).(type) {
	case *iterator:
		items := x.items
		x.items = nil // consumed
		return items, nil
	case []any:
		return x, nil
	case tuple:
		return x, nil
	case *dictView:
		return x.items, nil
	case *Dict:
		return x.keys, nil
	case string:
		return stringChars(x), nil
	case *Undefined:
		return nil, nil
	}
	return nil, fmt.Errorf("'%s' object is not iterable", typeName(v))
}

func stringChars(s string) []any {
	out := make([]any, 0, utf8.RuneCountInString(s))
	for _, r := range s {
		out = append(out, string(r))
	}
	return out
}

// length is Python's len().
func length(v any) (int, error) {
	switch x := plain(v).(type) {
	case string:
		return utf8.RuneCountInString(x), nil
	case []any:
		return len(x), nil
	case tuple:
		return len(x), nil
	case *Dict:
		return x.Len(), nil
	case *Undefined:
		return 0, nil
	case *namespace:
		return x.attrs.Len(), nil
	case *rangeValue:
		return x.n, nil
	case *dictView:
		return len(x.items), nil
	}
	return 0, fmt.Errorf("object of type '%s' has no len()", typeName(v))
}

// contains is Python's "item in container".
func (r *renderer) contains(container, item any) (bool, error) {
	container, item = plain(container), plain(item)
	switch c := container.(type) {
	case string:
		s, ok := item.(string)
		if !ok {
			return false, fmt.Errorf("'in <string>' requires string as left operand, not %s", typeName(item))
		}
		return strings.Contains(c, s), r.scan(len(c))
	case *Dict:
		if !hashable(item) {
			return false, fmt.Errorf("unhashable type: '%s'", typeName(item))
		}
		_, ok := c.Get(item)
		return ok, nil
	case *Undefined:
		return false, nil
	case *rangeValue:
		i, ok := item.(int)
		if !ok || c.n == 0 {
			return false, nil
		}
		k := (i - c.start) / c.step
		return (i-c.start)%c.step == 0 && k >= 0 && k < c.n, nil
	}
	items, err := iterate(container)
	if err != nil {
		return false, fmt.Errorf("argument of type '%s' is not iterable", typeName(container))
	}
	for _, e := range items {
		if eq, err := r.equal(e, item, 0); eq || err != nil {
			return eq, err
		}
	}
	return false, nil
}

// pySlice is a resolved Python slice: count indices from first, step apart.
type pySlice struct{ first, step, count int }

func (s pySlice) index(k int) int { return s.first + k*s.step }

// resolveSlice resolves a Python slice [start:stop:step] over n items.
func resolveSlice(n int, start, stop, step any) (pySlice, error) {
	st := 1
	if step != nil {
		s, ok := step.(int)
		if !ok {
			return pySlice{}, fmt.Errorf("slice indices must be integers or None")
		}
		if s == 0 {
			return pySlice{}, fmt.Errorf("slice step cannot be zero")
		}
		st = s
	}
	bound := func(v any, dflt int) (int, error) {
		if v == nil {
			return dflt, nil
		}
		i, ok := v.(int)
		if !ok {
			if b, isBool := v.(bool); isBool {
				i, ok = map[bool]int{false: 0, true: 1}[b], true
			}
		}
		if !ok {
			return 0, fmt.Errorf("slice indices must be integers or None")
		}
		if i < 0 {
			i += n
			if i < 0 {
				i = -1
				if st > 0 {
					i = 0
				}
			}
		} else if i >= n {
			i = n
			if st < 0 {
				i = n - 1
			}
		}
		return i, nil
	}
	var lo, hi int
	var err error
	if st > 0 {
		if lo, err = bound(start, 0); err != nil {
			return pySlice{}, err
		}
		if hi, err = bound(stop, n); err != nil {
			return pySlice{}, err
		}
	} else {
		if lo, err = bound(start, n-1); err != nil {
			return pySlice{}, err
		}
		if hi, err = bound(stop, -1); err != nil {
			return pySlice{}, err
		}
	}
	count := 0
	if st > 0 && hi > lo {
		count = (hi - lo + st - 1) / st
	} else if st < 0 && lo > hi {
		count = (lo - hi - st - 1) / -st
	}
	return pySlice{first: lo, step: st, count: count}, nil
}

// sortValues sorts values in Python's order, stably; key extracts the sort key.
func (r *renderer) sortValues(items []any, key func(any) any, reverse bool) error {
	var err error
	slices.SortStableFunc(items, func(a, b any) int {
		if err != nil {
			return 0
		}
		c, e := r.compare(key(a), key(b), 0)
		if e != nil {
			err = e
		}
		if reverse {
			return -c
		}
		return c
	})
	return err
}
