package moe

import (
	"fmt"
	"github.com/moerun/moerun/backend"

	"github.com/moerun/moerun/tensor"
)

// DeltaNetConfig sizes the Gated DeltaNet layers of Qwen3.5 (the ssm.* metadata, as
// llama.cpp's qwen35moe.cpp reads it).
type DeltaNetConfig struct {
	ConvKernel int // ssm.conv_kernel: taps of the causal depthwise convolution
	HeadDim    int // ssm.state_size: the size of a query/key head and of a value head
	KHeads     int // ssm.group_count: query/key heads
	VHeads     int // ssm.time_step_rank: value heads, each with its own state
	Inner      int // ssm.inner_size: VHeads·HeadDim
}

// keyDim, convDim and stateSize derive the layer's widths: the query (or key) part of the
// mixed projection, the channels of the convolution (queries, keys and values), and the
// float32 values of a sequence's state (the convolution's last ConvKernel−1 inputs of every
// channel, then one HeadDim×HeadDim matrix per value head).
func (d DeltaNetConfig) keyDim() int  { return d.KHeads * d.HeadDim }
func (d DeltaNetConfig) convDim() int { return 2*d.keyDim() + d.Inner }
func (d DeltaNetConfig) convState() int {
	return (d.ConvKernel - 1) * d.convDim()
}
func (d DeltaNetConfig) stateSize() int {
	return d.convState() + d.VHeads*d.HeadDim*d.HeadDim
}

// read reads and checks the ssm.* keys.
func (d *DeltaNetConfig) read(r *metaReader) error {
	d.ConvKernel = r.need("{arch}.ssm.conv_kernel")
	d.HeadDim = r.need("{arch}.ssm.state_size")
	d.KHeads = r.need("{arch}.ssm.group_count")
	d.VHeads = r.need("{arch}.ssm.time_step_rank")
	d.Inner = r.need("{arch}.ssm.inner_size")
	if r.err != nil {
		return r.err
	}
	// llama.cpp takes the value head size as inner_size/time_step_rank and requires it to
	// equal the key head size (the delta rule's state is square).
	if d.ConvKernel < 1 || d.HeadDim <= 0 || d.KHeads <= 0 || d.VHeads <= 0 || d.VHeads%d.KHeads != 0 || d.Inner != d.VHeads*d.HeadDim {
		return fmt.Errorf("inconsistent Gated DeltaNet metadata: conv kernel %d, state size %d, %d key heads, %d value heads, inner size %d (want value heads a multiple of key heads and inner size = value heads × state size)",
			d.ConvKernel, d.HeadDim, d.KHeads, d.VHeads, d.Inner)
	}
	return nil
}

// deltaNet is a Gated DeltaNet linear-attention layer (llama.cpp's
// build_layer_attn_linear in qwen35moe.cpp and its fused ggml_gated_delta_net): one mixed
// projection of queries, keys and values through a causal depthwise convolution and SiLU,
// L2-normed queries and keys, and per value head a HeadDim×HeadDim state S updated by the
// gated delta rule for each token,
//
//	S ← exp(g)·S;  S ← S + k·(β·(v − Sᵀk))ᵀ;  o = Sᵀq / √HeadDim,
//
// with the decay g = −exp(A_log)·softplus(alpha·x + dt_bias) and β = sigmoid(beta·x); the
// output is RMS-normed per head, gated by silu(gate·x) and projected back. Its memory is
// the convolution's last inputs and the states: a fixed size, whatever the positions.
// Prompts are processed token by token, as decoding is, so a prompt gives the same state
// whether evaluated in one batch or token by token.
type deltaNet struct {
	cfg         DeltaNetConfig
	qkv, gate   weight // attn_qkv (mixed queries, keys, values), attn_gate (z)
	beta, alpha weight // ssm_beta, ssm_alpha: one value per value head
	out         weight // ssm_out
	conv        param  // ssm_conv1d, transposed: one row of every channel's weight per tap
	dtBias      param  // ssm_dt.bias
	a           param  // ssm_a: −exp(A_log)
	norm        param  // ssm_norm
	eps         float32
}

func (d *deltaNet) cacheShape() cacheShape { return cacheShape{state: d.cfg.stateSize()} }

func (d *deltaNet) forward(c *pass, il int, in value) value {
	cfg := d.cfg
	n := in.Rows
	p := c.project(in, d.qkv, d.gate, d.beta, d.alpha)
	mixed, z, beta, decay := p[0], p[1], p[2], p[3]
	c.unary(beta, backend.Sigmoid)
	c.add(decay, decay, d.dtBias.t)
	c.unary(decay, backend.Softplus)
	c.mul(decay, decay, d.a.t)
	// Each sequence's state lives with the layer's cache: the convolution's inputs, then
	// each value head's matrix. The recurrence runs sequence by sequence, on its rows.
	dev := c.m.kvDev[il]
	b := c.backendOf(dev)
	c.toAll(dev, &mixed, &z, &beta, &decay)
	qkv := c.alloc(dev, tensor.F32, mixed.Cols, n)
	conv := c.to(dev, d.conv.t)
	for _, s := range c.segs {
		if c.err != nil {
			break
		}
		convState, _ := d.states(s.c.caches[il])
		c.fail(b.CausalConv(s.of(qkv), s.of(mixed), convState, conv))
	}
	c.unary(qkv, backend.SiLU)
	// Queries and keys are L2-normalised head by head.
	for h := range 2 * cfg.KHeads {
		c.l2Norm(qkv.Columns(h*cfg.HeadDim, cfg.HeadDim), d.eps)
	}
	o := c.alloc(dev, tensor.F32, cfg.Inner, n)
	for _, s := range c.segs {
		if c.err != nil {
			break
		}
		_, heads := d.states(s.c.caches[il])
		c.fail(b.GatedDeltaRule(s.of(o), s.of(qkv), s.of(decay), s.of(beta), heads,
			tensor.DeltaRule{Dim: cfg.HeadDim, KHeads: cfg.KHeads, VHeads: cfg.VHeads, Stride: cfg.convDim()}))
	}
	o = c.rmsNorm(o.Reshape(cfg.HeadDim), d.norm, d.eps).Reshape(cfg.Inner)
	c.unary(z, backend.SiLU)
	c.mul(o, o, z)
	return c.matmul(d.out, o)
}

// states are the parts of a sequence's state in layer cache kv: the convolution's last
// inputs and the value heads' matrices.
func (d *deltaNet) states(kv *kvCache) (conv, heads value) {
	cfg := d.cfg
	state := kv.state.Reshape(1)
	conv = state.Slice(0, cfg.convState()).Reshape(cfg.convState())
	heads = state.Slice(cfg.convState(), cfg.stateSize()).Reshape(cfg.stateSize() - cfg.convState())
	return conv, heads
}
