package jinja

import (
	"fmt"
	"unicode"
)

type testFunc func(r *renderer, v any, a *args) (any, error)

// tests are Jinja's builtin tests ("x is defined").
var tests map[string]testFunc

func init() {
	is := func(f func(v any) bool) testFunc {
		return func(r *renderer, v any, a *args) (any, error) {
			if _, err := a.bind("test", nil); err != nil {
				return nil, err
			}
			return f(v), nil
		}
	}
	compareTest := func(op string) testFunc {
		return func(r *renderer, v any, a *args) (any, error) {
			p, err := a.bind(op, []string{"other"}, required)
			if err != nil {
				return nil, err
			}
			return r.compareOp(op, v, p[0])
		}
	}
	tests = map[string]testFunc{
		"defined":   is(func(v any) bool { _, u := v.(*Undefined); return !u }),
		"undefined": is(func(v any) bool { _, u := v.(*Undefined); return u }),
		"none":      is(func(v any) bool { return v == nil }),
		"string":    is(func(v any) bool { _, ok := v.(string); return ok }),
		"number": is(func(v any) bool {
			_, _, _, ok := asNumber(v)
			return ok
		}),
		"integer": is(func(v any) bool { _, ok := v.(int); return ok }),
		"float":   is(func(v any) bool { _, ok := v.(float64); return ok }),
		"boolean": is(func(v any) bool { _, ok := v.(bool); return ok }),
		"true":    is(func(v any) bool { return v == true }),
		"false":   is(func(v any) bool { return v == false }),
		"mapping": is(func(v any) bool { _, ok := v.(*Dict); return ok }),
		"iterable": is(func(v any) bool {
			switch v.(type) {
			case string, []any, tuple, *Dict, *Undefined, *iterator, *rangeValue:
				return true
			}
			return false
		}),
		"sequence": is(func(v any) bool {
			switch v.(type) {
			case string, []any, tuple, *Dict, *rangeValue, *Undefined:
				return true
			}
			return false
		}),
		"callable": is(func(v any) bool {
			switch v.(type) {
			case *callable, *macro, Func, *Undefined: // Undefined has __call__ (that raises)
				return true
			}
			return false
		}),
		"lower": caseTest(unicode.IsLower, unicode.IsUpper),
		"upper": caseTest(unicode.IsUpper, unicode.IsLower),
		"odd":   parityTest(1),
		"even":  parityTest(0),
		"divisibleby": func(r *renderer, v any, a *args) (any, error) {
			p, err := a.bind("divisibleby", []string{"num"}, required)
			if err != nil {
				return nil, err
			}
			m, err := r.binary("%", v, p[0])
			if err != nil {
				return nil, err
			}
			return r.equal(m, 0, 0)
		},
		"eq": compareTest("=="), "equalto": compareTest("=="), "==": compareTest("=="),
		"ne": compareTest("!="), "!=": compareTest("!="),
		"lt": compareTest("<"), "lessthan": compareTest("<"), "<": compareTest("<"),
		"le": compareTest("<="), "<=": compareTest("<="),
		"gt": compareTest(">"), "greaterthan": compareTest(">"), ">": compareTest(">"),
		"ge": compareTest(">="), ">=": compareTest(">="),
		"in": func(r *renderer, v any, a *args) (any, error) {
			p, err := a.bind("in", []string{"seq"}, required)
			if err != nil {
				return nil, err
			}
			return r.contains(p[0], v)
		},
		"sameas": func(r *renderer, v any, a *args) (any, error) {
			p, err := a.bind("sameas", []string{"other"}, required)
			if err != nil {
				return nil, err
			}
			return sameAs(v, p[0]), nil
		},
		"filter": func(r *renderer, v any, a *args) (any, error) {
			_, ok := filters[fmt.Sprint(v)]
			return ok, nil
		},
		"test": func(r *renderer, v any, a *args) (any, error) {
			_, ok := tests[fmt.Sprint(v)]
			return ok, nil
		},
	}
}

// parityTest is odd (want 1) or even (want 0): value % 2 == want, as Jinja computes it,
// floats and all.
// caseTest is Jinja's lower or upper test: str(value).islower() or .isupper(), true
// when a character has the case and none has the other.
func caseTest(is, other func(rune) bool) testFunc {
	method := casedMethod(is, other)
	return func(r *renderer, v any, a *args) (any, error) {
		s, err := r.str(v)
		if err != nil {
			return nil, err
		}
		return method(r, s, a)
	}
}

func parityTest(want int) testFunc {
	return func(r *renderer, v any, a *args) (any, error) {
		m, err := r.binary("%", v, 2)
		if err != nil {
			return nil, err
		}
		return r.equal(m, want, 0)
	}
}

// sameAs is Python's "is": identity, which for the singletons None, True and False is
// equality, and for other values the same object.
func sameAs(a, b any) bool {
	switch x := a.(type) {
	case nil, bool:
		return a == b
	case []any:
		y, ok := b.([]any)
		return ok && len(x) == len(y) && (len(x) == 0 || &x[0] == &y[0])
	case *Dict, *namespace, *macro, *Undefined:
		return a == b
	case int, string, float64:
		return a == b
	}
	return false
}
