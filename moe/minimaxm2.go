package moe

import (
	"fmt"
	"math"

	"github.com/moerun/moerun/tensor"
)

// minimaxM2 is MiniMax-M2 (and M2.1, M2.5, M2.7; llama.cpp's src/models/minimax-m2.cpp):
// grouped-query attention whose queries and keys are RMS-normed across all their heads at
// once, before NeoX RoPE over the first rope.dimension_count dims of each head; in every
// block routed experts and no shared expert, behind the file's gating function (sigmoid
// for the released models) with the selection bias exp_probs_b and the weights renormalised,
// never scaled. llama.cpp sizes the experts by feed_forward_length.
var minimaxM2 = architecture{
	config: func(c *Config, r *metaReader) error {
		r.require("{arch}.expert_feed_forward_length")
		c.Router.Gating = Gating(r.int("{arch}.expert_gating_func", 0))
		c.Rot = r.int("{arch}.rope.dimension_count", int64(c.HeadK))
		if r.err != nil {
			return r.err
		}
		// llama.cpp reads no expert_weights_scale and builds no shared expert for it.
		c.Router.NormWeights, c.Router.Scale = true, 0
		c.FFExp, c.FFShexp = c.FF, 0
		switch {
		case c.Router.Experts == 0 || c.Router.Used == 0:
			return fmt.Errorf("minimax-m2 needs %s and %s", r.md.Key("{arch}.expert_count"), r.md.Key("{arch}.expert_used_count"))
		case c.HeadK != c.HeadV:
			return fmt.Errorf("minimax-m2 needs equal key and value head sizes, the metadata says %d and %d", c.HeadK, c.HeadV)
		case c.Rot > c.HeadK:
			return fmt.Errorf("minimax-m2: %d rotary dims of a %d-dim head", c.Rot, c.HeadK)
		case c.FFExp <= 0:
			return fmt.Errorf("minimax-m2 sizes its experts by %s, which is %d", r.md.Key("{arch}.feed_forward_length"), c.FF)
		}
		c.RoPE.Mode, c.RoPE.Dims = tensor.RoPENeoX, c.Rot
		c.KQScale = 1 / float32(math.Sqrt(float64(c.HeadK)))
		return nil
	},
	attention: func(c *Config, b *binder, il int) (attention, error) {
		a, err := bindGQA(c, b, il)
		if err != nil {
			return nil, err
		}
		return a, a.bindWholeQKNorms(b, il)
	},
	feedForward: func(c *Config, b *binder, il int) (feedForward, error) {
		return bindLeadDenseMoE(c, b, il, true) // no leading dense blocks, no shared expert
	},
}
