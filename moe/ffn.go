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
	router         weight // ffn_gate_inp
	selectionBias  param  // exp_probs_b, when present
	gate, up, down weight // stacks of experts
	width          int    // an expert's hidden width
	embd           int
	shared         *denseFFN // nil without shared experts
	// sharedGate (ffn_gate_inp_shexp), when the model has one, scales the shared experts'
	// output per token by sigmoid(sharedGate·x) (Qwen2-MoE, Qwen3.5-MoE).
	sharedGate *weight
	// Biases (gpt-oss): routerBias is added to the router logits (ffn_gate_inp.bias);
	// gateBias, upBias and downBias hold one row per expert, added to the outputs of the
	// expert each slot selected (ffn_{gate,up,down}_exps.bias, ggml_add_id). Absent in
	// other models.
	routerBias                 param
	gateBias, upBias, downBias param
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
	// The routing runs where the router's logits are. Where the experts run elsewhere
	// (-ot exps=CPU, or a large batch offloading host-held experts to a GPU), their input
	// and the routing cross to them as one block: one copy and one wait.
	dev, exp := c.on(c.devOf(logits), backend.OpRoute, tensor.F32), c.runsOn(f.gate, backend.OpMulMatID, n)
	block, x, ids, weights := c.routing(dev, exp, in, n, k)
	logits, bias := c.to(dev, logits), c.to(dev, f.selectionBias.t)
	if c.err == nil {
		c.fail(c.backendOf(dev).Route(ids, weights, logits, bias, cfg))
	}
	c.record(il, ids, weights)
	if block.Valid() {
		moved := c.to(exp, block)
		x, ids, weights = rebase(x, block, moved), rebase(ids, block, moved), rebase(weights, block, moved)
	}
	c.routeExperts(ids, f.gate, n)
	p := c.mulMatIDs(x, ids, k, f.gate, f.up)
	g, u := p[0], p[1]
	c.addExpertBias(g, f.gateBias, ids)
	c.addExpertBias(u, f.upBias, ids)
	c.swiGLU(g, u, f.clampedGLU)
	down := c.mulMatIDs(g, ids, k, f.down)[0]
	c.addExpertBias(down, f.downBias, ids)
	sum := c.on(c.devOf(down), backend.OpWeightedSum, tensor.F32)
	out := c.alloc(sum, tensor.F32, f.embd, n)
	down, weights = c.to(sum, down), c.to(sum, weights)
	if c.err == nil {
		c.fail(c.backendOf(sum).WeightedSum(out, down, weights, k))
	}
	if f.shared == nil {
		return out
	}
	s := f.shared.forward(c, il, in)
	if f.sharedGate != nil {
		// llama.cpp's qwen2moe graph computes the gate as silu(g)/g, qwen35moe's as
		// sigmoid(g): the same function, within a rounding.
		gate := c.matmul(*f.sharedGate, in)
		c.unary(gate, backend.Sigmoid)
		c.scaleRows(s, gate)
	}
	c.add(s, s, out)
	return s
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

// bindMoE binds block il's router and expert stacks.
func bindMoE(c *Config, b *binder, il int) (*moeFFN, error) {
	e := c.Router.Experts
	f := &moeFFN{width: c.FFExp, embd: c.Embd}
	var err error
	if f.router, err = b.matrix(blk(il, "ffn_gate_inp.weight"), c.Embd, e); err != nil {
		return nil, err
	}
	if b.has(blk(il, "ffn_gate_up_exps.weight")) {
		return nil, fmt.Errorf("tensor %s: the fused gate/up expert layout is not supported", blk(il, "ffn_gate_up_exps.weight"))
	}
	if f.gate, err = b.matrix(blk(il, "ffn_gate_exps.weight"), c.Embd, c.FFExp, e); err != nil {
		return nil, err
	}
	if f.up, err = b.matrix(blk(il, "ffn_up_exps.weight"), c.Embd, c.FFExp, e); err != nil {
		return nil, err
	}
	if f.down, err = b.matrix(blk(il, "ffn_down_exps.weight"), c.FFExp, c.Embd, e); err != nil {
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
	f, err := bindMoE(c, b, il)
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
