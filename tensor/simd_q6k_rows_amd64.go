//go:build goexperiment.simd && amd64

package tensor

import (
	"simd/archsimd"
	"unsafe"
)

// dotQ6_KRowsAVX2 is dotQ6_KAVX2 over len(out) consecutive whole rows of n values against
// one activation vector (dotRowsOne): out[r] = dotQ6_KAVX2(n, row r, a), the same bits. It
// takes the rows two at a time through each block, so that each activation load, the
// activation scale and the bsums serve both rows and the two FMA chains overlap; per row
// the integer lanes, the per-block FMA and the final hsum_float_8 are dotQ6_KAVX2's. The
// offset (32·Σ scale·bsum) starts each row's integer lanes instead of ending them: the lanes
// are exact int32 sums, the same in any order. Two pairs' horizontal sums end together (as
// sumLanes4) in one store of four results; a pair left over is stored alone, and an odd
// last row is dotQ6_KAVX2's.
func dotQ6_KRowsAVX2(n int, rows, a []byte, out []float32) {
	nb := n / qkK
	if nb == 0 || len(out) == 0 {
		clear(out)
		return
	}
	rb := nb * 210
	rows = rows[:len(out)*rb]
	all := rows[:cap(rows)]
	ya := (*[292]byte)(a[:nb*292])
	var held archsimd.Float32x8 // the crossPairs of an even pair, waiting for the next
	r := 0
	for ; r+2 <= len(out); r += 2 {
		// The lines 4 KiB past the pair, as prefetchNext does row by row.
		if lo := r*rb + prefetchAhead; lo < len(all) {
			prefetchLines(unsafe.Pointer(&all[lo]), min(2*rb, len(all)-lo))
		}
		x0, x1, y := (*[210]byte)(rows[r*rb:]), (*[210]byte)(rows[(r+1)*rb:]), ya
		var acc0, acc1 archsimd.Float32x8
		for i := 0; ; {
			m4 := archsimd.LoadUint8x32(&nibbleMask)
			m6 := archsimd.LoadUint8x32(&bits45Mask)
			bsums := archsimd.LoadUint8x32((*[32]uint8)(y[260:292])).AsInt16x16()
			wide0 := archsimd.LoadUint8x16((*[16]uint8)(x0[192:208])).AsInt8x16().ExtendToInt16()
			sum0 := archsimd.Int32x8{}.Sub(wide0.DotProductPairs(bsums).ShiftAllLeft(5))
			sc0 := wide0.Select128FromPair(0, 0, wide0).AsInt8x32()
			wide1 := archsimd.LoadUint8x16((*[16]uint8)(x1[192:208])).AsInt8x16().ExtendToInt16()
			sum1 := archsimd.Int32x8{}.Sub(wide1.DotProductPairs(bsums).ShiftAllLeft(5))
			sc1 := wide1.Select128FromPair(0, 0, wide1).AsInt8x32()

			yv := archsimd.LoadUint8x32((*[32]uint8)(y[4:36])).AsInt8x32()
			qh := archsimd.LoadUint8x32((*[32]uint8)(x0[128:160])).AsInt16x16()
			q := archsimd.LoadUint8x32((*[32]uint8)(x0[0:32])).And(m4).Or(qh.ShiftAllLeft(4).AsUint8x32().And(m6)).DotProductPairsSaturated(yv)
			sum0 = sum0.Add(q.DotProductPairs(sc0.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q6KSpread[0])).AsInt16x16()))
			qh = archsimd.LoadUint8x32((*[32]uint8)(x1[128:160])).AsInt16x16()
			q = archsimd.LoadUint8x32((*[32]uint8)(x1[0:32])).And(m4).Or(qh.ShiftAllLeft(4).AsUint8x32().And(m6)).DotProductPairsSaturated(yv)
			sum1 = sum1.Add(q.DotProductPairs(sc1.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q6KSpread[0])).AsInt16x16()))

			yv = archsimd.LoadUint8x32((*[32]uint8)(y[36:68])).AsInt8x32()
			qh = archsimd.LoadUint8x32((*[32]uint8)(x0[128:160])).AsInt16x16()
			q = archsimd.LoadUint8x32((*[32]uint8)(x0[32:64])).And(m4).Or(qh.ShiftAllLeft(2).AsUint8x32().And(m6)).DotProductPairsSaturated(yv)
			sum0 = sum0.Add(q.DotProductPairs(sc0.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q6KSpread[1])).AsInt16x16()))
			qh = archsimd.LoadUint8x32((*[32]uint8)(x1[128:160])).AsInt16x16()
			q = archsimd.LoadUint8x32((*[32]uint8)(x1[32:64])).And(m4).Or(qh.ShiftAllLeft(2).AsUint8x32().And(m6)).DotProductPairsSaturated(yv)
			sum1 = sum1.Add(q.DotProductPairs(sc1.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q6KSpread[1])).AsInt16x16()))

			yv = archsimd.LoadUint8x32((*[32]uint8)(y[68:100])).AsInt8x32()
			qh = archsimd.LoadUint8x32((*[32]uint8)(x0[128:160])).AsInt16x16()
			q = archsimd.LoadUint8x32((*[32]uint8)(x0[0:32])).AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4).Or(qh.AsUint8x32().And(m6)).DotProductPairsSaturated(yv)
			sum0 = sum0.Add(q.DotProductPairs(sc0.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q6KSpread[2])).AsInt16x16()))
			qh = archsimd.LoadUint8x32((*[32]uint8)(x1[128:160])).AsInt16x16()
			q = archsimd.LoadUint8x32((*[32]uint8)(x1[0:32])).AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4).Or(qh.AsUint8x32().And(m6)).DotProductPairsSaturated(yv)
			sum1 = sum1.Add(q.DotProductPairs(sc1.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q6KSpread[2])).AsInt16x16()))

			yv = archsimd.LoadUint8x32((*[32]uint8)(y[100:132])).AsInt8x32()
			qh = archsimd.LoadUint8x32((*[32]uint8)(x0[128:160])).AsInt16x16()
			q = archsimd.LoadUint8x32((*[32]uint8)(x0[32:64])).AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4).Or(qh.ShiftAllRight(2).AsUint8x32().And(m6)).DotProductPairsSaturated(yv)
			sum0 = sum0.Add(q.DotProductPairs(sc0.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q6KSpread[3])).AsInt16x16()))
			qh = archsimd.LoadUint8x32((*[32]uint8)(x1[128:160])).AsInt16x16()
			q = archsimd.LoadUint8x32((*[32]uint8)(x1[32:64])).AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4).Or(qh.ShiftAllRight(2).AsUint8x32().And(m6)).DotProductPairsSaturated(yv)
			sum1 = sum1.Add(q.DotProductPairs(sc1.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q6KSpread[3])).AsInt16x16()))

			sc0 = wide0.Select128FromPair(1, 1, wide0).AsInt8x32()
			sc1 = wide1.Select128FromPair(1, 1, wide1).AsInt8x32()

			yv = archsimd.LoadUint8x32((*[32]uint8)(y[132:164])).AsInt8x32()
			qh = archsimd.LoadUint8x32((*[32]uint8)(x0[160:192])).AsInt16x16()
			q = archsimd.LoadUint8x32((*[32]uint8)(x0[64:96])).And(m4).Or(qh.ShiftAllLeft(4).AsUint8x32().And(m6)).DotProductPairsSaturated(yv)
			sum0 = sum0.Add(q.DotProductPairs(sc0.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q6KSpread[0])).AsInt16x16()))
			qh = archsimd.LoadUint8x32((*[32]uint8)(x1[160:192])).AsInt16x16()
			q = archsimd.LoadUint8x32((*[32]uint8)(x1[64:96])).And(m4).Or(qh.ShiftAllLeft(4).AsUint8x32().And(m6)).DotProductPairsSaturated(yv)
			sum1 = sum1.Add(q.DotProductPairs(sc1.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q6KSpread[0])).AsInt16x16()))

			yv = archsimd.LoadUint8x32((*[32]uint8)(y[164:196])).AsInt8x32()
			qh = archsimd.LoadUint8x32((*[32]uint8)(x0[160:192])).AsInt16x16()
			q = archsimd.LoadUint8x32((*[32]uint8)(x0[96:128])).And(m4).Or(qh.ShiftAllLeft(2).AsUint8x32().And(m6)).DotProductPairsSaturated(yv)
			sum0 = sum0.Add(q.DotProductPairs(sc0.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q6KSpread[1])).AsInt16x16()))
			qh = archsimd.LoadUint8x32((*[32]uint8)(x1[160:192])).AsInt16x16()
			q = archsimd.LoadUint8x32((*[32]uint8)(x1[96:128])).And(m4).Or(qh.ShiftAllLeft(2).AsUint8x32().And(m6)).DotProductPairsSaturated(yv)
			sum1 = sum1.Add(q.DotProductPairs(sc1.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q6KSpread[1])).AsInt16x16()))

			yv = archsimd.LoadUint8x32((*[32]uint8)(y[196:228])).AsInt8x32()
			qh = archsimd.LoadUint8x32((*[32]uint8)(x0[160:192])).AsInt16x16()
			q = archsimd.LoadUint8x32((*[32]uint8)(x0[64:96])).AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4).Or(qh.AsUint8x32().And(m6)).DotProductPairsSaturated(yv)
			sum0 = sum0.Add(q.DotProductPairs(sc0.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q6KSpread[2])).AsInt16x16()))
			qh = archsimd.LoadUint8x32((*[32]uint8)(x1[160:192])).AsInt16x16()
			q = archsimd.LoadUint8x32((*[32]uint8)(x1[64:96])).AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4).Or(qh.AsUint8x32().And(m6)).DotProductPairsSaturated(yv)
			sum1 = sum1.Add(q.DotProductPairs(sc1.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q6KSpread[2])).AsInt16x16()))

			yv = archsimd.LoadUint8x32((*[32]uint8)(y[228:260])).AsInt8x32()
			qh = archsimd.LoadUint8x32((*[32]uint8)(x0[160:192])).AsInt16x16()
			q = archsimd.LoadUint8x32((*[32]uint8)(x0[96:128])).AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4).Or(qh.ShiftAllRight(2).AsUint8x32().And(m6)).DotProductPairsSaturated(yv)
			sum0 = sum0.Add(q.DotProductPairs(sc0.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q6KSpread[3])).AsInt16x16()))
			qh = archsimd.LoadUint8x32((*[32]uint8)(x1[160:192])).AsInt16x16()
			q = archsimd.LoadUint8x32((*[32]uint8)(x1[96:128])).AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4).Or(qh.ShiftAllRight(2).AsUint8x32().And(m6)).DotProductPairsSaturated(yv)
			sum1 = sum1.Add(q.DotProductPairs(sc1.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q6KSpread[3])).AsInt16x16()))

			yd := f32Lanes(y[0:16])
			acc0 = yd.Mul(f16Lanes(x0[208:210])).MulAdd(sum0.ConvertToFloat32(), acc0)
			acc1 = yd.Mul(f16Lanes(x1[208:210])).MulAdd(sum1.ConvertToFloat32(), acc1)
			if i++; i == nb {
				break
			}
			x0, x1, y = next(x0), next(x1), next(y)
		}
		h := crossPairs(acc0.GetLo().Add(acc0.GetHi()), acc1.GetLo().Add(acc1.GetHi()))
		if r&2 == 0 {
			held = held.SetLo(h)
			continue
		}
		held.GetLo().AddPairs(h).Store((*[4]float32)(out[r-2 : r+2]))
	}
	if r&2 != 0 {
		h := held.GetLo()
		s := storeLanes4(h.AddPairs(h))
		out[r-2], out[r-1] = s[0], s[1]
	} else {
		archsimd.ClearAVXUpperBits()
	}
	if r < len(out) {
		out[r] = dotQ6_KAVX2(n, rows[r*rb:], a)
	}
}
