package jinja

import (
	"errors"
	"strings"
	"sync"
	"testing"
)

// TestErrorLines: syntax and runtime errors name the template line they are about.
func TestErrorLines(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"a\n\n{{ 1 + }}", "line 3: unexpected '}}'"},
		{"a\n{% for %}", "line 2: expected a name, got '%}'"},
		{"{% if x %}\n\nno end", "line 3: unexpected end of template, expected 'endif'"},
		{"x\n{% break %}", "line 2: 'break' outside a loop"},
		{"x\n{{ 'unterminated }}", "line 2: unterminated string"},
		{"x\n\n{# open comment", "line 3: comment not closed"},
	} {
		_, err := Parse(c.src)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.src, err, c.want)
		}
	}
	tpl, err := Parse("line 1\n{% for m in messages %}\n{{ m.content.missing() }}\n{% endfor %}")
	if err != nil {
		t.Fatal(err)
	}
	_, err = tpl.Render(map[string]any{"messages": []any{decodeJSON(t, []byte(`{"content": "x"}`))}}, Limits{})
	if err == nil || !strings.HasPrefix(err.Error(), "line 3: ") {
		t.Errorf("runtime error %v does not name line 3", err)
	}
}

// TestSandbox: templates cannot load other templates, and mutating methods are refused
// with ErrForbidden (Jinja's SecurityError); reading them is harmless, as in Jinja.
func TestSandbox(t *testing.T) {
	for _, src := range []string{`{% include "/etc/passwd" %}`, `{% import "x" as y %}`, `{% extends "base" %}`, `{% from "x" import y %}`} {
		if _, err := Parse(src); !errors.Is(err, ErrForbidden) {
			t.Errorf("%s: error %v, want ErrForbidden", src, err)
		}
	}
	vars := map[string]any{"l": []any{1}, "d": decodeJSON(t, []byte(`{"a": 1}`))}
	for _, src := range []string{`{{ l.append(2) }}`, `{{ l.pop() }}`, `{{ d.update({'b': 2}) }}`, `{{ d.clear() }}`, `{{ d.setdefault('b', 2) }}`} {
		tpl, err := Parse(src)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tpl.Render(vars, Limits{}); !errors.Is(err, ErrForbidden) || !strings.Contains(err.Error(), "is unsafe") {
			t.Errorf("%s: error %v, want ErrForbidden", src, err)
		}
	}
	tpl, _ := Parse(`{{ l.append is defined }}{{ l }}`)
	if out, err := tpl.Render(vars, Limits{}); err != nil || out != "False[1]" {
		t.Errorf("got %q, %v; want False[1]", out, err)
	}
}

// TestFuncErrors: an error a caller's function returns ends the render, and errors.Is
// finds it.
func TestFuncErrors(t *testing.T) {
	sentinel := errors.New("roles must alternate")
	tpl, err := Parse("{% if true %}\n{{ fail('x') }}{% endif %}")
	if err != nil {
		t.Fatal(err)
	}
	_, err = tpl.Render(map[string]any{"fail": Func(func([]any, map[string]any) (any, error) { return nil, sentinel })}, Limits{})
	if !errors.Is(err, sentinel) || err.Error() != "line 2: roles must alternate" {
		t.Errorf("error %v, want the function's, on line 2", err)
	}
}

// TestConcurrentRenders: a Template renders concurrently, each render with its own
// namespaces and iterators (run with -race to check).
func TestConcurrentRenders(t *testing.T) {
	tpl, err := Parse(`{% set ns = namespace(n=0) %}{% set g = xs|map('string') %}{% for x in g %}{% set ns.n = ns.n + x|int %}{% endfor %}{{ ns.n }}{{ g|list }}`)
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]any{"xs": []any{1, 2, 3}}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if out, err := tpl.Render(vars, Limits{}); err != nil || out != "6[]" {
					t.Errorf("got %q, %v; want 6[]", out, err)
					return
				}
			}
		})
	}
	wg.Wait()
}
