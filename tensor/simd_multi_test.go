package tensor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestDotTokens holds each two- and four-token kernel to its type's VecDot, bit for bit,
// on each of the activation vectors: on arbitrary block bytes (every nibble and
// packed-scale pattern, only the float scales kept finite), on quantized wide-range
// values, and through MatMul and MulMatID with token counts that leave a tile's last
// tokens to go as a pair and alone. The activations are quantized wide-range values and,
// for the largest sums the integer steps see, constant ones (every quant ±127).
func TestDotTokens(t *testing.T) {
	if len(active.dotTokens2) == 0 {
		t.Skip("no two-token kernels in this build")
	}
	multi := map[Type]bool{}
	for typ := range active.dotTokens4 {
		if active.dotTokens2[typ] == nil && active.dotRowsOne[typ] == nil {
			t.Errorf("%s has a four-token kernel but neither a two-token nor a rows kernel for the tokens left over", typ)
		}
		multi[typ] = true
	}
	for typ := range active.dotTokens2 {
		multi[typ] = true
	}
	rng := rand.New(rand.NewPCG(15, 16))
	for typ := range multi {
		dot2 := active.dotTokens2[typ]
		tr := active.traits[typ]
		vt := tr.VecDotType
		dot4 := active.dotTokens4[typ]
		// check runs dot2 on the pairs a[0:2] and a[2:4], and dot4 on all four.
		check := func(what string, n int, w []byte, a [4][]byte) {
			t.Helper()
			var want [4]float32
			for i := range a {
				want[i] = tr.VecDot(n, w, a[i])
			}
			compare := func(kernel string, first int, got []float32) {
				t.Helper()
				for i, g := range got {
					if math.Float32bits(g) != math.Float32bits(want[first+i]) {
						t.Errorf("%s %s %s n=%d token %d: %g, VecDot %g", typ, kernel, what, n, first+i, g, want[first+i])
					}
				}
			}
			if dot2 != nil {
				got2 := dot2(n, w, a[0], a[1])
				compare("tokens2", 0, got2[:])
				got2 = dot2(n, w, a[2], a[3])
				compare("tokens2", 2, got2[:])
			}
			if dot4 != nil {
				got4 := dot4(n, w, a[0], a[1], a[2], a[3])
				compare("tokens4", 0, got4[:])
			}
		}
		quantize := func(x []float32) []byte {
			a := make([]byte, mustRowBytes(t, vt, len(x)))
			if err := QuantizeActivations(vt, x, a); err != nil {
				t.Fatal(err)
			}
			return a
		}
		for _, blocks := range []int{1, 3, 11} {
			n := blocks * int(typ.BlockSize())
			w := make([]byte, mustRowBytes(t, typ, n))
			constant := func(v float32) []float32 {
				x := make([]float32, n)
				for i := range x {
					x[i] = v
				}
				return x
			}
			for rep := range 20 {
				randomBlocks(rng, typ, w)
				check("random weights", n, w, [4][]byte{quantize(wideFloats(rng, n)), quantize(wideFloats(rng, n)),
					quantize(wideFloats(rng, n)), quantize(wideFloats(rng, n))})
				if rep == 0 {
					check("random weights, activations ±127", n, w, [4][]byte{quantize(constant(3)), quantize(constant(-3)),
						quantize(constant(-3)), quantize(constant(3))})
				}
			}
			tr.FromFloat(wideFloats(rng, n), w)
			check("quantized weights", n, w, [4][]byte{quantize(wideFloats(rng, n)), quantize(wideFloats(rng, n)),
				quantize(wideFloats(rng, n)), quantize(wideFloats(rng, n))})
		}

		cols := 3 * int(typ.BlockSize())
		const rows, experts, k = 7, 3, 2
		rowBytes := mustRowBytes(t, typ, cols)
		data := make([]byte, experts*rows*rowBytes)
		tr.FromFloat(wideFloats(rng, experts*rows*cols), data)
		stack := must(NewMatrix(typ, []int64{int64(cols), rows, experts}, data))
		p := NewPool(2)
		defer p.Close()
		// want is VecDot of row r of expert e against activation vector x[v].
		want := func(x []float32, v, e, r int) float32 {
			return tr.VecDot(cols, data[(e*rows+r)*rowBytes:][:rowBytes], quantize(x[v*cols:(v+1)*cols]))
		}
		// 39 tokens: a full tile and one of seven (four, a pair, one alone).
		for _, tokens := range []int{1, 3, 39} {
			x := wideFloats(rng, tokens*cols)
			m := stack.Expert(1)
			got := make([]float32, tokens*rows)
			if err := p.MatMul(got, &m, x); err != nil {
				t.Fatal(err)
			}
			for tok := range tokens {
				for r := range rows {
					if w := want(x, tok, 1, r); math.Float32bits(got[tok*rows+r]) != math.Float32bits(w) {
						t.Errorf("%s MatMul %d tokens, token %d row %d: %g, VecDot %g", typ, tokens, tok, r, got[tok*rows+r], w)
					}
				}
			}
			ids := routeTokens(rng, tokens, k, experts)
			for _, perSlot := range []bool{false, true} {
				vectors := tokens
				if perSlot {
					vectors = tokens * k
				}
				x := wideFloats(rng, vectors*cols)
				got := make([]float32, tokens*k*rows)
				if err := p.MulMatID(got, stack, x, ids, k); err != nil {
					t.Fatal(err)
				}
				for i, e := range ids {
					if e < 0 {
						continue
					}
					v := i / k
					if perSlot {
						v = i
					}
					for r := range rows {
						if w := want(x, v, int(e), r); math.Float32bits(got[i*rows+r]) != math.Float32bits(w) {
							t.Errorf("%s MulMatID %d tokens per-slot %v, pair %d row %d: %g, VecDot %g", typ, tokens, perSlot, i, r, got[i*rows+r], w)
						}
					}
				}
			}
		}
	}
}

// BenchmarkDotTokens is a prefill tile's inner work: matRowTile weight rows of 2048 values
// (in L1) against 32 tokens, by the four-token kernel over the rows and row by row where
// the type has them, by the two-token kernel over the rows where it has one and row by
// row, and by VecDot token by token.
//
//	GOEXPERIMENT=simd GODEBUG=asyncpreemptoff=1 go test -run '^$' -bench DotTokens ./tensor
func BenchmarkDotTokens(b *testing.B) {
	const cols, tokens = 2048, 32
	rng := rand.New(rand.NewPCG(17, 18))
	for typ, dot2 := range active.dotTokens2 {
		tr := active.traits[typ]
		rowBytes, actBytes := mustRowBytes(b, typ, cols), mustRowBytes(b, tr.VecDotType, cols)
		w := make([]byte, matRowTile*rowBytes)
		tr.FromFloat(randomFloats(rng, matRowTile*cols), w)
		a := make([]byte, tokens*actBytes)
		for t := range tokens {
			if err := QuantizeActivations(tr.VecDotType, randomFloats(rng, cols), a[t*actBytes:(t+1)*actBytes]); err != nil {
				b.Fatal(err)
			}
		}
		out := make([]float32, tokens)
		if rows4 := active.dotTokens4Rows[typ]; rows4 != nil {
			outs := make([]float32, 4*matRowTile)
			o := func(k int) []float32 { return outs[k*matRowTile : (k+1)*matRowTile] }
			b.Run(fmt.Sprintf("type=%s/kernel=tokens4rows", typ), func(b *testing.B) {
				for b.Loop() {
					for t := 0; t < tokens; t += 4 {
						rows4(cols, w, rowBytes, a[t*actBytes:(t+1)*actBytes], a[(t+1)*actBytes:(t+2)*actBytes],
							a[(t+2)*actBytes:(t+3)*actBytes], a[(t+3)*actBytes:(t+4)*actBytes], o(0), o(1), o(2), o(3))
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*matRowTile*tokens), "ns/dot")
			})
		}
		if dot4 := active.dotTokens4[typ]; dot4 != nil {
			b.Run(fmt.Sprintf("type=%s/kernel=tokens4", typ), func(b *testing.B) {
				for b.Loop() {
					for r := range matRowTile {
						row := w[r*rowBytes : (r+1)*rowBytes]
						for t := 0; t < tokens; t += 4 {
							o := dot4(cols, row, a[t*actBytes:(t+1)*actBytes], a[(t+1)*actBytes:(t+2)*actBytes],
								a[(t+2)*actBytes:(t+3)*actBytes], a[(t+3)*actBytes:(t+4)*actBytes])
							copy(out[t:t+4], o[:])
						}
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*matRowTile*tokens), "ns/dot")
			})
		}
		if rows2 := active.dotTokens2Rows[typ]; rows2 != nil {
			o0, o1 := make([]float32, matRowTile), make([]float32, matRowTile)
			b.Run(fmt.Sprintf("type=%s/kernel=tokens2rows", typ), func(b *testing.B) {
				for b.Loop() {
					for t := 0; t < tokens; t += 2 {
						rows2(cols, w, a[t*actBytes:(t+1)*actBytes], a[(t+1)*actBytes:(t+2)*actBytes], o0, o1)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*matRowTile*tokens), "ns/dot")
			})
		}
		b.Run(fmt.Sprintf("type=%s/kernel=tokens2", typ), func(b *testing.B) {
			for b.Loop() {
				for r := range matRowTile {
					row := w[r*rowBytes : (r+1)*rowBytes]
					for t := 0; t < tokens; t += 2 {
						o := dot2(cols, row, a[t*actBytes:(t+1)*actBytes], a[(t+1)*actBytes:(t+2)*actBytes])
						out[t], out[t+1] = o[0], o[1]
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*matRowTile*tokens), "ns/dot")
		})
		b.Run(fmt.Sprintf("type=%s/kernel=VecDot", typ), func(b *testing.B) {
			for b.Loop() {
				for r := range matRowTile {
					row := w[r*rowBytes : (r+1)*rowBytes]
					for t := range tokens {
						out[t] = tr.VecDot(cols, row, a[t*actBytes:(t+1)*actBytes])
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*matRowTile*tokens), "ns/dot")
		})
	}
}
