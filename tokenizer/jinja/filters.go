package jinja

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

type filterFunc func(r *renderer, v any, a *args) (any, error)

// filters are Jinja's builtin filters that chat templates use, with tojson as Hugging
// Face defines it.
var filters map[string]filterFunc

func init() {
	filters = map[string]filterFunc{
		"length": filterLength, "count": filterLength,
		"first": func(r *renderer, v any, a *args) (any, error) {
			if it, ok := v.(*iterator); ok && len(it.items) > 0 {
				first := it.items[0]
				it.items = it.items[1:] // Python's next() takes one item
				return first, nil
			}
			items, err := r.iterate(v)
			if err != nil {
				return nil, err
			}
			if len(items) == 0 {
				return &Undefined{msg: "No first item, sequence was empty."}, nil
			}
			return items[0], nil
		},
		"last": func(r *renderer, v any, a *args) (any, error) {
			if it, ok := v.(*iterator); ok {
				return nil, fmt.Errorf("'%s' object is not reversible", it.kind)
			}
			items, err := r.iterate(v)
			if err != nil {
				return nil, err
			}
			if len(items) == 0 {
				return &Undefined{msg: "No last item, sequence was empty."}, nil
			}
			return items[len(items)-1], nil
		},
		"join": func(r *renderer, v any, a *args) (any, error) {
			p, err := a.bind("join", []string{"d", "attribute"}, "", nil)
			if err != nil {
				return nil, err
			}
			items, err := r.attributeItems(v, p[1])
			if err != nil {
				return nil, err
			}
			sep, err := r.str(p[0])
			if err != nil {
				return nil, err
			}
			return r.join(items, sep)
		},
		"default": filterDefault, "d": filterDefault,
		"trim": func(r *renderer, v any, a *args) (any, error) {
			p, err := a.bind("trim", []string{"chars"}, nil)
			if err != nil {
				return nil, err
			}
			s, err := r.str(v)
			if err != nil {
				return nil, err
			}
			return strMethods["strip"](r, s, &args{pos: []any{p[0]}})
		},
		"upper":      stringFilter(strings.ToUpper),
		"lower":      stringFilter(strings.ToLower),
		"capitalize": stringFilter(capitalize),
		"title":      stringFilter(jinjaTitle),
		"safe": func(r *renderer, v any, a *args) (any, error) {
			s, err := r.str(v)
			return markup(s), err
		},
		"string": stringFilter(func(s string) string { return s }),
		"escape": filterEscape, "e": filterEscape,
		"replace": func(r *renderer, v any, a *args) (any, error) {
			p, err := a.bind("replace", []string{"old", "new", "count"}, required, required, nil)
			if err != nil {
				return nil, err
			}
			s, err := r.str(v)
			if err != nil {
				return nil, err
			}
			if p[2] == nil {
				p[2] = -1
			}
			if err := r.scan(len(s)); err != nil {
				return nil, err
			}
			return r.replace(s, p[0], p[1], p[2])
		},
		"tojson": filterToJSON,
		"items": func(r *renderer, v any, a *args) (any, error) {
			switch d := v.(type) {
			case *Dict:
				items, err := r.dictItems(d)
				return &iterator{items: items, kind: "dict_itemiterator"}, err
			case *Undefined:
				return []any{}, nil
			case nil:
				// Python raises on None; llama.cpp, whose renders this package is also
				// tested against, gives no pairs. Templates call |items on optional
				// arguments, where None must not end the render.
				return []any{}, nil
			}
			return nil, fmt.Errorf("can only get item pairs from a mapping")
		},
		"list": func(r *renderer, v any, a *args) (any, error) {
			items, err := r.iterate(v)
			if err != nil {
				return nil, err
			}
			return r.copyList(items)
		},
		"int": func(r *renderer, v any, a *args) (any, error) {
			p, err := a.bind("int", []string{"default", "base"}, 0, 10)
			if err != nil {
				return nil, err
			}
			if u, ok := v.(*Undefined); ok {
				return nil, u.err()
			}
			return toInt(v, p[0], p[1]), nil
		},
		"float": func(r *renderer, v any, a *args) (any, error) {
			p, err := a.bind("float", []string{"default"}, 0.0)
			if err != nil {
				return nil, err
			}
			if u, ok := v.(*Undefined); ok {
				return nil, u.err()
			}
			return toFloat(v, p[0]), nil
		},
		"abs": func(r *renderer, v any, a *args) (any, error) {
			i, f, isFloat, ok := asNumber(v)
			switch {
			case !ok:
				return nil, fmt.Errorf("bad operand type for abs(): '%s'", typeName(v))
			case isFloat:
				return math.Abs(f), nil
			case i == math.MinInt:
				return nil, errOverflow
			}
			return abs(i), nil
		},
		"round": filterRound,
		"map":   filterMap,
		"select": func(r *renderer, v any, a *args) (any, error) {
			return r.selectItems(v, a, false, true)
		},
		"reject": func(r *renderer, v any, a *args) (any, error) {
			return r.selectItems(v, a, false, false)
		},
		"selectattr": func(r *renderer, v any, a *args) (any, error) {
			return r.selectItems(v, a, true, true)
		},
		"rejectattr": func(r *renderer, v any, a *args) (any, error) {
			return r.selectItems(v, a, true, false)
		},
		"unique": filterUnique,
		"sort":   filterSort,
		"reverse": func(r *renderer, v any, a *args) (any, error) {
			if s, ok := v.(string); ok {
				if err := r.alloc(5 * len(s)); err != nil { // the characters and the result
					return nil, err
				}
				return reverseString(s), nil
			}
			_, wasIterator := v.(*iterator)
			items, err := r.iterate(v)
			if err != nil {
				return nil, err
			}
			out, err := r.copyList(items)
			for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
				out[i], out[j] = out[j], out[i]
			}
			if wasIterator || err != nil {
				return out, err // Python cannot reverse an iterator in place: it lists it
			}
			return &iterator{items: out, kind: reverseIteratorKind(v)}, nil
		},
		"indent": filterIndent,
		"wordcount": func(r *renderer, v any, a *args) (any, error) {
			s, err := r.str(v)
			if err != nil {
				return nil, err
			}
			words, inWord := 0, false
			for _, c := range s {
				if isWordChar(c) && !inWord {
					words++
				}
				inWord = isWordChar(c)
			}
			return words, r.scan(len(s))
		},
		"batch":    func(r *renderer, v any, a *args) (any, error) { return r.batch(v, a, false) },
		"slice":    func(r *renderer, v any, a *args) (any, error) { return r.batch(v, a, true) },
		"sum":      filterSum,
		"min":      func(r *renderer, v any, a *args) (any, error) { return r.minMax(v, a, -1) },
		"max":      func(r *renderer, v any, a *args) (any, error) { return r.minMax(v, a, 1) },
		"dictsort": filterDictsort,
		"format": func(r *renderer, v any, a *args) (any, error) {
			s, err := r.str(v)
			if err != nil {
				return nil, err
			}
			if len(a.names) > 0 {
				return r.percentFormat(s, keywordDict(a))
			}
			return r.percentFormat(s, tuple(a.pos))
		},
		"attr": func(r *renderer, v any, a *args) (any, error) {
			p, err := a.bind("attr", []string{"name"}, required)
			if err != nil {
				return nil, err
			}
			name, ok := p[0].(string)
			if !ok {
				return nil, fmt.Errorf("attribute name must be a string")
			}
			return r.getattr(v, name)
		},
		"center": func(r *renderer, v any, a *args) (any, error) {
			s, err := r.str(v)
			if err != nil {
				return nil, err
			}
			p, err := a.bind("center", []string{"width"}, 80)
			if err != nil {
				return nil, err
			}
			return padMethod("center")(r, s, &args{pos: p})
		},
	}
}

// reverseIteratorKind is the type of Python's reversed(v).
func reverseIteratorKind(v any) string {
	switch v.(type) {
	case *Dict:
		return "dict_reversekeyiterator"
	case []any:
		return "list_reverseiterator"
	}
	return "reversed"
}

func filterEscape(r *renderer, v any, a *args) (any, error) {
	if m, ok := v.(markup); ok {
		return m, nil
	}
	s, err := r.str(v)
	if err != nil {
		return nil, err
	}
	if err := r.alloc(htmlEscapedSize(s)); err != nil {
		return nil, err
	}
	return markup(htmlEscape(s)), nil
}

// generator wraps a lazy filter's result.
func generator(items []any) *iterator { return &iterator{items: items, kind: "generator"} }

func keywordDict(a *args) *Dict {
	d := NewDict()
	for i, n := range a.names {
		d.Set(n, a.kw[i])
	}
	return d
}

func filterLength(r *renderer, v any, a *args) (any, error) {
	if s, ok := v.(string); ok {
		if err := r.scan(len(s)); err != nil { // counting characters reads them all
			return nil, err
		}
	}
	return length(v)
}

func filterDefault(r *renderer, v any, a *args) (any, error) {
	p, err := a.bind("default", []string{"default_value", "boolean"}, "", false)
	if err != nil {
		return nil, err
	}
	_, undefined := v.(*Undefined)
	if undefined || truthy(p[1]) && !truthy(v) {
		return p[0], nil
	}
	return v, nil
}

// stringFilter makes a filter of a string function applied to str(value).
func stringFilter(f func(string) string) filterFunc {
	return func(r *renderer, v any, a *args) (any, error) {
		if _, err := a.bind("filter", nil); err != nil {
			return nil, err
		}
		s, err := r.str(v)
		if err != nil {
			return nil, err
		}
		if err := r.alloc(len(s)); err != nil {
			return nil, err
		}
		return f(s), nil
	}
}

// jinjaTitle is Jinja's title filter: words begin after white space and -({[<.
func jinjaTitle(s string) string {
	var b strings.Builder
	start := true
	for _, c := range s {
		if unicode.IsSpace(c) || strings.ContainsRune("-({[<", c) {
			b.WriteRune(c)
			start = true
			continue
		}
		if start {
			b.WriteRune(unicode.ToTitle(c))
		} else {
			b.WriteRune(unicode.ToLower(c))
		}
		start = false
	}
	return b.String()
}

var htmlEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&#34;", "'", "&#39;")

func htmlEscape(s string) string { return htmlEscaper.Replace(s) }

// htmlEscapedSize is len(htmlEscape(s)), known before escaping.
func htmlEscapedSize(s string) int {
	n := len(s)
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '&', '"', '\'':
			n += 4
		case '<', '>':
			n += 3
		}
	}
	return n
}

func reverseString(s string) string {
	chars := []rune(s)
	slices.Reverse(chars)
	return string(chars)
}

func isWordChar(c rune) bool { return c == '_' || unicode.IsLetter(c) || unicode.IsDigit(c) }

// toInt is Jinja's int filter: numbers truncate, strings parse in base (with a 0x, 0o or
// 0b prefix for base 0 or 16…), or as floats; anything else gives the default.
func toInt(v, dflt, baseV any) any {
	base, _ := baseV.(int)
	switch x := v.(type) {
	case bool:
		if x {
			return 1
		}
		return 0
	case int:
		return x
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) || math.Abs(x) >= 1<<63 {
			return dflt
		}
		return int(x)
	case string:
		s := strings.ReplaceAll(strings.TrimSpace(x), "_", "")
		if n, err := strconv.ParseInt(s, base, 64); err == nil {
			return int(n)
		}
		if base == 16 || base == 8 || base == 2 || base == 0 {
			if n, err := strconv.ParseInt(s, 0, 64); err == nil {
				return int(n)
			}
		}
		if f, err := strconv.ParseFloat(s, 64); err == nil {
			return toInt(f, dflt, 10)
		}
	}
	return dflt
}

func toFloat(v, dflt any) any {
	switch x := v.(type) {
	case bool, int:
		_, f, _, _ := asNumber(x)
		return f
	case float64:
		return x
	case string:
		s := strings.ToLower(strings.TrimSpace(x))
		switch s {
		case "inf", "+inf", "infinity":
			return math.Inf(1)
		case "-inf", "-infinity":
			return math.Inf(-1)
		case "nan":
			return math.NaN()
		}
		if f, err := strconv.ParseFloat(strings.ReplaceAll(s, "_", ""), 64); err == nil && !strings.ContainsAny(s, "x") {
			return f
		}
	}
	return dflt
}

// filterRound is Jinja's round: "common" rounds half to even as Python's round does,
// "floor" and "ceil" as they say; the result is a float unless an int came in with
// method common.
func filterRound(r *renderer, v any, a *args) (any, error) {
	p, err := a.bind("round", []string{"precision", "method"}, 0, "common")
	if err != nil {
		return nil, err
	}
	prec, ok := p[0].(int)
	if !ok {
		return nil, fmt.Errorf("round precision must be an integer")
	}
	i, f, isFloat, isNum := asNumber(v)
	if !isNum {
		return nil, fmt.Errorf("type %s doesn't define __round__ method", typeName(v))
	}
	scale := math.Pow(10, float64(prec))
	switch p[1] {
	case "common":
		if !isFloat {
			return i, nil
		}
		return roundHalfEven(f, prec), nil
	case "floor":
		return math.Floor(f*scale) / scale, nil
	case "ceil":
		return math.Ceil(f*scale) / scale, nil
	}
	return nil, fmt.Errorf("method must be common, ceil or floor")
}

// roundHalfEven is Python's round(f, prec): the decimal nearest to f's exact binary
// value, ties to even, which is how strconv rounds a fixed precision too.
func roundHalfEven(f float64, prec int) float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return f
	}
	if prec < 0 {
		scale := math.Pow(10, float64(-prec))
		return math.RoundToEven(f/scale) * scale
	}
	rounded, _ := strconv.ParseFloat(strconv.FormatFloat(f, 'f', min(prec, 400), 64), 64)
	return rounded
}

// attributeItems lists v's items, or each item's attribute when attribute is set (dots
// reach into nested values, digits index lists).
func (r *renderer) attributeItems(v, attribute any) ([]any, error) {
	items, err := r.iterate(v)
	if err != nil || attribute == nil {
		return items, err
	}
	out := make([]any, len(items))
	for i, it := range items {
		if out[i], err = r.attributeOf(it, attribute); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (r *renderer) attributeOf(v, attribute any) (any, error) {
	name, ok := attribute.(string)
	if !ok {
		return r.getitem(v, attribute)
	}
	for part := range strings.SplitSeq(name, ".") {
		var key any = part
		if n, err := strconv.Atoi(part); err == nil {
			key = n
		}
		var err error
		if v, err = r.getitem(v, key); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// filterMap is Jinja's map: a filter applied to each item, or each item's attribute.
// Like select and reject, it reads a false value (None, undefined) as no items.
func filterMap(r *renderer, v any, a *args) (any, error) {
	if !truthy(v) {
		v = []any{}
	}
	items, err := r.iterate(v)
	if err != nil {
		return nil, err
	}
	if err := r.step(len(items)); err != nil {
		return nil, err
	}
	if err := r.allocList(len(items)); err != nil {
		return nil, err
	}
	out := make([]any, len(items))
	if len(a.pos) == 0 {
		p, err := a.bind("map", []string{"attribute", "default"}, required, nil)
		if err != nil {
			return nil, err
		}
		for i, it := range items {
			if out[i], err = r.attributeOf(it, p[0]); err != nil {
				return nil, err
			}
			if _, undefined := out[i].(*Undefined); undefined && p[1] != nil {
				out[i] = p[1]
			}
		}
		return generator(out), nil
	}
	name, ok := a.pos[0].(string)
	f, found := filters[name]
	if !ok || !found {
		return nil, fmt.Errorf("no filter named %s", repr(a.pos[0]))
	}
	rest := &args{pos: a.pos[1:], names: a.names, kw: a.kw}
	for i, it := range items {
		if out[i], err = f(r, it, rest); err != nil {
			return nil, err
		}
	}
	return generator(out), nil
}

// selectItems is select/reject (byAttr false) and selectattr/rejectattr: the items
// whose test (or truth, without a test name) is want.
func (r *renderer) selectItems(v any, a *args, byAttr, want bool) (any, error) {
	if !truthy(v) {
		v = []any{}
	}
	items, err := r.iterate(v)
	if err != nil {
		return nil, err
	}
	if err := r.step(len(items)); err != nil {
		return nil, err
	}
	pos := a.pos
	var attribute any
	if byAttr {
		if len(pos) == 0 {
			return nil, fmt.Errorf("missing parameter for attribute name")
		}
		attribute, pos = pos[0], pos[1:]
	}
	var test testFunc
	testArgs := &args{names: a.names, kw: a.kw}
	if len(pos) > 0 {
		name, ok := pos[0].(string)
		t, found := tests[name]
		if !ok || !found {
			return nil, fmt.Errorf("no test named %s", repr(pos[0]))
		}
		test, testArgs.pos = t, pos[1:]
	}
	out := []any{}
	for _, it := range items {
		x := it
		if byAttr {
			if x, err = r.attributeOf(it, attribute); err != nil {
				return nil, err
			}
		}
		ok := truthy(x)
		if test != nil {
			res, err := test(r, x, testArgs)
			if err != nil {
				return nil, err
			}
			ok = res.(bool)
		}
		if ok == want {
			out = append(out, it)
		}
	}
	return generator(out), r.allocList(len(out))
}

// sortKey gives the key Jinja's sort, unique, min and max compare: the attribute, lower
// case for strings unless case_sensitive.
func (r *renderer) sortKey(attribute any, caseSensitive bool) func(any) (any, error) {
	return func(v any) (any, error) {
		if attribute != nil {
			var err error
			if v, err = r.attributeOf(v, attribute); err != nil {
				return nil, err
			}
		}
		if s, ok := v.(string); ok && !caseSensitive {
			return strings.ToLower(s), nil
		}
		return v, nil
	}
}

// keyed pairs items with their sort keys.
func (r *renderer) keyed(items []any, key func(any) (any, error)) ([]any, error) {
	if err := r.step(len(items)); err != nil {
		return nil, err
	}
	if err := r.allocList(2 * len(items)); err != nil {
		return nil, err
	}
	out := make([]any, len(items))
	for i, it := range items {
		k, err := key(it)
		if err != nil {
			return nil, err
		}
		out[i] = [2]any{k, it}
	}
	return out, nil
}

func keyOfPair(p any) any { return p.([2]any)[0] }

// sortedByKey sorts keyed pairs (see keyed) by their keys, stably, and returns their
// values in that order, in the pairs' slice.
func (r *renderer) sortedByKey(pairs []any, reverse bool) ([]any, error) {
	if err := r.sortValues(pairs, keyOfPair, reverse); err != nil {
		return nil, err
	}
	for i, pr := range pairs {
		pairs[i] = pr.([2]any)[1]
	}
	return pairs, nil
}

func filterSort(r *renderer, v any, a *args) (any, error) {
	p, err := a.bind("sort", []string{"reverse", "case_sensitive", "attribute"}, false, false, nil)
	if err != nil {
		return nil, err
	}
	items, err := r.iterate(v)
	if err != nil {
		return nil, err
	}
	pairs, err := r.keyed(items, r.sortKey(p[2], truthy(p[1])))
	if err != nil {
		return nil, err
	}
	return r.sortedByKey(pairs, truthy(p[0]))
}

func filterUnique(r *renderer, v any, a *args) (any, error) {
	p, err := a.bind("unique", []string{"case_sensitive", "attribute"}, false, nil)
	if err != nil {
		return nil, err
	}
	items, err := r.iterate(v)
	if err != nil {
		return nil, err
	}
	pairs, err := r.keyed(items, r.sortKey(p[1], truthy(p[0])))
	if err != nil {
		return nil, err
	}
	var out []any
	seen := map[any]bool{}
	var unhashable []any
	for _, pr := range pairs {
		k := keyOfPair(pr)
		if hashable(k) {
			if seen[hashKey(k)] {
				continue
			}
			seen[hashKey(k)] = true
		} else {
			dup := false
			for _, u := range unhashable {
				if eq, _ := r.equal(u, k, 0); eq {
					dup = true
				}
			}
			if dup {
				continue
			}
			unhashable = append(unhashable, k)
		}
		out = append(out, pr.([2]any)[1])
	}
	return generator(out), nil
}

func (r *renderer) minMax(v any, a *args, sign int) (any, error) {
	p, err := a.bind("min", []string{"case_sensitive", "attribute"}, false, nil)
	if err != nil {
		return nil, err
	}
	items, err := r.iterate(v)
	if err != nil {
		return nil, err
	}
	pairs, err := r.keyed(items, r.sortKey(p[1], truthy(p[0])))
	if err != nil {
		return nil, err
	}
	if len(pairs) == 0 {
		return &Undefined{msg: "No aggregated item, sequence was empty."}, nil
	}
	best := pairs[0]
	for _, pr := range pairs[1:] {
		c, err := r.compare(keyOfPair(pr), keyOfPair(best), 0)
		if err != nil {
			return nil, err
		}
		if c*sign > 0 {
			best = pr
		}
	}
	return best.([2]any)[1], nil
}

func filterSum(r *renderer, v any, a *args) (any, error) {
	p, err := a.bind("sum", []string{"attribute", "start"}, nil, 0)
	if err != nil {
		return nil, err
	}
	items, err := r.attributeItems(v, p[0])
	if err != nil {
		return nil, err
	}
	total := p[1]
	for _, it := range items {
		if total, err = r.binary("+", total, it); err != nil {
			return nil, err
		}
	}
	return total, nil
}

func filterDictsort(r *renderer, v any, a *args) (any, error) {
	p, err := a.bind("dictsort", []string{"case_sensitive", "by", "reverse"}, false, "key", false)
	if err != nil {
		return nil, err
	}
	d, ok := v.(*Dict)
	if !ok {
		return nil, fmt.Errorf("dictsort: can only sort a mapping")
	}
	pos := 0
	switch p[1] {
	case "key":
	case "value":
		pos = 1
	default:
		return nil, fmt.Errorf("you can only sort by either \"key\" or \"value\"")
	}
	items, err := r.dictItems(d)
	if err != nil {
		return nil, err
	}
	caseKey := r.sortKey(nil, truthy(p[0]))
	pairs, err := r.keyed(items, func(it any) (any, error) { return caseKey(it.(tuple)[pos]) })
	if err != nil {
		return nil, err
	}
	return r.sortedByKey(pairs, truthy(p[2]))
}

func filterIndent(r *renderer, v any, a *args) (any, error) {
	p, err := a.bind("indent", []string{"width", "first", "blank"}, 4, false, false)
	if err != nil {
		return nil, err
	}
	// Jinja appends to the value itself: only strings indent.
	s, ok := v.(string)
	if u, isUndefined := v.(*Undefined); isUndefined {
		return nil, u.err()
	}
	if !ok {
		return nil, fmt.Errorf("unsupported operand type(s) for +=: '%s' and 'str'", typeName(v))
	}
	var pad string
	switch w := p[0].(type) {
	case int:
		if w > r.limits.MaxBytes-r.bytes {
			return nil, r.bytesError()
		}
		pad = strings.Repeat(" ", max(w, 0))
	case string:
		pad = w
	default:
		return nil, fmt.Errorf("indent width must be an integer or a string")
	}
	lineCount := strings.Count(s, "\n") + 1
	if lineCount > 0 && len(pad) > (r.limits.MaxBytes-r.bytes)/lineCount {
		return nil, r.bytesError()
	}
	if err := r.alloc(len(s) + lineCount*(len(pad)+16)); err != nil {
		return nil, err
	}
	lines := strings.Split(s, "\n")
	var b strings.Builder
	for i, line := range lines {
		if i > 0 {
			b.WriteByte('\n')
		}
		if (i > 0 || truthy(p[1])) && (truthy(p[2]) || strings.TrimSpace(line) != "") {
			b.WriteString(pad)
		}
		b.WriteString(line)
	}
	return b.String(), nil
}

// batch is Jinja's batch (slices false: lists of n items) and slice (slices true: n
// lists), the last padded with fill_with when given.
func (r *renderer) batch(v any, a *args, slices bool) (any, error) {
	p, err := a.bind("batch", []string{"linecount", "fill_with"}, required, nil)
	if err != nil {
		return nil, err
	}
	n, ok := p[0].(int)
	if !ok || n <= 0 {
		return nil, fmt.Errorf("batch size must be a positive integer")
	}
	items, err := r.iterate(v)
	if err != nil {
		return nil, err
	}
	if err := r.allocList(2*len(items) + n); err != nil {
		return nil, err
	}
	fill := len(a.pos) > 1 || indexOf(a.names, "fill_with") >= 0
	out := []any{}
	if !slices {
		for i := 0; i < len(items); i += n {
			chunk := append([]any{}, items[i:min(i+n, len(items))]...)
			for fill && len(chunk) < n {
				chunk = append(chunk, p[1])
			}
			out = append(out, chunk)
		}
		return generator(out), nil
	}
	per, extra := len(items)/n, len(items)%n
	offset := 0
	for i := range n {
		size := per
		if i < extra {
			size++
		}
		chunk := append([]any{}, items[offset:offset+size]...)
		offset += size
		if fill && i >= extra && extra > 0 {
			chunk = append(chunk, p[1])
		}
		out = append(out, chunk)
	}
	return generator(out), nil
}
