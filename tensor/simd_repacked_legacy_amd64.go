//go:build goexperiment.simd && amd64

package tensor

import (
	"encoding/binary"
	"simd/archsimd"
	"unsafe"
)

// llama.cpp's repacked arithmetic for Q4_0, IQ4_NL and MXFP4 on AVX2 (no VNNI): per row and
// 32-value block the exact int32 sum of the weights' values times the activation bytes,
// then acc = float(sum)·(d_w·d_y) + acc, one FMA a block (see packed.go).
//
// Eight rows at a time, one row a float lane. A 256-bit register holds the 16 nibble bytes
// of a block of row k (low half) and of row k+4 (high half): its low nibbles are values
// 0-15 of both rows, its high nibbles values 16-31, against activations with values 0-15
// (16-31) in both halves. Each row's four int32 lanes are then added up by three VPHADDD
// (rows 0|4 and 1|5, 2|6 and 3|7, then those two) into [r0 r1 r2 r3 | r4 r5 r6 r7], with
// no cross-lane permute. The rows' scales are gathered through the scale table (f16Table,
// e8m0Table) by integer indices and vector loads.
//
// Q4_0 and MXFP4 take their values as unsigned bytes (the nibble, or the doubled E2M1 value
// plus 12), and offset·Σy is taken off once a block for all eight rows, in int16 before
// VPMADDWD (every int16 then holds four products of at most 12·128). IQ4_NL's levels
// (-127..113) do not fit that: its signs go onto the activations' (VPMADDUBSW of |y| by
// sign(y)·v), which is exact for every activation byte, -128 included.

// legacyRepacked describes one of the three formats to dotLegacyRepackedAVX2.
type legacyRepacked struct {
	blockBytes uintptr // 18, or 17 for MXFP4
	qsOff      uintptr // where the 16 nibble bytes start in a block
	scaleMask  uint16  // of the little-endian 16 bits at the block's start: the scale table's index
	scales     unsafe.Pointer
	// levels is a VPSHUFB table from nibble to value byte (in both halves), or nil where
	// the nibble is the value (Q4_0); offset what the value bytes exceed the values by
	// (nil for IQ4_NL, whose levels are signed).
	levels *[32]int8
	offset *[32]uint8
}

var (
	repackedQ4_0   = legacyRepacked{blockBytes: 18, qsOff: 2, scaleMask: 0xffff, offset: &eights}
	repackedIQ4_NL = legacyRepacked{blockBytes: 18, qsOff: 2, scaleMask: 0xffff, levels: &iq4Levels}
	repackedMXFP4  = legacyRepacked{blockBytes: 17, qsOff: 1, scaleMask: 0xff, levels: &fp4Shifted, offset: &twelves}
)

func init() {
	repackedQ4_0.scales = unsafe.Pointer(&f16Table[0])
	repackedIQ4_NL.scales = unsafe.Pointer(&f16Table[0])
	repackedMXFP4.scales = unsafe.Pointer(&e8m0Table[0])
}

// dotQ4_0RepackedRowsAVX2, dotIQ4_NLRepackedRowsAVX2 and dotMXFP4RepackedRowsAVX2 are
// repackedKernels for AVX2: out[r] is row r of rows (len(out) whole rows of n values)
// times the Q8_0 activations a, in the repacked arithmetic.
func dotQ4_0RepackedRowsAVX2(n int, rows, a []byte, out []float32) {
	dotLegacyRepackedAVX2(&repackedQ4_0, n, rows, a, out)
}

func dotIQ4_NLRepackedRowsAVX2(n int, rows, a []byte, out []float32) {
	dotLegacyRepackedAVX2(&repackedIQ4_NL, n, rows, a, out)
}

func dotMXFP4RepackedRowsAVX2(n int, rows, a []byte, out []float32) {
	dotLegacyRepackedAVX2(&repackedMXFP4, n, rows, a, out)
}

// dotLegacyRepackedAVX2 runs the rows eight at a time; a last group of fewer repeats its
// last row in the missing lanes and stores only its own.
func dotLegacyRepackedAVX2(f *legacyRepacked, n int, rows, a []byte, out []float32) {
	nb := n / qk32
	count := len(out)
	if count == 0 {
		return
	}
	if nb == 0 {
		clear(out)
		return
	}
	bs, qo, mask, tbl := f.blockBytes, f.qsOff, f.scaleMask, f.scales
	rb := nb * int(bs)
	rows = rows[:count*rb]
	ya := unsafe.Pointer(&a[:nb*34][0])
	signed := f.offset == nil
	for g := 0; g < count; g += 8 {
		last := count - 1 - g
		row := func(k int) unsafe.Pointer { return unsafe.Pointer(&rows[(g+min(k, last))*rb]) }
		p0, p1, p2, p3 := row(0), row(1), row(2), row(3)
		p4, p5, p6, p7 := row(4), row(5), row(6), row(7)
		y := ya
		var acc archsimd.Float32x8
		for i := 0; ; {
			yv := archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(y, 2)))
			ylo, yhi := yv.Select128FromPair(0, 0, yv), yv.Select128FromPair(1, 1, yv)
			var c archsimd.Int16x16
			if !signed {
				off := archsimd.LoadUint8x32(f.offset)
				c = off.DotProductPairsSaturated(ylo.AsInt8x32()).Add(off.DotProductPairsSaturated(yhi.AsInt8x32()))
			}
			s0 := legacyRepackedPair(f, signed, p0, p4, qo, ylo, yhi, c)
			s1 := legacyRepackedPair(f, signed, p1, p5, qo, ylo, yhi, c)
			h01 := s0.AddPairsGrouped(s1)
			s2 := legacyRepackedPair(f, signed, p2, p6, qo, ylo, yhi, c)
			s3 := legacyRepackedPair(f, signed, p3, p7, qo, ylo, yhi, c)
			sums := h01.AddPairsGrouped(s2.AddPairsGrouped(s3))

			d04 := scalePair(tbl, mask, p0, p4)
			d15 := scalePair(tbl, mask, p1, p5)
			d26 := scalePair(tbl, mask, p2, p6)
			d37 := scalePair(tbl, mask, p3, p7)
			d := d04.InterleaveLoGrouped(d15).AsInt64x4().InterleaveLoGrouped(d26.InterleaveLoGrouped(d37).AsInt64x4()).AsFloat32x8()
			dy := f16Lanes((*[34]byte)(y)[0:2])
			acc = sums.ConvertToFloat32().MulAdd(d.Mul(dy), acc)
			if i++; i == nb {
				break
			}
			p0, p1, p2, p3 = unsafe.Add(p0, bs), unsafe.Add(p1, bs), unsafe.Add(p2, bs), unsafe.Add(p3, bs)
			p4, p5, p6, p7 = unsafe.Add(p4, bs), unsafe.Add(p5, bs), unsafe.Add(p6, bs), unsafe.Add(p7, bs)
			y = unsafe.Add(y, 34)
		}
		if last >= 7 {
			acc.Store((*[8]float32)(out[g : g+8]))
			continue
		}
		var t [8]float32
		acc.Store(&t)
		archsimd.ClearAVXUpperBits()
		copy(out[g:], t[:last+1])
		return
	}
	archsimd.ClearAVXUpperBits()
}

// legacyRepackedPair is one block of rows p (low half) and q (high half): four int32 lanes
// of each row's sum.
func legacyRepackedPair(f *legacyRepacked, signed bool, p, q unsafe.Pointer, qo uintptr, ylo, yhi archsimd.Uint8x32, c archsimd.Int16x16) archsimd.Int32x8 {
	m4 := archsimd.LoadUint8x32(&nibbleMask)
	w := m4.SetLo(archsimd.LoadUint8x16((*[16]uint8)(unsafe.Add(p, qo)))).SetHi(archsimd.LoadUint8x16((*[16]uint8)(unsafe.Add(q, qo))))
	lo := w.And(m4)
	hi := w.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4)
	if f.levels != nil {
		lut := archsimd.LoadInt8x32(f.levels)
		lo = lut.PermuteOrZeroGrouped(lo.AsInt8x32()).AsUint8x32()
		hi = lut.PermuteOrZeroGrouped(hi.AsInt8x32()).AsUint8x32()
	}
	ones := archsimd.LoadInt16x16(&ones16)
	if signed {
		plo := ylo.AsInt8x32().Abs().AsUint8x32().DotProductPairsSaturated(lo.AsInt8x32().CopySign(ylo.AsInt8x32()))
		phi := yhi.AsInt8x32().Abs().AsUint8x32().DotProductPairsSaturated(hi.AsInt8x32().CopySign(yhi.AsInt8x32()))
		return plo.DotProductPairs(ones).Add(phi.DotProductPairs(ones))
	}
	p16 := lo.DotProductPairsSaturated(ylo.AsInt8x32()).Add(hi.DotProductPairsSaturated(yhi.AsInt8x32())).Sub(c)
	return p16.DotProductPairs(ones)
}

// scalePair is the scales of the blocks at p (lane 0) and q (lane 4), as int32 bits.
func scalePair(tbl unsafe.Pointer, mask uint16, p, q unsafe.Pointer) archsimd.Int32x8 {
	hp := uintptr(binary.LittleEndian.Uint16((*[2]byte)(p)[:]) & mask)
	hq := uintptr(binary.LittleEndian.Uint16((*[2]byte)(q)[:]) & mask)
	return archsimd.Int32x8{}.SetLo(archsimd.LoadInt32x4((*[4]int32)(unsafe.Add(tbl, 4*hp)))).SetHi(archsimd.LoadInt32x4((*[4]int32)(unsafe.Add(tbl, 4*hq))))
}
