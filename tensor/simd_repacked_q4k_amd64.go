//go:build goexperiment.simd && amd64

package tensor

import (
	"simd/archsimd"
	"sync"
	"unsafe"
)

// Q4_K in llama.cpp's repacked arithmetic (repacked.go) on AVX2: what
// ggml_gemv_q4_K_8x8_q8_K and ggml_gemm_q4_K_8x8_q8_K compute, from the weights where they
// lie (not repacked). Per row, token and chunk (a super-block for gemv, 64 values for gemm)
// the scaled sub-block sums add up to one exact int32 I and the mins times the activations'
// sums to another, M; the float steps acc = float(I)·(d·d_y) + acc and
// accMin = float(M)·(dmin·d_y) + accMin are one rounding each. As the integers are exact,
// the kernels compute them in int32 lanes (a row in each 128-bit half for one token, a
// token in each half for four) and add the lanes up in any order, with M from the
// activations' bsums; only the float steps must be the reference's, and are: d·d_y
// rounded, then one FMA, as in ggml.

// q4KRepackedSpan is how many super-blocks of eight rows dotQ4_KRepackedRowsAVX2 takes
// through its integer passes before the float pass.
const q4KRepackedSpan = 16

// q4KRepackedBlock is one super-block of eight rows between dotQ4_KRepackedRowsAVX2's
// passes. Rows go in pairs, the first in the lower 128-bit half: sums[k] holds rows 2k and
// 2k+1's four int32 lanes of scaled sums, which add up to I, and scales[k] their scales and
// mins as bytes [sc0..7, m0..7]. d and dmin are the rows' as float32 bits (copied from
// f16Table with integer moves: a float32 copy in Go is a legacy-SSE MOVSS, see
// simd_amd64.go), in the order the float pass's VPHADDD tree leaves the rows:
// 0, 2, 4, 6, 1, 3, 5, 7.
type q4KRepackedBlock struct {
	sums    [4][8]int32
	scales  [4][32]int8
	d, dmin [8]uint32
}

// q4KRepackedScratch is the scratch of dotQ4_KRepackedRowsAVX2 and
// dotQ4_KRepackedRows2AVX2, kept between calls in a pool (zeroed on the stack, its 10 KiB
// would cost a per cent of a decode tile): each token's buffer of the span, and each
// super-block of its activations with the 128-bit halves of its sub-blocks swapped.
type q4KRepackedScratch struct {
	blocks  [2][q4KRepackedSpan]q4KRepackedBlock
	swapped [2][][8][32]int8
}

var q4KRepackedScratches = sync.Pool{New: func() any { return new(q4KRepackedScratch) }}

var (
	// q4KMinWords makes VPSHUFB widen the mins (bytes 8-15 of each 128-bit half) to words.
	q4KMinWords = [32]int8{8, -1, 9, -1, 10, -1, 11, -1, 12, -1, 13, -1, 14, -1, 15, -1,
		8, -1, 9, -1, 10, -1, 11, -1, 12, -1, 13, -1, 14, -1, 15, -1}
	// q4KBsumPairs makes VPERMD put the sub-block sums, words 0-3 and 8-11 after VPHADDW
	// of the bsums, in words 0-7 of both halves.
	q4KBsumPairs = [8]uint32{0, 1, 4, 5, 0, 1, 4, 5}
	// q4KRowOrder makes VPERMD put rows 0, 2, 4, 6, 1, 3, 5, 7 back in order.
	q4KRowOrder = [8]uint32{0, 4, 1, 5, 2, 6, 3, 7}
)

// dotQ4_KRepackedRowsAVX2 is ggml_gemv_q4_K_8x8_q8_K's arithmetic on AVX2: rows holds
// len(out) whole Q4_K rows of n values, a one Q8_K vector, and out[r] gets row r times a,
// one float step per super-block (repackedQ4KDot with chunk 256), as repackedKernels
// wants it.
//
// The rows go in groups of eight, a float lane each. For each span of up to
// q4KRepackedSpan super-blocks, an integer pass runs down each pair of rows of the group
// in turn (q4KRepackedIntegersAVX2), and leaves each super-block's lanes and decoded scales in
// a buffer; the float pass (q4KRepackedFloats) then adds the eight rows' lanes up to I with
// a VPHADDD tree, computes their M from the mins and the bsums, and takes both float steps
// of eight rows in two FMAs. Nothing vector lives across the passes (acc and accMin wait in
// memory), so each pass ends with VZEROUPPER. The integer pass asks for the lines 4 KiB
// ahead of each super-block itself (Q4KI_PREFETCH).
// On the build machine, one thread, calls of 64 rows: in cache 8-15% faster than
// dotQ4_KAVX2 row by row, from DRAM the same GB/s.
func dotQ4_KRepackedRowsAVX2(n int, rows, a []byte, out []float32) {
	q4KRepackedRowsAVX2(n, rows, [2][]byte{a}, [2][]float32{out}, 1)
}

// dotQ4_KRepackedRows2AVX2 is dotQ4_KRepackedRowsAVX2 against two activation vectors, a0
// into o0 and a1 into o1, each token's bits: the integer pass (q4KRepackedIntegers2AVX2)
// reads and splits each chunk of a pair of rows once for both tokens, the float pass runs
// per token. Two sequences decoding together, or two tokens routed to one expert, read the
// rows once.
func dotQ4_KRepackedRows2AVX2(n int, rows, a0, a1 []byte, o0, o1 []float32) {
	q4KRepackedRowsAVX2(n, rows, [2][]byte{a0, a1}, [2][]float32{o0, o1}, 2)
}

// q4KRepackedRowsAVX2 is both: rows times the first tokens of acts (1 or 2) into outs,
// which have len(outs[0]) entries each.
func q4KRepackedRowsAVX2(n int, rows []byte, acts [2][]byte, outs [2][]float32, tokens int) {
	nb := n / qkK
	count := len(outs[0])
	if nb == 0 || count == 0 {
		for t := range tokens {
			clear(outs[t][:count])
		}
		return
	}
	rb := nb * 144
	rows = rows[:count*rb]
	var accs [2]struct{ acc, accMin, out [8]float32 }
	s := q4KRepackedScratches.Get().(*q4KRepackedScratch)
	for t := range tokens {
		acts[t] = acts[t][:nb*292]
		if cap(s.swapped[t]) < nb {
			s.swapped[t] = make([][8][32]int8, nb)
		}
		q4KRepackedSwap(acts[t], s.swapped[t][:nb])
	}
	for g := 0; g < count; g += 8 {
		rowsHere := min(8, count-g)
		for b0 := 0; b0 < nb; b0 += q4KRepackedSpan {
			span := min(q4KRepackedSpan, nb-b0)
			// Each token's activations, swapped quants and buffer for the span.
			var a, z, p [2]unsafe.Pointer
			for t := range tokens {
				a[t], z[t], p[t] = unsafe.Pointer(&acts[t][b0*292]), unsafe.Pointer(&s.swapped[t][b0]), unsafe.Pointer(&s.blocks[t][0])
			}
			for k := 0; 2*k < rowsHere; k++ {
				r0, r1 := g+2*k, g+min(2*k+1, rowsHere-1) // a lone last row is taken twice
				w0, w1 := unsafe.Pointer(&rows[r0*rb+b0*144]), unsafe.Pointer(&rows[r1*rb+b0*144])
				if tokens == 1 {
					q4KRepackedIntegersAVX2(w0, w1, a[0], z[0], p[0], span, k&3)
					continue
				}
				q4KRepackedIntegers2AVX2(w0, w1, a[0], z[0], p[0], a[1], z[1], p[1], span, k&3)
			}
			for t := range tokens {
				q4KRepackedFloats(acts[t][b0*292:(b0+span)*292], &s.blocks[t][0], span, b0 > 0, &accs[t].acc, &accs[t].accMin)
			}
		}
		for t := range tokens {
			if rowsHere == 8 {
				q4KRepackedStore(&accs[t].acc, &accs[t].accMin, (*[8]float32)(outs[t][g:g+8]))
				continue
			}
			q4KRepackedStore(&accs[t].acc, &accs[t].accMin, &accs[t].out)
			copy(outs[t][g:g+rowsHere], accs[t].out[:rowsHere])
		}
	}
	q4KRepackedScratches.Put(s)
}

// q4KRepackedSwap fills swapped with a's super-blocks' eight sub-blocks (32 quants each)
// with their 128-bit halves swapped.
func q4KRepackedSwap(a []byte, swapped [][8][32]int8) {
	y, z := (*[292]byte)(a), &swapped[0]
	for i := 0; ; {
		for j := range 8 {
			q := archsimd.LoadUint8x32((*[32]uint8)(y[4+32*j : 36+32*j])).AsInt8x32()
			q.Select128FromPair(1, 0, q).Store(&z[j])
		}
		if i++; i == len(swapped) {
			break
		}
		y, z = next(y), next(z)
	}
	archsimd.ClearAVXUpperBits()
}

// q4KRepackedIntegersAVX2 is the integer pass of dotQ4_KRepackedRowsAVX2 for rows 2·slot
// and 2·slot+1 of a group (nb super-blocks at w0 and w1) against the activations a and
// their swapped quants, into the buffer p (simd_repacked_q4k_amd64.s). The first row is in
// the lower 128-bit half: each chunk's nibbles of the two rows are regrouped into [row
// 2k's first 16 bytes | row 2k+1's last 16] and [row 2k's last 16 | row 2k+1's first 16],
// split into low and high nibbles and multiplied (VPMADDUBSW) with the sub-block's quants
// as they lie and as swapped, so each half's two products belong to one row and add up as
// words (VPADDW, at most 2·2·15·128) before VPMADDWD scales them. In assembly for the
// reason the four-token kernels are (simd_repacked_q4k_amd64.s).
//
//go:noescape
func q4KRepackedIntegersAVX2(w0, w1, a, swapped, p unsafe.Pointer, nb, slot int)

// q4KRepackedIntegers2AVX2 is q4KRepackedIntegersAVX2 for two tokens (a0 with its
// swapped quants z0 into the buffer p0, a1 with z1 into p1): each chunk of the two rows is
// loaded, regrouped and split once, and the products and lanes are each token's as the
// one-token pass makes them; both buffers get the rows' scales, d and dmin.
//
//go:noescape
func q4KRepackedIntegers2AVX2(w0, w1, a0, z0, p0, a1, z1, p1 unsafe.Pointer, nb, slot int)

// q4KRepackedFloats is the float pass of dotQ4_KRepackedRowsAVX2 over span super-blocks
// of the buffer p against the activations a: per super-block the eight rows' I and M, one
// FMA each into acc and accMin (rows 0, 2, 4, 6, 1, 3, 5, 7), which start at zero unless
// more is true and go back to accOut and accMinOut.
func q4KRepackedFloats(a []byte, p *q4KRepackedBlock, span int, more bool, accOut, accMinOut *[8]float32) {
	y := (*[292]byte)(a)
	var acc, accMin archsimd.Float32x8
	if more {
		acc, accMin = archsimd.LoadFloat32x8(accOut), archsimd.LoadFloat32x8(accMinOut)
	}
	for i := 0; ; {
		// I: VPHADDD of the four pairs' lanes, twice more to rows 0, 2, 4, 6 | 1, 3, 5, 7.
		// M: the mins as words against the sub-blocks' sums of the activations (pairs of
		// bsums), a pair of rows a VPMADDWD, then the same VPHADDD tree.
		h := archsimd.LoadInt32x8(&p.sums[0]).AddPairsGrouped(archsimd.LoadInt32x8(&p.sums[1]))
		h = h.AddPairsGrouped(archsimd.LoadInt32x8(&p.sums[2]).AddPairsGrouped(archsimd.LoadInt32x8(&p.sums[3])))
		bsums := archsimd.LoadUint8x32((*[32]uint8)(y[260:292])).AsInt16x16()
		ys := bsums.AddPairsGrouped(bsums).AsInt32x8().Permute(archsimd.LoadUint32x8(&q4KBsumPairs)).AsInt16x16()
		spread := archsimd.LoadInt8x32(&q4KMinWords)
		m0 := archsimd.LoadInt8x32(&p.scales[0]).PermuteOrZeroGrouped(spread).AsInt16x16().DotProductPairs(ys)
		m1 := archsimd.LoadInt8x32(&p.scales[1]).PermuteOrZeroGrouped(spread).AsInt16x16().DotProductPairs(ys)
		m2 := archsimd.LoadInt8x32(&p.scales[2]).PermuteOrZeroGrouped(spread).AsInt16x16().DotProductPairs(ys)
		m3 := archsimd.LoadInt8x32(&p.scales[3]).PermuteOrZeroGrouped(spread).AsInt16x16().DotProductPairs(ys)
		dy := archsimd.LoadUint8x16((*[16]uint8)(y[0:16])).AsFloat32x4().Broadcast1To8()
		acc = archsimd.LoadUint32x8(&p.d).AsFloat32x8().Mul(dy).MulAdd(h.ConvertToFloat32(), acc)
		accMin = archsimd.LoadUint32x8(&p.dmin).AsFloat32x8().Mul(dy).MulAdd(m0.AddPairsGrouped(m1).AddPairsGrouped(m2.AddPairsGrouped(m3)).ConvertToFloat32(), accMin)
		if i++; i == span {
			break
		}
		y, p = next(y), next(p)
	}
	acc.Store(accOut)
	accMin.Store(accMinOut)
	archsimd.ClearAVXUpperBits()
}

// q4KRepackedStore stores acc − accMin to out, the rows put back in order.
func q4KRepackedStore(acc, accMin, out *[8]float32) {
	archsimd.LoadFloat32x8(acc).Sub(archsimd.LoadFloat32x8(accMin)).AsUint32x8().Permute(archsimd.LoadUint32x8(&q4KRowOrder)).AsFloat32x8().Store(out)
	archsimd.ClearAVXUpperBits()
}

// q4KRepackedTokensBlock is what dotQ4_KRepackedTokens4AVX2 prepares of a super-block of
// its four activation vectors, once for all the rows. y[c] holds the 64 quants of chunk c
// (sub-blocks 2c and 2c+1) of the four tokens as four vectors for each pair of tokens
// (y[c][v][p] for tokens 2p and 2p+1): for sub-block 2c (v = 0, 1), then 2c+1 (v = 2, 3),
// [first 16 of token 2p | last 16 of token 2p+1] and [last 16 of token 2p | first 16 of
// token 2p+1], to meet the sub-block's nibbles as they lie and with their 128-bit halves
// swapped. The pairs lie next to each other so that y[c][v] is one 512-bit vector of all
// four tokens for the AVX-512 kernels (token k in 128-bit lane k), and the AVX2 kernels
// take its halves. ys01 and ys23 are the tokens' sums of each 32-value sub-block (pairs of
// bsums) as words, [token 0 | token 1] and [token 2 | token 3] (together token k in lane
// k); dy is [dy0, dy2, dy0, dy2 | dy1, dy3, dy1, dy3].
type q4KRepackedTokensBlock struct {
	y          [4][4][2][32]int8
	ys01, ys23 [16]int16
	dy         [8]float32
}

// q4KRepackedTokensScratches keeps a call's prepared blocks between calls: a
// row of 2048 values takes 9 KiB, which zeroed on the stack for each call would cost a few
// per cent of a matmul's calls of 16 rows.
var q4KRepackedTokensScratches = sync.Pool{New: func() any { return new([]q4KRepackedTokensBlock) }}

// q4KSumsOfTwo makes VPERMD put each token's sub-block sums in order in one 128-bit half
// after VPHADDW of two tokens' bsums.
var q4KSumsOfTwo = [8]uint32{0, 1, 4, 5, 2, 3, 6, 7}

// dotQ4_KRepackedTokens4AVX2 is Q4_K's repacked arithmetic for four tokens (prefill's
// kernel, shaped as dotTokens4Rows's with the chunk added): len(o0) whole Q4_K rows of n
// values, rowBytes apart in rows, against the Q8_K vectors a0..a3; ok[r] gets row r times
// ak, as repackedQ4KDot with chunk 256 (ggml_gemv_q4_K_8x8_q8_K's float steps, one a
// super-block: MulMatID's tokens and a mul_mat's past its last multiple of four) or 64
// (ggml_gemm_q4_K_8x8_q8_K's, for a mul_mat's tokens in fours). Any other chunk panics.
//
// What depends on the activations alone is prepared once for all the rows
// (q4KRepackedTokensBlock), each row's super-blocks then go through
// q4KRepackedGemm4AVX2 or q4KRepackedGemv4AVX2.
func dotQ4_KRepackedTokens4AVX2(n int, rows []byte, rowBytes int, a0, a1, a2, a3 []byte, o0, o1, o2, o3 []float32, chunk int) {
	dotQ4_KRepackedTokens4With(q4KTokens4AVX2, n, rows, rowBytes, a0, a1, a2, a3, o0, o1, o2, o3, chunk)
}

// q4KTokens4Asm is an assembly kernel of the four-token repacked Q4_K product over the
// prepared activations (q4KRepackedGemm4AVX2 and its kin), and q4KTokens4Kernels a
// level's pair of them.
type (
	q4KTokens4Asm     func(w, pre unsafe.Pointer, nb, rows, rowBytes int, o0, o1, o2, o3 *float32)
	q4KTokens4Kernels struct{ gemm, gemv q4KTokens4Asm }
)

var (
	q4KTokens4AVX2   = q4KTokens4Kernels{gemm: q4KRepackedGemm4AVX2, gemv: q4KRepackedGemv4AVX2}
	q4KTokens4AVX512 = q4KTokens4Kernels{gemm: q4KRepackedGemm4AVX512, gemv: q4KRepackedGemv4AVX512}
)

// dotQ4_KRepackedTokens4With is dotQ4_KRepackedTokens4AVX2 on the kernels k (of the AVX2
// level or the AVX-512 one: the same bits).
func dotQ4_KRepackedTokens4With(k q4KTokens4Kernels, n int, rows []byte, rowBytes int, a0, a1, a2, a3 []byte, o0, o1, o2, o3 []float32, chunk int) {
	if chunk != qkK && chunk != 64 {
		panic("tensor: repacked Q4_K takes chunks of 64 or 256 values")
	}
	nb, count := n/qkK, len(o0)
	if count == 0 {
		return
	}
	o1, o2, o3 = o1[:count], o2[:count], o3[:count]
	if nb == 0 {
		clear(o0)
		clear(o1)
		clear(o2)
		clear(o3)
		return
	}
	rows = rows[:(count-1)*rowBytes+nb*144]
	scratch := q4KRepackedTokensScratches.Get().(*[]q4KRepackedTokensBlock)
	if cap(*scratch) < nb {
		*scratch = make([]q4KRepackedTokensBlock, nb)
	}
	pre := (*scratch)[:nb]
	q4KRepackedTokensPrepare(a0[:nb*292], a1[:nb*292], a2[:nb*292], a3[:nb*292], pre)
	kernel := k.gemv
	if chunk == 64 {
		kernel = k.gemm
	}
	kernel(unsafe.Pointer(&rows[0]), unsafe.Pointer(&pre[0]), nb, count, rowBytes, &o0[0], &o1[0], &o2[0], &o3[0])
	q4KRepackedTokensScratches.Put(scratch)
}

// q4KRepackedTokensPrepare fills pre from the four activation vectors' len(pre)
// super-blocks.
func q4KRepackedTokensPrepare(a0, a1, a2, a3 []byte, pre []q4KRepackedTokensBlock) {
	y0, y1, y2, y3 := (*[292]byte)(a0), (*[292]byte)(a1), (*[292]byte)(a2), (*[292]byte)(a3)
	p := &pre[0]
	for i := 0; ; {
		// Chunk by chunk (sub-blocks 2c and 2c+1), 64 quants of each vector.
		q0, q1, q2, q3 := (*[64]uint8)(y0[4:68]), (*[64]uint8)(y1[4:68]), (*[64]uint8)(y2[4:68]), (*[64]uint8)(y3[4:68])
		pc := &p.y[0]
		for c := 0; ; {
			u, v := archsimd.LoadUint8x32((*[32]uint8)(q0[0:32])).AsInt8x32(), archsimd.LoadUint8x32((*[32]uint8)(q1[0:32])).AsInt8x32()
			u.Select128FromPair(0, 3, v).Store(&pc[0][0])
			u.Select128FromPair(1, 2, v).Store(&pc[1][0])
			u, v = archsimd.LoadUint8x32((*[32]uint8)(q0[32:64])).AsInt8x32(), archsimd.LoadUint8x32((*[32]uint8)(q1[32:64])).AsInt8x32()
			u.Select128FromPair(0, 3, v).Store(&pc[2][0])
			u.Select128FromPair(1, 2, v).Store(&pc[3][0])
			u, v = archsimd.LoadUint8x32((*[32]uint8)(q2[0:32])).AsInt8x32(), archsimd.LoadUint8x32((*[32]uint8)(q3[0:32])).AsInt8x32()
			u.Select128FromPair(0, 3, v).Store(&pc[0][1])
			u.Select128FromPair(1, 2, v).Store(&pc[1][1])
			u, v = archsimd.LoadUint8x32((*[32]uint8)(q2[32:64])).AsInt8x32(), archsimd.LoadUint8x32((*[32]uint8)(q3[32:64])).AsInt8x32()
			u.Select128FromPair(0, 3, v).Store(&pc[2][1])
			u.Select128FromPair(1, 2, v).Store(&pc[3][1])
			if c++; c == 4 {
				break
			}
			q0, q1, q2, q3, pc = next(q0), next(q1), next(q2), next(q3), next(pc)
		}
		bs := archsimd.LoadUint8x32((*[32]uint8)(y0[260:292])).AsInt16x16()
		bs.AddPairsGrouped(archsimd.LoadUint8x32((*[32]uint8)(y1[260:292])).AsInt16x16()).AsInt32x8().Permute(archsimd.LoadUint32x8(&q4KSumsOfTwo)).AsInt16x16().Store(&p.ys01)
		bs = archsimd.LoadUint8x32((*[32]uint8)(y2[260:292])).AsInt16x16()
		bs.AddPairsGrouped(archsimd.LoadUint8x32((*[32]uint8)(y3[260:292])).AsInt16x16()).AsInt32x8().Permute(archsimd.LoadUint32x8(&q4KSumsOfTwo)).AsInt16x16().Store(&p.ys23)
		d02 := archsimd.LoadFloat32x4((*[4]float32)(unsafe.Pointer(&y0[0]))).SelectFromPair(0, 0, 4, 4, archsimd.LoadFloat32x4((*[4]float32)(unsafe.Pointer(&y2[0]))))
		d13 := archsimd.LoadFloat32x4((*[4]float32)(unsafe.Pointer(&y1[0]))).SelectFromPair(0, 0, 4, 4, archsimd.LoadFloat32x4((*[4]float32)(unsafe.Pointer(&y3[0]))))
		archsimd.Float32x8{}.SetLo(d02.SelectFromPair(0, 2, 4, 6, d02)).SetHi(d13.SelectFromPair(0, 2, 4, 6, d13)).Store(&p.dy)
		if i++; i == len(pre) {
			break
		}
		y0, y1, y2, y3, p = next(y0), next(y1), next(y2), next(y3), next(p)
	}
	archsimd.ClearAVXUpperBits()
}

// q4KRepackedGemm4AVX2 and q4KRepackedGemv4AVX2 are dotQ4_KRepackedTokens4AVX2's rows
// (simd_repacked_q4k_amd64.s): rows rows of nb super-blocks, rowBytes apart from w,
// against the prepared activations pre; ok[r] gets row r times token k, in gemm's
// arithmetic or gemv's.
//
// A 128-bit half is a token. Each chunk's 32 bytes of nibbles, split into low and high,
// as they lie and with their halves swapped, meet the prepared quants of a pair of tokens
// (VPMADDUBSW): the lower half gets the first token's products with the sub-block's first
// 16 values and then its last 16, the upper half the second token's, so the two add up as
// words (VPADDW: at most 2·2·15·128) before VPMADDWD scales them, and a chunk leaves four
// int32 lanes a token. The four tokens' acc and accMin are one vector
// [acc0, acc2, accMin0, accMin2 | acc1, acc3, accMin1, accMin3], and a float step is one
// FMA of it with [I0, I2, M0, M2 | I1, I3, M1, M3] by [d·dy0, d·dy2, dmin·dy0, dmin·dy2 |
// …]: gemv adds up the chunks' lanes and steps at the end of the super-block (VPHADDD
// twice, VSHUFPS for the mins), gemm steps after each chunk, two at a time (VPHADDD three
// times for two chunks). The mins' sums M come from the sub-blocks' activation sums: two
// tokens a VPMADDWD, which leaves one chunk's M a lane.
//
//go:noescape
func q4KRepackedGemm4AVX2(w, pre unsafe.Pointer, nb, rows, rowBytes int, o0, o1, o2, o3 *float32)

//go:noescape
func q4KRepackedGemv4AVX2(w, pre unsafe.Pointer, nb, rows, rowBytes int, o0, o1, o2, o3 *float32)

// q4KRepackedGemm4AVX512 and q4KRepackedGemv4AVX512 are q4KRepackedGemm4AVX2 and
// q4KRepackedGemv4AVX2 in 512-bit registers, token k in 128-bit lane k, so that each
// multiplication covers the four tokens (simd_repacked_q4k_amd64.s): AVX-512 F and BW.
//
//go:noescape
func q4KRepackedGemm4AVX512(w, pre unsafe.Pointer, nb, rows, rowBytes int, o0, o1, o2, o3 *float32)

//go:noescape
func q4KRepackedGemv4AVX512(w, pre unsafe.Pointer, nb, rows, rowBytes int, o0, o1, o2, o3 *float32)

var (
	// q4KTokenFirsts makes VPERMD gather the first float of each 128-bit lane (a token's
	// result) into the lowest four.
	q4KTokenFirsts = [16]uint32{0, 4, 8, 12}
	// q4KTokenFactors makes VPERMILPS turn [d·dy0, d·dy2, dmin·dy0, dmin·dy2 | d·dy1,
	// d·dy3, dmin·dy1, dmin·dy3], repeated, into [d·dyk, dmin·dyk, d·dyk, dmin·dyk] in
	// lane k.
	q4KTokenFactors = [16]uint32{0, 2, 0, 2, 0, 2, 0, 2, 1, 3, 1, 3, 1, 3, 1, 3}
)
