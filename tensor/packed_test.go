package tensor

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// blockwiseDot is ggml's repacked kernels' arithmetic (ggml_gemm_q4_0_8x8_q8_0 and its
// IQ4_NL and MXFP4 siblings), written plainly: per 32-value block the exact integer sum of
// the weights' values times the activation bytes, then acc = float(sum)·(d_w·d_y) + acc
// with one rounding.
func blockwiseDot(t Type, n int, w, a []byte) float32 {
	var acc float32
	for b := range n / qk32 {
		vals, dw := blockValues(t, w)
		y := a[b*34:]
		dy := F16ToF32(binary.LittleEndian.Uint16(y))
		sum := int32(0)
		for i, v := range vals {
			sum += v * int32(int8(y[2+i]))
		}
		acc = fma32(float32(sum), dw*dy, acc)
		w = w[blockBytes(t):]
	}
	return acc
}

func blockBytes(t Type) int {
	if t == MXFP4 {
		return 17
	}
	return 18
}

// blockValues decodes one block of t into its 32 signed integer values (value i from the
// low nibble of byte i, value 16+i from its high nibble) and its scale.
func blockValues(t Type, blk []byte) (vals [32]int32, d float32) {
	level := func(q byte) int32 { return int32(q) - 8 }
	if t == MXFP4 {
		level = func(q byte) int32 { return int32(fp4Values[q]) }
		d = e8m0Half(blk[0])
		blk = blk[1:17]
	} else {
		if t == IQ4_NL {
			level = func(q byte) int32 { return int32(iq4Values[q]) }
		}
		d = F16ToF32(binary.LittleEndian.Uint16(blk))
		blk = blk[2:18]
	}
	for i, q := range blk {
		vals[i], vals[16+i] = level(q&15), level(q>>4)
	}
	return vals, d
}

func TestPrepPackedActs(t *testing.T) {
	// Two Q8_0 blocks, expanded in place: values copied, -offset·Σy, scale as float32.
	const nb = 2
	row := make([]byte, nb*packedActBytes)
	for b := range nb {
		blk := row[b*34:]
		binary.LittleEndian.PutUint16(blk, F32ToF16(float32(b+1)/4))
		for i := range 32 {
			blk[2+i] = byte(int8(i - 10*b))
		}
	}
	prepPackedActs(row, nb, 8)
	for b, wantSum := range []int32{496, 496 - 320} { // Σ(i - 10b) for i < 32
		blk := row[b*packedActBytes:]
		for i := range 32 {
			if got := int8(blk[i]); got != int8(i-10*b) {
				t.Fatalf("block %d value %d = %d, want %d", b, i, got, i-10*b)
			}
		}
		if got := int32(binary.LittleEndian.Uint32(blk[32:])); got != -8*wantSum {
			t.Errorf("block %d correction = %d, want %d", b, got, -8*wantSum)
		}
		if got := math.Float32frombits(binary.LittleEndian.Uint32(blk[36:])); got != float32(b+1)/4 {
			t.Errorf("block %d scale = %v, want %v", b, got, float32(b+1)/4)
		}
	}
}

// randomRows quantizes rows×n normal values (times scale) to t.
func randomRows(t *testing.T, typ Type, rows, n int, scale float64, rng *rand.Rand) []byte {
	t.Helper()
	src := make([]float32, rows*n)
	for i := range src {
		src[i] = float32(rng.NormFloat64() * scale)
	}
	rb, err := typ.RowBytes(int64(n))
	if err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, rows*int(rb))
	if err := Quantize(typ, src, dst); err != nil {
		t.Fatal(err)
	}
	return dst
}

// TestPackedMatchesBlockwise checks the packed kernels bit for bit against blockwiseDot,
// over row counts that leave partial groups of 16, token counts that take every kernel
// width, and the three formats.
func TestPackedMatchesBlockwise(t *testing.T) {
	if len(active.packedFormats) == 0 {
		t.Skip("no packed kernels on this CPU or build")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for typ, f := range active.packedFormats {
		if !f.prepared {
			continue // Q4_K's: TestRepackedQ4K
		}
		for _, shape := range [][2]int{{8, 32}, {16, 96}, {24, 256}, {40, 64}, {48, 512}} {
			rows, n := shape[0], shape[1]
			t.Run(fmt.Sprintf("%s/%dx%d", typ, rows, n), func(t *testing.T) {
				data := randomRows(t, typ, rows, n, 1, rng)
				if typ == MXFP4 { // the scale bytes' edges: subnormal halves, the largest
					for r, e := range []byte{0, 1, 2, 3, 254, 255} {
						data[r*(n/qk32*17)] = e
					}
				}
				m, err := NewMatrix(typ, []int64{int64(n), int64(rows)}, data)
				if err != nil {
					t.Fatal(err)
				}
				if m.packed == nil {
					t.Fatal("no packed kernels for the matrix")
				}
				const count = 23 // 8+8+4+2+1
				q8 := randomRows(t, Q8_0, count, n, 3, rng)
				q8Bytes := n / qk32 * 34
				acts := make([][]byte, count)
				out := make([][]float32, count)
				for i := range acts {
					acts[i] = make([]byte, n/qk32*packedActBytes)
					copy(acts[i], q8[i*q8Bytes:(i+1)*q8Bytes])
					prepPackedActs(acts[i], n/qk32, m.packed.offset)
					out[i] = make([]float32, rows+1) // one past the rows: must stay 0
				}
				var s packedScratch
				m.mulPacked(&s, 1, data, rows, count, false, func(i int) []byte { return acts[i] }, func(i int) []float32 { return out[i][:rows] })
				// One token at a time takes the one-token kernel for whole groups of 16.
				single := make([][]float32, count)
				for i := range single {
					single[i] = make([]float32, rows)
					m.mulPacked(&s, 2, data, rows, 1, false, func(int) []byte { return acts[i] }, func(int) []float32 { return single[i] })
				}
				for i := range count {
					for r := range rows {
						want := blockwiseDot(typ, n, data[r*m.rowBytes:], q8[i*q8Bytes:])
						if got := out[i][r]; math.Float32bits(got) != math.Float32bits(want) {
							t.Fatalf("token %d row %d: %v, want %v", i, r, got, want)
						}
						if got := single[i][r]; math.Float32bits(got) != math.Float32bits(want) {
							t.Fatalf("token %d alone, row %d: %v, want %v", i, r, got, want)
						}
					}
					if out[i][rows] != 0 {
						t.Fatalf("token %d: wrote past its rows", i)
					}
				}
			})
		}
	}
}

// TestPackedMatMuls checks which arithmetic MatMul and MulMatID give a packed format: the
// packed kernels' (blockwiseDot) for one token and several, the rows kernels' (VecDot) for
// a matrix whose rows are not a multiple of 8 (llama.cpp repacks only the others) and
// with packing turned off.
func TestPackedMatMuls(t *testing.T) {
	if active.packedFormats[Q4_0] == nil {
		t.Skip("no packed kernels on this CPU or build")
	}
	const n, experts = 128, 3
	rng := rand.New(rand.NewPCG(3, 4))
	x := make([]float32, 5*n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	q8 := make([]byte, len(x)/qk32*34)
	if err := Quantize(Q8_0, x, q8); err != nil {
		t.Fatal(err)
	}
	p := NewPool(2)
	defer p.Close()
	ids := []int32{2, 0, 1, 2, 0, 1, 2, 0, 2, 1}
	vecDot := func(_ Type, n int, w, a []byte) float32 { return active.traits[Q4_0].VecDot(n, w, a) }
	for _, tc := range []struct {
		rows, tokens int
		repack       bool
		dot          func(typ Type, n int, w, a []byte) float32
	}{
		{32, 5, true, blockwiseDot},
		{32, 1, true, blockwiseDot},
		{48, 1, true, blockwiseDot},
		{20, 5, true, vecDot},
		{32, 5, false, vecDot},
		{32, 1, false, vecDot},
	} {
		p.SetRepack(tc.repack)
		rows, tokens := tc.rows, tc.tokens
		data := randomRows(t, Q4_0, experts*rows, n, 1, rng)
		m, err := NewMatrix(Q4_0, []int64{n, int64(rows), experts}, data)
		if err != nil {
			t.Fatal(err)
		}
		rb, ab := m.rowBytes, n/qk32*34
		expert := m.Expert(1)
		dst := make([]float32, tokens*rows)
		if err := p.MatMul(dst, &expert, x[:tokens*n]); err != nil {
			t.Fatal(err)
		}
		for tok := range tokens {
			for r := range rows {
				want := tc.dot(Q4_0, n, data[(rows+r)*rb:], q8[tok*ab:])
				if got := dst[tok*rows+r]; got != want {
					t.Fatalf("%+v: MatMul token %d row %d: %v, want %v", tc, tok, r, got, want)
				}
			}
		}
		const k = 2
		idDst := make([]float32, tokens*k*rows)
		if err := p.MulMatID(idDst, m, x[:tokens*n], ids[:tokens*k], k); err != nil {
			t.Fatal(err)
		}
		for pair, e := range ids[:tokens*k] {
			for r := range rows {
				want := tc.dot(Q4_0, n, data[(int(e)*rows+r)*rb:], q8[pair/k*ab:])
				if got := idDst[pair*rows+r]; got != want {
					t.Fatalf("%+v: MulMatID pair %d row %d: %v, want %v", tc, pair, r, got, want)
				}
			}
		}
	}
}
