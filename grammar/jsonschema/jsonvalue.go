package jsonschema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The converter needs two things encoding/json's generic decoding into
// map[string]any loses: the document order of object members (property order
// decides rule order in the grammar and the text of const/enum literals), and
// the distinction between integer and floating-point numbers (llama.cpp prints
// 42 as "42" and 42.0 as "42.0"). So schemas are decoded into this small tree.

type jsonKind uint8

const (
	jsonNull jsonKind = iota
	jsonBool
	jsonInt   // a negative integer that fits int64
	jsonUint  // a non-negative integer that fits uint64
	jsonFloat // anything with a fraction or exponent, or an integer too big for 64 bits
	jsonString
	jsonArray
	jsonObject
)

type jsonValue struct {
	kind    jsonKind
	boolean bool
	signed  int64
	natural uint64
	float   float64
	str     string
	items   []*jsonValue   // array elements
	keys    []string       // object member names, in document order
	vals    []*jsonValue   // object member values, parallel to keys
	index   map[string]int // key -> position, for objects too wide to scan
}

// indexFrom is the member count from which objects keep an index: a schema
// may be consulted for its keywords many times, and scanning a very wide
// object each time would make the conversion quadratic.
const indexFrom = 16

// get returns the member named key, or nil when v is not an object or has no
// such member. A present member whose value is null is returned as a null
// value, not nil, because llama.cpp distinguishes "absent" from "null" for
// some keywords (a null "format" is an error, an absent one is not).
func (v *jsonValue) get(key string) *jsonValue {
	if v == nil || v.kind != jsonObject {
		return nil
	}
	if v.index != nil {
		if i, ok := v.index[key]; ok {
			return v.vals[i]
		}
		return nil
	}
	for i, k := range v.keys {
		if k == key {
			return v.vals[i]
		}
	}
	return nil
}

func (v *jsonValue) has(key string) bool { return v.get(key) != nil }

func (v *jsonValue) isNull() bool   { return v == nil || v.kind == jsonNull }
func (v *jsonValue) isObject() bool { return v != nil && v.kind == jsonObject }
func (v *jsonValue) isArray() bool  { return v != nil && v.kind == jsonArray }
func (v *jsonValue) isTrue() bool   { return v != nil && v.kind == jsonBool && v.boolean }

// isString reports whether v is the JSON string s.
func (v *jsonValue) isString(s string) bool { return v != nil && v.kind == jsonString && v.str == s }

// isEmpty follows nlohmann's empty(): null and empty containers are empty,
// every scalar is not.
func (v *jsonValue) isEmpty() bool {
	switch {
	case v.isNull():
		return true
	case v.kind == jsonArray:
		return len(v.items) == 0
	case v.kind == jsonObject:
		return len(v.keys) == 0
	}
	return false
}

// elements is what a range-for over a nlohmann value yields: array elements,
// object member values, nothing for null, and the value itself for a scalar.
// llama.cpp iterates "enum", "anyOf" and friends this way without checking
// their type, so a scalar enum is a one-value enum.
func (v *jsonValue) elements() []*jsonValue {
	switch {
	case v.isNull():
		return nil
	case v.kind == jsonArray:
		return v.items
	case v.kind == jsonObject:
		return v.vals
	}
	return []*jsonValue{v}
}

// members is what nlohmann's items() yields: object members, array elements
// keyed by their index, and a scalar under the empty key.
func (v *jsonValue) members() (keys []string, vals []*jsonValue) {
	switch {
	case v.isNull():
		return nil, nil
	case v.kind == jsonObject:
		return v.keys, v.vals
	case v.kind == jsonArray:
		keys = make([]string, len(v.items))
		for i := range v.items {
			keys[i] = strconv.Itoa(i)
		}
		return keys, v.items
	}
	return []string{""}, []*jsonValue{v}
}

// withMember returns a shallow copy of object v with member key set to val,
// keeping the member's position when it exists. The member names are
// shared with v when the key exists, since they do not change.
func (v *jsonValue) withMember(key string, val *jsonValue) *jsonValue {
	cp := &jsonValue{kind: jsonObject, keys: v.keys, vals: slices.Clone(v.vals), index: v.index}
	for i, k := range cp.keys {
		if k == key {
			cp.vals[i] = val
			return cp
		}
	}
	cp.keys = append(slices.Clone(v.keys), key)
	cp.vals = append(cp.vals, val)
	cp.index = nil // a fresh one is not worth it on this rare path
	return cp
}

// errTooDeep is returned when the document nests more than maxDepth arrays
// and objects.
var errTooDeep = errors.New("nesting too deep")

// parseJSON decodes one JSON document, refusing invalid UTF-8 (nlohmann
// refuses it, encoding/json would silently replace it), trailing data and
// nesting deeper than maxDepth.
func parseJSON(data []byte, maxDepth int) (*jsonValue, error) {
	if !utf8.Valid(data) {
		return nil, errors.New("invalid UTF-8")
	}
	if err := checkSurrogates(data); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec, 0, maxDepth)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("unexpected data after the top-level value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder, depth, maxDepth int) (*jsonValue, error) {
	tok, err := dec.Token()
	if err != nil {
		if err == io.EOF {
			return nil, io.ErrUnexpectedEOF
		}
		return nil, err
	}
	switch t := tok.(type) {
	case nil:
		return &jsonValue{kind: jsonNull}, nil
	case bool:
		return &jsonValue{kind: jsonBool, boolean: t}, nil
	case string:
		return &jsonValue{kind: jsonString, str: t}, nil
	case json.Number:
		v := parseNumber(string(t))
		if v.kind == jsonFloat && math.IsInf(v.float, 0) {
			return nil, fmt.Errorf("number overflow parsing %q", string(t))
		}
		return v, nil
	case json.Delim:
		if depth >= maxDepth {
			return nil, errTooDeep
		}
		if t == '[' {
			arr := &jsonValue{kind: jsonArray}
			for dec.More() {
				item, err := decodeValue(dec, depth+1, maxDepth)
				if err != nil {
					return nil, err
				}
				arr.items = append(arr.items, item)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return arr, nil
		}
		obj := &jsonValue{kind: jsonObject}
		index := map[string]int{}
		for dec.More() {
			keyTok, err := dec.Token()
			if err != nil {
				return nil, err
			}
			key, ok := keyTok.(string)
			if !ok {
				return nil, errors.New("object key is not a string")
			}
			val, err := decodeValue(dec, depth+1, maxDepth)
			if err != nil {
				return nil, err
			}
			// A repeated key keeps its first position and takes the last
			// value, as nlohmann's ordered map does.
			if i, dup := index[key]; dup {
				obj.vals[i] = val
				continue
			}
			index[key] = len(obj.keys)
			obj.keys = append(obj.keys, key)
			obj.vals = append(obj.vals, val)
		}
		if _, err := dec.Token(); err != nil {
			return nil, err
		}
		if len(obj.keys) >= indexFrom {
			obj.index = index
		}
		return obj, nil
	}
	return nil, fmt.Errorf("unexpected token %v", tok)
}

// parseNumber classifies a JSON number the way nlohmann does: integers go
// to int64 (negative) or uint64 (non-negative) when they fit, everything
// else is a double.
func parseNumber(text string) *jsonValue {
	if !strings.ContainsAny(text, ".eE") {
		if strings.HasPrefix(text, "-") {
			if n, err := strconv.ParseInt(text, 10, 64); err == nil {
				return &jsonValue{kind: jsonInt, signed: n}
			}
		} else if n, err := strconv.ParseUint(text, 10, 64); err == nil {
			return &jsonValue{kind: jsonUint, natural: n}
		}
	}
	f, _ := strconv.ParseFloat(text, 64) // out of range gives ±Inf, refused by the caller as nlohmann does
	return &jsonValue{kind: jsonFloat, float: f}
}

// dump writes v compactly, byte for byte as nlohmann's dump() does, since
// const and enum literals in the grammar are that text.
func (v *jsonValue) dump() string {
	var b strings.Builder
	v.dumpTo(&b)
	return b.String()
}

func (v *jsonValue) dumpTo(b *strings.Builder) {
	switch {
	case v.isNull():
		b.WriteString("null")
	case v.kind == jsonBool:
		b.WriteString(strconv.FormatBool(v.boolean))
	case v.kind == jsonInt:
		b.WriteString(strconv.FormatInt(v.signed, 10))
	case v.kind == jsonUint:
		b.WriteString(strconv.FormatUint(v.natural, 10))
	case v.kind == jsonFloat:
		b.WriteString(formatDouble(v.float))
	case v.kind == jsonString:
		dumpString(b, v.str)
	case v.kind == jsonArray:
		b.WriteByte('[')
		for i, item := range v.items {
			if i > 0 {
				b.WriteByte(',')
			}
			item.dumpTo(b)
		}
		b.WriteByte(']')
	case v.kind == jsonObject:
		b.WriteByte('{')
		for i, k := range v.keys {
			if i > 0 {
				b.WriteByte(',')
			}
			dumpString(b, k)
			b.WriteByte(':')
			v.vals[i].dumpTo(b)
		}
		b.WriteByte('}')
	}
}

// quoteJSON is dumpString as a value, for property names.
func quoteJSON(s string) string {
	var b strings.Builder
	dumpString(&b, s)
	return b.String()
}

// dumpString escapes like nlohmann: the two mandatory escapes, the short
// forms for common control characters, \u00xx (lower-case hex) for the rest
// below 0x20, and everything else, non-ASCII included, as is.
func dumpString(b *strings.Builder, s string) {
	const hex = "0123456789abcdef"
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			if c < 0x20 {
				b.WriteString(`\u00`)
				b.WriteByte(hex[c>>4])
				b.WriteByte(hex[c&0xF])
			} else {
				b.WriteByte(c)
			}
		}
	}
	b.WriteByte('"')
}

// formatDouble prints a double as nlohmann does: the shortest digits that
// round-trip, positional notation for decimal exponents in (-4, 15], a ".0"
// on integral values, otherwise d.ddde+XX with at least two exponent digits;
// non-finite values print as null.
func formatDouble(f float64) string {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return "null"
	}
	sign := ""
	if math.Signbit(f) {
		sign = "-"
		f = -f
	}
	if f == 0 {
		return sign + "0.0"
	}
	sci := strconv.FormatFloat(f, 'e', -1, 64) // d.ddde±XX
	mant, expText, _ := strings.Cut(sci, "e")
	exp, _ := strconv.Atoi(expText)
	digits := strings.Replace(mant, ".", "", 1)
	k := len(digits)
	n := exp + 1 // position of the decimal point relative to the digits
	const minExp, maxExp = -4, 15
	switch {
	case k <= n && n <= maxExp:
		return sign + digits + strings.Repeat("0", n-k) + ".0"
	case 0 < n && n <= maxExp:
		return sign + digits[:n] + "." + digits[n:]
	case minExp < n && n <= 0:
		return sign + "0." + strings.Repeat("0", -n) + digits
	}
	e := n - 1
	expSign := "+"
	if e < 0 {
		expSign = "-"
		e = -e
	}
	expDigits := strconv.Itoa(e)
	if e < 10 {
		expDigits = "0" + expDigits
	}
	if k == 1 {
		return sign + digits + "e" + expSign + expDigits
	}
	return sign + digits[:1] + "." + digits[1:] + "e" + expSign + expDigits
}

// checkSurrogates refuses \u escapes that encode half a surrogate pair, as
// nlohmann does; encoding/json would turn them into U+FFFD. Only escapes
// inside strings are looked at; other syntax is left to the decoder.
func checkSurrogates(data []byte) error {
	hexAt := func(i int) (rune, bool) {
		if i+4 > len(data) {
			return 0, false
		}
		n, err := strconv.ParseUint(string(data[i:i+4]), 16, 16)
		return rune(n), err == nil
	}
	inString := false
	for i := 0; i < len(data); i++ {
		switch c := data[i]; {
		case c == '"':
			inString = !inString
		case c == '\\' && inString && i+1 < len(data):
			i++
			if data[i] != 'u' {
				continue
			}
			r, ok := hexAt(i + 1)
			if !ok {
				continue // malformed: the decoder reports it
			}
			i += 4
			switch {
			case r >= 0xDC00 && r <= 0xDFFF:
				return errors.New("invalid string: lone low surrogate")
			case r >= 0xD800 && r <= 0xDBFF:
				if i+2 >= len(data) || data[i+1] != '\\' || data[i+2] != 'u' {
					return errors.New("invalid string: high surrogate not followed by a low one")
				}
				low, ok := hexAt(i + 3)
				if !ok || low < 0xDC00 || low > 0xDFFF {
					return errors.New("invalid string: high surrogate not followed by a low one")
				}
				i += 6
			}
		}
	}
	return nil
}
