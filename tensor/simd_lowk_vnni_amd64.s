//go:build goexperiment.simd

#include "textflag.h"
#include "simd_amd64.h"

// Q2_K and Q3_K × Q8_K on AVX-512 VNNI: see simd_lowk_vnni_amd64.go. Go's operand order is
// Intel's reversed (VPDPWSSD Z12, Z11, Z16 is Z16 += Z11·Z12; VGF2P8AFFINEQB $imm, matrix,
// data, dst). Registers: Z24 Z25 the code matrices (lowKCodes), Z26-Z29 Q3_K's hmask
// matrices (q3KClear), Z20 Z21 the scale words' lane indices (q6KScaleBytes), Z22 Z23 a
// block's scales as words (half 0, half 1, repeated in every 128-bit lane), Z16-Z19 a
// token's integer sums, Y0 Y1 Y4 Y5 its float sums, Y14 (Q2_K) or Y8 (Q3_K) the block's d,
// Z9 Q3_K's hmask bytes, Z11-Z15 scratch.

// PREFETCH_LOWK asks for the lines 4 KiB ahead into L2 and 512 bytes ahead into L1, as the
// Q4_K and Q6_K kernels do (simd_vnni_amd64.s), two lines a block: blocks are 84 and 110
// bytes, so the windows of consecutive blocks cover the row.
#define PREFETCH_LOWK \
	PREFETCHT1 4096(SI); \
	PREFETCHT1 4160(SI); \
	PREFETCHT0 512(SI); \
	PREFETCHT0 576(SI)

#define LOWK_CONSTANTS \
	VMOVDQU64 ·q6KScaleBytes+0(SB), Z20; \
	VMOVDQU64 ·q6KScaleBytes+64(SB), Z21; \
	VMOVDQU64 ·lowKCodes+0(SB), Z24; \
	VMOVDQU64 ·lowKCodes+64(SB), Z25

#define Q3K_CONSTANTS \
	LOWK_CONSTANTS; \
	VMOVDQU64 ·q3KClear+0(SB), Z26; \
	VMOVDQU64 ·q3KClear+64(SB), Z27; \
	VMOVDQU64 ·q3KClear+128(SB), Z28; \
	VMOVDQU64 ·q3KClear+192(SB), Z29

// LOWK_SCALE_WORDS widens the sixteen signed scale bytes in bytes to words and repeats
// half 0's eight (sub-blocks 0-7) in every lane of Z22, half 1's in Z23.
#define LOWK_SCALE_WORDS(bytes) \
	VPMOVSXBW  bytes, Y10; \
	VSHUFI32X4 $0x00, Z10, Z10, Z22; \
	VSHUFI32X4 $0x55, Z10, Z10, Z23

// Q3K_SCALES unpacks a Q3_K block's twelve bytes of 6-bit scales as dotQ3_KAVX2 does, in
// one vector: from bytes 94-109 (the scales at 96-107; a load from 96 would read past the
// block), dwords [a0 a1 a0 a1] shifted right by [0 0 4 4] give the low four bits and
// [a2 ×4] rotated left by [4 2 0 30] the top two at bits 4-5; less 32, as words.
#define Q3K_SCALES \
	VMOVDQU    94(SI), X6; \
	VPSHUFB    ·q3KScaleLow(SB), X6, X7; \
	VPSHUFB    ·q3KScaleTop(SB), X6, X8; \
	VPSRLVD    ·q3KLowShifts(SB), X7, X7; \
	VPROLVD    ·q3KTopRotate(SB), X8, X8; \
	VPANDD     ·nibbleMask(SB), X7, X7; \
	VPTERNLOGD $0xF8, ·q3KTopMask(SB), X8, X7; \
	VPSUBB     ·thirtyTwos(SB), X7, X7; \
	LOWK_SCALE_WORDS(X7)

// LOWK_D puts the F16 at off(SI) converted to float32 in all eight lanes of dst.
#define LOWK_D(off, dst, dstX) \
	VPBROADCASTW off(SI), dstX; \
	VCVTPH2PS    dstX, dst

// LOWK_CODES leaves in Z13 the 2-bit codes of 64 values: the half's 32 code bytes at
// qoff(SI) in both 256-bit halves, shifted and masked per half by one GFNI transform
// (codes: Z24 for shifts 0 and 2, Z25 for 4 and 6); and in Z12 their sub-blocks' scale
// words (Z20 or Z21 picks the lanes' words from the half's scales).
#define LOWK_CODES(qoff, codes, index, scales) \
	VBROADCASTI64X4 qoff(SI), Z13; \
	VGF2P8AFFINEQB  $0, codes, Z13, Z13; \
	VPSHUFB         index, scales, Z12

// Q3K_CLEAR leaves in Z14 four times the clear hmask bits of the same 64 values (the
// hmask's 32 bytes are in both halves of Z9): one GFNI transform moves the value's bit to
// bit 2 and its constant 0x04 inverts it.
#define Q3K_CLEAR(clear) \
	VGF2P8AFFINEQB $4, clear, Z9, Z14

// Q2K_TOKEN and Q3K_TOKEN add a chunk's products with the 64 activation bytes at
// aoff(areg) to ints: VPMADDUBSW pairs them (Q3_K less its second VPMADDUBSW, the clear
// bits' 4·y, as dotQ3_KAVX2) and VPDPWSSD scales and adds the pair sums.
#define Q2K_TOKEN(aoff, areg, ints) \
	VPMADDUBSW aoff(areg), Z13, Z11; \
	VPDPWSSD   Z12, Z11, ints

#define Q3K_TOKEN(aoff, areg, ints) \
	VPMADDUBSW aoff(areg), Z13, Z11; \
	VPMADDUBSW aoff(areg), Z14, Z15; \
	VPSUBW     Z15, Z11, Z11; \
	VPDPWSSD   Z12, Z11, ints

// LOWK_END folds a token's sixteen integer lanes to the AVX2 kernels' eight (the lower
// half holds the even shifts' sums, the upper the odd ones') and accumulates them with its
// activations' d times the block's (d): acc += (yd·d)·float(ints).
#define LOWK_END(ints, intsY, areg, acc, d) \
	VEXTRACTI64X4 $1, ints, Y15; \
	VPADDD        Y15, intsY, Y15; \
	VCVTDQ2PS     Y15, Y15; \
	VBROADCASTSS  (areg), Y13; \
	VMULPS        d, Y13, Y13; \
	VFMADD231PS   Y15, Y13, acc

// Q2K_DOTS leaves in Z16 a block's sixteen integer lanes against one token's activations
// (DI).
#define Q2K_DOTS \
	VPXORD Z16, Z16, Z16; \
	LOWK_CODES(16, Z24, Z20, Z22); \
	Q2K_TOKEN(4, DI, Z16); \
	LOWK_CODES(16, Z25, Z21, Z22); \
	Q2K_TOKEN(68, DI, Z16); \
	LOWK_CODES(48, Z24, Z20, Z23); \
	Q2K_TOKEN(132, DI, Z16); \
	LOWK_CODES(48, Z25, Z21, Z23); \
	Q2K_TOKEN(196, DI, Z16)

// Q2K_MINS accumulates a token's mins term, acc += (-yd·dmin)·float(mins·bsums), with the
// mins as words in Y7 and dmin in Y8 (dotQ2_KAVX2's first step).
#define Q2K_MINS(areg, acc) \
	VPMADDWD     260(areg), Y7, Y15; \
	VCVTDQ2PS    Y15, Y15; \
	VBROADCASTSS (areg), Y13; \
	VXORPS       ·f32Sign8(SB), Y13, Y13; \
	VMULPS       Y8, Y13, Y13; \
	VFMADD231PS  Y15, Y13, acc

// Q2K_SCALES splits a Q2_K block's sixteen scale bytes: the mins (high nibbles) as words
// in Y7 and dmin in Y8, the scales (low nibbles) into Z22 Z23.
#define Q2K_SCALES \
	VMOVDQU   (SI), X6; \
	VPSRLW    $4, X6, X7; \
	VPANDD    ·nibbleMask(SB), X7, X7; \
	VPMOVZXBW X7, Y7; \
	LOWK_D(82, Y8, X8); \
	VPANDD    ·nibbleMask(SB), X6, X9; \
	LOWK_SCALE_WORDS(X9)

// LOWK_SUM leaves a token's float sum (acc, eight lanes) in the low lane of accX in
// sumLanes' order: halves added, then lanes 0+2 and 1+3, then those two (hsum_float_8).
#define LOWK_SUM(accY, accX) \
	VEXTRACTF128 $1, accY, X2; \
	VADDPS       X2, accX, accX; \
	CROSS_PAIRS(accX, accX, X2); \
	VHADDPS      accX, accX, accX

// func dotQ2_KRowsVNNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)
TEXT ·dotQ2_KRowsVNNI(SB), NOSPLIT, $0-48
	LOWK_CONSTANTS
	ROWS_BEGIN(q2krow)
	VPXORD Z0, Z0, Z0

q2kblock:
	PREFETCH_LOWK
	Q2K_SCALES
	Q2K_MINS(DI, Y0)
	LOWK_D(80, Y14, X14)
	Q2K_DOTS
	LOWK_END(Z16, Y16, DI, Y0, Y14)
	ADDQ $84, SI
	ADDQ $292, DI
	DECQ CX
	JNZ  q2kblock

	LOWK_SUM(Y0, X0)
	ROWS_END(q2krow)

// Q2K_TOTALS is llama.cpp's repacked Q2_K arithmetic for one token (ggml_gemv_q2_K_8x8_q8_K,
// repacked.go): the block's sixteen integer lanes (Z16) and its mins·bsums (Y7) each added
// up to one exact total, [I, M] in X15, then X0 = [I, M]·[d·yd, dmin·yd] + X0 in one FMA
// (lane 0 the sums' accumulator, lane 1 the mins').
#define Q2K_TOTALS \
	VEXTRACTI64X4 $1, Z16, Y15; \
	VPADDD        Y15, Y16, Y15; \
	VPMADDWD      260(DI), Y7, Y12; \
	VEXTRACTI128  $1, Y15, X13; \
	VPADDD        X13, X15, X15; \
	VEXTRACTI128  $1, Y12, X13; \
	VPADDD        X13, X12, X12; \
	VPHADDD       X12, X15, X15; \
	VPHADDD       X15, X15, X15; \
	VCVTDQ2PS     X15, X15; \
	VBLENDPS      $2, X8, X14, X13; \
	VBROADCASTSS  (DI), X12; \
	VMULPS        X12, X13, X13; \
	VFMADD231PS   X15, X13, X0

// func dotQ2_KRepackedRowsVNNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)
TEXT ·dotQ2_KRepackedRowsVNNI(SB), NOSPLIT, $0-48
	LOWK_CONSTANTS
	ROWS_BEGIN(q2krrow)
	VPXORD Z0, Z0, Z0

q2krblock:
	PREFETCH_LOWK
	Q2K_SCALES
	LOWK_D(80, Y14, X14)
	Q2K_DOTS
	Q2K_TOTALS
	ADDQ $84, SI
	ADDQ $292, DI
	DECQ CX
	JNZ  q2krblock

	VMOVSHDUP X0, X1
	VSUBSS    X1, X0, X0
	ROWS_END(q2krrow)

// func dotQ3_KRowsVNNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)
TEXT ·dotQ3_KRowsVNNI(SB), NOSPLIT, $0-48
	Q3K_CONSTANTS
	ROWS_BEGIN(q3krow)
	VPXORD Z0, Z0, Z0

q3kblock:
	PREFETCH_LOWK
	Q3K_SCALES
	LOWK_D(108, Y8, X8)
	VBROADCASTI64X4 (SI), Z9
	VPXORD Z16, Z16, Z16
	LOWK_CODES(32, Z24, Z20, Z22)
	Q3K_CLEAR(Z26)
	Q3K_TOKEN(4, DI, Z16)
	LOWK_CODES(32, Z25, Z21, Z22)
	Q3K_CLEAR(Z27)
	Q3K_TOKEN(68, DI, Z16)
	LOWK_CODES(64, Z24, Z20, Z23)
	Q3K_CLEAR(Z28)
	Q3K_TOKEN(132, DI, Z16)
	LOWK_CODES(64, Z25, Z21, Z23)
	Q3K_CLEAR(Z29)
	Q3K_TOKEN(196, DI, Z16)
	LOWK_END(Z16, Y16, DI, Y0, Y8)
	ADDQ $110, SI
	ADDQ $292, DI
	DECQ CX
	JNZ  q3kblock

	LOWK_SUM(Y0, X0)
	ROWS_END(q3krow)

// Q2K_TOKENS4 and Q3K_TOKENS4 are a chunk's products with the four tokens' activations.
#define Q2K_TOKENS4(aoff) \
	Q2K_TOKEN(aoff, R8, Z16); \
	Q2K_TOKEN(aoff, R9, Z17); \
	Q2K_TOKEN(aoff, R10, Z18); \
	Q2K_TOKEN(aoff, R11, Z19)

#define Q3K_TOKENS4(aoff) \
	Q3K_TOKEN(aoff, R8, Z16); \
	Q3K_TOKEN(aoff, R9, Z17); \
	Q3K_TOKEN(aoff, R10, Z18); \
	Q3K_TOKEN(aoff, R11, Z19)

#define LOWK_END4(d) \
	LOWK_END(Z16, Y16, R8, Y0, d); \
	LOWK_END(Z17, Y17, R9, Y1, d); \
	LOWK_END(Z18, Y18, R10, Y4, d); \
	LOWK_END(Z19, Y19, R11, Y5, d)

// func dotQ2_KTokens4RowsVNNI(w, a0, a1, a2, a3 unsafe.Pointer, nb, rows, rowBytes int, o0, o1, o2, o3 *float32)
//
// dotQ2_KRowsVNNI for four activation vectors (prefill): each block's scales and each
// chunk's codes unpacked once for all four, each token's operations the one-token
// kernel's.
TEXT ·dotQ2_KTokens4RowsVNNI(SB), NOSPLIT, $0-96
	LOWK_CONSTANTS
	TOKENS4_ROWS_BEGIN(q2k4row)
	ZERO_ACCS4

q2k4block:
	PREFETCH_LOWK
	Q2K_SCALES
	Q2K_MINS(R8, Y0)
	Q2K_MINS(R9, Y1)
	Q2K_MINS(R10, Y4)
	Q2K_MINS(R11, Y5)
	LOWK_D(80, Y14, X14)
	ZERO_INTS4
	LOWK_CODES(16, Z24, Z20, Z22)
	Q2K_TOKENS4(4)
	LOWK_CODES(16, Z25, Z21, Z22)
	Q2K_TOKENS4(68)
	LOWK_CODES(48, Z24, Z20, Z23)
	Q2K_TOKENS4(132)
	LOWK_CODES(48, Z25, Z21, Z23)
	Q2K_TOKENS4(196)
	LOWK_END4(Y14)
	NEXT_BLOCK4(84)
	JNZ q2k4block

	SUM4_LANES8
	TOKENS4_ROWS_END(q2k4row)
	CLEAR_HIGH
	RET

// func dotQ3_KTokens4RowsVNNI(w, a0, a1, a2, a3 unsafe.Pointer, nb, rows, rowBytes int, o0, o1, o2, o3 *float32)
TEXT ·dotQ3_KTokens4RowsVNNI(SB), NOSPLIT, $0-96
	Q3K_CONSTANTS
	TOKENS4_ROWS_BEGIN(q3k4row)
	ZERO_ACCS4

q3k4block:
	PREFETCH_LOWK
	Q3K_SCALES
	LOWK_D(108, Y8, X8)
	VBROADCASTI64X4 (SI), Z9
	ZERO_INTS4
	LOWK_CODES(32, Z24, Z20, Z22)
	Q3K_CLEAR(Z26)
	Q3K_TOKENS4(4)
	LOWK_CODES(32, Z25, Z21, Z22)
	Q3K_CLEAR(Z27)
	Q3K_TOKENS4(68)
	LOWK_CODES(64, Z24, Z20, Z23)
	Q3K_CLEAR(Z28)
	Q3K_TOKENS4(132)
	LOWK_CODES(64, Z25, Z21, Z23)
	Q3K_CLEAR(Z29)
	Q3K_TOKENS4(196)
	LOWK_END4(Y8)
	NEXT_BLOCK4(110)
	JNZ q3k4block

	SUM4_LANES8
	TOKENS4_ROWS_END(q3k4row)
	CLEAR_HIGH
	RET
