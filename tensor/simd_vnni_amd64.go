//go:build goexperiment.simd && amd64

package tensor

import (
	"encoding/binary"
	"simd/archsimd"
	"unsafe"
)

// One-token Q4_K and Q6_K dot products on AVX-512 with VNNI (simd_vnni_amd64.s), for CPUs
// that have them (Intel since Ice Lake, AMD since Zen 4). Decode is bound by these two
// kernels: on the build machine a Qwen3-30B-A3B expert mat-vec reached 13.4 GB/s against a
// 27.5 GB/s stream read with the AVX2 kernels, so the cores, not the memory, set the pace.
// archsimd has neither VPDPWSSD nor 512-bit integer code the register allocator handles
// well, hence assembly.
//
// Both kernels give the AVX2 kernels' bits (TestVNNIMatchesAVX2): they compute the same
// exact integers per 32-bit lane — a 512-bit vector holds two 32-value sub-blocks (or four
// 16-value ones), VPMADDUBSW pairs the products as before, and VPDPWSSD multiplies each pair
// sum by its sub-block scale and adds it in one step where AVX2 needed VPMADDWD and VPADDD —
// then fold the lanes to eight and scale and add them in the AVX2 kernels' float order.

// useVNNI is whether the CPU (and the OS, for the 512-bit state) supports the kernels;
// useGFNI whether it also has GFNI, which splits Q4_K's nibbles in one instruction.
var (
	useVNNI = archsimd.X86.AVX512() && archsimd.X86.AVX512VNNI()
	useGFNI = useVNNI && archsimd.X86.AVX512GFNI()
	// useQ4KRows4: the four-row Q4_K kernel also needs VBMI (VPERMB).
	useQ4KRows4 = useGFNI && archsimd.X86.AVX512VBMI()
)

// Constant vectors of the assembly kernels (loaded once per call).
var (
	// highHalfShift4 shifts the words of the upper 256 bits right by 4 (VPSRLVW): a Q4_K
	// chunk broadcast to both halves gives its low nibbles (sub-block 2c) below and its high
	// nibbles (2c+1) above.
	highHalfShift4 = wordHalves(0, 4)
	// nibbleMatrix is the GFNI version: one 8×8 bit matrix per 64-bit lane for
	// VGF2P8AFFINEQB, whose result bit i is the parity of the byte and matrix byte 7-i.
	// The lower four lanes keep bits 0-3 (matrix bytes 7..4 select bits 0..3), the upper
	// four move bits 4-7 to 0-3.
	nibbleMatrix = [8]uint64{lowNibble, lowNibble, lowNibble, lowNibble, highNibble, highNibble, highNibble, highNibble}
	// q4KScaleBytes[c] makes VPSHUFB widen scale byte 2c of a block to the lower 16 words
	// and 2c+1 to the upper 16 (the high byte of each word from index 0x80: zero), from
	// the block's sixteen [scales, mins] bytes repeated in each 128-bit lane. (A VPERMW
	// from the scales widened to words did the same; with VPSHUFB the one-token kernel runs
	// 10% faster on cache-hot rows.)
	q4KScaleBytes = func() (idx [4][64]byte) {
		for c := range idx {
			for i := range 32 {
				idx[c][2*i] = byte(2*c + i/16)
				idx[c][2*i+1] = 0x80
			}
		}
		return idx
	}()
	// q4KMinBytes makes VPSHUFB put a block's mins (bytes 8-15 of its sixteen, repeated
	// in every 128-bit lane) as words in pairs, m0 m0 m1 m1 … m7 m7, in each 256-bit half:
	// each meets the two bsums of its 32 values.
	q4KMinBytes = func() (idx [64]int8) {
		for i := range 32 {
			idx[2*i], idx[2*i+1] = int8(8+i%16/2), -128 // 0x80: a zero high byte
		}
		return idx
	}()
	// q4KDLanes[b] makes VPERMPS spread block b's d and dmin (lanes 2b and 2b+1 of the
	// converted F16 pairs) to [d ×8, dmin ×8].
	q4KDLanes = func() (idx [2][16]uint32) {
		for b := range idx {
			for i := range idx[b] {
				idx[b][i] = uint32(2*b + i/8)
			}
		}
		return idx
	}()
	// q4KPairLanes makes VPERMPS spread a pair of blocks' [dA, dminA, dB, dminB] to
	// [dA ×4, dB ×4, dminA ×4, dminB ×4], the repacked one-token kernel's lanes.
	q4KPairLanes = [16]uint32{0, 0, 0, 0, 2, 2, 2, 2, 1, 1, 1, 1, 3, 3, 3, 3}
	// The four-row kernel's constants (dotQ4_KRepackedRows4GFNI). q4K4Decode is the
	// scale decoding's five vectors (q4KPickLo, q4KShift, q4KMaskLo, q4KPickHi, q4KMaskHi)
	// repeated in the four 128-bit lanes, for memory operands.
	q4K4Decode = func() (v [5][64]byte) {
		for i, c := range [5]any{q4KPickLo, q4KShift, q4KMaskLo, q4KPickHi, q4KMaskHi} {
			var lane [16]byte
			if _, err := binary.Encode(lane[:], binary.LittleEndian, c); err != nil {
				panic(err)
			}
			for l := range 4 {
				copy(v[i][16*l:], lane[:])
			}
		}
		return v
	}()
	// q4K4ScaleWords[2r+p] makes a zero-masked VPERMB put row r's scales (bytes 0-7 of lane
	// r of the decoded scales) as words where the packed dword sums of half p (sub-blocks
	// 4p to 4p+3) meet them: lanes 0 and 1 hold sub-blocks 4p and 4p+1 four words each,
	// lanes 2 and 3 sub-blocks 4p+2 and 4p+3. (The odd bytes are masked off.)
	q4K4ScaleWords = func() (idx [8][64]byte) {
		for r := range 4 {
			for p := range 2 {
				for i := range 32 {
					lane, k := i/8, i%8
					idx[2*r+p][2*i] = byte(16*r + 4*p + 2*(lane/2) + k/4)
				}
			}
		}
		return idx
	}()
	// q4K4MinWords[h] makes VPSHUFB widen mins 4h to 4h+3 of each lane's row to word pairs
	// (m m, one per bsum of its 32 values).
	q4K4MinWords = func() (idx [2][64]byte) {
		for h := range idx {
			for i := range 32 {
				idx[h][2*i], idx[h][2*i+1] = byte(8+4*h+i%8/2), 0x80
			}
		}
		return idx
	}()
	// q4K4DLanes makes VPERMPS spread the four rows' converted [d, dmin] pairs to
	// [d, d, dmin, dmin] in lane r; q4K4OutLanes gathers lane r's first float to float r.
	q4K4DLanes   = [16]uint32{0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7}
	q4K4OutLanes = [16]uint32{0, 4, 8, 12}
	// q6KHighBitsLo/Hi shift Q6_K's qh (32 bytes broadcast to both halves) so that the two
	// high bits of a value land on bits 4-5 of its byte: for the low nibbles of ql's first
	// and second 32 bytes, bits 0-1 and 2-3 of qh (left by 4 and 2); for the high nibbles,
	// bits 4-5 and 6-7 (right by 0 and 2).
	q6KHighBitsLo = wordHalves(4, 2)
	q6KHighBitsHi = wordHalves(0, 2)
	// q6KScaleBytes[p] makes VPSHUFB fill 128-bit lane k with word 4p+k of its lane: from
	// half h's eight scales widened to words and repeated in every lane, the scale of
	// sub-block 8h+4p+k (the 64 values of half h, part p — low nibbles p=0, high p=1 — are
	// sub-blocks 8h+4p to 8h+4p+3). A VPERMW from all sixteen words did the same, slower.
	q6KScaleBytes = [2][64]int8{laneWords(func(lane int) int { return lane }), laneWords(func(lane int) int { return 4 + lane })}
)

const (
	lowNibble  = 0x01_02_04_08_00_00_00_00
	highNibble = 0x10_20_40_80_00_00_00_00
)

// q5KFifthBits[c] are GFNI matrices (one per 64-bit lane) that move bit 2c of each byte to
// bit 4 in the lower 256 bits and bit 2c+1 in the upper, clearing the rest: Q5_K's fifth
// bits of a chunk's values (result bit 4 is the parity of matrix byte 3 and the byte).
var q5KFifthBits = func() (m [4][8]uint64) {
	for c := range m {
		for q := range 8 {
			m[c][q] = uint64(1) << (2*c + q/4) << 24
		}
	}
	return m
}()

// laneWords is a VPSHUFB index vector that fills each 128-bit lane with one word of its
// source lane: word(lane) for lanes 0-3.
func laneWords(word func(lane int) int) (idx [64]int8) {
	for i := range 32 {
		w := word(i / 8)
		idx[2*i], idx[2*i+1] = int8(2*w), int8(2*w+1)
	}
	return idx
}

// wordHalves is a 512-bit vector of words, lo in the lower 256 bits and hi in the upper.
func wordHalves(lo, hi uint16) (v [32]uint16) {
	for i := range v {
		v[i] = lo
		if i >= 16 {
			v[i] = hi
		}
	}
	return v
}

// In simd_vnni_amd64.s; w and a point at nb ≥ 1 whole blocks. The one-token kernels run
// over rows ≥ 1 consecutive rows rowBytes apart and store each row's sum to out[r]:
// looping inside the assembly keeps the constants loaded and clears the upper registers
// once, which a call per row paid every time (a 2,048-value Q4_K row is ~70 ns of work).
//
//go:noescape
func dotQ4_KRowsVNNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)

//go:noescape
func dotQ4_KRowsGFNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)

//go:noescape
func dotQ6_KRowsVNNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)

//go:noescape
func dotQ5_KRowsGFNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)

//go:noescape
func dotQ4_KRepackedRowsVNNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)

//go:noescape
func dotQ4_KRepackedRowsGFNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)

// dotQ4_KRepackedRows4GFNI is dotQ4_KRepackedRowsGFNI for groups of four consecutive
// rows (needs VBMI for VPERMB as well): out[4g+r] for row r of group g.
//
//go:noescape
func dotQ4_KRepackedRows4GFNI(w, a unsafe.Pointer, nb, groups, rowBytes int, out *float32)

// dotQ4_KRepackedRows4x2GFNI is dotQ4_KRepackedRows4GFNI against two activation vectors
// at once, a and b, into outA and outB: each token's bits, the rows read once.
//
//go:noescape
func dotQ4_KRepackedRows4x2GFNI(w, a, b unsafe.Pointer, nb, groups, rowBytes int, outA, outB *float32)

//go:noescape
func dotQ4_KTokens4RowsVNNI(w, a0, a1, a2, a3 unsafe.Pointer, nb, rows, rowBytes int, o0, o1, o2, o3 *float32)

//go:noescape
func dotQ4_KTokens4RowsGFNI(w, a0, a1, a2, a3 unsafe.Pointer, nb, rows, rowBytes int, o0, o1, o2, o3 *float32)

//go:noescape
func dotQ6_KTokens4RowsVNNI(w, a0, a1, a2, a3 unsafe.Pointer, nb, rows, rowBytes int, o0, o1, o2, o3 *float32)

//go:noescape
func dotQ6_KTokens2RowsVNNI(w, a0, a1 unsafe.Pointer, nb, rows, rowBytes int, o0, o1 *float32)

// tokens2RowsOf is a two-token rows kernel in assembly (dotQ6_KTokens2RowsVNNI,
// dotQ6_KTokens2RowsAVX2) as a rows2Kernel: len(o0) whole rows of n values, one after the
// other.
func tokens2RowsOf(s blockShape, kernel func(w, a0, a1 unsafe.Pointer, nb, rows, rowBytes int, o0, o1 *float32)) rows2Kernel {
	return func(n int, rows, a0, a1 []byte, o0, o1 []float32) {
		nb, count := n/s.values, len(o0)
		if count == 0 {
			return
		}
		o1 = o1[:count]
		if nb == 0 {
			clear(o0)
			clear(o1)
			return
		}
		rb, ab := nb*s.bytes, nb*s.actBytes
		kernel(unsafe.Pointer(&rows[:count*rb][0]), unsafe.Pointer(&a0[:ab][0]), unsafe.Pointer(&a1[:ab][0]),
			nb, count, rb, &o0[0], &o1[0])
	}
}

// The kernels as VecDot, dotRowsOne, dotTokens4 and dotTokens4Rows take them: rows cut to whole blocks (a
// short operand panics on the bounds, as in every kernel), passed to the assembly as
// pointers.
// The Q4_K ones use GFNI's nibble split where the CPU has it (q4KRows, q4KTokens4).
var (
	q4KRows         = pickGFNI(useGFNI, dotQ4_KRowsGFNI, dotQ4_KRowsVNNI)
	q4KTokens4Rows  = pickGFNI(useGFNI, dotQ4_KTokens4RowsGFNI, dotQ4_KTokens4RowsVNNI)
	q4KRepackedRows = pickGFNI(useGFNI, dotQ4_KRepackedRowsGFNI, dotQ4_KRepackedRowsVNNI)

	dotQ4_KVNNI          = vnniDot(q4KShape, q4KRows)
	dotQ6_KVNNI          = vnniDot(q6KShape, dotQ6_KRowsVNNI)
	dotQ4_KRowsOneVNNI   = vnniDotRows(q4KShape, q4KRows)
	dotQ6_KRowsOneVNNI   = vnniDotRows(q6KShape, dotQ6_KRowsVNNI)
	dotQ4_KTokens4RowsOf = tokens4RowsOf(q4KShape, q4KTokens4Rows)
	dotQ6_KTokens4RowsOf = tokens4RowsOf(q6KShape, dotQ6_KTokens4RowsVNNI)
	dotQ4_KTokens4VNNI   = vnniDotTokens4(dotQ4_KTokens4RowsOf)
	dotQ6_KTokens4VNNI   = vnniDotTokens4(dotQ6_KTokens4RowsOf)

	// Q4_K's one-token kernel in llama.cpp's repacked arithmetic (repacked.go).
	dotQ4_KRepackedRowsOne = vnniDotRows(q4KShape, q4KRepackedRows)

	dotQ5_KVNNI        = vnniDot(q5KShape, dotQ5_KRowsGFNI)
	dotQ5_KRowsOneVNNI = vnniDotRows(q5KShape, dotQ5_KRowsGFNI)

	q4KShape = blockShape{values: qkK, bytes: 144, actBytes: 292}
	q5KShape = blockShape{values: qkK, bytes: 176, actBytes: 292}
	q6KShape = blockShape{values: qkK, bytes: 210, actBytes: 292}
)

// blockShape is what the adapters need of a format: values and bytes per weight block,
// bytes per block of its activations.
type blockShape struct{ values, bytes, actBytes int }

type vnniTokens4RowsKernel = func(w, a0, a1, a2, a3 unsafe.Pointer, nb, rows, rowBytes int, o0, o1, o2, o3 *float32)

// pickGFNI is withGFNI where the CPU has GFNI (its nibble split), else shift.
func pickGFNI[K any](gfni bool, withGFNI, shift K) K {
	if gfni {
		return withGFNI
	}
	return shift
}

type vnniRowsKernel = func(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)

func vnniDot(s blockShape, kernel vnniRowsKernel) func(n int, w, a []byte) float32 {
	return func(n int, w, a []byte) (sum float32) {
		nb := n / s.values
		if nb == 0 {
			return 0
		}
		kernel(unsafe.Pointer(&w[:nb*s.bytes][0]), unsafe.Pointer(&a[:nb*s.actBytes][0]), nb, 1, nb*s.bytes, &sum)
		return sum
	}
}

func vnniDotRows(s blockShape, kernel vnniRowsKernel) func(n int, rows, a []byte, out []float32) {
	return func(n int, rows, a []byte, out []float32) {
		nb := n / s.values
		if nb == 0 || len(out) == 0 {
			clear(out)
			return
		}
		rb := nb * s.bytes
		kernel(unsafe.Pointer(&rows[:len(out)*rb][0]), unsafe.Pointer(&a[:nb*s.actBytes][0]), nb, len(out), rb, &out[0])
	}
}

// tokens4RowsOf is a four-token rows kernel in assembly (the VNNI ones, and
// dotQ6_KTokens4RowsAVX2) as dotTokens4Rows: len(o0) whole rows of n values rowBytes apart
// against four activation vectors.
func tokens4RowsOf(s blockShape, kernel vnniTokens4RowsKernel) func(n int, rows []byte, rowBytes int, a0, a1, a2, a3 []byte, o0, o1, o2, o3 []float32) {
	return func(n int, rows []byte, rowBytes int, a0, a1, a2, a3 []byte, o0, o1, o2, o3 []float32) {
		nb, count := n/s.values, len(o0)
		if count == 0 {
			return
		}
		if nb == 0 {
			clear(o0)
			clear(o1[:count])
			clear(o2[:count])
			clear(o3[:count])
			return
		}
		act := func(a []byte) unsafe.Pointer { return unsafe.Pointer(&a[:nb*s.actBytes][0]) }
		kernel(unsafe.Pointer(&rows[:(count-1)*rowBytes+nb*s.bytes][0]), act(a0), act(a1), act(a2), act(a3),
			nb, count, rowBytes, &o0[0], &o1[:count][0], &o2[:count][0], &o3[:count][0])
	}
}

// vnniDotTokens4 is dotTokens4 from a rows form: the kernel on one row. (mulTokens takes
// the rows form where a type has one; this is the one-row entry of the kernel tables.)
func vnniDotTokens4(rows func(n int, rows []byte, rowBytes int, a0, a1, a2, a3 []byte, o0, o1, o2, o3 []float32)) func(n int, w, a0, a1, a2, a3 []byte) [4]float32 {
	return func(n int, w, a0, a1, a2, a3 []byte) (out [4]float32) {
		rows(n, w, len(w), a0, a1, a2, a3, out[0:1], out[1:2], out[2:3], out[3:4])
		return out
	}
}

// dotQ4_KRepackedRowsGrouped is dotQ4_KRepackedRowsOne with the rows in fours on
// dotQ4_KRepackedRows4GFNI (the last len(out) mod 4 on the one-row kernel): the same bits,
// about half the instructions a row.
func dotQ4_KRepackedRowsGrouped(n int, rows, a []byte, out []float32) {
	nb, groups := n/qkK, len(out)/4
	if nb == 0 || groups == 0 {
		dotQ4_KRepackedRowsOne(n, rows, a, out)
		return
	}
	rb := nb * q4KShape.bytes
	dotQ4_KRepackedRows4GFNI(unsafe.Pointer(&rows[:4*groups*rb][0]), unsafe.Pointer(&a[:nb*q4KShape.actBytes][0]), nb, groups, rb, &out[0])
	if rest := 4 * groups; rest < len(out) {
		dotQ4_KRepackedRowsOne(n, rows[rest*rb:], a, out[rest:])
	}
}

// dotQ4_KRepackedRowsGrouped2 is dotQ4_KRepackedRowsGrouped for two tokens, a0 into o0
// and a1 into o1, the rows in fours on dotQ4_KRepackedRows4x2GFNI (and the rest, one
// token at a time, on the one-row kernel).
func dotQ4_KRepackedRowsGrouped2(n int, rows, a0, a1 []byte, o0, o1 []float32) {
	nb, groups := n/qkK, len(o0)/4
	o1 = o1[:len(o0)]
	if nb == 0 || groups == 0 {
		dotQ4_KRepackedRowsOne(n, rows, a0, o0)
		dotQ4_KRepackedRowsOne(n, rows, a1, o1)
		return
	}
	rb, ab := nb*q4KShape.bytes, nb*q4KShape.actBytes
	dotQ4_KRepackedRows4x2GFNI(unsafe.Pointer(&rows[:4*groups*rb][0]), unsafe.Pointer(&a0[:ab][0]), unsafe.Pointer(&a1[:ab][0]),
		nb, groups, rb, &o0[0], &o1[0])
	if rest := 4 * groups; rest < len(o0) {
		dotQ4_KRepackedRowsOne(n, rows[rest*rb:], a0, o0[rest:])
		dotQ4_KRepackedRowsOne(n, rows[rest*rb:], a1, o1[rest:])
	}
}
