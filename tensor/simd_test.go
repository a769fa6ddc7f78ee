package tensor

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// The vector kernels (simd_*_amd64.go) against the scalar kernels they replaced. Without
// GOEXPERIMENT=simd, or on a CPU without AVX2 and FMA, none is installed and these tests
// skip; `make test` runs the package both ways.

// simdHotTypes are the weight types issue 3 asks vector kernels for (Q5_0, Q5_1 and
// IQ4_NL, llama-quantize's fallbacks where K-quant rows do not fit, as DeepSeek's attn_k_b;
// Q4_1; and Q2_K and Q3_K, the experts of low-bit DeepSeek files). F16 and F32 keep their
// VecDot, whose steps run vector code in the SIMD build (ggml_float.go, TestFloatDots).
var simdHotTypes = []Type{Q2_K, Q3_K, Q4_K, Q6_K, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q5_K, IQ4_XS, IQ4_NL, MXFP4, BF16}

// simdTypes lists the types whose VecDot a vector kernel replaced and that can be
// quantized from floats, in id order.
func simdTypes(t testing.TB) []Type {
	types := make([]Type, 0, len(scalarVecDots()))
	for typ := range scalarVecDots() {
		if active.traits[typ].FromFloat != nil { // the others (the lattice formats) have tests of their own
			types = append(types, typ)
		}
	}
	if len(types) == 0 {
		t.Skip("no vector kernels in this build (needs GOEXPERIMENT=simd on amd64 with AVX2 and FMA)")
	}
	slices.Sort(types)
	return types
}

// simdExact lists the vector kernels that keep the scalar kernel's summation order, whose
// results must be the same bits.
var simdExact = map[Type]bool{F16: true}

// simdTolerance is testdata/quant/README.md §6's bound for kernels that sum in another
// order: |got - want| ≤ 1e-5·Σ|w·x|.
const simdTolerance = 1e-5

// dotMagnitude is Σ_k |w_k|·|x_k| over the terms a kernel adds up, from the dequantized
// operands. Q2_K, Q4_K and Q5_K values are d·sc·q - dmin·m (Q4_1 and Q5_1's d·q + m), and both
// kernels add the two parts separately (they may nearly cancel), so for them each part
// counts on its own: the row is decoded once with the min's scale zeroed and once with d
// zeroed (the two F16s at the start of every block of these formats).
func dotMagnitude(typ Type, n int, w, a []byte) float64 {
	tr := active.traits[typ]
	x := make([]float32, n)
	decode := func(w []byte) []float32 {
		v := make([]float32, n)
		tr.ToFloat(w, v)
		return v
	}
	active.traits[tr.VecDotType].ToFloat(a, x)
	parts := [][]float32{decode(w)}
	// Where each block keeps its d and its min's scale (F16s).
	scalesAt := map[Type][2]int{Q4_K: {0, 2}, Q5_K: {0, 2}, Q4_1: {0, 2}, Q5_1: {0, 2}, Q2_K: {80, 82}}
	if at, ok := scalesAt[typ]; ok {
		bs := int(typ.BlockBytes())
		scaleOnly, minOnly := slices.Clone(w), slices.Clone(w)
		for off := 0; off < len(w); off += bs {
			scaleOnly[off+at[1]], scaleOnly[off+at[1]+1] = 0, 0 // the min's scale
			minOnly[off+at[0]], minOnly[off+at[0]+1] = 0, 0     // d
		}
		parts = [][]float32{decode(scaleOnly), decode(minOnly)}
	}
	var m float64
	for _, p := range parts {
		for k, v := range p {
			m += math.Abs(float64(v) * float64(x[k]))
		}
	}
	return m
}

// checkSIMD compares the installed kernel of typ with the scalar one on one row.
func checkSIMD(t *testing.T, typ Type, n int, w, a []byte, what string) {
	t.Helper()
	got := active.traits[typ].VecDot(n, w, a)
	want := scalarVecDots()[typ](n, w, a)
	m := dotMagnitude(typ, n, w, a)
	diff := math.Abs(float64(got) - float64(want))
	switch {
	case simdExact[typ]:
		if math.Float32bits(got) != math.Float32bits(want) && !(got != got && want != want) {
			t.Errorf("%s n=%d %s: %g, scalar %g: must be equal", typ, n, what, got, want)
		}
	case math.IsNaN(float64(want)) || math.IsInf(float64(want), 0):
		if math.Float32bits(got) != math.Float32bits(want) && !(math.IsNaN(float64(got)) && math.IsNaN(float64(want))) {
			t.Errorf("%s n=%d %s: %g, scalar %g", typ, n, what, got, want)
		}
	case !(diff <= simdTolerance*m):
		t.Errorf("%s n=%d %s: %g, scalar %g: differs by %.3g > %g·%.6g", typ, n, what, got, want, diff, simdTolerance, m)
	}
}

// simdLengths are the row lengths tried for a type: one block up to many, with every
// remainder a kernel's loop can leave (the float kernels step 32 values at a time).
func simdLengths(typ Type) []int {
	bs := int(typ.BlockSize())
	if bs == 1 {
		return []int{1, 7, 8, 31, 32, 33, 63, 64, 65, 100, 255, 512, 1000, 4096 + 17}
	}
	var out []int
	for _, blocks := range []int{1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 33} {
		out = append(out, blocks*bs)
	}
	return out
}

// blockFloats fills x with blocks of size bs that stress a kernel: Gaussian values at
// magnitudes from 1e-7 (f16 block scales underflow to subnormals or zero) to 1e4, all-zero
// blocks, constant blocks, and blocks with a lone outlier.
func blockFloats(rng *rand.Rand, x []float32, bs int) {
	for b := 0; b < len(x); b += bs {
		blk := x[b:min(b+bs, len(x))]
		scale := math.Exp(rng.Float64()*20 - 10)
		switch rng.IntN(6) {
		case 0:
			clear(blk)
		case 1:
			c := float32(rng.NormFloat64() * scale)
			for i := range blk {
				blk[i] = c
			}
		case 2:
			for i := range blk {
				blk[i] = float32(rng.NormFloat64())
			}
			blk[rng.IntN(len(blk))] = float32(1e4 * (rng.Float64() - 0.5))
		case 3:
			for i := range blk {
				blk[i] = float32(rng.NormFloat64() * 1e-7)
			}
		default:
			for i := range blk {
				blk[i] = float32(rng.NormFloat64() * scale)
			}
		}
	}
}

// quantizedOperands makes a row of typ from floats, and activations in its VecDotType
// the way the matmul converts them.
func quantizedOperands(t *testing.T, rng *rand.Rand, typ Type, n int) (w, a []byte) {
	t.Helper()
	tr := active.traits[typ]
	x := make([]float32, n)
	bs := max(int(typ.BlockSize()), 32)
	blockFloats(rng, x, bs)
	if typ == F16 || typ == BF16 {
		for i := range x {
			x[i] = float32(max(-6e4, min(6e4, float64(x[i])))) // finite in both
		}
	}
	w = make([]byte, mustRowBytes(t, typ, n))
	if err := Quantize(typ, x, w); err != nil {
		t.Fatal(err)
	}
	blockFloats(rng, x, max(int(tr.VecDotType.BlockSize()), 32))
	a = make([]byte, mustRowBytes(t, tr.VecDotType, n))
	if err := QuantizeActivations(tr.VecDotType, x, a); err != nil {
		t.Fatal(err)
	}
	return w, a
}

func mustRowBytes(t testing.TB, typ Type, n int) int {
	t.Helper()
	size, err := typ.RowBytes(int64(n))
	if err != nil {
		t.Fatal(err)
	}
	return int(size)
}

// randomHalf is a random finite f16 of magnitude 2^-20 .. 2^4 (a block scale).
func randomHalf(rng *rand.Rand) uint16 {
	return F32ToF16(float32(math.Ldexp(rng.Float64()+0.5, rng.IntN(25)-20) * float64(1-2*rng.IntN(2))))
}

// randomBlocks fills w with random bytes, which the block formats accept as any codes and
// sub-block scales, keeping the block scales finite (an infinite scale against a zero sum
// gives NaN in one summation order and ±Inf in another).
func randomBlocks(rng *rand.Rand, typ Type, w []byte) {
	for i := range w {
		w[i] = byte(rng.Uint32())
	}
	bs := int(typ.BlockBytes())
	for off := 0; off < len(w); off += bs {
		b := w[off : off+bs]
		switch typ {
		case Q4_K, Q5_K:
			binary.LittleEndian.PutUint16(b[0:], randomHalf(rng))
			binary.LittleEndian.PutUint16(b[2:], randomHalf(rng))
		case Q6_K:
			binary.LittleEndian.PutUint16(b[208:], randomHalf(rng))
		case Q2_K:
			binary.LittleEndian.PutUint16(b[80:], randomHalf(rng))
			binary.LittleEndian.PutUint16(b[82:], randomHalf(rng))
		case Q3_K:
			binary.LittleEndian.PutUint16(b[108:], randomHalf(rng))
		case IQ4_XS, Q4_0, Q8_0:
			binary.LittleEndian.PutUint16(b[0:], randomHalf(rng))
		case MXFP4:
			b[0] = byte(100 + rng.IntN(50)) // 2^-28 .. 2^21
		case F16:
			binary.LittleEndian.PutUint16(b, randomHalf(rng))
		case BF16:
			binary.LittleEndian.PutUint16(b, F32ToBF16(float32(rng.NormFloat64()*math.Exp(rng.Float64()*40-20))))
		case F32:
			binary.LittleEndian.PutUint32(b, math.Float32bits(float32(rng.NormFloat64()*math.Exp(rng.Float64()*40-20))))
		}
	}
}

// TestSIMDMatchesScalar compares the kernels on rows of many lengths, with weights made
// two ways: quantized from floats that stress the quantizers (see blockFloats), and random
// bytes, which give every code and sub-block scale.
func TestSIMDMatchesScalar(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, typ := range simdTypes(t) {
		for _, n := range simdLengths(typ) {
			for rep := range 4 {
				w, a := quantizedOperands(t, rng, typ, n)
				checkSIMD(t, typ, n, w, a, fmt.Sprintf("quantized row %d", rep))
				randomBlocks(rng, typ, w)
				checkSIMD(t, typ, n, w, a, fmt.Sprintf("random row %d", rep))
			}
		}
	}
}

// TestSIMDExtremeActivations uses activation blocks whose quants are all +127 or all -127
// (the largest sums VPMADDUBSW and VPMADDWD see) against weights at their extreme codes.
func TestSIMDExtremeActivations(t *testing.T) {
	for _, typ := range simdTypes(t) {
		tr := active.traits[typ]
		n := 4 * int(max(typ.BlockSize(), qkK))
		for _, sign := range []float32{1, -1} {
			x := make([]float32, n)
			for i := range x {
				x[i] = sign * 3 // every quant ±127
			}
			a := make([]byte, mustRowBytes(t, tr.VecDotType, n))
			if err := QuantizeActivations(tr.VecDotType, x, a); err != nil {
				t.Fatal(err)
			}
			for _, v := range []float32{1, -1, 1e4, -1e4} {
				for i := range x {
					x[i] = v
					if i%3 == 0 {
						x[i] = -v / 2 // negative and positive codes side by side
					}
				}
				w := make([]byte, mustRowBytes(t, typ, n))
				if err := Quantize(typ, x, w); err != nil {
					t.Fatal(err)
				}
				checkSIMD(t, typ, n, w, a, fmt.Sprintf("weights %g, activations %+g", v, sign))
			}
		}
	}
}

// TestSIMDZeroCodes uses blocks whose values are all zero although their scales are not
// (codes at the format's zero point): the exact integer sums are 0, so every kernel must
// return exactly 0, whatever its sums look like before the zero point is taken off. (Not
// Q6_K: ggml's AVX2 kernel takes its offset off lane by lane in another arrangement than
// the products' and converts each lane to float, so zero codes give it a small nonzero
// sum, and moerun's kernels keep its bits.)
func TestSIMDZeroCodes(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	zeroCodes := map[Type]func(b []byte){
		Q4_0: func(b []byte) { // q = 8
			binary.LittleEndian.PutUint16(b, randomHalf(rng))
			for i := 2; i < 18; i++ {
				b[i] = 0x88
			}
		},
		MXFP4: func(b []byte) { // E2M1 codes 0 and 8: +0 and -0
			b[0] = byte(100 + rng.IntN(50))
			for i := 1; i < 17; i++ {
				b[i] = []byte{0x00, 0x08, 0x80, 0x88}[rng.IntN(4)]
			}
		},
	}
	for _, typ := range simdTypes(t) {
		fill, ok := zeroCodes[typ]
		if !ok {
			continue
		}
		for _, n := range simdLengths(typ) {
			_, a := quantizedOperands(t, rng, typ, n)
			w := make([]byte, mustRowBytes(t, typ, n))
			bs := int(typ.BlockBytes())
			for off := 0; off < len(w); off += bs {
				fill(w[off : off+bs])
			}
			if got, want := active.traits[typ].VecDot(n, w, a), scalarVecDots()[typ](n, w, a); got != 0 || want != 0 {
				t.Errorf("%s n=%d: %g, scalar %g, want 0", typ, n, got, want)
			}
		}
	}
}

// TestSIMDHalfSpecials checks the F16 widening of the dot products on every binary16 bit
// pattern (zeros, subnormals, normals, infinities, NaNs) through dot products with 1.0:
// the product and the sum are exact, so each result is the value itself (+0 for either
// zero, as the accumulators start at +0; NaN for NaN).
func TestSIMDHalfSpecials(t *testing.T) {
	const n = 64
	w, a := make([]byte, 2*n), make([]byte, 2*n)
	one := F32ToF16(1)
	for h := 0; h < 1<<16; h++ {
		for i := range n {
			binary.LittleEndian.PutUint16(w[2*i:], 0)
			binary.LittleEndian.PutUint16(a[2*i:], 0)
		}
		slot := h % n
		binary.LittleEndian.PutUint16(w[2*slot:], uint16(h))
		binary.LittleEndian.PutUint16(a[2*slot:], one)
		got, want := active.traits[F16].VecDot(n, w, a), F16ToF32(uint16(h))+0
		if math.Float32bits(got) != math.Float32bits(want) && !(got != got && want != want) {
			t.Fatalf("f16 %#04x: %g (%#08x), want %g (%#08x)", h, got, math.Float32bits(got), want, math.Float32bits(want))
		}
	}
}

// wideFloats are Gaussian values scaled by 2^-14 .. 2^14, so that float64 sums of their
// products round, and a kernel that adds them in another order gives other bits.
func wideFloats(rng *rand.Rand, n int) []float32 {
	x := randomFloats(rng, n)
	for i := range x {
		x[i] *= float32(math.Ldexp(1, rng.IntN(29)-14))
	}
	return x
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
