package grammar

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
)

var kindNames = map[elemKind]string{
	kindEnd:            "END",
	kindAlt:            "ALT",
	kindRuleRef:        "RULE_REF",
	kindChar:           "CHAR",
	kindCharNot:        "CHAR_NOT",
	kindCharRangeUpper: "CHAR_RNG_UPPER",
	kindCharAlt:        "CHAR_ALT",
	kindCharAny:        "CHAR_ANY",
}

func loadJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestLlamaParserCases checks that rules compile to exactly the elements,
// rule ids and generated rule names llama.cpp's parser produces.
func TestLlamaParserCases(t *testing.T) {
	var data struct {
		Parse []struct {
			Grammar  string
			Symbols  map[string]int
			Elements [][2]any
		}
	}
	loadJSON(t, "testdata/llama-parser.json", &data)
	if len(data.Parse) < 15 {
		t.Fatalf("only %d parser cases loaded", len(data.Parse))
	}
	for _, c := range data.Parse {
		g, err := Parse(c.Grammar)
		if err != nil {
			t.Errorf("Parse(%q): %v", c.Grammar, err)
			continue
		}
		got := map[string]int{}
		for id, name := range g.ruleNames {
			got[name] = id
		}
		if len(got) != len(c.Symbols) || g.Rules() != len(c.Symbols) {
			t.Errorf("Parse(%q): rules %v, want %v", c.Grammar, got, c.Symbols)
		}
		for name, id := range c.Symbols {
			if got[name] != id {
				t.Errorf("Parse(%q): rule %q has id %d, want %d", c.Grammar, name, got[name], id)
			}
		}
		var want, have []string
		for _, e := range c.Elements {
			want = append(want, e[0].(string)+" "+jsonNumber(e[1]))
		}
		for _, e := range g.elems {
			have = append(have, kindNames[e.kind]+" "+jsonNumber(float64(e.value)))
		}
		if strings.Join(want, ", ") != strings.Join(have, ", ") {
			t.Errorf("Parse(%q) elements\n got %v\nwant %v", c.Grammar, have, want)
		}
	}
}

func jsonNumber(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestLlamaParserFailures(t *testing.T) {
	var data struct{ Fail []string }
	loadJSON(t, "testdata/llama-parser.json", &data)
	if len(data.Fail) < 6 {
		t.Fatalf("only %d failure cases loaded", len(data.Fail))
	}
	for _, text := range data.Fail {
		if _, err := Parse(text); err == nil {
			t.Errorf("Parse(%q) succeeded, want an error", text)
		}
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct {
		name, text string
		line, col  int
		want       string
	}{
		{"empty", "", 0, 0, "no rules"},
		{"only comment", "# nothing\n", 0, 0, "no rules"},
		{"missing root", "rot ::= \"a\"\n", 0, 0, "no root rule"},
		{"undefined rule", "root ::= expr\nexpr ::= term \"+\" numero\nterm ::= [0-9]", 2, 19, `undefined rule "numero"`},
		{"missing ::=", "root := \"a\"", 1, 6, "expected '::='"},
		{"name missing", "::= \"a\"", 1, 1, "expected a rule name"},
		{"unterminated literal", "root ::= \"abc", 1, 10, "unterminated string literal"},
		{"unterminated class", "root ::= [a-z", 1, 10, "unterminated character class"},
		{"empty class", "root ::= []", 1, 10, "empty character class"},
		{"empty negated class", "root ::= [^]", 1, 10, "empty character class"},
		{"bad escape", "root ::= \"a\\qb\"", 1, 12, `unknown escape \q`},
		{"short hex", "root ::= \"\\x4\"", 1, 11, `escape \x needs 2 hex digits`},
		{"short u", "root ::= [\\u12]", 1, 11, `escape \u needs 4 hex digits`},
		{"huge U", "root ::= \"\\UFFFFFFFF\"", 1, 11, "beyond the last Unicode code point"},
		{"escape at end", "root ::= \"\\", 1, 10, "unterminated escape"},
		{"unclosed group", "root ::= (\"a\" \"b\"\n", 2, 1, "expected ')'"},
		{"stray paren", "root ::= \"a\")", 1, 13, "unexpected ')'"},
		{"nothing to repeat", "root ::= *", 1, 10, "no item before it"},
		{"repeat after alt", "root ::= \"a\" | +", 1, 16, "no item before it"},
		{"brace without number", "root ::= \"a\"{,3}", 1, 14, "expected a number after '{'"},
		{"brace unclosed", "root ::= \"a\"{3,4", 1, 17, "expected '}'"},
		{"brace junk", "root ::= \"a\"{3;}", 1, 15, "expected ',' or '}'"},
		{"max below min", "root ::= \"a\"{5,3}", 1, 13, "maximum 3 is less than its minimum 5"},
		{"min over limit", "root ::= \"a\"{2001}", 1, 13, "minimum 2001 is more than the limit"},
		{"nested repetition product", "root ::= ((\"a\"{0,50}){0,50})", 1, 22, "51 × 50"},
		{"token reference", "root ::= <[12]>", 1, 10, "token references"},
		{"negated token", "root ::= !<[12]>", 1, 10, "token references"},
		{"invalid utf8", "root ::= \"\xff\"", 1, 11, "invalid UTF-8"},
		{"left recursion", "root ::= \"a\" | root \"a\"", 1, 1, `rule "root" can begin with itself`},
		{"indirect left recursion", "root ::= asdf\nasdf ::= \"a\" | foo \"b\"\nfoo ::= \"c\" | asdf \"d\" | \"e\"", 2, 1, `rule "asdf"`},
		{"left recursion through empty", "root ::= asdf\nasdf ::= \"a\" | foo \"b\"\nfoo ::= \"c\" | empty asdf \"d\" | \"e\"\nempty ::= \"blah\" | ", 2, 1, `rule "asdf"`},
		{"left recursion in group", "root ::= x\nx ::= (x \"a\" | \"b\")", 2, 1, `rule "x"`},
		{"lone CR ends lines", "root ::= a\ra ::= \"x\"\rb ::= \"\\q\"", 3, 8, `unknown escape \q`},
		{"CRLF ends lines", "root ::= a\r\na ::= \"x\"\r\nb ::= \"\\q\"", 3, 8, `unknown escape \q`},
		{"column counts characters", "root ::= \"é\" \"\\z\"", 1, 15, `unknown escape \z`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g, err := Parse(c.text)
			if err == nil {
				t.Fatalf("Parse(%q) = %v, want an error", c.text, g)
			}
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is %T, want *ParseError", err, err)
			}
			if pe.Line != c.line || pe.Column != c.col || !strings.Contains(pe.Msg, c.want) {
				t.Errorf("Parse(%q) = %d:%d %q, want %d:%d containing %q", c.text, pe.Line, pe.Column, pe.Msg, c.line, c.col, c.want)
			}
		})
	}
}

func TestParseLimits(t *testing.T) {
	big := "root ::= \"" + strings.Repeat("a", MaxGrammarBytes) + "\""
	if _, err := Parse(big); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Errorf("Parse of %d bytes: %v, want a size error", len(big), err)
	}
	deep := "root ::= " + strings.Repeat("(", MaxNesting+1) + "\"a\"" + strings.Repeat(")", MaxNesting+1)
	if _, err := Parse(deep); err == nil || !strings.Contains(err.Error(), "nested more than") {
		t.Errorf("Parse of %d nested groups: %v, want a nesting error", MaxNesting+1, err)
	}
	ok := "root ::= " + strings.Repeat("(", MaxNesting) + "\"a\"" + strings.Repeat(")", MaxNesting)
	if _, err := Parse(ok); err != nil {
		t.Errorf("Parse of %d nested groups: %v", MaxNesting, err)
	}
	// Many rules each expanding a long literal 1999 times: within the text
	// limit but far past the element limit.
	var b strings.Builder
	b.WriteString("root ::= r0\n")
	for i := 0; i < 200; i++ {
		b.WriteString("r" + itoa(i) + " ::= \"" + strings.Repeat("x", 20) + "\"{1999}\n")
	}
	if _, err := Parse(b.String()); err == nil || !strings.Contains(err.Error(), "elements") {
		t.Errorf("Parse of an expansion bomb: %v, want an element-limit error", err)
	}
	// A maximum above the limit means no maximum, as in llama.cpp.
	g, err := Parse(`root ::= "a"{0,5000}`)
	if err != nil {
		t.Fatal(err)
	}
	if !accepts(g, strings.Repeat("a", 6000)) {
		t.Error(`"a"{0,5000} should accept 6000 a's (no maximum above the limit)`)
	}
}

func itoa(i int) string { return jsonNumber(i) }

func TestParseSyntax(t *testing.T) {
	// Each grammar must parse; accepted and refused texts pin what it means.
	cases := []struct {
		name, grammar string
		yes, no       []string
	}{
		{"escapes", `root ::= "\x41\u00e9\U0001F600\t\r\n\\\"\[\]"`, []string{"Aé😀\t\r\n\\\"[]"}, []string{"Aé😀"}},
		{"class escapes and ranges", `root ::= [\x30-\x39\]-]+`, []string{"09]-"}, []string{"a", "["}},
		{"negated class", `root ::= [^a-c\n]+`, []string{"xyz", "é"}, []string{"a", "x\n", ""}},
		{"any", `root ::= . .`, []string{"ab", "😀é"}, []string{"a", "abc"}},
		{"comments and newlines in groups", "# head\nroot ::= ( # open\n  \"a\" # a\n  | \"b\"\n) # close\n", []string{"a", "b"}, []string{"ab"}},
		{"newline after bar and ::=", "root ::=\n  \"a\" |\n  \"b\"\n", []string{"a", "b"}, nil},
		{"crlf", "root ::= a\r\na ::= \"x\"\r\n", []string{"x"}, nil},
		{"rule names with digits and dashes", "root ::= a-1 b2\na-1 ::= \"x\"\nb2 ::= \"y\"", []string{"xy"}, []string{"x"}},
		{"later definition wins", "root ::= a\na ::= \"x\"\na ::= \"y\"", []string{"y"}, []string{"x"}},
		{"exact repetition", `root ::= [ab]{3}`, []string{"aba"}, []string{"ab", "abab"}},
		{"spaces in braces", `root ::= "a"{ 2 , 3 }`, []string{"aa", "aaa"}, []string{"a", "aaaa"}},
		{"zero repetition", `root ::= "a"{0} "b"`, []string{"b"}, []string{"ab"}},
		{"literal with raw newline", "root ::= \"a\nb\"", []string{"a\nb"}, nil},
		{"empty alternative", `root ::= "a" | `, []string{"a", ""}, []string{"b"}},
		{"reverse range matches nothing", `root ::= [z-a] | "q"`, []string{"q"}, []string{"m", "a", "z"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g, err := Parse(c.grammar)
			if err != nil {
				t.Fatalf("Parse(%q): %v", c.grammar, err)
			}
			for _, s := range c.yes {
				if !accepts(g, s) {
					t.Errorf("%q refuses %q", c.grammar, s)
				}
			}
			for _, s := range c.no {
				if accepts(g, s) {
					t.Errorf("%q accepts %q", c.grammar, s)
				}
			}
		})
	}
}
