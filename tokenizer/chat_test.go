package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/moerun/moerun/tokenizer/jinja"
)

// chatFixture is testdata/chat/<name>.json: conversations rendered by Python's Jinja2
// configured as Hugging Face's apply_chat_template.
type chatFixture struct {
	Cases []struct {
		Name                string          `json:"name"`
		Messages            json.RawMessage `json:"messages"`
		Tools               json.RawMessage `json:"tools"`
		AddGenerationPrompt bool            `json:"add_generation_prompt"`
		Extra               json.RawMessage `json:"extra"`
		BOSToken            string          `json:"bos_token"`
		EOSToken            string          `json:"eos_token"`
		Rendered            *string         `json:"rendered"`
		Error               *string         `json:"error"`
	} `json:"cases"`
}

func mustDecode(t testing.TB, raw []byte) any {
	t.Helper()
	v, err := DecodeJSON(raw)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestChatFixtures renders every fixture conversation and compares byte for byte.
func TestChatFixtures(t *testing.T) {
	for _, name := range []string{"qwen3", "deepseek_v3"} {
		src, err := os.ReadFile("testdata/chat/" + name + ".chat_template.jinja")
		if err != nil {
			t.Fatal(err)
		}
		tpl, err := ParseTemplate(string(src))
		if err != nil {
			t.Fatal(err)
		}
		var fx chatFixture
		readJSON(t, "testdata/chat/"+name+".json", &fx)
		pass := 0
		for _, c := range fx.Cases {
			in := ChatInput{
				Messages:            mustDecode(t, c.Messages).([]any),
				AddGenerationPrompt: c.AddGenerationPrompt,
				BOSToken:            c.BOSToken,
				EOSToken:            c.EOSToken,
				Vars:                map[string]any{},
			}
			if tools, ok := mustDecode(t, c.Tools).([]any); ok {
				in.Tools = tools
			}
			extra := mustDecode(t, c.Extra).(*Object)
			for _, k := range extra.Keys {
				in.Vars[k] = extra.Values[k]
			}
			got, err := tpl.Render(in)
			switch {
			case c.Error != nil && err == nil:
				t.Errorf("%s/%s: rendered %q, want error %q", name, c.Name, got, *c.Error)
			case c.Error != nil:
				pass++
			case err != nil:
				t.Errorf("%s/%s: %v", name, c.Name, err)
			case got != *c.Rendered:
				t.Errorf("%s/%s:\n got %q\nwant %q", name, c.Name, got, *c.Rendered)
			default:
				pass++
			}
		}
		t.Logf("%s: %d/%d cases byte-identical", name, pass, len(fx.Cases))
	}
}

// TestChatGoldenTemplates renders the tiny models' own templates (from their GGUF files)
// and compares with llama-server's /apply-template, which strips a leading BOS when the
// tokenizer adds one.
func TestChatGoldenTemplates(t *testing.T) {
	for _, model := range []string{"tiny-qwen3moe", "tiny-deepseek2"} {
		v := loadVocab(t, "../testdata/models/"+model+".gguf")
		tpl, err := ParseTemplate(v.ChatTemplate)
		if err != nil {
			t.Fatal(err)
		}
		g := readGolden(t, model).ChatTemplateRender
		var msgs []any
		for _, m := range g.Messages {
			msgs = append(msgs, &Object{Keys: []string{"role", "content"}, Values: map[string]any{"role": m["role"], "content": m["content"]}})
		}
		got, err := tpl.Render(ChatInput{Messages: msgs, AddGenerationPrompt: g.AddGenerationPrompt, BOSToken: v.Piece(v.BOS, true), EOSToken: v.Piece(v.EOS, true)})
		if err != nil {
			t.Fatal(err)
		}
		if v.AddBOS {
			got = strings.TrimPrefix(got, v.Piece(v.BOS, true))
		}
		if got != g.Prompt {
			t.Errorf("%s: got %q, want %q", model, got, g.Prompt)
		}
	}
}

func render(t *testing.T, src string, in ChatInput) (string, error) {
	t.Helper()
	tpl, err := ParseTemplate(src)
	if err != nil {
		return "", err
	}
	return tpl.Render(in)
}

// TestChatFeatures checks the additions to the engine against what Python prints.
func TestChatFeatures(t *testing.T) {
	args := mustDecode(t, []byte(`{"z": 1, "a": [1.5, 2.0, 1e20, "é\n<>"], "m": {"b": null, "a": true}}`))
	for _, tc := range []struct {
		src, want string
		vars      map[string]any
	}{
		// json.dumps(..., ensure_ascii=False) keeps key order and Python's float forms.
		{`{{ x | tojson }}`, `{"z": 1, "a": [1.5, 2.0, 1e+20, "é\n<>"], "m": {"b": null, "a": true}}`, map[string]any{"x": args}},
		{`{{ x | tojson(indent=2) }}`, "{\n  \"z\": 1,\n  \"a\": [\n    1.5,\n    2.0,\n    1e+20,\n    \"é\\n<>\"\n  ],\n  \"m\": {\n    \"b\": null,\n    \"a\": true\n  }\n}", map[string]any{"x": args}},
		{`{{ x | tojson(sort_keys=true) }}`, `{"a": [1.5, 2.0, 1e+20, "é\n<>"], "m": {"a": true, "b": null}, "z": 1}`, map[string]any{"x": args}},
		{`{% for k, v in x.items() %}{{ k }},{% endfor %}`, `z,a,m,`, map[string]any{"x": args}},
		{`{{ {'b': 1, 'a': 2} | tojson }}`, `{"b": 1, "a": 2}`, nil},
		{`{{ strftime_now("%d %b %Y") }}`, `21 Nov 2026`, nil},
		{"{%- generation -%}  x  {%- endgeneration -%}", "x", nil},
	} {
		got, err := render(t, tc.src, ChatInput{Vars: tc.vars, Now: time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)})
		if err != nil || got != tc.want {
			t.Errorf("%s: got %q, %v; want %q", tc.src, got, err, tc.want)
		}
	}
}

// TestChatErrors: bad templates give errors naming the line, never panics; templates
// cannot read files.
func TestChatErrors(t *testing.T) {
	for src, line := range map[string]string{
		"line one\n{% if x %}\n{{ 1 + }}\n": "line 3",
		"a\n\n{% for %}":                    "line 3",
	} {
		if _, err := render(t, src, ChatInput{}); err == nil || !strings.Contains(err.Error(), line) {
			t.Errorf("%q: error %v does not name %s", src, err, line)
		}
	}
	_, err := render(t, "a\n{{ raise_exception('roles must alternate') }}", ChatInput{})
	if !errors.Is(err, ErrRaised) || !strings.Contains(err.Error(), "roles must alternate") {
		t.Errorf("raise_exception: %v", err)
	}
	if _, err = render(t, `{% include "/etc/passwd" %}`, ChatInput{}); err == nil {
		t.Error("include read a file")
	}
	// Python's %-formatting, on which gonja panicked, renders as Python renders it.
	if got, err := render(t, `{{ '%s-%d' % (1, 2) }}`, ChatInput{}); err != nil || got != "1-2" {
		t.Errorf("%%-formatting: got %q, %v; want \"1-2\"", got, err)
	}
}

// FuzzChatTemplate: parsing and rendering any template text never panics (not even one
// the engine recovers from) and ends within seconds, whatever it loops, recurses or builds.
func FuzzChatTemplate(f *testing.F) {
	for _, name := range []string{"qwen3", "deepseek_v3", "glm46", "glm47_flash"} {
		src, err := os.ReadFile("testdata/chat/" + name + ".chat_template.jinja")
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(src))
	}
	for _, src := range []string{
		"{% for m in messages %}{{ m.content | tojson(indent=1) }}{% endfor %}{{ '%d' % 1 }}",
		"{% for i in range(1000) %}{% for j in range(1000) %}{{ i * j }}{% endfor %}{% endfor %}",
		"{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
		"{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
		"{{ 'a' * 10 ** 11 }}{{ [1] * 2 ** 40 }}{{ 7 // 2 ** 3 % 5 - -1 }}",
		"{% for m in messages|reverse %}{% if loop.last %}{{ caller is defined }}{% endif %}{% endfor %}",
		"{% macro m(a, b=2) %}{{ caller(a * b) }}{% endmacro %}{% call(x) m(3) %}{{ x ** x }}{% endcall %}",
		"{% for x in [[1, [2]]] recursive %}{% if x is iterable %}{{ loop(x) }}{% else %}{{ x }}{% endif %}{% endfor %}",
	} {
		f.Add(src)
	}
	msgs, err := DecodeJSON([]byte(`[{"role": "user", "content": "hi"}, {"role": "assistant", "content": null, "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]}]`))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, src string) {
		if len(src) > 4096 {
			return
		}
		start := time.Now()
		tpl, err := ParseTemplate(src)
		if err == nil {
			_, err = tpl.Render(ChatInput{Messages: msgs.([]any), AddGenerationPrompt: true})
		}
		if err != nil && strings.Contains(err.Error(), "internal error") {
			t.Fatalf("%q: %v", src, err)
		}
		if elapsed := time.Since(start); elapsed > 5*time.Second {
			t.Fatalf("%q took %v", src, elapsed)
		}
	})
}

// TestChatLongConversation: a million-token agent conversation with tools (2,000 messages,
// 4.3 MB) renders through the templates of the families moerun serves within the budgets
// Render sets.
func TestChatLongConversation(t *testing.T) {
	in := longConversation(t, 500)
	for _, name := range []string{"qwen3", "qwen35", "glm46", "glm47_flash", "deepseek_v3", "gpt_oss"} {
		src, err := os.ReadFile("testdata/chat/" + name + ".chat_template.jinja")
		if err != nil {
			t.Fatal(err)
		}
		tpl, err := ParseTemplate(string(src))
		if err != nil {
			t.Fatal(err)
		}
		out, err := tpl.Render(in)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !strings.Contains(out, "Step 499:") {
			t.Errorf("%s: the last turn is missing", name)
		}
	}
}

// longConversation is rounds of a user's request, a tool call with reasoning, the
// tool's result and an answer, each message about 2 KB.
func longConversation(t testing.TB, rounds int) ChatInput {
	var msgs strings.Builder
	msgs.WriteString(`[{"role": "system", "content": "You are a coding agent."}`)
	code := strings.Repeat(`func f() { return 1 } // some code here\n`, 50)
	for i := range rounds {
		fmt.Fprintf(&msgs, `, {"role": "user", "content": "Step %d: fix the failing test in pkg/%d. %s"}`, i, i, code)
		fmt.Fprintf(&msgs, `, {"role": "assistant", "content": "", "reasoning_content": "Read the file first. %s", "tool_calls": [{"type": "function", "function": {"name": "read_file", "arguments": {"path": "pkg/%d/x.go", "lines": [1, 200]}}}]}`, code, i)
		fmt.Fprintf(&msgs, `, {"role": "tool", "name": "read_file", "content": "%s"}`, code)
		fmt.Fprintf(&msgs, `, {"role": "assistant", "content": "Fixed: %s"}`, code)
	}
	msgs.WriteString(`, {"role": "user", "content": "Thanks."}]`)
	m := mustDecode(t, []byte(msgs.String()))
	tools := mustDecode(t, []byte(`[{"type": "function", "function": {"name": "read_file", "description": "Read a file", "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "lines": {"type": "array"}}, "required": ["path"]}}}]`))
	return ChatInput{Messages: m.([]any), Tools: tools.([]any), AddGenerationPrompt: true, Vars: map[string]any{"enable_thinking": true}}
}

// TestChatTemplateLimits: the hostile templates of issue 39 end in an error wrapping
// jinja.ErrLimit through the tokenizer's API (package jinja's TestLimits checks that they
// end quickly and without allocating much).
func TestChatTemplateLimits(t *testing.T) {
	for _, src := range []string{
		`{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}`,
		`{% set ns = namespace(s='a') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}`,
		`{{ 'a' * 100000000000 }}`,
		`{% for i in range(1000000000) %}{% endfor %}`,
		`{{ ` + strings.Repeat("(", 100000) + `1` + strings.Repeat(")", 100000) + ` }}`,
	} {
		if _, err := render(t, src, ChatInput{Messages: []any{}}); !errors.Is(err, jinja.ErrLimit) {
			t.Errorf("%.60s: error %v, want jinja.ErrLimit", src, err)
		}
	}
}
