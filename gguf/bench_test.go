package gguf

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/moerun/moerun/tensor"
)

// deepseekV3Header builds a header the size of DeepSeek-V3's (Q4_K_M-like types, real
// shapes): 61 blocks (3 dense) plus the output, 1,086 tensors, and a 129,280-token
// vocabulary with 127,741 merges in the metadata.
func deepseekV3Header(tb testing.TB) (Metadata, []TensorSpec) {
	rng := rand.New(rand.NewPCG(1, 2))
	word := func() string {
		b := make([]byte, 2+rng.IntN(10))
		for i := range b {
			b[i] = byte('a' + rng.IntN(26))
		}
		return string(b)
	}
	tokens := make([]string, 129280)
	types := make([]int32, len(tokens))
	for i := range tokens {
		tokens[i], types[i] = word(), 1
	}
	merges := make([]string, 127741)
	for i := range merges {
		merges[i] = word() + " " + word()
	}
	md, err := NewMetadata(
		KV{"general.architecture", NewValue("deepseek2")},
		KV{"general.name", NewValue("DeepSeek V3 0324")},
		KV{"deepseek2.block_count", NewValue(uint32(61))},
		KV{"deepseek2.context_length", NewValue(uint32(163840))},
		KV{"deepseek2.embedding_length", NewValue(uint32(7168))},
		KV{"deepseek2.expert_count", NewValue(uint32(256))},
		KV{"deepseek2.expert_used_count", NewValue(uint32(8))},
		KV{"tokenizer.ggml.model", NewValue("gpt2")},
		KV{"tokenizer.ggml.tokens", NewArray(tokens)},
		KV{"tokenizer.ggml.token_type", NewArray(types)},
		KV{"tokenizer.ggml.merges", NewArray(merges)},
	)
	if err != nil {
		tb.Fatal(err)
	}
	const embd, vocab, experts, ffExp, ffDense = 7168, 129280, 256, 2048, 18432
	specs := []TensorSpec{{"token_embd.weight", tensor.Q4_K, []int64{embd, vocab}}}
	for l := range 61 {
		add := func(name string, typ tensor.Type, shape ...int64) {
			specs = append(specs, TensorSpec{fmt.Sprintf("blk.%d.%s", l, name), typ, shape})
		}
		add("attn_norm.weight", tensor.F32, embd)
		add("attn_q_a_norm.weight", tensor.F32, 1536)
		add("attn_kv_a_norm.weight", tensor.F32, 512)
		add("attn_q_a.weight", tensor.Q4_K, embd, 1536)
		add("attn_q_b.weight", tensor.Q4_K, 1536, 128*192)
		add("attn_kv_a_mqa.weight", tensor.Q4_K, embd, 576)
		add("attn_k_b.weight", tensor.Q8_0, 128, 512, 128)
		add("attn_v_b.weight", tensor.Q8_0, 512, 128, 128)
		add("attn_output.weight", tensor.Q4_K, 128*128, embd)
		add("ffn_norm.weight", tensor.F32, embd)
		if l < 3 {
			add("ffn_gate.weight", tensor.Q4_K, embd, ffDense)
			add("ffn_up.weight", tensor.Q4_K, embd, ffDense)
			add("ffn_down.weight", tensor.Q6_K, ffDense, embd)
			continue
		}
		add("ffn_gate_inp.weight", tensor.F32, embd, experts)
		add("exp_probs_b.bias", tensor.F32, experts)
		add("ffn_gate_exps.weight", tensor.Q4_K, embd, ffExp, experts)
		add("ffn_up_exps.weight", tensor.Q4_K, embd, ffExp, experts)
		add("ffn_down_exps.weight", tensor.Q6_K, ffExp, embd, experts)
		add("ffn_gate_shexp.weight", tensor.Q4_K, embd, ffExp)
		add("ffn_up_shexp.weight", tensor.Q4_K, embd, ffExp)
		add("ffn_down_shexp.weight", tensor.Q6_K, ffExp, embd)
	}
	specs = append(specs, TensorSpec{"output_norm.weight", tensor.F32, []int64{embd}},
		TensorSpec{"output.weight", tensor.Q6_K, []int64{embd, vocab}})
	return md, specs
}

// BenchmarkParseDeepSeekV3Header parses the header from memory (the io.ReaderAt path).
func BenchmarkParseDeepSeekV3Header(b *testing.B) {
	md, specs := deepseekV3Header(b)
	l, err := NewLayout(md, specs)
	if err != nil {
		b.Fatal(err)
	}
	r := bytes.NewReader(l.header)
	b.SetBytes(int64(len(l.header)))
	b.ReportMetric(float64(len(specs)), "tensors")
	for b.Loop() {
		if _, err := NewReader(r, l.FileSize); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseDeepSeekV3HeaderArrayLimit parses the same header keeping only the first
// 8 elements of long arrays, as moerun place does.
func BenchmarkParseDeepSeekV3HeaderArrayLimit(b *testing.B) {
	md, specs := deepseekV3Header(b)
	l, err := NewLayout(md, specs)
	if err != nil {
		b.Fatal(err)
	}
	r := bytes.NewReader(l.header)
	b.SetBytes(int64(len(l.header)))
	for b.Loop() {
		if _, err := NewReaderWith(r, l.FileSize, Options{ArrayLimit: 8}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOpenDeepSeekV3Sparse opens a full-size (sparse) DeepSeek-V3 file through mmap,
// as `moerun inspect` does.
func BenchmarkOpenDeepSeekV3Sparse(b *testing.B) {
	md, specs := deepseekV3Header(b)
	path := filepath.Join(b.TempDir(), "deepseek-v3.gguf")
	l, err := WriteSparse(path, md, specs)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(l.DataOffset)
	b.ReportMetric(float64(l.FileSize)/1e9, "file-GB")
	for b.Loop() {
		f, err := Open(path)
		if err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
}

func TestDeepSeekV3HeaderShape(t *testing.T) {
	md, specs := deepseekV3Header(t)
	if n := len(specs); n < 1080 || n > 1120 {
		t.Errorf("%d tensors, want about 1,100", n)
	}
	l, err := NewLayout(md, specs)
	if err != nil {
		t.Fatal(err)
	}
	// DeepSeek-V3 Q4_K_M files are about 404 GB; this mix should land in that region.
	if gb := float64(l.FileSize) / 1e9; gb < 350 || gb > 450 {
		t.Errorf("file size %.0f GB", gb)
	}
}
