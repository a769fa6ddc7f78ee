package jinja

import (
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestLimits: hostile templates end in an error that wraps ErrLimit and names the limit,
// quickly and without allocating much, instead of overflowing the stack, exhausting
// memory or running forever.
func TestLimits(t *testing.T) {
	for _, c := range []struct {
		name, src, want string
	}{
		{"recursive macro", `{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}`, "nesting depth of 200"},
		{"recursive caller", `{% macro f() %}{% call f() %}x{% endcall %}{% endmacro %}{{ f() }}`, "nesting depth of 200"},
		{"recursive loop", `{% for x in [1] recursive %}{{ loop([x]) }}{% endfor %}`, "nesting depth of 200"},
		{"doubling string", `{% set ns = namespace(s='a') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}`, "64 MiB of text"},
		{"doubling list", `{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}`, "64 MiB of text"},
		{"string times huge", `{{ 'a' * 100000000000 }}`, "64 MiB of text"},
		{"list times huge", `{{ [1, 2] * 100000000000 }}`, "64 MiB of text"},
		{"huge range", `{% for i in range(1000000000) %}{% endfor %}`, "20000000 steps"},
		{"huge range as a list", `{{ range(1000000000)|list|length }}`, "64 MiB of text"},
		{"nested loops", `{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}`, "20000000 steps"},
		{"replace growth", `{% set ns = namespace(s='aa') %}{% for i in range(100) %}{% set ns.s = ns.s.replace('a', 'aa') %}{% endfor %}`, "64 MiB of text"},
		{"cumulative output", `{% for i in range(1000000) %}{{ 'x' * 100 }}{% endfor %}`, "64 MiB of text"},
		{"wide padding", `{{ 'x'.center(100000000000) }}`, "64 MiB of text"},
		{"wide format", `{{ '%100000000000d' % 1 }}`, "64 MiB of text"},
		{"wide str.format", `{{ '{:>100000000000}'.format(1) }}`, "64 MiB of text"},
		{"wide indent", `{{ 'a\nb'|indent(100000000000) }}`, "64 MiB of text"},
		{"wide json indent", `{{ [1]|tojson(indent=100000000000) }}`, "64 MiB of text"},
		{"list nested in itself", `{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l }}`, "nested deeper than 512"},
		{"long operator chain", "{{ 1" + strings.Repeat(" + 1", 100000) + " }}", "expression nesting of 10000"},
		{"scanning a big string", `{% set s = 'a' * 50000000 %}{% for i in range(100000) %}{{ s.find('b') }}{% endfor %}`, "20000000 steps"},
		{"searching a big string", `{% set s = 'a' * 50000000 %}{% for i in range(100000) %}{{ 'b' in s }}{% endfor %}`, "20000000 steps"},
		{"comparing big strings", `{% set s = 'a' * 30000000 %}{% set t = 'a' * 30000000 %}{% for i in range(100000) %}{{ s == t }}{% endfor %}`, "20000000 steps"},
		{"indexing a big string", `{% set s = 'é' * 10000000 %}{% for i in range(100000) %}{{ s[-1] }}{% endfor %}`, "20000000 steps"},
		{"counting a big string", `{% set s = 'é' * 10000000 %}{% for i in range(100000) %}{{ s|length }}{% endfor %}`, "20000000 steps"},
		{"comparing a shared tree", `{% set ns = namespace(l=[]) %}{% for i in range(40) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}{{ ns.l == ns.l }}`, "20000000 steps"},
		{"printing a shared tree", `{% set ns = namespace(l=[]) %}{% for i in range(40) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}{{ ns.l }}`, "64 MiB of text"},
		{"splitting into many parts", `{{ ('a' * 30000000).split('a')|length }}`, "64 MiB of text"},
		{"splitting into many words", `{{ ('a ' * 30000000).split()|length }}`, "64 MiB of text"},
		{"iterating a big string", `{{ ('a' * 30000000)|list|length }}`, "64 MiB of text"},
		{"escaping control characters", "{{ ('\x01' * 20000000)|tojson }}", "64 MiB of text"},
		{"escaping HTML", `{{ ('<' * 30000000)|e }}`, "64 MiB of text"},
		{"repr of escapes", "{{ ['\x01' * 20000000] }}", "64 MiB of text"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tpl, err := Parse(c.src)
			if err != nil {
				t.Fatal(err)
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			_, err = tpl.Render(nil, Limits{})
			elapsed := time.Since(start)
			runtime.ReadMemStats(&after)
			if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want ErrLimit naming %q", err, c.want)
			}
			if elapsed > 3*time.Second && !raceEnabled {
				t.Errorf("took %v", elapsed)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 256<<20 && !raceEnabled {
				t.Errorf("allocated %d MiB", alloc>>20)
			}
			t.Logf("%v in %v", err, elapsed)
		})
	}
}

// TestParseNesting: deeply nested source is a syntax error wrapping ErrLimit, not a stack
// overflow.
func TestParseNesting(t *testing.T) {
	const n = 100000
	for name, src := range map[string]string{
		"parentheses": "{{ " + strings.Repeat("(", n) + "1" + strings.Repeat(")", n) + " }}",
		"lists":       "{{ " + strings.Repeat("[", n) + strings.Repeat("]", n) + " }}",
		"not":         "{{ " + strings.Repeat("not ", n) + "1 }}",
		"minus":       "{{ " + strings.Repeat("-", n) + "1 }}",
		"blocks":      strings.Repeat("{% if true %}", n) + strings.Repeat("{% endif %}", n),
		"conditional": "{{ 1" + strings.Repeat(" if 1 else 1", n) + " }}",
	} {
		_, err := Parse(src)
		if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "nests deeper than 256") {
			t.Errorf("%s: error %v, want ErrLimit", name, err)
		}
	}
}

// TestLimitsConfigurable: a caller's limits replace the defaults.
func TestLimitsConfigurable(t *testing.T) {
	tpl, err := Parse(`{% for i in range(10) %}{{ i }}{% endfor %}`)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := tpl.Render(nil, Limits{MaxSteps: 1000}); err != nil || out != "0123456789" {
		t.Errorf("got %q, %v", out, err)
	}
	if _, err := tpl.Render(nil, Limits{MaxSteps: 20}); !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "exceeded 20 steps") {
		t.Errorf("20 steps: %v", err)
	}
	if _, err := tpl.Render(nil, Limits{MaxBytes: 5}); !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "exceeded 5 bytes") {
		t.Errorf("5 bytes: %v", err)
	}
	deep, err := Parse(`{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(10) }}`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := deep.Render(nil, Limits{MaxDepth: 11}); err != nil {
		t.Errorf("depth 11: %v", err)
	}
	if _, err := deep.Render(nil, Limits{MaxDepth: 10}); !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "nesting depth of 10") {
		t.Errorf("depth 10: %v", err)
	}
}
