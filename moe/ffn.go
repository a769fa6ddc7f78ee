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
	if err := f.gate.matmul(g, in); err != nil {
		return err
	}
	if err := f.up.matmul(u, in); err != nil {
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
}

func (f *moeFFN) forward(c *Context, il int, in, out []float32, n int) error {
	cfg := c.router.Config()
	experts, k := cfg.Experts, cfg.Used
	logits := c.scratch.floats(n * experts)
	if err := f.router.matmul(logits, in); err != nil {
		return err
	}
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
	if err := f.gate.mulMatID(g, in, ids, k); err != nil {
		return err
	}
	if err := f.up.mulMatID(u, in, ids, k); err != nil {
		return err
	}
	tensor.SwiGLU(g, g, u, f.width)
	down := c.scratch.floats(n * k * f.embd)
	if err := f.down.mulMatID(down, g, ids, k); err != nil {
		return err
	}
	weightedSum(out, down, weights, n, k, f.embd)
	if f.shared == nil {
		return nil
	}
	s := c.scratch.floats(n * f.embd)
	if err := f.shared.forward(c, il, in, s, n); err != nil {
		return err
	}
	tensor.Add(out, out, s)
	return nil
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
				for i, v := range row {
					o[i] = v * wj
				}
				continue
			}
			for i, v := range row {
				o[i] += float32(v * wj)
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
