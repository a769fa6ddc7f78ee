//go:build goexperiment.simd && amd64

package tensor

import (
	"simd/archsimd"
	"unsafe"
)

// llama.cpp's repacked arithmetic for Q4_0, IQ4_NL and MXFP4 (packed.go) on AVX2, for the
// CPUs without AVX-512 VNNI: per row and 32-value block the exact int32 sum of the
// weights' values times the activation bytes, then acc = float(sum)·(d_w·d_y) + acc, one
// FMA a block. These are the one-token kernels (repackedKernels); they read the weights
// where they lie.
//
// Eight rows at a time, row k in float lane k. A 256-bit register holds a block's 16
// nibble bytes of row k (low half) and of row k+4 (high half); its low nibbles are
// values 0-15 of both rows, its high nibbles values 16-31, multiplied (VPMADDUBSW) by
// activations with values 0-15 (16-31) in both halves. Adjacent lanes are then added by
// three horizontal adds, rows 0|4 with 1|5, 2|6 with 3|7, then those two, which leaves
// [r0 r1 r2 r3 | r4 r5 r6 r7] with no cross-lane permute. The eight scales come through
// the scale tables (f16Table, e8m0Table) as integer loads, two to a 64-bit lane.
//
// Q4_0's and MXFP4's value bytes are unsigned (the nibble; the doubled E2M1 value plus 12)
// and offset·y is taken off once a block for all rows. Every int16 lane then holds four
// products of at most 12·128 (VPMADDUBSW's pairs, at most 24·128·2, never saturate),
// so the horizontal adds run on int16 lanes (VPHADDW: sums of 16 products, at most
// 24576) and one VPMADDWD widens the result. IQ4_NL's levels (-127..113) would saturate as
// unsigned bytes; their signs go onto the activations instead: VPMADDUBSW of |y| by
// sign(y)·level, exact for every activation byte, -128 included (the other way round, as
// dotIQ4_NLAVX2 has it, cannot give -(-128); the quantizer never writes -128, but
// blockwiseDot takes any byte), and VPMADDWD before the adds.
//
// The three formats are one generic kernel, compiled once per format: Go stencils a
// generic function for each distinct underlying type of its type parameter, so a switch on
// the parameter's size is settled at compile time and every format gets its own constant
// block size, scale table and value decoding (a method of the parameter, or a format
// argument, would be an indirect call or a run-time branch in the loop, and the loop has
// no registers to spare for the latter's values).
type (
	repackedQ4_0   [1]byte
	repackedIQ4_NL [2]byte
	repackedMXFP4  [3]byte
)

type repackedLegacy interface {
	repackedQ4_0 | repackedIQ4_NL | repackedMXFP4
}

// dotQ4_0RepackedRowsAVX2, dotIQ4_NLRepackedRowsAVX2 and dotMXFP4RepackedRowsAVX2 are
// repackedKernels for AVX2: out[r] is row r of rows (len(out) whole rows of n values)
// times the Q8_0 activations a, in the repacked arithmetic.
func dotQ4_0RepackedRowsAVX2(n int, rows, a []byte, out []float32) {
	dotRepackedLegacyAVX2[repackedQ4_0](n, rows, a, out)
}

func dotIQ4_NLRepackedRowsAVX2(n int, rows, a []byte, out []float32) {
	dotRepackedLegacyAVX2[repackedIQ4_NL](n, rows, a, out)
}

func dotMXFP4RepackedRowsAVX2(n int, rows, a []byte, out []float32) {
	dotRepackedLegacyAVX2[repackedMXFP4](n, rows, a, out)
}

// repackedFormat is F's format: blockBytes, where its nibbles start in a block (qsOff),
// and whether it is MXFP4 (a byte scale through e8m0Table, the values through
// fp4Shifted) or IQ4_NL (signed levels); all constants in each instantiation.
func repackedFormat[F repackedLegacy]() (blockBytes, qsOff uintptr, mxfp4, iq4nl bool) {
	switch unsafe.Sizeof(*new(F)) {
	case unsafe.Sizeof(repackedMXFP4{}):
		return 17, 1, true, false
	case unsafe.Sizeof(repackedIQ4_NL{}):
		return 18, 2, false, true
	}
	return 18, 2, false, false
}

// dotRepackedLegacyAVX2 runs the rows eight at a time. A last group of fewer takes the
// last eight rows (some of them again); fewer than eight rows in all are copied to eight
// with zero rows after them.
//
// A group's blocks run in chunks, and before each chunk every row asks for the bytes its
// lane will read repackedAhead blocks later (further in its row, or in the same row of a
// later group) to be fetched into L2, as prefetchNext does for one row: the hardware
// prefetcher stops at each 4 KiB page, and eight rows at a time are eight streams.
// Measured on a 2-core AMD EPYC (Zen 4) VM (Q4_0, one thread): a 75 MB matrix (DRAM)
// 10 -> 14 GB/s, one in L2 or L3 loses ~9% (21 -> 19 GB/s); one prefetch of the next
// group's bytes a chunk, in one range, gained less (12-13 GB/s), and less the larger the
// chunk.
//
// No vector value lives in this function: the chunks accumulate in out (or t) and end
// with VZEROUPPER, so the zeroing here and the legacy-SSE XORPS that re-zeroes X15 after
// each call of the assembly prefetchLines run with clean upper halves.
func dotRepackedLegacyAVX2[F repackedLegacy](n int, rows, a []byte, out []float32) {
	bs, qsOff, _, _ := repackedFormat[F]()
	nb, count := n/qk32, len(out)
	if count == 0 {
		return
	}
	if nb == 0 {
		clear(out)
		return
	}
	rb := nb * int(bs)
	all := rows[:cap(rows)]
	rows = rows[:count*rb]
	y := unsafe.Pointer(&a[:nb*34][0])
	if count < 8 {
		padded := make([]byte, 8*rb)
		copy(padded, rows)
		var t [8]float32
		repackedRows8[F](&t, unsafe.Add(unsafe.Pointer(&padded[0]), qsOff), uintptr(rb), y, nb)
		copy(out, t[:count])
		return
	}
	size := min(repackedChunk, nb) * int(bs) // the bytes a row asks for a chunk
	for g := 0; g < count; g += 8 {
		g = min(g, count-8)
		acc := (*[8]float32)(out[g : g+8])
		*acc = [8]float32{}
		for b := 0; b < nb; b += repackedChunk {
			t := b + repackedAhead
			prefetchRows8(all, (g+t/nb*8)*rb+t%nb*int(bs), rb, size)
			p := unsafe.Add(unsafe.Pointer(&rows[g*rb+b*int(bs)]), qsOff)
			repackedRows8[F](acc, p, uintptr(rb), unsafe.Add(y, 34*b), min(repackedChunk, nb-b))
		}
	}
}

// repackedChunk and repackedAhead are dotRepackedLegacyAVX2's chunk of blocks and how
// many blocks ahead it prefetches (32 to 128 ahead measured the same; chunks of 16 lost
// another 7% in cache).
const repackedChunk, repackedAhead = 32, 64

// prefetchRows8 asks for size bytes at each of eight rows rb bytes apart from all[at],
// as far as all reaches.
func prefetchRows8(all []byte, at, rb, size int) {
	for k := range 8 {
		if at+k*rb+size <= len(all) {
			prefetchLines(unsafe.Pointer(&all[at+k*rb]), size)
		}
	}
}

// repackedRows8 adds to acc eight rows, rb bytes apart from p (the nibbles of row 0's
// first block), times the nb blocks of activations at y: row k to acc[k]. It ends with
// the upper halves of the vector registers cleared.
func repackedRows8[F repackedLegacy](acc *[8]float32, p unsafe.Pointer, rb uintptr, y unsafe.Pointer, nb int) {
	bs, _, mxfp4, iq4nl := repackedFormat[F]()
	sum := archsimd.LoadFloat32x8(acc)
	rb4 := 4 * rb
	for i := 0; ; {
		yv := archsimd.LoadInt8x32((*[32]int8)(unsafe.Add(y, 2)))
		ylo := yv.SetHi(archsimd.LoadInt8x16((*[16]int8)(unsafe.Add(y, 2))))
		yhi := yv.SetLo(archsimd.LoadInt8x16((*[16]int8)(unsafe.Add(y, 18))))
		var sums archsimd.Int32x8
		var dlo, dhi archsimd.Uint64x2
		if iq4nl {
			ua, ub := ylo.Abs().AsUint8x32(), yhi.Abs().AsUint8x32()
			s0, d0, d4 := signedPair(p, rb4, ylo, yhi, ua, ub)
			q := unsafe.Add(p, rb)
			s1, d1, d5 := signedPair(q, rb4, ylo, yhi, ua, ub)
			q = unsafe.Add(q, rb)
			s2, d2, d6 := signedPair(q, rb4, ylo, yhi, ua, ub)
			q = unsafe.Add(q, rb)
			s3, d3, d7 := signedPair(q, rb4, ylo, yhi, ua, ub)
			sums = s0.AddPairsGrouped(s1).AddPairsGrouped(s2.AddPairsGrouped(s3))
			dlo = dlo.SetElem(0, pack2(d0, d1)).SetElem(1, pack2(d2, d3))
			dhi = dhi.SetElem(0, pack2(d4, d5)).SetElem(1, pack2(d6, d7))
		} else {
			off := archsimd.LoadUint8x32(&eights)
			if mxfp4 {
				off = archsimd.LoadUint8x32(&twelves)
			}
			c := off.DotProductPairsSaturated(ylo).Add(off.DotProductPairsSaturated(yhi))
			s0, d0, d4 := offsetPair(p, rb4, mxfp4, ylo, yhi, c)
			q := unsafe.Add(p, rb)
			s1, d1, d5 := offsetPair(q, rb4, mxfp4, ylo, yhi, c)
			q = unsafe.Add(q, rb)
			s2, d2, d6 := offsetPair(q, rb4, mxfp4, ylo, yhi, c)
			q = unsafe.Add(q, rb)
			s3, d3, d7 := offsetPair(q, rb4, mxfp4, ylo, yhi, c)
			sums = s0.AddPairsGrouped(s1).AddPairsGrouped(s2.AddPairsGrouped(s3)).DotProductPairs(archsimd.LoadInt16x16(&ones16))
			dlo = dlo.SetElem(0, pack2(d0, d1)).SetElem(1, pack2(d2, d3))
			dhi = dhi.SetElem(0, pack2(d4, d5)).SetElem(1, pack2(d6, d7))
		}
		d := archsimd.Uint64x4{}.SetLo(dlo).SetHi(dhi).AsFloat32x8()
		dy := archsimd.LoadFloat32x4((*[4]float32)(f16Table[*(*uint16)(y):])).Broadcast1To8()
		sum = sums.ConvertToFloat32().MulAdd(d.Mul(dy), sum)
		if i++; i == nb {
			break
		}
		p, y = unsafe.Add(p, bs), unsafe.Add(y, 34)
	}
	sum.Store(acc)
	archsimd.ClearAVXUpperBits()
}

// scaleBits is the scale, as float32 bits, of the block whose nibbles are at qs: an f16
// before them, or MXFP4's E8M0 byte.
func scaleBits(qs unsafe.Pointer, mxfp4 bool) uint32 {
	if mxfp4 {
		return *(*uint32)(unsafe.Pointer(&e8m0Table[*(*uint8)(unsafe.Add(qs, -1))]))
	}
	return *(*uint32)(unsafe.Pointer(&f16Table[*(*uint16)(unsafe.Add(qs, -2))]))
}

// pack2 is the scale bits lo and hi as the two 32-bit halves of a 64-bit lane: two
// scalar operations instead of a second VPINSRD (two vector ones).
func pack2(lo, hi uint32) uint64 { return uint64(hi)<<32 | uint64(lo) }

// offsetPair is Σv·y of a block of rows p and p+rb4 (p their nibbles) in eight int16 lanes
// a row, each a sum of four products, and the two rows' scales: the value bytes (the
// nibble, or MXFP4's fp4Shifted) times y, less c (the offset times y). The first row's
// values 0-15 and 16-31 are in the low 128 bits. The 32-byte load at p reads 16 bytes past
// the nibbles, inside the next block or row.
func offsetPair(p unsafe.Pointer, rb4 uintptr, mxfp4 bool, ylo, yhi archsimd.Int8x32, c archsimd.Int16x16) (archsimd.Int16x16, uint32, uint32) {
	q := unsafe.Add(p, rb4)
	w := archsimd.LoadUint8x32((*[32]uint8)(p)).SetHi(archsimd.LoadUint8x16((*[16]uint8)(q)))
	lo, hi := w.And(archsimd.LoadUint8x32(&nibbleMask)), w.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(archsimd.LoadUint8x32(&nibbleMask))
	if mxfp4 {
		lut := archsimd.LoadInt8x32(&fp4Shifted)
		lo, hi = lut.PermuteOrZeroGrouped(lo.AsInt8x32()).AsUint8x32(), lut.PermuteOrZeroGrouped(hi.AsInt8x32()).AsUint8x32()
	}
	return lo.DotProductPairsSaturated(ylo).Add(hi.DotProductPairsSaturated(yhi)).Sub(c), scaleBits(p, mxfp4), scaleBits(q, mxfp4)
}

// signedPair is offsetPair for IQ4_NL's signed levels, in four int32 lanes a row: |y|
// (ua, ub) times sign(y)·level.
func signedPair(p unsafe.Pointer, rb4 uintptr, ylo, yhi archsimd.Int8x32, ua, ub archsimd.Uint8x32) (archsimd.Int32x8, uint32, uint32) {
	q := unsafe.Add(p, rb4)
	w := archsimd.LoadUint8x32((*[32]uint8)(p)).SetHi(archsimd.LoadUint8x16((*[16]uint8)(q)))
	lut := archsimd.LoadInt8x32(&iq4Levels)
	lo, hi := w.And(archsimd.LoadUint8x32(&nibbleMask)), w.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(archsimd.LoadUint8x32(&nibbleMask))
	vlo, vhi := lut.PermuteOrZeroGrouped(lo.AsInt8x32()).CopySign(ylo), lut.PermuteOrZeroGrouped(hi.AsInt8x32()).CopySign(yhi)
	ones := archsimd.LoadInt16x16(&ones16)
	return ua.DotProductPairsSaturated(vlo).DotProductPairs(ones).Add(ub.DotProductPairsSaturated(vhi).DotProductPairs(ones)), scaleBits(p, false), scaleBits(q, false)
}
