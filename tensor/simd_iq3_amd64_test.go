//go:build goexperiment.simd && amd64

package tensor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

var iq3Types = []Type{IQ3_XXS, IQ3_S}

// latticeKernelSet is what the lattice tests take of a family of kernels: the AVX2 rows
// kernels with their shapes, the AVX-512 ones and whether this CPU runs them.
type latticeKernelSet struct {
	types  []Type
	avx2   map[Type]latticeKernel
	vnni   map[Type]vnniRowsKernel
	useAVX bool
}

var iq3Set = latticeKernelSet{iq3Types, iq3Kernels, iq3VNNIKernels, useIQ2VNNI}

// TestIQ3MatchesScalar holds the vector kernels (VecDot as installed, the AVX2 and the
// AVX-512 kernels by name) to the generic kernel within 1e-5·Σ|w·x| on random and extreme
// blocks (iq2Operands, iq2Extreme: every byte 0xFF is the highest indices, all signs
// negative and s = 15 in both formats) of 1-4 blocks, and the AVX-512 kernels to the AVX2
// kernels' bits.
func TestIQ3MatchesScalar(t *testing.T) {
	testLatticeMatchesScalar(t, iq3Set, rand.New(rand.NewPCG(3, 7)))
}

// TestIQ3RowsMatchOne holds the rows kernels (dotRowsOne) to the one-row kernel's bits row
// by row, and checks that they write no more than their rows' outputs.
func TestIQ3RowsMatchOne(t *testing.T) {
	testLatticeRowsMatchOne(t, iq3Types, rand.New(rand.NewPCG(9, 4)))
}

func testLatticeMatchesScalar(t *testing.T, set latticeKernelSet, rng *rand.Rand) {
	for _, typ := range set.types {
		k := set.avx2[typ]
		scalar := ScalarVecDot(typ)
		kernels := map[string]func(n int, w, a []byte) float32{"installed": active.traits[typ].VecDot, "avx2": vnniDot(k.shape, k.rows)}
		if v, ok := set.vnni[typ]; ok && set.useAVX {
			kernels["vnni"] = vnniDot(k.shape, v)
		}
		check := func(n int, w, a []byte, what string) {
			want := scalar(n, w, a)
			tol := 1e-5 * iq2Magnitude(typ, n, w, a)
			got := map[string]float32{}
			for name, dot := range kernels {
				got[name] = dot(n, w, a)
				if diff := math.Abs(float64(got[name]) - float64(want)); diff > tol || math.IsNaN(float64(got[name])) {
					t.Errorf("%s %s n=%d %s: %g, scalar %g (diff %g > %g)", typ, name, n, what, got[name], want, diff, tol)
				}
			}
			if v, ok := got["vnni"]; ok && math.Float32bits(v) != math.Float32bits(got["avx2"]) {
				t.Errorf("%s n=%d %s: VNNI %g, AVX2 %g", typ, n, what, v, got["avx2"])
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
			if scalar(n, w, a) == 0 {
				t.Fatalf("%s: extreme blocks give 0", typ)
			}
			check(n, w, a, "extreme")
		}
	}
}

func testLatticeRowsMatchOne(t *testing.T, types []Type, rng *rand.Rand) {
	if active.level == LevelGeneric {
		t.Skip("the generic level has no rows kernels")
	}
	for _, typ := range types {
		rowsKernel := active.dotRowsOne[typ]
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
					want := active.traits[typ].VecDot(nb*qkK, w[r*rb:(r+1)*rb], a)
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

// BenchmarkIQ3Kernels times a 2048×768 matrix against one vector, one thread,
// cache-resident (benchLatticeKernels). MB/s counts the weight bytes.
//
//	GOEXPERIMENT=simd go test -run '^$' -bench IQ3Kernels -benchtime 200x ./tensor
func BenchmarkIQ3Kernels(b *testing.B) { benchLatticeKernels(b, iq3Set) }

// benchLatticeKernels times, per type of set, a 2048×768 matrix against one vector: the
// generic kernel and the installed vector kernel (VecDot) row by row, the installed rows
// kernel (dotRowsOne), the AVX2 and (where the CPU has them) AVX-512 rows kernels by name,
// and the pool's MatMul on one thread.
func benchLatticeKernels(b *testing.B, set latticeKernelSet) {
	const cols, rows = 2048, 768
	for _, typ := range set.types {
		rng := rand.New(rand.NewPCG(1, uint64(typ)))
		nb := cols / qkK
		rb := nb * int(typ.BlockBytes())
		w, a := iq2Operands(rng, typ, nb*rows)
		a = a[:nb*292]
		out := make([]float32, rows)
		k := set.avx2[typ]
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
		type run struct {
			name string
			run  func()
		}
		runs := []run{
			{"scalar", perRow(ScalarVecDot(typ))},
			{"vecdot", perRow(active.traits[typ].VecDot)},
			{"rows", func() { active.dotRowsOne[typ](cols, w, a, out) }},
			{"avx2", func() { vnniDotRows(k.shape, k.rows)(cols, w, a, out) }},
		}
		if v, ok := set.vnni[typ]; ok && set.useAVX {
			runs = append(runs, run{"vnni", func() { vnniDotRows(k.shape, v)(cols, w, a, out) }})
		}
		runs = append(runs, run{"matmul", func() {
			if err := p.MatMul(out, m, x); err != nil {
				b.Fatal(err)
			}
		}})
		for _, r := range runs {
			b.Run(fmt.Sprintf("type=%s/%s", typ, r.name), func(b *testing.B) {
				b.SetBytes(int64(len(w)))
				for b.Loop() {
					r.run()
				}
			})
		}
		p.Close()
	}
}
