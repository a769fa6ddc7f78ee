package moe

import (
	"fmt"
	"math"

	"github.com/moerun/moerun/tensor"
)

// qwen2moe is Qwen1.5-MoE and Qwen2-MoE (Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B; llama.cpp's
// src/models/qwen2moe.cpp): grouped-query attention with q/k/v biases and NeoX RoPE over
// the whole head, and in every layer a softmax router over all experts whose top-k weights
// are used as they are (neither renormalised nor scaled), plus one shared expert whose
// output a sigmoid gate (ffn_gate_inp_shexp) scales per token.
var qwen2moe = architecture{
	config: func(c *Config, r *metaReader) error {
		md := r.md
		c.Rot = r.int("{arch}.rope.dimension_count", int64(c.HeadK))
		if r.err != nil {
			return r.err
		}
		if c.Router.Experts == 0 || c.Router.Used == 0 {
			return fmt.Errorf("qwen2moe needs %s and %s", md.Key("{arch}.expert_count"), md.Key("{arch}.expert_used_count"))
		}
		// llama.cpp's fallbacks for files without the expert widths.
		if c.FFExp == 0 {
			c.FFExp = c.FF / c.Router.Used
		}
		if c.FFShexp == 0 {
			c.FFShexp = c.FF
		}
		switch {
		case c.HeadK != c.HeadV || c.Rot != c.HeadK:
			return fmt.Errorf("qwen2moe needs equal key, value and rotary head sizes, the metadata says %d, %d and %d", c.HeadK, c.HeadV, c.Rot)
		case c.Heads*c.HeadK != c.Embd:
			// llama.cpp sizes attn_q and attn_output by the embedding width.
			return fmt.Errorf("qwen2moe: %d heads of %d do not make up the embedding width %d", c.Heads, c.HeadK, c.Embd)
		case c.FFExp <= 0 || c.FFShexp <= 0:
			return fmt.Errorf("qwen2moe: expert width %d, shared expert width %d", c.FFExp, c.FFShexp)
		}
		c.RoPE.Mode, c.RoPE.Dims = tensor.RoPENeoX, c.Rot
		c.KQScale = 1 / float32(math.Sqrt(float64(c.HeadK)))
		// The router is fixed by the graph: softmax, no renormalisation; llama.cpp passes
		// expert_weights_scale, which it never reads for qwen2moe (so 0: no scaling).
		c.Router.Gating, c.Router.NormWeights, c.Router.Scale = GatingSoftmax, false, 0
		return nil
	},
	attention: func(c *Config, b *binder, il int) (attention, error) {
		return bindGQA(c, b, il)
	},
	feedForward: func(c *Config, b *binder, il int) (feedForward, error) {
		f, err := bindMoE(c, b, il, false)
		if err != nil {
			return nil, err
		}
		if f.shared, err = bindDense(c, b, il, "_shexp", c.FFShexp); err != nil {
			return nil, err
		}
		if err := bindSharedGate(c, b, il, f); err != nil {
			return nil, err
		}
		return f, nil
	},
}
