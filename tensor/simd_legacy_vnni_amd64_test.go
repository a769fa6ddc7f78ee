//go:build goexperiment.simd && amd64

package tensor

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// legacyVNNICase is the rows kernel of a 32-value format with the AVX2 kernel it must
// match, for each nibble split this CPU can run (Q8_0 has none).
type legacyVNNICase struct {
	typ   Type
	name  string
	shape blockShape
	rows  vnniRowsKernel
	avx2  func(n int, w, a []byte) float32
}

func legacyVNNICases(t testing.TB) []legacyVNNICase {
	if !useVNNI {
		t.Skip("CPU without AVX-512 VNNI: the AVX2 kernels run")
	}
	avx2 := map[Type]func(n int, w, a []byte) float32{Q4_0: dotQ4_0AVX2, Q5_0: dotQ5_0AVX2, Q8_0: dotQ8_0AVX2, MXFP4: dotMXFP4AVX2}
	var cases []legacyVNNICase
	for _, typ := range []Type{Q4_0, Q5_0, Q8_0, MXFP4} {
		for name, gfni := range q4KSplits() {
			if typ == Q8_0 && gfni {
				continue
			}
			shape, rows := pickLegacyRows(typ, gfni)
			cases = append(cases, legacyVNNICase{typ, name, shape, rows, avx2[typ]})
		}
	}
	return cases
}

// sameBits is whether a VNNI result is the AVX2 one: the same bits, or both NaN (a NaN
// scale's payload may meet another NaN in either order).
func sameBits(got, want float32) bool {
	return math.Float32bits(got) == math.Float32bits(want) || (got != got && want != want)
}

// legacyOperands makes a row of n values of typ and Q8_0 activations of one of five kinds:
// quantized from stressing floats, random bytes (any codes, finite scales), the extreme
// codes (weights ±127 and -128 or the largest FP4 values against activations -128 and
// +127), and with infinite or NaN block scales.
func legacyOperands(t *testing.T, rng *rand.Rand, typ Type, n, kind int) (w, a []byte) {
	w, a = quantizedOperands(t, rng, typ, n)
	bs := int(typ.BlockBytes())
	switch kind {
	case 1:
		randomBlocks(rng, typ, w)
		randomBlocks(rng, Q8_0, a)
	case 2:
		qoff := 2 // the quants follow the scale
		if typ == MXFP4 {
			qoff = 1
		}
		for off := 0; off < len(w); off += bs {
			for i := off + qoff; i < off+bs; i++ {
				w[i] = []byte{0x80, 0x81, 0x7F, 0x00, 0xFF, 0x77, 0x88}[rng.IntN(7)]
			}
		}
		for off := 0; off < len(a); off += 34 {
			for i := off + 2; i < off+34; i++ {
				a[i] = []byte{0x80, 0x7F, 0x81}[rng.IntN(3)]
			}
		}
	case 3:
		for off := 0; off < len(w); off += bs {
			if rng.IntN(3) == 0 {
				continue
			}
			if typ == MXFP4 {
				w[off] = 0xFF // NaN
			} else {
				binary.LittleEndian.PutUint16(w[off:], []uint16{0x7C00, 0xFC00, 0x7E00}[rng.IntN(3)])
			}
		}
	}
	return w, a
}

// TestLegacyVNNIMatchesAVX2 holds the Q4_0, Q8_0 and MXFP4 VNNI kernels to the AVX2
// kernels' bits: the rows kernel on one row (as VecDot) and over 1 to 9 rows (every
// remainder of its groups of four), and the Q8_0 four-token kernel, over every row length
// a block loop meets.
func TestLegacyVNNIMatchesAVX2(t *testing.T) {
	rng := rand.New(rand.NewPCG(29, 31))
	for _, c := range legacyVNNICases(t) {
		dot := vnniDot(c.shape, c.rows)
		rowsOne := vnniDotRows(c.shape, c.rows)
		for _, n := range simdLengths(c.typ) {
			for kind := range 4 {
				what := fmt.Sprintf("%s %s n=%d kind %d", c.typ, c.name, n, kind)
				// Nine rows against four vectors.
				var rows []byte
				var a [4][]byte
				for r := range 9 {
					w, act := legacyOperands(t, rng, c.typ, n, kind)
					rows = append(rows, w...)
					a[r%4] = act
				}
				rb := len(rows) / 9
				want := func(r, v int) float32 { return c.avx2(n, rows[r*rb:(r+1)*rb], a[v]) }
				for v := range a {
					if got, want := dot(n, rows[:rb], a[v]), want(0, v); !sameBits(got, want) {
						t.Errorf("%s VecDot vector %d: VNNI %g, AVX2 %g", what, v, got, want)
					}
				}
				for count := 1; count <= 9; count++ {
					out := make([]float32, count+1)
					out[count] = 42 // past the rows: must stay
					rowsOne(n, rows[:count*rb], a[count%4], out[:count])
					for r := range count {
						if want := want(r, count%4); !sameBits(out[r], want) {
							t.Errorf("%s rows row %d of %d: VNNI %g, AVX2 %g", what, r, count, out[r], want)
						}
					}
					if out[count] != 42 {
						t.Errorf("%s: %d rows wrote past their outputs", what, count)
					}
				}
				for r := range 9 {
					if c.typ != Q8_0 {
						break
					}
					got := dotQ8_0Tokens4VNNI(n, rows[r*rb:(r+1)*rb], a[0], a[1], a[2], a[3])
					for v := range got {
						if want := want(r, v); !sameBits(got[v], want) {
							t.Errorf("%s tokens4 row %d vector %d: VNNI %g, AVX2 %g", what, r, v, got[v], want)
						}
					}
				}
				// The rows form takes four rows at a time by Σ w·y, exact, where the AVX2
				// kernel's sign trick makes -(-128) -128: the two differ where an activation
				// byte is -128, which quantizeQ8_0 never writes (|round(x·127/max|x|)| ≤ 127),
				// so the activations here have none either.
				var aq [4][]byte
				for v := range a {
					aq[v] = bytes.Clone(a[v])
					for i := range aq[v] {
						if i%34 >= 2 && aq[v][i] == 0x80 {
							aq[v][i] = 0x81
						}
					}
				}
				for count := 1; count <= 9 && c.typ == Q8_0; count++ {
					// The rows form: each vector's outputs in a slice of their own, one
					// guard value past each.
					var outs [4][]float32
					for v := range outs {
						outs[v] = make([]float32, count+1)
						outs[v][count] = 42
					}
					dotQ8_0Tokens4RowsOf(n, rows[:count*rb], rb, aq[0], aq[1], aq[2], aq[3], outs[0][:count], outs[1][:count], outs[2][:count], outs[3][:count])
					for v, out := range outs {
						for r := range count {
							if want := c.avx2(n, rows[r*rb:(r+1)*rb], aq[v]); !sameBits(out[r], want) {
								t.Errorf("%s tokens4 rows, row %d of %d, vector %d: VNNI %g, AVX2 %g", what, r, count, v, out[r], want)
							}
						}
						if out[count] != 42 {
							t.Errorf("%s: tokens4 over %d rows wrote past vector %d's outputs", what, count, v)
						}
					}
				}
			}
		}
	}
}

// BenchmarkLegacyVNNI times the kernels on cache-hot 4096-value rows next to the AVX2
// ones (MB/s counts weight bytes): one row (VecDot), 16 rows against one vector (rows, as
// the decode mat-vec runs them; AVX2 row by row), and for Q8_0 one row against four
// vectors (tokens4; AVX2 by its two-token kernel).
//
//	GOEXPERIMENT=simd GODEBUG=asyncpreemptoff=1 go test -run '^$' -bench LegacyVNNI ./tensor
func BenchmarkLegacyVNNI(b *testing.B) {
	const rows = 16
	for _, c := range legacyVNNICases(b) {
		w, a := benchOperands(b, c.typ)
		rb := len(w)
		all := make([]byte, 0, rows*rb)
		for range rows {
			all = append(all, w...)
		}
		out := make([]float32, rows)
		vnniRows, vnniOne := vnniDotRows(c.shape, c.rows), vnniDot(c.shape, c.rows)
		run := func(name string, bytes int, f func()) {
			b.Run(name, func(b *testing.B) {
				b.SetBytes(int64(bytes))
				for b.Loop() {
					f()
				}
			})
		}
		prefix := c.typ.String() + "/"
		if c.name == "shift" && c.typ != Q8_0 {
			prefix += "shift/"
		} else { // the AVX2 kernels once per format
			run(prefix+"one/avx2", rb, func() { out[0] = c.avx2(benchRow, w, a) })
			run(prefix+"rows/avx2", rows*rb, func() {
				for r := range rows {
					out[r] = c.avx2(benchRow, all[r*rb:(r+1)*rb], a)
				}
			})
		}
		run(prefix+"one/vnni", rb, func() { out[0] = vnniOne(benchRow, w, a) })
		run(prefix+"rows/vnni", rows*rb, func() { vnniRows(benchRow, all, a, out) })
		if c.typ == Q8_0 {
			run(prefix+"tokens4/avx2", rb, func() {
				o := dotQ8_0Tokens2AVX2(benchRow, w, a, a)
				out[0], out[1] = o[0], o[1]
				o = dotQ8_0Tokens2AVX2(benchRow, w, a, a)
				out[2], out[3] = o[0], o[1]
			})
			run(prefix+"tokens4/vnni", rb, func() {
				o := dotQ8_0Tokens4VNNI(benchRow, w, a, a, a, a)
				copy(out, o[:])
			})
		}
	}
}
