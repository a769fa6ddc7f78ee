//go:build goexperiment.simd && amd64

package tensor

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"simd/archsimd"
)

// The AVX2 level's Q4_K, Q5_K and Q6_K quantizers (the group fits in eight lanes) write the
// generic quantizers' bytes for every kind of super-block: Gaussian and uniform values,
// groups that are constant, zero, all positive or all negative, tiny and huge magnitudes,
// mixed scales from group to group, infinities, and NaNs (which the lanes leave to the
// scalar fit).
func TestK4FitLanesMatchScalar(t *testing.T) {
	if !archsimd.X86.AVX2() {
		t.Skip("no AVX2")
	}
	rng := rand.New(rand.NewPCG(4, 2))
	kinds := []func(i int) float32{
		func(int) float32 { return float32(rng.NormFloat64()) },
		func(int) float32 { return float32(rng.Float64()*2 - 1) },
		func(i int) float32 { return float32(i / 32) }, // constant groups
		func(int) float32 { return 0 },
		func(int) float32 { return float32(rng.Float64()) + 0.5 },  // positive
		func(int) float32 { return -float32(rng.Float64()) - 0.5 }, // negative
		func(int) float32 { return float32(rng.NormFloat64() * 1e-30) },
		func(int) float32 { return float32(rng.NormFloat64() * 1e30) },
		func(i int) float32 { return float32(rng.NormFloat64() * math.Pow(10, float64(i/32-4))) },
		func(i int) float32 { return float32(rng.IntN(3) - 1) },
		func(i int) float32 {
			if i == 77 {
				return float32(math.Inf(1))
			}
			return float32(rng.NormFloat64())
		},
		func(i int) float32 {
			if i == 200 {
				return float32(math.NaN())
			}
			return float32(rng.NormFloat64())
		},
	}
	for _, c := range []struct {
		typ     Type
		generic func([]float32, []byte)
		avx2    func([]float32, []byte)
		bytes   int
	}{
		{Q4_K, encodeQ4_K, func(s []float32, d []byte) { encodeQ4KWith(fitK4GroupsAVX2, s, d) }, 144},
		{Q5_K, encodeQ5_K, func(s []float32, d []byte) { encodeQ5KWith(fitK4GroupsAVX2, s, d) }, 176},
		{Q6_K, encodeQ6_K, func(s []float32, d []byte) { encodeQ6KWith(fitQ6GroupsAVX2, s, d) }, 210},
	} {
		for k, kind := range kinds {
			for rep := range 50 {
				x := make([]float32, qkK)
				for i := range x {
					x[i] = kind(i)
				}
				want, got := make([]byte, c.bytes), make([]byte, c.bytes)
				c.generic(x, want)
				c.avx2(x, got)
				if !bytes.Equal(got, want) {
					t.Fatalf("%s, kind %d, repeat %d: AVX2 bytes\n%x\ngeneric\n%x", c.typ, k, rep, got, want)
				}
			}
		}
	}
}

// BenchmarkQuantizeK4 is the cost of quantizing Gaussian values to Q4_K (and Q6_K), which random
// model synthesis is made of, by the generic and the AVX2 fit.
func BenchmarkQuantizeK4(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	x := make([]float32, 64*qkK)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	dst := make([]byte, 64*144)
	q6 := make([]byte, 64*210)
	for _, c := range []struct {
		name   string
		encode func()
		bytes  int
	}{
		{"Q4_K/generic", func() { encodeQ4KWith(fitK4Groups, x, dst) }, len(dst)},
		{"Q4_K/avx2", func() { encodeQ4KWith(fitK4GroupsAVX2, x, dst) }, len(dst)},
		{"Q6_K/generic", func() { encodeQ6KWith(fitQ6Groups, x, q6) }, len(q6)},
		{"Q6_K/avx2", func() { encodeQ6KWith(fitQ6GroupsAVX2, x, q6) }, len(q6)},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(c.bytes))
			for b.Loop() {
				c.encode()
			}
		})
	}
}
