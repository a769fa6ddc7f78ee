package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/tokenizer"
)

// fuzzTemplateSource prints the template's inputs as JSON, separated by \x01, which tojson
// never writes raw: the variable v, the messages and the tools.
const fuzzTemplateSource = "{{ v | tojson }}\x01{{ messages | tojson }}\x01{{ tools | tojson }}\x01{{ add_generation_prompt }}"

// writeTemplateModel writes a vocabulary-only GGUF whose chat template is src: one token,
// no merges, so that loading it (on every fuzz input) costs little.
func writeTemplateModel(tb testing.TB, dir, src string) string {
	tb.Helper()
	toks := []string{"a"} // the template never encodes
	md, err := gguf.NewMetadata(
		gguf.KV{Key: "general.architecture", Value: gguf.NewValue("qwen3moe")},
		gguf.KV{Key: "tokenizer.ggml.model", Value: gguf.NewValue("gpt2")},
		gguf.KV{Key: "tokenizer.ggml.pre", Value: gguf.NewValue("qwen2")},
		gguf.KV{Key: "tokenizer.ggml.tokens", Value: gguf.NewArray(toks)},
		gguf.KV{Key: "tokenizer.ggml.merges", Value: gguf.NewArray([]string{})},
		gguf.KV{Key: "tokenizer.chat_template", Value: gguf.NewValue(src)},
	)
	if err != nil {
		tb.Fatal(err)
	}
	path := filepath.Join(dir, "template.gguf")
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	w, err := gguf.NewWriter(f, md, nil)
	if err == nil {
		err = w.Close()
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	return path
}

// FuzzTemplateInputs runs `moerun template`'s command in-process on fuzzed --messages and
// --tools files and --var values (one per line of vars, after a first --var v=value).
// It never panics; a file that is not a JSON array fails naming its flag and path, a --var
// without name=value fails quoting it, and otherwise the template sees exactly the values
// given: each value of --var that is JSON as that JSON, any other as its text, and the
// files' arrays as decoded (all printed back with tojson).
func FuzzTemplateInputs(f *testing.F) {
	dir := f.TempDir()
	model := writeTemplateModel(f, dir, fuzzTemplateSource)
	messages, tools := filepath.Join(dir, "messages.json"), filepath.Join(dir, "tools.json")
	f.Add([]byte(`[{"role": "user", "content": "Quick: 12*12?"}]`), []byte(``), "false", "")
	f.Add([]byte(`[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]`),
		[]byte(`[{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"b": {"type": "string"}, "a": {"type": "integer"}}}}}]`),
		`{"x": [1, 2.5, null]}`, "enable_thinking=false\nreasoning_effort=high")
	f.Add([]byte(`[{"role": "assistant", "content": null, "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]}]`), []byte(`[]`), `"quoted"`, "v=3\nmessages=[]")
	f.Add([]byte(`{"role": "user"}`), []byte(`[]`), "x", "")
	f.Add([]byte(`[]`), []byte(`{}`), "x", "")
	f.Add([]byte(`[]`), []byte(``), "not json \xff", "novalue")
	f.Add([]byte(`[]`), []byte(``), "1e400", "=empty name")
	f.Add([]byte(`[] ]`), []byte(``), "[1] x", "")
	f.Fuzz(func(t *testing.T, msgs, toolsJSON []byte, v, vars string) {
		if err := os.WriteFile(messages, msgs, 0o644); err != nil {
			t.Fatal(err)
		}
		c := templateCmd{Model: model, Messages: messages, Var: []string{"v=" + v}}
		if len(toolsJSON) > 0 {
			if err := os.WriteFile(tools, toolsJSON, 0o644); err != nil {
				t.Fatal(err)
			}
			c.Tools = tools
		}
		if vars != "" {
			c.Var = append(c.Var, strings.Split(vars, "\n")...)
		}
		var out bytes.Buffer
		err := c.Run(&env{stdout: &out, stderr: &out})

		// What the command should see, in the order it checks them.
		check := func(path, flag string, data []byte) (any, bool) {
			val, derr := tokenizer.DecodeJSON(data)
			if _, isArray := val.([]any); derr != nil || !isArray {
				if err == nil || !strings.Contains(err.Error(), flag+" "+path) {
					t.Fatalf("%s %q: error %v does not name the flag and file", flag, data, err)
				}
				return nil, false
			}
			return val, true
		}
		wantMsgs, ok := check(messages, "--messages", msgs)
		if !ok {
			return
		}
		var wantTools any
		if c.Tools != "" {
			if wantTools, ok = check(tools, "--tools", toolsJSON); !ok {
				return
			}
		}
		vals := map[string]any{}
		for _, kv := range c.Var {
			name, value, ok := strings.Cut(kv, "=")
			if !ok || name == "" {
				if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("--var %q", kv)) {
					t.Fatalf("--var %q: error %v does not quote it", kv, err)
				}
				return
			}
			parsed, jerr := tokenizer.DecodeJSON([]byte(value))
			if jerr != nil {
				parsed = string([]rune(value)) // tojson writes each invalid byte as U+FFFD
			}
			vals[name] = parsed
		}
		if err != nil {
			// The values may still make the template fail (a variable named like a filter,
			// nesting tojson refuses); the error must say where.
			if !strings.Contains(err.Error(), model) {
				t.Fatalf("render error %v does not name the model", err)
			}
			return
		}
		parts := strings.SplitN(out.String(), "\x01", 4)
		if len(parts) != 4 {
			t.Fatalf("output %q is not the template's", out.String())
		}
		if m, ok := vals["messages"]; ok {
			wantMsgs = m
		}
		if tl, ok := vals["tools"]; ok {
			wantTools = tl
		}
		for i, want := range []any{vals["v"], wantMsgs, wantTools} {
			got, err := tokenizer.DecodeJSON([]byte(parts[i]))
			if err != nil {
				t.Fatalf("part %d of the output, %q, is not JSON: %v", i, parts[i], err)
			}
			if !reflect.DeepEqual(got, want) { // no --tools: both nil (null)
				t.Fatalf("part %d of the output is %q, want %#v", i, parts[i], want)
			}
		}
	})
}
