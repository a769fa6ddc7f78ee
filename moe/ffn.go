package moe

import (
	"fmt"
	"github.com/moerun/moerun/backend"

	"github.com/moerun/moerun/tensor"
)

// denseFFN is a SwiGLU feed-forward network, down(silu(gate·x) ⊙ up·x) (llama.cpp's
// build_ffn with LLM_FFN_SILU and LLM_FFN_PAR): DeepSeek's leading dense layers and its
// shared experts.
type denseFFN struct {
	gate, up, down weight
	width          int
}

func (f *denseFFN) forward(c *pass, _ int, in value) value {
	p := c.project(in, f.gate, f.up)
	g, u := p[0], p[1]
	c.swiGLU(g, u, false)
	return c.matmul(f.down, g)
}

// moeFFN is a mixture-of-experts layer (llama.cpp's build_moe_ffn): the router picks
// experts per token, each expert is a SwiGLU network computed for the tokens routed to it
// (MulMatID groups them, so an expert's weights are read once per batch), and the experts'
// outputs are summed with the router's weights in slot order. Shared experts, when the
// model has them, run on every token and are added to the sum.
type moeFFN struct {
	router        weight // ffn_gate_inp
	selectionBias param  // exp_probs_b, when present
	// experts holds the stacks of experts (ffn_{gate,up,down}_exps): one share, or one per
	// device where the plan splits them by expert.
	experts []expertShare
	width   int // an expert's hidden width
	embd    int
	shared  *denseFFN // nil without shared experts
	// cache, when the expert cache holds some of the layer's experts on its GPU, is its
	// slots: experts then holds the slots' share and the host's.
	cache *cachedLayer
	// sharedGate (ffn_gate_inp_shexp), when the model has one, scales the shared experts'
	// output per token by sigmoid(sharedGate·x) (Qwen2-MoE, Qwen3.5-MoE).
	sharedGate *weight
	// routerBias (gpt-oss) is added to the router logits (ffn_gate_inp.bias). Absent in
	// other models, as the experts' biases are.
	routerBias param
	// clampedGLU selects gpt-oss's clamped SwiGLU (swiglu_oai) over plain SwiGLU.
	clampedGLU bool
}

// gpt-oss's clamped SwiGLU constants, fixed in llama.cpp's build_moe_ffn
// (LLM_FFN_SWIGLU_OAI_MOE) rather than read from the model.
const (
	oaiAlpha = 1.702
	oaiLimit = 7.0
)

func (f *moeFFN) forward(c *pass, il int, in value) value {
	cfg := c.router
	n, k := in.Rows, cfg.Used
	logits := c.matmul(f.router, in)
	c.addParam(logits, f.routerBias)
	// The routing runs where the router's logits are. Where experts run elsewhere (-ot
	// exps=CPU, a share of a split stack, or a large batch offloading host-held experts to
	// a GPU), their input and the routing cross to them as one block: one copy and one
	// wait per device.
	dev := c.on(c.devOf(logits), backend.OpRoute, tensor.F32)
	exp := dev
	for i := range f.experts {
		if run := c.runsOn(f.experts[i].gate, backend.OpMulMatID, n); run != dev {
			exp = run
			break
		}
	}
	block, x, ids, weights := c.routing(dev, exp, in, n, k)
	logits, bias := c.to(dev, logits), c.to(dev, f.selectionBias.t)
	if c.err == nil {
		c.fail(c.backendOf(dev).Route(ids, weights, logits, bias, cfg))
	}
	c.record(il, ids, weights)
	// Each share's products give zero rows for the slots routed elsewhere, so adding the
	// shares' outputs gives the whole stack's, bit for bit, before the weighted sum.
	// The block crosses to every other device first: a copy out of a GPU waits for the
	// GPU, and issued after the GPU's share of the experts it would wait for them too,
	// where the host can compute its share while the GPU computes its own.
	c.moved = c.moved[:0]
	for i := range f.experts {
		if run := c.runsOn(f.experts[i].gate, backend.OpMulMatID, n); run != dev && block.Valid() {
			c.movedBlock(run, block)
		}
	}
	// The shared experts run where the plan holds them (on the GPU with -ot exps=CPU):
	// issued before the routed experts, and submitted where those run elsewhere, a GPU
	// computes them while the host computes the experts it holds. Their sum is added after
	// the routed experts' as before. So is each share's work before the next share's
	// elsewhere.
	var shared value
	if f.shared != nil {
		shared = f.sharedExperts(c, il, in)
		if d := c.devOf(shared); c.err == nil && f.sharesElsewhere(c, d, 0, n) {
			c.submit(d)
		}
	}
	var down value
	for i := range f.experts {
		d := f.expertProducts(c, &f.experts[i], dev, block, x, ids, n, k)
		if i == 0 {
			down = d
		} else {
			c.add(down, down, d)
		}
		if on := c.devOf(d); c.err == nil && f.sharesElsewhere(c, on, i+1, n) {
			c.submit(on)
		}
	}
	if f.cache != nil {
		c.countCached(f.cache, block, ids)
	}
	sum := c.on(c.devOf(down), backend.OpWeightedSum, tensor.F32)
	if m := c.movedTo(sum); m.Valid() {
		weights = rebase(weights, block, m) // crossed with the block already
	}
	out := c.alloc(sum, tensor.F32, f.embd, n)
	down, weights = c.to(sum, down), c.to(sum, weights)
	if c.err == nil {
		c.fail(c.backendOf(sum).WeightedSum(out, down, weights, k))
	}
	if f.shared == nil {
		return out
	}
	c.add(shared, shared, out)
	return shared
}

// sharesElsewhere reports whether an expert share from the from'th runs on another device
// than dev for a batch of n tokens.
func (f *moeFFN) sharesElsewhere(c *pass, dev, from, n int) bool {
	for _, s := range f.experts[from:] {
		if c.runsOn(s.gate, backend.OpMulMatID, n) != dev {
			return true
		}
	}
	return false
}

// sharedExperts is the shared experts' output for in, scaled by the shared gate where the
// model has one.
func (f *moeFFN) sharedExperts(c *pass, il int, in value) value {
	s := f.shared.forward(c, il, in)
	if f.sharedGate != nil {
		// llama.cpp's qwen2moe graph computes the gate as silu(g)/g, qwen35moe's as
		// sigmoid(g): the same function, within a rounding.
		gate := c.matmul(*f.sharedGate, in)
		c.unary(gate, backend.Sigmoid)
		c.scaleRows(s, gate)
	}
	return s
}

// expertProducts runs one share's experts for the slots routed to them: x and the
// routing's ids on the device that runs the share (dev's own, or views of block's copy
// there, made once per device), the ids turned into the share's numbering where it holds
// only some experts, then the SwiGLU network of each slot's expert. The other slots' rows
// are zero.
func (f *moeFFN) expertProducts(c *pass, s *expertShare, dev int, block, x, ids value, n, k int) value {
	if run := c.runsOn(s.gate, backend.OpMulMatID, n); run != dev && block.Valid() {
		moved := c.movedBlock(run, block)
		x, ids = rebase(x, block, moved), rebase(ids, block, moved)
	}
	if s.table.Valid() {
		run := c.devOf(ids)
		mapped := c.alloc(run, tensor.I32, k, n)
		table := c.to(run, s.table)
		if c.err == nil {
			c.fail(c.backendOf(run).MapIDs(mapped, ids, table))
		}
		ids = mapped
	}
	c.routeExperts(ids, s.gate, n)
	p := c.mulMatIDs(x, ids, k, s.gate, s.up)
	g, u := p[0], p[1]
	c.addExpertBias(g, s.gateBias, ids)
	c.addExpertBias(u, s.upBias, ids)
	c.swiGLU(g, u, f.clampedGLU)
	down := c.mulMatIDs(g, ids, k, s.down)[0]
	c.addExpertBias(down, s.downBias, ids)
	return down
}

// movedBlock is the routing block's copy on device dev: made by the first share that
// runs there, reused by the others.
func (c *pass) movedBlock(dev int, block value) value {
	if m := c.movedTo(dev); m.Valid() {
		return m
	}
	m := c.to(dev, block)
	c.moved = append(c.moved, m)
	return m
}

// countCached adds the layer's routing to the expert cache's counts, reading the ids
// where the host has them already: the block that crossed to it for its share.
func (c *pass) countCached(l *cachedLayer, block, ids value) {
	if m := c.movedTo(l.ffn.experts[1].gate.dev); m.Valid() {
		ids = rebase(ids, block, m)
	}
	cache := c.m.cache
	cache.hostIDs = grow(cache.hostIDs, ids.Elements())
	c.readIDs(cache.hostIDs, ids)
	if c.err == nil {
		cache.count(l, cache.hostIDs)
	}
}

// movedTo is the routing block's copy on dev, or the zero value where none was made.
func (c *pass) movedTo(dev int) value {
	for _, m := range c.moved {
		if c.devOf(m) == dev {
			return m
		}
	}
	return value{}
}

// routing allocates on dev the expert ids and weights of n tokens (k slots each) and x,
// the experts' input. Where the experts are on dev, x is in itself; on another device exp,
// the three are views of one block, in's rows copied into it, that crosses to exp whole.
func (c *pass) routing(dev, exp int, in value, n, k int) (block, x, ids, weights value) {
	if dev == exp {
		return value{}, in, c.alloc(dev, tensor.I32, k, n), c.alloc(dev, tensor.F32, k, n)
	}
	block = c.alloc(dev, tensor.I32, in.Elements()+2*n*k, 1)
	if c.err != nil {
		return
	}
	x, _ = backend.NewTensor(block.Buf, block.Off, tensor.F32, in.Cols, n)
	ids, _ = backend.NewTensor(block.Buf, x.Off+x.Bytes(), tensor.I32, k, n)
	weights, _ = backend.NewTensor(block.Buf, ids.Off+ids.Bytes(), tensor.F32, k, n)
	c.copyValue(x, in)
	return block, x, ids, weights
}

// rebase is view, a view into block, as the same view into moved (block's copy).
func rebase(view, block, moved value) value {
	view.Buf, view.Off = moved.Buf, moved.Off+view.Off-block.Off
	return view
}

// record adds a layer's routing to the statistics of the sequences that keep them, each
// segment's rows to its context's recorder.
func (c *pass) record(il int, ids, weights value) {
	if c.err != nil {
		return
	}
	k, read := ids.Cols, false
	for _, s := range c.segs {
		if s.c.stats == nil || s.rows == 0 {
			continue
		}
		if !read {
			c.statIDs, c.statWeight = grow(c.statIDs, ids.Elements()), grow(c.statWeight, weights.Elements())
			c.readIDs(c.statIDs, ids)
			c.read(c.statWeight, weights)
			read = true
		}
		for t := s.first; t < s.first+s.rows; t++ {
			s.c.stats.Record(il, c.statIDs[t*k:(t+1)*k], c.statWeight[t*k:(t+1)*k])
		}
	}
}

// addExpertBias adds to each slot's row of x the bias row of the expert the slot selected,
// as ggml_add_id does; slots dropped by smart expert reduction (id -1) keep their zero
// output. An absent bias adds nothing.
func (c *pass) addExpertBias(x value, bias param, ids value) {
	if !bias.valid() {
		return
	}
	dev, d := c.target(x, backend.OpAddID)
	b, ids := c.to(dev, bias.t), c.to(dev, ids)
	if c.err == nil {
		c.fail(c.backendOf(dev).AddID(d, b, ids))
	}
	c.done(x, d)
}

// bindMoE binds block il's router and expert stacks; biases says the model has expert
// biases (gpt-oss).
func bindMoE(c *Config, b *binder, il int, biases bool) (*moeFFN, error) {
	e := c.Router.Experts
	f := &moeFFN{width: c.FFExp, embd: c.Embd}
	var err error
	if f.router, err = b.matrix(blk(il, "ffn_gate_inp.weight"), c.Embd, e); err != nil {
		return nil, err
	}
	if b.has(blk(il, "ffn_gate_up_exps.weight")) {
		return nil, fmt.Errorf("tensor %s: the fused gate/up expert layout is not supported", blk(il, "ffn_gate_up_exps.weight"))
	}
	if f.experts, err = bindExperts(c, b, il, f.router.dev, biases); err != nil {
		return nil, err
	}
	return f, nil
}

// bindLeadDenseMoE binds block il's feed-forward network in DeepSeek-V3's layout, which
// GLM-4.5 shares: a dense SwiGLU network in the c.DenseLead leading blocks, else routed
// experts whose selection the bias exp_probs_b steers (optional unless biasRequired) and
// c.FFShexp-wide shared experts, if any.
func bindLeadDenseMoE(c *Config, b *binder, il int, biasRequired bool) (feedForward, error) {
	if il < c.DenseLead {
		return bindDense(c, b, il, "", c.FF)
	}
	f, err := bindMoE(c, b, il, false)
	if err != nil {
		return nil, err
	}
	bias := blk(il, "exp_probs_b.bias")
	if biasRequired || b.has(bias) {
		if f.selectionBias, err = b.param(bias, c.Router.Experts); err != nil {
			return nil, err
		}
	}
	if c.FFShexp > 0 {
		if f.shared, err = bindDense(c, b, il, "_shexp", c.FFShexp); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// bindSharedGate binds block il's shared-expert gate ffn_gate_inp_shexp, one output per
// token.
func bindSharedGate(c *Config, b *binder, il int, f *moeFFN) error {
	g, err := b.matrix(blk(il, "ffn_gate_inp_shexp.weight"), c.Embd)
	if err != nil {
		return err
	}
	f.sharedGate = &g
	return nil
}

// bindDense binds a SwiGLU network ffn_{gate,up,down}<suffix> of the given width.
func bindDense(c *Config, b *binder, il int, suffix string, width int) (*denseFFN, error) {
	f := &denseFFN{width: width}
	var err error
	if f.gate, err = b.matrix(blk(il, "ffn_gate"+suffix+".weight"), c.Embd, width); err != nil {
		return nil, err
	}
	if f.up, err = b.matrix(blk(il, "ffn_up"+suffix+".weight"), c.Embd, width); err != nil {
		return nil, err
	}
	if f.down, err = b.matrix(blk(il, "ffn_down"+suffix+".weight"), width, c.Embd); err != nil {
		return nil, err
	}
	return f, nil
}
