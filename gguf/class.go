package gguf

import (
	"strconv"
	"strings"
)

// Class groups tensors by the part of the model they belong to. It is derived from the GGUF
// name once, here, and reused by inspect, placement and reports.
type Class int

// The tensor classes, in the order reports list them.
const (
	ClassEmbedding    Class = iota // token_embd, position_embd, …
	ClassAttention                 // attn_* and the token mixers that replace attention (ssm_*, time_mix_*)
	ClassNorm                      // every *norm* weight
	ClassRouter                    // ffn_gate_inp, exp_probs_b: the MoE gating network
	ClassDenseFFN                  // ffn_gate/up/down of dense (non-MoE) layers
	ClassSharedExpert              // *_shexp: experts every token goes through
	ClassRoutedExpert              // *_exps: the per-token routed experts
	ClassOutput                    // output (the LM head)
	ClassOther                     // anything else (rope_freqs, nextn.eh_proj, …)
)

var classNames = [...]string{"embedding", "attention", "norm", "router", "dense_ffn", "shared_expert", "routed_expert", "output", "other"}

// Classes lists every class in report order.
func Classes() []Class {
	out := make([]Class, len(classNames))
	for i := range out {
		out[i] = Class(i)
	}
	return out
}

// String is the class's stable name, as JSON output uses it ("routed_expert").
func (c Class) String() string {
	if c >= 0 && int(c) < len(classNames) {
		return classNames[c]
	}
	return "class(" + strconv.Itoa(int(c)) + ")"
}

// LayerOf returns N for a tensor named "blk.N.…", and false for global tensors.
func LayerOf(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "blk.")
	if !ok {
		return 0, false
	}
	num, _, ok := strings.Cut(rest, ".")
	if !ok || num == "" {
		return 0, false
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

// ClassOf derives a tensor's class from its GGUF name.
func ClassOf(name string) Class {
	base := strings.TrimSuffix(strings.TrimSuffix(name, ".weight"), ".bias")
	if _, ok := LayerOf(base); ok {
		base = base[strings.IndexByte(base[len("blk."):], '.')+len("blk.")+1:]
	}
	// MTP (NextN) blocks prefix their own names: blk.N.nextn.enorm, …
	base = strings.TrimPrefix(base, "nextn.")
	switch {
	case strings.Contains(base, "_exps") || strings.Contains(base, "_chexps"):
		return ClassRoutedExpert
	case strings.Contains(base, "_shexp"):
		return ClassSharedExpert
	case base == "ffn_gate_inp" || base == "exp_probs_b" || base == "ffn_gate_tid2eid":
		return ClassRouter
	case strings.HasSuffix(base, "norm") || strings.Contains(base, "_norm") || strings.Contains(base, "norm_"):
		return ClassNorm
	case base == "token_embd" || base == "position_embd" || base == "token_types" ||
		base == "per_layer_token_embd" || base == "embed_tokens":
		return ClassEmbedding
	case base == "output" || base == "shared_head_head":
		return ClassOutput
	case strings.HasPrefix(base, "attn_") || strings.HasPrefix(base, "ssm_") ||
		strings.HasPrefix(base, "time_mix_") || strings.HasPrefix(base, "indexer"):
		return ClassAttention
	case base == "ffn_gate" || base == "ffn_up" || base == "ffn_down" || base == "ffn_gate_up" ||
		strings.HasPrefix(base, "ffn_gate.") || strings.HasPrefix(base, "ffn_up.") || strings.HasPrefix(base, "ffn_down."):
		return ClassDenseFFN
	}
	return ClassOther
}
