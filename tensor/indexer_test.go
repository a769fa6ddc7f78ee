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

// TestIndexerScoresKey128: with keys of 128 values (DeepSeek-V3.2's and GLM-5's indexer) the
// scores are Σ_h w[h]·max(q_h·k, 0) with each product ggml_vec_dot_f32's (vecDotF32), added
// in head order, bit for bit, at every kernel level (the AVX-512 level scores all heads
// against a key at once), NaN products counting as 0 as ggml's MAX(qk, 0.0f) makes them.
func TestIndexerScoresKey128(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const heads, dim, kvLen = 64, 128, 100
	q, w, keys := randomFloats(rng, heads*dim), randomFloats(rng, heads), randomFloats(rng, kvLen*dim)
	keys[7*dim+3] = float32(math.NaN()) // position 7: every product is NaN
	data := make([]byte, 4*len(keys))
	if err := Quantize(F32, keys, data); err != nil {
		t.Fatal(err)
	}
	kv := KV{Type: F32, Data: data, Dim: dim, Heads: 1, PosStride: dim * 4, HeadStride: dim * 4, Cells: kvLen}
	p := NewPool(2)
	defer p.Close()
	got := make([]float32, kvLen)
	if err := p.IndexerScores(got, q, heads, []int32{kvLen - 1}, kv, w, kvLen); err != nil {
		t.Fatal(err)
	}
	for j := range kvLen {
		var want float32
		for h := range heads {
			if qk := vecDotF32(q[h*dim:(h+1)*dim], keys[j*dim:(j+1)*dim]); qk > 0 {
				want += qk * w[h]
			}
		}
		if math.Float32bits(got[j]) != math.Float32bits(want) {
			t.Fatalf("level %s: position %d scores %g, ggml's order gives %g", KernelLevel(), j, got[j], want)
		}
	}
}

func TestRelu(t *testing.T) {
	for _, c := range []struct{ x, want float32 }{
		{1.5, 1.5}, {-2, 0}, {0, 0}, {float32(math.Copysign(0, -1)), 0}, {float32(math.Inf(1)), float32(math.Inf(1))},
		{float32(math.Inf(-1)), 0}, {float32(math.NaN()), 0}, {math.Float32frombits(0xFFC00001), 0}, {math.SmallestNonzeroFloat32, math.SmallestNonzeroFloat32},
	} {
		if got := relu(c.x); math.Float32bits(got) != math.Float32bits(c.want) {
			t.Errorf("relu(%g) = %g, want %g", c.x, got, c.want)
		}
	}
}

// BenchmarkIndexerScores is one decode step's indexer of DeepSeek-V3.2's shape (64 heads of
// 128) over 4,096 positions of an F16 cache, on two workers.
func BenchmarkIndexerScores(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	const heads, dim, kvLen = 64, 128, 4096
	k := denseKV(b, F16, randomFloats(rng, kvLen*dim), dim, 1)
	q, w := randomFloats(rng, heads*dim), randomFloats(rng, heads)
	dst := make([]float32, kvLen)
	p := NewPool(2)
	defer p.Close()
	for b.Loop() {
		if err := p.IndexerScores(dst, q, heads, []int32{kvLen - 1}, k, w, kvLen); err != nil {
			b.Fatal(err)
		}
	}
}
