package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/gguf/synth"
)

func TestSynthList(t *testing.T) {
	code, out, errOut := moerun(t, "synth", "--list")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, p := range synth.Presets() {
		if !strings.Contains(out, "\n"+p.Name+" ") {
			t.Errorf("--list has no row for %s:\n%s", p.Name, out)
		}
	}
	if !strings.Contains(out, "Q4_K_M") || !strings.Contains(out, "671.03 B") {
		t.Errorf("--list lacks mix columns or DeepSeek-V3's 671.03 B parameters:\n%s", out)
	}

	code, out, errOut = moerun(t, "synth", "--list", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var list []presetListing
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	if len(list) != len(synth.Presets()) {
		t.Fatalf("%d presets listed, want %d", len(list), len(synth.Presets()))
	}
	p, _ := synth.LookupPreset("deepseek-v3")
	sizes, err := synth.MixSizes(p, synth.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i, mix := range synth.Mixes() {
		if got := list[0].FileBytes[mix.Name]; list[0].Name != "deepseek-v3" || got != sizes[i] {
			t.Errorf("%s %s: %d bytes, want %d", list[0].Name, mix.Name, got, sizes[i])
		}
	}
}

func TestSynthSparseReadsBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q30.gguf")
	code, out, errOut := moerun(t, "synth", "qwen3-30b-a3b:q4_k_m", "-o", path)
	if code != 0 || !strings.Contains(out, "qwen3-30b-a3b:q4_k_m (sparse), 579 tensors") {
		t.Fatalf("exit %d: %s%s", code, out, errOut)
	}
	rep := inspectJSON(t, path)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Tensors) != 579 || rep.Architecture != "qwen3moe" || rep.FileSize != fi.Size() {
		t.Errorf("inspect: %d tensors, architecture %q, %d bytes (file %d)", len(rep.Tensors), rep.Architecture, rep.FileSize, fi.Size())
	}
	// 18.55 GB, the size of published Qwen3-30B-A3B Q4_K_M files.
	if fi.Size() < 18.5e9 || fi.Size() > 18.6e9 {
		t.Errorf("file is %d bytes", fi.Size())
	}
}

func TestSynthRandomIsDeterministic(t *testing.T) {
	dir := t.TempDir()
	args := func(out string, seed string) []string {
		return []string{"synth", "qwen3-30b-a3b:q8_0", "--random", "--seed", seed, "--layers", "2", "--n-embd", "128",
			"--heads", "2", "--heads-kv", "1", "--head-dim", "64", "--experts", "4", "--experts-used", "2",
			"--expert-ff", "64", "--vocab-size", "320", "-o", filepath.Join(dir, out)}
	}
	for _, run := range [][]string{args("a.gguf", "7"), args("b.gguf", "7"), args("c.gguf", "8")} {
		if code, out, errOut := moerun(t, run...); code != 0 {
			t.Fatalf("exit %d: %s%s", code, out, errOut)
		}
	}
	a, _ := os.ReadFile(filepath.Join(dir, "a.gguf"))
	b, _ := os.ReadFile(filepath.Join(dir, "b.gguf"))
	c, _ := os.ReadFile(filepath.Join(dir, "c.gguf"))
	if len(a) == 0 || !bytes.Equal(a, b) || bytes.Equal(a, c) {
		t.Errorf("seed 7 twice: equal %v; seeds 7 and 8: equal %v", bytes.Equal(a, b), bytes.Equal(a, c))
	}
	if rep := inspectJSON(t, filepath.Join(dir, "a.gguf")); len(rep.Tensors) != 3+2*12 {
		t.Errorf("%d tensors", len(rep.Tensors))
	}
}

// A random model written with the built-in vocabulary (no --vocab) speaks visible text:
// every row of its embedding is a token with text (the vocabulary used to be padded with
// unused tokens, which decode to nothing, so run printed a blank line).
func TestSynthRandomSpeaks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.gguf")
	if code, out, errOut := moerun(t, "synth", "qwen3-30b-a3b:q8_0", "--random", "--layers", "1", "--n-embd", "128", "--heads", "2",
		"--heads-kv", "1", "--head-dim", "64", "--experts", "4", "--experts-used", "2", "--expert-ff", "64", "-o", path); code != 0 {
		t.Fatalf("exit %d: %s%s", code, out, errOut)
	}
	code, out, errOut := moerun(t, "run", "-m", path, "-p", "Hello", "-n", "16", "--seed", "5", "-t", "1")
	letters := 0
	for _, r := range out {
		if r >= 'a' && r <= 'z' {
			letters++
		}
	}
	if code != 0 || letters < 16 {
		t.Errorf("exit %d, %d letters in 16 tokens: %q %s", code, letters, out, errOut)
	}
}

// --expert-load skews the routing of a real run: on the same text, the experts that take
// 90% of the first layer's selections are far fewer in a gamma:0.3 model than in the
// uniform one (19 against 43 of 64 experts when written).
func TestSynthExpertLoadSkewsRouting(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "text.txt")
	if err := os.WriteFile(text, []byte(strings.Repeat("The quick brown fox jumps over the lazy dog; 0123456789, "+
		"pack my box with five dozen liquor jugs! ", 12)), 0o644); err != nil {
		t.Fatal(err)
	}
	cover := map[string]int{}
	for _, load := range []string{"uniform", "gamma:0.3"} {
		model, stats := filepath.Join(dir, load+".gguf"), filepath.Join(dir, load+".json")
		if code, out, errOut := moerun(t, "synth", "qwen3-30b-a3b:q8_0", "--random", "--expert-load", load, "--layers", "2",
			"--n-embd", "256", "--heads", "2", "--heads-kv", "1", "--head-dim", "64", "--experts", "64", "--experts-used", "4",
			"--expert-ff", "64", "-o", model); code != 0 {
			t.Fatalf("%s: exit %d: %s%s", load, code, out, errOut)
		}
		if code, out, errOut := moerun(t, "run", "-m", model, "-f", text, "-n", "1", "-t", "1", "--expert-stats", stats); code != 0 {
			t.Fatalf("%s: run: exit %d: %s%s", load, code, out, errOut)
		}
		first := readExpertStats(t, stats).Layers[0]
		counts := make([]float64, len(first.Experts))
		total := 0.0
		for i, e := range first.Experts {
			counts[i] = float64(e.Selected)
			total += counts[i]
		}
		slices.Sort(counts)
		for sum := 0.0; sum < 0.9*total; cover[load]++ {
			sum += counts[len(counts)-1-cover[load]]
		}
		t.Logf("%s: %d tokens, 90%% of layer 0's selections in %d of %d experts", load, first.Tokens, cover[load], len(counts))
	}
	if cover["gamma:0.3"] > cover["uniform"]*3/4 {
		t.Errorf("90%% of the selections in %d experts with gamma:0.3, %d uniform: the load did not skew the routing", cover["gamma:0.3"], cover["uniform"])
	}
}

func TestSynthVocabFromFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q30.gguf")
	code, out, errOut := moerun(t, "synth", "qwen3-30b-a3b", "--vocab", "../../testdata/vocab/ggml-vocab-qwen3.gguf", "-o", path)
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, out, errOut)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	eos, _ := f.Metadata.Uint("tokenizer.ggml.eos_token_id")
	tokens, _ := f.Metadata.Strings("tokenizer.ggml.tokens")
	if eos != 151645 || len(tokens) != 151936 || tokens[eos] != "<|im_end|>" {
		t.Errorf("eos %d of %d tokens", eos, len(tokens))
	}
}

func TestSynthErrors(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "x.gguf")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"synth", "-o", out}, 2, "PRESET[:MIX]"},
		{[]string{"synth", "qwen3-30b-a3b"}, 2, "-o FILE"},
		{[]string{"synth", "gpt-9", "-o", out}, 2, `unknown preset "gpt-9"`},
		{[]string{"synth", "qwen3-30b-a3b:q2_k", "-o", out}, 2, `unknown mix "q2_k"`},
		{[]string{"synth", "qwen3-30b-a3b", "--sparse", "--random", "-o", out}, 2, "--sparse"},
		{[]string{"synth", "qwen3-30b-a3b", "--experts", "4", "-o", out}, 2, "experts used 8"},
		{[]string{"synth", "qwen3-30b-a3b", "--vocab", filepath.Join(dir, "none.gguf"), "-o", out}, 2, "none.gguf"},
		{[]string{"synth", "qwen3-30b-a3b", "--vocab", "../../testdata/vocab/ggml-vocab-qwen3.gguf", "--vocab-size", "1000", "-o", out}, 2, "only 1000 rows"},
		{[]string{"synth", "qwen3-30b-a3b", "-o", filepath.Join(dir, "missing", "x.gguf")}, 2, "missing"},
		{[]string{"synth", "qwen3-30b-a3b", "--expert-load", "gamma:0.5", "-o", out}, 2, "add --random"},
		{[]string{"synth", "qwen3-30b-a3b", "--random", "--expert-load", "zipf:1", "-o", out}, 2, "uniform or gamma:SHAPE"},
		{[]string{"synth", "qwen3-30b-a3b", "--random", "--expert-load", "gamma:0", "-o", out}, 2, "from 0.05 to 100"},
		{[]string{"synth", "qwen3-30b-a3b", "--random", "--expert-load", "gamma:1", "--experts", "8", "--experts-used", "4", "-o", out}, 2, "more than a quarter"},
	} {
		code, stdout, stderr := moerun(t, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q (stdout %q); want exit %d and %q", tc.args, code, stderr, stdout, tc.code, tc.want)
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("a failed synth left %s behind", out)
	}
}

func TestProgressLine(t *testing.T) {
	got := progressLine(300<<20, 1200<<20, 100<<20)
	if want := "300.00 MiB of 1.17 GiB written (25%), 100.00 MiB/s, 9s left"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
}
