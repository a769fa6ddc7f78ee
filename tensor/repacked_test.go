package tensor

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// repackedQ4KDot is llama.cpp's repacked Q4_K arithmetic written plainly: per chunk of
// chunk values (256, a super-block, for ggml_gemv_q4_K_8x8_q8_K; 64 for its gemm) the
// exact integer sums Σ scale·Σ w·y and Σ min·Σ y of its 32-value sub-blocks, then
// acc = float(sum)·(d·d_y) + acc and accMin = float(mins)·(dmin·d_y) + accMin with one
// rounding each, and acc − accMin at the end. The mins' sums come from the activation
// bytes, not from the block's bsums, which the kernels read.
func repackedQ4KDot(n int, w, a []byte, chunk int) float32 {
	var acc, accMin float32
	for b := range n / qkK {
		blk, y := w[b*144:], a[b*292:]
		d := F16ToF32(binary.LittleEndian.Uint16(blk))
		dmin := F16ToF32(binary.LittleEndian.Uint16(blk[2:]))
		dy := math.Float32frombits(binary.LittleEndian.Uint32(y))
		var sum, mins int32
		for j := range 8 {
			sc, m := scaleMinK4(j, blk[4:16])
			q := blk[16+32*(j/2):]
			var dot, ysum int32
			for l := range 32 {
				v := q[l] & 15
				if j%2 == 1 {
					v = q[l] >> 4
				}
				yv := int32(int8(y[4+32*j+l]))
				dot += int32(v) * yv
				ysum += yv
			}
			sum += int32(sc) * dot
			mins += int32(m) * ysum
			if 32*(j+1)%chunk == 0 {
				acc = fma32(float32(sum), d*dy, acc)
				accMin = fma32(float32(mins), dmin*dy, accMin)
				sum, mins = 0, 0
			}
		}
	}
	return acc - accMin
}

// repackedQ2KDot is llama.cpp's repacked Q2_K arithmetic written plainly, as
// repackedQ4KDot: per chunk (256 values for ggml_gemv_q2_K_8x8_q8_K, 128 for its gemm) the
// exact integer sums Σ scale·Σ w·y and Σ min·Σ y of its 16-value sub-blocks, one FMA
// each, acc − accMin at the end.
func repackedQ2KDot(n int, w, a []byte, chunk int) float32 {
	var acc, accMin float32
	for b := range n / qkK {
		blk, y := w[b*84:], a[b*292:]
		d := F16ToF32(binary.LittleEndian.Uint16(blk[80:]))
		dmin := F16ToF32(binary.LittleEndian.Uint16(blk[82:]))
		dy := math.Float32frombits(binary.LittleEndian.Uint32(y))
		var sum, mins int32
		for j := range 16 {
			sc, m := int32(blk[j]&15), int32(blk[j]>>4)
			var dot, ysum int32
			for l := range 16 {
				i := 16*j + l
				v := blk[16+32*(i/128)+i%32] >> (2 * (i % 128 / 32)) & 3
				yv := int32(int8(y[4+i]))
				dot += int32(v) * yv
				ysum += yv
			}
			sum += sc * dot
			mins += m * ysum
			if 16*(j+1)%chunk == 0 {
				acc = fma32(float32(sum), d*dy, acc)
				accMin = fma32(float32(mins), dmin*dy, accMin)
				sum, mins = 0, 0
			}
		}
	}
	return acc - accMin
}

// TestRepackedKQuants checks which arithmetic MatMul and MulMatID give Q4_K and Q2_K, bit
// for bit: with repacking on and a multiple of 8 rows, MatMul's tokens in fours from the
// first take gemm's (a float step per 64 values for Q4_K, 128 for Q2_K) and the last T mod
// 4 gemv's (per super-block), also across token tiles (37 tokens), and every MulMatID
// token gemv's; with 20 rows, or repacking off, VecDot's (ggml_vec_dot_q4_K_q8_K, …).
func TestRepackedKQuants(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	p := NewPool(2)
	defer p.Close()
	for _, kq := range []struct {
		typ       Type
		reference func(n int, w, a []byte, chunk int) float32
		gemm      int // values per float step of gemm
	}{{Q4_K, repackedQ4KDot, 64}, {Q2_K, repackedQ2KDot, 128}} {
		typ := kq.typ
		if active.repackedKernels[typ] == nil {
			t.Logf("no repacked %s kernels on this CPU or build", typ)
			continue
		}
		for _, tc := range []struct {
			rows, n int
			repack  bool
		}{
			{8, 256, true}, {24, 768, true}, {40, 512, true}, {20, 512, true}, {24, 768, false},
		} {
			for _, tokens := range []int{1, 2, 3, 4, 5, 7, 9, 37} {
				t.Run(fmt.Sprintf("%s/%dx%d/repack=%v/%d", typ, tc.rows, tc.n, tc.repack, tokens), func(t *testing.T) {
					testRepackedTokens(t, p, rng, typ, kq.reference, kq.gemm, tc.rows, tc.n, tc.repack, tokens)
				})
			}
		}
	}
}

// testRepackedTokens is one case of TestRepackedKQuants: MatMul and MulMatID of a rows×n
// stack of three experts by tokens vectors.
func testRepackedTokens(t *testing.T, p *Pool, rng *rand.Rand, typ Type, reference func(n int, w, a []byte, chunk int) float32, gemmChunk, rows, n int, repack bool, tokens int) {
	const experts, k = 3, 2
	p.SetRepack(repack)
	data := randomRows(t, typ, experts*rows, n, 1, rng)
	m, err := NewMatrix(typ, []int64{int64(n), int64(rows), experts}, data)
	if err != nil {
		t.Fatal(err)
	}
	x := make([]float32, tokens*n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	ab := n / qkK * 292
	q8 := make([]byte, tokens*ab)
	if err := QuantizeActivations(Q8_K, x, q8); err != nil {
		t.Fatal(err)
	}
	repacked := repack && rows%8 == 0
	dot := func(w, a []byte, gemm bool) float32 {
		switch {
		case !repacked:
			return active.traits[typ].VecDot(n, w, a)
		case gemm:
			return reference(n, w, a, gemmChunk)
		}
		return reference(n, w, a, qkK)
	}
	rb := m.rowBytes
	expert := m.Expert(1)
	dst := make([]float32, tokens*rows)
	if err := p.MatMul(dst, &expert, x); err != nil {
		t.Fatal(err)
	}
	for tok := range tokens {
		gemm := tok < tokens-tokens%4
		for r := range rows {
			want := dot(data[(rows+r)*rb:], q8[tok*ab:], gemm)
			if got := dst[tok*rows+r]; math.Float32bits(got) != math.Float32bits(want) {
				t.Fatalf("MatMul token %d row %d (gemm %v): %v, want %v", tok, r, gemm, got, want)
			}
		}
	}
	ids := make([]int32, tokens*k)
	for i := range ids {
		ids[i] = int32(rng.IntN(experts))
	}
	idDst := make([]float32, tokens*k*rows)
	if err := p.MulMatID(idDst, m, x, ids, k); err != nil {
		t.Fatal(err)
	}
	for pair, e := range ids {
		for r := range rows {
			want := dot(data[(int(e)*rows+r)*rb:], q8[pair/k*ab:], false)
			if got := idDst[pair*rows+r]; math.Float32bits(got) != math.Float32bits(want) {
				t.Fatalf("MulMatID pair %d row %d: %v, want %v", pair, r, got, want)
			}
		}
	}
}

// q4KExtremeOperands makes rows Q4_K rows of n values and count Q8_K activation vectors
// where the repacked arithmetic's sums are largest: raw blocks of random bytes (every scale
// and min pattern), every third block all 15s with every scale and min 63, and activations
// of -128 or -127 (vector 0, 3, …), 127 or 126 (1, 4, …) or anything (2, 5, …).
func q4KExtremeOperands(rng *rand.Rand, rows, n, count int) (data []byte, acts [][]byte) {
	rb, ab := n/qkK*144, n/qkK*292
	data = make([]byte, rows*rb)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	for b := range rows * n / qkK {
		blk := data[b*144 : (b+1)*144]
		binary.LittleEndian.PutUint16(blk, F32ToF16(float32(rng.NormFloat64())))
		binary.LittleEndian.PutUint16(blk[2:], F32ToF16(float32(rng.NormFloat64())))
		if b%3 == 0 { // the largest sums
			for i := 4; i < 144; i++ {
				blk[i] = 0xFF
			}
		}
	}
	acts = make([][]byte, count)
	for i := range acts {
		a := make([]byte, ab)
		for b := range n / qkK {
			y := a[b*292:]
			binary.LittleEndian.PutUint32(y, math.Float32bits(float32(rng.ExpFloat64())))
			for l := range qkK {
				v := int8(rng.IntN(256) - 128)
				switch i % 3 {
				case 0: // odd sums, which a float partial sum past 2^24 would round
					v = int8(-128 + rng.IntN(2))
				case 1:
					v = int8(127 - rng.IntN(2))
				}
				y[4+l] = byte(v)
			}
			for s := range 16 {
				sum := int16(0)
				for l := range 16 {
					sum += int16(int8(y[4+16*s+l]))
				}
				binary.LittleEndian.PutUint16(y[260+2*s:], uint16(sum))
			}
		}
		acts[i] = a
	}
	return data, acts
}

// TestPackedQ4KExtremes checks the packed Q4_K kernels (simd_packed_amd64.s) where their
// float sums are closest to losing exactness: raw blocks of random bytes (every scale and
// min pattern), and blocks whose values are all 15 with every scale and min 63 against
// activations of -128 or -127 and 127 or 126, the largest integer sums there are, and
// odd; 9 tokens take the four-token kernels and the one-token one, in gemm's arithmetic
// and gemv's.
func TestPackedQ4KExtremes(t *testing.T) {
	f := active.packedFormats[Q4_K]
	if f == nil {
		t.Skip("no packed Q4_K kernels on this CPU or build")
	}
	const rows, n, count = 24, 512, 9
	const rb = n / qkK * 144
	data, acts := q4KExtremeOperands(rand.New(rand.NewPCG(7, 8)), rows, n, count)
	m, err := NewMatrix(Q4_K, []int64{n, rows}, data)
	if err != nil {
		t.Fatal(err)
	}
	for _, matmul := range []bool{true, false} {
		out := make([][]float32, count)
		for i := range out {
			out[i] = make([]float32, rows)
		}
		var s packedScratch
		m.mulPacked(&s, 1, data, rows, count, matmul, func(i int) []byte { return acts[i] }, func(i int) []float32 { return out[i] })
		for i := range count {
			chunk := qkK
			if matmul && i < count-count%4 {
				chunk = 64
			}
			for r := range rows {
				want := repackedQ4KDot(n, data[r*rb:], acts[i], chunk)
				if got := out[i][r]; math.Float32bits(got) != math.Float32bits(want) {
					t.Fatalf("matmul %v, token %d, row %d: %v, want %v", matmul, i, r, got, want)
				}
			}
		}
	}
}

// TestRepackedQ4KRowsExtremes checks Q4_K's one-token kernel in gemv's arithmetic (the
// four-row kernel where the CPU has it, with the one-row kernel for the last rows mod 4) on
// q4KExtremeOperands, bit for bit against repackedQ4KDot, for 1 to 13 rows and 1 to 9
// super-blocks.
func TestRepackedQ4KRowsExtremes(t *testing.T) {
	rows1, rows2 := active.repackedKernels[Q4_K], active.repackedTokens2[Q4_K]
	if rows1 == nil {
		t.Skip("no repacked Q4_K kernels on this CPU or build")
	}
	rng := rand.New(rand.NewPCG(9, 10))
	for _, n := range []int{256, 512, 2048, 2304} {
		for rows := 1; rows <= 13; rows++ {
			data, acts := q4KExtremeOperands(rng, rows, n, 3)
			rb := n / qkK * 144
			for i, a := range acts {
				out, out2 := make([]float32, rows), make([]float32, rows)
				rows1(n, data, a, out)
				other := acts[(i+1)%len(acts)]
				if rows2 != nil {
					rows2(n, data, a, other, out2, out2)
					rows2(n, data, other, a, out2, out)
				}
				for r := range rows {
					want := repackedQ4KDot(n, data[r*rb:], a, qkK)
					if got := out[r]; math.Float32bits(got) != math.Float32bits(want) {
						t.Fatalf("n %d, %d rows, vector %d, row %d: %v, want %v", n, rows, i, r, got, want)
					}
					if got, want := out2[r], repackedQ4KDot(n, data[r*rb:], other, qkK); rows2 != nil && math.Float32bits(got) != math.Float32bits(want) {
						t.Fatalf("two tokens: n %d, %d rows, vector %d, row %d: %v, want %v", n, rows, (i+1)%len(acts), r, got, want)
					}
				}
			}
		}
	}
}
