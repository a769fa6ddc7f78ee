package tokenizer

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/moerun/moerun/gguf"
)

const vocabDir = "../testdata/vocab"

// loaded caches vocabularies across tests: the large ones take a while to read.
var loaded sync.Map

func loadVocab(t testing.TB, path string) *Vocab {
	t.Helper()
	if v, ok := loaded.Load(path); ok {
		return v.(*Vocab)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	v, err := Load(f.Metadata)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	loaded.Store(path, v)
	return v
}

// vocabCases reads llama.cpp's tokenizer test cases: inputs separated by
// "\n__ggml_vocab_test__\n" and one line of expected ids per input.
func vocabCases(t *testing.T, name string) (inputs []string, want [][]int32) {
	t.Helper()
	inp, err := os.ReadFile(filepath.Join("testdata/vocab", name+".inp"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.ReadFile(filepath.Join("testdata/vocab", name+".out"))
	if err != nil {
		t.Fatal(err)
	}
	inputs = strings.Split(string(inp), "\n__ggml_vocab_test__\n")
	inputs = inputs[:len(inputs)-1] // the file ends with a separator
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != len(inputs) {
		t.Fatalf("%s: %d inputs, %d outputs", name, len(inputs), len(lines))
	}
	for _, l := range lines {
		var ids []int32
		for _, f := range strings.Fields(l) {
			n, err := strconv.ParseInt(f, 10, 32)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, int32(n))
		}
		want = append(want, ids)
	}
	return inputs, want
}

// TestVocabCases runs llama.cpp's tokenizer test suite (tests/test-tokenizer-0): no BOS,
// special tokens not parsed. The qwen2 cases run on the real Qwen3 vocabulary.
func TestVocabCases(t *testing.T) {
	for _, tc := range []struct{ gguf, cases string }{
		{"ggml-vocab-gpt-2.gguf", "ggml-vocab-gpt-2.gguf"},
		{"ggml-vocab-deepseek-llm.gguf", "ggml-vocab-deepseek-llm.gguf"},
		{"ggml-vocab-deepseek-coder.gguf", "ggml-vocab-deepseek-coder.gguf"},
		{"ggml-vocab-qwen3.gguf", "ggml-vocab-qwen2.gguf"},
		// llama.cpp's qwen2 and qwen35 inputs plus a few CJK ones, tokenized by
		// llama-tokenize 3f545bec (--no-bos --no-parse-special) on the DeepSeek-V3 vocabulary.
		{"ggml-vocab-deepseek-v3.gguf", "ggml-vocab-deepseek-v3.gguf"},
	} {
		t.Run(tc.cases, func(t *testing.T) {
			v := loadVocab(t, filepath.Join(vocabDir, tc.gguf))
			inputs, want := vocabCases(t, tc.cases)
			pass := 0
			for i, in := range inputs {
				got := v.Encode(in, false, false)
				if slices.Equal(got, want[i]) {
					pass++
				} else {
					t.Errorf("case %d %q:\n got %v\nwant %v", i, in, got, want[i])
				}
			}
			t.Logf("%s: %d/%d cases pass", tc.cases, pass, len(inputs))
		})
	}
}
