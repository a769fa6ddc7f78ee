package synth

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/moerun/moerun/tensor"
)

func typesOf(t *testing.T, spec string, opts Options) map[string]tensor.Type {
	t.Helper()
	m, err := Build(spec, opts)
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]tensor.Type{}
	for _, ts := range m.Tensors {
		types[ts.Name] = ts.Type
	}
	return types
}

// want is an expected type per tensor name; "%d" in a name is every block in blocks.
type want struct {
	name   string
	blocks []int
	typ    tensor.Type
}

func check(t *testing.T, spec string, opts Options, wants []want) {
	t.Helper()
	types := typesOf(t, spec, opts)
	for _, w := range wants {
		names := []string{w.name}
		if w.blocks != nil {
			names = nil
			for _, b := range w.blocks {
				names = append(names, fmt.Sprintf(w.name, b))
			}
		}
		for _, n := range names {
			got, ok := types[n]
			if !ok {
				t.Errorf("%s: no tensor %s", spec, n)
			} else if got != w.typ {
				t.Errorf("%s: %s is %s, want %s", spec, n, got, w.typ)
			}
		}
	}
}

func span(from, to int) []int {
	var out []int
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

func without(all, drop []int) []int {
	skip := map[int]bool{}
	for _, d := range drop {
		skip[d] = true
	}
	var out []int
	for _, a := range all {
		if !skip[a] {
			out = append(out, a)
		}
	}
	return out
}

// The expectations below are worked out by hand from llama-quant.cpp's rules: in Q4_K_M and
// Q5_K_M, attn_v and ffn_down get Q6_K in "more bits" layers — the first and last eighth of
// the n layers and every third layer between (i − n/8 ≡ 2 mod 3); the output head gets Q6_K
// unless the mix is Q8_0; 1-D tensors, norms and routers stay F32; rows that are not whole
// 256-blocks fall back (Q4_K→Q5_0, Q6_K→Q8_0, IQ4_XS→IQ4_NL).
func TestMixRules(t *testing.T) {
	// Qwen3-30B-A3B, 48 layers: n/8 = 6, 7n/8 = 42.
	q30MoreBits := append(append(span(0, 5), 8, 11, 14, 17, 20, 23, 26, 29, 32, 35, 38, 41), span(42, 47)...)
	q30Rest := without(span(0, 47), q30MoreBits)
	all48 := span(0, 47)
	q30Common := func(def tensor.Type) []want {
		return []want{
			{"blk.%d.attn_q.weight", all48, def}, {"blk.%d.attn_k.weight", all48, def},
			{"blk.%d.attn_output.weight", all48, def}, {"blk.%d.ffn_gate_exps.weight", all48, def},
			{"blk.%d.ffn_up_exps.weight", all48, def}, {"blk.%d.ffn_gate_inp.weight", all48, tensor.F32},
			{"blk.%d.attn_norm.weight", all48, tensor.F32}, {"blk.%d.attn_q_norm.weight", all48, tensor.F32},
			{"output_norm.weight", nil, tensor.F32},
		}
	}
	check(t, "qwen3-30b-a3b:q4_k_m", Options{}, append(q30Common(tensor.Q4_K),
		want{"blk.%d.attn_v.weight", q30MoreBits, tensor.Q6_K}, want{"blk.%d.attn_v.weight", q30Rest, tensor.Q4_K},
		want{"blk.%d.ffn_down_exps.weight", q30MoreBits, tensor.Q6_K}, want{"blk.%d.ffn_down_exps.weight", q30Rest, tensor.Q4_K},
		want{"output.weight", nil, tensor.Q6_K}, want{"token_embd.weight", nil, tensor.Q4_K}))
	check(t, "qwen3-30b-a3b:q5_k_m", Options{}, append(q30Common(tensor.Q5_K),
		want{"blk.%d.attn_v.weight", q30MoreBits, tensor.Q6_K}, want{"blk.%d.attn_v.weight", q30Rest, tensor.Q5_K},
		want{"blk.%d.ffn_down_exps.weight", q30MoreBits, tensor.Q6_K}, want{"blk.%d.ffn_down_exps.weight", q30Rest, tensor.Q5_K},
		want{"output.weight", nil, tensor.Q6_K}, want{"token_embd.weight", nil, tensor.Q5_K}))
	check(t, "qwen3-30b-a3b:q6_k", Options{}, append(q30Common(tensor.Q6_K),
		want{"blk.%d.attn_v.weight", all48, tensor.Q6_K}, want{"blk.%d.ffn_down_exps.weight", all48, tensor.Q6_K},
		want{"output.weight", nil, tensor.Q6_K}, want{"token_embd.weight", nil, tensor.Q6_K}))
	check(t, "qwen3-30b-a3b:q8_0", Options{}, append(q30Common(tensor.Q8_0),
		want{"blk.%d.attn_v.weight", all48, tensor.Q8_0}, want{"output.weight", nil, tensor.Q8_0},
		want{"token_embd.weight", nil, tensor.Q8_0}))
	check(t, "qwen3-30b-a3b:f16", Options{}, append(q30Common(tensor.F16),
		want{"output.weight", nil, tensor.F16}, want{"token_embd.weight", nil, tensor.F16}))
	// Q4_0: the output head still gets Q6_K; with an importance matrix the first eighth of
	// ffn_down gets Q4_1.
	check(t, "qwen3-30b-a3b:q4_0", Options{}, append(q30Common(tensor.Q4_0),
		want{"blk.%d.ffn_down_exps.weight", all48, tensor.Q4_0}, want{"output.weight", nil, tensor.Q6_K},
		want{"token_embd.weight", nil, tensor.Q4_0}))
	check(t, "qwen3-30b-a3b:q4_0", Options{Imatrix: true}, []want{
		{"blk.%d.ffn_down_exps.weight", span(0, 5), tensor.Q4_1}, {"blk.%d.ffn_down_exps.weight", span(6, 47), tensor.Q4_0}})
	// IQ4_XS: attn_v gets Q5_K when n_head/n_head_kv ≥ 4 (32/4 = 8); without an importance
	// matrix the first eighth of ffn_down gets Q5_K.
	check(t, "qwen3-30b-a3b:iq4_xs", Options{}, append(q30Common(tensor.IQ4_XS),
		want{"blk.%d.attn_v.weight", all48, tensor.Q5_K}, want{"blk.%d.ffn_down_exps.weight", span(0, 5), tensor.Q5_K},
		want{"blk.%d.ffn_down_exps.weight", span(6, 47), tensor.IQ4_XS}, want{"output.weight", nil, tensor.Q6_K},
		want{"token_embd.weight", nil, tensor.IQ4_XS}))
	check(t, "qwen3-30b-a3b:iq4_xs", Options{Imatrix: true}, []want{{"blk.%d.ffn_down_exps.weight", all48, tensor.IQ4_XS}})
	// MXFP4_MOE: expert stacks MXFP4, everything else Q8_0.
	check(t, "qwen3-30b-a3b:mxfp4", Options{}, []want{
		{"blk.%d.ffn_down_exps.weight", all48, tensor.MXFP4}, {"blk.%d.ffn_gate_exps.weight", all48, tensor.MXFP4},
		{"blk.%d.attn_v.weight", all48, tensor.Q8_0}, {"output.weight", nil, tensor.Q8_0}, {"token_embd.weight", nil, tensor.Q8_0}})

	// DeepSeek-V3, 61 layers: n/8 = 7, 7n/8 = 53. The split MLA tensors are not attn_v-like
	// (their names do not contain "attn_v.weight"); attn_k_b rows are 128 values, not a
	// whole Q4_K block, so they fall back to Q5_0. Expert stacks include attn_k_b/v_b under
	// MXFP4_MOE (a third dimension of 128 heads).
	dsMoreBits := []int{0, 1, 2, 9, 12, 54, 60}
	dsRest := []int{7, 8, 10, 11, 13, 52}
	check(t, "deepseek-v3:q4_k_m", Options{}, []want{
		{"blk.%d.attn_k_b.weight", span(0, 60), tensor.Q5_0}, {"blk.%d.attn_v_b.weight", span(0, 60), tensor.Q4_K},
		{"blk.%d.attn_kv_a_mqa.weight", span(0, 60), tensor.Q4_K}, {"blk.%d.attn_q_b.weight", span(0, 60), tensor.Q4_K},
		{"blk.%d.ffn_down.weight", span(0, 2), tensor.Q6_K}, {"blk.%d.ffn_down_exps.weight", dsMoreBits[3:], tensor.Q6_K},
		{"blk.%d.ffn_down_shexp.weight", dsMoreBits[3:], tensor.Q6_K}, {"blk.%d.ffn_down_exps.weight", dsRest, tensor.Q4_K},
		{"blk.%d.ffn_down_shexp.weight", dsRest, tensor.Q4_K}, {"blk.%d.exp_probs_b.bias", span(3, 60), tensor.F32},
		{"blk.%d.attn_kv_a_norm.weight", span(0, 60), tensor.F32}, {"output.weight", nil, tensor.Q6_K},
	})
	check(t, "deepseek-v3:mxfp4", Options{}, []want{
		{"blk.%d.attn_k_b.weight", span(0, 60), tensor.MXFP4}, {"blk.%d.attn_q_a.weight", span(0, 60), tensor.Q8_0},
		{"blk.%d.ffn_gate_exps.weight", span(3, 60), tensor.MXFP4}, {"blk.%d.ffn_gate_shexp.weight", span(3, 60), tensor.Q8_0},
	})

	// Llama-3.1-70B is LLM_TYPE_70B: attn_v never stays Q4_K (Q5_K, or Q6_K in more-bits
	// layers). 80 layers: n/8 = 10, 7n/8 = 70. Dense ffn_down counts layers in file order.
	check(t, "llama-3.1-70b:q4_k_m", Options{}, []want{
		{"blk.%d.attn_v.weight", []int{0, 9, 12, 15, 70, 79}, tensor.Q6_K}, {"blk.%d.attn_v.weight", []int{10, 11, 13, 68}, tensor.Q5_K},
		{"blk.%d.ffn_down.weight", []int{0, 9, 12, 15, 70, 79}, tensor.Q6_K}, {"blk.%d.ffn_down.weight", []int{10, 11, 13, 68}, tensor.Q4_K},
		{"rope_freqs.weight", nil, tensor.F32},
	})
	// Mixtral has 8 experts: attn_v and attn_k get Q8_0, attn_output Q5_K.
	check(t, "mixtral-8x7b:q4_k_m", Options{}, []want{
		{"blk.%d.attn_v.weight", span(0, 31), tensor.Q8_0}, {"blk.%d.attn_k.weight", span(0, 31), tensor.Q8_0},
		{"blk.%d.attn_output.weight", span(0, 31), tensor.Q5_K}, {"blk.%d.attn_q.weight", span(0, 31), tensor.Q4_K},
	})
	// gpt-oss: rows of 2880 values are not whole 256-blocks; the MXFP4 experts are kept.
	// 24 layers: n/8 = 3, 7n/8 = 21.
	check(t, "gpt-oss-20b:q4_k_m", Options{}, []want{
		{"blk.%d.ffn_gate_exps.weight", span(0, 23), tensor.MXFP4}, {"blk.%d.ffn_down_exps.weight", span(0, 23), tensor.MXFP4},
		{"blk.%d.attn_q.weight", span(0, 23), tensor.Q5_0}, {"blk.%d.attn_output.weight", span(0, 23), tensor.Q4_K},
		{"blk.%d.attn_v.weight", []int{0, 2, 5, 21, 23}, tensor.Q8_0}, {"blk.%d.attn_v.weight", []int{3, 4, 6}, tensor.Q5_0},
		{"blk.%d.ffn_gate_exps.bias", span(0, 23), tensor.F32}, {"blk.%d.attn_sinks.weight", span(0, 23), tensor.F32},
		{"output.weight", nil, tensor.Q8_0}, {"token_embd.weight", nil, tensor.Q5_0},
	})
	check(t, "gpt-oss-20b:f16", Options{}, []want{{"blk.%d.ffn_up_exps.weight", span(0, 23), tensor.MXFP4},
		{"blk.%d.attn_q.weight", span(0, 23), tensor.F16}})
	// GLM-4.5-Air: block_count 47 counts the MTP block (n/8 = 5, 7n/8 = 41); expert rows of
	// 1408 values fall back; the MTP block's own embedding and head are ordinary weights.
	check(t, "glm-4.5-air:q4_k_m", Options{}, []want{
		{"blk.%d.ffn_down_exps.weight", []int{1, 4, 7, 41, 46}, tensor.Q8_0}, {"blk.%d.ffn_down_exps.weight", []int{5, 6, 8, 39}, tensor.Q5_0},
		{"blk.%d.ffn_gate_exps.weight", span(1, 46), tensor.Q4_K}, {"blk.%d.exp_probs_b.bias", span(1, 46), tensor.F32},
		{"blk.46.nextn.embed_tokens.weight", nil, tensor.Q4_K}, {"blk.46.nextn.eh_proj.weight", nil, tensor.Q4_K},
		{"blk.46.nextn.enorm.weight", nil, tensor.F32},
	})
	// Qwen3.5: the linear-attention attn_qkv counts as attn_v-like along with the full
	// attention layers' attn_v, one per layer in order, so the more-bits rule runs over all
	// 41 blocks (n/8 = 5, 7n/8 = 35).
	check(t, "qwen3.5-35b-a3b:q4_k_m", Options{}, []want{
		{"blk.%d.attn_qkv.weight", []int{0, 1, 2, 4, 36}, tensor.Q6_K}, {"blk.%d.attn_qkv.weight", []int{5, 6, 8, 9}, tensor.Q4_K},
		{"blk.%d.attn_v.weight", []int{3, 7, 39, 40}, tensor.Q6_K}, {"blk.%d.attn_v.weight", []int{11, 15}, tensor.Q4_K},
		{"blk.%d.ssm_conv1d.weight", span(0, 2), tensor.F32}, {"blk.%d.ssm_a", span(0, 2), tensor.F32},
		{"blk.%d.ffn_gate_inp_shexp.weight", span(0, 40), tensor.F32}, {"blk.%d.ssm_beta.weight", span(0, 2), tensor.Q4_K},
	})
}

// llama-quantize walks and writes tensors global first, then block by block in numeric
// order (blk.2 before blk.10), by name within a block; the converter's order is kept for f16.
func TestQuantizerOrder(t *testing.T) {
	m, err := Build("qwen3-30b-a3b:q4_k_m", Options{})
	if err != nil {
		t.Fatal(err)
	}
	first := []string{"output.weight", "output_norm.weight", "token_embd.weight", "blk.0.attn_k.weight",
		"blk.0.attn_k_norm.weight", "blk.0.attn_norm.weight", "blk.0.attn_output.weight", "blk.0.attn_q.weight"}
	for i, name := range first {
		if m.Tensors[i].Name != name {
			t.Errorf("tensor %d is %s, want %s", i, m.Tensors[i].Name, name)
		}
	}
	last := -1
	for _, ts := range m.Tensors {
		if b, ok := blockOf(ts.Name); ok {
			if b < last {
				t.Fatalf("%s after block %d", ts.Name, last)
			}
			last = b
		}
	}
	f16, err := Build("qwen3-30b-a3b:f16", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if f16.Tensors[0].Name != "token_embd.weight" || f16.Tensors[len(f16.Tensors)-1].Name != "output.weight" {
		t.Errorf("f16 keeps the converter's order: %s … %s", f16.Tensors[0].Name, f16.Tensors[len(f16.Tensors)-1].Name)
	}
}

// TestTypesMatchLlamaQuantize compares every preset's tensor order and types in every
// quantized mix with what llama.cpp's own llama-quantize chose for the same layout
// (testdata/quantize-types.txt.gz, made by testdata/regen-quantize-types.sh).
func TestTypesMatchLlamaQuantize(t *testing.T) {
	f, err := os.Open("testdata/quantize-types.txt.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	golden := map[string][]string{}
	var spec string
	sc := bufio.NewScanner(zr)
	for sc.Scan() {
		line := sc.Text()
		if s, ok := strings.CutPrefix(line, "# "); ok {
			spec = s
			continue
		}
		golden[spec] = append(golden[spec], line)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if want := len(Presets()) * (len(Mixes()) - 1); len(golden) != want {
		t.Fatalf("golden has %d models, want every preset in every quantized mix (%d)", len(golden), want)
	}
	for spec, lines := range golden {
		m, err := Build(spec, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Tensors) != len(lines) {
			t.Errorf("%s: %d tensors, llama-quantize wrote %d", spec, len(m.Tensors), len(lines))
			continue
		}
		bad := 0
		for i, line := range lines {
			name, typName, _ := strings.Cut(line, " ")
			typ, err := tensor.ParseType(typName)
			if err != nil {
				t.Fatalf("%s: golden line %q: %v", spec, line, err)
			}
			if got := m.Tensors[i]; got.Name != name || got.Type != typ {
				if bad++; bad <= 3 {
					t.Errorf("%s: tensor %d is %s %s, llama-quantize wrote %s %s", spec, i, got.Name, got.Type, name, typ)
				}
			}
		}
		if bad > 3 {
			t.Errorf("%s: %d tensors differ in all", spec, bad)
		}
	}
}
