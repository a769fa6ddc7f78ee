package moe

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"testing"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/backend/cpu"
	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/placement"
	"github.com/moerun/moerun/tensor"
)

// Fixture paths: the tiny models llama.cpp's golden outputs were made from.
const (
	qwenModel     = "../testdata/models/tiny-qwen3moe.gguf"
	deepseekModel = "../testdata/models/tiny-deepseek2.gguf"
)

// quantModel is a Q4_K/Q6_K/Q8_0 variant of a smaller tiny qwen3moe.
func quantModel(q string) string { return "../testdata/quant/models/tiny-qwen3moe-" + q + ".gguf" }

// archModel is the tiny fixture of one more architecture (../shared/testdata/arch).
func archModel(arch string) string { return "../testdata/models/tiny-" + arch + ".gguf" }

// synthModel is a tiny random model moerun synth wrote (testdata/synth).
func synthModel(arch string) string {
	if _, ok := generatedModels[arch]; ok {
		path, err := generatedModel(arch)
		if err != nil {
			panic(fmt.Sprintf("generating the %s test model: %v", arch, err))
		}
		return path
	}
	return "testdata/synth/" + arch + ".gguf"
}

// golden is llama.cpp's output for a model (testdata/golden/*.json.gz, trimmed from
// ../shared/testdata; see testdata/README.md).
type golden struct {
	Model   string         `json:"model"`
	Prompts []goldenPrompt `json:"prompts"`
}

type goldenPrompt struct {
	Name   string  `json:"name"`
	Tokens []int32 `json:"token_ids"`
	Greedy []int32 `json:"greedy"`
	// StepLogits[k] are the logits before greedy token k: k = 0 after the prompt, k ≥ 1
	// after feeding greedy token k-1 as a single-token decode.
	StepLogits [][]float32 `json:"step_logits"`
	// AllPositions[i] are the logits at prompt position i, the prompt evaluated in one
	// batch (kept for some prompts only).
	AllPositions [][]float32 `json:"all_position_logits"`
}

func loadGolden(t testing.TB, name string) *golden {
	t.Helper()
	var g golden
	readGoldenFile(t, name, &g)
	return &g
}

// readGoldenFile decodes testdata/golden/<name>.json.gz into v.
func readGoldenFile(t testing.TB, name string, v any) {
	t.Helper()
	f, err := os.Open("testdata/golden/" + name + ".json.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.NewDecoder(zr).Decode(v); err != nil {
		t.Fatal(err)
	}
}

// testModel is a model loaded on the CPU backend as moerun run loads it.
type testModel struct {
	*Model
	file *gguf.File
	pool *tensor.Pool
}

// openHost opens a model file and a CPU backend on a pool of threads workers, all closed
// when the test ends.
func openHost(t testing.TB, path string, threads int) (*gguf.File, *tensor.Pool, *cpu.Backend) {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	pool := tensor.NewPool(threads)
	cpuBackend := cpu.New(cpu.Options{Pool: pool})
	t.Cleanup(func() {
		cpuBackend.Close()
		pool.Close()
		f.Close()
	})
	return f, pool, cpuBackend
}

// openModel loads a model with every tensor on one CPU backend (threads workers).
func openModel(t testing.TB, path string, threads int) *testModel {
	t.Helper()
	f, pool, cpuBackend := openHost(t, path, threads)
	plan := placeModel(t, f, placement.DefaultRules(), []backend.Device{cpuBackend.Device()})
	m, err := Load(f, plan, []backend.Backend{cpuBackend})
	if err != nil {
		t.Fatal(err)
	}
	return &testModel{Model: m, file: f, pool: pool}
}

// dropTensor is a modelEdit's tensors function that leaves out the tensor name.
func dropTensor(name string) func(*testing.T, *gguf.File, []gguf.TensorSpec, map[string][]byte) []gguf.TensorSpec {
	return func(_ *testing.T, _ *gguf.File, specs []gguf.TensorSpec, _ map[string][]byte) []gguf.TensorSpec {
		return slices.DeleteFunc(specs, func(s gguf.TensorSpec) bool { return s.Name == name })
	}
}

// configError is the error reading the configuration of the model at path gives (an
// edited copy, in tests of bad metadata).
func configError(t *testing.T, path string) error {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, _, err = readConfig(placement.Model{Name: "bad", Metadata: f.Metadata, Tensors: f.Tensors})
	return err
}

func placeModel(t testing.TB, f *gguf.File, rules placement.Rules, devs []backend.Device) *placement.Plan {
	t.Helper()
	rules.Parallel = 1
	plan, err := placement.Place(placement.Model{Name: "test", Metadata: f.Metadata, Tensors: f.Tensors}, rules, devs)
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

// context makes a context of o, by default of 1024 positions: more than gpt-oss's
// sliding-window rings hold (768 cells with the default ubatch of 512), so that its tests
// run on rings.
func (m *testModel) context(t testing.TB, o ContextOptions) *Context {
	t.Helper()
	if o.Size == 0 {
		o.Size = 1024
	}
	c, err := m.NewContext(o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// agreement compares two rows of logits as the testdata README's acceptance bar does.
type agreement struct {
	top1    bool    // same argmax
	nmse    float64 // Σ(got-want)² / Σwant²
	kl      float64 // KL(softmax(want) ‖ softmax(got))
	maxDiff float64 // max |got-want|
	gap     float64 // want's top-2 gap: how near a tie llama.cpp's own choice was
}

func compareLogits(got, want []float32) agreement {
	var a agreement
	var num, den float64
	for i := range want {
		d := float64(got[i]) - float64(want[i])
		num += d * d
		den += float64(want[i]) * float64(want[i])
		a.maxDiff = max(a.maxDiff, math.Abs(d))
	}
	a.nmse = num / den
	a.top1 = Greedy(got) == Greedy(want)
	p, q := logSoftmax(want), logSoftmax(got)
	for i := range p {
		a.kl += math.Exp(p[i]) * (p[i] - q[i])
	}
	best := Greedy(want)
	second := math.Inf(-1)
	for i, v := range want {
		if int32(i) != best {
			second = max(second, float64(v))
		}
	}
	a.gap = float64(want[best]) - second
	return a
}

func logSoftmax(x []float32) []float64 {
	m := math.Inf(-1)
	for _, v := range x {
		m = max(m, float64(v))
	}
	var sum float64
	for _, v := range x {
		sum += math.Exp(float64(v) - m)
	}
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v) - m - math.Log(sum)
	}
	return out
}

// modelEdit changes a model's metadata and tensors before rewriteModel writes them.
type modelEdit struct {
	set    map[string]gguf.Value // metadata keys to set ("{arch}." expanded)
	delete []string              // metadata keys to remove
	// tensors may drop, add or replace tensors (name → data); nil keeps them.
	tensors func(t *testing.T, f *gguf.File, specs []gguf.TensorSpec, data map[string][]byte) []gguf.TensorSpec
}

// rewriteModel writes a copy of a fixture with edits into a temporary file and returns
// its path.
func rewriteModel(t *testing.T, src string, e modelEdit) string {
	t.Helper()
	f, err := gguf.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	md := f.Metadata
	drop := map[string]bool{}
	for _, k := range e.delete {
		drop[md.Key(k)] = true
	}
	var kvs []gguf.KV
	for _, kv := range md.All() {
		if !drop[kv.Key] && !replacedArch(md, e.set, kv.Key) {
			kvs = append(kvs, kv)
		}
	}
	for k, v := range e.set {
		kvs = append(kvs, gguf.KV{Key: md.Key(k), Value: v})
	}
	newMD, err := gguf.NewMetadata(kvs...)
	if err != nil {
		t.Fatal(err)
	}
	var specs []gguf.TensorSpec
	data := map[string][]byte{}
	for i := range f.Tensors {
		ti := &f.Tensors[i]
		specs = append(specs, gguf.TensorSpec{Name: ti.Name, Type: ti.Type, Shape: ti.Shape})
		b, err := f.TensorData(ti)
		if err != nil {
			t.Fatal(err)
		}
		data[ti.Name] = b
	}
	if e.tensors != nil {
		specs = e.tensors(t, f, specs, data)
	}
	path := t.TempDir() + "/edited.gguf"
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := gguf.NewWriter(out, newMD, specs)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		if err := w.WriteTensor(s.Name, bytes.NewReader(data[s.Name])); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func replacedArch(md gguf.Metadata, set map[string]gguf.Value, key string) bool {
	for k := range set {
		if md.Key(k) == key {
			return true
		}
	}
	return false
}
