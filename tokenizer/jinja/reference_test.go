package jinja

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The expected renders in testdata were written by Python's Jinja2 3.1.6 set up as
// Hugging Face's apply_chat_template (testdata/gen.py says how to regenerate them).

// decodeJSON decodes JSON into template values: objects as *Dict in their key order,
// integers as int.
func decodeJSON(t testing.TB, data []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var value func() any
	value = func() any {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		switch x := tok.(type) {
		case json.Delim:
			if x == '[' {
				list := []any{}
				for dec.More() {
					list = append(list, value())
				}
				dec.Token()
				return list
			}
			d := NewDict()
			for dec.More() {
				k, _ := dec.Token()
				d.Set(k.(string), value())
			}
			dec.Token()
			return d
		case json.Number:
			if i, err := x.Int64(); err == nil {
				return int(i)
			}
			f, _ := x.Float64()
			return f
		}
		return tok
	}
	return value()
}

// errRaised marks raise_exception's errors in these tests.
var errRaised = errors.New("raised")

// referenceVars turns a case's JSON variables into the render's, with Hugging Face's
// raise_exception and strftime_now at gen.py's fixed time.
func referenceVars(t testing.TB, raw json.RawMessage) map[string]any {
	vars := map[string]any{}
	d := decodeJSON(t, raw).(*Dict)
	for i, k := range d.keys {
		vars[k.(string)] = d.values[i]
	}
	vars["raise_exception"] = Func(func(args []any, _ map[string]any) (any, error) {
		msg, _ := args[0].(string)
		return nil, &raisedError{msg}
	})
	vars["strftime_now"] = Func(func(args []any, _ map[string]any) (any, error) {
		return strftimeForTest(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC), args[0].(string)), nil
	})
	return vars
}

type raisedError struct{ msg string }

func (e *raisedError) Error() string        { return e.msg }
func (e *raisedError) Is(target error) bool { return target == errRaised }

// strftimeForTest knows the directives the templates and features.json use.
func strftimeForTest(t time.Time, format string) string {
	layouts := map[string]string{"%Y": "2006", "%m": "01", "%d": "02", "%H": "15", "%M": "04", "%b": "Jan", "%B": "January", "%a": "Mon", "%A": "Monday"}
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		if l, ok := layouts[format[i:min(i+2, len(format))]]; ok {
			b.WriteString(t.Format(l))
			i++
			continue
		}
		b.WriteByte(format[i])
	}
	return b.String()
}

type expectation struct {
	Rendered *string `json:"rendered"`
	Error    *string `json:"error"`
	Raised   bool    `json:"raised"`
}

// check compares a render with Python's.
func (want expectation) check(t *testing.T, got string, err error) {
	t.Helper()
	switch {
	case want.Error != nil && err == nil:
		t.Errorf("rendered %q, want Python's error %q", got, *want.Error)
	case want.Error != nil && want.Raised && (!errors.Is(err, errRaised) || !strings.HasSuffix(err.Error(), *want.Error)):
		t.Errorf("error %v, want the template to raise %q", err, *want.Error)
	case want.Error != nil:
	case err != nil:
		t.Errorf("error %v, want\n%q", err, *want.Rendered)
	case got != *want.Rendered:
		t.Errorf("got\n%q\nwant\n%q", got, *want.Rendered)
	}
}

// TestReferenceTemplates renders every chat template of llama.cpp's models/templates
// over gen.py's conversations and compares with Python's renders byte for byte.
func TestReferenceTemplates(t *testing.T) {
	paths, err := filepath.Glob("testdata/templates/*.jinja")
	if err != nil || len(paths) == 0 {
		t.Fatal("no templates", err)
	}
	conversations := map[string]json.RawMessage{}
	for _, path := range paths {
		name := strings.TrimSuffix(filepath.Base(path), ".jinja")
		t.Run(name, func(t *testing.T) {
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var expected map[string]expectation
			readJSONFile(t, "testdata/expected/"+name+".json", &expected)
			tpl, err := Parse(string(src))
			if err != nil {
				t.Fatal(err)
			}
			if len(conversations) == 0 {
				readJSONFile(t, "testdata/conversations.json", &conversations)
			}
			for conv, want := range expected {
				t.Run(conv, func(t *testing.T) {
					got, err := tpl.Render(referenceVars(t, conversations[conv]), Limits{})
					want.check(t, got, err)
				})
			}
		})
	}
}

// TestReferenceFeatures renders gen.py's language cases and compares with Python.
func TestReferenceFeatures(t *testing.T) { testReferenceCases(t, "testdata/features.json") }

// TestReferenceRandom renders gen.py's random templates and compares with Python.
func TestReferenceRandom(t *testing.T) { testReferenceCases(t, "testdata/random.json") }

func testReferenceCases(t *testing.T, path string) {
	var cases []struct {
		Template string          `json:"template"`
		Vars     json.RawMessage `json:"vars"`
		expectation
	}
	readJSONFile(t, path, &cases)
	for _, c := range cases {
		tpl, err := Parse(c.Template)
		got := ""
		if err == nil {
			got, err = tpl.Render(referenceVars(t, c.Vars), Limits{})
		}
		t.Run("", func(t *testing.T) {
			t.Log(c.Template)
			c.check(t, got, err)
		})
	}
}

func readJSONFile(t testing.TB, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatal(err)
	}
}
