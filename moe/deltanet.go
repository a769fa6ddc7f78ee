package moe

import (
	"fmt"
	"github.com/moerun/moerun/backend"

	"github.com/moerun/moerun/tensor"
)

// DeltaNetConfig sizes the Gated DeltaNet layers of Qwen3-Next and Qwen3.5 (the ssm.*
// metadata, as llama.cpp's qwen3next.cpp and qwen35moe.cpp read it).
type DeltaNetConfig struct {
	ConvKernel int // ssm.conv_kernel: taps of the causal depthwise convolution
	HeadDim    int // ssm.state_size: the size of a query/key head and of a value head
	KHeads     int // ssm.group_count: query/key heads
	VHeads     int // ssm.time_step_rank: value heads, each with its own state
	Inner      int // ssm.inner_size: VHeads·HeadDim
	// Grouped is Qwen3-Next's layout, the checkpoint's, which its converter keeps: value
	// heads grouped by the key head they read (tensor.DeltaRule.Grouped), and beta and
	// alpha projected by one matrix, ssm_ba, giving for each key head its value heads'
	// betas, then their alphas. Qwen3.5's converter tiles the value heads and splits the
	// matrix into ssm_beta and ssm_alpha.
	Grouped bool
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

// deltaNet is a Gated DeltaNet linear-attention layer (llama.cpp's build_layer_attn_linear
// in qwen3next.cpp and qwen35moe.cpp, and its fused ggml_gated_delta_net): one mixed
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
	cfg       DeltaNetConfig
	qkv, gate weight // attn_qkv (mixed queries, keys, values), attn_gate (z)
	// qkvz (ssm_in) replaces qkv and gate in Qwen3-Next files converted before llama.cpp
	// split it: each key head's query, key, values and z in turn.
	qkvz        weight
	beta, alpha weight // ssm_beta, ssm_alpha: one value per value head (Qwen3.5)
	ba          weight // ssm_ba: both, grouped by key head (Qwen3-Next)
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
	var mixed, z, beta, decay value
	if cfg.Grouped {
		var ba value
		if d.qkvz.w != nil {
			p := c.project(in, d.qkvz, d.ba)
			mixed, z = d.splitQKVZ(c, p[0])
			ba = p[1]
		} else {
			p := c.project(in, d.qkv, d.gate, d.ba)
			mixed, z, ba = p[0], p[1], p[2]
		}
		// Each key head's run of value heads has its betas, then its alphas; taken apart
		// they are in value-head order.
		run := cfg.VHeads / cfg.KHeads
		beta = c.contiguous(ba.Rowwise(run, 2*run, 0)).Reshape(cfg.VHeads)
		decay = c.contiguous(ba.Rowwise(run, 2*run, run)).Reshape(cfg.VHeads)
	} else {
		p := c.project(in, d.qkv, d.gate, d.beta, d.alpha)
		mixed, z, beta, decay = p[0], p[1], p[2], p[3]
	}
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
			tensor.DeltaRule{Dim: cfg.HeadDim, KHeads: cfg.KHeads, VHeads: cfg.VHeads, Stride: cfg.convDim(), Grouped: cfg.Grouped}))
	}
	o = c.rmsNorm(o.Reshape(cfg.HeadDim), d.norm, d.eps).Reshape(cfg.Inner)
	c.unary(z, backend.SiLU)
	c.mul(o, o, z)
	return c.matmul(d.out, o)
}

// splitQKVZ takes ssm_in's output apart as llama.cpp's legacy build_qkvz does: each key
// head's query, key, values and z go to the head's place among all queries, keys and
// values (the mixed input of the convolution) and among the z gates.
func (d *deltaNet) splitQKVZ(c *pass, qkvz value) (mixed, z value) {
	cfg := d.cfg
	dim, kd := cfg.HeadDim, cfg.keyDim()
	run := cfg.Inner / cfg.KHeads // one key head's values, and its z
	chunk := 2*dim + 2*run
	dev := c.devOf(qkvz)
	mixed = c.alloc(dev, tensor.F32, cfg.convDim(), qkvz.Rows)
	z = c.alloc(dev, tensor.F32, cfg.Inner, qkvz.Rows)
	for g := range cfg.KHeads {
		at := g * chunk
		c.copyValue(mixed.Columns(g*dim, dim), qkvz.Columns(at, dim))
		c.copyValue(mixed.Columns(kd+g*dim, dim), qkvz.Columns(at+dim, dim))
		c.copyValue(mixed.Columns(2*kd+g*run, run), qkvz.Columns(at+2*dim, run))
		c.copyValue(z.Columns(g*run, run), qkvz.Columns(at+2*dim+run, run))
	}
	return mixed, z
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

// bindDeltaNet binds block il's Gated DeltaNet tensors in the layout cfg.Grouped names.
func bindDeltaNet(c *Config, b *binder, il int) (*deltaNet, error) {
	cfg := c.DeltaNet
	d := &deltaNet{cfg: cfg, eps: c.Eps}
	var err error
	type matrix struct {
		w          *weight
		name       string
		cols, rows int
	}
	matrices := []matrix{{&d.qkv, "attn_qkv.weight", c.Embd, cfg.convDim()}, {&d.gate, "attn_gate.weight", c.Embd, cfg.Inner}}
	if cfg.Grouped && !b.has(blk(il, "attn_qkv.weight")) && b.has(blk(il, "ssm_in.weight")) {
		// A file from before llama.cpp split in_proj_qkvz, which it still reads.
		matrices = []matrix{{&d.qkvz, "ssm_in.weight", c.Embd, cfg.convDim() + cfg.Inner}}
	}
	if cfg.Grouped {
		matrices = append(matrices, matrix{&d.ba, "ssm_ba.weight", c.Embd, 2 * cfg.VHeads})
	} else {
		matrices = append(matrices, matrix{&d.beta, "ssm_beta.weight", c.Embd, cfg.VHeads}, matrix{&d.alpha, "ssm_alpha.weight", c.Embd, cfg.VHeads})
	}
	for _, p := range append(matrices, matrix{&d.out, "ssm_out.weight", cfg.Inner, c.Embd}) {
		if *p.w, err = b.matrix(blk(il, p.name), p.cols, p.rows); err != nil {
			return nil, err
		}
	}
	name := blk(il, "ssm_conv1d.weight")
	w, err := b.vector(name, cfg.ConvKernel, cfg.convDim())
	if err != nil {
		return nil, err
	}
	conv, err := tensor.NewCausalConv(w, cfg.ConvKernel, cfg.convDim())
	if err != nil {
		return nil, err
	}
	if d.conv, err = b.upload(name, conv.Kernel(), cfg.convDim(), cfg.ConvKernel); err != nil {
		return nil, err
	}
	for _, p := range []struct {
		dst  *param
		name string
		n    int
	}{{&d.dtBias, "ssm_dt.bias", cfg.VHeads}, {&d.a, "ssm_a", cfg.VHeads}, {&d.norm, "ssm_norm.weight", cfg.HeadDim}} {
		if *p.dst, err = b.param(blk(il, p.name), p.n); err != nil {
			return nil, err
		}
	}
	return d, nil
}
