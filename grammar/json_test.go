package grammar

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestJSONGrammar checks grammar.JSON against encoding/json: within the
// grammar's deliberate narrowing (see JSON), it accepts exactly the texts
// that are a valid JSON object.
func TestJSONGrammar(t *testing.T) {
	g := mustParse(t, JSON)
	agree := []string{
		`{}`, `{} `, "{}\n", "{}\n\t  ", `{"a":1}`, `{"a": 1}`, `{ "a" : 1 }`,
		`{"a":-0.5e-3,"b":[1,2,3],"c":{"d":null}}`,
		`{"s":"caf\u00e9 é 😀 \" \\ \b\f\n\r\t"}`,
		`{"nested":{"a":[{"b":[[],{}]}]}}`,
		`{"t":true,"f":false,"n":null}`,
		`{"n":0,"m":-0,"x":1.25,"y":2E+1,"z":3e-1}`,
		"{\n  \"a\": [\n    1,\n    2\n  ]\n}",
		`{"a":"b","a":"c"}`,
		`{"": ""}`,
		`{"k":1234567890123456}`,
		// Not objects.
		`[]`, `"a"`, `1`, `true`, `null`, ``,
		// Not JSON.
		`{`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{,}`, `{'a':1}`, `{a:1}`,
		`{"a":01}`, `{"a":1.}`, `{"a":.5}`, `{"a":+1}`, `{"a":1e}`,
		`{"a":"\x"}`, `{"a":"\u12"}`, "{\"a\":\"\x01\"}", "{\"a\":\"tab\there\"}",
		`{"a":tru}`, `{"a":True}`, `{"a":[1,]}`, `{"a":[1 2]}`, `{}}`, `{}{}`,
		`{"a":1} x`, `{"a":"unterminated}`,
	}
	for _, s := range agree {
		want := json.Valid([]byte(s)) && bytes.HasPrefix(bytes.TrimSpace([]byte(s)), []byte("{"))
		if got := accepts(g, s); got != want {
			t.Errorf("JSON grammar on %q = %v, encoding/json says %v", s, got, want)
		}
		if got := acceptsByteByByte(g, s); got != want {
			t.Errorf("JSON grammar byte by byte on %q = %v, encoding/json says %v", s, got, want)
		}
	}
	// Valid JSON objects the grammar refuses, on purpose (as llama.cpp's).
	narrower := []string{
		` {}`,                     // leading whitespace
		`{  "a":1}`,               // two spaces
		"{\"a\":1}\n\n",           // two newlines
		`{"k":12345678901234567}`, // 17-digit integer
		`{"x":1e10}`,              // exponent digits after the first must be 1-9
		`{"a":"\/"}`,              // the \/ escape
		"{\"a\":\"\x7f\"}",        // raw DEL
	}
	for _, s := range narrower {
		if !json.Valid([]byte(s)) {
			t.Fatalf("test data: %q is not valid JSON", s)
		}
		if accepts(g, s) {
			t.Errorf("JSON grammar accepts %q, which llama.cpp's grammar refuses", s)
		}
	}
}

// TestJSONGrammarLlama pins the edges of llama.cpp's grammars/json.gbnf
// (commit 3f545bec), worked out by hand from that grammar.
func TestJSONGrammarLlama(t *testing.T) {
	g := mustParse(t, JSON)
	for s, want := range map[string]bool{
		`{"a":1e01}`:               true,
		`{"a":"` + "\u0080" + `"}`: true,
		"{\"a\":1,\n" + "                    " + "\"b\":2}":  true,  // 20 blanks
		"{\"a\":1,\n" + "                     " + "\"b\":2}": false, // 21 blanks
		`{"a":[` + "\n\t" + `1]}`:                            true,
		`{"a":"\uABCD"}`:                                     true,
		`{"a":"\uABCG"}`:                                     false,
	} {
		if got := accepts(g, s); got != want {
			t.Errorf("JSON grammar on %q = %v, want %v", s, got, want)
		}
	}
}

// TestServerJSONObject checks ServerJSONObject on llama.cpp's "empty schema
// (object)" cases (tests/test-grammar-integration.cpp, commit 3f545bec) and
// on texts worked out by hand from the primitive rules it transcribes.
func TestServerJSONObject(t *testing.T) {
	g := mustParse(t, ServerJSONObject)
	for _, s := range []string{`{}`, `{"foo": "bar"}`} {
		if !accepts(g, s) {
			t.Errorf("refuses llama.cpp's passing case %q", s)
		}
	}
	for _, s := range []string{``, `[]`, `null`, `""`, `true`} {
		if accepts(g, s) {
			t.Errorf("accepts llama.cpp's failing case %q", s)
		}
	}
	for s, want := range map[string]bool{
		`{"a": [1, -2.5e+10, true, null, {"b": "\u00e9\n"}] }`: true,
		"{\n\n  \"a\":\n\t1\n}":                                true,  // up to two newlines, then blanks
		"{\n\n\n\"a\": 1}":                                     false, // three newlines
		`{"a" : 1}`:                                            false, // no space before ':'
		`{"a": 1 , "b": 2}`:                                    false, // no space after a value
		`{"a": 1} `:                                            false, // nothing after the object
		`{"a": 0.12345678901234567}`:                           false, // 17 fraction digits
		`{"a": 1e10}`:                                          true,
		`{"a": 1e010}`:                                         false,
		`{"a": 01}`:                                            false,
	} {
		if got := accepts(g, s); got != want {
			t.Errorf("on %q = %v, want %v", s, got, want)
		}
		if want && !json.Valid([]byte(s)) {
			t.Errorf("test data: %q is not valid JSON", s)
		}
	}
}
