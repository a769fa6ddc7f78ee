//go:build goexperiment.simd && amd64

package tensor

import (
	"encoding/binary"
	"fmt"
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
	traits[typ].ToFloat(w, wf)
	var m float64
	for i := range n {
		b := a[i/256*292:]
		y := float64(math.Float32frombits(binary.LittleEndian.Uint32(b))) * float64(int8(b[4+i%256]))
		m += math.Abs(float64(wf[i]) * y)
	}
	return m
}

var iq2Types = []Type{IQ2_XXS, IQ2_XS, IQ2_S}

// TestIQ2MatchesScalar holds the vector kernels (VecDot as installed, and the AVX2 kernels
// by name) to the generic kernel within 1e-5·Σ|w·x| on random and extreme blocks of 1-4
// blocks.
func TestIQ2MatchesScalar(t *testing.T) {
	kernels := map[Type]func(n int, w, a []byte) float32{IQ2_XXS: dotIQ2_XXSAVX2, IQ2_XS: dotIQ2_XSAVX2, IQ2_S: dotIQ2_SAVX2}
	rng := rand.New(rand.NewPCG(3, 5))
	for _, typ := range iq2Types {
		scalar := ScalarVecDot(typ)
		installed := traits[typ].VecDot
		check := func(n int, w, a []byte, what string) {
			want := scalar(n, w, a)
			tol := 1e-5 * iq2Magnitude(typ, n, w, a)
			got := map[string]float32{"installed": installed(n, w, a), "avx2": kernels[typ](n, w, a)}
			if v, ok := iq2VNNIKernels[typ]; ok && useIQ2VNNI {
				got["vnni"] = vnniDot(iq2Kernels[typ].shape, v)(n, w, a)
				if math.Float32bits(got["vnni"]) != math.Float32bits(got["avx2"]) {
					t.Errorf("%s n=%d %s: VNNI %g, AVX2 %g", typ, n, what, got["vnni"], got["avx2"])
				}
			}
			for name, got := range got {
				if diff := math.Abs(float64(got) - float64(want)); diff > tol || math.IsNaN(float64(got)) {
					t.Errorf("%s %s n=%d %s: %g, scalar %g (diff %g > %g)", typ, name, n, what, got, want, diff, tol)
				}
			}
		}
		for nb := 1; nb <= 4; nb++ {
			n := nb * qkK
			for trial := range 50 {
				w, a := iq2Operands(rng, typ, nb)
				check(n, w, a, fmt.Sprintf("random %d", trial))
			}
			w, a := iq2Operands(rng, typ, nb)
			iq2Extreme(typ, w, a)
			want := scalar(n, w, a)
			if want == 0 {
				t.Fatalf("%s: extreme blocks give 0", typ)
			}
			check(n, w, a, "extreme")
		}
	}
}

// TestIQ2RowsMatchOne holds the rows kernels (dotRowsOne) to the one-row kernel's bits row
// by row, and checks that they write no more than their rows' outputs.
func TestIQ2RowsMatchOne(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 2))
	for _, typ := range iq2Types {
		rowsKernel := dotRowsOne[typ]
		if rowsKernel == nil {
			t.Fatalf("%s: no rows kernel", typ)
		}
		for _, nb := range []int{1, 2, 3, 5} {
			for _, count := range []int{1, 2, 3, 7} {
				w, a := iq2Operands(rng, typ, nb*count)
				a = a[:nb*292]
				rb := nb * int(typ.BlockBytes())
				out := make([]float32, count+1)
				out[count] = 42
				rowsKernel(nb*qkK, w, a, out[:count])
				for r := range count {
					want := traits[typ].VecDot(nb*qkK, w[r*rb:(r+1)*rb], a)
					if math.Float32bits(out[r]) != math.Float32bits(want) {
						t.Errorf("%s nb=%d rows=%d row %d: %g, one row %g", typ, nb, count, r, out[r], want)
					}
				}
				if out[count] != 42 {
					t.Errorf("%s nb=%d: wrote past %d rows", typ, nb, count)
				}
			}
		}
	}
}

// BenchmarkIQ2Kernels times a 2048×768 matrix (an expert's shape) against one vector, one
// thread, cache-resident: the generic kernel row by row, the vector kernel row by row
// (VecDot), the rows kernel, and the pool's MatMul. MB/s counts the weight bytes.
//
//	GOEXPERIMENT=simd go test -run '^$' -bench IQ2Kernels -benchtime 200x ./tensor
func BenchmarkIQ2Kernels(b *testing.B) {
	const cols, rows = 2048, 768
	for _, typ := range iq2Types {
		rng := rand.New(rand.NewPCG(1, uint64(typ)))
		nb := cols / qkK
		rb := nb * int(typ.BlockBytes())
		w, a := iq2Operands(rng, typ, nb*rows)
		a = a[:nb*292]
		out := make([]float32, rows)
		perRow := func(dot func(n int, w, a []byte) float32) func() {
			return func() {
				for r := range rows {
					out[r] = dot(cols, w[r*rb:(r+1)*rb], a)
				}
			}
		}
		m, err := NewMatrix(typ, []int64{cols, rows}, w)
		if err != nil {
			b.Fatal(err)
		}
		x := randomFloats(rng, cols)
		p := NewPool(1)
		for _, k := range []struct {
			name string
			run  func()
		}{
			{"scalar", perRow(ScalarVecDot(typ))},
			{"vecdot", perRow(traits[typ].VecDot)},
			{"rows", func() { dotRowsOne[typ](cols, w, a, out) }},
			{"avx2rows", func() { vnniDotRows(iq2Kernels[typ].shape, iq2Kernels[typ].rows)(cols, w, a, out) }},
			{"matmul", func() {
				if err := p.MatMul(out, m, x); err != nil {
					b.Fatal(err)
				}
			}},
		} {
			b.Run(fmt.Sprintf("type=%s/%s", typ, k.name), func(b *testing.B) {
				b.SetBytes(int64(len(w)))
				for b.Loop() {
					k.run()
				}
			})
		}
		p.Close()
	}
}
