package moe

import (
	"fmt"
	"math"

	"github.com/moerun/moerun/tensor"
)

// qwen3moe is Qwen3-MoE (Qwen3-30B-A3B, Qwen3-235B-A22B; llama.cpp's src/models/qwen3moe.cpp):
// grouped-query attention with per-head q/k RMS norms before NeoX RoPE, and in every layer
// a softmax router over all experts whose top-k weights are renormalised, with no shared
// expert.
var qwen3moe = architecture{
	config: func(c *Config, r *metaReader) error {
		c.Rot = r.int("{arch}.rope.dimension_count", int64(c.HeadK))
		if r.err != nil {
			return r.err
		}
		if c.Router.Experts == 0 || c.Router.Used == 0 {
			return fmt.Errorf("qwen3moe needs %s and %s", r.md.Key("{arch}.expert_count"), r.md.Key("{arch}.expert_used_count"))
		}
		if c.FFExp == 0 { // llama.cpp's fallback for files without the key
			c.FFExp = c.FF / c.Router.Used
		}
		if c.HeadK != c.HeadV || c.Rot != c.HeadK {
			return fmt.Errorf("qwen3moe needs equal key, value and rotary head sizes, the metadata says %d, %d and %d", c.HeadK, c.HeadV, c.Rot)
		}
		if c.FFExp <= 0 {
			return fmt.Errorf("qwen3moe: expert width %d", c.FFExp)
		}
		c.RoPE.Mode, c.RoPE.Dims = tensor.RoPENeoX, c.Rot
		c.KQScale = 1 / float32(math.Sqrt(float64(c.HeadK)))
		// The router is fixed by the architecture: softmax, weights renormalised, no scale
		// (llama.cpp ignores expert_weights_norm and expert_weights_scale here).
		c.Router.Gating, c.Router.NormWeights = GatingSoftmax, true
		return nil
	},
	attention: func(c *Config, b *binder, il int) (attention, error) {
		a := &gqa{heads: c.Heads, kvHeads: c.HeadsKV, dim: c.HeadK, rope: c.RoPE, scale: c.KQScale, eps: c.Eps}
		if b.has(blk(il, "attn_qkv.weight")) {
			return nil, fmt.Errorf("tensor %s: the fused QKV layout is not supported", blk(il, "attn_qkv.weight"))
		}
		var err error
		q, kv := c.Heads*c.HeadK, c.HeadsKV*c.HeadK
		for _, p := range []struct {
			w    *weight
			name string
			cols int
			rows int
		}{{&a.q, "attn_q.weight", c.Embd, q}, {&a.k, "attn_k.weight", c.Embd, kv}, {&a.v, "attn_v.weight", c.Embd, kv}, {&a.o, "attn_output.weight", q, c.Embd}} {
			if *p.w, err = b.matrix(blk(il, p.name), p.cols, p.rows); err != nil {
				return nil, err
			}
		}
		if a.qNorm, err = b.vector(blk(il, "attn_q_norm.weight"), c.HeadK); err != nil {
			return nil, err
		}
		if a.kNorm, err = b.vector(blk(il, "attn_k_norm.weight"), c.HeadK); err != nil {
			return nil, err
		}
		return a, nil
	},
	feedForward: func(c *Config, b *binder, il int) (feedForward, error) {
		return bindMoE(c, b, il)
	},
}
