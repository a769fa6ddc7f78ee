package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// chatFixtureSeeds are the messages and tools of the chat fixtures' cases, each on its own:
// real requests, and small enough for the fuzzer to minimize what grows from them.
func chatFixtureSeeds(f *testing.F) [][]byte {
	var seeds [][]byte
	for _, name := range []string{"qwen3", "deepseek_v3"} {
		b, err := os.ReadFile("testdata/chat/" + name + ".json")
		if err != nil {
			f.Fatal(err)
		}
		var fixture struct {
			Cases []struct {
				Messages, Tools, Extra json.RawMessage
			}
		}
		if err := json.Unmarshal(b, &fixture); err != nil {
			f.Fatal(err)
		}
		for _, c := range fixture.Cases {
			for _, raw := range []json.RawMessage{c.Messages, c.Tools, c.Extra} {
				if len(raw) > 0 && len(raw) <= 1024 {
					seeds = append(seeds, raw)
				}
			}
		}
	}
	return seeds
}

// FuzzDecodeJSON: DecodeJSON reads request bodies' messages and tools and `moerun
// template`'s files. On any input it returns an error (with a message) or a value that
// encoding/json reads the same way from the input's first value, whose objects list each
// key once, and that decodes to itself again after encoding. Every valid JSON text within
// the nesting limit decodes.
//
// DecodeJSON accepts trailing data that does not start a JSON value ("[1] ]", "{} x"):
// it only rejects a second valid token. The target does not assert the converse of the
// last property for that reason.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range chatFixtureSeeds(f) {
		f.Add(s)
	}
	for _, s := range []string{
		`[{"role": "user", "content": "hi"}, {"role": "assistant", "content": null, "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]}]`,
		`{"b": 1, "a": [1.5, -0.0, 1e400, 12345678901234567890, -9223372036854775808], "b": "dup"}`,
		`"\ud83d\ude00 \u00e9 \ud800" `, `true`, `null`, `[1] ]`, `1 2`, `{"a":}`, `[`, ``,
		`{"":[1e700],"":""}`, // a duplicate key hides what encoding/json would refuse
		strings.Repeat("[", maxJSONDepth+1) + strings.Repeat("]", maxJSONDepth+1),
		strings.Repeat("[", maxJSONDepth+2) + strings.Repeat("]", maxJSONDepth+2),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := DecodeJSON(data)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			if json.Valid(data) {
				if depth, inRange := jsonTokenStats(data); depth <= maxJSONDepth && inRange {
					t.Fatalf("valid JSON rejected: %v", err)
				}
			}
			return
		}
		// encoding/json reads the first value of the input the same way.
		var std any
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		if err := dec.Decode(&std); err != nil {
			t.Fatalf("DecodeJSON accepted what encoding/json rejects (%v): %#v", err, v)
		}
		if err := sameJSON(v, std); err != nil {
			t.Fatalf("differs from encoding/json: %v", err)
		}
		enc, err := encodeJSONValue(nil, v)
		if err != nil {
			t.Fatal(err)
		}
		again, err := DecodeJSON(enc)
		if err != nil {
			t.Fatalf("re-encoded %s does not decode: %v", enc, err)
		}
		if !reflect.DeepEqual(again, v) {
			t.Fatalf("re-encoded %s decodes to %#v, not %#v", enc, again, v)
		}
	})
}

// jsonTokenStats reads valid JSON token by token (a decoded value would keep only the
// last of duplicate keys): the depth of the deepest value, counting from 0 for the top as
// decodeValue does, and whether every number fits a float64 (DecodeJSON rejects 1e400).
func jsonTokenStats(data []byte) (depth int, inRange bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	open := 0
	inRange = true
	for {
		tok, err := dec.Token()
		if err != nil {
			return depth, inRange
		}
		switch x := tok.(type) {
		case json.Delim:
			if x == '}' || x == ']' {
				open--
				continue
			}
			depth = max(depth, open)
			open++
			continue
		case json.Number:
			if _, err := x.Float64(); err != nil {
				inRange = false
			}
		}
		depth = max(depth, open)
	}
}

// sameJSON compares a DecodeJSON value with encoding/json's (UseNumber) reading.
func sameJSON(v, std any) error {
	switch s := std.(type) {
	case map[string]any:
		o, ok := v.(*Object)
		if !ok {
			return errors.New("object decoded as " + reflect.TypeOf(v).String())
		}
		if len(o.Keys) != len(o.Values) || len(o.Keys) != len(s) {
			return errors.New("object keys: " + strconv.Quote(strings.Join(o.Keys, ",")))
		}
		for _, k := range o.Keys {
			sv, ok := s[k]
			if !ok {
				return errors.New("extra key " + strconv.Quote(k))
			}
			if err := sameJSON(o.Values[k], sv); err != nil {
				return err
			}
		}
	case []any:
		a, ok := v.([]any)
		if !ok || len(a) != len(s) {
			return errors.New("array differs")
		}
		for i := range a {
			if err := sameJSON(a[i], s[i]); err != nil {
				return err
			}
		}
	case json.Number:
		if n, err := strconv.ParseInt(s.String(), 10, 0); err == nil {
			if v != int(n) {
				return errors.New("integer " + s.String())
			}
			return nil
		}
		fl, _ := s.Float64()
		if v != fl {
			return errors.New("number " + s.String())
		}
	default: // string, bool, nil
		if v != std {
			return errors.New("scalar differs")
		}
	}
	return nil
}

// encodeJSONValue writes a DecodeJSON value as JSON, objects in their key order and
// non-integers with a fraction or exponent so that they read back as float64.
func encodeJSONValue(b []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case *Object:
		b = append(b, '{')
		for i, k := range x.Keys {
			if i > 0 {
				b = append(b, ',')
			}
			kb, _ := json.Marshal(k)
			b = append(append(b, kb...), ':')
			var err error
			if b, err = encodeJSONValue(b, x.Values[k]); err != nil {
				return nil, err
			}
		}
		return append(b, '}'), nil
	case []any:
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = encodeJSONValue(b, e); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	case int:
		return strconv.AppendInt(b, int64(x), 10), nil
	case float64:
		s := strconv.FormatFloat(x, 'g', -1, 64)
		if !strings.ContainsAny(s, ".eE") {
			s += ".0"
		}
		return append(b, s...), nil
	case string, bool, nil:
		sb, err := json.Marshal(x)
		return append(b, sb...), err
	}
	return nil, errors.New("DecodeJSON returned a " + reflect.TypeOf(v).String())
}
