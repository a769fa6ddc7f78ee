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
	qA, qB, q weight // qA/qB with a query LoRA, else q
	qANorm    param  // attn_q_a_norm
	kvA       weight // attn_kv_a_mqa
	kvANorm   param  // attn_kv_a_norm
	kB, vB    weight // absorbed form: per-head stacks
	kvB       weight // legacy form
	o         weight
	absorbed  bool
	heads     int
	nope, rot int // query/key head dims without and with RoPE
	kvLoRA    int
	qLoRA     int
	vHead     int
	// kRope and qRope rotate the rotary part of the compressed KV row and of each query
	// head: the model's RoPE from element kvLoRA, and from element nope.
	kRope, qRope tensor.RoPE
	scale, eps   float32
}

func (a *mla) cacheShape() cacheShape {
	if a.absorbed {
		return cacheShape{heads: 1, kDim: a.kvLoRA + a.rot, vDim: a.kvLoRA, vInK: true}
	}
	return cacheShape{heads: a.heads, kDim: a.nope + a.rot, vDim: a.vHead}
}

func (a *mla) forward(c *pass, il int, in value) value {
	return a.attention(c, il, in, a.queryLoRA(c, in), nil)
}

// queryLoRA is the normed low-rank query projection (q_a, then its RMS norm), the zero value
// for a model whose query is one matrix.
func (a *mla) queryLoRA(c *pass, in value) value {
	if a.qLoRA == 0 {
		return value{}
	}
	return c.rmsNorm(c.matmul(a.qA, in), a.qANorm, a.eps)
}

// attention is the layer's output for in, given its normed query LoRA qr (see queryLoRA).
// sel, when not nil, restricts each query to the cache positions it chose (DeepSeek Sparse
// Attention; absorbed form only).
func (a *mla) attention(c *pass, il int, in, qr value, sel *selection) value {
	qHead, kvRow := a.nope+a.rot, a.kvLoRA+a.rot
	var q value // [tokens][heads·qHead]
	if a.qLoRA > 0 {
		q = c.matmul(a.qB, qr)
	} else {
		q = c.matmul(a.q, in)
	}
	kvpe := c.matmul(a.kvA, in) // [tokens][kvLoRA | rot]
	c.rope(&a.kRope, kvpe, kvRow)
	ckv := kvpe.Columns(0, a.kvLoRA)
	c.rmsNormTo(ckv, ckv, a.kvANorm, a.eps)
	c.rope(&a.qRope, q, qHead)
	if a.absorbed {
		return a.absorbedAttention(c, il, q.Reshape(qHead), kvpe, sel)
	}
	return a.legacyAttention(c, il, q.Reshape(qHead), kvpe)
}

// absorbedAttention attends with the compressed cache (see mla).
func (a *mla) absorbedAttention(c *pass, il int, q, kvpe value, sel *selection) value {
	kvRow := a.kvLoRA + a.rot
	// Head h of each token uses matrix h of attn_k_b and attn_v_b.
	absorbed := c.matMulStack(a.kB, c.contiguous(q.Columns(0, a.nope)))
	query := c.alloc(c.devOf(absorbed), tensor.F32, kvRow, q.Rows) // per head [absorbed | q_pe]
	c.copyValue(query.Columns(0, a.kvLoRA), absorbed)
	c.copyValue(query.Columns(a.kvLoRA, a.rot), q.Columns(a.nope, a.rot))
	c.toCache(il, &query, &kvpe)
	c.store(il, kvpe, value{})
	p := tensor.AttnParams{Scale: a.scale}
	var latent value
	if sel != nil {
		latent = c.attendSelected(il, query, a.heads, a.kvLoRA, sel, p)
	} else {
		latent = c.attend(il, query, a.heads, a.kvLoRA, param{}, p)
	}
	values := c.matMulStack(a.vB, latent)
	return c.matmul(a.o, values.Reshape(a.heads*a.vHead))
}

// legacyAttention decompresses per-head keys and values with attn_kv_b (rows of each head:
// nope key dims, then vHead value dims) and runs multi-head attention; every head's key
// gets the same rotated k_pe.
func (a *mla) legacyAttention(c *pass, il int, q, kvpe value) value {
	qHead, kvHead := a.nope+a.rot, a.nope+a.vHead
	kv := c.matmul(a.kvB, c.contiguous(kvpe.Columns(0, a.kvLoRA))).Reshape(kvHead) // per head [k_nope | v]
	keys := c.alloc(c.devOf(kv), tensor.F32, qHead, kv.Rows)                       // per head [k_nope | k_pe]
	c.copyValue(keys.Columns(0, a.nope), kv.Columns(0, a.nope))
	// Every head of a token shares its k_pe.
	perToken := keys.Reshape(a.heads * qHead)
	for h := range a.heads {
		c.copyValue(perToken.Columns(h*qHead+a.nope, a.rot), kvpe.Columns(a.kvLoRA, a.rot))
	}
	values := c.contiguous(kv.Columns(a.nope, a.vHead))
	c.toCache(il, &q, &keys, &values)
	c.store(il, keys, values)
	o := c.attend(il, q, a.heads, a.vHead, param{}, tensor.AttnParams{Scale: a.scale})
	return c.matmul(a.o, o.Reshape(a.heads*a.vHead))
}
