package moe

import (
	"github.com/moerun/moerun/tensor"
)

// mla is DeepSeek's multi-head latent attention (llama.cpp's src/models/deepseek2.cpp). The
// query comes from a low-rank projection (q_a, its norm, q_b) or one matrix (V2-Lite); keys
// and values from one compressed vector per token, kvpe = kv_a·x = [ckv (kvLoRA) | k_pe
// (rot)], of which ckv is RMS-normed and k_pe rotated (NORM-style RoPE, with YaRN).
//
// In the absorbed form (files with attn_k_b/attn_v_b, what llama.cpp runs) the cache keeps
// [ckv | k_pe] per position, one row shared by all heads; each head's query no-RoPE part is
// mapped into the compressed space by its slice of attn_k_b, attention runs over the cache
// rows with the values being their ckv part, and each head's result is expanded by its
// slice of attn_v_b. The legacy form (attn_kv_b) decompresses keys and values per head and
// runs ordinary multi-head attention, as llama.cpp does for those files.
type mla struct {
	qA, qB, q  weight    // qA/qB with a query LoRA, else q
	qANorm     []float32 // attn_q_a_norm
	kvA        weight    // attn_kv_a_mqa
	kvANorm    []float32 // attn_kv_a_norm
	kB, vB     weight    // absorbed form: per-head stacks
	kvB        weight    // legacy form
	o          weight
	absorbed   bool
	heads      int
	nope, rot  int // query/key head dims without and with RoPE
	kvLoRA     int
	qLoRA      int
	vHead      int
	rope       tensor.RoPE
	scale, eps float32
}

func (a *mla) cacheShape() cacheShape {
	if a.absorbed {
		return cacheShape{heads: 1, kDim: a.kvLoRA + a.rot, vDim: a.kvLoRA, vInK: true}
	}
	return cacheShape{heads: a.heads, kDim: a.nope + a.rot, vDim: a.vHead}
}

func (a *mla) forward(c *Context, il int, in, out []float32) error {
	n := len(c.pos)
	qHead, kvRow := a.nope+a.rot, a.kvLoRA+a.rot
	q := c.scratch.floats(n * a.heads * qHead)
	if a.qLoRA > 0 {
		qa := c.scratch.floats(n * a.qLoRA)
		if err := a.qA.matmul(qa, in); err != nil {
			return err
		}
		rmsNorm(qa, qa, a.qANorm, a.qLoRA, a.eps)
		if err := a.qB.matmul(q, qa); err != nil {
			return err
		}
	} else if err := a.q.matmul(q, in); err != nil {
		return err
	}
	kvpe := c.scratch.floats(n * kvRow)
	if err := a.kvA.matmul(kvpe, in); err != nil {
		return err
	}
	kRope := a.rope
	kRope.Offset = a.kvLoRA
	c.rope(&kRope, kvpe, kvRow)
	for t := range n {
		ckv := kvpe[t*kvRow : t*kvRow+a.kvLoRA]
		rmsNorm(ckv, ckv, a.kvANorm, a.kvLoRA, a.eps)
	}
	qRope := a.rope
	qRope.Offset = a.nope
	c.rope(&qRope, q, qHead)
	if a.absorbed {
		return a.absorbedAttention(c, il, q, kvpe, out)
	}
	return a.legacyAttention(c, il, q, kvpe, out)
}

// absorbedAttention attends with the compressed cache (see mla).
func (a *mla) absorbedAttention(c *Context, il int, q, kvpe, out []float32) error {
	n := len(c.pos)
	qHead, kvRow := a.nope+a.rot, a.kvLoRA+a.rot
	heads := c.scratch.int32s(n * a.heads) // head h of each token uses matrix h of a stack
	qNope := c.scratch.floats(n * a.heads * a.nope)
	for i := range heads {
		heads[i] = int32(i % a.heads)
		copy(qNope[i*a.nope:(i+1)*a.nope], q[i*qHead:])
	}
	absorbed := c.scratch.floats(n * a.heads * a.kvLoRA)
	if err := a.kB.matMulStack(absorbed, qNope, heads, a.heads); err != nil {
		return err
	}
	query := c.scratch.floats(n * a.heads * kvRow) // per head [absorbed | q_pe]
	for i := range heads {
		copy(query[i*kvRow:], absorbed[i*a.kvLoRA:(i+1)*a.kvLoRA])
		copy(query[i*kvRow+a.kvLoRA:(i+1)*kvRow], q[i*qHead+a.nope:(i+1)*qHead])
	}
	c.caches[il].store(c.n, n, kvpe, nil)
	latent := c.scratch.floats(n * a.heads * a.kvLoRA)
	if err := c.attend(il, latent, query, a.heads, tensor.AttnParams{Scale: a.scale}); err != nil {
		return err
	}
	values := c.scratch.floats(n * a.heads * a.vHead)
	if err := a.vB.matMulStack(values, latent, heads, a.heads); err != nil {
		return err
	}
	return a.o.matmul(out, values)
}

// legacyAttention decompresses per-head keys and values with attn_kv_b (rows of each head:
// nope key dims, then vHead value dims) and runs multi-head attention; every head's key
// gets the same rotated k_pe.
func (a *mla) legacyAttention(c *Context, il int, q, kvpe, out []float32) error {
	n := len(c.pos)
	qHead, kvRow, kvHead := a.nope+a.rot, a.kvLoRA+a.rot, a.nope+a.vHead
	ckv := c.scratch.floats(n * a.kvLoRA)
	for t := range n {
		copy(ckv[t*a.kvLoRA:(t+1)*a.kvLoRA], kvpe[t*kvRow:])
	}
	kv := c.scratch.floats(n * a.heads * kvHead)
	if err := a.kvB.matmul(kv, ckv); err != nil {
		return err
	}
	keys := c.scratch.floats(n * a.heads * qHead)
	values := c.scratch.floats(n * a.heads * a.vHead)
	for i := range n * a.heads {
		t := i / a.heads
		copy(keys[i*qHead:], kv[i*kvHead:i*kvHead+a.nope])
		copy(keys[i*qHead+a.nope:(i+1)*qHead], kvpe[t*kvRow+a.kvLoRA:(t+1)*kvRow])
		copy(values[i*a.vHead:(i+1)*a.vHead], kv[i*kvHead+a.nope:(i+1)*kvHead])
	}
	c.caches[il].store(c.n, n, keys, values)
	o := c.scratch.floats(n * a.heads * a.vHead)
	if err := c.attend(il, o, q, a.heads, tensor.AttnParams{Scale: a.scale}); err != nil {
		return err
	}
	return a.o.matmul(out, o)
}
