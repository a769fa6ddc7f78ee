package moe

import (
	"github.com/moerun/moerun/tensor"
)

// gqa is grouped-query attention (llama.cpp's build_qkv and build_attn with a K/V cache):
// query, key and value projections, optional RMS norms over each query and key head
// (Qwen3's attn_q_norm/attn_k_norm, applied before RoPE), RoPE, attention in which query
// head h reads KV head h/(heads/kvHeads), and the output projection.
type gqa struct {
	q, k, v, o   weight
	qNorm, kNorm []float32 // nil when the model has none
	heads        int
	kvHeads      int
	dim          int // head size of queries, keys and values
	rope         tensor.RoPE
	scale        float32
	eps          float32
}

func (a *gqa) cacheShape() cacheShape {
	return cacheShape{heads: a.kvHeads, kDim: a.dim, vDim: a.dim}
}

func (a *gqa) forward(c *Context, il int, in, out []float32) error {
	n := len(c.pos)
	q := c.scratch.floats(n * a.heads * a.dim)
	k := c.scratch.floats(n * a.kvHeads * a.dim)
	v := c.scratch.floats(n * a.kvHeads * a.dim)
	if err := a.q.matmul(q, in); err != nil {
		return err
	}
	if err := a.k.matmul(k, in); err != nil {
		return err
	}
	if err := a.v.matmul(v, in); err != nil {
		return err
	}
	if a.qNorm != nil {
		rmsNorm(q, q, a.qNorm, a.dim, a.eps)
	}
	if a.kNorm != nil {
		rmsNorm(k, k, a.kNorm, a.dim, a.eps)
	}
	a.rope.Apply(q, a.dim, c.pos)
	a.rope.Apply(k, a.dim, c.pos)
	c.caches[il].store(c.n, n, k, v)
	o := c.scratch.floats(n * a.heads * a.dim)
	if err := c.attend(il, o, q, a.heads, a.scale); err != nil {
		return err
	}
	return a.o.matmul(out, o)
}
