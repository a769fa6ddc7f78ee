package jinja

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// percentFormat is Python's "format % values".
func (r *renderer) percentFormat(format string, values any) (any, error) {
	var positional []any
	mapping, isMapping := values.(*Dict)
	switch x := values.(type) {
	case tuple:
		positional = x
	case *Dict:
	default:
		positional = []any{values}
	}
	used := 0
	w := r.newSink()
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' {
			j := strings.IndexByte(format[i:], '%')
			if j < 0 {
				j = len(format) - i
			}
			w.write(format[i : i+j])
			i += j - 1
			continue
		}
		i++
		if i >= len(format) {
			return nil, fmt.Errorf("incomplete format")
		}
		var arg any
		haveArg := false
		if format[i] == '(' {
			end := strings.IndexByte(format[i:], ')')
			if end < 0 || !isMapping {
				return nil, fmt.Errorf("format requires a mapping")
			}
			v, ok := mapping.Get(format[i+1 : i+end])
			if !ok {
				return nil, fmt.Errorf("KeyError: %s", quotePython(format[i+1:i+end]))
			}
			arg, haveArg = v, true
			i += end + 1
		}
		spec := numSpec{precision: -1}
		for ; i < len(format) && strings.IndexByte("-+ #0", format[i]) >= 0; i++ {
			spec.flag(format[i])
		}
		next := func() (any, error) {
			if used >= len(positional) {
				return nil, fmt.Errorf("not enough arguments for format string")
			}
			used++
			return positional[used-1], nil
		}
		readNum := func() (int, error) {
			if i < len(format) && format[i] == '*' {
				i++
				v, err := next()
				if err != nil {
					return 0, err
				}
				n, ok := v.(int)
				if !ok {
					return 0, fmt.Errorf("* wants int")
				}
				return n, nil
			}
			start := i
			for i < len(format) && format[i] >= '0' && format[i] <= '9' {
				i++
			}
			n, _ := strconv.Atoi(format[start:i])
			return n, nil
		}
		var err error
		if spec.width, err = readNum(); err != nil {
			return nil, err
		}
		if i < len(format) && format[i] == '.' {
			i++
			if spec.precision, err = readNum(); err != nil {
				return nil, err
			}
		}
		if i >= len(format) {
			return nil, fmt.Errorf("incomplete format")
		}
		spec.verb = format[i]
		if spec.verb == '%' {
			w.write("%")
			continue
		}
		if !haveArg {
			if isMapping {
				arg = mapping
			} else if arg, err = next(); err != nil {
				return nil, err
			}
		}
		if spec.width > r.limits.MaxBytes-r.bytes || spec.precision > r.limits.MaxBytes-r.bytes {
			return nil, r.bytesError()
		}
		s, err := r.formatValue(arg, spec)
		if err != nil {
			return nil, err
		}
		w.write(s)
	}
	// Python reads any non-tuple with items (a list or range too) as a possible mapping,
	// and then does not count unused arguments.
	_, isList := values.([]any)
	_, isRange := values.(*rangeValue)
	if used < len(positional) && !isMapping && !isList && !isRange {
		return nil, fmt.Errorf("not all arguments converted during string formatting")
	}
	return w.b.String(), w.err
}

// numSpec is a parsed conversion: %-style or a format() spec.
type numSpec struct {
	fill             byte
	align            byte // '<', '>', '^', '=' or 0 for the type's default
	sign             byte // '+', ' ' or 0
	alt, zero, comma bool
	width, precision int
	verb             byte
}

func (s *numSpec) flag(c byte) {
	switch c {
	case '-':
		s.align = '<'
	case '+':
		s.sign = '+'
	case ' ':
		if s.sign == 0 {
			s.sign = ' '
		}
	case '#':
		s.alt = true
	case '0':
		s.zero = true
	}
}

// formatValue converts one value as the spec says.
func (r *renderer) formatValue(v any, spec numSpec) (string, error) {
	var body string
	numeric := true
	switch spec.verb {
	case 's', 0:
		if _, _, _, isNum := asNumber(v); spec.verb == 0 && isNum && spec.precision >= 0 {
			spec.verb = 'g'
			return r.formatValue(v, spec)
		}
		s, err := r.str(v)
		if err != nil {
			return "", err
		}
		if spec.precision >= 0 && spec.precision < utf8.RuneCountInString(s) {
			s = string([]rune(s)[:spec.precision])
		}
		body, numeric = s, false
	case 'r', 'a':
		w := r.newSink()
		writeRepr(w, v, 0)
		if w.err != nil {
			return "", w.err
		}
		body, numeric = w.b.String(), false
	case 'c':
		switch x := v.(type) {
		case int:
			body = string(rune(x))
		case string:
			body = x
		}
		numeric = false
	case 'd', 'i', 'u', 'x', 'X', 'o', 'b':
		i, f, isFloat, ok := asNumber(v)
		if !ok {
			return "", fmt.Errorf("%%%c format: a real number is required, not %s", spec.verb, typeName(v))
		}
		if isFloat {
			i = int(f)
		}
		base := map[byte]int{'x': 16, 'X': 16, 'o': 8, 'b': 2}[spec.verb]
		if base == 0 {
			base = 10
		}
		body = strconv.FormatInt(int64(abs(i)), base)
		if spec.verb == 'X' {
			body = strings.ToUpper(body)
		}
		if spec.alt && base != 10 {
			body = "0" + string(spec.verb) + body
		}
		if spec.comma {
			body = groupThousands(body)
		}
		if i < 0 {
			body = "-" + body
		}
	case 'f', 'F', 'e', 'E', 'g', 'G', '%':
		_, f, _, ok := asNumber(v)
		if !ok {
			return "", fmt.Errorf("must be real number, not %s", typeName(v))
		}
		prec := spec.precision
		if prec < 0 {
			prec = 6
		}
		if spec.verb == '%' {
			f *= 100
		}
		verb := spec.verb
		if verb == '%' || verb == 'F' {
			verb = 'f'
		}
		if verb == 'g' || verb == 'G' {
			prec = max(prec, 1)
		}
		body = strconv.FormatFloat(math.Abs(f), verb, prec, 64)
		if verb == 'e' || verb == 'E' || verb == 'g' || verb == 'G' {
			body = pythonExponent(body)
		}
		if spec.comma {
			intPart, frac, _ := strings.Cut(body, ".")
			body = groupThousands(intPart)
			if frac != "" {
				body += "." + frac
			}
		}
		if spec.verb == '%' {
			body += "%"
		}
		if math.Signbit(f) && !math.IsNaN(f) {
			body = "-" + body
		}
	default:
		return "", fmt.Errorf("unsupported format character '%c'", spec.verb)
	}
	if numeric && spec.sign != 0 && !strings.HasPrefix(body, "-") {
		body = string(spec.sign) + body
	}
	return pad(body, spec, numeric), nil
}

// pythonExponent writes an exponent with at least two digits, as Python does ("1e+05").
func pythonExponent(s string) string {
	k := strings.IndexAny(s, "eE")
	if k < 0 || len(s)-k-2 >= 2 {
		return s
	}
	return s[:k+2] + "0" + s[k+2:]
}

func groupThousands(digits string) string {
	var b strings.Builder
	for i, c := range digits {
		if i > 0 && (len(digits)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// pad pads a converted value to the spec's width.
func pad(body string, spec numSpec, numeric bool) string {
	n := utf8.RuneCountInString(body)
	if n >= spec.width {
		return body
	}
	fill := string(rune(max(spec.fill, ' ')))
	align := spec.align
	if align == 0 {
		align = '<'
		if numeric {
			align = '>'
			if spec.zero {
				align, fill = '=', "0"
			}
		}
	}
	gap := spec.width - n
	switch align {
	case '>':
		return strings.Repeat(fill, gap) + body
	case '^':
		return strings.Repeat(fill, gap/2) + body + strings.Repeat(fill, gap-gap/2)
	case '=':
		sign := ""
		if body != "" && strings.IndexByte("+- ", body[0]) >= 0 {
			sign, body = body[:1], body[1:]
		}
		return sign + strings.Repeat(fill, gap) + body
	}
	return body + strings.Repeat(fill, gap)
}

// strFormat is Python's str.format: {} and {0} positional fields, {name} keyword
// fields, with attribute and index lookups, !r/!s conversions and a format spec.
func (r *renderer) strFormat(format string, a *args) (any, error) {
	w := r.newSink()
	auto := 0
	manual := false
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c == '}' {
			if i+1 < len(format) && format[i+1] == '}' {
				i++
				w.write("}")
				continue
			}
			return nil, fmt.Errorf("single '}' encountered in format string")
		}
		if c != '{' {
			w.write(format[i : i+1])
			continue
		}
		if i+1 < len(format) && format[i+1] == '{' {
			i++
			w.write("{")
			continue
		}
		end := strings.IndexByte(format[i:], '}')
		if end < 0 {
			return nil, fmt.Errorf("expected '}' before end of string")
		}
		field := format[i+1 : i+end]
		i += end
		field, specText, _ := strings.Cut(field, ":")
		field, conversion, _ := strings.Cut(field, "!")
		name := field
		rest := ""
		if k := strings.IndexAny(field, ".["); k >= 0 {
			name, rest = field[:k], field[k:]
		}
		var v any
		switch n, err := strconv.Atoi(name); {
		case name == "":
			if manual {
				return nil, fmt.Errorf("cannot switch from manual field specification to automatic field numbering")
			}
			if auto >= len(a.pos) {
				return nil, fmt.Errorf("Replacement index %d out of range for positional args tuple", auto)
			}
			v = a.pos[auto]
			auto++
		case err == nil:
			if auto > 0 {
				return nil, fmt.Errorf("cannot switch from automatic field numbering to manual field specification")
			}
			manual = true
			if n >= len(a.pos) {
				return nil, fmt.Errorf("Replacement index %d out of range for positional args tuple", n)
			}
			v = a.pos[n]
		default:
			k := indexOf(a.names, name)
			if k < 0 {
				return nil, fmt.Errorf("KeyError: %s", quotePython(name))
			}
			v = a.kw[k]
		}
		for rest != "" {
			var err error
			if rest[0] == '.' {
				k := strings.IndexAny(rest[1:], ".[") + 1
				if k == 0 {
					k = len(rest)
				}
				v, err = r.getattr(v, rest[1:k])
				rest = rest[k:]
			} else {
				k := strings.IndexByte(rest, ']')
				if k < 0 {
					return nil, fmt.Errorf("Missing ']' in format string")
				}
				var key any = rest[1:k]
				if n, convErr := strconv.Atoi(rest[1:k]); convErr == nil {
					key = n
				}
				v, err = r.getitem(v, key)
				rest = rest[k+1:]
			}
			if err != nil {
				return nil, err
			}
		}
		spec, err := parseFormatSpec(specText)
		if err != nil {
			return nil, err
		}
		if spec.width > r.limits.MaxBytes-r.bytes || spec.precision > r.limits.MaxBytes-r.bytes {
			return nil, r.bytesError()
		}
		switch conversion {
		case "r", "a":
			w2 := r.newSink()
			writeRepr(w2, v, 0)
			v = w2.b.String()
		case "s":
			if v, err = r.str(v); err != nil {
				return nil, err
			}
		}
		if spec.verb == 0 {
			if _, isStr := v.(string); !isStr {
				if _, _, isFloat, isNum := asNumber(v); !isNum || !isFloat && spec.precision < 0 {
					spec.verb = 's'
					if isNum {
						spec.verb = 'd'
					}
				}
			}
		}
		s, err := r.formatValue(v, spec)
		if err != nil {
			return nil, err
		}
		w.write(s)
	}
	return w.b.String(), w.err
}

// parseFormatSpec parses format()'s [[fill]align][sign][#][0][width][,][.precision][type].
func parseFormatSpec(s string) (numSpec, error) {
	spec := numSpec{precision: -1}
	i := 0
	if len(s) >= 2 && strings.IndexByte("<>^=", s[1]) >= 0 {
		spec.fill, spec.align, i = s[0], s[1], 2
	} else if len(s) >= 1 && strings.IndexByte("<>^=", s[0]) >= 0 {
		spec.align, i = s[0], 1
	}
	if i < len(s) && strings.IndexByte("+- ", s[i]) >= 0 {
		if s[i] != '-' {
			spec.sign = s[i]
		}
		i++
	}
	if i < len(s) && s[i] == '#' {
		spec.alt = true
		i++
	}
	if i < len(s) && s[i] == '0' {
		spec.zero = true
		i++
	}
	start := i
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	spec.width, _ = strconv.Atoi(s[start:i])
	if i < len(s) && s[i] == ',' {
		spec.comma = true
		i++
	}
	if i < len(s) && s[i] == '.' {
		i++
		start = i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		spec.precision, _ = strconv.Atoi(s[start:i])
	}
	if i < len(s) {
		spec.verb = s[i]
		i++
	}
	if i != len(s) {
		return spec, fmt.Errorf("invalid format specifier")
	}
	return spec, nil
}
