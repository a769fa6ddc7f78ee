package placement

import (
	"testing"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/gguf/synth"
	"github.com/moerun/moerun/tensor"
)

// devicesFor is one GPU of gib GiB and a host with 64 GiB.
func devicesFor(gib int64) []backend.Device {
	return []backend.Device{backend.GPU(0, gib<<30), backend.CPU(64 << 30)}
}

func place(t *testing.T, m Model, r Rules, devs []backend.Device) *Plan {
	t.Helper()
	plan, err := Place(m, r, devs)
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

func kvBytes(plan *Plan) map[string]int64 {
	out := map[string]int64{}
	for _, l := range plan.Layers {
		if l.KVDevice != "" {
			out[l.Label()] = l.KVBytes
		}
	}
	return out
}

// gpt-oss alternates sliding-window and full-attention layers, even layers sliding. The
// llama.cpp trace of tiny-gpt-oss (arch/golden/eval-callback, n_ctx 4096, one sequence)
// shows cache_k_l0 with 768 cells (window 128 + ubatch 512, padded to 256) and cache_k_l1
// with 4096.
func TestGPTOSSSlidingWindowCache(t *testing.T) {
	m := openModel(t, "../testdata/models/tiny-gpt-oss.gguf")
	r := DefaultRules()
	r.CtxSize, r.Parallel, r.GPULayers = 4096, 1, 99
	plan := place(t, m, r, devicesFor(8))
	const row = 2 * 64 * 2 // two KV heads of 64, f16
	want := map[string]int64{"0": 2 * row * 768, "1": 2 * row * 4096, "2": 2 * row * 768, "3": 2 * row * 4096}
	got := kvBytes(plan)
	for l, b := range want {
		if got[l] != b {
			t.Errorf("layer %s KV %d B, want %d", l, got[l], b)
		}
	}
	if plan.Layers[0].Kind != "swa" || plan.Layers[1].Kind != "attention" || plan.Context.SWACells != 768 {
		t.Errorf("layer kinds %s/%s, SWA cells %d", plan.Layers[0].Kind, plan.Layers[1].Kind, plan.Context.SWACells)
	}
	// llama-server's default (4 slots, unified cache) widens the window: 128×4 + 512 = 1024.
	r.Parallel = -1
	if plan := place(t, m, r, devicesFor(8)); plan.Context.SWACells != 1024 {
		t.Errorf("server default SWA cells %d, want 1024", plan.Context.SWACells)
	}
	// --swa-full gives sliding layers the whole context.
	r.SWAFull = true
	if plan := place(t, m, r, devicesFor(8)); plan.Context.SWACells != 4096 {
		t.Errorf("--swa-full SWA cells %d, want 4096", plan.Context.SWACells)
	}
}

// qwen35moe's Gated DeltaNet layers keep a recurrent state instead of a KV cache: the trace of
// tiny-qwen35moe shows cache_r_l0 of 768 and cache_s_l0 of 4096 floats per sequence, and
// only layer 3 (full_attention_interval 4) with a KV cache.
func TestQwen35RecurrentState(t *testing.T) {
	m := openModel(t, "../testdata/models/tiny-qwen35moe.gguf")
	r := DefaultRules()
	r.CtxSize, r.Parallel, r.GPULayers = 4096, 1, 99
	plan := place(t, m, r, devicesFor(8))
	got := kvBytes(plan)
	for _, l := range []string{"0", "1", "2"} {
		if got[l] != (768+4096)*4 {
			t.Errorf("layer %s recurrent state %d B, want %d", l, got[l], (768+4096)*4)
		}
	}
	if got["3"] != 2*(2*64*2)*4096 {
		t.Errorf("layer 3 KV %d B", got["3"])
	}
	// The state has one row per sequence: llama-server's 4 slots quadruple it.
	r.Parallel = -1
	if got := kvBytes(place(t, m, r, devicesFor(8))); got["0"] != 4*(768+4096)*4 {
		t.Errorf("4 slots: layer 0 state %d B", got["0"])
	}
}

// qwen3next sizes its state as qwen35moe does, from the same ssm.* keys. llama.cpp 3f545bec's
// log for the synthesized model moe's golden test runs (conv kernel 4, 2 key heads and 6
// value heads of 16, 4 layers and an MTP block, n_ctx 4096) filters layers 0-2 and the MTP
// block 4 out of the KV cache, leaves layer 3's 1.00 MiB (4096 cells × 2 heads × 32, K and V
// in F16), and gives the recurrent layers R (f32) 0.01 MiB and S (f32) 0.02 MiB: per layer
// a convolution state of 3 × (2·2·16 + 6·16) = 480 floats and 6 states of 16×16.
func TestQwen3NextRecurrentState(t *testing.T) {
	m := openModel(t, "../moe/testdata/synth/qwen3next.gguf")
	r := DefaultRules()
	r.CtxSize, r.Parallel, r.GPULayers = 4096, 1, 99
	got := kvBytes(place(t, m, r, devicesFor(8)))
	want := map[string]int64{"0": (480 + 1536) * 4, "1": (480 + 1536) * 4, "2": (480 + 1536) * 4, "3": 4096 * 2 * 32 * 2 * 2}
	for l, b := range want {
		if got[l] != b {
			t.Errorf("layer %s memory %d B, want %d", l, got[l], b)
		}
	}
	for l, b := range got {
		if _, ok := want[l]; !ok && b != 0 {
			t.Errorf("layer %s has %d B of cache; llama.cpp gives it none", l, b)
		}
	}
}

// DeepSeek MLA files cache only K, key_length wide (the tiny model: 80 = 64 + 16), with no V
// cache (the trace has cache_k_l* of 80 and no cache_v_l*).
func TestDeepSeek2TinyMLA(t *testing.T) {
	m := openModel(t, "../testdata/models/tiny-deepseek2.gguf")
	r := DefaultRules()
	r.CtxSize, r.GPULayers = 4096, 99
	plan := place(t, m, r, devicesFor(8))
	for l, b := range kvBytes(plan) {
		if b != 80*2*4096 {
			t.Errorf("layer %s KV %d B, want %d", l, b, 80*2*4096)
		}
	}
	if !plan.Model.MLA {
		t.Error("not seen as MLA")
	}
	r.CacheK = tensor.Q8_0
	if _, err := Place(m, r, devicesFor(8)); err == nil || err.Error() != "model does not support different K (q8_0) and V (f16) cache types" {
		t.Errorf("different K and V types on MLA: %v", err)
	}
}

// DeepSeek Sparse Attention's memory is llama_kv_cache_dsa: the MLA cache and the lightning
// indexer's K-only cache, both for the layers below n_layer only. llama.cpp 3f545bec's log
// for the synthesized models moe's golden tests run (3 layers and an MTP block, MLA rows of
// 64 + 16, indexer keys of 64, n_ctx 4096, F16) says "creating main KV cache, size = 4096
// cells ... layer 3: filtered ... K (f16): 1.88 MiB" and "creating indexer KV cache ...
// K (f16): 1.50 MiB" for both. A GLM layer whose indexer is shared has no indexer keys.
func TestDSAIndexerCache(t *testing.T) {
	for _, name := range []string{"deepseek32", "glm-dsa"} {
		m := dsaSynthModel(t, name)
		r := DefaultRules()
		r.CtxSize, r.Parallel, r.GPULayers = 4096, 1, 99
		plan := place(t, m, r, devicesFor(8))
		var mla, indexer int64
		for _, l := range plan.Layers {
			switch {
			case l.Index == 3 && (l.Kind != "nextn" || l.KVBytes != 0):
				t.Errorf("%s: the NextN block's row %+v; llama.cpp filters it out of both caches", name, l)
			case l.Index >= 0 && l.Index < 3 && l.IndexerBytes != 4096*64*2:
				t.Errorf("%s: layer %d indexer keys %d B, want %d", name, l.Index, l.IndexerBytes, 4096*64*2)
			}
			mla += l.KVBytes - l.IndexerBytes
			indexer += l.IndexerBytes
		}
		if mla != 3*4096*80*2 || indexer != 3*4096*64*2 {
			t.Errorf("%s: MLA cache %d B, indexer cache %d B; llama.cpp 1.88 MiB and 1.50 MiB", name, mla, indexer)
		}
	}
	shared := dsaSynthModel(t, "glm-dsa")
	md, err := gguf.NewMetadata(append(shared.Metadata.All(),
		gguf.KV{Key: "glm-dsa.attention.indexer.types", Value: gguf.NewArray([]bool{true, false, true})})...)
	if err != nil {
		t.Fatal(err)
	}
	shared.Metadata = md
	r := DefaultRules()
	r.CtxSize, r.Parallel = 4096, 1
	for _, l := range place(t, shared, r, devicesFor(8)).Layers {
		if want := int64(4096 * 64 * 2); l.Index >= 0 && l.Index < 3 && l.IndexerBytes != map[bool]int64{true: 0, false: want}[l.Index == 1] {
			t.Errorf("GLM with layer 1 shared: layer %d indexer keys %d B", l.Index, l.IndexerBytes)
		}
	}
}

// dsaSynthModel is the layout of the DSA models moe's golden tests run (see moe's
// generated_test.go): 3 layers and an MTP block, MLA rows of 64 + 16, indexer keys of 64.
func dsaSynthModel(t *testing.T, name string) Model {
	t.Helper()
	spec, opts := "glm-5:q5_k_m", synth.Options{}
	if name == "deepseek32" {
		spec, opts = "deepseek-v3.2:q8_0", synth.Options{ExpertGroups: 2, ExpertGroupsUsed: 1}
	}
	opts.Layers, opts.LeadingDense, opts.Embd, opts.Heads, opts.HeadDim, opts.VHeadDim, opts.RopeDim = 3, 1, 128, 4, 48, 32, 16
	opts.QLoraRank, opts.KVLoraRank, opts.Experts, opts.ExpertsUsed, opts.ExpertFF, opts.FF = 64, 64, 8, 2, 64, 192
	opts.IndexerHeads, opts.IndexerHeadDim, opts.IndexerTopK, opts.Vocab = 4, 64, 32, 512
	m, err := synth.Build(spec, opts)
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.Layout()
	if err != nil {
		t.Fatal(err)
	}
	return Model{Name: name, Metadata: m.Metadata, Tensors: l.Tensors}
}

// The presets at a context of 32768: llama.cpp 3f545bec, loading sparse Q6_K files moerun
// synth wrote of them, logs "llama_kv_cache: size = 2196.00 MiB ( 32768 cells, 61 layers"
// and "488.00 MiB" for DeepSeek-V3.2's MLA and indexer caches, 2808.00 and 624.00 MiB over
// GLM-5's 78 layers.
func TestDSAPresetCaches(t *testing.T) {
	for _, c := range []struct {
		spec             string
		mlaMiB, indexMiB int64
	}{{"deepseek-v3.2:q6_k", 2196, 488}, {"glm-5:q6_k", 2808, 624}} {
		r := DefaultRules()
		r.CtxSize, r.Parallel = 32768, 1
		var kv, indexer int64
		for _, l := range place(t, presetModel(t, c.spec), r, devicesFor(80)).Layers {
			kv += l.KVBytes
			indexer += l.IndexerBytes
		}
		if kv-indexer != c.mlaMiB<<20 || indexer != c.indexMiB<<20 {
			t.Errorf("%s: MLA cache %d B, indexer %d B; llama.cpp %d MiB and %d MiB", c.spec, kv-indexer, indexer, c.mlaMiB, c.indexMiB)
		}
	}
}

// glm4moe's NextN block is not loaded (llama.cpp loads it only for MTP speculative decoding),
// but -ngl still counts it, and the plain KV cache still allocates it.
func TestGLM4MoENextN(t *testing.T) {
	m := openModel(t, "../testdata/models/tiny-glm4moe.gguf")
	r := DefaultRules()
	r.GPULayers, r.CtxSize = 2, 4096
	plan := place(t, m, r, devicesFor(8))
	for _, tu := range plan.Tensors {
		if tu.Layer == 3 && (tu.Storage != StorageSkipped || tu.Device != "") {
			t.Errorf("%s: %s on %q, want skipped", tu.Name, tu.Storage, tu.Device)
		}
		if tu.Layer == 2 && tu.Device != "CPU" {
			t.Errorf("%s on %s: -ngl 2 is the output layer and the NextN block", tu.Name, tu.Device)
		}
	}
	if plan.Layers[3].Kind != "nextn" || plan.Layers[3].Device != "CUDA0" || plan.Layers[3].KVBytes == 0 {
		t.Errorf("NextN row: %+v", plan.Layers[3])
	}
}

// Without output.weight llama.cpp uses token_embd.weight as the output matrix too, placed by
// the output layer's list; it costs memory only where it is not already.
func TestTiedOutput(t *testing.T) {
	m := openModel(t, tinyQwen)
	var tensors []gguf.TensorInfo
	var embd int64
	for _, ti := range m.Tensors {
		if ti.Name != "output.weight" {
			tensors = append(tensors, ti)
		}
		if ti.Name == "token_embd.weight" {
			embd = ti.Size
		}
	}
	m.Tensors = tensors
	r := DefaultRules()
	r.GPULayers, r.CtxSize = 99, 4096
	plan := place(t, m, r, devicesFor(8))
	tied := plan.Tensors[len(plan.Tensors)-1]
	if !tied.Tied || tied.Name != "token_embd.weight" || tied.Device != "CUDA0" || tied.Class != gguf.ClassOutput {
		t.Fatalf("tied output %+v", tied)
	}
	total := func(p *Plan) (sum int64) {
		for _, d := range p.Devices {
			sum += d.Weights
		}
		return sum
	}
	var model int64
	for _, ti := range tensors {
		model += ti.Size
	}
	if got := total(plan); got != model+embd {
		t.Errorf("-ngl 99: %d weight bytes, want the model plus a GPU copy of the embedding, %d", got, model+embd)
	}
	r.GPULayers = 0
	if got := total(place(t, m, r, devicesFor(8))); got != model {
		t.Errorf("-ngl 0: %d weight bytes, want %d (one CPU buffer holds both)", got, model)
	}
	// Overrides are matched against the name token_embd.weight for the output use too.
	r.GPULayers = 99
	r.Items, _ = ParseOverrideTensor("-ot", "token_embd=CPU")
	if p := place(t, m, r, devicesFor(8)); p.Tensors[len(p.Tensors)-1].Device != "CPU" || total(p) != model {
		t.Error("-ot token_embd=CPU did not keep the tied output on the CPU")
	}
}

// How CPU weights are stored (reference R5): mapped with a CUDA GPU and mmap, pinned
// (CUDA_Host) without mmap, repacked when there is no host buffer type (no GPU, an RPC
// device, --no-host), plain again with --no-repack.
func TestCPUWeightStorage(t *testing.T) {
	m := openModel(t, tinyQwen)
	repackCPU := backend.CPU(64 << 30)
	repackCPU.Repack = map[tensor.Type]int{tensor.Q4_0: 8}
	cuda := []backend.Device{backend.GPU(0, 8<<30), repackCPU}
	rpc := []backend.Device{{Name: "RPC0", Kind: backend.KindGPU, TotalBytes: 8 << 30, FreeBytes: 8 << 30}, repackCPU}
	for _, c := range []struct {
		name    string
		devs    []backend.Device
		set     func(*Rules)
		buffer  string
		storage Storage
	}{
		{"cuda mmap", cuda, func(*Rules) {}, "CPU_Mapped", StorageMapped},
		{"cuda no-mmap", cuda, func(r *Rules) { r.LoadMode = LoadNone }, "CUDA_Host", StoragePinned},
		{"cuda no-host", cuda, func(r *Rules) { r.NoHost = true }, "CPU_REPACK", StorageRepacked},
		{"cuda no-host no-repack", cuda, func(r *Rules) { r.NoHost, r.Repack = true, false }, "CPU_Mapped", StorageMapped},
		{"cuda no-host no-repack no-mmap", cuda, func(r *Rules) { r.NoHost, r.Repack, r.LoadMode = true, false, LoadNone }, "CPU", StorageCopied},
		{"rpc", rpc, func(*Rules) {}, "CPU_REPACK", StorageRepacked},
		{"cpu only", []backend.Device{repackCPU}, func(*Rules) {}, "CPU_REPACK", StorageRepacked},
	} {
		r := rulesWith(t, 99, "exps=CPU")
		c.set(&r)
		plan := place(t, m, r, c.devs)
		for _, tu := range plan.Tensors {
			if tu.Name == "blk.1.ffn_up_exps.weight" && (tu.Buffer != c.buffer || tu.Storage != c.storage) {
				t.Errorf("%s: %s in %s (%s), want %s (%s)", c.name, tu.Name, tu.Buffer, tu.Storage, c.buffer, c.storage)
			}
			if tu.Name == "token_embd.weight" && tu.Storage == StorageRepacked {
				t.Errorf("%s: the embedding (get_rows) was repacked", c.name)
			}
		}
	}
}
