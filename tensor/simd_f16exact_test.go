//go:build goexperiment.simd && amd64

package tensor

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"simd/archsimd"
	"sync/atomic"
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

// TestDotF16Rows4 holds the four-row F16 kernel (F16 weight matmuls without AVX-512) to
// the sequential kernel row by row, on several lengths, with one row of widely spread
// magnitudes in some of them.
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

// TestMulF16Wide holds the wide F16 tile kernel (dotF16WideTile: rows widened to float64
// once for up to eight tokens, loose bounds from magnitude summaries) to the sequential
// kernel for every row and token: tiles of 1 to 13 tokens (groups of eight, four and
// single ones), ordinary rows, rows and tokens of zeros, rows spread too widely for the
// loose bound (dotF16AVX2 then decides), subnormals, infinities and NaNs; and checks that
// the loose bound does prove most ordinary pairs, so the comparison is not vacuous.
func TestMulF16Wide(t *testing.T) {
	if !useAVX512 {
		t.Skip("CPU without AVX-512")
	}
	rng := rand.New(rand.NewPCG(5, 5))
	row := func(n, kind int) []byte {
		b := make([]byte, 2*n)
		for i := range n {
			x := rng.NormFloat64() * math.Exp2(float64(rng.IntN(5)-2))
			switch kind {
			case 1:
				x = 0
			case 2:
				x *= math.Exp2(float64(rng.IntN(29) - 14)) // products too far apart
			case 3:
				if i%5 == 0 {
					x *= 1e-6 // subnormal in binary16
				}
			}
			binary.LittleEndian.PutUint16(b[2*i:], F32ToF16(float32(x)))
		}
		switch kind {
		case 4:
			binary.LittleEndian.PutUint16(b[2*(n-1):], 0x7C00) // +Inf
		case 5:
			binary.LittleEndian.PutUint16(b[0:], 0x7E01) // NaN
		}
		return b
	}
	proved, ordinary := 0, 0
	for trial := range 60 {
		n := []int{32, 64, 96, 256, 16, 48, 80}[trial%7]
		rows, count := 1+trial%13, 1+trial%13
		// Rows may lie apart, as an attention cache's rows of one head do; the gaps hold
		// NaNs, which must not leak in.
		rowBytes := 2*n + 64*(trial%3)
		var data []byte
		kinds := make([]int, rows)
		for r := range rows {
			if trial%2 == 1 {
				kinds[r] = rng.IntN(6)
			}
			data = append(data, row(n, kinds[r])...)
			if r < rows-1 {
				for range (rowBytes - 2*n) / 2 {
					data = append(data, 0x01, 0x7E)
				}
			}
		}
		acts := make([][]byte, count)
		actKinds := make([]int, count)
		var all []byte
		for i := range acts {
			if trial%3 == 2 {
				actKinds[i] = rng.IntN(6)
			}
			acts[i] = row(n, actKinds[i])
			all = append(all, acts[i]...)
		}
		stride := rows + 3 // the outputs of one vector need not be next to the next's
		dst := make([]float32, count*stride)
		var s wideScratch
		// Odd trials keep the rows' summaries as a matrix does and run the tile twice, the
		// second time (one- and eight-vector groups) from the kept summaries.
		var kept []atomic.Uint32
		if trial%2 == 1 {
			kept = make([]atomic.Uint32, rows)
		}
		for range 1 + trial%2 {
			if !dotF16WideTile(n, data, rowBytes, rows, all, dst, stride, &s, kept) {
				t.Fatalf("n=%d: the wide kernel declined", n)
			}
		}
		if kept != nil {
			// Every row's summary is kept, and unpacks to the reference summary.
			unpacked := make([][2]uint16, rows)
			if !loadSummaries(unpacked, kept) {
				t.Fatalf("trial %d: the tile kept no summaries", trial)
			}
			for r := range rows {
				if want := f16Summary(data[r*rowBytes:][:2*n]); unpacked[r] != want {
					t.Fatalf("trial %d row %d: kept summary %#04x, want %#04x", trial, r, unpacked[r], want)
				}
			}
		}
		for i := range acts {
			for r, got := range dst[i*stride : i*stride+rows] {
				wrow := data[r*rowBytes:][:2*n]
				want := dotHalf(n, wrow, acts[i], F16ToF32)
				if math.Float32bits(got) != math.Float32bits(want) && !(got != got && want != want) {
					t.Fatalf("trial %d n=%d row %d (kind %d) token %d (kind %d): %v (%#x), sequential kernel %v (%#x)",
						trial, n, r, kinds[r], i, actKinds[i], got, math.Float32bits(got), want, math.Float32bits(want))
				}
				if kinds[r] == 0 && actKinds[i] == 0 {
					ordinary++
					var ws, as [2]uint16
					widenF16Summary(&make([]float64, n)[0], &wrow[0], n, &ws)
					widenF16Summary(&make([]float64, n)[0], &acts[i][0], n, &as)
					if wideBoundAccepts(n, wrow, acts[i], ws, as) {
						proved++
					}
				}
			}
		}
	}
	if proved < ordinary*95/100 {
		t.Errorf("the loose bound proved %d of %d ordinary pairs", proved, ordinary)
	}
}

// TestF16WideBound tests the loose bound where it matters, in float64 (the float32 result
// hides almost every wrong float64 sum): rows and vectors of full-precision binary16
// values spread over 8 to 17 binades, so that many pairs sit near the bound's edge; for
// every pair the bound accepts, the wide kernel's float64 sum must be the sequential one's
// bit for bit. Both sides of the edge must be seen (a bound one bit too lax fails here).
func TestF16WideBound(t *testing.T) {
	if !useAVX512 {
		t.Skip("CPU without AVX-512")
	}
	rng := rand.New(rand.NewPCG(6, 6))
	// A vector holding zeros or NaNs now and then checks their summaries.
	special := []uint16{0, 0x8000, 0x7E00, 0x7C00, 0x0001, 0x03FF, 0x0400, 0x07FF}
	// Half the pairs are adversarial: every value positive, in the top binade with a large
	// significand but for an eighth of the positions, the same in both vectors, which hold
	// small values with odd last bits; so the sum comes close to n times the largest
	// product while every small product has to be added to large partial sums.
	vector := func(n int, small []bool) []byte {
		b := make([]byte, 2*n)
		low, span := rng.IntN(12)+1, rng.IntN(10)+8
		for i := range n {
			field, sign, mant := min(low+rng.IntN(span), 30), uint16(rng.IntN(2)), uint16(rng.IntN(1024)|1)
			if small != nil {
				field, sign, mant = min(low+span, 30), 0, uint16(1023-rng.IntN(64))
				if small[i] {
					field, mant = low, uint16(rng.IntN(1024)|1)
				}
			}
			binary.LittleEndian.PutUint16(b[2*i:], sign<<15|uint16(field)<<10|mant)
		}
		if rng.IntN(20) == 0 {
			binary.LittleEndian.PutUint16(b[2*rng.IntN(n):], special[rng.IntN(len(special))])
		}
		return b
	}
	accepted, rejected := 0, 0
	for range 3000 {
		n := 16 * (1 + rng.IntN(16))
		var small []bool
		if rng.IntN(2) == 0 {
			small = make([]bool, n)
			for i := range small {
				small[i] = rng.IntN(8) == 0
			}
		}
		w, a := vector(n, small), vector(n, small)
		wide, out := make([]float64, n), make([]float64, 1)
		var ws, as [2]uint16
		widenF16Summary(&wide[0], &a[0], n, &as)
		dotF16WideRows1(&w[0], 2*n, 1, n, &wide[0], &out[0], &ws)
		for i, v := range wide {
			if h := binary.LittleEndian.Uint16(a[2*i:]); v != float64(F16ToF32(h)) && !(v != v && h&0x7FFF > 0x7C00) {
				t.Fatalf("%#04x widened to %v", h, v)
			}
		}
		if want := f16Summary(w); ws != want {
			t.Fatalf("row summary %#04x, want %#04x", ws, want)
		}
		if want := f16Summary(a); as != want {
			t.Fatalf("vector summary %#04x, want %#04x", as, want)
		}
		if !wideBoundAccepts(n, w, a, ws, as) {
			rejected++
			continue
		}
		accepted++
		var seq float64
		for i := range n {
			seq += float64(F16ToF32(binary.LittleEndian.Uint16(w[2*i:])) * F16ToF32(binary.LittleEndian.Uint16(a[2*i:])))
		}
		if math.Float64bits(out[0]) != math.Float64bits(seq) {
			t.Fatalf("n=%d: the bound accepted a wide sum %v that is not the sequential %v", n, out[0], seq)
		}
	}
	if accepted < 300 || rejected < 300 {
		t.Errorf("accepted %d and rejected %d pairs: the inputs do not straddle the bound", accepted, rejected)
	}
}

// f16Summary is what the wide kernels summarize a vector of binary16 values to: the largest
// magnitude and the smallest nonzero one less one (0xFFFF when all are zeros).
func f16Summary(b []byte) [2]uint16 {
	var sum [2]uint16
	sum[1] = 0xFFFF
	for i := 0; i < len(b); i += 2 {
		m := binary.LittleEndian.Uint16(b[i:]) & 0x7FFF
		sum[0] = max(sum[0], m)
		if m != 0 {
			sum[1] = min(sum[1], m-1)
		}
	}
	return sum
}

// BenchmarkF16WideRows compares the wide F16 kernels on a prefill tile: 64 rows of 256
// values against eight activation vectors, as two four-vector passes or one of eight, and
// that one with the rows' summaries already known.
//
//	GOEXPERIMENT=simd GODEBUG=asyncpreemptoff=1 go test -run '^$' -bench F16WideRows ./tensor
func BenchmarkF16WideRows(b *testing.B) {
	const n, rows = 256, 64
	rng := rand.New(rand.NewPCG(1, 2))
	w := make([]byte, 2*n*rows)
	for i := range n * rows {
		binary.LittleEndian.PutUint16(w[2*i:], F32ToF16(float32(rng.NormFloat64())))
	}
	a := make([]float64, 8*n)
	for i := range a {
		a[i] = float64(F16ToF32(F32ToF16(float32(rng.NormFloat64()))))
	}
	out := make([]float64, 8*rows)
	summaries := make([][2]uint16, rows)
	b.Run("rows4x2", func(b *testing.B) {
		for b.Loop() {
			dotF16WideRows4(&w[0], 2*n, rows, n, &a[0], &out[0], &summaries[0])
			dotF16WideRows4(&w[0], 2*n, rows, n, &a[4*n], &out[0], &summaries[0])
		}
	})
	b.Run("rows8", func(b *testing.B) {
		for b.Loop() {
			dotF16WideRows8(&w[0], 2*n, rows, n, &a[0], &out[0], &summaries[0])
		}
	})
	b.Run("sums8", func(b *testing.B) {
		for b.Loop() {
			dotF16WideSums8(&w[0], 2*n, rows, n, &a[0], &out[0], &summaries[0])
		}
	})
}

// wideBoundAccepts is dotF16WideTile's decision for one pair of vectors w and a with
// summaries ws and as: the max bound, else the Cauchy-Schwarz second chance.
func wideBoundAccepts(n int, w, a []byte, ws, as [2]uint16) bool {
	wb, ab := f16BoundOf(ws), f16BoundOf(as)
	return wb.exact(ab, f16BoundLimit(n)) || f16NormsExact(f16SumSquares(&w[0], n), f16SumSquares(&a[0], n), wb.g+ab.g)
}
