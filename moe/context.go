package moe

import (
	"errors"
	"fmt"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/tensor"
)

// ContextOptions size a Context. Start from DefaultContextOptions: the zero Type is F32.
type ContextOptions struct {
	// Size is the number of positions the KV cache holds (-c); 0 means the model's
	// training context. It is rounded up to a multiple of 256, as llama.cpp does.
	Size int
	// UBatch is the most tokens one forward pass computes (-ub): longer prompts are
	// evaluated in pieces of this size.
	UBatch int
	// CacheK and CacheV are the KV cache types (-ctk, -ctv): F16, Q8_0 or F32.
	CacheK, CacheV tensor.Type
	// Attention chooses the attention arithmetic: tensor.AttnGGML reproduces llama.cpp's
	// CPU flash attention (its per-row kernel rounds queries and the value accumulator to
	// F16), tensor.AttnPrecise computes in float32/float64. See Context.attend for batches
	// of 64 tokens or more.
	Attention tensor.AttnNumerics
	// SER is smart expert reduction (-ser), off by default.
	SER SER
	// Stats, when not nil, records every routing decision (--expert-stats).
	Stats *ExpertStats
}

// DefaultContextOptions are llama.cpp's defaults: the training context, ubatch 512, an F16
// cache and its flash attention arithmetic.
func DefaultContextOptions() ContextOptions {
	return ContextOptions{UBatch: 512, CacheK: tensor.F16, CacheV: tensor.F16, Attention: tensor.AttnGGML}
}

// ErrContextFull is returned (wrapped) when tokens would not fit in the context.
var ErrContextFull = errors.New("context full")

// Context is one sequence's state: its KV cache, the position reached, and the working
// memory of the forward pass, reused from one call to the next so that decoding a token
// allocates nothing. It is not safe for concurrent use.
type Context struct {
	m        *Model
	size     int
	ubatch   int
	n        int // positions evaluated so far
	caches   []*kvCache
	router   *Router
	stats    *ExpertStats
	numerics tensor.AttnNumerics

	pos       []int32   // positions of the tokens being evaluated
	x, h, y   []float32 // residual stream, normed input of a block, a block's output
	logits    []float32 // logits of the last forward pass
	allLogits []float32 // every token's logits across ubatches (Eval with all)
	scratch   arena     // per-layer working memory of attention and FFN

	// RoPE angles of pos, computed once per forward pass for each distinct set of RoPE
	// parameters (all layers share one, or two where sliding-window layers have their own
	// base): the first angleSets entries are this pass's, and their tables are reused.
	angles    []ropeAngles
	angleSets int

	fusedWeights []backend.Weight // the weights of a matmuls or mulMatIDs call
	fusedOut     [][]float32
}

type ropeAngles struct {
	rope  tensor.RoPE
	table []float32
}

// NewContext allocates a context: the KV cache for every layer at once, and the router.
func (m *Model) NewContext(o ContextOptions) (*Context, error) {
	size := o.Size
	if size == 0 {
		size = m.Config.CtxTrain
	}
	if size <= 0 {
		return nil, fmt.Errorf("context size %d: give a positive size", size)
	}
	size = (size + cacheBlock - 1) / cacheBlock * cacheBlock
	if o.UBatch <= 0 {
		return nil, fmt.Errorf("ubatch size %d: give a positive size", o.UBatch)
	}
	rc := m.Config.Router
	rc.SER = o.SER
	router, err := NewRouter(rc)
	if err != nil {
		return nil, err
	}
	if err := checkCacheSize(m, o, size); err != nil {
		return nil, err
	}
	c := &Context{m: m, size: size, ubatch: min(o.UBatch, size), router: router, stats: o.Stats, numerics: o.Attention,
		caches: make([]*kvCache, len(m.layers))}
	for il, l := range m.layers {
		if c.caches[il], err = newKVCache(l.attn.cacheShape(), o.CacheK, o.CacheV, size); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// maxCacheBytes refuses KV caches no machine has the memory for, which only a file with a
// wrong context length would ask for.
const maxCacheBytes = 1 << 40

// checkCacheSize makes sure the cache's size is computable and sane before it is allocated.
func checkCacheSize(m *Model, o ContextOptions, size int) error {
	var total float64
	for _, l := range m.layers {
		s := l.attn.cacheShape()
		if s.state > 0 {
			total += 4 * float64(s.state)
			continue
		}
		k, err1 := o.CacheK.RowBytes(int64(s.kDim))
		v, err2 := o.CacheV.RowBytes(int64(s.vDim))
		if err1 != nil || err2 != nil {
			continue // newKVCache reports it
		}
		if s.vInK {
			v = 0
		}
		total += float64(size) * float64(s.heads) * float64(k+v)
	}
	if total > maxCacheBytes {
		return fmt.Errorf("a KV cache of %d positions would take %.3g GB: give a smaller context size (-c)", size, total/1e9)
	}
	return nil
}

// Size is the number of positions the context holds.
func (c *Context) Size() int { return c.size }

// Stats is the routing-statistics recorder of ContextOptions.Stats (nil without one).
func (c *Context) Stats() *ExpertStats { return c.stats }

// Len is the number of positions evaluated so far.
func (c *Context) Len() int { return c.n }

// Reset empties the context. The KV caches' contents are overwritten as positions are
// evaluated again; recurrent states, which every token updates, start again from zero.
func (c *Context) Reset() {
	c.n = 0
	for _, kv := range c.caches {
		clear(kv.state)
	}
}

// Eval evaluates tokens at the next positions, in ubatches, and returns the logits of the
// last token (Vocab values) or, with all, of every token (len(tokens)·Vocab values, token
// by token). The slice is reused by the next call.
func (c *Context) Eval(tokens []int32, all bool) ([]float32, error) {
	if len(tokens) == 0 {
		return nil, errors.New("no tokens to evaluate")
	}
	if c.n+len(tokens) > c.size {
		return nil, fmt.Errorf("%w: %d positions used, %d more do not fit in %d (raise -c)", ErrContextFull, c.n, len(tokens), c.size)
	}
	vocab := c.m.Config.Vocab
	for i, t := range tokens {
		if t < 0 || int(t) >= vocab {
			return nil, fmt.Errorf("token %d (at %d) is outside the vocabulary of %d", t, i, vocab)
		}
	}
	if all {
		c.allLogits = grow(c.allLogits, len(tokens)*vocab)
	}
	var logits []float32
	for start := 0; start < len(tokens); start += c.ubatch {
		end := min(start+c.ubatch, len(tokens))
		outputs := 0
		switch {
		case all:
			outputs = end - start
		case end == len(tokens):
			outputs = 1
		}
		out, err := c.forward(tokens[start:end], outputs)
		if err != nil {
			return nil, err
		}
		if all {
			copy(c.allLogits[start*vocab:], out)
		}
		logits = out
		c.n += end - start
	}
	if all {
		return c.allLogits, nil
	}
	return logits, nil
}

// forward runs one ubatch at positions c.n.. and returns the logits of its last outputs
// tokens. As in llama.cpp, the last layer computes its feed-forward network only for the
// tokens whose logits are wanted, after attention has stored every token's keys and values.
func (c *Context) forward(tokens []int32, outputs int) ([]float32, error) {
	m := c.m
	embd, eps := m.Config.Embd, m.Config.Eps
	n := len(tokens)
	c.pos = grow(c.pos, n)
	for i := range c.pos {
		c.pos[i] = int32(c.n + i)
	}
	c.angleSets = 0
	c.x, c.h, c.y = grow(c.x, n*embd), grow(c.h, n*embd), grow(c.y, n*embd)
	x, h, y := c.x, c.h, c.y
	if err := m.embd.on.GetRows(x, m.embd.w, tokens); err != nil {
		return nil, err
	}
	for il := range m.layers {
		l := &m.layers[il]
		c.scratch.reset()
		rmsNorm(h, x, l.attnNorm, embd, eps)
		if err := l.attn.forward(c, il, h, y); err != nil {
			return nil, fmt.Errorf("layer %d attention: %w", il, err)
		}
		if il == len(m.layers)-1 && outputs < n {
			if outputs == 0 {
				return nil, nil // the cache is filled; nothing else is wanted
			}
			skip := (n - outputs) * embd
			copy(x, x[skip:])
			copy(y, y[skip:])
			n = outputs
			x, h, y = x[:n*embd], h[:n*embd], y[:n*embd]
		}
		tensor.Add(x, x, y)
		rmsNorm(h, x, l.ffnNorm, embd, eps)
		if err := l.ffn.forward(c, il, h, y, n); err != nil {
			return nil, fmt.Errorf("layer %d feed-forward: %w", il, err)
		}
		tensor.Add(x, x, y)
	}
	rmsNorm(h, x, m.outputNorm, embd, eps)
	c.logits = grow(c.logits, n*m.Config.Vocab)
	if err := m.output.matmul(c.logits, h); err != nil {
		return nil, err
	}
	return c.logits, nil
}

// matmuls multiplies x by each weight of ops into its dst: as one operation where they
// sit on one backend that can fuse them, else one after the other.
func (c *Context) matmuls(x []float32, ops ...weightOut) error {
	f, ok := fuser(ops)
	if !ok {
		for _, o := range ops {
			if err := o.w.matmul(o.dst, x); err != nil {
				return err
			}
		}
		return nil
	}
	c.fuse(ops)
	return f.MatMuls(c.fusedOut, c.fusedWeights, x)
}

// mulMatIDs is matmuls for stacks of experts with the same routing (MulMatID).
func (c *Context) mulMatIDs(x []float32, ids []int32, k int, ops ...weightOut) error {
	f, ok := fuser(ops)
	if !ok {
		for _, o := range ops {
			if err := o.w.mulMatID(o.dst, x, ids, k); err != nil {
				return err
			}
		}
		return nil
	}
	c.fuse(ops)
	return f.MulMatIDs(c.fusedOut, c.fusedWeights, x, ids, k)
}

// fuse lists the weights and outputs of ops in the context's buffers, which it reuses so
// that a decode step does not allocate.
func (c *Context) fuse(ops []weightOut) {
	c.fusedWeights, c.fusedOut = c.fusedWeights[:0], c.fusedOut[:0]
	for _, o := range ops {
		c.fusedWeights = append(c.fusedWeights, o.w.w)
		c.fusedOut = append(c.fusedOut, o.dst)
	}
}

// rope rotates x (rows of rowLen values, the heads of each token being evaluated) by r at
// their positions. The cosines and sines, which cost more than the rotation of a decode
// step's heads, are computed by the first layer that asks and reused by the others.
func (c *Context) rope(r *tensor.RoPE, x []float32, rowLen int) {
	for i := range c.angles[:c.angleSets] {
		if a := &c.angles[i]; a.rope.SameAngles(r) {
			r.ApplyAngles(x, rowLen, a.table)
			return
		}
	}
	if c.angleSets == len(c.angles) {
		c.angles = append(c.angles, ropeAngles{})
	}
	a := &c.angles[c.angleSets]
	c.angleSets++
	a.rope, a.table = *r, grow(a.table, len(c.pos)*r.Dims)
	r.Angles(a.table, c.pos)
	r.ApplyAngles(x, rowLen, a.table)
}

// rmsNorm sets dst to the rows of x (of cols values) RMS-normalized and multiplied by the
// norm weights w, as llama.cpp's build_norm (ggml_rms_norm, then ggml_mul).
func rmsNorm(dst, x, w []float32, cols int, eps float32) {
	tensor.RMSNorm(dst, x, cols, eps)
	tensor.Mul(dst, dst, w)
}

// attend runs attention for the tokens being evaluated over layer il's cache: q holds
// [tokens][heads][K dim], dst receives [tokens][heads][V dim]. Like llama.cpp it attends
// over the cache padded to 256 positions (the padding is masked), which fixes how ggml
// splits a long context across threads.
//
// For batches of 64 tokens or more ggml switches to its tiled kernel (F16 or F32 caches),
// which keeps queries, scores and the accumulator in float32; tensor's AttnGGML runs it
// with ggml's order and bits, vectorized. With a quantized cache ggml keeps its per-row
// kernel, which tensor runs in scalar code much slower, so such batches use AttnPrecise
// (float32 with float64 dot products); the agreement with llama.cpp's outputs does not
// change measurably.
//
// p carries the layer's own parameters (scale, window, sinks); attend sets p.Numerics.
func (c *Context) attend(il int, dst, q []float32, heads int, p tensor.AttnParams) error {
	kv := c.caches[il]
	end := c.n + len(c.pos)
	kvLen := min(c.size, max(cacheBlock, (end+cacheBlock-1)/cacheBlock*cacheBlock))
	p.Numerics = c.numerics
	if p.Numerics == tensor.AttnGGML && len(c.pos) >= tensor.AttnTileTokens && !tensor.TiledAttention(len(c.pos), kv.k, kv.v) {
		p.Numerics = tensor.AttnPrecise
	}
	return c.m.host.Attention(dst, q, heads, c.pos, kv.k, kv.v, kvLen, p)
}

// arena hands out float32 and int32 working memory for one layer from buffers that grow to
// the largest layer's needs and are then reused, so a steady state allocates nothing.
type arena struct {
	f32 slab[float32]
	i32 slab[int32]
}

func (a *arena) reset()                 { a.f32.used, a.i32.used = 0, 0 }
func (a *arena) floats(n int) []float32 { return a.f32.take(n) }
func (a *arena) int32s(n int) []int32   { return a.i32.take(n) }

// slab is one buffer of an arena.
type slab[T any] struct {
	buf  []T
	used int
}

// take returns n elements. If the buffer is too small a larger one replaces it; slices
// handed out before stay valid (they keep the old buffer alive until the next reset).
func (s *slab[T]) take(n int) []T {
	if s.used+n > len(s.buf) {
		s.buf = make([]T, max(2*len(s.buf), s.used+n))
		s.used = 0
	}
	out := s.buf[s.used : s.used+n : s.used+n]
	s.used += n
	return out
}

// grow returns b resized to n elements, reusing its storage when it is large enough.
func grow[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n)
	}
	return b[:n]
}
