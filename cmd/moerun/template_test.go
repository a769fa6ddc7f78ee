package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTemplateGolden: `moerun template` renders the tiny models' own templates as
// llama-server's /apply-template did (which strips the BOS the tokenizer adds itself).
func TestTemplateGolden(t *testing.T) {
	for _, tc := range []struct{ model, bos string }{
		{"tiny-qwen3moe", ""},
		{"tiny-deepseek2", "<｜begin▁of▁sentence｜>"},
	} {
		render := readGoldenTokens(t, tc.model).Render
		msgs := filepath.Join(t.TempDir(), "messages.json")
		if err := os.WriteFile(msgs, render.Messages, 0o644); err != nil {
			t.Fatal(err)
		}
		code, out, errOut := moerun(t, "template", "-m", "../../testdata/models/"+tc.model+".gguf", "--messages", msgs)
		if code != 0 || out != tc.bos+render.Prompt {
			t.Errorf("%s: exit %d %s\n got %q\nwant %q", tc.model, code, errOut, out, tc.bos+render.Prompt)
		}
	}
}

// TestTemplateVarsAndTools runs the real Qwen3 template (from its vocabulary GGUF) with
// tools, --var and --no-generation-prompt, against Jinja2's render in the chat fixtures.
func TestTemplateVarsAndTools(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	qwen3 := "../../testdata/vocab/ggml-vocab-qwen3.gguf"
	msgs := write("m.json", `[{"role": "user", "content": "Quick: 12*12?"}]`)
	code, out, errOut := moerun(t, "template", "-m", qwen3, "--messages", msgs, "--var", "enable_thinking=false")
	if want := "<|im_start|>user\nQuick: 12*12?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"; code != 0 || out != want {
		t.Errorf("--var: exit %d %s\n got %q\nwant %q", code, errOut, out, want)
	}
	tools := write("t.json", `[{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"b": {"type": "string"}, "a": {"type": "integer"}}}}}]`)
	code, out, errOut = moerun(t, "template", "-m", qwen3, "--messages", msgs, "--tools", tools, "--no-generation-prompt")
	wantTools := `{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"b": {"type": "string"}, "a": {"type": "integer"}}}}}`
	if code != 0 || !strings.Contains(out, "<tools>\n"+wantTools+"\n</tools>") || strings.HasSuffix(out, "assistant\n") {
		t.Errorf("--tools: exit %d %s\n%s", code, errOut, out)
	}
}

func TestTemplateErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	good := filepath.Join(dir, "good.json")
	if err := os.WriteFile(bad, []byte(`{"role": "user"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(good, []byte(`[{"role": "user", "content": "hi"}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"template", "-m", tinyQwen, "--messages", bad},                                   // not an array
		{"template", "-m", tinyQwen, "--messages", "no-such.json"},                        // missing
		{"template", "-m", tinyQwen, "--messages", good, "--var", "novalue"},              // bad --var
		{"template", "-m", "../../testdata/quant/quant-tensors.gguf", "--messages", good}, // no vocabulary
	} {
		if code, _, errOut := moerun(t, args...); code != 2 || errOut == "" {
			t.Errorf("%v: exit %d, stderr %q; want 2 with a message", args, code, errOut)
		}
	}
}
