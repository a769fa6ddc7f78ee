package jinja

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// filterToJSON is Hugging Face's tojson: json.dumps(x, ensure_ascii=False,
// indent=indent, separators=separators, sort_keys=sort_keys).
func filterToJSON(r *renderer, v any, a *args) (any, error) {
	p, err := a.bind("tojson", []string{"ensure_ascii", "indent", "separators", "sort_keys"}, false, nil, nil, false)
	if err != nil {
		return nil, err
	}
	j := jsonWriter{w: r.newSink(), ascii: truthy(p[0]), sortKeys: truthy(p[3]), itemSep: ", ", keySep: ": "}
	switch ind := p[1].(type) {
	case nil:
	case int:
		if ind > r.limits.MaxBytes-r.bytes {
			return nil, r.bytesError()
		}
		j.indent, j.pretty = strings.Repeat(" ", max(ind, 0)), true
	case string:
		j.indent, j.pretty = ind, true
	default:
		return nil, fmt.Errorf("tojson: indent must be an integer or a string, not %s", typeName(ind))
	}
	if j.pretty {
		j.itemSep = ","
	}
	if p[2] != nil {
		seps, err := r.iterate(p[2])
		if err != nil || len(seps) != 2 {
			return nil, fmt.Errorf("tojson: separators must be a pair of strings")
		}
		item, ok1 := seps[0].(string)
		key, ok2 := seps[1].(string)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("tojson: separators must be a pair of strings")
		}
		j.itemSep, j.keySep = item, key
	}
	if err := j.value(v, 0); err != nil {
		return nil, err
	}
	return j.w.b.String(), j.w.err
}

type jsonWriter struct {
	w               *sink
	pretty          bool
	indent          string
	itemSep, keySep string
	sortKeys, ascii bool
}

func (j *jsonWriter) newline(level int) {
	if j.pretty {
		j.w.write("\n")
		for range level {
			j.w.write(j.indent)
		}
	}
}

// value writes v as Python's json module does.
func (j *jsonWriter) value(v any, level int) error {
	if level > maxValueDepth {
		return errTooDeep
	}
	if j.w.err != nil {
		return j.w.err
	}
	switch x := plain(v).(type) {
	case nil:
		j.w.write("null")
	case bool:
		j.w.write(strconv.FormatBool(x))
	case int:
		j.w.write(strconv.Itoa(x))
	case float64:
		j.w.write(jsonFloat(x))
	case string:
		j.str(x)
	case []any:
		return j.array(x, level)
	case tuple:
		return j.array(x, level)
	case *Dict:
		return j.object(x, level)
	default:
		return fmt.Errorf("Object of type %s is not JSON serializable", typeName(v))
	}
	return nil
}

func jsonFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	return pythonFloat(f)
}

func (j *jsonWriter) array(items []any, level int) error {
	if len(items) == 0 {
		j.w.write("[]")
		return nil
	}
	j.w.write("[")
	for i, e := range items {
		if i > 0 {
			j.w.write(j.itemSep)
		}
		j.newline(level + 1)
		if err := j.value(e, level+1); err != nil {
			return err
		}
	}
	j.newline(level)
	j.w.write("]")
	return nil
}

// jsonKey is the string json.dumps writes for a dict key.
func jsonKey(k any) (string, error) {
	switch x := k.(type) {
	case string:
		return x, nil
	case nil:
		return "null", nil
	case bool:
		return strconv.FormatBool(x), nil
	case int:
		return strconv.Itoa(x), nil
	case float64:
		return jsonFloat(x), nil
	}
	return "", fmt.Errorf("keys must be str, int, float, bool or None, not %s", typeName(k))
}

func (j *jsonWriter) object(d *Dict, level int) error {
	if d.Len() == 0 {
		j.w.write("{}")
		return nil
	}
	order := make([]int, d.Len())
	for i := range order {
		order[i] = i
	}
	if j.sortKeys {
		var err error
		slices.SortStableFunc(order, func(a, b int) int {
			c, e := j.w.r.compare(d.keys[a], d.keys[b], 0)
			if e != nil {
				err = e
			}
			return c
		})
		if err != nil {
			return err
		}
	}
	j.w.write("{")
	for n, i := range order {
		if n > 0 {
			j.w.write(j.itemSep)
		}
		j.newline(level + 1)
		key, err := jsonKey(d.keys[i])
		if err != nil {
			return err
		}
		j.str(key)
		j.w.write(j.keySep)
		if err := j.value(d.values[i], level+1); err != nil {
			return err
		}
	}
	j.newline(level)
	j.w.write("}")
	return nil
}

// str writes a JSON string literal as Python's json module quotes it, runs of plain
// characters whole.
func (j *jsonWriter) str(s string) {
	j.w.write(`"`)
	plainFrom := 0
	for i := 0; i < len(s); {
		c, size := utf8.DecodeRuneInString(s[i:])
		i += size
		if c >= 0x20 && c != '"' && c != '\\' && !(j.ascii && c > 0x7e) {
			continue
		}
		j.w.write(s[plainFrom : i-size])
		plainFrom = i
		switch c {
		case '"':
			j.w.write(`\"`)
		case '\\':
			j.w.write(`\\`)
		case '\n':
			j.w.write(`\n`)
		case '\r':
			j.w.write(`\r`)
		case '\t':
			j.w.write(`\t`)
		case '\b':
			j.w.write(`\b`)
		case '\f':
			j.w.write(`\f`)
		default:
			if c >= 0x10000 { // a surrogate pair, as UTF-16 writes it
				c -= 0x10000
				j.w.writeEscape('u', 0xd800+(c>>10)&0x3ff, 4)
				j.w.writeEscape('u', 0xdc00+c&0x3ff, 4)
			} else {
				j.w.writeEscape('u', c, 4)
			}
		}
	}
	j.w.write(s[plainFrom:])
	j.w.write(`"`)
}
