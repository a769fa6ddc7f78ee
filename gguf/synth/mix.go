package synth

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/tensor"
)

// Mix is a file type of llama.cpp's quantizer: a default tensor type plus the per-tensor
// rules llama-quantize applies for it (src/llama-quant.cpp, llama_tensor_get_type).
type Mix struct {
	Name     string      // as the command line spells it: "q4_k_m"
	FileType uint32      // llama_ftype, written as general.file_type
	Default  tensor.Type // the type most weights get
}

// The llama_ftype values (include/llama.h) of the mixes we build.
const (
	ftypeF16      = 1
	ftypeQ4_0     = 2
	ftypeQ8_0     = 7
	ftypeQ4_K_M   = 15
	ftypeQ5_K_M   = 17
	ftypeQ6_K     = 18
	ftypeIQ4_XS   = 30
	ftypeMXFP4MoE = 38
)

var mixes = []Mix{
	{"f16", ftypeF16, tensor.F16},
	{"q8_0", ftypeQ8_0, tensor.Q8_0},
	{"q6_k", ftypeQ6_K, tensor.Q6_K},
	{"q5_k_m", ftypeQ5_K_M, tensor.Q5_K},
	{"q4_k_m", ftypeQ4_K_M, tensor.Q4_K},
	{"q4_0", ftypeQ4_0, tensor.Q4_0},
	{"iq4_xs", ftypeIQ4_XS, tensor.IQ4_XS},
	{"mxfp4", ftypeMXFP4MoE, tensor.MXFP4},
}

// Mixes lists the supported mixes, largest first.
func Mixes() []Mix { return append([]Mix(nil), mixes...) }

// LookupMix finds a mix by name, ignoring case.
func LookupMix(name string) (Mix, error) {
	name = strings.ToLower(strings.TrimSpace(name))
	for _, m := range mixes {
		if m.Name == name {
			return m, nil
		}
	}
	var names []string
	for _, m := range mixes {
		names = append(names, m.Name)
	}
	return Mix{}, fmt.Errorf("unknown mix %q; known mixes: %s", name, strings.Join(names, ", "))
}

// converterType is the type convert_hf_to_gguf.py gives a tensor with --outtype f16
// (ModelBase.prepare_tensors): F32 for 1-D tensors, norms, routers, the Qwen shared-expert
// gate, conv1d kernels and anything that is not a ".weight"; F16 for the rest. Experts that
// a model publishes in MXFP4 are copied as they are.
func converterType(p *Preset, d tensorDecl) tensor.Type {
	name := d.name
	switch {
	case len(d.shape) <= 1, strings.HasSuffix(name, "_norm.weight"),
		strings.HasSuffix(name, ".ffn_gate_inp.weight"), strings.HasSuffix(name, ".ffn_gate_inp_shexp.weight"),
		strings.Contains(name, "ssm_conv1d"), !strings.HasSuffix(name, ".weight"),
		strings.HasSuffix(name, ".indexer.proj.weight"): // ModelBase.prepare_tensors keeps it F32
		return tensor.F32
	case p.NativeMXFP4 && isRoutedExpertWeight(name):
		return tensor.MXFP4
	}
	return tensor.F16
}

func isRoutedExpertWeight(name string) bool {
	return gguf.ClassOf(name) == gguf.ClassRoutedExpert && strings.HasSuffix(name, ".weight")
}

// category is llama-quant.cpp's coarse tensor role, matched on substrings of the name in
// the same precedence.
type category int

const (
	catOther category = iota
	catTokenEmbd
	catOutput
	catAttnQKV
	catAttnKVB
	catAttnV
	catAttnK
	catAttnQ
	catAttnOutput
	catFFNUp
	catFFNGate
	catFFNDown
)

func categoryOf(name string) category {
	switch {
	case name == "output.weight":
		return catOutput
	case name == "token_embd.weight" || name == "per_layer_token_embd.weight":
		return catTokenEmbd
	case strings.Contains(name, "attn_qkv.weight"):
		return catAttnQKV
	case strings.Contains(name, "attn_kv_b.weight"):
		return catAttnKVB
	case strings.Contains(name, "attn_v.weight"):
		return catAttnV
	case strings.Contains(name, "attn_k.weight"):
		return catAttnK
	case strings.Contains(name, "attn_q.weight"):
		return catAttnQ
	case strings.Contains(name, "attn_output.weight"):
		return catAttnOutput
	case strings.Contains(name, "ffn_up"):
		return catFFNUp
	case strings.Contains(name, "ffn_gate"):
		return catFFNGate
	case strings.Contains(name, "ffn_down"):
		return catFFNDown
	}
	return catOther
}

// attnVLike are the tensors llama-quantize treats as attn_v (most sensitive to quantization).
func (c category) attnVLike() bool { return c == catAttnV || c == catAttnQKV || c == catAttnKVB }

// nDims is ggml_n_dims: trailing dimensions of size 1 do not count.
func nDims(shape []int64) int {
	n := len(shape)
	for n > 1 && shape[n-1] == 1 {
		n--
	}
	return max(n, 1)
}

// allowsQuantization is tensor_allows_quantization for the tensors our layouts contain.
func allowsQuantization(d tensorDecl) bool {
	name := d.name
	return nDims(d.shape) >= 2 &&
		strings.HasSuffix(name, "weight") &&
		!strings.Contains(name, "_norm.weight") &&
		!strings.Contains(name, "ffn_gate_inp.weight") &&
		!strings.Contains(name, "ssm_conv1d")
}

// quantizer is llama-quantize's state while it picks types: the model facts its rules read
// and the running counters of attn_v-like and ffn tensors.
type quantizer struct {
	mix     Mix
	imatrix bool
	nLayer  int  // n_layer_all: every block, MTP included
	nExpert int  // n_expert, at least 1
	nGQA    int  // n_head / n_head_kv
	is70B   bool // LLM_TYPE_70B
	tied    bool // no output.weight: token_embd doubles as the output

	nAttnV, iAttnV int
	iFFNDown       int
}

// chooseTypes assigns every tensor the type the converter (f16) or the converter followed by
// llama-quantize (every other mix) gives it. decls must be in llama-quantize's order
// (sortForQuantizer), because its counters depend on it.
func chooseTypes(p *Preset, mix Mix, imatrix bool, decls []tensorDecl) ([]tensor.Type, error) {
	c := &p.Config
	types := make([]tensor.Type, len(decls))
	for i, d := range decls {
		types[i] = converterType(p, d)
	}
	if mix.FileType == ftypeF16 {
		return types, nil
	}
	q := &quantizer{mix: mix, imatrix: imatrix, nLayer: c.blocks(), nExpert: max(1, c.Experts),
		nGQA: c.Heads / c.HeadsKV, tied: true}
	if l := c.layout(); l.is70B != nil {
		q.is70B = l.is70B(c)
	}
	for _, d := range decls {
		switch categoryOf(d.name) {
		case catOutput:
			q.tied = false
		case catAttnV, catAttnQKV, catAttnKVB:
			q.nAttnV++
		}
	}
	for i, d := range decls {
		// Published MXFP4 experts stay MXFP4: llama-quantize refuses to requantize them.
		if !allowsQuantization(d) || types[i] == tensor.MXFP4 {
			continue
		}
		t, err := q.pick(d)
		if err != nil {
			return nil, fmt.Errorf("tensor %s: %w", d.name, err)
		}
		types[i] = t
	}
	return types, nil
}

// pick is llama_tensor_get_type for a quantized default type: the mix's rules, then the
// fallback for rows that are not a whole number of blocks.
func (q *quantizer) pick(d tensorDecl) (tensor.Type, error) {
	t, err := q.rule(d)
	if err != nil {
		return 0, err
	}
	return fallback(d, t)
}

func (q *quantizer) rule(d tensorDecl) (tensor.Type, error) {
	ft := q.mix.FileType
	t := q.mix.Default
	cat := categoryOf(d.name)
	switch {
	case cat == catOutput || q.tied && cat == catTokenEmbd:
		switch {
		case ft == ftypeMXFP4MoE, d.shape[0]%t.BlockSize() != 0:
			return tensor.Q8_0, nil
		case t != tensor.Q8_0:
			return tensor.Q6_K, nil
		}
		return t, nil
	case ft == ftypeMXFP4MoE:
		// Expert stacks (a third dimension) get MXFP4, everything else Q8_0.
		if len(d.shape) > 2 && d.shape[2] > 1 {
			return tensor.MXFP4, nil
		}
		return tensor.Q8_0, nil
	case cat == catTokenEmbd:
		return t, nil
	case cat.attnVLike():
		switch {
		case ft == ftypeIQ4_XS && q.nGQA >= 4:
			t = tensor.Q5_K
		case (ft == ftypeQ4_K_M || ft == ftypeQ5_K_M) && useMoreBits(q.iAttnV, q.nAttnV):
			t = tensor.Q6_K
		}
		if q.is70B && (t == tensor.Q3_K || t == tensor.Q4_K) {
			t = tensor.Q5_K
		}
		if q.nExpert == 8 {
			t = tensor.Q8_0
		}
		q.iAttnV++
	case cat == catAttnK:
		if q.nExpert == 8 {
			t = tensor.Q8_0
		}
	case cat == catFFNDown:
		layer, err := q.layerOf(d.name, q.iFFNDown)
		if err != nil {
			return 0, err
		}
		switch {
		case ft == ftypeQ4_K_M:
			if useMoreBits(layer, q.nLayer) {
				t = tensor.Q6_K
			}
		case layer < q.nLayer/8 && ft == ftypeIQ4_XS && !q.imatrix:
			t = tensor.Q5_K
		case ft == ftypeQ5_K_M && useMoreBits(layer, q.nLayer):
			t = tensor.Q6_K
		case ft == ftypeQ4_0 && q.imatrix && layer < q.nLayer/8:
			t = tensor.Q4_1
		}
		q.iFFNDown++
	case cat == catAttnOutput:
		if q.nExpert == 8 && (ft == ftypeQ4_K_M || ft == ftypeIQ4_XS) {
			t = tensor.Q5_K
		}
	case cat == catFFNGate || cat == catFFNUp:
		// llama-quantize resolves their layer too, and fails the same way on a bad name.
		if _, err := q.layerOf(d.name, 0); err != nil {
			return 0, err
		}
	}
	return t, nil
}

// useMoreBits is llama-quantize's choice of the layers that get more bits: the first and
// last eighth and every third layer in between.
func useMoreBits(i, n int) bool {
	return i < n/8 || i >= 7*n/8 || (i-n/8)%3 == 2
}

// layerOf is the layer llama-quantize attributes an ffn tensor to: parsed from the name in
// MoE models (whose expert tensors need not be consecutive), the running count otherwise.
func (q *quantizer) layerOf(name string, counter int) (int, error) {
	if q.nExpert <= 1 {
		return counter, nil
	}
	layer, ok := blockOf(name)
	if !ok {
		return 0, fmt.Errorf("llama-quantize cannot determine the layer of %s", name)
	}
	if layer >= q.nLayer {
		return 0, fmt.Errorf("layer %d of %s is not below block_count %d", layer, name, q.nLayer)
	}
	return layer, nil
}

// blockOf parses the N of "blk.N." like sscanf("blk.%d.").
func blockOf(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "blk.")
	if !ok {
		return 0, false
	}
	num, _, ok := strings.Cut(rest, ".")
	n, err := strconv.Atoi(num)
	return n, ok && err == nil && n >= 0
}

// fallback is tensor_type_fallback: a type whose block does not divide the row length
// falls back to a 32-element type of similar size, and to F16 if even that does not fit.
func fallback(d tensorDecl, t tensor.Type) (tensor.Type, error) {
	ncols := d.shape[0]
	if ncols%t.BlockSize() == 0 {
		return t, nil
	}
	var alt tensor.Type
	switch t {
	case tensor.IQ4_XS:
		alt = tensor.IQ4_NL
	case tensor.Q2_K, tensor.Q3_K:
		alt = tensor.Q4_0
	case tensor.Q4_K:
		alt = tensor.Q5_0
	case tensor.Q5_K:
		alt = tensor.Q5_1
	case tensor.Q6_K:
		alt = tensor.Q8_0
	default:
		return 0, fmt.Errorf("rows of %d values are not whole %s blocks of %d, and llama-quantize has no fallback for %s",
			ncols, t, t.BlockSize(), t)
	}
	if ncols%alt.BlockSize() != 0 {
		return tensor.F16, nil
	}
	return alt, nil
}

// sortForQuantizer orders tensors as llama-quantize walks (and writes) them: global tensors
// first, then by block number, by name within a block (llama_model_loader's
// weight_name_comparer).
func sortForQuantizer(decls []tensorDecl) []tensorDecl {
	out := append([]tensorDecl(nil), decls...)
	layer := func(name string) int {
		if n, ok := blockOf(name); ok {
			return n
		}
		return -1
	}
	sort.SliceStable(out, func(i, j int) bool {
		li, lj := layer(out[i].name), layer(out[j].name)
		if li != lj {
			return li < lj
		}
		return out[i].name < out[j].name
	})
	return out
}
