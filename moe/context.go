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
	// Batch is the most tokens one step of Generate takes (-b, llama.cpp's logical batch):
	// a step's tokens are evaluated in forward passes of UBatch tokens, and only then is
	// the next token sampled. It caps UBatch, as llama.cpp's n_batch caps n_ubatch; 0
	// means UBatch.
	Batch int
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
	// SWAFull (--swa-full) gives sliding-window layers a cache of the whole context, as
	// full layers have, instead of llama.cpp's default ring of their window and a ubatch.
	// The ring gives the same results in a fraction of the memory, but cannot go back
	// further than its window (Truncate; the server keeps checkpoints for that).
	SWAFull bool
}

// DefaultContextOptions are llama.cpp's defaults: the training context, batch 2048 and
// ubatch 512, an F16 cache and its flash attention arithmetic.
func DefaultContextOptions() ContextOptions {
	return ContextOptions{Batch: 2048, UBatch: 512, CacheK: tensor.F16, CacheV: tensor.F16, Attention: tensor.AttnGGML}
}

// batchSizes applies llama.cpp's rules to -b and -ub (llama_context's constructor): with
// causal attention a batch holds no more than the context, and a ubatch no more than a
// batch. A zero batch is the ubatch.
func batchSizes(batch, ubatch, size int) (int, int, error) {
	if ubatch <= 0 {
		return 0, 0, fmt.Errorf("ubatch size %d: give a positive size (-ub)", ubatch)
	}
	if batch < 0 {
		return 0, 0, fmt.Errorf("batch size %d: give a positive size (-b)", batch)
	}
	if batch == 0 {
		batch = ubatch
	}
	batch = min(batch, size)
	return batch, min(ubatch, batch), nil
}

// ErrContextFull is returned (wrapped) when tokens would not fit in the context.
var ErrContextFull = errors.New("context full")

// Context is one sequence's state: its KV cache (or recurrent state) and the position
// reached. Its own forward passes (Eval) keep their working memory in the context, reused
// from one call to the next so that decoding a token allocates nothing; a Batch evaluates
// several contexts in one pass. It is not safe for concurrent use.
type Context struct {
	m        *Model
	size     int
	batch    int // tokens in a step of Generate (-b)
	ubatch   int // tokens in a forward pass (-ub)
	n        int // positions evaluated so far
	caches   []*kvCache
	router   tensor.RouterConfig
	stats    *ExpertStats
	numerics tensor.AttnNumerics

	own       Batch     // the passes of Eval and Generate
	allLogits []float32 // every token's logits across ubatches (Eval with all)
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
	batch, ubatch, err := batchSizes(o.Batch, o.UBatch, size)
	if err != nil {
		return nil, err
	}
	rc := m.Config.Router
	rc.SER = o.SER
	if err := rc.Validate(); err != nil {
		return nil, err
	}
	if err := checkCacheSize(m, o, size, ubatch); err != nil {
		return nil, err
	}
	c := &Context{m: m, size: size, batch: batch, ubatch: ubatch, router: rc, stats: o.Stats, numerics: o.Attention,
		caches: make([]*kvCache, len(m.layers)), own: Batch{p: newPass(m)}}
	for il, l := range m.layers {
		dev, s := m.kvDev[il], l.attn.cacheShape()
		if err := checkCacheOps(m.backends[dev], s, o); err != nil {
			return nil, errors.Join(fmt.Errorf("layer %d: %w", il, err), c.Close())
		}
		var err error
		if c.caches[il], err = newKVCache(m.backends[dev], dev, s, o.CacheK, o.CacheV, cacheCells(s, size, ubatch, o.SWAFull), size); err != nil {
			return nil, errors.Join(err, c.Close())
		}
	}
	return c, nil
}

// checkPass makes sure n tokens of the context can be evaluated in one pass: a
// sliding-window layer's ring holds the window before them and the n new positions, which
// Eval's ubatches always fit.
func (c *Context) checkPass(n int) error {
	for _, kv := range c.caches {
		if !kv.ring {
			continue
		}
		if most := kv.k.Rows - kv.shape.window + 1; n > most {
			return fmt.Errorf("%d tokens in one pass: the sliding-window cache of %d cells holds the window of %d and at most %d new positions (-ub)",
				n, kv.k.Rows, kv.shape.window, most)
		}
	}
	return nil
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
func checkCacheSize(m *Model, o ContextOptions, size, ubatch int) error {
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
		idx, _ := o.CacheK.RowBytes(int64(s.indexDim))
		total += float64(cacheCells(s, size, ubatch, o.SWAFull)) * (float64(s.heads)*float64(k+v) + float64(idx))
	}
	if total > maxCacheBytes {
		return fmt.Errorf("a KV cache of %d positions would take %.3g GB: give a smaller context size (-c)", size, total/1e9)
	}
	return nil
}

// CacheBytes is the memory the context's KV caches and recurrent states take on each
// device, by device name: what place's memory report gives for one sequence.
func (c *Context) CacheBytes() map[string]int64 {
	out := map[string]int64{}
	for _, kv := range c.caches {
		for _, buf := range kv.bufs {
			out[buf.Device()] += buf.Size()
		}
	}
	return out
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
		kv.reset()
	}
}

// Truncate keeps the first n positions evaluated and forgets the rest, so that the next
// Eval continues at position n: a prompt that shares its first n tokens with what the
// context holds evaluates only the rest (llama-server's prompt cache). A full attention
// layer's cache allows any n up to Len, the positions after n being overwritten as they
// are evaluated again; a sliding-window layer's ring only an n whose window it still holds
// (it has overwritten older positions); a recurrent layer's state exists only at Len, so a
// model with one can only keep everything (n == Len). Truncate reports whether the context
// now holds what evaluating on from n needs, and leaves it unchanged when it cannot: the
// caller then restores a checkpoint or evaluates the prompt again.
func (c *Context) Truncate(n int) bool {
	if n < 0 || n > c.n {
		return false
	}
	for _, kv := range c.caches {
		if kv.state.Valid() && n < c.n || !kv.holdsFrom(n) {
			return false
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
	errs = append(errs, c.own.Close())
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
	if err := c.checkTokens(tokens); err != nil {
		return nil, err
	}
	vocab := c.m.Config.Vocab
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
		out, err := c.own.p.forwardOne(c, tokens[start:end], outputs)
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

// checkTokens makes sure tokens fit in the context after the positions it holds and are
// in the vocabulary.
func (c *Context) checkTokens(tokens []int32) error {
	if c.n+len(tokens) > c.size {
		return fmt.Errorf("%w: %d positions used, %d more do not fit in %d (raise -c)", ErrContextFull, c.n, len(tokens), c.size)
	}
	vocab := c.m.Config.Vocab
	for i, t := range tokens {
		if t < 0 || int(t) >= vocab {
			return fmt.Errorf("token %d (at %d) is outside the vocabulary of %d", t, i, vocab)
		}
	}
	return nil
}
