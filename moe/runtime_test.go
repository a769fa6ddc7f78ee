package moe

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/backend/cpu"
	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/gguf/synth"
	"github.com/moerun/moerun/placement"
	"github.com/moerun/moerun/tensor"
)

// evalAll evaluates tokens in a fresh context and returns every position's logits (copied).
func evalAll(t *testing.T, m *testModel, o ContextOptions, tokens []int32) []float32 {
	t.Helper()
	logits, err := m.context(t, o).Eval(tokens, true)
	if err != nil {
		t.Fatal(err)
	}
	return slices.Clone(logits)
}

// promptOf returns the token ids of a golden prompt.
func promptOf(t *testing.T, golden, name string) []int32 {
	t.Helper()
	for _, p := range loadGolden(t, golden).Prompts {
		if p.Name == name {
			return p.Tokens
		}
	}
	t.Fatalf("no prompt %s", name)
	return nil
}

// TestTwoDevices puts the routed experts of every golden model on a second backend — a CPU-backed device named
// CUDA0 that copies its weights into its own buffers and runs on its own workers — through
// the placement plan of -ngl 0 -ot exps=CUDA0, and gets bit-identical logits: the forward
// pass asks whichever backend holds a weight to run the op.
func TestTwoDevices(t *testing.T) {
	for _, gm := range goldenModels {
		path := gm.path
		t.Run(gm.golden, func(t *testing.T) {
			f, err := gguf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			pool := tensor.NewPool(2)
			defer pool.Close()
			host := cpu.New(cpu.Options{Pool: pool})
			second := cpu.New(cpu.Options{Device: backend.GPU(0, 1<<30), Copy: true, Threads: 1})
			defer second.Close()
			rules := placement.DefaultRules()
			rules.GPULayers = 0
			if rules.Items, err = placement.ParseOverrideTensor("-ot", "exps=CUDA0"); err != nil {
				t.Fatal(err)
			}
			plan := placeModel(t, f, rules, []backend.Device{host.Device(), second.Device()})
			var expertBytes int64
			for _, u := range plan.Tensors {
				if u.Storage == placement.StorageSkipped { // NextN blocks: loaded by nobody
					continue
				}
				if want := map[bool]string{true: "CUDA0", false: "CPU"}[u.Class == gguf.ClassRoutedExpert]; u.Device != want {
					t.Fatalf("plan puts %s on %s", u.Name, u.Device)
				}
				// The expert matrices are copied; their bias tables (gpt-oss) are read
				// into host memory for the additions.
				if u.Class == gguf.ClassRoutedExpert && len(u.Shape) == 3 {
					expertBytes += u.Bytes
				}
			}
			split, err := Load(f, plan, []backend.Backend{host, second})
			if err != nil {
				t.Fatal(err)
			}
			if second.CopiedBytes() != expertBytes || expertBytes == 0 {
				t.Errorf("the second device copied %d bytes, the experts take %d", second.CopiedBytes(), expertBytes)
			}
			one := openModel(t, path, 2)
			tokens := promptOf(t, gm.golden, "fox")
			want := evalAll(t, one, DefaultContextOptions(), tokens)
			got := evalAll(t, &testModel{Model: split}, DefaultContextOptions(), tokens)
			if !slices.Equal(got, want) {
				t.Errorf("logits differ with the experts on a second device: %+v", compareLogits(got, want))
			}
		})
	}
}

// TestSER checks smart expert reduction end to end. Qwen3 renormalises the kept weights, so
// -ser K,1 (keep only the K best, which no other expert ties) must give exactly the model
// with expert_used_count = K; SER that is off in either value changes nothing; and the
// statistics count the dropped slots.
func TestSER(t *testing.T) {
	tokens := promptOf(t, "tiny-qwen3moe", "mixed")
	m := openModel(t, qwenModel, 2)
	base := evalAll(t, m, DefaultContextOptions(), tokens)
	for _, off := range []SER{{MinExperts: 0, Threshold: 1}, {MinExperts: 2, Threshold: 0}} {
		o := DefaultContextOptions()
		o.SER = off
		if got := evalAll(t, m, o, tokens); !slices.Equal(got, base) {
			t.Errorf("SER %+v is off but changed the logits", off)
		}
	}
	o := DefaultContextOptions()
	o.SER = SER{MinExperts: 2, Threshold: 1}
	o.Stats = m.NewExpertStats()
	reduced := evalAll(t, m, o, tokens)
	fewer := openModel(t, rewriteModel(t, qwenModel, modelEdit{set: map[string]gguf.Value{"{arch}.expert_used_count": gguf.NewValue(uint32(2))}}), 2)
	if want := evalAll(t, fewer, DefaultContextOptions(), tokens); !slices.Equal(reduced, want) {
		t.Errorf("-ser 2,1 differs from expert_used_count 2: %+v", compareLogits(reduced, want))
	}
	if a := compareLogits(reduced, base); a.nmse < 1e-3 {
		t.Errorf("-ser 2,1 barely changed the logits (NMSE %.2g): was it applied?", a.nmse)
	}
	for _, l := range o.Stats.Snapshot("x").Layers {
		if l.DroppedSlots != 2*l.Tokens || l.Tokens != uint64(len(tokens)) {
			t.Errorf("layer %d: %d dropped slots over %d tokens, want 2 per token", l.Layer, l.DroppedSlots, l.Tokens)
		}
	}
}

// TestExpertStatsRecorded records the routing of a prompt: one record per token and MoE layer (the
// dense layer 0 of DeepSeek has none), k selections per token, and per token the weights
// summing to the model's expert_weights_scale after normalisation (1 for Qwen3).
func TestExpertStatsRecorded(t *testing.T) {
	for _, c := range []struct {
		path, golden string
		moeLayers    []int
		weightSum    float64
	}{
		{qwenModel, "tiny-qwen3moe", []int{0, 1, 2, 3}, 1},
		{deepseekModel, "tiny-deepseek2", []int{1, 2}, 2.5},
	} {
		m := openModel(t, c.path, 2)
		tokens := promptOf(t, c.golden, "fox")
		o := DefaultContextOptions()
		o.Stats = m.NewExpertStats()
		evalAll(t, m, o, tokens)
		var buf bytes.Buffer
		if err := o.Stats.WriteJSON(&buf, c.golden); err != nil {
			t.Fatal(err)
		}
		var doc ExpertStatsJSON
		if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
			t.Fatal(err)
		}
		var layers []int
		for _, l := range doc.Layers {
			layers = append(layers, l.Layer)
			var selected uint64
			var weight float64
			for _, e := range l.Experts {
				selected += e.Selected
				weight += e.WeightSum
			}
			n := float64(len(tokens))
			if l.Tokens != uint64(len(tokens)) || selected != l.Tokens*uint64(m.Config.Router.Used) || math.Abs(weight-c.weightSum*n) > 1e-4*n {
				t.Errorf("%s layer %d: %d tokens, %d selections, weights %g", c.golden, l.Layer, l.Tokens, selected, weight)
			}
		}
		if !slices.Equal(layers, c.moeLayers) || doc.Schema != "moerun.expert-stats/v1" {
			t.Errorf("%s: layers %v, schema %q", c.golden, layers, doc.Schema)
		}
	}
}

// TestDecodeAllocatesNothing: a decode step in the steady state (with routing statistics
// on) allocates no memory, alone or in a batch of several sequences.
func TestDecodeAllocatesNothing(t *testing.T) {
	for _, path := range []string{qwenModel, deepseekModel, archModel("qwen2moe"), archModel("glm4moe")} {
		m := openModel(t, path, 2)
		o := DefaultContextOptions()
		o.Stats = m.NewExpertStats()
		c := m.context(t, o)
		if _, err := c.Eval(benchTokens(16, m.Config.Vocab), false); err != nil {
			t.Fatal(err)
		}
		next := []int32{7}
		step := func() {
			if _, err := c.Eval(next, false); err != nil {
				t.Fatal(err)
			}
		}
		step()
		if n := testing.AllocsPerRun(20, step); n != 0 {
			t.Errorf("%s: %v allocations per decode step", baseName(path), n)
		}
		// A batched step of three sequences, c's and two more, one token each.
		b := m.NewBatch()
		defer b.Close()
		seqs := []BatchSeq{{Context: c, Tokens: next, Logits: true}}
		for range 2 {
			seqs = append(seqs, BatchSeq{Context: m.context(t, o), Tokens: next, Logits: true})
		}
		batched := func() {
			if err := b.Eval(seqs); err != nil {
				t.Fatal(err)
			}
		}
		batched()
		if n := testing.AllocsPerRun(20, batched); n != 0 {
			t.Errorf("%s: %v allocations per batched decode step", baseName(path), n)
		}
	}
}

// TestUBatches: a prompt evaluated in pieces of 9 tokens gives exactly the logits of pieces
// of 10, with the Q4_0 experts' packed kernels and without (--no-repack): each output row is
// the same dot products in the same order, attention the same per-row kernel. (Pieces of
// one token would not: like llama.cpp, a batch of one multiplies float weights in
// ggml_vec_dot's order and a larger batch in tinyBLAS's; 9 and 10 leave no piece of one
// of the 169 tokens.) Single tokens and one batch are compared with the batch of pieces up
// to the difference of those orders and of the attention kernels (ggml uses its tiled
// kernel for batches of 64 tokens or more) and its amplification.
func TestUBatches(t *testing.T) {
	tokens := promptOf(t, "tiny-qwen3moe", "long")
	m := openModel(t, qwenModel, 2)
	byPieces := func(n int) []float32 {
		o := DefaultContextOptions()
		o.UBatch = n
		return evalAll(t, m, o, tokens)
	}
	if len(tokens)%9 == 1 || len(tokens)%10 == 1 {
		t.Fatalf("%d tokens leave a piece of one", len(tokens))
	}
	pieces, single := byPieces(9), byPieces(1)
	if tens := byPieces(10); !slices.Equal(pieces, tens) {
		t.Errorf("ubatches of 9 differ from ubatches of 10: %+v", compareLogits(pieces, tens))
	}
	m.pool.SetRepack(false)
	unpacked, unpackedTens := byPieces(9), byPieces(10)
	m.pool.SetRepack(true)
	if !slices.Equal(unpacked, unpackedTens) {
		t.Errorf("without packing, ubatches of 9 differ from ubatches of 10: %+v", compareLogits(unpacked, unpackedTens))
	}
	if tensor.PackedKernels(tensor.Q4_0) && slices.Equal(pieces, unpacked) {
		t.Error("the logits are the same with the packed kernels and without: were they used?")
	}
	whole := evalAll(t, m, DefaultContextOptions(), tokens)
	vocab := m.Config.Vocab
	for _, c := range []struct {
		name  string
		other []float32
	}{{"one batch", whole}, {"single tokens", single}} {
		var b bar
		for i := range len(tokens) {
			b.add(compareLogits(pieces[i*vocab:(i+1)*vocab], c.other[i*vocab:(i+1)*vocab]))
		}
		b.check(t, "ubatches of 9 against "+c.name)
	}
}

// TestContextFull: tokens that do not fit the context are refused before anything is
// computed, and the context stays usable.
func TestContextFull(t *testing.T) {
	m := openModel(t, quantModel("q8_0"), 1)
	c := m.context(t, ContextOptions{Size: 256, UBatch: 512, CacheK: tensor.F16, CacheV: tensor.F16})
	if c.Size() != 256 {
		t.Fatalf("size %d", c.Size())
	}
	if _, err := c.Eval(benchTokens(250, m.Config.Vocab), false); err != nil {
		t.Fatal(err)
	}
	_, err := c.Eval(benchTokens(7, m.Config.Vocab), false)
	if !errors.Is(err, ErrContextFull) || !strings.Contains(err.Error(), "raise -c") {
		t.Errorf("error %v", err)
	}
	if _, err := c.Eval(benchTokens(6, m.Config.Vocab), false); err != nil || c.Len() != 256 {
		t.Errorf("filling the context: %v, %d positions", err, c.Len())
	}
	st, err := m.context(t, ContextOptions{Size: 256, UBatch: 512, CacheK: tensor.F16, CacheV: tensor.F16}).
		Generate(benchTokens(250, m.Config.Vocab), GenerateOptions{MaxTokens: -1})
	if !errors.Is(err, ErrContextFull) || st.Generated != 7 {
		t.Errorf("open-ended generation: %v after %d tokens", err, st.Generated)
	}
	for _, bad := range [][]int32{nil, {-1}, {int32(m.Config.Vocab)}} {
		if _, err := c.Eval(bad, false); err == nil {
			t.Errorf("tokens %v accepted", bad)
		}
	}
}

// TestQ8Cache runs with a Q8_0 KV cache (-ctk q8_0 -ctv q8_0): the logits stay within the
// acceptance bar of llama.cpp's F16-cache outputs. DeepSeek's MLA rows of 80 values do not
// split into Q8_0 blocks of 32, which must be a clear error.
func TestQ8Cache(t *testing.T) {
	o := DefaultContextOptions()
	o.CacheK, o.CacheV = tensor.Q8_0, tensor.Q8_0
	g := loadGolden(t, "tiny-qwen3moe")
	g.Prompts = g.Prompts[:3] // hello, fox, mixed: 99 steps
	steps, _, _, _ := teacherForced(t, openModel(t, qwenModel, 2), g, o)
	steps.check(t, "Q8_0 cache, teacher-forced")
	ds := openModel(t, deepseekModel, 1)
	if _, err := ds.NewContext(o); err == nil || !strings.Contains(err.Error(), "rows of 80") {
		t.Errorf("deepseek2 with a Q8_0 cache: %v", err)
	}
	o.CacheV = tensor.F16
	if _, err := ds.NewContext(o); err == nil || !strings.Contains(err.Error(), "must be the same") {
		t.Errorf("MLA with different K and V cache types: %v", err)
	}
}

// TestLegacyMLA rewrites tiny-deepseek2 into the layout of DeepSeek files converted before
// llama.cpp split attn_kv_b (one attn_kv_b per layer, per-head key and value rows, no
// *_mla keys, head_count_kv = head_count) — the same model — and holds the naive attention
// path llama.cpp runs for such files to llama.cpp's outputs for the split file.
func TestLegacyMLA(t *testing.T) {
	const nope, dv, c, heads = 32, 32, 64, 4
	path := rewriteModel(t, deepseekModel, modelEdit{
		set: map[string]gguf.Value{
			"{arch}.attention.key_length":    gguf.NewValue(uint32(48)),
			"{arch}.attention.value_length":  gguf.NewValue(uint32(dv)),
			"{arch}.attention.head_count_kv": gguf.NewValue(uint32(heads)),
		},
		delete: []string{"{arch}.attention.key_length_mla", "{arch}.attention.value_length_mla"},
		tensors: func(t *testing.T, f *gguf.File, specs []gguf.TensorSpec, data map[string][]byte) []gguf.TensorSpec {
			var out []gguf.TensorSpec
			for _, s := range specs {
				il, _ := gguf.LayerOf(s.Name)
				switch {
				case strings.HasSuffix(s.Name, "attn_v_b.weight"):
					continue
				case strings.HasSuffix(s.Name, "attn_k_b.weight"):
					kb, vb := data[s.Name], data[blk(il, "attn_v_b.weight")]
					kvb := make([]byte, 2*c*heads*(nope+dv))
					for h := range heads {
						for j := range c {
							for i := range nope { // key row h·64+i, column j = k_b[h][row j][col i]
								copy(kvb[2*((h*(nope+dv)+i)*c+j):][:2], kb[2*((h*c+j)*nope+i):])
							}
							for m := range dv { // value row h·64+32+m = v_b[h][row m]
								copy(kvb[2*((h*(nope+dv)+nope+m)*c+j):][:2], vb[2*((h*dv+m)*c+j):])
							}
						}
					}
					name := blk(il, "attn_kv_b.weight")
					data[name] = kvb
					out = append(out, gguf.TensorSpec{Name: name, Type: s.Type, Shape: []int64{c, heads * (nope + dv)}})
				default:
					out = append(out, s)
				}
			}
			return out
		},
	})
	legacy := openModel(t, path, 2)
	if legacy.Config.MLA || legacy.Config.HeadsKV != heads {
		t.Fatalf("legacy file read as %+v", legacy.Config)
	}
	steps, _, _, _ := teacherForced(t, legacy, loadGolden(t, "tiny-deepseek2"), DefaultContextOptions())
	steps.check(t, "legacy attn_kv_b layout, teacher-forced")
}

// TestBadModels: a model the runtime cannot run is a *ModelError that says what is wrong.
func TestBadModels(t *testing.T) {
	for _, c := range []struct {
		name, src string
		edit      modelEdit
		want      string
	}{
		{"unknown arch", qwenModel, renameArch("llama"), `architecture "llama" is not supported`},
		{"missing tensor", qwenModel, modelEdit{tensors: dropTensor("blk.1.ffn_up_exps.weight")}, "tensor blk.1.ffn_up_exps.weight is missing"},
		{"missing output norm", deepseekModel, modelEdit{tensors: dropTensor("output_norm.weight")}, "tensor output_norm.weight is missing"},
		{"wrong shape", qwenModel, modelEdit{tensors: func(_ *testing.T, _ *gguf.File, specs []gguf.TensorSpec, data map[string][]byte) []gguf.TensorSpec {
			for i := range specs {
				if specs[i].Name == "blk.2.attn_k_norm.weight" {
					specs[i].Shape = []int64{32}
					data[specs[i].Name] = data[specs[i].Name][:128]
				}
			}
			return specs
		}}, "tensor blk.2.attn_k_norm.weight has shape [32], the metadata implies [64]"},
		{"extra tensor", qwenModel, modelEdit{tensors: func(_ *testing.T, _ *gguf.File, specs []gguf.TensorSpec, data map[string][]byte) []gguf.TensorSpec {
			data["blk.0.mystery.weight"] = make([]byte, 4*8)
			return append(specs, gguf.TensorSpec{Name: "blk.0.mystery.weight", Type: tensor.F32, Shape: []int64{8}})
		}}, "unexpected tensors for qwen3moe: blk.0.mystery.weight"},
		{"missing epsilon", qwenModel, modelEdit{delete: []string{"{arch}.attention.layer_norm_rms_epsilon"}},
			"lacks qwen3moe.attention.layer_norm_rms_epsilon"},
		{"missing kv lora rank", deepseekModel, modelEdit{delete: []string{"{arch}.attention.kv_lora_rank"}},
			"lacks deepseek2.attention.kv_lora_rank"},
		{"missing q lora rank", deepseekModel, modelEdit{delete: []string{"{arch}.attention.q_lora_rank"}},
			"lacks deepseek2.attention.q_lora_rank"},
		{"unsupported rope scaling", deepseekModel, modelEdit{set: map[string]gguf.Value{"{arch}.rope.scaling.type": gguf.NewValue("longrope")}},
			`rope.scaling.type = "longrope"`},
		{"bad groups", deepseekModel, modelEdit{set: map[string]gguf.Value{"{arch}.expert_group_count": gguf.NewValue(uint32(3))}},
			"not a multiple of expert_group_count"},
		{"too many experts used", qwenModel, modelEdit{set: map[string]gguf.Value{"{arch}.expert_used_count": gguf.NewValue(uint32(17))}},
			""},
		{"unequal head sizes", qwenModel, modelEdit{set: map[string]gguf.Value{"{arch}.attention.value_length": gguf.NewValue(uint32(32))}},
			"equal key, value and rotary head sizes"},
		{"qwen2moe missing shared expert gate", archModel("qwen2moe"), modelEdit{tensors: dropTensor("blk.1.ffn_gate_inp_shexp.weight")},
			"tensor blk.1.ffn_gate_inp_shexp.weight is missing"},
		{"qwen2moe output bias", archModel("qwen2moe"), modelEdit{tensors: func(_ *testing.T, _ *gguf.File, specs []gguf.TensorSpec, data map[string][]byte) []gguf.TensorSpec {
			data["blk.0.attn_output.bias"] = make([]byte, 4*128)
			return append(specs, gguf.TensorSpec{Name: "blk.0.attn_output.bias", Type: tensor.F32, Shape: []int64{128}})
		}}, "unexpected tensors for qwen2moe: blk.0.attn_output.bias"},
		{"qwen2moe partial rotary", archModel("qwen2moe"), modelEdit{set: map[string]gguf.Value{"{arch}.rope.dimension_count": gguf.NewValue(uint32(16))}},
			"equal key, value and rotary head sizes"},
		{"glm4moe missing expert width", archModel("glm4moe"), modelEdit{delete: []string{"{arch}.expert_feed_forward_length"}},
			"lacks glm4moe.expert_feed_forward_length"},
		{"glm4moe missing shared count", archModel("glm4moe"), modelEdit{delete: []string{"{arch}.expert_shared_count"}},
			"lacks glm4moe.expert_shared_count"},
		{"glm4moe missing selection bias", archModel("glm4moe"), modelEdit{tensors: dropTensor("blk.2.exp_probs_b.bias")},
			"tensor blk.2.exp_probs_b.bias is missing"},
		{"glm4moe missing post-attention norm", archModel("glm4moe"), modelEdit{tensors: dropTensor("blk.0.post_attention_norm.weight")},
			"tensor blk.0.post_attention_norm.weight is missing"},
		{"glm4moe missing NextN projection", archModel("glm4moe"), modelEdit{tensors: dropTensor("blk.3.nextn.eh_proj.weight")},
			"NextN block 3: tensor blk.3.nextn.eh_proj.weight is missing"},
		{"glm4moe missing NextN expert", archModel("glm4moe"), modelEdit{tensors: dropTensor("blk.3.ffn_down_exps.weight")},
			"NextN block 3: tensor blk.3.ffn_down_exps.weight is missing"},
		{"glm4moe undeclared NextN block", archModel("glm4moe"), modelEdit{set: map[string]gguf.Value{"{arch}.nextn_predict_layers": gguf.NewValue(uint32(0))}},
			"unexpected tensors for glm4moe: blk.3.nextn.eh_proj.weight"},
		{"glm4moe multi-section rope", archModel("glm4moe"), modelEdit{set: map[string]gguf.Value{"{arch}.rope.dimension_sections": gguf.NewArray([]int32{8, 12, 12, 0})}},
			"multi-section RoPE"},
		{"gpt-oss missing sinks", archModel("gpt-oss"), modelEdit{tensors: dropTensor("blk.1.attn_sinks.weight")},
			"tensor blk.1.attn_sinks.weight is missing"},
		{"gpt-oss missing output bias", archModel("gpt-oss"), modelEdit{tensors: dropTensor("blk.3.attn_output.bias")},
			"tensor blk.3.attn_output.bias is missing"},
		{"gpt-oss missing router bias", archModel("gpt-oss"), modelEdit{tensors: dropTensor("blk.0.ffn_gate_inp.bias")},
			"tensor blk.0.ffn_gate_inp.bias is missing"},
		{"gpt-oss missing expert bias", archModel("gpt-oss"), modelEdit{tensors: dropTensor("blk.2.ffn_down_exps.bias")},
			"tensor blk.2.ffn_down_exps.bias is missing"},
		{"gpt-oss missing post-attention norm", archModel("gpt-oss"), modelEdit{tensors: dropTensor("blk.1.post_attention_norm.weight")},
			"tensor blk.1.post_attention_norm.weight is missing"},
		{"gpt-oss missing sliding window", archModel("gpt-oss"), modelEdit{delete: []string{"{arch}.attention.sliding_window"}},
			"lacks gpt-oss.attention.sliding_window"},
		{"gpt-oss missing expert width", archModel("gpt-oss"), modelEdit{delete: []string{"{arch}.expert_feed_forward_length"}},
			"lacks gpt-oss.expert_feed_forward_length"},
		{"gpt-oss zero sliding window", archModel("gpt-oss"), modelEdit{set: map[string]gguf.Value{"{arch}.attention.sliding_window": gguf.NewValue(uint32(0))}},
			"the sliding window must be positive"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, _, host := openHost(t, rewriteModel(t, c.src, c.edit), 1)
			rules := placement.DefaultRules()
			plan, err := placement.Place(placement.Model{Name: "bad.gguf", Metadata: f.Metadata, Tensors: f.Tensors}, rules, []backend.Device{host.Device()})
			if err != nil { // placement read the metadata first and refused it
				var me *placement.ModelError
				if !errors.As(err, &me) || !strings.Contains(err.Error(), c.want) {
					t.Errorf("placement: %v", err)
				}
				return
			}
			_, err = Load(f, plan, []backend.Backend{host})
			var me *ModelError
			if !errors.As(err, &me) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want a ModelError containing %q", err, c.want)
			}
		})
	}
}

// renameArch turns a qwen3moe fixture into one of another architecture, keys included.
func renameArch(arch string) modelEdit {
	f, err := gguf.Open(qwenModel)
	if err != nil {
		panic(err)
	}
	defer f.Close()
	e := modelEdit{set: map[string]gguf.Value{"general.architecture": gguf.NewValue(arch)}}
	for _, kv := range f.Metadata.All() {
		if rest, ok := strings.CutPrefix(kv.Key, "qwen3moe."); ok {
			e.set[arch+"."+rest] = kv.Value
			e.delete = append(e.delete, kv.Key)
		}
	}
	return e
}

// TestRealLayouts loads the full layouts of real models (sparse files: the weights read as
// zeros and are not touched) and checks the configuration llama.cpp would derive, e.g.
// DeepSeek's YaRN numbers from moe-architectures.md §4.4.
func TestRealLayouts(t *testing.T) {
	for _, c := range []struct {
		preset                string
		kqScale, ropeAttn     float64
		denseLead, qLoRA, mla int
		gating                Gating
	}{
		{"deepseek-v3:q4_k_m", 0.135234, 0.730520, 3, 1536, 1, GatingSigmoid},
		{"deepseek-v2-lite:q4_k_m", 0.114721, 0.730520, 1, 0, 1, GatingSoftmax},
		{"qwen3-30b-a3b:q4_k_m", 1 / math.Sqrt(128), 1, 0, 0, 0, GatingSoftmax},
		{"qwen2-57b-a14b:q4_k_m", 1 / math.Sqrt(128), 1, 0, 0, 0, GatingSoftmax},
		{"glm-4.5-air:q4_k_m", 1 / math.Sqrt(128), 1, 1, 0, 0, GatingSigmoid},
		{"glm-4.6:q4_k_m", 1 / math.Sqrt(128), 1, 3, 0, 0, GatingSigmoid},
	} {
		t.Run(c.preset, func(t *testing.T) {
			sm, err := synth.Build(c.preset, synth.Options{})
			if err != nil {
				t.Fatal(err)
			}
			path := t.TempDir() + "/sparse.gguf"
			if _, err := sm.WriteSparse(path); err != nil {
				t.Fatal(err)
			}
			m := openModel(t, path, 1)
			cfg := m.Config
			if math.Abs(float64(cfg.KQScale)-c.kqScale) > 1e-6 || math.Abs(float64(cfg.RoPE.AttnFactor)-c.ropeAttn) > 1e-6 ||
				cfg.DenseLead != c.denseLead || cfg.QLoRA != c.qLoRA || cfg.MLA != (c.mla == 1) || cfg.Router.Gating != c.gating {
				t.Errorf("config %+v", cfg)
			}
		})
	}
}

// The tiny DeepSeek's attention scale is the README's ≈ 0.270467 ((1 + 0.1·ln 40)² / √48).
func TestTinyDeepSeekYaRN(t *testing.T) {
	m := openModel(t, deepseekModel, 1)
	if got := m.Config.KQScale; math.Abs(float64(got)-0.270467) > 1e-6 || m.Config.RoPE.ExtFactor != 1 || m.Config.RoPE.FreqScale != 1/float32(40) {
		t.Errorf("kq scale %v, rope %+v", got, m.Config.RoPE)
	}
}

// TestTiedOutput: a model without output.weight computes its logits with token_embd.weight,
// exactly as the same model with token_embd's data copied into output.weight.
func TestTiedOutput(t *testing.T) {
	tokens := promptOf(t, "tiny-qwen3moe", "fox")
	tied := evalAll(t, openModel(t, rewriteModel(t, qwenModel, outputEdit(false)), 1), DefaultContextOptions(), tokens)
	copied := evalAll(t, openModel(t, rewriteModel(t, qwenModel, outputEdit(true)), 1), DefaultContextOptions(), tokens)
	if !slices.Equal(tied, copied) {
		t.Errorf("tied output differs: %+v", compareLogits(tied, copied))
	}
}

// outputEdit drops output.weight (keep false: the output is tied to token_embd.weight) or
// sets its data to token_embd's (keep true).
func outputEdit(keep bool) modelEdit {
	return modelEdit{tensors: func(_ *testing.T, _ *gguf.File, specs []gguf.TensorSpec, data map[string][]byte) []gguf.TensorSpec {
		for i, s := range specs {
			if s.Name == "output.weight" {
				if !keep {
					return slices.Delete(specs, i, i+1)
				}
				data[s.Name] = data["token_embd.weight"]
			}
		}
		return specs
	}}
}

// TestTruncate: a context that evaluated one prompt, truncated to the prefix it shares with
// another and given the rest, gives the other prompt's logits exactly as a fresh context
// evaluating the same pieces does (the positions after the prefix are overwritten). A model
// with recurrent layers can only keep everything.
func TestTruncate(t *testing.T) {
	for _, path := range []string{qwenModel, deepseekModel, archModel("gpt-oss")} {
		m := openModel(t, path, 2)
		long := promptOf(t, "tiny-qwen3moe", "long")[:40]
		prefix, rest := long[:12], []int32{5, 9, 2, 11, 3}
		want := m.piecewiseLogits(t, prefix, rest)
		c := m.context(t, DefaultContextOptions())
		if _, err := c.Eval(long, false); err != nil {
			t.Fatal(err)
		}
		if c.Truncate(len(long)+1) || c.Truncate(-1) || c.Len() != len(long) {
			t.Fatalf("%s: truncation beyond the evaluated positions accepted", baseName(path))
		}
		if !c.Truncate(len(prefix)) || c.Len() != len(prefix) {
			t.Fatalf("%s: Truncate(%d) refused or left %d positions", baseName(path), len(prefix), c.Len())
		}
		got, err := c.Eval(rest, true)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: after Truncate: %+v", baseName(path), compareLogits(got, want))
		}
	}
	m := openModel(t, qwen35Model, 1)
	c := m.context(t, DefaultContextOptions())
	if _, err := c.Eval([]int32{1, 2, 3, 4}, false); err != nil {
		t.Fatal(err)
	}
	if c.Truncate(2) || c.Len() != 4 || !c.Truncate(4) {
		t.Error("a model with recurrent layers: Truncate(2) accepted, or Truncate(Len) refused")
	}
}
