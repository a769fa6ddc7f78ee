package jinja

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// fuzzSeeds are llama.cpp's chat templates and the language cases.
func fuzzSeeds(f *testing.F) {
	paths, _ := filepath.Glob("testdata/templates/*.jinja")
	for _, p := range paths[:min(len(paths), 12)] {
		src, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(src))
	}
	var cases []struct {
		Template string `json:"template"`
	}
	readJSONFile(f, "testdata/features.json", &cases)
	for _, c := range cases {
		f.Add(c.Template)
	}
}

// FuzzParse: parsing any text never panics, even one the parser would recover from.
func FuzzParse(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, src string) {
		if _, err := Parse(src); errors.Is(err, errInternal) {
			t.Fatalf("%q: %v", src, err)
		}
	})
}

// FuzzRender: rendering any template never panics and ends within its budgets. The
// budgets are smaller than the defaults so that the fuzzer spends its time on many inputs,
// not on each hostile one.
func FuzzRender(f *testing.F) {
	fuzzSeeds(f)
	vars := func(t *testing.T) map[string]any {
		v := decodeJSON(t, []byte(`{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
			{"role": "assistant", "content": null, "reasoning_content": "think", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"a": 1, "b": [true, null, 2.5]}}}]},
			{"role": "tool", "content": "{\"ok\": 1}"}], "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
			"add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"}`)).(*Dict)
		out := map[string]any{}
		for i, k := range v.keys {
			out[k.(string)] = v.values[i]
		}
		return out
	}
	f.Fuzz(func(t *testing.T, src string) {
		tpl, err := Parse(src)
		if err != nil {
			return
		}
		start := time.Now()
		_, err = tpl.Render(vars(t), Limits{MaxSteps: 1_000_000, MaxBytes: 8 << 20})
		if errors.Is(err, errInternal) {
			t.Fatalf("%q: %v", src, err)
		}
		if elapsed := time.Since(start); elapsed > 5*time.Second {
			t.Fatalf("%q took %v", src, elapsed)
		}
	})
}
