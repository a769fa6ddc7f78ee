//go:build goexperiment.simd && amd64

package tensor

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"simd/archsimd"
	"testing"
)

// TestDotF16Exact holds dotF16AVX2 to the sequential float64 kernel (dotHalf) bit for bit
// on inputs that take the exact vector path (Gaussian values, zeros, signed zeros) and on
// inputs that must leave it (a product of two subnormals, products spanning 2^-30 to 2^30,
// infinities, NaNs, lengths not a multiple of eight), and checks that the vector path is
// taken where its bound holds, so the comparison is not vacuous.
func TestDotF16Exact(t *testing.T) {
	if !archsimd.X86.AVX2() || !archsimd.X86.FMA() {
		t.Skip("CPU without AVX2 and FMA")
	}
	rng := rand.New(rand.NewPCG(16, 16))
	encode := func(v []float32) []byte {
		b := make([]byte, 2*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint16(b[2*i:], F32ToF16(x))
		}
		return b
	}
	gauss := func(n int, scale float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * scale)
		}
		return v
	}
	type input struct {
		name       string
		w, a       []float32
		wantVector bool
	}
	var inputs []input
	for _, n := range []int{8, 64, 128, 1000} {
		inputs = append(inputs, input{"gauss", gauss(n, 1), gauss(n, 1), true})
		w, a := gauss(n, 3), gauss(n, 0.1)
		w[0], a[1] = 0, float32(math.Copysign(0, -1)) // zero products do not count
		inputs = append(inputs, input{"zeros", w, a, true})
		w, a = gauss(n, 1), gauss(n, 1)
		w[2], a[2] = 1e-5, 3e-5 // a product of two subnormals: its last bit is 2^-48
		// With eight values the bound still holds (eight products below 4 are fewer than
		// 2^53 units of 2^-48); from 64 on it does not.
		inputs = append(inputs, input{"subnormal pair", w, a, n == 8})
		w, a = gauss(n, 1), gauss(n, 1)
		w[n/2], a[n/2], w[n/3] = 30000, 30000, 6e-8 // products from ~2^-30 to ~2^30
		inputs = append(inputs, input{"wide", w, a, false})
		inf := gauss(n, 1)
		inf[n-1] = float32(math.Inf(1))
		inputs = append(inputs, input{"infinity", inf, gauss(n, 1), false})
		nan := gauss(n, 1)
		nan[0] = float32(math.NaN())
		inputs = append(inputs, input{"NaN", gauss(n, 1), nan, false})
		inputs = append(inputs, input{"all zero", make([]float32, n), gauss(n, 1), true})
	}
	inputs = append(inputs, input{"odd length", gauss(131, 1), gauss(131, 1), false})
	for _, in := range inputs {
		n := len(in.w)
		w, a := encode(in.w), encode(in.a)
		want := dotHalf(n, w, a, F16ToF32)
		got := dotF16AVX2(n, w, a)
		if math.Float32bits(got) != math.Float32bits(want) && !(got != got && want != want) {
			t.Errorf("%s, n=%d: %v (%#x), sequential kernel %v (%#x)", in.name, n, got, math.Float32bits(got), want, math.Float32bits(want))
		}
		if _, ok := dotF16ExactAVX2(n, w, a); ok != in.wantVector {
			t.Errorf("%s, n=%d: vector path taken: %v, want %v", in.name, n, ok, in.wantVector)
		}
		if useAVX512 {
			got, ok := dotF16ExactAVX512(n, w, a)
			if want512 := in.wantVector && n%32 == 0; ok != want512 {
				t.Errorf("%s, n=%d: AVX-512 path taken: %v, want %v", in.name, n, ok, want512)
			}
			if ok && math.Float32bits(got) != math.Float32bits(want) {
				t.Errorf("%s, n=%d: AVX-512 %v, sequential kernel %v", in.name, n, got, want)
			}
		}
	}
	// Many random vectors whose magnitudes vary by up to 2^12 within a row: every result the
	// vector path gives must be the sequential one's.
	for range 2000 {
		n := 8 * (1 + rng.IntN(32))
		wv, av := make([]float32, n), make([]float32, n)
		for i := range wv {
			wv[i] = float32(rng.NormFloat64() * math.Exp2(float64(rng.IntN(13)-6)))
			av[i] = float32(rng.NormFloat64() * math.Exp2(float64(rng.IntN(13)-6)))
		}
		w, a := encode(wv), encode(av)
		if got, want := dotF16AVX2(n, w, a), dotHalf(n, w, a, F16ToF32); math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("n=%d: %v, sequential kernel %v", n, got, want)
		}
	}
}

// TestDotF16Rows4 holds the four-row F16 kernel (F16 weight matmuls) to the sequential
// kernel row by row, on lengths that take the AVX-512 exact path and others, with one row
// that must leave it (a wide spread of magnitudes) in some of them.
func TestDotF16Rows4(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	encode := func(n int, spread int) []byte {
		b := make([]byte, 2*n)
		for i := range n {
			x := rng.NormFloat64() * math.Exp2(float64(rng.IntN(2*spread+1)-spread))
			binary.LittleEndian.PutUint16(b[2*i:], F32ToF16(float32(x)))
		}
		return b
	}
	for trial := range 400 {
		n := []int{32, 64, 96, 192, 256, 40, 200}[trial%7]
		a := encode(n, 3)
		var rows [4][]byte
		for i := range rows {
			rows[i] = encode(n, 3)
		}
		if trial%3 == 0 {
			rows[trial%4] = encode(n, 14) // products too far apart for the bound
		}
		got := dotF16Rows4AVX2(n, rows[0], rows[1], rows[2], rows[3], a)
		for i, w := range rows {
			if want := dotHalf(n, w, a, F16ToF32); math.Float32bits(got[i]) != math.Float32bits(want) {
				t.Fatalf("trial %d n=%d row %d: %v, sequential kernel %v", trial, n, i, got[i], want)
			}
		}
	}
}
