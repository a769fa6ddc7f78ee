package moe

import (
	"fmt"
	"math"

	"github.com/moerun/moerun/tensor"
)

// gptOSS is OpenAI's gpt-oss (gpt-oss-20b, gpt-oss-120b; llama.cpp's LLM_ARCH_OPENAI_MOE,
// src/models/openai-moe.cpp): grouped-query attention with q/k/v/output biases, NeoX YaRN
// RoPE and a learned sink logit per head, alternating sliding-window and full layers; in
// every layer a router with a bias that picks the top-k experts on the raw logits and
// weights them by a softmax over the selected, and experts with biases and a clamped
// SwiGLU. The norm before the experts is called post_attention_norm.
var gptOSS = architecture{
	ffnNorm: "post_attention_norm.weight",
	config: func(c *Config, r *metaReader) error {
		// llama.cpp requires both keys for this architecture.
		r.require("{arch}.expert_feed_forward_length", "{arch}.attention.sliding_window")
		c.Rot = r.int("{arch}.rope.dimension_count", int64(c.HeadK))
		c.SWABase = r.float("{arch}.rope.freq_base_swa", float64(c.RoPE.Base))
		if r.err != nil {
			return r.err
		}
		if c.Router.Experts == 0 || c.Router.Used == 0 {
			return fmt.Errorf("gpt-oss needs %s and %s", r.md.Key("{arch}.expert_count"), r.md.Key("{arch}.expert_used_count"))
		}
		if c.FFExp <= 0 {
			return fmt.Errorf("gpt-oss: expert width %s = %d", r.md.Key("{arch}.expert_feed_forward_length"), c.FFExp)
		}
		// The tensors are shaped by the rotary size (n_head·n_rot): all three must agree.
		if c.HeadK != c.HeadV || c.Rot != c.HeadK {
			return fmt.Errorf("gpt-oss needs equal key, value and rotary head sizes, the metadata says %d, %d and %d", c.HeadK, c.HeadV, c.Rot)
		}
		if c.Window <= 0 {
			return fmt.Errorf("metadata %s = %d: the sliding window must be positive", r.md.Key("{arch}.attention.sliding_window"), c.Window)
		}
		if !(c.SWABase > 0) {
			return fmt.Errorf("metadata %s = %g: the RoPE base must be positive", r.md.Key("{arch}.rope.freq_base_swa"), c.SWABase)
		}
		c.RoPE.Mode, c.RoPE.Dims = tensor.RoPENeoX, c.Rot
		c.KQScale = 1 / float32(math.Sqrt(float64(c.Rot)))
		// The router is fixed by the architecture (llama.cpp reads no gating keys for it):
		// top-k on the raw logits, a softmax over the selected, no renormalisation, no scale.
		c.Router.Gating, c.Router.NormWeights, c.Router.Scale = GatingSoftmaxWeight, false, 0
		return nil
	},
	attention: func(c *Config, b *binder, il int) (attention, error) {
		a, err := bindGQA(c, b, il)
		if err != nil {
			return nil, err
		}
		if a.oBias, err = b.param(blk(il, "attn_output.bias"), c.Embd); err != nil {
			return nil, err
		}
		if a.sinks, err = b.param(blk(il, "attn_sinks.weight"), c.Heads); err != nil {
			return nil, err
		}
		if c.SWA[il] {
			// SWA layers take the training RoPE base for them (rope.freq_base_swa, else
			// the model's base), the full layers the context's.
			a.window, a.rope.Base = c.Window, c.SWABase
		}
		return a, nil
	},
	feedForward: func(c *Config, b *binder, il int) (feedForward, error) {
		f, err := bindMoE(c, b, il, true)
		if err != nil {
			return nil, err
		}
		f.clampedGLU = true
		if f.routerBias, err = b.param(blk(il, "ffn_gate_inp.bias"), c.Router.Experts); err != nil {
			return nil, err
		}
		return f, nil
	},
}
