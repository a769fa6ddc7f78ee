package tensor

import (
	"math"
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
