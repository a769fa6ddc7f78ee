//go:build goexperiment.simd && amd64

package tensor

import (
	"encoding/binary"
	"simd/archsimd"
	"unsafe"

	"golang.org/x/sys/cpu"
)

// The vector kernels need AVX2 and FMA (x86-64-v3, every x86 CPU since 2013-2015) and use
// 256-bit vectors only: Go 1.26's register allocator gives 512-bit code no more registers
// (15 either way), and VNNI, which would make AVX-512 pay, is not exposed by archsimd. The
// hottest kernels (Q4_K and Q6_K, one and four tokens) have AVX-512 VNNI versions in
// assembly instead (simd_vnni_amd64.s): the AVX-512 level's, where the CPU has VNNI.
//
// The integer kernels follow one plan: the weights' small integers are widened to bytes,
// multiplied with the int8 activations by VPMADDUBSW (unsigned × signed byte pairs summed
// into int16) and VPMADDWD (int16 pairs into int32, times 1 or a sub-block scale); each
// block's int32 lanes are converted to float and accumulated by one FMA with the block's
// float scale. Block scales stored as f16 are widened through f16Table.
//
// How the kernels are written, and why (measured on the build machine, a 2-core Xeon VM):
//   - No legacy-SSE instruction may run while the upper halves of the YMM registers are
//     dirty: each such transition cost hundreds of cycles here (a Q8_0 row took 23 µs
//     instead of 0.3 µs). So the kernels keep every float in vectors (a float32 product
//     in Go compiles to MULSS) and end with ClearAVXUpperBits (VZEROUPPER, see sumLanes).
//     The compiler emits SSE itself in two places met here: Uint16x16.ShiftAllRight by a
//     constant loads the count with a legacy MOVQ (only the signed and the left shifts fold
//     it into an immediate), so nibbles are split with Int16x16.ShiftAllRight and the mask
//     that follows drops the sign bits; and 128-bit vectors are copied between registers
//     with MOVUPS, so values that live across loop iterations are 256-bit.
//   - The scheduler orders independent values by source position, and code inlined from a
//     helper (or from archsimd's non-intrinsic wrappers such as PermuteScalars and
//     Broadcast<T>) sorts after the calling function's own lines: helpers in a loop body
//     made all their loads run first and the results spill. The loop bodies are therefore
//     written out, intrinsics only, in the order they should run.
//   - Blocks are walked with pointers (next), after one bounds check of the whole row: a
//     vector load folds a constant offset from a register but not base+index, and
//     re-slicing (w = w[144:]) costs six instructions per pointer per block.
//
// Audit for SSE after a change: the legitimate hits are the tables' setup in the package
// initialisation, return 0 for an empty row, code after sumLanes and storeLanes4, in
// simd_attn_amd64.go and simd_ops_amd64.go the spills at entry and the scalar
// code after ClearAVXUpperBits, and vsiluAVX2's scalar finish of a step with |x| above ~87
// (rare enough to pay for it):
//
//	GOEXPERIMENT=simd go build -gcflags=-S ./tensor 2>&1 | grep -P '\(.*simd_\w+_amd64.go:\d+\)\s+(MOVS[SD]|MULS[SD]|ADDS[SD]|SUBS[SD]|MOVQ\s+\w+, X|MOVUPS|XORPS|CVT\w+)\s'

func init() {
	if !archsimd.X86.AVX2() || !archsimd.X86.FMA() || !cpu.X86.HasF16C {
		return
	}
	for h := range 1 << 16 {
		f16Table[h] = F16ToF32(uint16(h))
	}
	for e := range 256 {
		e8m0Table[e] = e8m0Half(uint8(e))
	}
	// The formats registered their generic kernels in the init functions of files named
	// before this one (Go runs them in file-name order), F32/F16/BF16 in traits' literal;
	// TestLevelsKeepGeneric notices a format registered later, which no level would cover.
	avx2 := avx2Kernels(&genericKernels)
	kernelLevels = append(kernelLevels, avx2)
	if archsimd.X86.AVX512() {
		kernelLevels = append(kernelLevels, avx512Kernels(avx2))
	}
	active = selectLevel(isaCap)
}

// avx2Kernels is the AVX2 level (AVX2, FMA, F16C) over generic: 256-bit archsimd kernels
// and AVX2 assembly, each with its generic kernel's bits or ggml's AVX2 arithmetic.
func avx2Kernels(generic *kernelSet) *kernelSet {
	k := generic.clone(LevelAVX2)
	k.dotFloat64, k.addScaled, k.madFloat = dotFloat64AVX2, addScaledAVX2, madFloatAVX2
	k.madHalf, k.scaleHalf = madHalfF16C, scaleHalfF16C
	k.traits[F16].ToFloat, k.traits[F16].FromFloat, k.widenHalf = decodeF16F16C, encodeF16F16C, decodeF16F16C
	k.traits[Q4_K].FromFloat = func(src []float32, dst []byte) { encodeQ4KWith(fitK4GroupsAVX2, src, dst) }
	k.traits[Q5_K].FromFloat = func(src []float32, dst []byte) { encodeQ5KWith(fitK4GroupsAVX2, src, dst) }
	k.traits[Q6_K].FromFloat = func(src []float32, dst []byte) { encodeQ6KWith(fitQ6GroupsAVX2, src, dst) }
	k.readStream = readStreamWith(readStreamAVX2)
	k.vecReduced, k.tinyDot, k.vecReducedKey128 = vecReducedAVX2, tinyDotAVX2, vecReducedKey128AVX2
	k.vsiluRun = vsiluAVX2
	k.ropeNeoX, k.ropeNormal = ropeNeoXAVX2, ropeNormalAVX2
	k.addRow = func(dst, a, b []float32) { addMulAVX2(dst, a, b, false) }
	k.mulRow = func(dst, a, b []float32) { addMulAVX2(dst, a, b, true) }
	k.tileScores, k.tileExp, k.tileAccumulate = tileScoresAVX2, tileExpAVX2, tileAccumulateAVX2
	k.madFloats, k.convRow = madFloatsAVX2, convRowAVX2
	k.dotTokens2[Q4_K], k.dotTokens2[Q5_K], k.dotTokens2[Q6_K] = dotQ4_KTokens2AVX2, dotQ5_KTokens2AVX2, dotQ6_KTokens2AVX2
	k.dotTokens2[MXFP4], k.dotTokens2[Q8_0], k.dotTokens2[IQ4_XS] = dotMXFP4Tokens2AVX2, dotQ8_0Tokens2AVX2, dotIQ4_XSTokens2AVX2
	k.dotTokens4[Q4_K], k.dotTokens4[Q6_K] = dotQ4_KTokens4AVX2, dotQ6_KTokens4AVX2
	k.dotTokens4Rows[Q6_K] = tokens4RowsOf(q6KShape, dotQ6_KTokens4RowsAVX2)
	k.dotTokens2Rows[Q6_K] = tokens2RowsOf(q6KShape, dotQ6_KTokens2RowsAVX2)
	k.dotRowsOne[Q6_K] = dotQ6_KRowsAVX2
	for t, fast := range map[Type]func(n int, w, a []byte) float32{
		Q2_K:   dotQ2_KAVX2,
		Q3_K:   dotQ3_KAVX2,
		Q4_K:   dotQ4_KAVX2,
		Q5_K:   dotQ5_KAVX2,
		Q6_K:   dotQ6_KAVX2,
		IQ4_XS: dotIQ4_XSAVX2,
		Q8_0:   dotQ8_0AVX2,
		Q4_0:   dotQ4_0AVX2,
		Q5_0:   dotQ5_0AVX2,
		IQ4_NL: dotIQ4_NLAVX2,
		Q4_1:   dotQ4_1AVX2,
		Q5_1:   dotQ5_1AVX2,
		MXFP4:  dotMXFP4AVX2,
		BF16:   dotBF16AVX2,
	} {
		if tr := k.traits[t]; tr != nil {
			tr.VecDot = fast
		}
	}
	// What llama.cpp's AVX2 build repacks (ggml_repack_get_optimal_repack_type) runs in its
	// repacked arithmetic here too (simd_repacked_legacy_amd64.go).
	k.repackedKernels[Q4_0], k.repackedKernels[IQ4_NL] = dotQ4_0RepackedRowsAVX2, dotIQ4_NLRepackedRowsAVX2
	k.repackedKernels[MXFP4], k.repackedKernels[Q4_K] = dotMXFP4RepackedRowsAVX2, dotQ4_KRepackedRowsAVX2
	k.repackedTokens4[Q4_K] = q4KRepackedTokens4(q4KTokens4AVX2)
	k.repackedTokens2[Q4_K] = dotQ4_KRepackedRows2AVX2
	installLattice(k, iq2Kernels, nil)
	installLattice(k, iq3Kernels, nil)
	installLattice(k, iq1Kernels, nil)
	return k
}

// q4KRepackedTokens4 is dotQ4_KRepackedTokens4With on the kernels k with a float step
// every 64 values (gemm's arithmetic) and every 256 (gemv's).
func q4KRepackedTokens4(k q4KTokens4Kernels) [2]rows4Kernel {
	with := func(chunk int) rows4Kernel {
		return func(n int, rows []byte, rowBytes int, a0, a1, a2, a3 []byte, o0, o1, o2, o3 []float32) {
			dotQ4_KRepackedTokens4With(k, n, rows, rowBytes, a0, a1, a2, a3, o0, o1, o2, o3, chunk)
		}
	}
	return [2]rows4Kernel{gemm: with(64), gemv: with(qkK)}
}

// avx512Kernels is the AVX-512 level (F, CD, BW, DQ, VL) over avx2: 512-bit kernels in
// assembly, and where the CPU has VNNI (then also GFNI, VBMI) the integer kernels on
// VPDPBUSD/VPDPWSSD and llama.cpp's repacked arithmetic (packed.go, repacked.go).
func avx512Kernels(avx2 *kernelSet) *kernelSet {
	k := avx2.clone(LevelAVX512)
	k.madHalf, k.scaleHalf = madHalfAVX512, scaleHalfAVX512
	k.activationFromFloat[Q8_0], k.activationFromFloat[Q8_K] = quantizeQ8_0AVX512, quantizeQ8KAVX512
	k.exp32s, k.f16Heads = exp32sAVX512, dotF16HeadsTile
	k.readStream = readStreamWith(readStreamAVX512)
	k.tinyDots4x4, k.vecReduced4, k.vecReducedKey128 = tinyDots4x4AVX512, vecReduced4AVX512, vecReducedKey128AVX512
	k.vecF16Rows4, k.tinyF16Rows4x4, k.madHalfHeads = vecF16Rows4AVX512, tinyF16Rows4x4AVX512, madHalfHeads8
	k.tileScores, k.tileAccumulate = tileScoresAVX512, tileAccumulateAVX512
	k.tileScores2, k.tileAccumulate2, k.tileMaxOf = tileScores2AVX512, tileAccumulate2AVX512, tileMaxAVX512
	k.tileScores4, k.tileAccumulate4, k.tileExpSum = tileScores4AVX512, tileAccumulate4AVX512, tileExpSumAVX512
	k.repackedTokens4[Q4_K] = q4KRepackedTokens4(q4KTokens4AVX512)
	if !useVNNI {
		return k
	}
	k.features = append(k.features, "VNNI")
	if useGFNI {
		k.features = append(k.features, "GFNI")
	}
	if archsimd.X86.AVX512VBMI() {
		k.features = append(k.features, "VBMI")
	}
	k.traits[Q4_K].VecDot, k.traits[Q6_K].VecDot = dotQ4_KVNNI, dotQ6_KVNNI
	k.dotTokens4[Q4_K], k.dotTokens4[Q6_K] = dotQ4_KTokens4VNNI, dotQ6_KTokens4VNNI
	k.dotTokens4Rows[Q4_K], k.dotTokens4Rows[Q6_K] = dotQ4_KTokens4RowsOf, dotQ6_KTokens4RowsOf
	k.dotRowsOne[Q4_K], k.dotRowsOne[Q6_K] = dotQ4_KRowsOneVNNI, dotQ6_KRowsOneVNNI
	k.dotTokens2Rows[Q6_K] = tokens2RowsOf(q6KShape, dotQ6_KTokens2RowsVNNI)
	// Without the four-row kernels two tokens or more are packed (kPackedMinTokens), not
	// run by the AVX2 level's two-token kernel.
	k.repackedKernels[Q4_K], k.repackedTokens2[Q4_K] = dotQ4_KRepackedRowsOne, nil
	if useQ4KRows4 {
		k.repackedKernels[Q4_K], k.repackedTokens2[Q4_K] = dotQ4_KRepackedRowsGrouped, dotQ4_KRepackedRowsGrouped2
	}
	if useGFNI {
		k.traits[Q5_K].VecDot, k.dotRowsOne[Q5_K] = dotQ5_KVNNI, dotQ5_KRowsOneVNNI
	}
	installLegacyVNNI(k)
	installPacked(k)
	installLowKVNNI(k)
	if useIQ2VNNI {
		installLattice(k, iq2Kernels, iq2VNNIKernels)
		installLattice(k, iq3Kernels, iq3VNNIKernels)
	}
	return k
}

// f16Table maps every binary16 bit pattern to its float32 value (the CPU has F16C, archsimd
// does not expose it), with three spare entries so that a 16-byte load at any index stays
// inside. e8m0Table is the same for MXFP4's scale byte (halved, as the format's values are
// stored doubled).
var (
	f16Table  [1<<16 + 3]float32
	e8m0Table [256 + 3]float32
)

// f16Lanes is the f16 stored at b[0:2] in all eight lanes.
func f16Lanes(b []byte) archsimd.Float32x8 {
	return archsimd.LoadFloat32x4((*[4]float32)(f16Table[binary.LittleEndian.Uint16(b):])).Broadcast1To8()
}

// f32Lanes is the float32 stored at b[0:4] in all eight lanes (b holds at least 16 bytes).
func f32Lanes(b []byte) archsimd.Float32x8 {
	return archsimd.LoadUint8x16((*[16]uint8)(b)).AsFloat32x4().Broadcast1To8()
}

// next is the block after *p: rows are walked with pointers, after the row was sliced to
// whole blocks, and a kernel moves on only while another block follows (so no pointer ever
// points past the row).
func next[B any](p *B) *B { return (*B)(unsafe.Add(unsafe.Pointer(p), unsafe.Sizeof(*p))) }

// sumLanes adds up the eight lanes of v as ggml's hsum_float_8 does (the high four onto the
// low four, then lanes 0+2 and 1+3, then those two) and clears the upper halves of the
// vector registers, leaving the caller in a clean state for scalar float code (see above).
// The sum goes through memory because VZEROUPPER is ordered only against memory
// operations: returned in a register, the reduction could be scheduled after it.
func sumLanes(v archsimd.Float32x8) float32 {
	h := crossPairs(v.GetLo().Add(v.GetHi()), archsimd.Float32x4{})
	return firstLane(h.AddPairs(h))
}

// crossPairs is [h0+h2, h1+h3, g0+g2, g1+g3]: hsum_float_8's middle step for two sums of
// four lanes, whose pairs VHADDPS then adds (AddPairs).
func crossPairs(h, g archsimd.Float32x4) archsimd.Float32x4 {
	return h.SelectFromPair(0, 1, 4, 5, g).Add(h.SelectFromPair(2, 3, 6, 7, g))
}

// firstLane is lane 0 of v, with the upper halves of the vector registers cleared as in
// sumLanes.
func firstLane(v archsimd.Float32x4) float32 {
	var s [4]float32
	v.Store(&s)
	archsimd.ClearAVXUpperBits()
	return s[0]
}

// Constant vectors, loaded from memory where they are used (a load costs less than a
// register held across a loop).
var (
	ones16     = [16]int16{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}
	nibbleMask = [32]uint8{15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15,
		15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15}
	// spreadWord[j] makes VPSHUFB copy 16-bit word j of each 128-bit half (holding eight
	// sub-block scales as words) to every word of the half.
	spreadWord = func() (idx [8][32]int8) {
		for j := range idx {
			for l := 0; l < 32; l += 2 {
				idx[j][l], idx[j][l+1] = int8(2*j), int8(2*j+1)
			}
		}
		return idx
	}()
	// spreadByte[j] makes VPSHUFB widen byte j of each 128-bit half to every word (high
	// bytes zero): an unsigned 8-bit sub-block scale as VPMADDWD's multiplier.
	spreadByte = func() (idx [8][32]int8) {
		for j := range idx {
			for l := 0; l < 32; l += 2 {
				idx[j][l], idx[j][l+1] = int8(j), -1
			}
		}
		return idx
	}()
)

// prefetchLines asks the CPU to fetch the n bytes at p into the L2 cache; it never faults.
// In simd_prefetch_amd64.s: Go has no prefetch intrinsic.
//
//go:noescape
func prefetchLines(p unsafe.Pointer, n int)

// readStreamAVX512 and readStreamAVX2 load n bytes from p (a positive multiple of 256)
// and nothing else: StreamRead's probe of the memory bandwidth (simd_prefetch_amd64.s).
//
//go:noescape
func readStreamAVX512(p unsafe.Pointer, n int)

//go:noescape
func readStreamAVX2(p unsafe.Pointer, n int)

// readStreamWith is readStream over one of them.
func readStreamWith(kernel func(unsafe.Pointer, int)) func(b []byte) int {
	return func(b []byte) int {
		n := len(b) &^ 255
		if n > 0 {
			kernel(unsafe.Pointer(&b[0]), n)
		}
		return n
	}
}

// prefetchNext helps the hardware prefetcher when w is a row cut from a larger matrix (its
// capacity runs on, as the rows the matmul passes do): the kernels are called row after
// row over memory the hardware streams in, but its prefetcher stops at every 4 KiB page.
// Each row asks for the bytes 4 KiB past its own start, a row's length of them (rows two
// or three ahead), so the rows in flight always cover 4 KiB ahead of the one computed, as
// the VNNI kernels do per block (simd_vnni_amd64.s). Measured on the build machine with
// the AVX2 kernels (2 threads, 64 KiB decode tiles): bench8 tg128 22.8-26.2 -> 30.3-30.5
// t/s, the Q6_K output matrix 19 -> 20-21 GB/s, 1 GiB of Q4_K experts 14-16 -> 15-17 GB/s;
// a 4096×4096 matrix resident in L3 loses ~20% (Q4_K 0.65 -> 0.78 ms), the price of
// prefetch instructions that hit. The previous scheme (the first lines of each page in
// the next three rows) cost nothing in L3; every other line instead of every line lost
// half the gain from DRAM.
func prefetchNext(w []byte) {
	all := w[:cap(w)]
	lo, hi := prefetchAhead, min(prefetchAhead+len(w), len(all))
	if hi <= lo {
		return
	}
	prefetchLines(unsafe.Pointer(&all[lo]), hi-lo)
}

// prefetchAhead is how far ahead of the bytes being computed the kernels prefetch.
const prefetchAhead = 4096
