package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
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
