// Package placetest builds the full-size GGUF layouts of published MoE models (DeepSeek-V3,
// Qwen3-30B-A3B, Qwen3-235B-A22B) for placement tests and benchmarks: real tensor names,
// shapes and metadata from the models' published configurations, with types chosen like
// llama-quantize's F16 or Q4_K_M. Only headers: nothing here holds weights.
package placetest

import (
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/tensor"
)

// Quant picks tensor types.
type Quant int

// The supported type mixes.
const (
	F16    Quant = iota // every matrix F16, norms and routers F32
	Q4_K_M              // llama-quantize Q4_K_M: Q4_K, with Q6_K for some ffn_down/attn_v and the output
)

// Layout is a model header: metadata and tensors, ready for gguf.NewLayout or
// gguf.WriteSparse.
type Layout struct {
	Metadata gguf.Metadata
	Specs    []gguf.TensorSpec
}

// Infos lays the tensors out (offsets, sizes) as a file would.
func (l Layout) Infos() ([]gguf.TensorInfo, error) {
	lay, err := gguf.NewLayout(l.Metadata, l.Specs)
	if err != nil {
		return nil, err
	}
	return lay.Tensors, nil
}

type builder struct {
	arch   string
	q      Quant
	layers int
	kvs    []gguf.KV
	specs  []gguf.TensorSpec
	vocab  int
	tokens bool
	// attn_v and ffn_down counters for Q4_K_M's use_more_bits rule
	nV, nDown int
}

func (b *builder) u32(key string, v int) {
	b.kvs = append(b.kvs, gguf.KV{Key: b.arch + "." + key, Value: gguf.NewValue(uint32(v))})
}

func (b *builder) f32(key string, v float32) {
	b.kvs = append(b.kvs, gguf.KV{Key: b.arch + "." + key, Value: gguf.NewValue(v)})
}

// useMoreBits is llama-quantize's rule for which layers get more bits in Q4_K_M.
func useMoreBits(i, n int) bool { return i < n/8 || i >= 7*n/8 || (i-n/8)%3 == 2 }

// add declares a tensor; kind says how Q4_K_M treats it ("v", "down", "out" or "").
func (b *builder) add(name, kind string, shape ...int64) {
	typ := tensor.F16
	if len(shape) == 1 || strings.HasSuffix(name, ".ffn_gate_inp.weight") {
		typ = tensor.F32
	} else if b.q == Q4_K_M {
		typ = tensor.Q4_K
		switch kind {
		case "out":
			typ = tensor.Q6_K
		case "v":
			if useMoreBits(b.nV, b.layers) {
				typ = tensor.Q6_K
			}
			b.nV++
		case "down":
			if useMoreBits(b.nDown, b.layers) {
				typ = tensor.Q6_K
			}
			b.nDown++
		}
		if shape[0]%256 != 0 { // k-quants need whole 256-element rows; llama-quantize falls back
			typ = map[tensor.Type]tensor.Type{tensor.Q4_K: tensor.Q5_0, tensor.Q6_K: tensor.Q8_0}[typ]
		}
	}
	b.specs = append(b.specs, gguf.TensorSpec{Name: name, Type: typ, Shape: shape})
}

func (b *builder) blk(il int, name, kind string, shape ...int64) {
	b.add(fmt.Sprintf("blk.%d.%s", il, name), kind, shape...)
}

func (b *builder) layout() (Layout, error) {
	kvs := append([]gguf.KV{{Key: "general.architecture", Value: gguf.NewValue(b.arch)}}, b.kvs...)
	if b.tokens {
		kvs = append(kvs, vocabKVs(b.vocab)...)
	}
	md, err := gguf.NewMetadata(kvs...)
	return Layout{Metadata: md, Specs: b.specs}, err
}

// vocabKVs is a byte-level BPE vocabulary of n random tokens and as many merges, so that a
// header parses like a real one.
func vocabKVs(n int) []gguf.KV {
	rng := rand.New(rand.NewPCG(1, 2))
	word := func() string {
		w := make([]byte, 2+rng.IntN(10))
		for i := range w {
			w[i] = byte('a' + rng.IntN(26))
		}
		return string(w)
	}
	tokens, types, merges := make([]string, n), make([]int32, n), make([]string, n)
	for i := range tokens {
		tokens[i], types[i], merges[i] = word(), 1, word()+" "+word()
	}
	return []gguf.KV{
		{Key: "tokenizer.ggml.model", Value: gguf.NewValue("gpt2")},
		{Key: "tokenizer.ggml.tokens", Value: gguf.NewArray(tokens)},
		{Key: "tokenizer.ggml.token_type", Value: gguf.NewArray(types)},
		{Key: "tokenizer.ggml.merges", Value: gguf.NewArray(merges)},
	}
}

// DeepSeekV3 is DeepSeek-V3/R1 (671B) as llama.cpp's converter writes it: 61 blocks (3 dense),
// MLA stored as MQA with split attn_k_b/attn_v_b, 256 routed experts (8 used) and a shared
// expert, vocabulary 129,280, context 163,840. withVocab adds a vocabulary of that size to the
// metadata.
func DeepSeekV3(q Quant, withVocab bool) (Layout, error) {
	const (
		embd, vocab, layers, dense      = 7168, 129280, 61, 3
		heads, qLora, kvLora, nope, rot = 128, 1536, 512, 128, 64
		vHead, ff, ffExp, experts       = 128, 18432, 2048, 256
	)
	b := &builder{arch: "deepseek2", q: q, layers: layers, vocab: vocab, tokens: withVocab}
	b.u32("block_count", layers)
	b.u32("context_length", 163840)
	b.u32("embedding_length", embd)
	b.u32("feed_forward_length", ff)
	b.u32("attention.head_count", heads)
	b.u32("attention.head_count_kv", 1)
	b.u32("attention.key_length", kvLora+rot)
	b.u32("attention.value_length", kvLora)
	b.u32("attention.key_length_mla", nope+rot)
	b.u32("attention.value_length_mla", vHead)
	b.f32("attention.layer_norm_rms_epsilon", 1e-6)
	b.u32("attention.q_lora_rank", qLora)
	b.u32("attention.kv_lora_rank", kvLora)
	b.u32("rope.dimension_count", rot)
	b.u32("leading_dense_block_count", dense)
	b.u32("vocab_size", vocab)
	b.u32("expert_feed_forward_length", ffExp)
	b.u32("expert_count", experts)
	b.u32("expert_shared_count", 1)
	b.u32("expert_used_count", 8)
	b.u32("expert_group_count", 8)
	b.u32("expert_group_used_count", 4)
	b.f32("expert_weights_scale", 2.5)
	b.u32("expert_gating_func", 2)
	b.add("token_embd.weight", "", embd, vocab)
	for il := range layers {
		b.blk(il, "attn_norm.weight", "", embd)
		b.blk(il, "attn_q_a_norm.weight", "", qLora)
		b.blk(il, "attn_kv_a_norm.weight", "", kvLora)
		b.blk(il, "attn_q_a.weight", "", embd, qLora)
		b.blk(il, "attn_q_b.weight", "", qLora, heads*(nope+rot))
		b.blk(il, "attn_kv_a_mqa.weight", "", embd, kvLora+rot)
		b.blk(il, "attn_k_b.weight", "", nope, kvLora, heads)
		b.blk(il, "attn_v_b.weight", "v", kvLora, vHead, heads)
		b.blk(il, "attn_output.weight", "", heads*vHead, embd)
		b.blk(il, "ffn_norm.weight", "", embd)
		if il < dense {
			b.blk(il, "ffn_gate.weight", "", embd, ff)
			b.blk(il, "ffn_up.weight", "", embd, ff)
			b.blk(il, "ffn_down.weight", "down", ff, embd)
			continue
		}
		b.blk(il, "ffn_gate_inp.weight", "", embd, experts)
		b.blk(il, "exp_probs_b.bias", "", experts)
		b.blk(il, "ffn_gate_exps.weight", "", embd, ffExp, experts)
		b.blk(il, "ffn_up_exps.weight", "", embd, ffExp, experts)
		b.blk(il, "ffn_down_exps.weight", "down", ffExp, embd, experts)
		b.blk(il, "ffn_gate_shexp.weight", "", embd, ffExp)
		b.blk(il, "ffn_up_shexp.weight", "", embd, ffExp)
		b.blk(il, "ffn_down_shexp.weight", "", ffExp, embd)
	}
	b.add("output_norm.weight", "", embd)
	b.add("output.weight", "out", embd, vocab)
	return b.layout()
}

// Qwen3MoE is a Qwen3 MoE model (qwen3moe) of the given size: q/k norms, 4 KV heads of 128,
// 128 experts of which 8 are used, no shared expert.
func Qwen3MoE(q Quant, withVocab bool, layers, embd, heads, ffExp int) (Layout, error) {
	const vocab, kvHeads, head, experts = 151936, 4, 128, 128
	b := &builder{arch: "qwen3moe", q: q, layers: layers, vocab: vocab, tokens: withVocab}
	b.u32("block_count", layers)
	b.u32("context_length", 40960)
	b.u32("embedding_length", embd)
	b.u32("feed_forward_length", 6144)
	b.u32("attention.head_count", heads)
	b.u32("attention.head_count_kv", kvHeads)
	b.f32("rope.freq_base", 1e6)
	b.f32("attention.layer_norm_rms_epsilon", 1e-6)
	b.u32("expert_used_count", 8)
	b.u32("attention.key_length", head)
	b.u32("attention.value_length", head)
	b.u32("expert_count", experts)
	b.u32("expert_feed_forward_length", ffExp)
	b.add("token_embd.weight", "", int64(embd), vocab)
	for il := range layers {
		b.blk(il, "attn_norm.weight", "", int64(embd))
		b.blk(il, "attn_q.weight", "", int64(embd), int64(heads*head))
		b.blk(il, "attn_k.weight", "", int64(embd), kvHeads*head)
		b.blk(il, "attn_v.weight", "v", int64(embd), kvHeads*head)
		b.blk(il, "attn_output.weight", "", int64(heads*head), int64(embd))
		b.blk(il, "attn_k_norm.weight", "", head)
		b.blk(il, "attn_q_norm.weight", "", head)
		b.blk(il, "ffn_norm.weight", "", int64(embd))
		b.blk(il, "ffn_gate_inp.weight", "", int64(embd), experts)
		b.blk(il, "ffn_gate_exps.weight", "", int64(embd), int64(ffExp), experts)
		b.blk(il, "ffn_down_exps.weight", "down", int64(ffExp), int64(embd), experts)
		b.blk(il, "ffn_up_exps.weight", "", int64(embd), int64(ffExp), experts)
	}
	b.add("output_norm.weight", "", int64(embd))
	b.add("output.weight", "out", int64(embd), vocab)
	return b.layout()
}

// Qwen3_30B_A3B is Qwen3-30B-A3B: 48 blocks, n_embd 2048, 32 heads (4 KV) of 128, experts of
// width 768.
func Qwen3_30B_A3B(q Quant, withVocab bool) (Layout, error) {
	return Qwen3MoE(q, withVocab, 48, 2048, 32, 768)
}

// Qwen3_235B_A22B is Qwen3-235B-A22B: 94 blocks, n_embd 4096, 64 heads (4 KV) of 128, experts
// of width 1536.
func Qwen3_235B_A22B(q Quant, withVocab bool) (Layout, error) {
	return Qwen3MoE(q, withVocab, 94, 4096, 64, 1536)
}
