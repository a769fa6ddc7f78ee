package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const tinyDeepSeek = "../../testdata/models/tiny-deepseek2.gguf"

// goldenTokens is what testdata/golden/<model>.golden.json records of llama.cpp's
// tokenizer and chat-template outputs for a tiny model.
type goldenTokens struct {
	Prompts []struct {
		Name                   string  `json:"name"`
		Text                   string  `json:"text"`
		TokenIDs               []int32 `json:"token_ids"`
		TokenIDsNoParseSpecial []int32 `json:"token_ids_no_parse_special"`
	} `json:"prompts"`
	Render struct {
		Messages json.RawMessage `json:"messages"`
		Prompt   string          `json:"prompt"`
	} `json:"chat_template_render"`
}

func readGoldenTokens(t *testing.T, model string) goldenTokens {
	t.Helper()
	b, err := os.ReadFile("../../tokenizer/testdata/golden/" + model + ".golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var g goldenTokens
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	return g
}

func idList(ids []int32) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.Itoa(int(id))
	}
	return strings.Join(s, " ") + "\n"
}

// TestTokenizeGolden: `moerun tokenize -f FILE --no-escape --ids` prints what
// `llama-tokenize` printed for the same file, with and without --no-parse-special.
func TestTokenizeGolden(t *testing.T) {
	for _, model := range []string{"tiny-qwen3moe", "tiny-deepseek2"} {
		for _, p := range readGoldenTokens(t, model).Prompts {
			file := filepath.Join(t.TempDir(), "text.txt")
			if err := os.WriteFile(file, []byte(p.Text), 0o644); err != nil {
				t.Fatal(err)
			}
			gguf := "../../testdata/models/" + model + ".gguf"
			for _, tc := range []struct {
				flags []string
				want  []int32
			}{{nil, p.TokenIDs}, {[]string{"--no-parse-special"}, p.TokenIDsNoParseSpecial}} {
				args := append([]string{"tokenize", "-m", gguf, "-f", file, "--no-escape", "--ids"}, tc.flags...)
				code, out, errOut := moerun(t, args...)
				if code != 0 || out != idList(tc.want) {
					t.Errorf("%s %s %v: exit %d %s\n got %s\nwant %s", model, p.Name, tc.flags, code, errOut, out, idList(tc.want))
				}
			}
		}
	}
}

func TestTokenizePieces(t *testing.T) {
	code, out, errOut := moerun(t, "tokenize", "-m", tinyDeepSeek, "-p", `<｜User｜>Hi\n`, "--show-count")
	want := "   496 -> '<｜begin▁of▁sentence｜>'\n   498 -> '<｜User｜>'\n    39 -> 'H'\n    72 -> 'i'\n   198 -> '\n'\nTotal number of tokens: 5\n"
	if code != 0 || out != want {
		t.Errorf("exit %d %s\n got %q\nwant %q", code, errOut, out, want)
	}
	code, out, _ = moerun(t, "tokenize", "-m", tinyDeepSeek, "-p", "Hello world", "--ids", "--no-bos")
	if code != 0 || out != "360 320\n" {
		t.Errorf("--no-bos: exit %d, %q", code, out)
	}
	code, out, _ = moerun(t, "tokenize", "-m", tinyDeepSeek, "-p", "Hello world", "--ids", "--brackets")
	if code != 0 || out != "[496, 360, 320]\n" {
		t.Errorf("--brackets: exit %d, %q", code, out)
	}
}

func TestTokenizeErrors(t *testing.T) {
	for _, args := range [][]string{
		{"tokenize", "-m", tinyQwen},                                             // no text
		{"tokenize", "-m", tinyQwen, "-p", "x", "-f", "y"},                       // both
		{"tokenize", "-m", "no-such.gguf", "-p", "x"},                            // missing model
		{"tokenize", "-m", tinyQwen, "-f", "no-such.txt"},                        // missing text
		{"tokenize", "-m", "../../testdata/quant/quant-tensors.gguf", "-p", "x"}, // no vocabulary
	} {
		if code, _, errOut := moerun(t, args...); code != 2 || errOut == "" {
			t.Errorf("%v: exit %d, stderr %q; want 2 with a message", args, code, errOut)
		}
	}
}

func TestProcessEscapes(t *testing.T) {
	if got := processEscapes(`a\nb\t\x41\\\q\`); got != "a\nb\tA\\\\q\\" {
		t.Errorf("got %q", got)
	}
}
