package moe

import (
	"fmt"
	"math"

	"github.com/moerun/moerun/tensor"
)

// glm4moe is GLM-4.5, GLM-4.5-Air and GLM-4.6 (llama.cpp's src/models/glm4-moe.cpp):
// grouped-query attention with q/k/v biases, optional per-head q/k RMS norms and NeoX RoPE
// over the first rope.dimension_count dims of each head (partial rotary); the norm before
// the feed-forward network is post_attention_norm. The first leading_dense_block_count
// blocks have a dense FFN, the others a router (sigmoid by default) whose selection is
// steered by exp_probs_b, with the file's weight normalisation and scale, plus shared
// experts. The last nextn_predict_layers blocks are NextN/MTP blocks, which llama.cpp
// checks and skips: they are not run.
var glm4moe = architecture{
	ffnNorm: "post_attention_norm.weight",
	config: func(c *Config, r *metaReader) error {
		md := r.md
		r.require("{arch}.expert_feed_forward_length", "{arch}.expert_shared_count")
		shared := r.int("{arch}.expert_shared_count", 0)
		c.DenseLead = r.int("{arch}.leading_dense_block_count", 0)
		c.Router.Scale = r.float("{arch}.expert_weights_scale", 0)
		c.Router.NormWeights = r.bool("{arch}.expert_weights_norm", false)
		gating := Gating(r.int("{arch}.expert_gating_func", 0))
		c.Rot = r.int("{arch}.rope.dimension_count", int64(c.HeadK))
		if r.err != nil {
			return r.err
		}
		if err := refuseMRoPE(r); err != nil {
			return err
		}
		if gating == 0 { // absent: GLM-4.5's sigmoid
			gating = GatingSigmoid
		}
		c.Router.Gating = gating
		if c.Router.Experts == 0 || c.Router.Used == 0 {
			return fmt.Errorf("glm4moe needs %s and %s", md.Key("{arch}.expert_count"), md.Key("{arch}.expert_used_count"))
		}
		// llama.cpp sizes the shared experts by the routed width, whatever
		// expert_shared_feed_forward_length says.
		c.FFShexp = c.FFExp * shared
		switch {
		case c.HeadK != c.HeadV:
			return fmt.Errorf("glm4moe needs equal key and value head sizes, the metadata says %d and %d", c.HeadK, c.HeadV)
		case c.Rot > c.HeadK:
			return fmt.Errorf("glm4moe: %d rotary dims of a %d-dim head", c.Rot, c.HeadK)
		case c.FFExp <= 0:
			return fmt.Errorf("glm4moe: expert width %d", c.FFExp)
		case c.DenseLead > c.Layers:
			return fmt.Errorf("glm4moe: %d leading dense layers of %d", c.DenseLead, c.Layers)
		case c.DenseLead > 0 && c.FF <= 0:
			return fmt.Errorf("glm4moe: leading dense layers need %s", md.Key("{arch}.feed_forward_length"))
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
		return a, a.bindQKNorms(b, il, false) // GLM-4.5 (355B) has them, GLM-4.5-Air not
	},
	feedForward: func(c *Config, b *binder, il int) (feedForward, error) {
		return bindLeadDenseMoE(c, b, il, true) // llama.cpp requires exp_probs_b here
	},
	unrun: checkGLMNextN,
}

// refuseMRoPE rejects GLM-4.5V-style files whose rope.dimension_sections turn on
// multi-section RoPE (llama_hparams::use_mrope: the first two sections non-zero), which
// moerun does not implement. Like llama.cpp's get_key_or_arr, the key is four sections or
// one number for all four.
func refuseMRoPE(r *metaReader) error {
	key := "{arch}.rope.dimension_sections"
	if !r.md.Has(key) {
		return nil
	}
	sections, err := r.md.Ints(key)
	if err != nil { // one number for all four sections
		var v int64
		if v, err = r.md.Int(key); err != nil {
			return fmt.Errorf("metadata %s: %w", r.md.Key(key), err)
		}
		sections = []int64{v, v, v, v}
	}
	if len(sections) != 4 {
		return fmt.Errorf("metadata %s has %d sections, want 4", r.md.Key(key), len(sections))
	}
	if sections[0] > 0 && sections[1] > 0 {
		return fmt.Errorf("metadata %s = %v: multi-section RoPE (vision GLM) is not supported", r.md.Key(key), sections)
	}
	return nil
}

// checkGLMNextN checks the NextN/MTP blocks after the c.Layers blocks the model runs, as
// llama.cpp's loader does for tensors it skips: each must be there (unless llama.cpp
// makes it optional) with the shape the metadata implies, and none is loaded.
func checkGLMNextN(c *Config, b *binder) error {
	q, kv := c.Heads*c.HeadK, c.HeadsKV*c.HeadK
	for il := c.Layers; il < c.Layers+c.NextN; il++ {
		checks := []tensorCheck{
			{"attn_norm.weight", false, []int{c.Embd}},
			// llama.cpp makes every q/k/v tensor of a skipped block optional.
			{"attn_qkv.weight", true, []int{c.Embd, q + 2*kv}},
			{"attn_qkv.bias", true, []int{q + 2*kv}},
			{"attn_q.weight", true, []int{c.Embd, q}},
			{"attn_k.weight", true, []int{c.Embd, kv}},
			{"attn_v.weight", true, []int{c.Embd, kv}},
			{"attn_q.bias", true, []int{q}},
			{"attn_k.bias", true, []int{kv}},
			{"attn_v.bias", true, []int{kv}},
			{"attn_output.weight", false, []int{q, c.Embd}},
			{"attn_q_norm.weight", true, []int{c.HeadK}},
			{"attn_k_norm.weight", true, []int{c.HeadK}},
			{"post_attention_norm.weight", false, []int{c.Embd}},
		}
		checks = append(checks, nextnChecks(c)...)
		if err := checkBlock(b, il, append(checks, ffnChecks(c, il, false)...)); err != nil {
			return err
		}
	}
	return nil
}

// nextnChecks are the NextN block's own tensors (llama.cpp's nextn.*).
func nextnChecks(c *Config) []tensorCheck {
	return []tensorCheck{
		{"nextn.eh_proj.weight", false, []int{2 * c.Embd, c.Embd}},
		{"nextn.enorm.weight", false, []int{c.Embd}},
		{"nextn.hnorm.weight", false, []int{c.Embd}},
		{"nextn.embed_tokens.weight", true, []int{c.Embd, c.Vocab}},
		{"nextn.shared_head_head.weight", true, []int{c.Embd, c.Vocab}},
		{"nextn.shared_head_norm.weight", true, []int{c.Embd}},
	}
}

// ffnChecks are a block's feed-forward tensors: the dense FFN of a leading dense block, or
// the router (its selection bias optional when probsOptional), the experts and the shared
// expert.
func ffnChecks(c *Config, il int, probsOptional bool) []tensorCheck {
	if il < c.DenseLead {
		return denseChecks("", c.Embd, c.FF)
	}
	e := c.Router.Experts
	checks := []tensorCheck{
		{"ffn_gate_inp.weight", false, []int{c.Embd, e}},
		{"exp_probs_b.bias", probsOptional, []int{e}},
		{"ffn_gate_exps.weight", false, []int{c.Embd, c.FFExp, e}},
		{"ffn_up_exps.weight", false, []int{c.Embd, c.FFExp, e}},
		{"ffn_down_exps.weight", false, []int{c.FFExp, c.Embd, e}},
	}
	if c.FFShexp > 0 {
		checks = append(checks, denseChecks("_shexp", c.Embd, c.FFShexp)...)
	}
	return checks
}

// checkBlock checks block il's tensors without loading them: each must be there (unless
// optional) with its shape.
func checkBlock(b *binder, il int, checks []tensorCheck) error {
	for _, ch := range checks {
		name := blk(il, ch.name)
		if ch.optional && !b.has(name) {
			continue
		}
		if _, err := b.lookup(name, ch.shape...); err != nil {
			return fmt.Errorf("NextN block %d: %w", il, err)
		}
	}
	return nil
}

// tensorCheck is a tensor of a block that is checked but not loaded.
type tensorCheck struct {
	name     string // within the block
	optional bool
	shape    []int
}

// denseChecks are the tensors of a SwiGLU network ffn_{gate,up,down}<suffix>.
func denseChecks(suffix string, embd, width int) []tensorCheck {
	return []tensorCheck{
		{"ffn_gate" + suffix + ".weight", false, []int{embd, width}},
		{"ffn_up" + suffix + ".weight", false, []int{embd, width}},
		{"ffn_down" + suffix + ".weight", false, []int{width, embd}},
	}
}
