package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nikolalohinski/gonja/v2/exec"
)

// Object is a JSON object that remembers the order of its keys. Chat templates print
// tools and tool-call arguments with tojson, and Python keeps the order the client sent.
type Object struct {
	Keys   []string
	Values map[string]any
}

// maxJSONDepth bounds nesting in DecodeJSON (requests are untrusted).
const maxJSONDepth = 256

// DecodeJSON decodes one JSON value for a chat template: objects become *Object, arrays
// []any, integers int, other numbers float64, strings, booleans and null as usual.
func DecodeJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec, 0)
	if err != nil {
		return nil, err
	}
	// Anything after the value but white space is an error, valid JSON or not ("[1] ]").
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("json: unexpected data after the value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder, depth int) (any, error) {
	if depth > maxJSONDepth {
		return nil, fmt.Errorf("json: nested deeper than %d", maxJSONDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			obj := &Object{Values: map[string]any{}}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				key := kt.(string) // the decoder only returns strings in key position
				val, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				if _, dup := obj.Values[key]; !dup {
					obj.Keys = append(obj.Keys, key)
				}
				obj.Values[key] = val // like Python, the last duplicate wins
			}
			_, err := dec.Token()
			return obj, err
		case '[':
			arr := []any{}
			for dec.More() {
				val, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				arr = append(arr, val)
			}
			_, err := dec.Token()
			return arr, err
		}
		return nil, fmt.Errorf("json: unexpected %v", t)
	case json.Number:
		if i, err := strconv.ParseInt(t.String(), 10, 0); err == nil {
			return int(i), nil
		}
		f, err := t.Float64()
		if err != nil {
			return nil, fmt.Errorf("json: number %s: %w", t, err)
		}
		return f, nil
	}
	return tok, nil // string, bool or nil
}

// tojsonFilter is Hugging Face's tojson: json.dumps(x, ensure_ascii=False) with optional
// indent and sort_keys, separators ", " and ": ", no HTML escaping.
func tojsonFilter(_ *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	opts := jsonOpts{}
	for name, v := range params.KwArgs {
		switch name {
		case "indent":
			if !v.IsNil() {
				if !v.IsInteger() {
					return exec.AsValue(fmt.Errorf("tojson: indent must be an integer, got %s", v.String()))
				}
				opts.indent = strings.Repeat(" ", max(0, v.Integer()))
				opts.pretty = true
			}
		case "sort_keys":
			opts.sortKeys = v.Bool()
		case "ensure_ascii":
			opts.ascii = v.Bool()
		default:
			return exec.AsValue(fmt.Errorf("tojson: unsupported argument %q", name))
		}
	}
	if len(params.Args) > 0 {
		return exec.AsValue(errors.New("tojson takes keyword arguments only"))
	}
	var b strings.Builder
	if err := opts.write(&b, in.Interface(), 0); err != nil {
		return exec.AsValue(fmt.Errorf("tojson: %w", err))
	}
	return exec.AsSafeValue(b.String())
}

type jsonOpts struct {
	pretty   bool
	indent   string
	sortKeys bool
	ascii    bool
}

func (o jsonOpts) newline(b *strings.Builder, level int) {
	if o.pretty {
		b.WriteByte('\n')
		for range level {
			b.WriteString(o.indent)
		}
	}
}

func (o jsonOpts) itemSep(b *strings.Builder) {
	if o.pretty {
		b.WriteByte(',')
	} else {
		b.WriteString(", ")
	}
}

// write emits v as Python's json.dumps would.
func (o jsonOpts) write(b *strings.Builder, v any, level int) error {
	if level > maxJSONDepth {
		return errors.New("value nested too deeply (or circular)")
	}
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
		return nil
	case *exec.Value:
		return o.write(b, x.Interface(), level)
	case bool:
		b.WriteString(map[bool]string{true: "true", false: "false"}[x])
		return nil
	case string:
		o.writeString(b, x)
		return nil
	case float64:
		b.WriteString(pythonFloat(x))
		return nil
	case float32:
		b.WriteString(pythonFloat(float64(x)))
		return nil
	case map[string]any:
		keys := orderedKeys(x)
		if o.sortKeys {
			keys = slices.Sorted(slices.Values(keys))
		}
		return o.writeObject(b, keys, func(k string) any { return x[k] }, level)
	case exec.Dict:
		return o.writeDict(b, &x, level)
	case *exec.Dict:
		return o.writeDict(b, x, level)
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		b.WriteString(strconv.FormatInt(rv.Int(), 10))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		b.WriteString(strconv.FormatUint(rv.Uint(), 10))
	case reflect.Slice, reflect.Array:
		if rv.Len() == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i := range rv.Len() {
			if i > 0 {
				o.itemSep(b)
			}
			o.newline(b, level+1)
			if err := o.write(b, rv.Index(i).Interface(), level+1); err != nil {
				return err
			}
		}
		o.newline(b, level)
		b.WriteByte(']')
	default:
		return fmt.Errorf("%T is not JSON serializable", v)
	}
	return nil
}

func (o jsonOpts) writeDict(b *strings.Builder, d *exec.Dict, level int) error {
	keys, vals := dictEntries(d)
	if o.sortKeys {
		slices.Sort(keys)
	}
	return o.writeObject(b, keys, func(k string) any { return vals[k] }, level)
}

func (o jsonOpts) writeObject(b *strings.Builder, keys []string, get func(string) any, level int) error {
	if len(keys) == 0 {
		b.WriteString("{}")
		return nil
	}
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			o.itemSep(b)
		}
		o.newline(b, level+1)
		o.writeString(b, k)
		b.WriteString(": ")
		if err := o.write(b, get(k), level+1); err != nil {
			return err
		}
	}
	o.newline(b, level)
	b.WriteByte('}')
	return nil
}

// writeString quotes s as Python's json module does.
func (o jsonOpts) writeString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			switch {
			case r < 0x20:
				fmt.Fprintf(b, `\u%04x`, r)
			case o.ascii && r > 0x7E:
				if r >= 0x10000 {
					r1, r2 := utf16Surrogates(r)
					fmt.Fprintf(b, `\u%04x\u%04x`, r1, r2)
				} else {
					fmt.Fprintf(b, `\u%04x`, r)
				}
			default:
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}

func utf16Surrogates(r rune) (rune, rune) {
	r -= 0x10000
	return 0xD800 + (r>>10)&0x3FF, 0xDC00 + r&0x3FF
}

// pythonFloat formats f as Python's repr: the shortest round-trip digits, fixed notation
// for exponents from -4 to 15 with at least one decimal ("1.0"), scientific otherwise.
func pythonFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	if f == 0 {
		if math.Signbit(f) {
			return "-0.0"
		}
		return "0.0"
	}
	exp := int(math.Floor(math.Log10(math.Abs(f))))
	// Log10 can be off by one near powers of ten; the formatted exponent decides.
	e := strconv.FormatFloat(f, 'e', -1, 64)
	if k := strings.LastIndexByte(e, 'e'); k >= 0 {
		if n, err := strconv.Atoi(e[k+1:]); err == nil {
			exp = n
		}
	}
	if exp < -4 || exp >= 16 {
		return e
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsRune(s, '.') {
		s += ".0"
	}
	return s
}

// strftimeLayouts maps Python's (the C library's) strftime directives to Go layouts, for
// the ones chat templates use, such as "%d %b %Y".
var strftimeLayouts = map[byte]string{
	'Y': "2006", 'y': "06", 'm': "01", 'd': "02", 'e': "_2", 'j': "002",
	'H': "15", 'I': "03", 'M': "04", 'S': "05", 'p': "PM",
	'b': "Jan", 'h': "Jan", 'B': "January", 'a': "Mon", 'A': "Monday",
	'Z': "MST", 'z': "-0700", 'F': "2006-01-02", 'T': "15:04:05",
}

// strftime formats t like Python's time.strftime; unknown directives stay as written.
func strftime(t time.Time, format string) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' || i+1 == len(format) {
			b.WriteByte(c)
			continue
		}
		i++
		d := format[i]
		switch layout, ok := strftimeLayouts[d]; {
		case ok:
			b.WriteString(t.Format(layout))
		case d == 'w':
			b.WriteString(strconv.Itoa(int(t.Weekday())))
		case d == '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(d)
		}
	}
	return b.String()
}
