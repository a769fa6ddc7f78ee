package moe

import (
	"errors"
	"fmt"
	"slices"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/tensor"
)

// Batch evaluates the tokens of several sequences (contexts of one model) in one forward
// pass, as llama.cpp's llama_decode does with a batch of several sequence ids: every
// matrix product, the experts (grouped across all the batch's tokens, so that an expert's
// weights are read once per pass), the norms and the output head run over the whole batch,
// while attention, the KV cache writes and the recurrent layers run per sequence, on its
// rows and its own cache. A batch of one decode token from each of n sequences reads the
// weights they share (attention, dense layers, the output head) once, and of the experts
// only those its tokens are routed to: much less than n steps on a memory-bound model.
//
// A Batch keeps the pass's working memory, reused from one Eval to the next so that a
// steady state allocates nothing. It is not safe for concurrent use, and no context may be
// evaluated by two batches at once.
type Batch struct {
	p      pass
	tokens []int32 // the batch's tokens, sequence after sequence
}

// BatchSeq is one sequence's part of a batch: Tokens are evaluated at the context's next
// positions, and Logits says whether the logits of the last of them are wanted.
type BatchSeq struct {
	Context *Context
	Tokens  []int32
	Logits  bool
}

// NewBatch makes a batch for the model's contexts. Its working memory grows with the
// largest pass it runs; Close releases it.
func (m *Model) NewBatch() *Batch { return &Batch{p: newPass(m)} }

// Eval evaluates each sequence's tokens at its context's next positions, in one forward
// pass, and advances the contexts. The caller sizes the batch (all its tokens are one
// ubatch). The contexts must be distinct contexts of the batch's model made with the same
// router and attention options. After an error the contexts' positions are unchanged but a
// recurrent layer's state may have advanced: reset them before reusing them.
func (b *Batch) Eval(seqs []BatchSeq) error {
	if err := b.check(seqs); err != nil {
		return err
	}
	b.tokens = b.tokens[:0]
	b.p.segs = b.p.segs[:0]
	for _, s := range seqs {
		outputs := 0
		if s.Logits {
			outputs = 1
		}
		b.p.segs = append(b.p.segs, segment{c: s.Context, first: len(b.tokens), rows: len(s.Tokens), outputs: outputs})
		b.tokens = append(b.tokens, s.Tokens...)
	}
	if _, err := b.p.forward(b.tokens); err != nil {
		return err
	}
	for _, s := range seqs {
		s.Context.n += len(s.Tokens)
	}
	return nil
}

// check refuses a batch Eval cannot run, with the sequence at fault.
func (b *Batch) check(seqs []BatchSeq) error {
	if len(seqs) == 0 {
		return errors.New("an empty batch")
	}
	first := seqs[0].Context
	for i, s := range seqs {
		c := s.Context
		switch {
		case c == nil:
			return fmt.Errorf("sequence %d of the batch has no context", i)
		case c.m != b.p.m:
			return fmt.Errorf("sequence %d of the batch: its context belongs to another model", i)
		case c.router != first.router || c.numerics != first.numerics:
			return fmt.Errorf("sequence %d of the batch: its context's router or attention options differ from the first's", i)
		case len(s.Tokens) == 0:
			return fmt.Errorf("sequence %d of the batch has no tokens", i)
		}
		for _, o := range seqs[:i] {
			if o.Context == c {
				return fmt.Errorf("sequence %d of the batch: its context is already in the batch", i)
			}
		}
		if err := c.checkTokens(s.Tokens); err != nil {
			return fmt.Errorf("sequence %d of the batch: %w", i, err)
		}
		if err := c.checkPass(len(s.Tokens)); err != nil {
			return fmt.Errorf("sequence %d of the batch: %w", i, err)
		}
	}
	return nil
}

// Logits are the logits of sequence i's last token in the last Eval (Vocab values), nil
// where its BatchSeq did not ask for them. The slice is reused by the next Eval.
func (b *Batch) Logits(i int) []float32 {
	s := b.p.segs[i]
	if s.outputs == 0 {
		return nil
	}
	vocab := b.p.m.Config.Vocab
	return b.p.logits[s.first*vocab : (s.first+1)*vocab]
}

// Close releases the batch's working memory. The batch must not be used afterwards.
func (b *Batch) Close() error {
	var errs []error
	for i := range b.p.mem {
		be := b.p.m.backends[i]
		errs = append(errs, b.p.mem[i].pass.free(be), b.p.mem[i].layer.free(be))
	}
	return errors.Join(errs...)
}

// pass is the working state of a forward pass: the batch's segments and the tokens'
// positions, each device's working memory, and the first error of the pass (see
// device.go). The forward code takes it as c, as llama.cpp's graph builders take their
// context.
type pass struct {
	m        *Model
	segs     []segment
	pos      []int32 // positions of the tokens being evaluated
	router   tensor.RouterConfig
	numerics tensor.AttnNumerics
	logits   []float32 // logits of the last pass, the segments' outputs in order
	// selection is the positions the last lightning indexer of the pass chose
	// (DeepSeek Sparse Attention), which GLM's shared layers reuse.
	selection selection
	mem       []deviceMemory
	err       error
	staging   []byte

	// Reused by project and mulMatIDs (outs), product (single), and by routing statistics.
	fused      []backend.Weight
	outs       []value
	single     []value
	statIDs    []int32
	statWeight []float32
	// indexScores holds a lightning indexer's scores read back for the top-k.
	indexScores []float32
	// moved holds the current MoE layer's routing block copied to each device that runs a
	// share of its experts (movedBlock).
	moved []value

	// For op offload: the experts the current MoE layer's batch routes to (nil where its
	// experts run where they are held; routeExperts), the host buffers behind them, and
	// the byte ranges of a stack of experts to stage.
	routed    []bool
	routedBuf []bool
	hostIDs   []int32
	spans     [][2]int64
}

// segment is one sequence's rows of a pass: rows tokens of c from row first, at c's
// positions c.n.., of which the last outputs want logits (0, 1 or rows). Once the last
// layer keeps only the rows whose logits are wanted, first and rows describe those.
type segment struct {
	c           *Context
	first, rows int
	outputs     int
}

// of is x's rows of the segment (x one row per token of the pass).
func (s segment) of(x value) value { return x.Slice(s.first, s.first+s.rows) }

func newPass(m *Model) pass { return pass{m: m, mem: make([]deviceMemory, len(m.backends))} }

// forwardOne is a pass over tokens of c alone, of which the last outputs want logits.
func (c *pass) forwardOne(ctx *Context, tokens []int32, outputs int) ([]float32, error) {
	c.segs = append(c.segs[:0], segment{c: ctx, rows: len(tokens), outputs: outputs})
	return c.forward(tokens)
}

// forward runs one ubatch, the segments' tokens, and returns the logits of the tokens
// that want them (segment by segment). As in llama.cpp, the last layer computes its
// feed-forward network only for those tokens, after attention has stored every token's
// keys and values. The residual stream stays on the device of the layer's norms, and moves
// only where the next one is elsewhere.
func (c *pass) forward(tokens []int32) ([]float32, error) {
	m := c.m
	eps := m.Config.Eps
	n := len(tokens)
	c.pos = grow(c.pos, n)
	outputs := 0
	for _, s := range c.segs {
		for i := range s.rows {
			c.pos[s.first+i] = int32(s.c.n + i)
		}
		outputs += s.outputs
	}
	c.router, c.numerics = c.segs[0].c.router, c.segs[0].c.numerics
	c.err = nil
	for i := range c.mem {
		c.mem[i].pass.reset(m.backends[i])
	}
	if m.cache != nil {
		// Between passes: the slots the last passes' routing asks for are filled.
		if err := m.cache.refill(); err != nil {
			return nil, fmt.Errorf("expert cache: %w", err)
		}
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
				return nil, nil // the caches are filled; nothing else is wanted
			}
			x, y = c.keepOutputs(x, y, outputs)
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

// keepOutputs returns the rows of x and y (the residual stream and the last attention's
// output) whose logits are wanted, segment by segment, and makes the segments describe
// those rows. Where they are one run of rows - one sequence, or decode steps after a
// prompt's last piece - they are views; else they are gathered into new values.
func (c *pass) keepOutputs(x, y value, outputs int) (value, value) {
	from, to, run := -1, -1, true
	for _, s := range c.segs {
		if s.outputs == 0 {
			continue
		}
		start := s.first + s.rows - s.outputs
		if from < 0 {
			from = start
		} else if start != to {
			run = false
		}
		to = s.first + s.rows
	}
	if run {
		x, y = x.Slice(from, to), y.Slice(from, to)
	} else {
		gx := c.alloc(c.devOf(x), tensor.F32, x.Cols, outputs)
		gy := c.alloc(c.devOf(y), tensor.F32, y.Cols, outputs)
		row := 0
		for _, s := range c.segs {
			start, end := s.first+s.rows-s.outputs, s.first+s.rows
			c.copyValue(gx.Slice(row, row+s.outputs), x.Slice(start, end))
			c.copyValue(gy.Slice(row, row+s.outputs), y.Slice(start, end))
			row += s.outputs
		}
		x, y = gx, gy
	}
	row := 0
	for i := range c.segs {
		s := &c.segs[i]
		s.first, s.rows = row, s.outputs
		row += s.outputs
	}
	return x, y
}

// follow returns the residual stream x on the device of the norm that reads it next: x
// itself, or a copy that lives through the pass.
func (c *pass) follow(x value, norm param) value {
	if c.err != nil || x.Device() == c.m.names[norm.dev] {
		return x
	}
	y := c.copyTo(&c.mem[norm.dev].pass, norm.dev, x)
	c.arrive(x, y)
	return y
}

// attend runs attention for the tokens being evaluated over layer il's caches, each
// segment's queries over its own sequence's cache: q holds [tokens·heads][K dim]; the
// result is [tokens·heads][V dim], on the caches' device. Like llama.cpp it attends over a
// cache padded to 256 positions (the padding is masked), which fixes how ggml splits a
// long context across threads.
//
// For batches of 64 tokens or more ggml switches to its tiled kernel (F16 or F32 caches),
// which keeps queries, scores and the accumulator in float32; tensor's AttnGGML runs it
// with ggml's order and bits, vectorized. With a quantized cache ggml keeps its per-row
// kernel, which tensor runs in scalar code much slower, so such batches use AttnPrecise
// (float32 with float64 dot products); the agreement with llama.cpp's outputs does not
// change measurably. The choice is made per sequence, by its own tokens in the pass.
//
// p carries the layer's own parameters (scale, window); attend sets p.Numerics. sinks, when
// valid, holds a logit per head (gpt-oss).
func (c *pass) attend(il int, q value, heads, vDim int, sinks param, p tensor.AttnParams) value {
	dev := c.m.kvDev[il]
	q, s := c.to(dev, q), c.to(dev, sinks.t)
	o := c.alloc(dev, tensor.F32, vDim, q.Rows)
	if c.err != nil {
		return o
	}
	perToken := q.Rows / len(c.pos) // query rows (heads) per token
	for _, sg := range c.segs {
		c.attendRows(il, o, q, s, heads, vDim, sg.c, sg.first, sg.rows, sg.rows, perToken, p)
		if c.err != nil {
			break
		}
	}
	return o
}

// attendRows attends the pass's tokens first..first+rows-1, all of context ctx, over its
// layer il cache (see attend), as part of a batch of batch tokens of that context.
func (c *pass) attendRows(il int, o, q, sinks value, heads, vDim int, ctx *Context, first, rows, batch, perToken int, p tensor.AttnParams) {
	kv := ctx.caches[il]
	end := int(c.pos[first+rows-1]) + 1
	kvLen := min(ctx.size, max(cacheBlock, (end+cacheBlock-1)/cacheBlock*cacheBlock))
	p.Numerics, p.Batch = c.attnNumerics(kv, q.Cols, vDim, batch), batch
	from, to := first*perToken, (first+rows)*perToken
	c.fail(c.backendOf(c.devOf(o)).Attention(o.Slice(from, to), q.Slice(from, to), heads, c.pos[first:first+rows], kv.k, kv.v, sinks, kvLen, p))
}

// attnNumerics is how the tokens of a batch of batch tokens of one context attend over the
// cache kv: as the pass's numerics ask (ggml chooses its kernel by the whole batch, which
// AttnParams.Batch passes on), except that where ggml keeps its per-row kernel for a batch
// of 64 or more only because the cache is quantized, AttnPrecise stands in for it (see
// attend).
func (c *pass) attnNumerics(kv *kvCache, qDim, vDim, batch int) tensor.AttnNumerics {
	k, v := tensor.KV{Type: kv.k.Type, Dim: qDim}, tensor.KV{Type: kv.v.Type, Dim: vDim}
	if c.numerics == tensor.AttnGGML && batch >= tensor.AttnTileTokens && !tensor.TiledAttention(batch, k, v) {
		return tensor.AttnPrecise
	}
	return c.numerics
}

// attendSelected is attend where each token reads only the positions sel chose for it
// (DeepSeek Sparse Attention; no sinks, no window), which it passes to the kernel to keep
// (tensor.AttnParams.Keep): ggml's flash attention skips the positions llama.cpp's top-k
// mask hides, so the kept ones give the same sums. Tokens that keep every position attend
// as attend does; the others one at a time with their batch's kernel (tiled from 64 tokens),
// a lone token over the padded positions ggml splits across threads, a token of a batch
// only as far as its own position.
func (c *pass) attendSelected(il int, q value, heads, vDim int, sel *selection, p tensor.AttnParams) value {
	dev := c.m.kvDev[il]
	q = c.to(dev, q)
	o := c.alloc(dev, tensor.F32, vDim, q.Rows)
	if c.err != nil {
		return o
	}
	perToken := q.Rows / len(c.pos)
	for _, sg := range c.segs {
		// The tokens that keep every position come first (positions ascend in a segment).
		dense := slices.IndexFunc(sel.positions[sg.first:sg.first+sg.rows], func(ps []int32) bool { return ps != nil })
		if dense < 0 {
			dense = sg.rows
		}
		if dense > 0 {
			c.attendRows(il, o, q, value{}, heads, vDim, sg.c, sg.first, dense, sg.rows, perToken, p)
		}
		kv := sg.c.caches[il]
		for t := sg.first + dense; t < sg.first+sg.rows && c.err == nil; t++ {
			kvLen := int(c.pos[t]) + 1
			if sg.rows == 1 {
				kvLen = min(sg.c.size, max(cacheBlock, (kvLen+cacheBlock-1)/cacheBlock*cacheBlock))
			}
			pt := p
			pt.Keep = sel.positions[t]
			pt.Numerics, pt.Batch = c.attnNumerics(kv, q.Cols, vDim, sg.rows), sg.rows
			from, to := t*perToken, (t+1)*perToken
			c.fail(c.backendOf(dev).Attention(o.Slice(from, to), q.Slice(from, to), heads, c.pos[t:t+1], kv.k, kv.v, value{}, kvLen, pt))
		}
		if c.err != nil {
			break
		}
	}
	return o
}

// toCache moves the values xs point to onto the device of layer il's caches, with one
// wait: the query, keys and values of a layer whose cache the plan keeps elsewhere (-nkvo).
func (c *pass) toCache(il int, xs ...*value) {
	c.toAll(c.m.kvDev[il], xs...)
}

// store writes the keys and values of the tokens being evaluated into layer il's caches,
// each segment's rows into its sequence's cache (k: [tokens][heads·K dim], v likewise; v
// is ignored where the values live in the keys), converted to the cache types as
// ggml_set_rows converts them.
func (c *pass) store(il int, k, v value) {
	dev := c.m.kvDev[il]
	k = c.to(dev, k)
	for _, sg := range c.segs {
		kv := sg.c.caches[il]
		if c.err != nil {
			return
		}
		c.fail(kv.setRows(kv.k, sg.c.n, sg.of(k.Reshape(kv.k.Cols))))
		if kv.shape.vInK {
			continue
		}
		v = c.to(dev, v)
		if c.err == nil {
			c.fail(kv.setRows(kv.v, sg.c.n, sg.of(v.Reshape(kv.v.Cols))))
		}
	}
}
