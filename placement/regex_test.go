package placement

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/dlclark/regexp2"
)

// Verdicts std::regex_search gives (ECMAScript grammar, match anywhere in the name).
func TestMatcherSemantics(t *testing.T) {
	for _, c := range []struct {
		pattern, name string
		want          bool
	}{
		{"exps", "blk.0.ffn_up_exps.weight", true},
		{`blk\.1\.`, "blk.11.ffn_up_exps.weight", false},
		{`blk.1.`, "blk.11.ffn_up_exps.weight", true}, // '.' matches the second '1'
		{`^blk\.3\.`, "blk.3.attn_q.weight", true},
		{`^blk\.3\.`, "xblk.3.attn_q.weight", false},
		{`\.ffn_(up|down|gate|gate_up)_(ch|)exps`, "blk.7.ffn_gate_up_exps.weight", true},
		{`\.ffn_(up|down|gate|gate_up)_(ch|)exps`, "blk.7.ffn_up_chexps.bias", true},
		{`\.ffn_(up|down|gate|gate_up)_(ch|)exps`, "blk.7.ffn_up_shexp.weight", false},
		{`ffn_(up|down)_exps$`, "blk.7.ffn_up_exps.weight", false},
		{`blk\.[[:digit:]]+\.ffn`, "blk.12.ffn_norm.weight", true},
		{`blk\.\d+\.attn_(q|k|v)\b`, "blk.2.attn_k.weight", true},
		{`blk\.\d+\.attn_(q|k|v)\b`, "blk.2.attn_kv_a_mqa.weight", false},
		{`output\.weight$`, "output.weight", true},
		{`^output$`, "output.weight", false},
		{"", "anything", true},
		{`(?:a|b)c`, "xbc", true},
		{`blk\.1[0-9]\.`, "blk.15.ffn_down_exps.weight", true},
		{`x{2}`, "axxb", true},
	} {
		m, err := compileMatcher(c.pattern)
		if err != nil {
			t.Errorf("%q: %v", c.pattern, err)
			continue
		}
		if got, err := m.match(c.name, isPlainASCII(c.name)); err != nil || got != c.want {
			t.Errorf("%q on %s = %v, %v; want %v", c.pattern, c.name, got, err, c.want)
		}
	}
}

// The shortcuts (required literals, Go's engine on the shared subset, plain literals) must
// agree with regexp2 on every pattern and name.
func TestMatcherAgreesWithRegexp2(t *testing.T) {
	m := deepSeekModel(t)
	names := []string{"blk.3.ffn_up_exps.weight", "ünïcode.weight", "a\rb", "blk.1.x\u2028y"}
	for _, ti := range m.Tensors {
		names = append(names, ti.Name)
	}
	patterns := append([]string{`exps`, `^token_embd`, `weight$`, `^output\.weight$`, `blk\.(1|2)\d\.`, `a.b`,
		`[^a-z]exps`, `\s`, `\bffn`, `blk\.\d+\.ffn_(gate|up)_exps\.weight`, `x{1}`, `(?=blk)b`, `blk\.5(?!\d)`,
		`[[:digit:]]{2}`, `.`, `\.`, `_(ch|)exps`}, twentyRulePatterns()...)
	for _, p := range patterns {
		mm, err := compileMatcher(p)
		if err != nil {
			t.Fatalf("%q: %v", p, err)
		}
		re := regexp2.MustCompile(p, regexp2.ECMAScript|regexp2.RE2)
		for _, n := range names {
			want, _ := re.MatchString(n)
			if got, err := mm.match(n, isPlainASCII(n)); err != nil || got != want {
				t.Errorf("%q on %q = %v, %v; regexp2 says %v", p, n, got, err, want)
			}
		}
	}
}

func twentyRulePatterns() []string {
	var out []string
	for _, r := range twentyRules {
		out = append(out, r[:strings.LastIndexByte(r, '=')])
	}
	return out
}

// An invalid pattern names the pattern and where it goes wrong.
func TestPatternErrorPosition(t *testing.T) {
	for _, c := range []struct {
		pattern string
		pos     int
		msg     string
	}{
		{`blk\.(0`, 5, "missing closing )"},
		{`a)b`, 1, "unexpected )"},
		{`x[abc`, 1, "unterminated [] set"},
		{`abc\`, 3, `illegal \ at end of pattern`},
		{`a**`, 2, "nested"},
		{`[z-a]`, 3, "range in reverse order"},
		{`(a|b`, 0, "missing closing )"},
	} {
		_, err := compileMatcher(c.pattern)
		var pe *PatternError
		if !errors.As(err, &pe) {
			t.Errorf("%q: %v", c.pattern, err)
			continue
		}
		if pe.Pos != c.pos || !strings.Contains(pe.Msg, c.msg) || pe.Pattern != c.pattern {
			t.Errorf("%q: position %d, %q; want %d, %q", c.pattern, pe.Pos, pe.Msg, c.pos, c.msg)
		}
		if !strings.Contains(pe.Error(), "\n  "+c.pattern+"\n  "+strings.Repeat(" ", c.pos)+"^") {
			t.Errorf("%q: no caret under position %d:\n%s", c.pattern, c.pos, pe.Error())
		}
	}
}

func TestStdRegexUnsupported(t *testing.T) {
	for p, want := range map[string]string{
		`(?<=blk)\.1`: "(?<", `(?i)EXPS`: "(?i", `\p{L}+`: `\p`, `a*+`: "*+", `(?P<x>a)`: "(?P",
		`(?:a)`: "", `(?=a)`: "", `(?!a)b`: "", `exps`: "", `[[:digit:]]`: "",
	} {
		got := stdRegexUnsupported(p)
		if want == "" && got != "" || want != "" && !strings.Contains(got, want) {
			t.Errorf("%q: %q, want mention of %q", p, got, want)
		}
	}
}

func TestEscapeBareDots(t *testing.T) {
	for p, want := range map[string]string{`blk.1.`: `blk\.1\.`, `blk\.1\.`: "", `ffn_.*_exps`: "", `a.b.+c`: `a\.b.+c`, `[.]x.`: `[.]x\.`} {
		got, changed := escapeBareDots(p)
		if changed != (want != "") || changed && got != want {
			t.Errorf("%q: %q %v, want %q", p, got, changed, want)
		}
	}
}

func TestRequiredLiterals(t *testing.T) {
	for p, want := range map[string]string{
		`blk\.1[0-9]\.ffn_.*_exps`: "blk.1|.ffn_|_exps", `exps`: "exps", `a|b`: "", `ab?c`: "a|c",
		`(x)yz`: "yz", `\x41b`: "", `^blk\.3\.`: "blk.3.", `ab+c`: "a|c",
	} {
		toks, ok := scanRegex(p)
		if !ok {
			t.Fatalf("%q does not scan", p)
		}
		if got := strings.Join(requiredLiterals(p, toks), "|"); got != want {
			t.Errorf("%q: %q, want %q", p, got, want)
		}
	}
}

func ExamplePatternError() {
	_, err := compileMatcher(`blk\.(0`)
	fmt.Println(err)
	// Output:
	// invalid regular expression 'blk\.(0': missing closing ) at position 5
	//   blk\.(0
	//        ^
}
