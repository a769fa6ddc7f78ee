package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/alecthomas/kong"
	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/moe"
	"github.com/moerun/moerun/tensor"
	"github.com/moerun/moerun/tokenizer"
)

// llamaPrompt is one prompt of llama.cpp's golden outputs for a tiny model (kept by package
// moe, see moe/testdata/README.md).
type llamaPrompt struct {
	Name       string      `json:"name"`
	Tokens     []int32     `json:"token_ids"`
	Greedy     []int32     `json:"greedy"`
	StepLogits [][]float32 `json:"step_logits"`
}

func llamaGolden(t *testing.T, model, prompt string) llamaPrompt {
	t.Helper()
	f, err := os.Open("../../moe/testdata/golden/" + model + ".json.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Prompts []llamaPrompt `json:"prompts"`
	}
	if err := json.NewDecoder(zr).Decode(&g); err != nil {
		t.Fatal(err)
	}
	for _, p := range g.Prompts {
		if p.Name == prompt {
			return p
		}
	}
	t.Fatalf("no prompt %s", prompt)
	return llamaPrompt{}
}

func parseIDs(t *testing.T, s string) []int32 {
	t.Helper()
	var ids []int32
	for _, f := range strings.Fields(s) {
		id, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("not an id list: %q", s)
		}
		ids = append(ids, int32(id))
	}
	return ids
}

func joinInts(ids []int32) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.Itoa(int(id))
	}
	return strings.Join(parts, ",")
}

// The fox prompt, as text (tokenized by moerun) and as llama.cpp's token ids, continues
// greedily exactly as llama.cpp continued it, on both tiny models.
func TestRunGreedyMatchesLlama(t *testing.T) {
	const fox = "The quick brown fox jumps over the lazy dog."
	for model, path := range map[string]string{"tiny-qwen3moe": tinyQwen, "tiny-deepseek2": tinyDeepSeek} {
		want := llamaGolden(t, model, "fox")
		for _, input := range [][]string{{"-p", fox}, {"--prompt-ids", joinInts(want.Tokens)}} {
			args := append([]string{"run", "-m", path, "-n", "32", "--temp", "0", "--ignore-eos", "--print-ids", "-t", "2"}, input...)
			code, out, errOut := moerun(t, args...)
			if code != 0 {
				t.Fatalf("%v: exit %d: %s", args, code, errOut)
			}
			if got := parseIDs(t, out); !slices.Equal(got, want.Greedy) {
				t.Errorf("%s %s: %v, llama.cpp %v", model, input[0], got, want.Greedy)
			}
			if !strings.Contains(errOut, "prompt: "+strconv.Itoa(len(want.Tokens))+" tokens") || !strings.Contains(errOut, "tokens/s") {
				t.Errorf("speed report: %s", errOut)
			}
		}
	}
}

// The load modes that do not map the file read the weights into memory, say so, and
// continue the fox prompt exactly as llama.cpp did.
func TestRunReadsWeightsIntoMemory(t *testing.T) {
	want := llamaGolden(t, "tiny-deepseek2", "fox")
	for _, mode := range [][]string{{"--no-mmap"}, {"--mlock"}, {"-lm", "dio"}} {
		args := append([]string{"run", "-m", tinyDeepSeek, "-n", "32", "--temp", "0", "--ignore-eos", "--print-ids", "-t", "2", "--prompt-ids", joinInts(want.Tokens)}, mode...)
		code, out, errOut := moerun(t, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", mode, code, errOut)
		}
		if got := parseIDs(t, out); !slices.Equal(got, want.Greedy) {
			t.Errorf("%v: %v, llama.cpp %v", mode, got, want.Greedy)
		}
		if !strings.Contains(errOut, "moerun: weights read into memory (load mode ") || strings.Contains(errOut, "mapped with huge pages") {
			t.Errorf("%v: no account of the weights read into memory:\n%s", mode, errOut)
		}
	}
}

// run reports the memory its KV cache takes beside place's figure, and they agree for
// gpt-oss's sliding-window layers: llama.cpp's ring of 768 cells (the window of 128 and a
// ubatch of 512) in a context of 4096, 4.75 MiB in all, or the whole context with
// --swa-full, 8 MiB; on a simulated GPU too.
func TestRunReportsCache(t *testing.T) {
	const tinyGPTOSS = "../../testdata/models/tiny-gpt-oss.gguf"
	for _, c := range []struct {
		flags []string
		want  string
	}{
		{nil, "moerun: KV cache: CPU 4.75 MiB (place: 4.75 MiB)\n"},
		{[]string{"--swa-full"}, "moerun: KV cache: CPU 8.00 MiB (place: 8.00 MiB)\n"},
		{[]string{"--sim-gpu", "1GiB", "-ngl", "99"}, "moerun: KV cache: CUDA0 4.75 MiB (place: 4.75 MiB)\n"},
	} {
		args := append([]string{"run", "-m", tinyGPTOSS, "-c", "4096", "-n", "2", "--temp", "0", "--print-ids", "-t", "1", "--prompt-ids", "1,2,3"}, c.flags...)
		code, _, errOut := moerun(t, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", c.flags, code, errOut)
		}
		if !strings.Contains(errOut, c.want) {
			t.Errorf("%v: no %q in:\n%s", c.flags, c.want, errOut)
		}
	}
}

// Without --print-ids the generated tokens are streamed as text: the detokenized ids.
func TestRunStreamsText(t *testing.T) {
	args := []string{"run", "-m", tinyQwen, "-p", "Hello world", "-n", "12", "--temp", "0", "--ignore-eos", "-t", "1"}
	code, text, errOut := moerun(t, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	code, ids, errOut := moerun(t, append(args, "--print-ids")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	f, err := gguf.Open(tinyQwen)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	v, err := tokenizer.Load(f.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	if want := v.Decode(parseIDs(t, ids), false, false) + "\n"; text != want || len(parseIDs(t, ids)) != 12 {
		t.Errorf("text %q, detokenized ids %q", text, want)
	}
}

// --logits-out writes the logits after the prompt: llama.cpp's final logits up to the
// numerics (same argmax, max |Δ| well under the logits' spread).
func TestRunLogitsOut(t *testing.T) {
	want := llamaGolden(t, "tiny-deepseek2", "fox")
	path := filepath.Join(t.TempDir(), "logits.json")
	code, _, errOut := moerun(t, "run", "-m", tinyDeepSeek, "--prompt-ids", joinInts(want.Tokens), "-n", "1", "--logits-out", path)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got []float32
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 512 || moe.Greedy(got) != moe.Greedy(want.StepLogits[0]) {
		t.Fatalf("%d logits, argmax %d, llama.cpp %d", len(got), moe.Greedy(got), moe.Greedy(want.StepLogits[0]))
	}
	for i, w := range want.StepLogits[0] {
		if math.Abs(float64(got[i]-w)) > 0.25 {
			t.Errorf("logit %d: %g, llama.cpp %g", i, got[i], w)
		}
	}
}

// -ser is applied, and --expert-stats records it: with -ser 2,1 two of the four slots of
// every token and MoE layer are dropped.
func TestRunSERAndExpertStats(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stats.json")
	code, _, errOut := moerun(t, "run", "-m", tinyQwen, "-p", "Hello world", "-n", "4", "--temp", "0", "--ignore-eos", "-ser", "2,1", "--expert-stats", path)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	doc := readExpertStats(t, path)
	if doc.Schema != "moerun.expert-stats/v1" || len(doc.Layers) != 4 {
		t.Fatalf("stats %+v", doc)
	}
	for _, l := range doc.Layers {
		if l.Tokens == 0 || l.DroppedSlots != 2*l.Tokens {
			t.Errorf("layer %d: %d tokens, %d dropped slots", l.Layer, l.Tokens, l.DroppedSlots)
		}
	}
}

// A pasted llama.cpp command line runs; the options run does not use are reported.
func TestRunPastedCommandLine(t *testing.T) {
	code, out, errOut := moerun(t, "run", "./build/bin/llama-cli", "-m", tinyQwen, "-p", "Hello", "-n", "3", "-ngl", "99",
		"--jinja", "-t", "1", "--temp", "0", "--ignore-eos", "-c", "512", "-ctk", "q8_0", "-ctv", "q8_0", "--print-ids")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if len(parseIDs(t, out)) != 3 || !strings.Contains(errOut, "accepted but ignored: ./build/bin/llama-cli, --jinja") {
		t.Errorf("stdout %q, stderr %q", out, errOut)
	}
}

// An open-ended generation stops when the context is full and says so; a prompt that does
// not fit is bad input.
func TestRunContextFull(t *testing.T) {
	q8 := "../../testdata/quant/models/tiny-qwen3moe-q8_0.gguf"
	code, out, errOut := moerun(t, "run", "-m", q8, "--prompt-ids", "1,2,3,4,5,6", "-c", "256", "--ignore-eos", "--print-ids", "-t", "1")
	if code != 0 || !strings.Contains(errOut, "stopped: context full after 251 generated tokens") || len(parseIDs(t, out)) != 251 {
		t.Errorf("exit %d, %d ids, stderr %s", code, len(parseIDs(t, out)), errOut)
	}
	long := strings.Repeat("1,", 300) + "1"
	if code, _, errOut := moerun(t, "run", "-m", q8, "--prompt-ids", long, "-c", "256"); code != exitUsage || !strings.Contains(errOut, "context full") {
		t.Errorf("prompt longer than the context: exit %d: %s", code, errOut)
	}
}

func TestRunBadInput(t *testing.T) {
	// A dense llama layout (sparse: the architecture check comes before any weight is read).
	llama := filepath.Join(t.TempDir(), "llama.gguf")
	if code, _, errOut := moerun(t, "synth", "mixtral-8x7b:q8_0", "--layers", "1", "--n-embd", "64", "--heads", "2", "--heads-kv", "1",
		"--experts", "2", "--experts-used", "1", "--n-ff", "64", "--vocab-size", "512", "-o", llama); code != 0 {
		t.Fatalf("synth: exit %d: %s", code, errOut)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "-p", "x"}, "no model"},
		{[]string{"run", "-m", "/nonexistent.gguf", "-p", "x"}, "no such file"},
		{[]string{"run", "-m", tinyQwen}, "give the prompt once"},
		{[]string{"run", "-m", tinyQwen, "-p", "x", "--prompt-ids", "1"}, "give the prompt once"},
		{[]string{"run", "-m", tinyQwen, "--prompt-ids", "1,x"}, `"x" is not a token id`},
		{[]string{"run", "-m", tinyQwen, "--prompt-ids", "512"}, `"512" is not a token id of this model (0..511)`},
		{[]string{"run", "-m", tinyQwen, "-p", "x", "-ser", "7"}, "-ser \"7\""},
		{[]string{"run", "-m", tinyQwen, "-p", "x", "-ser", "7,-1"}, "both ≥ 0"},
		{[]string{"run", "-m", tinyQwen, "-p", "x", "-s", "-5"}, "seed"},
		{[]string{"run", "-m", tinyQwen, "-p", "x", "--top-p", "-1"}, "top-p"},
		{[]string{"run", "-m", tinyQwen, "-p", "x", "--gpu", "8GiB"}, "dry run"},
		{[]string{"run", "-m", tinyQwen, "-p", "x", "-ctk", "q9_9"}, "q9_9"},
		{[]string{"run", "-m", tinyDeepSeek, "-p", "x", "-ctk", "q8_0", "-ctv", "q8_0"}, "does not divide n_embd_head_k=80"},
		{[]string{"run", "-m", llama, "-p", "x"}, `architecture "llama" is not supported`},
	} {
		code, _, errOut := moerun(t, c.args...)
		if code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", c.args, code, errOut, c.want)
		}
	}
}

// Every llama.cpp option that a command taking whole llama.cpp command lines declares as a
// flag of its own reaches that flag from a pasted line instead of being reported as ignored
// (serve once ignored its own --chat-template-file, -sps, --reasoning-format and
// --cache-prompt that way). The flags are read from kong's model of the commands.
func TestPastedOptionsReachTheirFlags(t *testing.T) {
	var c cli
	parser, err := kong.New(&c)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, node := range parser.Model.Children {
		if llamaPassthrough[node.Name] == nil {
			continue
		}
		flags := map[string]bool{}
		for _, f := range node.Flags {
			flags[f.Name] = true
		}
		for i := range llamaServerOptions {
			o := &llamaServerOptions[i]
			for _, spelling := range o.names {
				// place's --predict (a speed prediction) only shares llama.cpp's -n spelling.
				if name := strings.TrimPrefix(spelling, "--"); name != o.key() && flags[name] && node.Name+" "+name != "place predict" {
					t.Errorf("%s's flag --%s is llama.cpp's %s under another spelling than the table's canonical --%s: pasted, it would be ignored", node.Name, name, strings.Join(o.names, "/"), o.key())
				}
			}
			if !flags[o.key()] {
				continue
			}
			for _, spelling := range append(slices.Clone(o.names), o.negs...) {
				args := []string{node.Name, spelling}
				for range o.values {
					args = append(args, "1")
				}
				for _, a := range rewriteLlamaArgs(args) {
					if strings.HasPrefix(a, ignoredFlag) {
						t.Errorf("%s %s: reported as ignored, though %s has --%s", node.Name, spelling, node.Name, o.key())
					}
				}
				checked++
			}
		}
	}
	if checked < 100 {
		t.Errorf("only %d spellings checked: the commands' flags were not found", checked)
	}
}

// A prompt's logits in one batch are bit for bit those of feeding it two tokens at a time
// (-ub 2: llama.cpp too multiplies a batch of one in another order), with the packed
// kernels of tiny-qwen3moe's Q4_0 experts and without (--no-repack, which must reach the
// runtime: where the machine has packed kernels, the logits then differ).
func TestRunNoRepack(t *testing.T) {
	ids := joinInts(llamaGolden(t, "tiny-qwen3moe", "fox").Tokens)
	logits := func(args ...string) []byte {
		t.Helper()
		path := filepath.Join(t.TempDir(), "logits.json")
		args = append([]string{"run", "-m", tinyQwen, "--prompt-ids", ids, "-n", "1", "--logits-out", path}, args...)
		if code, _, errOut := moerun(t, args...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	packed, unpacked := logits(), logits("--no-repack")
	if pairs := logits("-ub", "2"); !bytes.Equal(packed, pairs) {
		t.Error("the prompt's logits in one batch differ from two tokens at a time")
	}
	if pairs := logits("--no-repack", "-ub", "2"); !bytes.Equal(unpacked, pairs) {
		t.Error("--no-repack: the prompt's logits in one batch differ from two tokens at a time")
	}
	if tensor.PackedKernels(tensor.Q4_0) == bytes.Equal(packed, unpacked) {
		t.Errorf("packed kernels on this machine: %v; logits with --no-repack the same: %v", tensor.PackedKernels(tensor.Q4_0), bytes.Equal(packed, unpacked))
	}
}

// readExpertStats reads an --expert-stats file.
func readExpertStats(t *testing.T, path string) moe.ExpertStatsJSON {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc moe.ExpertStatsJSON
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}
