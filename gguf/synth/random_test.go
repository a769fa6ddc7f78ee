package synth

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/tensor"
)

// tinyOpts shrink Qwen3-30B-A3B to a model of a few MB.
var tinyOpts = Options{Layers: 2, Embd: 256, Heads: 4, HeadsKV: 2, HeadDim: 64, Experts: 16, ExpertsUsed: 4,
	ExpertFF: 256, FF: 512, Vocab: 512}

func writeRandom(t *testing.T, m *Model, opts RandomOptions, poolSize int) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := m.writeRandom(&buf, opts, poolSize); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestRandomIsDeterministic writes each model with and without pools (the tiny models'
// classes are far below poolBlocks; pools of 4 blocks pool all of their quantized tensors).
func TestRandomIsDeterministic(t *testing.T) {
	for _, spec := range []string{"qwen3-30b-a3b:q4_k_m", "deepseek-v3:q8_0"} {
		opts := tinyOpts
		if strings.HasPrefix(spec, "deepseek") {
			opts = Options{Layers: 2, LeadingDense: 1, Embd: 256, Heads: 4, HeadDim: 48, VHeadDim: 32, RopeDim: 16,
				QLoraRank: 64, KVLoraRank: 64, Experts: 16, ExpertsUsed: 4, ExpertFF: 64, FF: 256, ExpertGroups: 4,
				ExpertGroupsUsed: 2, Vocab: 512}
		}
		m, err := Build(spec, opts)
		if err != nil {
			t.Fatal(err)
		}
		l, err := m.Layout()
		if err != nil {
			t.Fatal(err)
		}
		for _, pool := range []int{poolBlocks, 4} {
			a := writeRandom(t, m, RandomOptions{Seed: 42, Workers: 1}, pool)
			b := writeRandom(t, m, RandomOptions{Seed: 42, Workers: 3}, pool)
			c := writeRandom(t, m, RandomOptions{Seed: 43}, pool)
			if !bytes.Equal(a, b) {
				t.Errorf("%s, pools of %d: the same seed gave different bytes with 1 and 3 workers", spec, pool)
			}
			if bytes.Equal(a, c) {
				t.Errorf("%s, pools of %d: seeds 42 and 43 gave the same bytes", spec, pool)
			}
			if int64(len(a)) != l.FileSize {
				t.Errorf("%s, pools of %d: wrote %d bytes, layout says %d", spec, pool, len(a), l.FileSize)
			}
		}
	}
}

// TestRandomPools checks what pooling changes: a tensor of a class larger than the pool
// holds only blocks of its class's pool (a few distinct ones, each repeated), while float
// tensors and classes that fit in a pool keep the bytes they have without pools.
func TestRandomPools(t *testing.T) {
	m, err := Build("qwen3-30b-a3b:q4_k_m", tinyOpts)
	if err != nil {
		t.Fatal(err)
	}
	const pool = 6
	dir := t.TempDir()
	open := func(name string, poolSize int) *gguf.File {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, writeRandom(t, m, RandomOptions{Seed: 5}, poolSize), 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := gguf.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	drawn, pooled := open("drawn.gguf", poolBlocks), open("pooled.gguf", pool)
	rules := make([]initRule, len(m.Tensors))
	for i, ts := range m.Tensors {
		rules[i] = initFor(&m.Preset.Config, ts)
	}
	need := map[poolKey]int64{}
	for i, ts := range m.Tensors {
		if key, ok := poolKeyOf(ts, rules[i]); ok {
			n, _ := ts.Type.Bytes(ts.Shape)
			need[key] += n / ts.Type.BlockBytes()
		}
	}
	blocks := map[poolKey]map[string]bool{} // the distinct blocks each pooled class's tensors hold
	for i, ts := range m.Tensors {
		a, _ := drawn.Tensor(ts.Name)
		b, _ := pooled.Tensor(ts.Name)
		da, err := drawn.TensorData(a)
		if err != nil {
			t.Fatal(err)
		}
		db, err := pooled.TensorData(b)
		if err != nil {
			t.Fatal(err)
		}
		key, ok := poolKeyOf(ts, rules[i])
		if !ok || need[key] <= pool {
			if !bytes.Equal(da, db) {
				t.Errorf("%s (%s) is not pooled but changed with pools", ts.Name, ts.Type)
			}
			continue
		}
		if bytes.Equal(da, db) {
			t.Errorf("%s (%s) is pooled but kept its drawn bytes", ts.Name, ts.Type)
		}
		if blocks[key] == nil {
			blocks[key] = map[string]bool{}
		}
		size := int(ts.Type.BlockBytes())
		for at := 0; at < len(db); at += size {
			blocks[key][string(db[at:at+size])] = true
		}
	}
	if len(blocks) == 0 {
		t.Fatal("no tensor was pooled")
	}
	for key, seen := range blocks {
		// At most the pool's blocks, and from 50 or more picks at random, all of them but
		// for a chance of 6·(5/6)^50 ≈ 1e-3.
		if len(seen) > pool || need[key] >= 50 && len(seen) < pool {
			t.Errorf("class %+v: %d distinct blocks in %d, want the pool's %d", key, len(seen), need[key], pool)
		}
	}
}

// stats dequantizes a tensor of a file and returns its mean and standard deviation.
func stats(t *testing.T, f *gguf.File, name string) (mean, std, n float64) {
	t.Helper()
	ti, ok := f.Tensor(name)
	if !ok {
		t.Fatalf("no tensor %s", name)
	}
	data, err := f.TensorData(ti)
	if err != nil {
		t.Fatal(err)
	}
	vals := make([]float32, ti.Elements())
	if err := tensor.Dequantize(ti.Type, data, vals); err != nil {
		t.Fatal(err)
	}
	var sum, sq float64
	for _, v := range vals {
		sum += float64(v)
		sq += float64(v) * float64(v)
	}
	n = float64(len(vals))
	mean = sum / n
	return mean, math.Sqrt(sq/n - mean*mean), n
}

// TestRandomScale checks the values' scale with every value drawn, and with pools of 256
// blocks (8,192 values, the sample the statistics of a pooled tensor rest on).
func TestRandomScale(t *testing.T) {
	m, err := Build("qwen3-30b-a3b:q8_0", tinyOpts)
	if err != nil {
		t.Fatal(err)
	}
	for _, pool := range []int{poolBlocks, 256} {
		path := filepath.Join(t.TempDir(), "tiny.gguf")
		if err := os.WriteFile(path, writeRandom(t, m, RandomOptions{Seed: 1}, pool), 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := gguf.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if len(f.Tensors) != len(m.Tensors) {
			t.Fatalf("%d tensors read back, %d written", len(f.Tensors), len(m.Tensors))
		}
		// Expected scales: norms 1 ± 0.1; weights 1/√fan_in with fan_in = ne0 (256 → 0.0625,
		// 256 for the experts' down projection too); router 2/√256 = 0.125; output 3/√256;
		// embeddings 1. Tolerances are four standard errors of the sample statistics plus 3%
		// for Q8_0 rounding.
		for _, tc := range []struct {
			name      string
			mean, std float64
		}{
			{"blk.0.attn_norm.weight", 1, 0.1},
			{"blk.1.attn_q_norm.weight", 1, 0.1},
			{"blk.0.attn_q.weight", 0, 1 / 16.0},
			{"blk.1.ffn_down_exps.weight", 0, 1 / 16.0},
			{"blk.0.ffn_gate_inp.weight", 0, 2 / 16.0},
			{"output.weight", 0, 3 / 16.0},
			{"token_embd.weight", 0, 1},
		} {
			mean, std, n := stats(t, f, tc.name)
			ti, _ := f.Tensor(tc.name)
			if ti.Type.BlockSize() > 1 {
				n = min(n, float64(pool)*float64(ti.Type.BlockSize()))
			}
			if math.Abs(mean-tc.mean) > 4*tc.std/math.Sqrt(n) || math.Abs(std-tc.std) > (4/math.Sqrt(2*n)+0.03)*tc.std {
				t.Errorf("pools of %d: %s: mean %.4f std %.4f, want %.4f and %.4f", pool, tc.name, mean, std, tc.mean, tc.std)
			}
		}
	}
}

func TestRandomNeedsQuantizers(t *testing.T) {
	md, err := gguf.NewMetadata(gguf.KV{Key: "general.architecture", Value: gguf.NewValue("qwen3moe")})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := LookupPreset("qwen3-30b-a3b")
	m := &Model{Preset: p, Metadata: md, Tensors: []gguf.TensorSpec{
		{Name: "a.weight", Type: tensor.F32, Shape: []int64{256}},
		{Name: "b.weight", Type: tensor.IQ2_XXS, Shape: []int64{256, 2}},
	}}
	var buf bytes.Buffer
	err = m.WriteRandom(&buf, RandomOptions{})
	if err == nil || !strings.Contains(err.Error(), "iq2_xxs") || !strings.Contains(err.Error(), "b.weight") {
		t.Errorf("error %v, want one naming iq2_xxs and b.weight", err)
	}
	if buf.Len() != 0 {
		t.Errorf("%d bytes written before the error", buf.Len())
	}
}

func TestSparseFilesOpen(t *testing.T) {
	dir := t.TempDir()
	for _, p := range Presets() {
		mix, _ := LookupMix(p.DefaultMix())
		m, err := BuildPreset(p, mix, Options{})
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, p.Name+".gguf")
		l, err := m.WriteSparse(path)
		if err != nil {
			t.Fatal(err)
		}
		f, err := gguf.Open(path)
		if err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		if f.Size() != l.FileSize || len(f.Tensors) != len(m.Tensors) || f.Metadata.Arch() != p.Arch {
			t.Errorf("%s: read back %d bytes, %d tensors, arch %q", p.Name, f.Size(), len(f.Tensors), f.Metadata.Arch())
		}
		for i, ti := range f.Tensors {
			if ti.Name != m.Tensors[i].Name || ti.Type != m.Tensors[i].Type || ti.FileOffset != l.Tensors[i].FileOffset {
				t.Errorf("%s: tensor %d read back as %s %s at %d", p.Name, i, ti.Name, ti.Type, ti.FileOffset)
				break
			}
		}
		f.Close()
		os.Remove(path)
	}
}
