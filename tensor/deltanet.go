package tensor

import (
	"fmt"
	"math"
)

// DeltaRule gives the shapes of a gated delta rule (Pool.GatedDeltaRule): Gated DeltaNet's
// recurrence (Qwen3-Next, Qwen3.5), as ggml_gated_delta_net computes it.
type DeltaRule struct {
	Dim    int // head size of queries, keys and values; each state is Dim×Dim
	KHeads int // query/key heads, shared by the value heads as Grouped says
	VHeads int // value heads, one state each
	// Grouped says value heads come in KHeads runs of VHeads/KHeads consecutive heads, run
	// g reading query/key head g (Qwen3-Next, whose value heads keep the checkpoint's
	// order); otherwise value head h reads query/key head h mod KHeads (Qwen3.5, whose
	// converter reorders the value heads so that ggml can broadcast the keys).
	Grouped bool
	// Stride is the number of elements from one token's queries (keys, values) to the
	// next token's: the rows may be views into a wider per-token row.
	Stride int
}

// GatedDeltaRule runs n tokens through the gated delta rule. For token t and value head h,
// with q and k the (already L2-normalised) query and key of its query/key head (kHead), v its
// value, g = exp(decay[t][h]) and b = beta[t][h], the head's state S (key dimension i,
// value dimension j) becomes
//
//	S ← g·S;  S ← S + k·(b·(v − Sᵀk))ᵀ
//
// and o[t][h] = Sᵀq/√Dim. q, k and v hold token t's heads at t·Stride (KHeads, KHeads and
// VHeads rows of Dim values), decay and beta are [n][VHeads], o is [n][VHeads][Dim].
// states holds the VHeads states, each stored transposed as ggml stores it (row j is
// column j of S), and is updated in place. Value heads run in parallel.
//
// The arithmetic is ggml_gated_delta_net's on the fixtures' build: g by glibc's expf, the
// dot products by ggml_vec_dot_f32 (vecDotF32), S + k·delta by ggml_vec_mad_f32's fused
// multiply-adds.
func (p *Pool) GatedDeltaRule(o, q, k, v, decay, beta, states []float32, n int, r DeltaRule) error {
	if r.Dim <= 0 || r.KHeads <= 0 || r.VHeads <= 0 || r.VHeads%r.KHeads != 0 || r.Stride < 0 || n < 0 {
		return fmt.Errorf("gated delta rule: head size %d, %d key heads, %d value heads, stride %d, %d tokens", r.Dim, r.KHeads, r.VHeads, r.Stride, n)
	}
	if n == 0 {
		return nil
	}
	last := (n - 1) * r.Stride
	if len(q) < last+r.KHeads*r.Dim || len(k) < last+r.KHeads*r.Dim || len(v) < last+r.VHeads*r.Dim ||
		len(decay) < n*r.VHeads || len(beta) < n*r.VHeads || len(o) < n*r.VHeads*r.Dim || len(states) != r.VHeads*r.Dim*r.Dim {
		return fmt.Errorf("gated delta rule: slices too short for %d tokens of %+v", n, r)
	}
	if err := p.lock(); err != nil {
		return err
	}
	defer p.mu.Unlock()
	j := &deltaJob{o: o, q: q, k: k, v: v, decay: decay, beta: beta, states: states, n: n, r: r,
		scale: 1 / float32(math.Sqrt(float64(r.Dim)))}
	return p.run(j, r.VHeads)
}

type deltaJob struct {
	o, q, k, v, decay, beta, states []float32
	n                               int
	r                               DeltaRule
	scale                           float32
}

// unit runs value head h over every token.
func (j *deltaJob) unit(_, h int) {
	r := j.r
	dim := r.Dim
	s := j.states[h*dim*dim : (h+1)*dim*dim]
	kh := r.kHead(h) * dim
	for t := range j.n {
		base := t * r.Stride
		q := j.q[base+kh : base+kh+dim]
		k := j.k[base+kh : base+kh+dim]
		v := j.v[base+h*dim : base+(h+1)*dim]
		g := exp32(j.decay[t*r.VHeads+h])
		b := j.beta[t*r.VHeads+h]
		o := j.o[(t*r.VHeads+h)*dim:][:dim]
		// Row j of the transposed state depends only on itself: decay it, take its delta
		// against the key, add the key times the delta and read it against the query,
		// while it is in cache.
		for jj := range dim {
			row := s[jj*dim : (jj+1)*dim]
			for i := range row {
				row[i] *= g
			}
			delta := (v[jj] - vecDotF32(row, k)) * b
			active.madFloats(row, k, delta)
			o[jj] = vecDotF32(row, q) * j.scale
		}
	}
}

// kHead is the query/key head value head h reads.
func (r DeltaRule) kHead(h int) int {
	if r.Grouped {
		return h / (r.VHeads / r.KHeads)
	}
	return h % r.KHeads
}

func madFloatsGo(row, k []float32, delta float32) {
	k = k[:len(row)]
	for i := range row {
		row[i] = fma32(k[i], delta, row[i])
	}
}

// CausalConv is the depthwise causal convolution in front of a Gated DeltaNet (or Mamba)
// layer, llama.cpp's ggml_ssm_conv: each of Channels channels has its own kernel of Taps
// weights sliding over that channel's last Taps−1 inputs (kept in a state between calls)
// followed by the batch's. The kernel is kept transposed, one row of Channels weights per
// tap, so that a token's channels are computed side by side from contiguous rows.
type CausalConv struct {
	Taps, Channels int
	kernel         []float32 // [Taps][Channels]
}

// NewCausalConv takes the weights as GGUF stores them ([Channels][Taps]: a channel's taps
// are consecutive) and copies them transposed.
func NewCausalConv(w []float32, taps, channels int) (*CausalConv, error) {
	if taps < 1 || channels < 1 || len(w) != taps*channels {
		return nil, fmt.Errorf("causal convolution: %d weights for %d taps × %d channels", len(w), taps, channels)
	}
	c := &CausalConv{Taps: taps, Channels: channels, kernel: make([]float32, len(w))}
	for ch := range channels {
		for i := range taps {
			c.kernel[i*channels+ch] = w[ch*taps+i]
		}
	}
	return c, nil
}

// CausalConvKernel wraps a kernel already in Run's layout ([Taps][Channels]: one row of
// every channel's weight per tap), as a device keeps it, without copying it.
func CausalConvKernel(kernel []float32, taps, channels int) (CausalConv, error) {
	if taps < 1 || channels < 1 || len(kernel) != taps*channels {
		return CausalConv{}, fmt.Errorf("causal convolution: %d weights for %d taps × %d channels", len(kernel), taps, channels)
	}
	return CausalConv{Taps: taps, Channels: channels, kernel: kernel}, nil
}

// Kernel is the kernel in Run's layout ([Taps][Channels]).
func (c *CausalConv) Kernel() []float32 { return c.kernel }

// StateLen is the length of the state Run keeps: Taps−1 inputs per channel.
func (c *CausalConv) StateLen() int { return (c.Taps - 1) * c.Channels }

// Run convolves n tokens, x: [n][Channels] → dst: [n][Channels] (len(x)/Channels tokens;
// dst must not overlap x). state ([Channels][Taps−1], zero before the first batch of a
// sequence) holds each channel's previous inputs, oldest first, and is left holding the
// last Taps−1, as llama.cpp's conv_state_last. Each output is ggml's sum, in tap order,
// oldest input first, of input times weight, as its compiled loop adds them
// (leftoverTerm: for the 4 taps of Qwen3.5 and Mamba, each a fused multiply-add).
func (c *CausalConv) Run(dst, x, state []float32) error {
	C, hist := c.Channels, c.Taps-1
	n := len(x) / C
	if len(x) != n*C || len(dst) != len(x) || len(state) != c.StateLen() {
		return fmt.Errorf("causal convolution: %d inputs, %d outputs and a state of %d for %d channels and %d taps", len(x), len(dst), len(state), C, c.Taps)
	}
	// Tokens whose window reaches into the state, channel by channel.
	for t := range min(n, hist) {
		for ch := range C {
			var sum float32
			for i := range c.Taps {
				var in float32
				if s := t + i; s < hist {
					in = state[ch*hist+s]
				} else {
					in = x[(s-hist)*C+ch]
				}
				sum = leftoverTerm(i, c.Taps, sum, in, c.kernel[i*C+ch])
			}
			dst[t*C+ch] = sum
		}
	}
	// The rest read Taps consecutive rows of x.
	for t := hist; t < n; t++ {
		active.convRow(dst[t*C:(t+1)*C], x[(t-hist)*C:(t+1)*C], c.kernel)
	}
	// The new state: the sequence's last hist inputs. Entry j reads position n+j ≥ j of
	// the old state or x, never an entry already overwritten.
	for ch := range C {
		for j := range hist {
			if s := n + j; s < hist {
				state[ch*hist+j] = state[ch*hist+s]
			} else {
				state[ch*hist+j] = x[(s-hist)*C+ch]
			}
		}
	}
	return nil
}

func convRowGo(dst, rows, kernel []float32) { convColumns(dst, rows, kernel, 0) }

// convColumns is convRowGo for channels from..len(dst)-1.
func convColumns(dst, rows, kernel []float32, from int) {
	C := len(dst)
	taps := len(kernel) / C
	for ch := from; ch < C; ch++ {
		var sum float32
		for i := range taps {
			sum = leftoverTerm(i, taps, sum, rows[i*C+ch], kernel[i*C+ch])
		}
		dst[ch] = sum
	}
}
