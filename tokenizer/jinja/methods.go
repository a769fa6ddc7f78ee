package jinja

import (
	"fmt"
	"math"
	"strings"
	"unicode"
	"unicode/utf8"
)

// mutating lists the methods of Python's list and dict that change the value: the
// immutable sandbox refuses them (Jinja raises SecurityError when they are called).
var mutating = map[string]bool{
	"append": true, "clear": true, "extend": true, "insert": true, "pop": true, "remove": true,
	"reverse": true, "sort": true, "popitem": true, "setdefault": true, "update": true,
}

func unsafeMethod(obj any, name string) *Undefined {
	return &Undefined{msg: fmt.Sprintf("access to attribute '%s' of '%s' object is unsafe.", name, typeName(obj)), unsafe: true}
}

func bound(name string, fn func(r *renderer, a *args) (any, error)) *callable {
	return &callable{name: name, fn: fn}
}

// dictMethod is the method name of a dict, or nil.
func dictMethod(d *Dict, name string) any {
	if mutating[name] {
		return unsafeMethod(d, name)
	}
	switch name {
	case "get":
		return bound(name, func(r *renderer, a *args) (any, error) {
			p, err := a.bind("get", []string{"key", "default"}, required, nil)
			if err != nil {
				return nil, err
			}
			if !hashable(p[0]) {
				return nil, fmt.Errorf("unhashable type: '%s'", typeName(p[0]))
			}
			if v, ok := d.Get(p[0]); ok {
				return v, nil
			}
			return p[1], nil
		})
	case "items":
		return bound(name, func(r *renderer, a *args) (any, error) {
			if _, err := a.bind("items", nil); err != nil {
				return nil, err
			}
			items, err := r.dictItems(d)
			return &dictView{items: items, kind: "dict_items"}, err
		})
	case "keys":
		return bound(name, func(r *renderer, a *args) (any, error) {
			if _, err := a.bind("keys", nil); err != nil {
				return nil, err
			}
			keys, err := r.copyList(d.keys)
			return &dictView{items: keys, kind: "dict_keys"}, err
		})
	case "values":
		return bound(name, func(r *renderer, a *args) (any, error) {
			if _, err := a.bind("values", nil); err != nil {
				return nil, err
			}
			values, err := r.copyList(d.values)
			return &dictView{items: values, kind: "dict_values"}, err
		})
	case "copy":
		return bound(name, func(r *renderer, a *args) (any, error) {
			if err := r.allocList(2 * d.Len()); err != nil {
				return nil, err
			}
			c := NewDict()
			for i, k := range d.keys {
				c.Set(k, d.values[i])
			}
			return c, nil
		})
	}
	return nil
}

func (r *renderer) copyList(items []any) ([]any, error) {
	if err := r.allocList(len(items)); err != nil {
		return nil, err
	}
	return append(make([]any, 0, len(items)), items...), nil
}

// dictItems lists a dict's (key, value) pairs in order.
func (r *renderer) dictItems(d *Dict) ([]any, error) {
	if err := r.allocList(3 * d.Len()); err != nil {
		return nil, err
	}
	out := make([]any, d.Len())
	for i, k := range d.keys {
		out[i] = tuple{k, d.values[i]}
	}
	return out, nil
}

// method is the method name of a string, list or tuple, or nil.
func method(obj any, name string) any {
	switch x := obj.(type) {
	case string:
		if m, ok := strMethods[name]; ok {
			return bound(name, func(r *renderer, a *args) (any, error) {
				if err := r.scan(len(x)); err != nil {
					return nil, err
				}
				return m(r, x, a)
			})
		}
	case []any, tuple:
		if _, isList := x.([]any); isList && mutating[name] {
			return unsafeMethod(obj, name)
		}
		items, _ := iterate(x)
		switch name {
		case "index", "count":
			return bound(name, func(r *renderer, a *args) (any, error) {
				p, err := a.bind(name, []string{"value"}, required)
				if err != nil {
					return nil, err
				}
				if err := r.step(len(items)); err != nil {
					return nil, err
				}
				n := 0
				for i, e := range items {
					eq, err := r.equal(e, p[0], 0)
					if err != nil {
						return nil, err
					}
					if eq && name == "index" {
						return i, nil
					}
					if eq {
						n++
					}
				}
				if name == "index" {
					return nil, fmt.Errorf("%s is not in list", repr(p[0]))
				}
				return n, nil
			})
		case "copy":
			if _, isList := x.([]any); isList {
				return bound(name, func(r *renderer, a *args) (any, error) { return r.copyList(items) })
			}
		}
	}
	return nil
}

type strMethod func(r *renderer, s string, a *args) (any, error)

// strMethods are the methods of Python's str that templates call.
var strMethods map[string]strMethod

func init() {
	strMethods = map[string]strMethod{
		"strip":      stripMethod("strip", strings.Trim, strings.TrimSpace),
		"lstrip":     stripMethod("lstrip", strings.TrimLeft, func(s string) string { return strings.TrimLeftFunc(s, unicode.IsSpace) }),
		"rstrip":     stripMethod("rstrip", strings.TrimRight, func(s string) string { return strings.TrimRightFunc(s, unicode.IsSpace) }),
		"split":      splitMethod(false),
		"rsplit":     splitMethod(true),
		"startswith": affixMethod("startswith", strings.HasPrefix),
		"endswith":   affixMethod("endswith", strings.HasSuffix),
		"lower":      caseMethod(strings.ToLower),
		"upper":      caseMethod(strings.ToUpper),
		"title":      caseMethod(pythonTitle),
		"capitalize": caseMethod(capitalize),
		"swapcase":   caseMethod(swapCase),
		"casefold":   caseMethod(strings.ToLower),
		"replace": func(r *renderer, s string, a *args) (any, error) {
			p, err := a.bind("replace", []string{"old", "new", "count"}, required, required, -1)
			if err != nil {
				return nil, err
			}
			return r.replace(s, p[0], p[1], p[2])
		},
		"find":   findMethod("find", false, false),
		"rfind":  findMethod("rfind", true, false),
		"index":  findMethod("index", false, true),
		"rindex": findMethod("rindex", true, true),
		"count": func(r *renderer, s string, a *args) (any, error) {
			p, err := a.bind("count", []string{"sub"}, required)
			if err != nil {
				return nil, err
			}
			sub, ok := p[0].(string)
			if !ok {
				return nil, fmt.Errorf("must be str, not %s", typeName(p[0]))
			}
			if sub == "" {
				return utf8.RuneCountInString(s) + 1, nil
			}
			return strings.Count(s, sub), nil
		},
		"join": func(r *renderer, s string, a *args) (any, error) {
			p, err := a.bind("join", []string{"iterable"}, required)
			if err != nil {
				return nil, err
			}
			items, err := r.iterate(p[0])
			if err != nil {
				return nil, err
			}
			for _, it := range items {
				if _, ok := it.(string); !ok {
					return nil, fmt.Errorf("sequence item: expected str instance, %s found", typeName(it))
				}
			}
			return r.join(items, s)
		},
		"splitlines": func(r *renderer, s string, a *args) (any, error) {
			p, err := a.bind("splitlines", []string{"keepends"}, false)
			if err != nil {
				return nil, err
			}
			return r.splitLines(s, truthy(p[0]))
		},
		"isdigit":   classMethod(func(c rune) bool { return unicode.IsDigit(c) }),
		"isnumeric": classMethod(func(c rune) bool { return unicode.IsNumber(c) }),
		"isdecimal": classMethod(func(c rune) bool { return unicode.Is(unicode.Nd, c) }),
		"isalpha":   classMethod(unicode.IsLetter),
		"isalnum":   classMethod(func(c rune) bool { return unicode.IsLetter(c) || unicode.IsNumber(c) }),
		"isspace":   classMethod(unicode.IsSpace),
		"isupper":   casedMethod(unicode.IsUpper, unicode.IsLower),
		"islower":   casedMethod(unicode.IsLower, unicode.IsUpper),
		"format": func(r *renderer, s string, a *args) (any, error) {
			return r.strFormat(s, a)
		},
		"center": padMethod("center"),
		"ljust":  padMethod("ljust"),
		"rjust":  padMethod("rjust"),
		"zfill": func(r *renderer, s string, a *args) (any, error) {
			p, err := a.bind("zfill", []string{"width"}, required)
			if err != nil {
				return nil, err
			}
			w, ok := p[0].(int)
			if !ok {
				return nil, fmt.Errorf("zfill() width must be an integer")
			}
			n := utf8.RuneCountInString(s)
			if w <= n {
				return s, nil
			}
			if err := r.alloc(w - n + len(s)); err != nil {
				return nil, err
			}
			sign := ""
			if s != "" && (s[0] == '-' || s[0] == '+') {
				sign, s = s[:1], s[1:]
			}
			return sign + strings.Repeat("0", w-n) + s, nil
		},
		"partition":  partitionMethod(false),
		"rpartition": partitionMethod(true),
		"removeprefix": func(r *renderer, s string, a *args) (any, error) {
			p, err := a.bind("removeprefix", []string{"prefix"}, required)
			if err != nil {
				return nil, err
			}
			pre, ok := p[0].(string)
			if !ok {
				return nil, fmt.Errorf("removeprefix() argument must be str")
			}
			return strings.TrimPrefix(s, pre), nil
		},
		"removesuffix": func(r *renderer, s string, a *args) (any, error) {
			p, err := a.bind("removesuffix", []string{"suffix"}, required)
			if err != nil {
				return nil, err
			}
			suf, ok := p[0].(string)
			if !ok {
				return nil, fmt.Errorf("removesuffix() argument must be str")
			}
			return strings.TrimSuffix(s, suf), nil
		},
	}
}

func stripMethod(name string, trim func(string, string) string, space func(string) string) strMethod {
	return func(r *renderer, s string, a *args) (any, error) {
		p, err := a.bind(name, []string{"chars"}, nil)
		if err != nil {
			return nil, err
		}
		switch c := p[0].(type) {
		case nil:
			return space(s), nil
		case string:
			return trim(s, c), nil
		}
		return nil, fmt.Errorf("%s arg must be None or str", name)
	}
}

func caseMethod(f func(string) string) strMethod {
	return func(r *renderer, s string, a *args) (any, error) {
		if _, err := a.bind("case", nil); err != nil {
			return nil, err
		}
		if err := r.alloc(len(s)); err != nil {
			return nil, err
		}
		return f(s), nil
	}
}

func classMethod(class func(rune) bool) strMethod {
	return func(r *renderer, s string, a *args) (any, error) {
		if s == "" {
			return false, nil
		}
		for _, c := range s {
			if !class(c) {
				return false, nil
			}
		}
		return true, nil
	}
}

// casedMethod is isupper/islower: at least one cased character, none of the other case.
func casedMethod(is, other func(rune) bool) strMethod {
	return func(r *renderer, s string, a *args) (any, error) {
		found := false
		for _, c := range s {
			if other(c) {
				return false, nil
			}
			found = found || is(c)
		}
		return found, nil
	}
}

func affixMethod(name string, has func(string, string) bool) strMethod {
	return func(r *renderer, s string, a *args) (any, error) {
		p, err := a.bind(name, []string{"prefix", "start", "end"}, required, nil, nil)
		if err != nil {
			return nil, err
		}
		if p[1] != nil || p[2] != nil {
			if s, err = r.sliceString(s, p[1], p[2], nil); err != nil {
				return nil, err
			}
		}
		switch x := p[0].(type) {
		case string:
			return has(s, x), nil
		case tuple:
			for _, e := range x {
				affix, ok := e.(string)
				if !ok {
					return nil, fmt.Errorf("tuple for %s must only contain str, not %s", name, typeName(e))
				}
				if has(s, affix) {
					return true, nil
				}
			}
			return false, nil
		}
		return nil, fmt.Errorf("%s first arg must be str or a tuple of str, not %s", name, typeName(p[0]))
	}
}

func findMethod(name string, last, raise bool) strMethod {
	return func(r *renderer, s string, a *args) (any, error) {
		p, err := a.bind(name, []string{"sub"}, required)
		if err != nil {
			return nil, err
		}
		sub, ok := p[0].(string)
		if !ok {
			return nil, fmt.Errorf("must be str, not %s", typeName(p[0]))
		}
		i := strings.Index(s, sub)
		if last {
			i = strings.LastIndex(s, sub)
		}
		if i < 0 {
			if raise {
				return nil, fmt.Errorf("substring not found")
			}
			return -1, nil
		}
		return utf8.RuneCountInString(s[:i]), nil
	}
}

func padMethod(name string) strMethod {
	return func(r *renderer, s string, a *args) (any, error) {
		p, err := a.bind(name, []string{"width", "fillchar"}, required, " ")
		if err != nil {
			return nil, err
		}
		w, ok := p[0].(int)
		fill, fillOK := p[1].(string)
		if !ok || !fillOK || utf8.RuneCountInString(fill) != 1 {
			return nil, fmt.Errorf("%s() takes an integer width and one fill character", name)
		}
		n := utf8.RuneCountInString(s)
		if w <= n {
			return s, nil
		}
		if err := r.alloc((w-n)*len(fill) + len(s)); err != nil {
			return nil, err
		}
		left := 0
		switch name {
		case "center":
			left = (w - n) / 2
			if (w-n)%2 == 1 && w%2 == 1 {
				left++
			}
		case "rjust":
			left = w - n
		}
		return strings.Repeat(fill, left) + s + strings.Repeat(fill, w-n-left), nil
	}
}

func partitionMethod(last bool) strMethod {
	return func(r *renderer, s string, a *args) (any, error) {
		p, err := a.bind("partition", []string{"sep"}, required)
		if err != nil {
			return nil, err
		}
		sep, ok := p[0].(string)
		if !ok || sep == "" {
			return nil, fmt.Errorf("partition() takes a non-empty separator")
		}
		i := strings.Index(s, sep)
		if last {
			i = strings.LastIndex(s, sep)
		}
		if i < 0 {
			if last {
				return tuple{"", "", s}, nil
			}
			return tuple{s, "", ""}, nil
		}
		return tuple{s[:i], sep, s[i+len(sep):]}, nil
	}
}

// splitMethod is str.split and str.rsplit.
func splitMethod(fromRight bool) strMethod {
	return func(r *renderer, s string, a *args) (any, error) {
		p, err := a.bind("split", []string{"sep", "maxsplit"}, nil, -1)
		if err != nil {
			return nil, err
		}
		limit, ok := p[1].(int)
		if !ok {
			return nil, fmt.Errorf("maxsplit must be an integer")
		}
		sep, isString := p[0].(string)
		if p[0] != nil && !isString {
			return nil, fmt.Errorf("must be str or None, not %s", typeName(p[0]))
		}
		if isString && sep == "" {
			return nil, fmt.Errorf("empty separator")
		}
		// The parts are counted and charged before they are made: "a" * 10**7 split on
		// "a" makes ten million strings.
		n := countFields(s) + 1
		if isString {
			n = strings.Count(s, sep) + 1
		}
		if limit >= 0 {
			n = min(n, limit+1)
		}
		if err := r.allocList(2 * n); err != nil {
			return nil, err
		}
		var parts []string
		switch {
		case !isString:
			parts = splitSpace(s, limit, fromRight)
		case fromRight:
			parts = rsplitN(s, sep, n)
		default:
			parts = strings.SplitN(s, sep, n)
		}
		return stringList(parts), nil
	}
}

// countFields counts the runs of non-space characters in s.
func countFields(s string) int {
	n, inField := 0, false
	for _, c := range s {
		space := unicode.IsSpace(c)
		if !space && !inField {
			n++
		}
		inField = !space
	}
	return n
}

// stringList turns parts into a list value.
func stringList(parts []string) []any {
	out := make([]any, len(parts))
	for i, p := range parts {
		out[i] = p
	}
	return out
}

func rsplitN(s, sep string, n int) []string {
	var rev []string
	for n < 0 || len(rev) < n-1 {
		i := strings.LastIndex(s, sep)
		if i < 0 {
			break
		}
		rev = append(rev, s[i+len(sep):])
		s = s[:i]
	}
	out := []string{s}
	for i := len(rev) - 1; i >= 0; i-- {
		out = append(out, rev[i])
	}
	return out
}

// splitSpace is str.split() without separator: runs of white space separate, and
// leading and trailing white space gives no empty parts; at most limit splits.
func splitSpace(s string, limit int, fromRight bool) []string {
	if !fromRight {
		var parts []string
		for {
			s = strings.TrimLeftFunc(s, unicode.IsSpace)
			if s == "" {
				return parts
			}
			if limit >= 0 && len(parts) == limit {
				return append(parts, s)
			}
			i := strings.IndexFunc(s, unicode.IsSpace)
			if i < 0 {
				return append(parts, s)
			}
			parts = append(parts, s[:i])
			s = s[i:]
		}
	}
	var rev []string
	for {
		s = strings.TrimRightFunc(s, unicode.IsSpace)
		if s == "" {
			break
		}
		if limit >= 0 && len(rev) == limit {
			rev = append(rev, s)
			break
		}
		i := strings.LastIndexFunc(s, unicode.IsSpace)
		if i < 0 {
			rev = append(rev, s)
			break
		}
		_, size := utf8.DecodeRuneInString(s[i:])
		rev = append(rev, s[i+size:])
		s = s[:i]
	}
	out := make([]string, len(rev))
	for i, p := range rev {
		out[len(rev)-1-i] = p
	}
	return out
}

// splitLines is str.splitlines, on the line boundaries Python knows.
func (r *renderer) splitLines(s string, keepEnds bool) (any, error) {
	breaks := 0
	for _, c := range s {
		if isLineBreak(c) {
			breaks++
		}
	}
	if err := r.allocList(2 * (breaks + 1)); err != nil {
		return nil, err
	}
	var parts []string
	for s != "" {
		i := strings.IndexFunc(s, isLineBreak)
		if i < 0 {
			parts = append(parts, s)
			break
		}
		_, n := utf8.DecodeRuneInString(s[i:])
		if s[i] == '\r' && i+1 < len(s) && s[i+1] == '\n' {
			n = 2
		}
		if keepEnds {
			parts = append(parts, s[:i+n])
		} else {
			parts = append(parts, s[:i])
		}
		s = s[i+n:]
	}
	return stringList(parts), nil
}

func isLineBreak(c rune) bool {
	switch c {
	case '\n', '\r', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029:
		return true
	}
	return false
}

// pythonTitle is str.title: a letter after a non-letter starts a word.
func pythonTitle(s string) string {
	var b strings.Builder
	prevCased := false
	for _, c := range s {
		if prevCased {
			b.WriteRune(unicode.ToLower(c))
		} else {
			b.WriteRune(unicode.ToTitle(c))
		}
		prevCased = unicode.IsLetter(c)
	}
	return b.String()
}

// capitalize is str.capitalize: the first character upper case, the rest lower.
func capitalize(s string) string {
	c, n := utf8.DecodeRuneInString(s)
	if n == 0 {
		return s
	}
	return string(unicode.ToTitle(c)) + strings.ToLower(s[n:])
}

func swapCase(s string) string {
	return strings.Map(func(c rune) rune {
		if unicode.IsUpper(c) {
			return unicode.ToLower(c)
		}
		return unicode.ToUpper(c)
	}, s)
}

// replace is str.replace, its result charged before it is built.
func (r *renderer) replace(s string, oldV, newV, countV any) (any, error) {
	old, ok1 := oldV.(string)
	repl, ok2 := newV.(string)
	count, ok3 := countV.(int)
	if !ok1 || !ok2 || !ok3 {
		return nil, fmt.Errorf("replace() takes two strings and an integer count")
	}
	n := strings.Count(s, old)
	if count >= 0 {
		n = min(n, count)
	}
	if err := r.alloc(len(s) + n*(len(repl)-len(old))); err != nil {
		return nil, err
	}
	return strings.Replace(s, old, repl, n), nil
}

// join concatenates str() of items with sep, charged as it is built.
func (r *renderer) join(items []any, sep string) (any, error) {
	w := r.newSink()
	for i, it := range items {
		if i > 0 {
			w.write(sep)
		}
		writeStr(w, it)
	}
	return w.b.String(), w.err
}

// loopState's attributes.
func (l *loopState) attr(r *renderer, name string) any {
	n := l.n
	switch name {
	case "index":
		return l.index + 1
	case "index0":
		return l.index
	case "revindex":
		return n - l.index
	case "revindex0":
		return n - l.index - 1
	case "first":
		return l.index == 0
	case "last":
		return l.index == n-1
	case "length":
		return n
	case "depth":
		return l.depth
	case "depth0":
		return l.depth - 1
	case "previtem":
		if l.index > 0 {
			return l.at(l.index - 1)
		}
		return &Undefined{msg: "there is no previous item"}
	case "nextitem":
		if l.index < n-1 {
			return l.at(l.index + 1)
		}
		return &Undefined{msg: "there is no next item"}
	case "cycle":
		return bound(name, func(r *renderer, a *args) (any, error) {
			if len(a.pos) == 0 {
				return nil, fmt.Errorf("no items for cycling given")
			}
			return a.pos[l.index%len(a.pos)], nil
		})
	case "changed":
		return bound(name, func(r *renderer, a *args) (any, error) {
			v := tuple(a.pos)
			if l.changedSet {
				if eq, err := r.equal(l.changedLast, v, 0); err != nil || eq {
					return false, err
				}
			}
			l.changedLast, l.changedSet = v, true
			return true, nil
		})
	}
	return undefinedAttr(l, name)
}

// globals are the functions every template sees.
var globals = map[string]any{
	"range": bound("range", func(r *renderer, a *args) (any, error) {
		var start, stop, step = 0, 0, 1
		ints := make([]int, len(a.pos))
		for i, v := range a.pos {
			n, ok := v.(int)
			if !ok {
				return nil, fmt.Errorf("'%s' object cannot be interpreted as an integer", typeName(v))
			}
			ints[i] = n
		}
		switch len(ints) {
		case 1:
			stop = ints[0]
		case 2:
			start, stop = ints[0], ints[1]
		case 3:
			start, stop, step = ints[0], ints[1], ints[2]
		default:
			return nil, fmt.Errorf("range expected 1 to 3 integer arguments, got %d", len(ints))
		}
		if step == 0 {
			return nil, fmt.Errorf("range() arg 3 must not be zero")
		}
		// The length in unsigned arithmetic: stop - start overflows for range(-2**62, 2**62).
		var n uint64
		if step > 0 && stop > start {
			n = (uint64(stop)-uint64(start)-1)/uint64(step) + 1
		} else if step < 0 && stop < start {
			n = (uint64(start)-uint64(stop)-1)/(uint64(-step)) + 1
		}
		if n > math.MaxInt {
			return nil, fmt.Errorf("%w: range of %d items", errOverflow, n)
		}
		return &rangeValue{start: start, step: step, n: int(n)}, nil
	}),
	"namespace": bound("namespace", func(r *renderer, a *args) (any, error) {
		d, err := r.dictFromArgs(a)
		return &namespace{attrs: d}, err
	}),
	"dict": bound("dict", func(r *renderer, a *args) (any, error) { return r.dictFromArgs(a) }),
}

// dictFromArgs builds a dict as dict() and namespace() do: from an optional mapping or
// list of pairs, then the keyword arguments.
func (r *renderer) dictFromArgs(a *args) (*Dict, error) {
	if len(a.pos) > 1 {
		return nil, fmt.Errorf("expected at most 1 positional argument, got %d", len(a.pos))
	}
	if err := r.allocList(2 * len(a.names)); err != nil {
		return nil, err
	}
	d := NewDict()
	if len(a.pos) == 1 {
		switch src := a.pos[0].(type) {
		case *Dict:
			if err := r.allocList(2 * src.Len()); err != nil {
				return nil, err
			}
			for i, k := range src.keys {
				d.Set(k, src.values[i])
			}
		default:
			pairs, err := r.iterate(src)
			if err != nil {
				return nil, err
			}
			if err := r.allocList(2 * len(pairs)); err != nil {
				return nil, err
			}
			for _, p := range pairs {
				kv, err := r.iterate(p)
				if err != nil || len(kv) != 2 || !hashable(kv[0]) {
					return nil, fmt.Errorf("dictionary update sequence element has the wrong form")
				}
				d.Set(kv[0], kv[1])
			}
		}
	}
	for i, name := range a.names {
		d.Set(name, a.kw[i])
	}
	return d, nil
}
