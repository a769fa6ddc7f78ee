package moe

import (
	"fmt"
	"github.com/moerun/moerun/backend"
	"math"

	"github.com/moerun/moerun/tensor"
)

// qwen35moe is Qwen3.5-MoE (Qwen3.5-35B-A3B; llama.cpp's src/models/qwen35moe.cpp): a
// hybrid of Gated DeltaNet linear attention (deltanet.go) in most layers and, every
// full_attention_interval-th layer, gated full attention — grouped-query attention with
// q/k RMS norms and partial rotary whose output is multiplied by sigmoid of a per-head gate
// the query projection also produces. Every layer's feed-forward network is a softmax
// router over the experts with renormalised top-k weights, plus a shared expert behind a
// sigmoid gate; the norm before it is post_attention_norm.
var qwen35moe = architecture{
	ffnNorm: "post_attention_norm.weight",
	config: func(c *Config, r *metaReader) error {
		if err := readHybridConfig(c, r); err != nil {
			return err
		}
		return checkTextIMRoPE(r, c.Rot)
	},
	attention: hybridAttention,
	// The feed-forward network is Qwen2-MoE's: routed experts plus a shared expert behind
	// a sigmoid gate (llama.cpp's build_layer_ffn follows the same reference).
	feedForward: qwen2moe.feedForward,
}

// readHybridConfig reads what Qwen3-Next and Qwen3.5-MoE share: partial rotary dimensions,
// the Gated DeltaNet sizes, the expert widths with llama.cpp's fallbacks, NeoX RoPE and a
// router fixed by the architecture.
func readHybridConfig(c *Config, r *metaReader) error {
	c.Rot = r.int("{arch}.rope.dimension_count", int64(c.HeadK))
	if r.err != nil {
		return r.err
	}
	if err := c.DeltaNet.read(r); err != nil {
		return err
	}
	if c.Router.Experts == 0 || c.Router.Used == 0 {
		return fmt.Errorf("%s needs %s and %s", c.Arch, r.md.Key("{arch}.expert_count"), r.md.Key("{arch}.expert_used_count"))
	}
	if c.FFExp == 0 { // llama.cpp's fallbacks for files without the keys
		c.FFExp = c.FF / c.Router.Used
	}
	if c.FFShexp == 0 {
		c.FFShexp = c.FF
	}
	if c.HeadK != c.HeadV || c.Rot > c.HeadK {
		return fmt.Errorf("%s needs equal key and value head sizes and at most that many rotary dimensions, the metadata says %d, %d and %d", c.Arch, c.HeadK, c.HeadV, c.Rot)
	}
	if c.FFExp <= 0 || c.FFShexp <= 0 {
		return fmt.Errorf("%s: expert width %d, shared expert width %d", c.Arch, c.FFExp, c.FFShexp)
	}
	c.RoPE.Mode, c.RoPE.Dims = tensor.RoPENeoX, c.Rot
	c.KQScale = 1 / float32(math.Sqrt(float64(c.HeadK)))
	// The router is fixed by the architecture: softmax, weights renormalised, no scale.
	c.Router.Gating, c.Router.NormWeights = GatingSoftmax, true
	return nil
}

// hybridAttention binds a Gated DeltaNet layer or a gated full-attention layer, as the
// layer pattern says.
func hybridAttention(c *Config, b *binder, il int) (attention, error) {
	if c.Recurrent[il] {
		return bindDeltaNet(c, b, il)
	}
	return bindGatedAttention(c, b, il)
}

// checkTextIMRoPE checks that Qwen3.5's interleaved multi-section RoPE (ggml's IMROPE over
// rope.dimension_sections) is, for text, the NeoX RoPE moerun applies. llama.cpp gives a
// text token the same position in the temporal, height and width sections and 0 in the
// fourth; pair i (of rot/2) takes its angle from section i mod 3 (0 temporal, 1 height, 2
// width) while i < 3·sections[i mod 3], from the fourth otherwise. As long as no pair
// falls to the fourth section — true of the released models — every pair turns by the
// token's position, exactly as NeoX RoPE turns it.
func checkTextIMRoPE(r *metaReader, rot int) error {
	key := "{arch}.rope.dimension_sections"
	if !r.md.Has(key) {
		return missingKey(r.md, key)
	}
	sections, err := r.md.Ints(key)
	if err != nil {
		return err
	}
	if len(sections) < 4 {
		return fmt.Errorf("metadata %s has %d values, want 4", r.md.Key(key), len(sections))
	}
	total := int64(0)
	for _, s := range sections[:4] {
		if s < 0 || s > maxRotaryDims {
			return fmt.Errorf("metadata %s = %v is out of range", r.md.Key(key), sections)
		}
		total += s
	}
	if total == 0 {
		return fmt.Errorf("metadata %s = %v: no section has a dimension", r.md.Key(key), sections)
	}
	for i := range int64(rot / 2) {
		sector := i % total
		if sector >= 3*sections[sector%3] {
			return fmt.Errorf("metadata %s = %v puts rotary pair %d in the fourth section (position 0 for text), which moerun does not support", r.md.Key(key), sections, i)
		}
	}
	return nil
}

// gatedAttention is Qwen3.5's full attention (build_layer_attn): grouped-query attention
// whose query projection gives each head its query and then a gate of the same size;
// queries and keys are RMS-normed per head and rotated over their first Rot dimensions;
// each head's attention output is multiplied by sigmoid(gate) before the output
// projection. It keeps gqa's weights and KV cache, with q twice as wide.
type gatedAttention struct{ gqa }

func (a *gatedAttention) forward(c *pass, il int, in value) value {
	p := c.project(in, a.q, a.k, a.v)
	qg, k, v := p[0], p[1], p[2]
	// Each head's query comes with its output gate: [q (dim) | gate (dim)] per head.
	q := c.contiguous(qg.Rowwise(a.dim, 2*a.dim, 0))
	gate := c.contiguous(qg.Rowwise(a.dim, 2*a.dim, a.dim))
	q, k = a.normHeads(c, q, a.qNorm), a.normHeads(c, k.Reshape(a.kvHeads*a.dim), a.kNorm)
	c.rope(&a.rope, q, a.dim)
	c.rope(&a.rope, k, a.dim)
	c.toCache(il, &q, &k, &v)
	c.store(il, k, v)
	o := c.attend(il, q, a.heads, a.dim, param{}, tensor.AttnParams{Scale: a.scale})
	c.unary(gate, backend.Sigmoid)
	c.mul(o, o, gate)
	return c.matmul(a.o, o.Reshape(a.heads*a.dim))
}

func bindGatedAttention(c *Config, b *binder, il int) (*gatedAttention, error) {
	a, err := bindProjections(c, b, il, 2)
	if err != nil {
		return nil, err
	}
	if err := a.bindQKNorms(b, il, true); err != nil {
		return nil, err
	}
	return &gatedAttention{*a}, nil
}
