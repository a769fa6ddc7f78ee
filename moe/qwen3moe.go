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
		a, err := bindGQA(c, b, il)
		if err != nil {
			return nil, err
		}
		return a, a.bindQKNorms(b, il, true)
	},
	feedForward: func(c *Config, b *binder, il int) (feedForward, error) {
		return bindMoE(c, b, il, false)
	},
}
