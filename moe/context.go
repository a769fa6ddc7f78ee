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
// memory of the forward pass on each device, reused from one call to the next so that
// decoding a token allocates nothing. It is not safe for concurrent use.
type Context struct {
	m        *Model
	size     int
	ubatch   int
	n        int // positions evaluated so far
	caches   []*kvCache
	router   tensor.RouterConfig
	stats    *ExpertStats
	numerics tensor.AttnNumerics

	pos       []int32   // positions of the tokens being evaluated
	logits    []float32 // logits of the last forward pass
	allLogits []float32 // every token's logits across ubatches (Eval with all)
	mem       []deviceMemory
	err       error // the first error of the forward pass (see device.go)
	staging   []byte

	// Reused by project and mulMatIDs, and by routing statistics.
	fused      []backend.Weight
	outs       []value
	statIDs    []int32
	statWeight []float32
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
	if err := rc.Validate(); err != nil {
		return nil, err
	}
	if err := checkCacheSize(m, o, size); err != nil {
		return nil, err
	}
	c := &Context{m: m, size: size, ubatch: min(o.UBatch, size), router: rc, stats: o.Stats, numerics: o.Attention,
		caches: make([]*kvCache, len(m.layers)), mem: make([]deviceMemory, len(m.backends))}
	for il, l := range m.layers {
		dev := m.kvDev[il]
		if err := checkCacheOps(m.backends[dev], l.attn.cacheShape(), o); err != nil {
			return nil, errors.Join(fmt.Errorf("layer %d: %w", il, err), c.Close())
		}
		var err error
		if c.caches[il], err = newKVCache(m.backends[dev], dev, l.attn.cacheShape(), o.CacheK, o.CacheV, size); err != nil {
			return nil, errors.Join(err, c.Close())
		}
	}
	return c, nil
}

// checkCacheOps makes sure the device that holds a layer's cache runs the operations that
// read and write it: attention and set-rows for the cache types, or the recurrence of a
// linear-attention layer. They run where the cache is, so a device without them cannot hold
// it (-nkvo keeps every cache in RAM; -ctk and -ctv choose other types).
func checkCacheOps(b backend.Backend, s cacheShape, o ContextOptions) error {
	name := b.Device().Name
	if s.state > 0 {
		for _, op := range []backend.Op{backend.OpCausalConv, backend.OpGatedDeltaRule} {
			if !b.Supports(op, tensor.F32) {
				return fmt.Errorf("%s holds the recurrent state but does not run %s", name, op)
			}
		}
		return nil
	}
	for _, t := range []tensor.Type{o.CacheK, o.CacheV} {
		for _, op := range []backend.Op{backend.OpSetRows, backend.OpAttention} {
			if !b.Supports(op, t) {
				return fmt.Errorf("%s holds the KV cache but does not run %s on a %s cache: try -nkvo or another -ctk/-ctv", name, op, t)
			}
		}
	}
	return nil
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
		kv.clearState()
	}
}

// Truncate keeps the first n positions evaluated and forgets the rest, so that the next
// Eval continues at position n: a prompt that shares its first n tokens with what the
// context holds evaluates only the rest (llama-server's prompt cache). An attention layer's
// cache allows any n up to Len, the positions after n being overwritten as they are
// evaluated again; a recurrent layer's state exists only at Len, so a model with one can
// only keep everything (n == Len). Truncate reports whether the context now holds exactly
// the first n positions, and leaves it unchanged when it cannot.
func (c *Context) Truncate(n int) bool {
	if n < 0 || n > c.n {
		return false
	}
	if n < c.n {
		for _, kv := range c.caches {
			if kv.state.Valid() {
				return false
			}
		}
	}
	c.n = n
	return true
}

// Close releases the context's device memory: the KV caches and the working memory. The
// context must not be used afterwards.
func (c *Context) Close() error {
	var errs []error
	for _, kv := range c.caches {
		if kv != nil {
			errs = append(errs, kv.free())
		}
	}
	for i := range c.mem {
		b := c.m.backends[i]
		errs = append(errs, c.mem[i].pass.free(b), c.mem[i].layer.free(b))
	}
	c.caches = nil
	return errors.Join(errs...)
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
// The residual stream stays on the device of the layer's norms, and moves only where the
// next one is elsewhere.
func (c *Context) forward(tokens []int32, outputs int) ([]float32, error) {
	m := c.m
	eps := m.Config.Eps
	n := len(tokens)
	c.pos = grow(c.pos, n)
	for i := range c.pos {
		c.pos[i] = int32(c.n + i)
	}
	c.err = nil
	for i := range c.mem {
		c.mem[i].pass.reset(m.backends[i])
	}
	x := c.getRows(m.embd, tokens)
	for il := range m.layers {
		l := &m.layers[il]
		for i := range c.mem {
			c.mem[i].layer.reset(m.backends[i])
		}
		x = c.follow(x, l.attnNorm)
		y := l.attn.forward(c, il, c.rmsNorm(x, l.attnNorm, eps))
		if c.err != nil {
			return nil, fmt.Errorf("layer %d attention: %w", il, c.err)
		}
		if il == len(m.layers)-1 && outputs < n {
			if outputs == 0 {
				return nil, nil // the cache is filled; nothing else is wanted
			}
			x, y = x.Slice(n-outputs, n), y.Slice(n-outputs, n)
			n = outputs
		}
		c.add(x, x, y)
		x = c.follow(x, l.ffnNorm)
		y = l.ffn.forward(c, il, c.rmsNorm(x, l.ffnNorm, eps))
		c.add(x, x, y)
		if c.err != nil {
			return nil, fmt.Errorf("layer %d feed-forward: %w", il, c.err)
		}
	}
	logits := c.matmul(m.output, c.rmsNorm(x, m.outputNorm, eps))
	c.logits = grow(c.logits, n*m.Config.Vocab)
	c.read(c.logits, logits)
	if c.err != nil {
		return nil, fmt.Errorf("output: %w", c.err)
	}
	return c.logits, nil
}

// follow returns the residual stream x on the device of the norm that reads it next: x
// itself, or a copy that lives through the pass.
func (c *Context) follow(x value, norm param) value {
	if c.err != nil || x.Device() == c.m.names[norm.dev] {
		return x
	}
	y := c.copyTo(&c.mem[norm.dev].pass, norm.dev, x)
	c.arrive(x, y)
	return y
}

// attend runs attention for the tokens being evaluated over layer il's cache: q holds
// [tokens·heads][K dim]; the result is [tokens·heads][V dim], on the cache's device. Like
// llama.cpp it attends over the cache padded to 256 positions (the padding is masked),
// which fixes how ggml splits a long context across threads.
//
// For batches of 64 tokens or more ggml switches to its tiled kernel (F16 or F32 caches),
// which keeps queries, scores and the accumulator in float32; tensor's AttnGGML runs it
// with ggml's order and bits, vectorized. With a quantized cache ggml keeps its per-row
// kernel, which tensor runs in scalar code much slower, so such batches use AttnPrecise
// (float32 with float64 dot products); the agreement with llama.cpp's outputs does not
// change measurably.
//
// p carries the layer's own parameters (scale, window); attend sets p.Numerics. sinks, when
// valid, holds a logit per head (gpt-oss).
func (c *Context) attend(il int, q value, heads, vDim int, sinks param, p tensor.AttnParams) value {
	kv := c.caches[il]
	dev := kv.dev
	end := c.n + len(c.pos)
	kvLen := min(c.size, max(cacheBlock, (end+cacheBlock-1)/cacheBlock*cacheBlock))
	p.Numerics = c.numerics
	if p.Numerics == tensor.AttnGGML && len(c.pos) >= tensor.AttnTileTokens &&
		!tensor.TiledAttention(len(c.pos), tensor.KV{Type: kv.k.Type, Dim: q.Cols}, tensor.KV{Type: kv.v.Type, Dim: vDim}) {
		p.Numerics = tensor.AttnPrecise
	}
	q, s := c.to(dev, q), c.to(dev, sinks.t)
	o := c.alloc(dev, tensor.F32, vDim, q.Rows)
	if c.err == nil {
		c.fail(c.backendOf(dev).Attention(o, q, heads, c.pos, kv.k, kv.v, s, kvLen, p))
	}
	return o
}

// toCache moves the values xs point to onto the device of layer il's cache, with one wait:
// the query, keys and values of a layer whose cache the plan keeps elsewhere (-nkvo).
func (c *Context) toCache(il int, xs ...*value) {
	c.toAll(c.caches[il].dev, xs...)
}

// store writes the keys and values of the tokens being evaluated into layer il's cache
// (k: [tokens][heads·K dim], v likewise; v is ignored where the values live in the keys),
// converted to the cache types as ggml_set_rows converts them.
func (c *Context) store(il int, k, v value) {
	kv := c.caches[il]
	dev := kv.dev
	b := c.backendOf(dev)
	k = c.to(dev, k)
	if c.err == nil {
		c.fail(b.SetRows(kv.k, c.n, k.Reshape(kv.k.Cols)))
	}
	if kv.shape.vInK {
		return
	}
	v = c.to(dev, v)
	if c.err == nil {
		c.fail(b.SetRows(kv.v, c.n, v.Reshape(kv.v.Cols)))
	}
}

// arena hands out a device's working memory from a buffer that grows to the largest
// pass's (or layer's) needs and is then reused, so a steady state allocates nothing.
type arena struct {
	buf      backend.Buffer
	used     int64
	outgrown []backend.Buffer // replaced during this pass or layer; freed at the next reset
}

// arenaAlign keeps every value at a cache line.
const arenaAlign = 64

// take is a new contiguous value of rows×cols. If the buffer is too small a larger one
// replaces it; values handed out before stay valid until the next reset.
func (a *arena) take(b backend.Backend, t tensor.Type, cols, rows int) (value, error) {
	rb, err := backend.RowBytes(t, cols)
	if err != nil {
		return value{}, err
	}
	n := (rb*int64(rows) + arenaAlign - 1) / arenaAlign * arenaAlign
	if a.buf == nil || a.used+n > a.buf.Size() {
		size := max(n, 1<<16)
		if a.buf != nil {
			a.outgrown = append(a.outgrown, a.buf)
			size = max(size, 2*a.buf.Size())
		}
		if a.buf, err = b.Alloc(size); err != nil {
			a.buf = nil
			return value{}, err
		}
		a.used = 0
	}
	x, err := backend.NewTensor(a.buf, a.used, t, cols, rows)
	a.used += n
	return x, err
}

// reset makes the whole buffer available again and frees those it replaced.
func (a *arena) reset(b backend.Backend) {
	for _, o := range a.outgrown {
		_ = b.Free(o) // a buffer of b's own: freeing it cannot fail
	}
	a.outgrown = a.outgrown[:0]
	a.used = 0
}

// free releases the arena's memory.
func (a *arena) free(b backend.Backend) error {
	a.reset(b)
	if a.buf == nil {
		return nil
	}
	err := b.Free(a.buf)
	a.buf = nil
	return err
}

// grow returns b resized to n elements, reusing its storage when it is large enough.
func grow[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n)
	}
	return b[:n]
}
