//go:build goexperiment.simd && amd64

package tensor

import (
	"simd/archsimd"
	"unsafe"
)

// Q4_K in llama.cpp's repacked arithmetic (repacked.go) on AVX2: what
// ggml_gemv_q4_K_8x8_q8_K and ggml_gemm_q4_K_8x8_q8_K compute, from the weights where they
// lie (not repacked). Per row, token and chunk (a super-block for gemv, 64 values for gemm)
// the scaled sub-block sums add up to one exact int32 I and the mins times the activations'
// sums to another, M; the float steps acc = float(I)·(d·d_y) + acc and
// accMin = float(M)·(dmin·d_y) + accMin are one rounding each. As the integers are exact,
// the kernels compute them with dotQ4_KAVX2's integer code, in lanes, and may add the
// lanes in any order; only the float steps must be the reference's.

// q4KRepackedSpan is how many super-blocks of eight rows dotQ4_KRepackedRowsAVX2 takes
// through its integer pass before the float pass (its buffer: 448 bytes a super-block).
const q4KRepackedSpan = 16

// q4KRepackedBlock is one super-block of eight rows between dotQ4_KRepackedRowsAVX2's
// passes: per row the eight int32 lanes of its scaled sums, which add up to I, its scales
// and mins as bytes [sc0..7, m0..7] (row r at 32·(r mod 4) + 16·(r div 4), so that a
// 256-bit load takes rows k and k+4), and d and dmin as float32 bits (copied from f16Table
// with integer moves: a float32 copy in Go is a legacy-SSE MOVSS, see simd_amd64.go).
type q4KRepackedBlock struct {
	sums    [8][8]int32
	scales  [128]byte
	d, dmin [8]uint32
}

var (
	// q4KMinWords makes VPSHUFB widen the mins (bytes 8-15 of each 128-bit half) to words.
	q4KMinWords = [32]int8{8, -1, 9, -1, 10, -1, 11, -1, 12, -1, 13, -1, 14, -1, 15, -1,
		8, -1, 9, -1, 10, -1, 11, -1, 12, -1, 13, -1, 14, -1, 15, -1}
	// q4KBsumPairs makes VPERMD put the sub-block sums, words 0-3 and 8-11 after VPHADDW
	// of the bsums, in words 0-7 of both halves.
	q4KBsumPairs = [8]uint32{0, 1, 4, 5, 0, 1, 4, 5}
)

// dotQ4_KRepackedRowsAVX2 is ggml_gemv_q4_K_8x8_q8_K's arithmetic on AVX2: rows holds
// len(out) whole Q4_K rows of n values, a one Q8_K vector, and out[r] gets row r times a,
// one float step per super-block (repackedQ4KDot with chunk 256), as repackedKernels
// wants it.
//
// The rows go in groups of eight, a float lane each. For each span of up to
// q4KRepackedSpan super-blocks, an integer pass runs down each row of the group in turn,
// as dotQ4_KAVX2 does (the same memory order, and prefetchNext per row), and leaves each
// super-block's scaled-sum lanes and decoded scales in a buffer; the float pass then folds
// the eight rows' lanes into I with a VPHADDD tree and two 128-bit permutes, computes the
// eight rows' M from their mins and the bsums (two rows a VPMADDWD, cheaper than a
// VPMADDWD and a VPHADDD per row), and takes both float steps of eight rows in two FMAs.
// Nothing vector lives across the passes (acc and accMin wait in memory), so each pass
// ends with VZEROUPPER and prefetchLines (whose ABI wrapper zeroes X15 with a legacy
// XORPS) is called in a clean state. In cache about 4% faster than dotQ4_KAVX2 row by row.
func dotQ4_KRepackedRowsAVX2(n int, rows, a []byte, out []float32) {
	nb := n / qkK
	if nb == 0 || len(out) == 0 {
		clear(out)
		return
	}
	rb := nb * 144
	rows, a = rows[:len(out)*rb], a[:nb*292]
	var buf [q4KRepackedSpan]q4KRepackedBlock
	var accs struct{ acc, accMin, out [8]float32 }
	for g := 0; g < len(out); g += 8 {
		count := min(8, len(out)-g)
		for b0 := 0; b0 < nb; b0 += q4KRepackedSpan {
			span := min(q4KRepackedSpan, nb-b0)
			for r := range count {
				off := (g+r)*rb + b0*144
				w := rows[off : off+span*144]
				prefetchNext(w)
				q4KRepackedIntegers(w, a[b0*292:(b0+span)*292], &buf[0], r&7, span)
			}
			q4KRepackedFloats(a[b0*292:(b0+span)*292], &buf[0], span, b0 > 0, &accs.acc, &accs.accMin)
		}
		if count == 8 {
			q4KRepackedStore(&accs.acc, &accs.accMin, (*[8]float32)(out[g:g+8]))
			continue
		}
		q4KRepackedStore(&accs.acc, &accs.accMin, &accs.out)
		copy(out[g:], accs.out[:count])
	}
}

// q4KRepackedIntegers is the integer pass of dotQ4_KRepackedRowsAVX2 for one row of a
// group (row r of its eight) over span super-blocks: w holds the row's span blocks, a the
// activations' and p is the buffer. The body is dotQ4_KAVX2's without the mins, up to the
// float step.
func q4KRepackedIntegers(w, a []byte, p *q4KRepackedBlock, r, span int) {
	x, y := (*[144]byte)(w), (*[292]byte)(a)
	rec := r&3*32 + r&4*4
	for i := 0; ; {
		// Scales and mins as bytes [sc0..7, m0..7] in both 128-bit halves.
		v := archsimd.LoadUint8x16((*[16]uint8)(x[4:20])).AsInt8x16()
		lo := v.PermuteOrZero(archsimd.LoadInt8x16(&q4KPickLo)).AsInt32x4().ShiftRight(archsimd.LoadInt32x4(&q4KShift)).And(archsimd.LoadInt32x4(&q4KMaskLo))
		packed := v.PermuteOrZero(archsimd.LoadInt8x16(&q4KPickHi)).AsInt32x4().ShiftAllRight(2).And(archsimd.LoadInt32x4(&q4KMaskHi)).Or(lo).AsInt8x16()
		m4 := archsimd.LoadUint8x32(&nibbleMask)
		sc := m4.AsInt8x32().SetLo(packed).SetHi(packed)
		packed.AsUint8x16().Store((*[16]uint8)(p.scales[rec : rec+16]))

		bits := archsimd.LoadUint8x32((*[32]uint8)(x[16:48]))
		q := bits.And(m4).DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[4:36])).AsInt8x32())
		sum := q.DotProductPairs(sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[0])).AsInt16x16())
		q = bits.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4).DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[36:68])).AsInt8x32())
		sum = sum.Add(q.DotProductPairs(sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[1])).AsInt16x16()))

		bits = archsimd.LoadUint8x32((*[32]uint8)(x[48:80]))
		q = bits.And(m4).DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[68:100])).AsInt8x32())
		sum = sum.Add(q.DotProductPairs(sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[2])).AsInt16x16()))
		q = bits.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4).DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[100:132])).AsInt8x32())
		sum = sum.Add(q.DotProductPairs(sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[3])).AsInt16x16()))

		bits = archsimd.LoadUint8x32((*[32]uint8)(x[80:112]))
		q = bits.And(m4).DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[132:164])).AsInt8x32())
		sum = sum.Add(q.DotProductPairs(sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[4])).AsInt16x16()))
		q = bits.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4).DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[164:196])).AsInt8x32())
		sum = sum.Add(q.DotProductPairs(sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[5])).AsInt16x16()))

		bits = archsimd.LoadUint8x32((*[32]uint8)(x[112:144]))
		q = bits.And(m4).DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[196:228])).AsInt8x32())
		sum = sum.Add(q.DotProductPairs(sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[6])).AsInt16x16()))
		q = bits.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4).DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[228:260])).AsInt8x32())
		sum = sum.Add(q.DotProductPairs(sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[7])).AsInt16x16()))

		sum.Store(&p.sums[r&7])
		p.d[r&7] = (*[len(f16Table)]uint32)(unsafe.Pointer(&f16Table))[uint16(x[0])|uint16(x[1])<<8]
		p.dmin[r&7] = (*[len(f16Table)]uint32)(unsafe.Pointer(&f16Table))[uint16(x[2])|uint16(x[3])<<8]
		if i++; i == span {
			break
		}
		x, y, p = next(x), next(y), next(p)
	}
	archsimd.ClearAVXUpperBits()
}

// q4KRepackedFloats is the float pass of dotQ4_KRepackedRowsAVX2 over span super-blocks
// of the buffer p against the activations a: per super-block the eight rows' I and M, one
// FMA each into acc and accMin, which start at zero unless more is true and go back to
// accOut and accMinOut.
func q4KRepackedFloats(a []byte, p *q4KRepackedBlock, span int, more bool, accOut, accMinOut *[8]float32) {
	y := (*[292]byte)(a)
	var acc, accMin archsimd.Float32x8
	if more {
		acc, accMin = archsimd.LoadFloat32x8(accOut), archsimd.LoadFloat32x8(accMinOut)
	}
	for i := 0; ; {
		// I: eight rows' lanes, VPHADDD to [lanes 0-3 of rows 0-3 | lanes 4-7], the halves
		// added. M: the mins as words against the sub-blocks' sums of the activations
		// (pairs of bsums), VPMADDWD of rows k and k+4 at once, then VPHADDD down to rows.
		h01 := archsimd.LoadInt32x8(&p.sums[0]).AddPairsGrouped(archsimd.LoadInt32x8(&p.sums[1]))
		h23 := archsimd.LoadInt32x8(&p.sums[2]).AddPairsGrouped(archsimd.LoadInt32x8(&p.sums[3]))
		q03 := h01.AddPairsGrouped(h23)
		h45 := archsimd.LoadInt32x8(&p.sums[4]).AddPairsGrouped(archsimd.LoadInt32x8(&p.sums[5]))
		h67 := archsimd.LoadInt32x8(&p.sums[6]).AddPairsGrouped(archsimd.LoadInt32x8(&p.sums[7]))
		q47 := h45.AddPairsGrouped(h67)
		bsums := archsimd.LoadUint8x32((*[32]uint8)(y[260:292])).AsInt16x16()
		ys := bsums.AddPairsGrouped(bsums).AsInt32x8().Permute(archsimd.LoadUint32x8(&q4KBsumPairs)).AsInt16x16()
		spread := archsimd.LoadInt8x32(&q4KMinWords)
		m0 := archsimd.LoadInt8x32((*[32]int8)(unsafe.Pointer(&p.scales[0]))).PermuteOrZeroGrouped(spread).AsInt16x16().DotProductPairs(ys)
		m1 := archsimd.LoadInt8x32((*[32]int8)(unsafe.Pointer(&p.scales[32]))).PermuteOrZeroGrouped(spread).AsInt16x16().DotProductPairs(ys)
		m2 := archsimd.LoadInt8x32((*[32]int8)(unsafe.Pointer(&p.scales[64]))).PermuteOrZeroGrouped(spread).AsInt16x16().DotProductPairs(ys)
		m3 := archsimd.LoadInt8x32((*[32]int8)(unsafe.Pointer(&p.scales[96]))).PermuteOrZeroGrouped(spread).AsInt16x16().DotProductPairs(ys)
		dy := archsimd.LoadUint8x16((*[16]uint8)(y[0:16])).AsFloat32x4().Broadcast1To8()
		acc = archsimd.LoadUint32x8(&p.d).AsFloat32x8().Mul(dy).MulAdd(q03.Select128FromPair(0, 2, q47).Add(q03.Select128FromPair(1, 3, q47)).ConvertToFloat32(), acc)
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

// q4KRepackedStore stores acc − accMin to out.
func q4KRepackedStore(acc, accMin, out *[8]float32) {
	archsimd.LoadFloat32x8(acc).Sub(archsimd.LoadFloat32x8(accMin)).Store(out)
	archsimd.ClearAVXUpperBits()
}

// q4KRepackedTokensSpan is how many super-blocks dotQ4_KRepackedTokens4AVX2 prepares the
// activations of at a time, q4KRepackedTokensRows how many rows it takes through them before the
// next span where a row has more (their accumulators wait in a buffer).
const (
	q4KRepackedTokensSpan = 32
	q4KRepackedTokensRows = 16
)

// q4KRepackedTokensBlock is what dotQ4_KRepackedTokens4AVX2 prepares of a super-block of the four
// activation vectors for every row: the sums of their 32-value sub-blocks (pairs of bsums)
// as words, [token 0 | token 1] and [token 2 | token 3], and [dy0..3 | dy0..3].
type q4KRepackedTokensBlock struct {
	ys01, ys23 [16]int16
	dy         [8]float32
}

var (
	// q4KSumsOfTwo makes VPERMD put each token's sub-block sums in order in one 128-bit
	// half after VPHADDW of two tokens' bsums.
	q4KSumsOfTwo = [8]uint32{0, 1, 4, 5, 2, 3, 6, 7}
	// q4KChunksOfTwo makes VPERMD interleave the two tokens' chunk mins (a half each):
	// [t0 c0, t1 c0, t0 c1, t1 c1 | the same of chunks 2 and 3].
	q4KChunksOfTwo = [8]uint32{0, 4, 1, 5, 2, 6, 3, 7}
	// q4KHighHalf keeps the upper 128 bits.
	q4KHighHalf = [8]int32{0, 0, 0, 0, -1, -1, -1, -1}
)

// dotQ4_KRepackedTokens4AVX2 is Q4_K's repacked arithmetic for four tokens (prefill's
// kernel, shaped as dotTokens4Rows's with the chunk added): len(o0) whole Q4_K rows of n
// values, rowBytes apart in rows, against the Q8_K vectors a0..a3; ok[r] gets row r times
// ak, as repackedQ4KDot with chunk 256 (ggml_gemv_q4_K_8x8_q8_K's float steps, one a
// super-block: MulMatID's tokens and a mul_mat's past its last multiple of four) or 64
// (ggml_gemm_q4_K_8x8_q8_K's, for a mul_mat's tokens in fours). Any other chunk panics.
//
// Each super-block's scales are decoded, and its nibbles split, once for the four tokens,
// whose integer sums are dotQ4_KTokens4AVX2's; what depends on the activations alone (the
// sub-blocks' sums for the mins, the tokens' d) is prepared once for all the rows. See
// q4KRepackedTokens4Row.
func dotQ4_KRepackedTokens4AVX2(n int, rows []byte, rowBytes int, a0, a1, a2, a3 []byte, o0, o1, o2, o3 []float32, chunk int) {
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
	rows, a0, a1, a2, a3 = rows[:(count-1)*rowBytes+nb*144], a0[:nb*292], a1[:nb*292], a2[:nb*292], a3[:nb*292]
	var pre [q4KRepackedTokensSpan]q4KRepackedTokensBlock
	var accs [q4KRepackedTokensRows][8]float32
	group := count // rows through all spans before the next group: all where one span does
	if nb > q4KRepackedTokensSpan {
		group = q4KRepackedTokensRows
	}
	for r0 := 0; r0 < count; r0 += group {
		r1 := min(r0+group, count)
		for b0 := 0; b0 < nb; b0 += q4KRepackedTokensSpan {
			span := min(q4KRepackedTokensSpan, nb-b0)
			b1 := b0 + span
			q4KRepackedTokensPrepare(a0[b0*292:b1*292], a1[b0*292:b1*292], a2[b0*292:b1*292], a3[b0*292:b1*292], &pre[0], span)
			for r := r0; r < r1; r++ {
				off := r*rowBytes + b0*144
				d := q4KRepackedTokens4Row(rows[off:off+span*144], a0[b0*292:b1*292], a1[b0*292:b1*292], a2[b0*292:b1*292], a3[b0*292:b1*292],
					&pre[0], &accs[(r-r0)%q4KRepackedTokensRows], chunk == 64, b0 > 0)
				if b1 == nb {
					o0[r], o1[r], o2[r], o3[r] = d[0], d[1], d[2], d[3]
				}
			}
		}
	}
}

// q4KRepackedTokensPrepare fills p's first span blocks from the four activation vectors' span
// super-blocks.
func q4KRepackedTokensPrepare(a0, a1, a2, a3 []byte, p *q4KRepackedTokensBlock, span int) {
	y0, y1, y2, y3 := (*[292]byte)(a0), (*[292]byte)(a1), (*[292]byte)(a2), (*[292]byte)(a3)
	for i := 0; ; {
		bs := archsimd.LoadUint8x32((*[32]uint8)(y0[260:292])).AsInt16x16()
		bs.AddPairsGrouped(archsimd.LoadUint8x32((*[32]uint8)(y1[260:292])).AsInt16x16()).AsInt32x8().Permute(archsimd.LoadUint32x8(&q4KSumsOfTwo)).AsInt16x16().Store(&p.ys01)
		bs = archsimd.LoadUint8x32((*[32]uint8)(y2[260:292])).AsInt16x16()
		bs.AddPairsGrouped(archsimd.LoadUint8x32((*[32]uint8)(y3[260:292])).AsInt16x16()).AsInt32x8().Permute(archsimd.LoadUint32x8(&q4KSumsOfTwo)).AsInt16x16().Store(&p.ys23)
		u01 := archsimd.LoadFloat32x4((*[4]float32)(unsafe.Pointer(&y0[0]))).SelectFromPair(0, 0, 4, 4, archsimd.LoadFloat32x4((*[4]float32)(unsafe.Pointer(&y1[0]))))
		u23 := archsimd.LoadFloat32x4((*[4]float32)(unsafe.Pointer(&y2[0]))).SelectFromPair(0, 0, 4, 4, archsimd.LoadFloat32x4((*[4]float32)(unsafe.Pointer(&y3[0]))))
		dy := u01.SelectFromPair(0, 2, 4, 6, u23)
		archsimd.Float32x8{}.SetLo(dy).SetHi(dy).Store(&p.dy)
		if i++; i == span {
			break
		}
		y0, y1, y2, y3, p = next(y0), next(y1), next(y2), next(y3), next(p)
	}
	archsimd.ClearAVXUpperBits()
}

// q4KRepackedTokens4Row is one row of dotQ4_KRepackedTokens4AVX2 over span super-blocks
// (w, the tokens' a0..a3 and their prepared p), in gemm's arithmetic or gemv's, from the
// accumulators at accp where more is set (else from zero), which it leaves there; it
// returns the four results so far.
//
// The four tokens' acc and accMin are one vector [acc0..3 | accMin0..3], and a float step
// is one FMA of it with [I0..3 | M0..3] by [d·dy0..3 | dmin·dy0..3]. The integer sums of a
// step run in each token's eight lanes, then sumsOf4 and two 128-bit permutes add them up
// to [I0..3 | M0..3], with M in memory as two halves that add up to it; gemv steps at the
// end of the super-block, gemm after each 64 values (and starts its sums again from zero).
// The mins' sums come from the sub-blocks' activation sums: two tokens a VPMADDWD, for
// each 64 values, then regrouped by chunk.
func q4KRepackedTokens4Row(w, a0, a1, a2, a3 []byte, p *q4KRepackedTokensBlock, accp *[8]float32, gemm, more bool) [4]float32 {
	prefetchNext(w)
	x := (*[144]byte)(w)
	y0, y1, y2, y3 := (*[292]byte)(a0), (*[292]byte)(a1), (*[292]byte)(a2), (*[292]byte)(a3)
	span := len(w) / 144
	// mins holds a super-block's M of the four tokens: gemm's [chunk 0 | chunk 2] and
	// [chunk 1 | chunk 3], and for the last step two halves that add up to it, gemm's
	// [0 | chunk 3] or gemv's.
	var mins [3][8]int32
	var acc archsimd.Float32x8
	if more {
		acc = archsimd.LoadFloat32x8(accp)
	}
	for i := 0; ; {
		// Scales and mins as bytes [sc0..7, m0..7] in both 128-bit halves.
		v := archsimd.LoadUint8x16((*[16]uint8)(x[4:20])).AsInt8x16()
		lo := v.PermuteOrZero(archsimd.LoadInt8x16(&q4KPickLo)).AsInt32x4().ShiftRight(archsimd.LoadInt32x4(&q4KShift)).And(archsimd.LoadInt32x4(&q4KMaskLo))
		packed := v.PermuteOrZero(archsimd.LoadInt8x16(&q4KPickHi)).AsInt32x4().ShiftAllRight(2).And(archsimd.LoadInt32x4(&q4KMaskHi)).Or(lo).AsInt8x16()
		m4 := archsimd.LoadUint8x32(&nibbleMask)
		sc := m4.AsInt8x32().SetLo(packed).SetHi(packed)
		// The mins' sums per 64 values, [t0 c0, t1 c0, t0 c1, t1 c1 | the same of c2, c3],
		// regrouped by chunk: [c0 | c2] and [c1 | c3] of the four tokens.
		mw := sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q4KMinWords)).AsInt16x16()
		m01 := mw.DotProductPairs(archsimd.LoadInt16x16(&p.ys01)).Permute(archsimd.LoadUint32x8(&q4KChunksOfTwo)).AsInt64x4()
		m23 := mw.DotProductPairs(archsimd.LoadInt16x16(&p.ys23)).Permute(archsimd.LoadUint32x8(&q4KChunksOfTwo)).AsInt64x4()
		m02, m13 := m01.InterleaveLoGrouped(m23).AsInt32x8(), m01.InterleaveHiGrouped(m23).AsInt32x8()
		if gemm {
			m02.Store(&mins[0])
			m13.Store(&mins[1])
			m13.And(archsimd.LoadInt32x8(&q4KHighHalf)).Store(&mins[2])
		} else {
			m02.Add(m13).Store(&mins[2])
		}
		dmin := archsimd.LoadFloat32x4((*[4]float32)(f16Table[uint16(x[2])|uint16(x[3])<<8:])).Broadcast1To4()
		scale := f16Lanes(x[0:2]).SetHi(dmin).Mul(archsimd.LoadFloat32x8(&p.dy))

		bits := archsimd.LoadUint8x32((*[32]uint8)(x[16:48]))
		nib := bits.And(m4)
		s := sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[0])).AsInt16x16()
		sum0 := nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y0[4:36])).AsInt8x32()).DotProductPairs(s)
		sum1 := nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y1[4:36])).AsInt8x32()).DotProductPairs(s)
		sum2 := nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y2[4:36])).AsInt8x32()).DotProductPairs(s)
		sum3 := nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y3[4:36])).AsInt8x32()).DotProductPairs(s)
		nib = bits.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4)
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[1])).AsInt16x16()
		sum0 = sum0.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y0[36:68])).AsInt8x32()).DotProductPairs(s))
		sum1 = sum1.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y1[36:68])).AsInt8x32()).DotProductPairs(s))
		sum2 = sum2.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y2[36:68])).AsInt8x32()).DotProductPairs(s))
		sum3 = sum3.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y3[36:68])).AsInt8x32()).DotProductPairs(s))
		if gemm { // chunk 0's float step
			t := sumsOf4(sum0, sum1, sum2, sum3)
			acc = scale.MulAdd(t.Select128FromPair(0, 2, archsimd.LoadInt32x8(&mins[0])).Add(t.Select128FromPair(1, 2, archsimd.Int32x8{})).ConvertToFloat32(), acc)
			sum0, sum1, sum2, sum3 = archsimd.Int32x8{}, archsimd.Int32x8{}, archsimd.Int32x8{}, archsimd.Int32x8{}
		}

		bits = archsimd.LoadUint8x32((*[32]uint8)(x[48:80]))
		nib = bits.And(m4)
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[2])).AsInt16x16()
		sum0 = sum0.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y0[68:100])).AsInt8x32()).DotProductPairs(s))
		sum1 = sum1.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y1[68:100])).AsInt8x32()).DotProductPairs(s))
		sum2 = sum2.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y2[68:100])).AsInt8x32()).DotProductPairs(s))
		sum3 = sum3.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y3[68:100])).AsInt8x32()).DotProductPairs(s))
		nib = bits.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4)
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[3])).AsInt16x16()
		sum0 = sum0.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y0[100:132])).AsInt8x32()).DotProductPairs(s))
		sum1 = sum1.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y1[100:132])).AsInt8x32()).DotProductPairs(s))
		sum2 = sum2.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y2[100:132])).AsInt8x32()).DotProductPairs(s))
		sum3 = sum3.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y3[100:132])).AsInt8x32()).DotProductPairs(s))
		if gemm { // chunk 1's float step
			t := sumsOf4(sum0, sum1, sum2, sum3)
			acc = scale.MulAdd(t.Select128FromPair(0, 2, archsimd.LoadInt32x8(&mins[1])).Add(t.Select128FromPair(1, 2, archsimd.Int32x8{})).ConvertToFloat32(), acc)
			sum0, sum1, sum2, sum3 = archsimd.Int32x8{}, archsimd.Int32x8{}, archsimd.Int32x8{}, archsimd.Int32x8{}
		}

		bits = archsimd.LoadUint8x32((*[32]uint8)(x[80:112]))
		nib = bits.And(m4)
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[4])).AsInt16x16()
		sum0 = sum0.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y0[132:164])).AsInt8x32()).DotProductPairs(s))
		sum1 = sum1.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y1[132:164])).AsInt8x32()).DotProductPairs(s))
		sum2 = sum2.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y2[132:164])).AsInt8x32()).DotProductPairs(s))
		sum3 = sum3.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y3[132:164])).AsInt8x32()).DotProductPairs(s))
		nib = bits.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4)
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[5])).AsInt16x16()
		sum0 = sum0.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y0[164:196])).AsInt8x32()).DotProductPairs(s))
		sum1 = sum1.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y1[164:196])).AsInt8x32()).DotProductPairs(s))
		sum2 = sum2.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y2[164:196])).AsInt8x32()).DotProductPairs(s))
		sum3 = sum3.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y3[164:196])).AsInt8x32()).DotProductPairs(s))
		if gemm { // chunk 2's float step
			t := sumsOf4(sum0, sum1, sum2, sum3)
			acc = scale.MulAdd(t.Select128FromPair(0, 3, archsimd.LoadInt32x8(&mins[0])).Add(t.Select128FromPair(1, 2, archsimd.Int32x8{})).ConvertToFloat32(), acc)
			sum0, sum1, sum2, sum3 = archsimd.Int32x8{}, archsimd.Int32x8{}, archsimd.Int32x8{}, archsimd.Int32x8{}
		}

		bits = archsimd.LoadUint8x32((*[32]uint8)(x[112:144]))
		nib = bits.And(m4)
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[6])).AsInt16x16()
		sum0 = sum0.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y0[196:228])).AsInt8x32()).DotProductPairs(s))
		sum1 = sum1.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y1[196:228])).AsInt8x32()).DotProductPairs(s))
		sum2 = sum2.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y2[196:228])).AsInt8x32()).DotProductPairs(s))
		sum3 = sum3.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y3[196:228])).AsInt8x32()).DotProductPairs(s))
		nib = bits.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4)
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[7])).AsInt16x16()
		sum0 = sum0.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y0[228:260])).AsInt8x32()).DotProductPairs(s))
		sum1 = sum1.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y1[228:260])).AsInt8x32()).DotProductPairs(s))
		sum2 = sum2.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y2[228:260])).AsInt8x32()).DotProductPairs(s))
		sum3 = sum3.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y3[228:260])).AsInt8x32()).DotProductPairs(s))
		// Chunk 3's float step, or gemv's only one.
		t := sumsOf4(sum0, sum1, sum2, sum3)
		m := archsimd.LoadInt32x8(&mins[2])
		acc = scale.MulAdd(t.Select128FromPair(0, 2, m).Add(t.Select128FromPair(1, 3, m)).ConvertToFloat32(), acc)
		if i++; i == span {
			break
		}
		x, y0, y1, y2, y3, p = next(x), next(y0), next(y1), next(y2), next(y3), next(p)
	}
	acc.Store(accp)
	return storeLanes4(acc.GetLo().Sub(acc.GetHi()))
}

// sumsOf4 is [a0-3, b0-3, c0-3, d0-3 | a4-7, b4-7, c4-7, d4-7], each the sum of those lanes,
// as VPHADDD(VPHADDD(a, b), VPHADDD(c, d)) has it, with two-operand shuffles and adds (a
// VPHADDD is three operations on Intel, and takes two cycles on AMD).
func sumsOf4(a, b, c, d archsimd.Int32x8) archsimd.Int32x8 {
	ab := a.InterleaveLoGrouped(b).Add(a.InterleaveHiGrouped(b)).AsInt64x4()
	cd := c.InterleaveLoGrouped(d).Add(c.InterleaveHiGrouped(d)).AsInt64x4()
	return ab.InterleaveLoGrouped(cd).AsInt32x8().Add(ab.InterleaveHiGrouped(cd).AsInt32x8())
}
