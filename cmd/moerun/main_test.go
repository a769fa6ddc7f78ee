package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/tensor"
)

const tinyQwen = "../../testdata/models/tiny-qwen3moe.gguf"

// moerun runs the CLI in-process and returns its exit code and output.
func moerun(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// decodedReport reads inspect's JSON back; metadata becomes plain maps.
type decodedReport struct {
	inspectReport
	Metadata      map[string]any    `json:"metadata"`
	MetadataTypes map[string]string `json:"metadata_types"`
}

func inspectJSON(t *testing.T, args ...string) decodedReport {
	t.Helper()
	code, out, errOut := moerun(t, append([]string{"inspect", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep decodedReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	return rep
}

func TestInspectJSON(t *testing.T) {
	rep := inspectJSON(t, tinyQwen)
	if rep.Schema != "moerun.inspect/v1" || rep.Version != 3 || rep.Alignment != 32 || rep.DataOffset != 15520 {
		t.Errorf("header fields: %+v", rep)
	}
	if len(rep.Tensors) != 51 || rep.Totals.Tensors != 51 {
		t.Fatalf("%d tensors", len(rep.Tensors))
	}
	first := rep.Tensors[0]
	if first.Name != "token_embd.weight" || first.Type != "f16" || first.Bytes != 262144 || first.Layer != nil ||
		len(first.Shape) != 2 || first.Shape[0] != 256 || first.Shape[1] != 512 || first.Class != "embedding" {
		t.Errorf("first tensor: %+v", first)
	}
	exps := rep.Tensors[10]
	if exps.Name != "blk.0.ffn_gate_exps.weight" || exps.Type != "q4_0" || exps.Layer == nil || *exps.Layer != 0 || exps.Class != "routed_expert" {
		t.Errorf("expert tensor: %+v", exps)
	}
	// Totals by class and by type each account for every tensor and byte.
	for _, groups := range [][]inspectGroupSum{rep.ByClass, rep.ByType} {
		var n int
		var b int64
		for _, g := range groups {
			n += g.Tensors
			b += g.Bytes
		}
		if n != 51 || b != rep.Totals.Bytes {
			t.Errorf("groups sum to %d tensors, %d bytes; totals %d, %d", n, b, rep.Totals.Tensors, rep.Totals.Bytes)
		}
	}
	for _, g := range rep.ByClass {
		if g.Name == "routed_expert" && (g.Tensors != 12 || g.Bytes != 12*294912) {
			t.Errorf("routed experts: %+v", g)
		}
	}
	md := rep.Metadata
	if md["general.architecture"] != "qwen3moe" || md["qwen3moe.block_count"] != 4.0 || md["qwen3moe.attention.layer_norm_rms_epsilon"] != 1e-6 {
		t.Errorf("metadata: %v", md)
	}
	tokens, ok := md["tokenizer.ggml.tokens"].(map[string]any)
	if !ok || tokens["array"] != "string" || tokens["length"] != 512.0 || len(tokens["head"].([]any)) != arraySummaryItems {
		t.Errorf("long array not summarised: %v", md["tokenizer.ggml.tokens"])
	}
}

func TestInspectJSONFull(t *testing.T) {
	_, out, _ := moerun(t, "inspect", "--json", "--full", tinyQwen)
	var doc struct {
		Metadata      map[string]any    `json:"metadata"`
		MetadataTypes map[string]string `json:"metadata_types"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	tokens, ok := doc.Metadata["tokenizer.ggml.tokens"].([]any)
	if !ok || len(tokens) != 512 || tokens[0] != "!" {
		t.Errorf("--full tokens: %T %d", doc.Metadata["tokenizer.ggml.tokens"], len(tokens))
	}
	if doc.MetadataTypes["tokenizer.ggml.token_type"] != "array[int32]" || doc.MetadataTypes["qwen3moe.rope.freq_base"] != "float32" {
		t.Errorf("types: %v", doc.MetadataTypes)
	}
}

func TestInspectText(t *testing.T) {
	code, out, _ := moerun(t, "inspect", tinyQwen)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{
		"GGUF v3, alignment 32, data section at byte 15520",
		"tiny-qwen3moe (architecture qwen3moe)",
		"51, 7.36 M parameters",
		"METADATA (29 keys)",
		`tokenizer.ggml.tokens`, `… (512 total)]`,
		"blk.3.ffn_down_exps.weight", "[128, 256, 16]", "routed_expert",
		"BY TYPE", "q4_0", "BY CLASS",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	_, full, _ := moerun(t, "inspect", "--full", tinyQwen)
	if strings.Contains(full, "(512 total)") || !strings.Contains(full, `"<|im_end|>"`) {
		t.Error("--full still summarises arrays")
	}
}

func TestInspectFilterUsesOverrideTensorRegex(t *testing.T) {
	// [[:digit:]] is valid in llama.cpp's std::regex patterns; the search is unanchored.
	rep := inspectJSON(t, "--filter", `blk\.[[:digit:]]+\.ffn_(up|down)_exps`, tinyQwen)
	if len(rep.Tensors) != 8 || rep.Filter == nil {
		t.Fatalf("%d tensors matched", len(rep.Tensors))
	}
	for _, tt := range rep.Tensors {
		if !strings.Contains(tt.Name, "_exps") || strings.Contains(tt.Name, "gate") {
			t.Errorf("%s matched", tt.Name)
		}
	}
	if rep.Totals.Bytes != 8*294912 {
		t.Errorf("totals cover unmatched tensors: %d", rep.Totals.Bytes)
	}
	_, out, _ := moerun(t, "inspect", "--filter", "exps", tinyQwen)
	if !strings.Contains(out, `TENSORS (12 of 51 match "exps")`) {
		t.Error("text output does not say how many tensors matched")
	}
}

func TestExitCodes(t *testing.T) {
	dir := t.TempDir()
	corrupt := filepath.Join(dir, "corrupt.gguf")
	orig, _ := os.ReadFile(tinyQwen)
	os.WriteFile(corrupt, orig[:20000], 0o644)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"inspect"}, exitUsage, "expected \"<model>\""},
		{[]string{"inspect", filepath.Join(dir, "missing.gguf")}, exitUsage, "no such file"},
		{[]string{"inspect", corrupt}, exitUsage, "extends past the end of the file"},
		{[]string{"inspect", "--filter", "(", tinyQwen}, exitUsage, "--filter"},
		{[]string{"inspect", "--bogus", tinyQwen}, exitUsage, "unknown flag --bogus"},
		{[]string{"frobnicate"}, exitUsage, "unexpected argument frobnicate"},
		{[]string{"--version"}, exitOK, ""},
		{[]string{"--help"}, exitOK, ""},
	} {
		code, _, errOut := moerun(t, c.args...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("moerun %v: exit %d, stderr %q; want %d and %q", c.args, code, errOut, c.code, c.want)
		}
	}
}

func TestInspectNonFiniteAndSplit(t *testing.T) {
	dir := t.TempDir()
	md, _ := gguf.NewMetadata(
		gguf.KV{Key: "general.architecture", Value: gguf.NewValue("llama")},
		gguf.KV{Key: "test.nan", Value: gguf.NewValue(float32(math.NaN()))},
		gguf.KV{Key: "test.inf", Value: gguf.NewArray([]float64{math.Inf(-1), 1.5})},
		gguf.KV{Key: "split.no", Value: gguf.NewValue(uint16(0))},
		gguf.KV{Key: "split.count", Value: gguf.NewValue(uint16(2))},
		gguf.KV{Key: "split.tensors.count", Value: gguf.NewValue(int32(2))},
	)
	second, _ := gguf.NewMetadata(
		gguf.KV{Key: "split.no", Value: gguf.NewValue(uint16(1))},
		gguf.KV{Key: "split.count", Value: gguf.NewValue(uint16(2))},
		gguf.KV{Key: "split.tensors.count", Value: gguf.NewValue(int32(2))},
	)
	for i, part := range []struct {
		md   gguf.Metadata
		name string
	}{{md, "token_embd.weight"}, {second, "output.weight"}} {
		p := filepath.Join(dir, fmt.Sprintf("m-%05d-of-00002.gguf", i+1))
		if _, err := gguf.WriteSparse(p, part.md, []gguf.TensorSpec{{Name: part.name, Type: tensor.F32, Shape: []int64{8, 2}}}); err != nil {
			t.Fatal(err)
		}
	}
	rep := inspectJSON(t, filepath.Join(dir, "m-00002-of-00002.gguf"))
	if len(rep.Parts) != 2 || len(rep.Tensors) != 2 || rep.Tensors[1].Split != 1 {
		t.Errorf("split model: %d parts, %d tensors", len(rep.Parts), len(rep.Tensors))
	}
	if rep.Metadata["test.nan"] != "NaN" || !cmp.Equal(rep.Metadata["test.inf"], []any{"-Inf", 1.5}) {
		t.Errorf("non-finite floats: %v %v", rep.Metadata["test.nan"], rep.Metadata["test.inf"])
	}
	_, out, _ := moerun(t, "inspect", filepath.Join(dir, "m-00001-of-00002.gguf"))
	if !strings.Contains(out, "2 split files") || !strings.Contains(out, "2:0") {
		t.Errorf("text output for a split model:\n%s", out)
	}
}

// TestKernelLevelEnv runs this test binary again with MOERUN_ISA set (the level is chosen
// when the process starts): a level's name caps the kernels --version reports, and a value
// that names no level is refused as bad usage before any command runs.
func TestKernelLevelEnv(t *testing.T) {
	if args := os.Getenv("MOERUN_TEST_RUN_MAIN"); args != "" {
		os.Exit(run(strings.Fields(args), os.Stdout, os.Stderr))
	}
	main := func(isa string, args ...string) (string, int) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKernelLevelEnv$")
		cmd.Env = append(os.Environ(), "MOERUN_ISA="+isa, "MOERUN_TEST_RUN_MAIN="+strings.Join(args, " "))
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatal(err)
		}
		return string(out), cmd.ProcessState.ExitCode()
	}
	out, code := main("generic", "--version")
	if code != exitOK || !strings.Contains(out, "CPU kernels generic") {
		t.Errorf("MOERUN_ISA=generic --version: exit %d, %q", code, out)
	}
	out, code = main("avx3", "place", "--preset", "qwen3-30b-a3b:q4_k_m", "--gpu", "8GiB")
	if code != exitUsage || !strings.Contains(out, `MOERUN_ISA: unknown kernel level "avx3": want one of generic, avx2, avx512`) {
		t.Errorf("MOERUN_ISA=avx3: exit %d, %q", code, out)
	}
}
