package moe

import (
	"fmt"
	"math"

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
	qkv, gate   weight             // attn_qkv (mixed queries, keys, values), attn_gate (z)
	beta, alpha weight             // ssm_beta, ssm_alpha: one value per value head
	out         weight             // ssm_out
	conv        *tensor.CausalConv // ssm_conv1d
	dtBias      []float32          // ssm_dt.bias
	a           []float32          // ssm_a: −exp(A_log)
	norm        []float32          // ssm_norm
	eps         float32
}

func (d *deltaNet) cacheShape() cacheShape { return cacheShape{state: d.cfg.stateSize()} }

func (d *deltaNet) forward(c *Context, il int, in, out []float32) error {
	cfg := d.cfg
	n := len(c.pos)
	conv, inner, vh := cfg.convDim(), cfg.Inner, cfg.VHeads
	mixed := c.scratch.floats(n * conv)
	z := c.scratch.floats(n * inner)
	beta := c.scratch.floats(n * vh)
	decay := c.scratch.floats(n * vh)
	if err := c.matmuls(in, weightOut{d.qkv, mixed}, weightOut{d.gate, z}, weightOut{d.beta, beta}, weightOut{d.alpha, decay}); err != nil {
		return err
	}
	tensor.Sigmoid(beta, beta)
	tensor.Add(decay, decay, d.dtBias)
	tensor.Softplus(decay, decay)
	tensor.Mul(decay, decay, d.a)
	state := c.caches[il].state
	convState, heads := state[:cfg.convState()], state[cfg.convState():]
	qkv := c.scratch.floats(n * conv)
	if err := d.conv.Run(qkv, mixed, convState); err != nil {
		return err
	}
	tensor.SiLU(qkv, qkv, conv)
	o := c.scratch.floats(n * inner)
	if err := d.deltaRule(c.m.host, o, qkv, beta, decay, heads, n); err != nil {
		return err
	}
	rmsNorm(o, o, d.norm, cfg.HeadDim, d.eps)
	tensor.SiLU(z, z, inner)
	tensor.Mul(o, o, z)
	return d.out.matmul(out, o)
}

// deltaRule L2-normalises the queries and keys of qkv ([n][queries | keys | values],
// after the convolution) and runs the gated delta rule over them token by token on the
// host pool, writing the heads' outputs to o ([n][VHeads][HeadDim]) and updating the
// states.
func (d *deltaNet) deltaRule(host *tensor.Pool, o, qkv, beta, decay, states []float32, n int) error {
	cfg := d.cfg
	dim, kd, conv := cfg.HeadDim, cfg.keyDim(), cfg.convDim()
	for t := range n {
		row := qkv[t*conv : (t+1)*conv]
		for h := range 2 * cfg.KHeads {
			l2Norm(row[h*dim:(h+1)*dim], d.eps)
		}
	}
	return host.GatedDeltaRule(o, qkv, qkv[kd:], qkv[2*kd:], decay, beta, states, n,
		tensor.DeltaRule{Dim: dim, KHeads: cfg.KHeads, VHeads: cfg.VHeads, Stride: conv})
}

// l2Norm scales x to unit length, as ggml_l2_norm: x / max(‖x‖, eps), the sum of squares
// accumulated in float64 and rounded to float32 before its square root (sqrtf).
func l2Norm(x []float32, eps float32) {
	var sum float64
	for _, v := range x {
		sum += float64(v * v)
	}
	scale := 1 / max(float32(math.Sqrt(float64(float32(sum)))), eps)
	for i := range x {
		x[i] *= scale
	}
}
