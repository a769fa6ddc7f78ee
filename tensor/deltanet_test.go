package tensor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestGatedDeltaRuleByHand runs two tokens through a 2×2 state, two value heads sharing one
// key head, with values worked out by hand from the definition. Token 0 (no decay, β ½,
// k = e0): S = k·(½·v)ᵀ. Token 1 (decay ln ½, β 1, k = e1): S is halved, then row 1 of S
// (Sᵀk) is 0, so S gains e1·vᵀ; o = Sᵀq/√2.
func TestGatedDeltaRuleByHand(t *testing.T) {
	p := NewPool(2)
	defer p.Close()
	const stride = 9 // q (2) | k (2) | v (2 heads × 2) | 1 unused
	in := []float32{
		1, 0, 1, 0, 2, 3, 4, 6, -1, // token 0: q, k, v head 0, v head 1
		1, 1, 0, 1, 1, 1, 2, 2, -1, // token 1
	}
	decay := []float32{0, 0, float32(math.Log(0.5)), float32(math.Log(0.5))}
	beta := []float32{0.5, 0.5, 1, 1}
	states := make([]float32, 2*2*2)
	o := make([]float32, 2*2*2)
	r := DeltaRule{Dim: 2, KHeads: 1, VHeads: 2, Stride: stride}
	if err := p.GatedDeltaRule(o, in, in[2:], in[4:], decay, beta, states, 2, r); err != nil {
		t.Fatal(err)
	}
	s2 := float32(math.Sqrt2)
	want := []float32{
		1 / s2, 1.5 / s2, 2 / s2, 3 / s2, // token 0: S0 = e0·(1, 1.5)ᵀ; head 1: e0·(2, 3)ᵀ
		1.5 / s2, 1.75 / s2, 3 / s2, 3.5 / s2, // token 1, q = (1, 1): the sum of S's rows
	}
	for i := range want {
		if math.Abs(float64(o[i]-want[i])) > 1e-6 {
			t.Fatalf("output %v, want %v", o, want)
		}
	}
	// The states, transposed (row j is column j of S): head 0's S = [[0.5, 0.75], [1, 1]].
	wantS := []float32{0.5, 1, 0.75, 1, 1, 2, 1.5, 2}
	for i := range wantS {
		if math.Abs(float64(states[i]-wantS[i])) > 1e-6 {
			t.Fatalf("states %v, want %v", states, wantS)
		}
	}
}

// TestGatedDeltaRuleGrouped holds Qwen3-Next's grouped value heads (run g of VHeads/KHeads
// heads reads key head g) to Qwen3.5's tiled ones (head h reads key head h mod KHeads): the
// grouped rule must give each value head exactly what the tiled rule gives the same head
// moved to a tiled position over the same key head, bit for bit, outputs and states.
func TestGatedDeltaRuleGrouped(t *testing.T) {
	p := NewPool(2)
	defer p.Close()
	const dim, kHeads, vHeads, n = 8, 2, 6, 5
	ratio := vHeads / kHeads
	stride := (2*kHeads + vHeads) * dim
	rng := rand.New(rand.NewPCG(3, 4))
	in := make([]float32, n*stride)
	for i := range in {
		in[i] = rng.Float32() - 0.5
	}
	decay, beta := make([]float32, n*vHeads), make([]float32, n*vHeads)
	for i := range decay {
		decay[i], beta[i] = -rng.Float32(), rng.Float32()
	}
	// tiled is the tiled position of grouped head h = g·ratio + j over key head g.
	tiled := func(h int) int { return (h%ratio)*kHeads + h/ratio }
	tin := slices.Clone(in)
	tdecay, tbeta := make([]float32, len(decay)), make([]float32, len(beta))
	for tok := range n {
		v, tv := in[tok*stride+2*kHeads*dim:], tin[tok*stride+2*kHeads*dim:]
		for h := range vHeads {
			copy(tv[tiled(h)*dim:(tiled(h)+1)*dim], v[h*dim:(h+1)*dim])
			tdecay[tok*vHeads+tiled(h)], tbeta[tok*vHeads+tiled(h)] = decay[tok*vHeads+h], beta[tok*vHeads+h]
		}
	}
	run := func(in, decay, beta []float32, grouped bool) (o, states []float32) {
		o, states = make([]float32, n*vHeads*dim), make([]float32, vHeads*dim*dim)
		r := DeltaRule{Dim: dim, KHeads: kHeads, VHeads: vHeads, Stride: stride, Grouped: grouped}
		if err := p.GatedDeltaRule(o, in, in[kHeads*dim:], in[2*kHeads*dim:], decay, beta, states, n, r); err != nil {
			t.Fatal(err)
		}
		return o, states
	}
	o, states := run(in, decay, beta, true)
	to, tstates := run(tin, tdecay, tbeta, false)
	for h := range vHeads {
		th := tiled(h)
		for tok := range n {
			got, want := o[(tok*vHeads+h)*dim:][:dim], to[(tok*vHeads+th)*dim:][:dim]
			if !slices.Equal(got, want) {
				t.Fatalf("token %d, value head %d: %v, the tiled rule's head %d gives %v", tok, h, got, th, want)
			}
		}
		if !slices.Equal(states[h*dim*dim:(h+1)*dim*dim], tstates[th*dim*dim:(th+1)*dim*dim]) {
			t.Fatalf("value head %d's state differs from the tiled rule's head %d", h, th)
		}
	}
	// And the grouping matters: the tiled rule on the grouped layout reads other keys.
	if o2, _ := run(in, decay, beta, false); slices.Equal(o, o2) {
		t.Fatal("grouped and tiled value heads give the same outputs on this input")
	}
}

func TestGatedDeltaRuleBadShapes(t *testing.T) {
	p := NewPool(1)
	defer p.Close()
	buf := make([]float32, 64)
	for _, r := range []DeltaRule{
		{Dim: 0, KHeads: 1, VHeads: 1, Stride: 4},
		{Dim: 2, KHeads: 2, VHeads: 3, Stride: 8},
		{Dim: 4, KHeads: 1, VHeads: 1, Stride: 100}, // rows past the end of the slices
	} {
		if err := p.GatedDeltaRule(buf, buf, buf, buf, buf, buf, buf[:r.VHeads*r.Dim*r.Dim], 2, r); err == nil {
			t.Errorf("%+v: no error", r)
		}
	}
}

// TestCausalConv holds CausalConv to the convolution's definition, channel by channel over
// the state followed by the batch (each output summed in tap order, oldest input first, as
// ggml_ssm_conv does), bit for bit: for channel counts with and without a vector tail,
// kernels of one to nine taps, batches shorter and longer than the history, and a sequence
// fed in pieces, which must leave the same outputs and state as the whole. ggml's build
// (see its disassembly) rounds the products of the first taps in whole eights and adds
// them, and fuses each later tap's into a multiply-add.
func TestCausalConv(t *testing.T) {
	rng := rand.New(rand.NewPCG(37, 41))
	for _, channels := range []int{1, 7, 8, 19, 64} {
		for _, taps := range []int{1, 2, 4, 5, 9} {
			const total = 11
			w := randomFloats(rng, taps*channels)
			x := randomFloats(rng, total*channels)
			conv, err := NewCausalConv(w, taps, channels)
			if err != nil {
				t.Fatal(err)
			}
			// The definition over the whole sequence, zero history first.
			hist := taps - 1
			want := make([]float32, total*channels)
			input := func(s, ch int) float32 {
				if s < hist {
					return 0
				}
				return x[(s-hist)*channels+ch]
			}
			for ch := range channels {
				for tok := range total {
					var sum float32
					for i := range taps {
						if p := input(tok+i, ch) * w[ch*taps+i]; i < 8 && taps >= 8 {
							sum += p
						} else {
							sum = fma32(input(tok+i, ch), w[ch*taps+i], sum)
						}
					}
					want[tok*channels+ch] = sum
				}
			}
			wantState := make([]float32, conv.StateLen())
			for ch := range channels {
				for j := range hist {
					wantState[ch*hist+j] = input(total+j, ch)
				}
			}
			for _, cuts := range [][]int{{total}, {1, 1, 1, 8}, {2, 9}, {5, 0, 6}} {
				state := make([]float32, conv.StateLen())
				got := make([]float32, total*channels)
				start := 0
				for _, n := range cuts {
					lo, hi := start*channels, (start+n)*channels
					if err := conv.Run(got[lo:hi], x[lo:hi], state); err != nil {
						t.Fatal(err)
					}
					start += n
				}
				expectBits(t, fmt.Sprintf("%d channels, %d taps, pieces %v: outputs", channels, taps, cuts), got, want)
				expectBits(t, fmt.Sprintf("%d channels, %d taps, pieces %v: state", channels, taps, cuts), state, wantState)
			}
		}
	}
	if _, err := NewCausalConv(make([]float32, 7), 4, 2); err == nil {
		t.Error("7 weights for 4 taps × 2 channels: no error")
	}
	conv, _ := NewCausalConv(make([]float32, 8), 4, 2)
	for _, c := range []struct{ dst, x, state int }{{6, 5, 6}, {4, 6, 6}, {6, 6, 5}} {
		if err := conv.Run(make([]float32, c.dst), make([]float32, c.x), make([]float32, c.state)); err == nil {
			t.Errorf("outputs %d, inputs %d, state %d for 2 channels and 4 taps: no error", c.dst, c.x, c.state)
		}
	}
}
