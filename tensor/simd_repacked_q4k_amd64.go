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
