package moe

import (
	"fmt"

	"github.com/moerun/moerun/tensor"
)

// gqa is grouped-query attention (llama.cpp's build_qkv and build_attn with a K/V cache):
// query, key and value projections, optional RMS norms over each query and key head
// (Qwen3's attn_q_norm/attn_k_norm, applied before RoPE) or over all of them at once
// (MiniMax-M2's), RoPE, attention in which query
// head h reads KV head h/(heads/kvHeads), and the output projection.
type gqa struct {
	q, k, v, o   weight
	qNorm, kNorm param // absent when the model has none; one head wide, or all heads
	// Biases added after the projections (attn_{q,k,v,output}.bias), when present.
	qBias, kBias, vBias, oBias param
	// window (>0) limits a sliding-window layer to the last window positions; sinks
	// (attn_sinks, one logit per head) join each softmax's denominator (gpt-oss).
	window  int
	sinks   param
	heads   int
	kvHeads int
	dim     int // head size of queries, keys and values
	rope    tensor.RoPE
	scale   float32
	eps     float32
}

func (a *gqa) cacheShape() cacheShape {
	return cacheShape{heads: a.kvHeads, kDim: a.dim, vDim: a.dim, window: a.window}
}

func (a *gqa) forward(c *pass, il int, in value) value {
	p := c.project(in, a.q, a.k, a.v)
	q, k, v := p[0], p[1], p[2]
	c.addParam(q, a.qBias)
	c.addParam(k, a.kBias)
	c.addParam(v, a.vBias)
	q, k = a.normHeads(c, q, a.qNorm), a.normHeads(c, k, a.kNorm)
	c.rope(&a.rope, q, a.dim)
	c.rope(&a.rope, k, a.dim)
	c.toCache(il, &q, &k, &v)
	c.store(il, k, v)
	o := c.attend(il, q.Reshape(a.dim), a.heads, a.dim, a.sinks, tensor.AttnParams{Scale: a.scale, Window: a.window})
	out := c.matmul(a.o, o.Reshape(a.heads*a.dim))
	c.addParam(out, a.oBias)
	return out
}

// normHeads RMS-normalises x (rows of heads·dim) with norm, when the model has one, in
// pieces as wide as the norm: each head (Qwen3's attn_q_norm and attn_k_norm) or all of a
// token's heads at once (MiniMax-M2's). It returns x viewed as one row per token again.
func (a *gqa) normHeads(c *pass, x value, norm param) value {
	if !norm.valid() {
		return x
	}
	cols := x.Cols
	return c.rmsNorm(x.Reshape(norm.t.Cols), norm, a.eps).Reshape(cols)
}

// bindProjections binds block il's separate q, k, v and output projections (the fused
// attn_qkv layout is refused) for the configuration's heads and head size. The query
// projection has qParts × heads × head size rows: 2 where each head's query comes with an
// output gate (qwen35moe).
func bindProjections(c *Config, b *binder, il, qParts int) (*gqa, error) {
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
	}{{&a.q, "attn_q.weight", c.Embd, qParts * q}, {&a.k, "attn_k.weight", c.Embd, kv}, {&a.v, "attn_v.weight", c.Embd, kv}, {&a.o, "attn_output.weight", q, c.Embd}} {
		if *p.w, err = b.matrix(blk(il, p.name), p.cols, p.rows); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// bindGQA binds block il's projections and the optional q, k and v biases, as llama.cpp's
// create_tensor_qkv does for every architecture here.
func bindGQA(c *Config, b *binder, il int) (*gqa, error) {
	a, err := bindProjections(c, b, il, 1)
	if err != nil {
		return nil, err
	}
	if err := a.bindQKVBiases(b, il); err != nil {
		return nil, err
	}
	return a, nil
}

// bindQKNorms binds block il's per-head q and k RMS norms (attn_q_norm, attn_k_norm),
// which a model may lack unless they are required.
func (a *gqa) bindQKNorms(b *binder, il int, required bool) error {
	for _, n := range []struct {
		norm *param
		name string
	}{{&a.qNorm, "attn_q_norm.weight"}, {&a.kNorm, "attn_k_norm.weight"}} {
		name := blk(il, n.name)
		if !required && !b.has(name) {
			continue
		}
		var err error
		if *n.norm, err = b.param(name, a.dim); err != nil {
			return err
		}
	}
	return nil
}

// bindWholeQKNorms binds block il's q and k RMS norms over all query heads and all key
// heads at once (MiniMax-M2's attn_q_norm and attn_k_norm), which llama.cpp requires.
func (a *gqa) bindWholeQKNorms(b *binder, il int) error {
	var err error
	if a.qNorm, err = b.param(blk(il, "attn_q_norm.weight"), a.heads*a.dim); err != nil {
		return err
	}
	a.kNorm, err = b.param(blk(il, "attn_k_norm.weight"), a.kvHeads*a.dim)
	return err
}

// bindQKVBiases binds the optional biases of block il's q, k and v projections
// (architectures with an output bias bind oBias themselves: whether it is required
// differs).
func (a *gqa) bindQKVBiases(b *binder, il int) error {
	var err error
	q, kv := a.heads*a.dim, a.kvHeads*a.dim
	if a.qBias, err = b.optionalParam(blk(il, "attn_q.bias"), q); err != nil {
		return err
	}
	if a.kBias, err = b.optionalParam(blk(il, "attn_k.bias"), kv); err != nil {
		return err
	}
	a.vBias, err = b.optionalParam(blk(il, "attn_v.bias"), kv)
	return err
}
