package jsonschema

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

type llamaCase struct {
	Name    string `json:"name"`
	Status  string `json:"status"` // "success" or "failure"
	Schema  string `json:"schema"`
	Grammar string `json:"grammar"`
}

func loadLlamaCases(t *testing.T) []llamaCase { return loadCases(t, "testdata/llama_cases.json") }

// loadCases reads a file of schema and grammar pairs ({"cases": [...]}).
func loadCases(t *testing.T, path string) []llamaCase {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Cases []llamaCase `json:"cases"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	return file.Cases
}

// unsupportedLlamaCases are llama.cpp test cases this package deliberately
// answers differently, with the reason. Each must give an error.
var unsupportedLlamaCases = map[string]string{}

// TestLlamaCases compares the output with llama.cpp's expected grammar for
// every case of llama.cpp's own test, byte for byte.
func TestLlamaCases(t *testing.T) {
	cases := loadLlamaCases(t)
	if len(cases) != 79 {
		t.Fatalf("testdata has %d cases, want the 79 of llama.cpp's test", len(cases))
	}
	passed := 0
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			got, err := Convert([]byte(tc.Schema))
			if reason, ok := unsupportedLlamaCases[tc.Name]; ok {
				if err == nil {
					t.Fatalf("unsupported (%s) but converted to:\n%s", reason, got)
				}
				return
			}
			switch tc.Status {
			case "failure":
				if err == nil {
					t.Fatalf("llama.cpp fails this schema; got grammar:\n%s", got)
				}
				var se *SchemaError
				if !errors.As(err, &se) {
					t.Errorf("error %v is not a *SchemaError", err)
				}
			case "success":
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if got != tc.Grammar {
					t.Fatalf("grammar differs from llama.cpp's\nschema:\n%s\nwant:\n%s\ngot:\n%s", tc.Schema, tc.Grammar, got)
				}
			default:
				t.Fatalf("bad status %q", tc.Status)
			}
			passed++
		})
	}
	t.Logf("%d of %d llama.cpp cases match (%d listed unsupported)", passed, len(cases), len(unsupportedLlamaCases))
}

func TestWarningForUnsupportedPattern(t *testing.T) {
	res, err := ConvertWithOptions([]byte(`{"type":"object","properties":{"a":{"type":"string","pattern":"^\\w+$"}}}`), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "properties.a.pattern") {
		t.Fatalf("warnings = %q", res.Warnings)
	}
}

// Names excluded from additional properties go into character classes;
// llama.cpp writes them raw, which breaks the class for '\\', ']', '-' and
// '^' and splits non-ASCII characters into bytes.
func TestExcludedNamesAreEscaped(t *testing.T) {
	got, err := Convert([]byte(`{"properties":{"a-b":{},"^":{},"]\\":{},"é":{}},"additionalProperties":true}`))
	if err != nil {
		t.Fatal(err)
	}
	const want = `additional-k ::= ["] ( [\]] ([\\] char+ | [^"\\] char*) | [\x5E] char+ | [a] ([\x2D] ([b] char+ | [^"b] char*) | [^"\x2D] char*) | [é] char+ | [^"\]\x5Eaé] char* )? ["]`
	if !strings.Contains(got, want+"\n") {
		t.Fatalf("grammar:\n%s\nwant the line:\n%s", got, want)
	}
}

func TestDotAll(t *testing.T) {
	schema := []byte(`{"type":"string","pattern":"^a.$"}`)
	for _, tc := range []struct {
		dotAll bool
		dot    string
	}{{false, `dot ::= [^\x0A\x0D]`}, {true, `dot ::= [\U00000000-\U0010FFFF]`}} {
		res, err := ConvertWithOptions(schema, Options{DotAll: tc.dotAll})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(res.Grammar, tc.dot+"\n") {
			t.Errorf("DotAll=%v: grammar\n%s\nlacks %s", tc.dotAll, res.Grammar, tc.dot)
		}
	}
}

// TestLlamaOracleCases compares with grammars llama.cpp's converter itself
// produced for schemas written for this package (testdata says how), apart
// from the documented differences listed here.
func TestLlamaOracleCases(t *testing.T) {
	cases := loadCases(t, "testdata/llama_oracle_cases.json")
	// Schema -> what we give instead of llama.cpp's grammar, and why.
	differences := map[string]struct{ wantErr, wantLine, why string }{
		`{"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`: {
			wantLine: "ref-defs-b ::= ref-defs-a",
			why:      "llama.cpp leaves #/$defs/b unresolved (it is inside the top-level object holding a $ref) and makes it any object",
		},
		`{"type":"string","pattern":"^a{2,1}$"}`: {
			wantErr: "min repeat greater than max repeat",
			why:     "llama.cpp emits the unsatisfiable repeat {2,1}",
		},
	}
	for i, tc := range cases {
		got, err := Convert([]byte(tc.Schema))
		if d, ok := differences[tc.Schema]; ok {
			switch {
			case d.wantErr != "" && (err == nil || !strings.Contains(err.Error(), d.wantErr)):
				t.Errorf("case %d (%s): error = %v, want %q", i, d.why, err, d.wantErr)
			case d.wantLine != "" && (err != nil || !strings.Contains(got, d.wantLine+"\n")):
				t.Errorf("case %d (%s): got %v\n%s\nwant the line %q", i, d.why, err, got, d.wantLine)
			}
			continue
		}
		switch {
		case tc.Status == "failure" && err == nil:
			t.Errorf("case %d %s: llama.cpp fails, we give:\n%s", i, tc.Schema, got)
		case tc.Status == "success" && err != nil:
			t.Errorf("case %d %s: %v", i, tc.Schema, err)
		case tc.Status == "success" && got != tc.Grammar:
			t.Errorf("case %d %s:\nwant:\n%s\ngot:\n%s", i, tc.Schema, tc.Grammar, got)
		}
	}
}

func TestWarningsAreCapped(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"properties":{`)
	for i := 0; i < 150; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"p%d":{"pattern":"^\\d$"}`, i)
	}
	b.WriteString(`}}`)
	res, err := ConvertWithOptions([]byte(b.String()), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Warnings) != maxWarnings+1 || res.Warnings[maxWarnings] != "... and 50 more warnings" {
		t.Fatalf("%d warnings, last %q", len(res.Warnings), res.Warnings[len(res.Warnings)-1])
	}
}
