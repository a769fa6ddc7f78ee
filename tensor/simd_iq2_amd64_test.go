//go:build goexperiment.simd && amd64

package tensor

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// iq2Operands makes nb random blocks of typ (any codes, scales and signs; a finite d) and
// Q8_K activations with quants in [-127, 127] (a -128 against a negative sign wraps in the
// vector kernels as in ggml's, not in the scalar one) and valid bsums.
func iq2Operands(rng *rand.Rand, typ Type, nb int) (w, a []byte) {
	bs := int(typ.BlockBytes())
	w = make([]byte, nb*bs)
	for i := range w {
		w[i] = byte(rng.Uint32())
	}
	for off := 0; off < len(w); off += bs {
		d := float32(math.Ldexp(rng.Float64()+0.5, rng.IntN(16)-12))
		binary.LittleEndian.PutUint16(w[off:], F32ToF16(d))
	}
	a = make([]byte, nb*292)
	for off := 0; off < len(a); off += 292 {
		binary.LittleEndian.PutUint32(a[off:], math.Float32bits(float32(math.Ldexp(rng.Float64()+0.5, rng.IntN(20)-10))))
		for i := range 256 {
			a[off+4+i] = byte(int8(rng.IntN(255) - 127))
		}
		setQ8KBsums(a[off : off+292])
	}
	return w, a
}

func setQ8KBsums(b []byte) {
	for g := range 16 {
		s := 0
		for _, q := range b[4+16*g : 4+16*g+16] {
			s += int(int8(q))
		}
		binary.LittleEndian.PutUint16(b[260+2*g:], uint16(int16(s)))
	}
}

// iq2Extreme sets every block to its largest scales, the grid points of the highest
// indices and every sign negative, and the activations to ±127 alternating in runs.
func iq2Extreme(typ Type, w, a []byte) {
	bs := int(typ.BlockBytes())
	for off := 0; off < len(w); off += bs {
		for i := 2; i < bs; i++ {
			w[off+i] = 0xFF // IQ2_XXS: index 255, sign code 127 (all eight negative), s = 15
		}
	}
	for off := 0; off < len(a); off += 292 {
		for i := range 256 {
			q := int8(127)
			if i/3%2 == 1 {
				q = -127
			}
			a[off+4+i] = byte(q)
		}
		setQ8KBsums(a[off : off+292])
	}
}

// iq2Magnitude is Σ|w·x| in float64 from the dequantized operands.
func iq2Magnitude(typ Type, n int, w, a []byte) float64 {
	wf := make([]float32, n)
	active.traits[typ].ToFloat(w, wf)
	var m float64
	for i := range n {
		b := a[i/256*292:]
		y := float64(math.Float32frombits(binary.LittleEndian.Uint32(b))) * float64(int8(b[4+i%256]))
		m += math.Abs(float64(wf[i]) * y)
	}
	return m
}

var (
	iq2Types = []Type{IQ2_XXS, IQ2_XS, IQ2_S}
	iq2Set   = latticeKernelSet{iq2Types, iq2Kernels, iq2VNNIKernels, useIQ2VNNI}
)

// TestIQ2MatchesScalar holds the vector kernels (VecDot as installed, the AVX2 and the
// AVX-512 kernels by name) to the generic kernel within 1e-5·Σ|w·x| on random and extreme
// blocks of 1-4 blocks, and the AVX-512 kernels to the AVX2 kernels' bits.
func TestIQ2MatchesScalar(t *testing.T) {
	testLatticeMatchesScalar(t, iq2Set, rand.New(rand.NewPCG(3, 5)))
}

// TestIQ2RowsMatchOne holds the rows kernels (dotRowsOne) to the one-row kernel's bits row
// by row, and checks that they write no more than their rows' outputs.
func TestIQ2RowsMatchOne(t *testing.T) {
	testLatticeRowsMatchOne(t, iq2Types, rand.New(rand.NewPCG(9, 2)))
}

// BenchmarkIQ2Kernels times a 2048×768 matrix (an expert's shape) against one vector, one
// thread, cache-resident (benchLatticeKernels). MB/s counts the weight bytes.
//
//	GOEXPERIMENT=simd go test -run '^$' -bench IQ2Kernels -benchtime 200x ./tensor
func BenchmarkIQ2Kernels(b *testing.B) { benchLatticeKernels(b, iq2Set) }
