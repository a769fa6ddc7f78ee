package grammar

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func readGrammar(t *testing.T, name string) *Grammar {
	t.Helper()
	text, err := os.ReadFile(filepath.Join("testdata", "llama-grammars", name))
	if err != nil {
		t.Fatal(err)
	}
	return mustParse(t, string(text))
}

// TestLlamaGrammars parses every grammar llama.cpp ships and checks it on
// hand-written texts.
func TestLlamaGrammars(t *testing.T) {
	cases := map[string]struct{ yes, no []string }{
		"arithmetic.gbnf": {
			yes: []string{"x = 1\n", "1 = x\n", "a1 = (b +2)\nfoo=bar\n"},
			no:  []string{"x = 1", "= 1\n", "x = (1\n", "x = b + 2\n"},
		},
		"c.gbnf": {
			yes: []string{"int main(){return 0;}", "float f(int x){x = x+1;while(x<3){x = x*2;}}", ""},
			no:  []string{"int main(){return 0}", "main(){}"},
		},
		"chess.gbnf": {
			yes: []string{"1. e4 e5\n2. Nf3 Nc6\n", "1. d4 d5\n2. c4 dxc4\n3. O-O O-O-O\n"},
			no:  []string{"1. e4 e5\n", "1. e9 e5\n2. a1 a2\n"},
		},
		"english.gbnf": {
			yes: []string{"Hello, world!", "a b\tc\nd", `x\y`},
			no:  []string{"", " lead", "é"},
		},
		"japanese.gbnf": {
			yes: []string{"こんにちは", "カタカナ 漢字、"},
			no:  []string{"abc", ""},
		},
		"json.gbnf": {
			yes: []string{`{"a": [1, true, null, "x"]}`, "{}"},
			no:  []string{`[]`, `{"a":}`},
		},
		"json_arr.gbnf": {
			yes: []string{"[\n{\"a\": 1},\n2]", "[\n]"},
			no:  []string{"[1]", "{}"},
		},
		"list.gbnf": {
			yes: []string{"- one\n- two\n"},
			no:  []string{"- one", "-one\n", "- a\u2028b\n"},
		},
	}
	files, err := filepath.Glob("testdata/llama-grammars/*.gbnf")
	if err != nil || len(files) != len(cases) {
		t.Fatalf("found %v (%v), want the %d grammars", files, err, len(cases))
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			g := readGrammar(t, name)
			for _, s := range c.yes {
				if !accepts(g, s) {
					t.Errorf("refuses %q", s)
				}
			}
			for _, s := range c.no {
				if accepts(g, s) {
					t.Errorf("accepts %q", s)
				}
			}
		})
	}
}

// TestJSONMatchesLlamaJSON compares grammar.JSON with llama.cpp's own
// grammars/json.gbnf on every prefix of many generated texts: the two must
// allow the same pieces and agree on completeness everywhere.
func TestJSONMatchesLlamaJSON(t *testing.T) {
	ours := mustParse(t, JSON)
	theirs := readGrammar(t, "json.gbnf")
	pieces := syntheticPieces(3000, 3)
	for _, p := range []string{"{", "}", "[", "]", ",", ":", " ", "\n", "\n  ", `"`, `\`, `\u`, "0", "-", ".", "e", "E+", "true", "null", "é", "\x7f", "\x01", "\t"} {
		pieces = append(pieces, []byte(p))
	}
	v := NewVocab(pieces)
	a, b := make([]bool, v.Len()), make([]bool, v.Len())
	texts := []string{
		`{"a": [1, -2.5e+1, true, false, null, {"b": "c\"\\\n\u00e9"}], "d": {}}`,
		"{\n  \"key\": 1234567890123456,\n\t\"x\": 0.0E-0}",
		`{"s":"emoji 😀 and 中文","n":-0}`,
		`{"e":1e11,"f":1e01}`,
	}
	for _, text := range texts {
		m1, m2 := ours.NewMatcher(), theirs.NewMatcher()
		for i := 0; i <= len(text); i++ {
			m1.AllowedTokens(v, a)
			m2.AllowedTokens(v, b)
			for id := range a {
				if a[id] != b[id] {
					t.Fatalf("after %q, piece %q: JSON allows %v, json.gbnf %v", text[:i], pieces[id], a[id], b[id])
				}
			}
			if m1.CanEnd() != m2.CanEnd() {
				t.Fatalf("after %q: CanEnd %v vs %v", text[:i], m1.CanEnd(), m2.CanEnd())
			}
			if i == len(text) {
				break
			}
			ok1, ok2 := m1.AcceptBytes([]byte{text[i]}), m2.AcceptBytes([]byte{text[i]})
			if ok1 != ok2 {
				t.Fatalf("after %q, byte %q: %v vs %v", text[:i], text[i], ok1, ok2)
			}
			if !ok1 {
				if !strings.Contains(text, "1e11") {
					t.Fatalf("both refuse byte %d of %q", i, text)
				}
				break
			}
		}
	}
}
