package moe

import (
	"fmt"

	"github.com/moerun/moerun/tensor"
)

// denseFFN is a SwiGLU feed-forward network, down(silu(gate·x) ⊙ up·x) (llama.cpp's
// build_ffn with LLM_FFN_SILU and LLM_FFN_PAR): DeepSeek's leading dense layers and its
// shared experts.
type denseFFN struct {
	gate, up, down weight
	width          int
}

func (f *denseFFN) forward(c *Context, _ int, in, out []float32, n int) error {
	g := c.scratch.floats(n * f.width)
	u := c.scratch.floats(n * f.width)
	if err := c.matmuls(in, weightOut{f.gate, g}, weightOut{f.up, u}); err != nil {
		return err
	}
	tensor.SwiGLU(g, g, u, f.width)
	return f.down.matmul(out, g)
}

// moeFFN is a mixture-of-experts layer (llama.cpp's build_moe_ffn): the router picks
// experts per token, each expert is a SwiGLU network computed for the tokens routed to it
// (MulMatID groups them, so an expert's weights are read once per batch), and the experts'
// outputs are summed with the router's weights in slot order. Shared experts, when the
// model has them, run on every token and are added to the sum.
type moeFFN struct {
	router         weight    // ffn_gate_inp
	selectionBias  []float32 // exp_probs_b, or nil
	gate, up, down weight    // stacks of experts
	width          int       // an expert's hidden width
	embd           int
	shared         *denseFFN // nil without shared experts
	// sharedGate (ffn_gate_inp_shexp), when the model has one, scales the shared experts'
	// output per token by sigmoid(sharedGate·x) (Qwen2-MoE, Qwen3.5-MoE).
	sharedGate *weight
	// Biases (gpt-oss): routerBias is added to the router logits (ffn_gate_inp.bias);
	// gateBias, upBias and downBias hold one row per expert, added to the outputs of the
	// expert each slot selected (ffn_{gate,up,down}_exps.bias, ggml_add_id). nil when absent.
	routerBias                 []float32
	gateBias, upBias, downBias []float32
	// clampedGLU selects gpt-oss's clamped SwiGLU (swiglu_oai) over plain SwiGLU.
	clampedGLU bool
}

// gpt-oss's clamped SwiGLU constants, fixed in llama.cpp's build_moe_ffn
// (LLM_FFN_SWIGLU_OAI_MOE) rather than read from the model.
const (
	oaiAlpha = 1.702
	oaiLimit = 7.0
)

func (f *moeFFN) forward(c *Context, il int, in, out []float32, n int) error {
	cfg := c.router.Config()
	experts, k := cfg.Experts, cfg.Used
	logits := c.scratch.floats(n * experts)
	if err := f.router.matmul(logits, in); err != nil {
		return err
	}
	addBias(logits, f.routerBias)
	ids := c.scratch.int32s(n * k)
	weights := c.scratch.floats(n * k)
	for t := range n {
		slots := ids[t*k : (t+1)*k]
		c.router.Route(logits[t*experts:(t+1)*experts], f.selectionBias, slots, weights[t*k:(t+1)*k])
		if c.stats != nil {
			c.stats.Record(il, slots, weights[t*k:(t+1)*k])
		}
	}
	g := c.scratch.floats(n * k * f.width)
	u := c.scratch.floats(n * k * f.width)
	if err := c.mulMatIDs(in, ids, k, weightOut{f.gate, g}, weightOut{f.up, u}); err != nil {
		return err
	}
	addExpertBias(g, f.gateBias, ids, f.width)
	addExpertBias(u, f.upBias, ids, f.width)
	if f.clampedGLU {
		tensor.SwiGLUOAI(g, g, u, oaiAlpha, oaiLimit)
	} else {
		tensor.SwiGLU(g, g, u, f.width)
	}
	down := c.scratch.floats(n * k * f.embd)
	if err := f.down.mulMatID(down, g, ids, k); err != nil {
		return err
	}
	addExpertBias(down, f.downBias, ids, f.embd)
	weightedSum(out, down, weights, n, k, f.embd)
	if f.shared == nil {
		return nil
	}
	s := c.scratch.floats(n * f.embd)
	if err := f.shared.forward(c, il, in, s, n); err != nil {
		return err
	}
	if f.sharedGate != nil {
		gate := c.scratch.floats(n)
		if err := f.sharedGate.matmul(gate, in); err != nil {
			return err
		}
		// llama.cpp's qwen2moe graph computes the gate as silu(g)/g, qwen35moe's as
		// sigmoid(g): the same function, within a rounding.
		tensor.Sigmoid(gate, gate)
		for t, g := range gate {
			row := s[t*f.embd : (t+1)*f.embd]
			tensor.Scale(row, row, g)
		}
	}
	tensor.Add(out, out, s)
	return nil
}

// addExpertBias adds to each slot's row of x (cols values) the bias row of the expert the
// slot selected, as ggml_add_id does; slots dropped by smart expert reduction (id -1)
// keep their zero output. A nil bias adds nothing.
func addExpertBias(x, bias []float32, ids []int32, cols int) {
	if bias == nil {
		return
	}
	for s, id := range ids {
		if id >= 0 {
			row := x[s*cols : (s+1)*cols]
			tensor.Add(row, row, bias[int(id)*cols:(int(id)+1)*cols])
		}
	}
}

// weightedSum sets out[t] = ((y[t,0]·w[t,0] + y[t,1]·w[t,1]) + y[t,2]·w[t,2]) + …, each
// product rounded before it is added, as llama.cpp multiplies the expert outputs by their
// weights (ffn_moe_weighted) and then adds the slots' views in order. A slot smart expert
// reduction dropped has a zero output and weight.
func weightedSum(out, y, w []float32, n, k, embd int) {
	for t := range n {
		o := out[t*embd : (t+1)*embd]
		for j := range k {
			wj := w[t*k+j]
			row := y[(t*k+j)*embd:][:embd]
			if j == 0 {
				tensor.Scale(o, row, wj)
			} else {
				tensor.AddScaled(o, row, wj)
			}
		}
	}
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
		if f.selectionBias, err = b.vector(bias, c.Router.Experts); err != nil {
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
