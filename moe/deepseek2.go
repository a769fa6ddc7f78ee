package moe

import (
	"fmt"
	"math"

	"github.com/moerun/moerun/tensor"
)

// deepseek2 is DeepSeek-V2-Lite, V2, V3 and R1 (llama.cpp's src/models/deepseek2.cpp):
// multi-head latent attention with YaRN, leading dense layers, then MoE layers whose router
// gating, selection bias, expert groups, normalisation and scale come from the file, plus
// ungated shared experts.
var deepseek2 = architecture{
	yarnLogMul: true,
	config: func(c *Config, r *metaReader) error {
		// llama.cpp reads q_lora_rank only for models it does not recognise as "lite"
		// (V2-Lite: 27 layers, or 26; 48 with the 128256-token vocabulary), whose query is
		// one matrix.
		lite := c.Layers == 27 || c.Layers == 26 || (c.Layers == 48 && c.Vocab == 128256)
		if !lite {
			c.QLoRA = r.need("{arch}.attention.q_lora_rank")
		}
		return readMLAConfig(c, r, func() Gating {
			// Absent: softmax, except GLM-4.7-Lite's layout.
			if (c.Layers == 47 || c.Layers == 48) && c.Vocab == 154880 {
				return GatingSigmoid
			}
			return GatingSoftmax
		})
	},
	attention: func(c *Config, b *binder, il int) (attention, error) {
		return bindMLA(c, b, il)
	},
	feedForward: func(c *Config, b *binder, il int) (feedForward, error) {
		return bindLeadDenseMoE(c, b, il, false)
	},
	unrun: checkDeepSeek2NextN,
}

// readMLAConfig reads what the DeepSeek family (deepseek2 and the sparse-attention
// architectures built on it) shares after the query LoRA rank: the compressed KV rank,
// leading dense layers, MLA head sizes, the router and YaRN's attention scale.
// defaultGating is the gating function of a file without expert_gating_func.
func readMLAConfig(c *Config, r *metaReader, defaultGating func() Gating) error {
	md := r.md
	c.KVLoRA = r.need("{arch}.attention.kv_lora_rank")
	c.DenseLead = r.int("{arch}.leading_dense_block_count", 0)
	// Required by llama.cpp; placement read their values (FFExp, FFShexp).
	r.require("{arch}.expert_feed_forward_length", "{arch}.expert_shared_count")
	kMLA := r.int("{arch}.attention.key_length_mla", 0)
	vMLA := r.int("{arch}.attention.value_length_mla", 0)
	c.Rot = r.int("{arch}.rope.dimension_count", int64(c.HeadK))
	gating := Gating(r.int("{arch}.expert_gating_func", 0))
	c.Router.NormWeights = r.bool("{arch}.expert_weights_norm", false)
	c.Router.Scale = r.float("{arch}.expert_weights_scale", 0)
	tempScale := r.float("{arch}.attention.temperature_scale", 0)
	if r.err != nil {
		return r.err
	}
	if tempScale != 0 {
		return fmt.Errorf("metadata %s: attention temperature scaling is not supported", md.Key("{arch}.attention.temperature_scale"))
	}
	if gating == 0 {
		gating = defaultGating()
	}
	c.Router.Gating = gating
	if c.Router.Experts == 0 || c.Router.Used == 0 {
		return fmt.Errorf("%s needs %s and %s", c.Arch, md.Key("{arch}.expert_count"), md.Key("{arch}.expert_used_count"))
	}
	c.MLA = kMLA != 0 && vMLA != 0
	headK, headV := c.HeadK, c.HeadV // the logical head sizes: *_mla in MLA files
	if c.MLA {
		headK, headV = kMLA, vMLA
	}
	c.Nope, c.VHead = headK-c.Rot, headV
	switch {
	case c.Nope < 1 || c.Nope%2 != 0:
		// The rotated part starts after the nope dims; RoPE rotates pairs from an even offset.
		return fmt.Errorf("%s: %d rotary dims of a %d-dim key head", c.Arch, c.Rot, headK)
	case c.KVLoRA <= 0 || c.KVLoRA%2 != 0 || c.VHead <= 0:
		return fmt.Errorf("%s: kv_lora_rank %d, value head %d", c.Arch, c.KVLoRA, c.VHead)
	case c.MLA && c.HeadK != c.KVLoRA+c.Rot:
		return fmt.Errorf("%s: %s = %d, but an MLA cache row is kv_lora_rank + rope dims = %d",
			c.Arch, md.Key("{arch}.attention.key_length"), c.HeadK, c.KVLoRA+c.Rot)
	case !c.MLA && c.HeadsKV != c.Heads:
		return fmt.Errorf("%s without MLA keys needs %s = %s (%d ≠ %d)", c.Arch,
			md.Key("{arch}.attention.head_count_kv"), md.Key("{arch}.attention.head_count"), c.HeadsKV, c.Heads)
	case c.DenseLead > c.Layers:
		return fmt.Errorf("%s: %d leading dense layers of %d", c.Arch, c.DenseLead, c.Layers)
	case c.DenseLead > 0 && c.FF <= 0:
		return fmt.Errorf("%s: leading dense layers need %s", c.Arch, md.Key("{arch}.feed_forward_length"))
	}
	if c.MLA {
		c.HeadsKV, c.HeadK, c.HeadV = 1, c.KVLoRA+c.Rot, c.KVLoRA
	}
	c.RoPE.Mode, c.RoPE.Dims = tensor.RoPENormal, c.Rot
	// The attention scale carries YaRN's magnitude (llama.cpp's kq_scale): the rotation
	// itself is left unscaled by the context's attention factor.
	fs := c.RoPE.FreqScale
	mscale := c.RoPE.AttnFactor * (1 + 0.1*log32(1/fs))
	mscale *= 1 + 0.1*c.YarnLogMul*log32(1/fs)
	c.KQScale = mscale * mscale / float32(math.Sqrt(float64(headK)))
	return nil
}

// bindMLA binds block il's multi-head latent attention.
func bindMLA(c *Config, b *binder, il int) (*mla, error) {
	a := &mla{absorbed: c.MLA, heads: c.Heads, nope: c.Nope, rot: c.Rot, kvLoRA: c.KVLoRA, qLoRA: c.QLoRA,
		vHead: c.VHead, kRope: c.RoPE, qRope: c.RoPE, scale: c.KQScale, eps: c.Eps}
	a.kRope.Offset, a.qRope.Offset = a.kvLoRA, a.nope
	qHead := c.Nope + c.Rot
	var err error
	if c.QLoRA > 0 {
		if a.qA, err = b.matrix(blk(il, "attn_q_a.weight"), c.Embd, c.QLoRA); err != nil {
			return nil, err
		}
		if a.qANorm, err = b.param(blk(il, "attn_q_a_norm.weight"), c.QLoRA); err != nil {
			return nil, err
		}
		if a.qB, err = b.matrix(blk(il, "attn_q_b.weight"), c.QLoRA, c.Heads*qHead); err != nil {
			return nil, err
		}
	} else if a.q, err = b.matrix(blk(il, "attn_q.weight"), c.Embd, c.Heads*qHead); err != nil {
		return nil, err
	}
	if a.kvA, err = b.matrix(blk(il, "attn_kv_a_mqa.weight"), c.Embd, c.KVLoRA+c.Rot); err != nil {
		return nil, err
	}
	if a.kvANorm, err = b.param(blk(il, "attn_kv_a_norm.weight"), c.KVLoRA); err != nil {
		return nil, err
	}
	if c.MLA {
		if a.kB, err = b.matrix(blk(il, "attn_k_b.weight"), c.Nope, c.KVLoRA, c.Heads); err != nil {
			return nil, err
		}
		if a.vB, err = b.matrix(blk(il, "attn_v_b.weight"), c.KVLoRA, c.VHead, c.Heads); err != nil {
			return nil, err
		}
	} else if a.kvB, err = b.matrix(blk(il, "attn_kv_b.weight"), c.KVLoRA, c.Heads*(c.Nope+c.VHead)); err != nil {
		return nil, err
	}
	if a.o, err = b.matrix(blk(il, "attn_output.weight"), c.Heads*c.VHead, c.Embd); err != nil {
		return nil, err
	}
	return a, nil
}

// checkDeepSeek2NextN checks the NextN/MTP blocks after the c.Layers blocks (GLM-4.7-Flash's)
// as llama.cpp's deepseek2 loader does: every tensor must be there (the embedding and head
// copies and the selection bias optional) with the shape the metadata implies, except in a
// file without the first block's nextn.eh_proj (converted without them), where each is
// optional. None is loaded.
func checkDeepSeek2NextN(c *Config, b *binder) error { return checkMLANextN(c, b, nil) }

// checkMLANextN is checkDeepSeek2NextN with extra tensors of the architecture's blocks.
func checkMLANextN(c *Config, b *binder, extra []tensorCheck) error {
	trunkOnly := c.NextN > 0 && !b.has(blk(c.Layers, "nextn.eh_proj.weight"))
	qHead := c.Nope + c.Rot
	for il := c.Layers; il < c.Layers+c.NextN; il++ {
		checks := []tensorCheck{
			{"attn_norm.weight", false, []int{c.Embd}},
			{"attn_kv_a_norm.weight", false, []int{c.KVLoRA}},
			{"attn_kv_a_mqa.weight", false, []int{c.Embd, c.KVLoRA + c.Rot}},
			{"attn_output.weight", false, []int{c.Heads * c.VHead, c.Embd}},
			{"ffn_norm.weight", false, []int{c.Embd}},
		}
		if c.QLoRA > 0 {
			checks = append(checks, tensorCheck{"attn_q_a_norm.weight", false, []int{c.QLoRA}},
				tensorCheck{"attn_q_a.weight", false, []int{c.Embd, c.QLoRA}},
				tensorCheck{"attn_q_b.weight", false, []int{c.QLoRA, c.Heads * qHead}})
		} else {
			checks = append(checks, tensorCheck{"attn_q.weight", false, []int{c.Embd, c.Heads * qHead}})
		}
		if c.MLA {
			checks = append(checks, tensorCheck{"attn_k_b.weight", false, []int{c.Nope, c.KVLoRA, c.Heads}},
				tensorCheck{"attn_v_b.weight", false, []int{c.KVLoRA, c.VHead, c.Heads}})
		} else {
			checks = append(checks, tensorCheck{"attn_kv_b.weight", false, []int{c.KVLoRA, c.Heads * (c.Nope + c.VHead)}})
		}
		checks = append(append(append(checks, extra...), nextnChecks(c)...), ffnChecks(c, il, true)...)
		for i := range checks {
			checks[i].optional = checks[i].optional || trunkOnly
		}
		if err := checkBlock(b, il, checks); err != nil {
			return err
		}
	}
	return nil
}
