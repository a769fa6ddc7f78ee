package tensor

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestIndexerScores: the scores are Σ_h w·relu(q·k) against a float64 computation of the
// same formula over the dequantized keys (within float32 rounding), −∞ past each token's
// position, the same bits with 1 and 3 threads, for F32, F16 and Q8_0 keys; bad shapes are
// refused.
func TestIndexerScores(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const heads, dim, kvLen = 4, 64, 200
	pos := []int32{0, 70, 150, 151}
	n := len(pos)
	q, w := make([]float32, n*heads*dim), make([]float32, n*heads)
	for i := range q {
		q[i] = float32(rng.NormFloat64())
	}
	for i := range w {
		w[i] = float32(rng.Float64())
	}
	keys := make([]float32, kvLen*dim)
	for i := range keys {
		keys[i] = float32(rng.NormFloat64())
	}
	for _, typ := range []Type{F32, F16, Q8_0} {
		rb, _ := typ.RowBytes(dim)
		data := make([]byte, kvLen*int(rb))
		if err := Quantize(typ, keys, data); err != nil {
			t.Fatal(err)
		}
		deq := make([]float32, len(keys))
		if err := Dequantize(typ, data, deq); err != nil {
			t.Fatal(err)
		}
		kv := KV{Type: typ, Data: data, Dim: dim, Heads: 1, PosStride: int(rb), HeadStride: int(rb), Cells: kvLen}
		var runs [2][]float32
		for i, threads := range []int{1, 3} {
			p := NewPool(threads)
			runs[i] = make([]float32, n*kvLen)
			if err := p.IndexerScores(runs[i], q, heads, pos, kv, w, kvLen); err != nil {
				t.Fatal(err)
			}
			p.Close()
		}
		for i := range runs[0] {
			if math.Float32bits(runs[0][i]) != math.Float32bits(runs[1][i]) {
				t.Fatalf("%v: score %d differs between 1 and 3 threads: %g, %g", typ, i, runs[0][i], runs[1][i])
			}
		}
		for tk, p := range pos {
			for j := range kvLen {
				got := runs[0][tk*kvLen+j]
				if j > int(p) {
					if !math.IsInf(float64(got), -1) {
						t.Fatalf("%v: token %d (position %d) scores position %d: %g, want -Inf", typ, tk, p, j, got)
					}
					continue
				}
				var want float64
				for h := range heads {
					var qk float64
					for d := range dim {
						qk += float64(q[(tk*heads+h)*dim+d]) * float64(deq[j*dim+d])
					}
					if qk > 0 {
						want += qk * float64(w[tk*heads+h])
					}
				}
				if math.Abs(float64(got)-want) > 1e-4*(1+math.Abs(want)) {
					t.Fatalf("%v: token %d position %d: %g, want %g", typ, tk, j, got, want)
				}
			}
		}
	}
	p := NewPool(1)
	defer p.Close()
	kv := KV{Type: F32, Data: make([]byte, 4*dim*10), Dim: dim, Heads: 1, PosStride: 4 * dim, HeadStride: 4 * dim, Cells: 10}
	if err := p.IndexerScores(make([]float32, n*20), q, heads, pos, kv, w, 20); err == nil {
		t.Error("20 positions of a 10-cell cache: no error")
	}
	if err := p.IndexerScores(make([]float32, n*5), q[:10], heads, pos, kv, w, 5); err == nil {
		t.Error("a short query: no error")
	}
}
