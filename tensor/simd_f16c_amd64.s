//go:build goexperiment.simd

#include "textflag.h"
#include "simd_amd64.h"

// F16C kernels: see simd_f16c_amd64.go. Go's operand order is Intel's reversed:
// VFMADD213PS m, Y0, Y1 is Y1 = Y0·Y1 + m. Both end with VZEROUPPER (Go's scalar float
// code is legacy SSE; see simd_amd64.go).

// MAD_HALF is the body of both madHalf kernels: acc = round16(x·s + acc), lanes values
// (bytes bytes of float32) a step; s lives in register sv, the values in v, and as
// binary16 in vh, the low half of v.
#define MAD_HALF(label, sv, v, vh, bytes, lanes) \
	MOVQ         acc+0(FP), DI; \
	MOVQ         x+8(FP), SI; \
	MOVQ         n+16(FP), CX; \
	VBROADCASTSS s+24(FP), sv; \
label: \
	VMOVUPS     (SI), v; \
	VFMADD213PS (DI), sv, v; \
	VCVTPS2PH   $0, v, vh; \
	VCVTPH2PS   vh, v; \
	VMOVUPS     v, (DI); \
	ADDQ        $bytes, SI; \
	ADDQ        $bytes, DI; \
	SUBQ        $lanes, CX; \
	JNZ         label; \
	VZEROUPPER; \
	RET

// SCALE_HALF is the body of both scaleHalf kernels: acc = round16(acc·s), lanes values
// (bytes bytes of float32) a step; s lives in register sv, the values in v, and as
// binary16 in vh, the low half of v.
#define SCALE_HALF(label, sv, v, vh, bytes, lanes) \
	MOVQ         acc+0(FP), DI; \
	MOVQ         n+8(FP), CX; \
	VBROADCASTSS s+16(FP), sv; \
label: \
	VMULPS    (DI), sv, v; \
	VCVTPS2PH $0, v, vh; \
	VCVTPH2PS vh, v; \
	VMOVUPS   v, (DI); \
	ADDQ      $bytes, DI; \
	SUBQ      $lanes, CX; \
	JNZ       label; \
	VZEROUPPER; \
	RET

// WIDE1_ROWS is the one-vector wide F16 kernel over rows (see F16_SUMMARY and after),
// with or without the rows' summaries: init, fold, tail and store are F16_SUMMARY_* or the
// empty NO_SUMMARY_*. (Defined before the first TEXT, as vet checks the FP offsets of a
// macro against the TEXT above it.)
#define WIDE1_ROWS(init, fold, tail, store) \
	MOVQ w+0(FP), R8; \
	MOVQ rows+16(FP), R9; \
	MOVQ a+32(FP), R10; \
	MOVQ out+40(FP), DI; \
	MOVQ summaries+48(FP), DX; \
wide1row: \
	init; \
	MOVQ   R8, SI; \
	MOVQ   R10, R11; \
	MOVQ   n+24(FP), CX; \
	VPXORQ Z8, Z8, Z8; \
	VPXORQ Z9, Z9, Z9; \
wide1step: \
	CMPQ CX, $32; \
	JLT  wide1tail; \
	F16_WIDEN; \
	fold(0); \
	F16_WIDE_FMA(R11, 0, Z8, Z9); \
	ADDQ $64, SI; \
	ADDQ $256, R11; \
	SUBQ $32, CX; \
	JMP  wide1step; \
wide1tail: \
	TESTQ CX, CX; \
	JZ    wide1sum; \
	F16_WIDEN16; \
	tail; \
	F16_WIDE_FMA16(R11, Z8, Z9); \
wide1sum: \
	F16_WIDE_SUM(Z8, Z9, Y8, Y9, X8, X9, 0); \
	store(DX); \
	ADDQ rowBytes+8(FP), R8; \
	ADDQ $8, DI; \
	ADDQ $4, DX; \
	DECQ R9; \
	JNZ  wide1row; \
	CLEAR_HIGH; \
	RET

// WIDE8_ROWS is dotF16WideRows8's body, with or without the rows' summaries (as
// WIDE1_ROWS).
#define WIDE8_ROWS(init, fold, tail, store) \
	MOVQ w+0(FP), R8; \
	MOVQ out+40(FP), DI; \
	MOVQ summaries+48(FP), DX; \
wide8row: \
	init; \
	MOVQ   R8, SI; \
	MOVQ   n+24(FP), CX; \
	MOVQ   CX, BX; \
	SHLQ   $3, BX; \
	MOVQ   a+32(FP), R9; \
	LEAQ   (R9)(BX*1), R10; \
	LEAQ   (R10)(BX*1), R11; \
	LEAQ   (R11)(BX*1), R12; \
	LEAQ   (R12)(BX*1), R13; \
	LEAQ   (R13)(BX*1), R14; \
	LEAQ   (R14)(BX*1), AX; \
	ADDQ   AX, BX; \
	VPXORQ Z8, Z8, Z8; \
	VPXORQ Z9, Z9, Z9; \
	VPXORQ Z10, Z10, Z10; \
	VPXORQ Z11, Z11, Z11; \
	VPXORQ Z12, Z12, Z12; \
	VPXORQ Z13, Z13, Z13; \
	VPXORQ Z14, Z14, Z14; \
	VPXORQ Z15, Z15, Z15; \
	VPXORQ Z16, Z16, Z16; \
	VPXORQ Z17, Z17, Z17; \
	VPXORQ Z18, Z18, Z18; \
	VPXORQ Z19, Z19, Z19; \
	VPXORQ Z20, Z20, Z20; \
	VPXORQ Z21, Z21, Z21; \
	VPXORQ Z22, Z22, Z22; \
	VPXORQ Z23, Z23, Z23; \
wide8step: \
	CMPQ CX, $32; \
	JLT  wide8tail; \
	F16_WIDEN; \
	fold(0); \
	F16_WIDE_FMA(R9, 0, Z8, Z16); \
	F16_WIDE_FMA(R10, 0, Z9, Z17); \
	F16_WIDE_FMA(R11, 0, Z10, Z18); \
	F16_WIDE_FMA(R12, 0, Z11, Z19); \
	F16_WIDE_FMA(R13, 0, Z12, Z20); \
	F16_WIDE_FMA(R14, 0, Z13, Z21); \
	F16_WIDE_FMA(AX, 0, Z14, Z22); \
	F16_WIDE_FMA(BX, 0, Z15, Z23); \
	ADDQ $64, SI; \
	ADDQ $256, R9; \
	ADDQ $256, R10; \
	ADDQ $256, R11; \
	ADDQ $256, R12; \
	ADDQ $256, R13; \
	ADDQ $256, R14; \
	ADDQ $256, AX; \
	ADDQ $256, BX; \
	SUBQ $32, CX; \
	JMP  wide8step; \
wide8tail: \
	TESTQ CX, CX; \
	JZ    wide8sum; \
	F16_WIDEN16; \
	tail; \
	F16_WIDE_FMA16(R9, Z8, Z16); \
	F16_WIDE_FMA16(R10, Z9, Z17); \
	F16_WIDE_FMA16(R11, Z10, Z18); \
	F16_WIDE_FMA16(R12, Z11, Z19); \
	F16_WIDE_FMA16(R13, Z12, Z20); \
	F16_WIDE_FMA16(R14, Z13, Z21); \
	F16_WIDE_FMA16(AX, Z14, Z22); \
	F16_WIDE_FMA16(BX, Z15, Z23); \
wide8sum: \
	F16_WIDE_SUM(Z8, Z16, Y8, Y0, X8, X0, 0); \
	F16_WIDE_SUM(Z9, Z17, Y9, Y0, X9, X0, 8); \
	F16_WIDE_SUM(Z10, Z18, Y10, Y0, X10, X0, 16); \
	F16_WIDE_SUM(Z11, Z19, Y11, Y0, X11, X0, 24); \
	F16_WIDE_SUM(Z12, Z20, Y12, Y0, X12, X0, 32); \
	F16_WIDE_SUM(Z13, Z21, Y13, Y0, X13, X0, 40); \
	F16_WIDE_SUM(Z14, Z22, Y14, Y0, X14, X0, 48); \
	F16_WIDE_SUM(Z15, Z23, Y15, Y0, X15, X0, 56); \
	store(DX); \
	ADDQ rowBytes+8(FP), R8; \
	ADDQ $64, DI; \
	ADDQ $4, DX; \
	DECQ rows+16(FP); \
	JNZ  wide8row; \
	CLEAR_HIGH; \
	RET

#define NO_SUMMARY_INIT
#define NO_SUMMARY(off)
#define NO_SUMMARY_TAIL
#define NO_SUMMARY_STORE(reg)

// func madHalfF16CBlocks(acc, x *float32, n int, s float32)
// n is a positive multiple of 8. VCVTPS2PH $0 rounds to nearest binary16, ties to even.
TEXT ·madHalfF16CBlocks(SB), NOSPLIT, $0-28
	MAD_HALF(mad8, Y0, Y1, X1, 32, 8)

// func scaleHalfF16CBlocks(acc *float32, n int, s float32)
// n is a positive multiple of 8.
TEXT ·scaleHalfF16CBlocks(SB), NOSPLIT, $0-20
	SCALE_HALF(scale8, Y0, Y1, X1, 32, 8)

// func scaleHalfAVX512Blocks(acc *float32, n int, s float32)
// scaleHalfF16CBlocks sixteen values a step (AVX-512 F); n is a positive multiple of 16.
TEXT ·scaleHalfAVX512Blocks(SB), NOSPLIT, $0-20
	SCALE_HALF(scale16, Z0, Z1, Y1, 64, 16)

// func decodeF16F16CBlocks(dst *float32, src *byte, n int) int
// n is a positive multiple of 8. Stops before a block of eight holding a NaN (VCVTPH2PS
// makes signalling NaNs quiet; F16ToF32 keeps them) and returns the values done.
TEXT ·decodeF16F16CBlocks(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	XORQ AX, AX

widen:
	VCVTPH2PS (SI), Y1
	VCMPPS    $3, Y1, Y1, Y2 // unordered: a NaN lane
	VMOVMSKPS Y2, DX
	TESTL     DX, DX
	JNZ       done
	VMOVUPS   Y1, (DI)
	ADDQ      $16, SI
	ADDQ      $32, DI
	ADDQ      $8, AX
	CMPQ      AX, CX
	JNE       widen

done:
	VZEROUPPER
	MOVQ AX, ret+24(FP)
	RET

// func madHalfAVX512Blocks(acc, x *float32, n int, s float32)
// madHalfF16CBlocks sixteen values a step (AVX-512 F); n is a positive multiple of 16. It
// uses only Z0 and Z1, whose upper halves VZEROUPPER clears.
TEXT ·madHalfAVX512Blocks(SB), NOSPLIT, $0-28
	MAD_HALF(mad16, Z0, Z1, Y1, 64, 16)

// func dotF16ExactAVX512Blocks(x, y *byte, blocks int) (sum float64, peak float32, field, lsb uint16)
//
// dotF16ExactAVX512's loop, 32 binary16 values of x and y a step (blocks ≥ 1 steps): the
// products (exact in float32) summed into two float64 accumulators of eight lanes, the
// largest |product| per float32 lane, and per word lane the largest exponent field of x
// and y and the smallest max(Ex,1)+max(Ey,1) over the nonzero products; then each folded
// to the one value returned (the largest word as the complement of the smallest
// complement, VPHMINPOSUW finding the smallest of eight). Uses Z0-Z15 and K1-K2 only.
TEXT ·dotF16ExactAVX512Blocks(SB), NOSPLIT, $0-40
	MOVQ       x+0(FP), SI
	MOVQ       y+8(FP), DI
	MOVQ       blocks+16(FP), CX
	VPXORQ     Z8, Z8, Z8
	VPXORQ     Z9, Z9, Z9
	VPXORQ     Z10, Z10, Z10
	VPXORQ     Z11, Z11, Z11
	VPTERNLOGD $0xFF, Z12, Z12, Z12
	MOVL         $0x7FFFFFFF, AX
	VPBROADCASTD AX, Z13 // |float32|
	MOVL         $0x1F, AX
	VPBROADCASTW AX, Z14 // a binary16 exponent field, shifted down
	MOVL         $1, AX
	VPBROADCASTW AX, Z15
	MOVL         $0x7FFF, AX
	VPBROADCASTW AX, Z7  // a binary16 magnitude

exact32:
	VMOVDQU64     (SI), Z1
	VMOVDQU64     (DI), Z2
	VCVTPH2PS     Y1, Z3
	VCVTPH2PS     Y2, Z5
	VMULPS        Z5, Z3, Z3
	VEXTRACTI64X4 $1, Z1, Y4
	VEXTRACTI64X4 $1, Z2, Y5
	VCVTPH2PS     Y4, Z4
	VCVTPH2PS     Y5, Z5
	VMULPS        Z5, Z4, Z4
	VCVTPS2PD     Y3, Z5
	VADDPD        Z5, Z8, Z8
	VEXTRACTF64X4 $1, Z3, Y5
	VCVTPS2PD     Y5, Z5
	VADDPD        Z5, Z9, Z9
	VCVTPS2PD     Y4, Z5
	VADDPD        Z5, Z8, Z8
	VEXTRACTF64X4 $1, Z4, Y5
	VCVTPS2PD     Y5, Z5
	VADDPD        Z5, Z9, Z9
	VPANDD        Z13, Z3, Z3
	VPANDD        Z13, Z4, Z4
	VMAXPS        Z3, Z10, Z10
	VMAXPS        Z4, Z10, Z10
	VPSRLW        $10, Z1, Z5
	VPANDD        Z14, Z5, Z5
	VPSRLW        $10, Z2, Z6
	VPANDD        Z14, Z6, Z6
	VPMAXUW       Z5, Z11, Z11
	VPMAXUW       Z6, Z11, Z11
	VPMAXUW       Z15, Z5, Z5
	VPMAXUW       Z15, Z6, Z6
	VPADDW        Z6, Z5, Z5
	VPTESTMW      Z7, Z1, K1
	VPTESTMW      Z7, Z2, K2
	KANDD         K1, K2, K1
	VPMINUW       Z5, Z12, K1, Z12
	ADDQ          $64, SI
	ADDQ          $64, DI
	DECQ          CX
	JNZ           exact32

	VADDPD        Z9, Z8, Z8
	VEXTRACTF64X4 $1, Z8, Y9
	VADDPD        Y9, Y8, Y8
	VEXTRACTF128  $1, Y8, X9
	VADDPD        X9, X8, X8
	VUNPCKHPD     X8, X8, X9
	VADDSD        X9, X8, X8
	VMOVSD        X8, sum+24(FP)

	VEXTRACTF64X4 $1, Z10, Y9
	VMAXPS        Y9, Y10, Y10
	VEXTRACTF128  $1, Y10, X9
	VMAXPS        X9, X10, X10
	VMOVHLPS      X10, X10, X9
	VMAXPS        X9, X10, X10
	VMOVSHDUP     X10, X9
	VMAXSS        X9, X10, X10
	VMOVSS        X10, peak+32(FP)

	VPTERNLOGD    $0xFF, Z0, Z0, Z0
	VPXORD        Z0, Z11, Z11
	VEXTRACTI64X4 $1, Z11, Y9
	VPMINUW       Y9, Y11, Y11
	VEXTRACTI128  $1, Y11, X9
	VPMINUW       X9, X11, X11
	VPHMINPOSUW   X11, X11
	VMOVD         X11, AX
	NOTL          AX
	MOVW          AX, field+36(FP)

	VEXTRACTI64X4 $1, Z12, Y9
	VPMINUW       Y9, Y12, Y12
	VEXTRACTI128  $1, Y12, X9
	VPMINUW       X9, X12, X12
	VPHMINPOSUW   X12, X12
	VMOVD         X12, AX
	MOVW          AX, lsb+38(FP)
	VZEROUPPER
	RET

// func encodeF16F16CBlocks(dst *byte, src *float32, n int)
// Narrows n float32 values (a positive multiple of 8) to binary16, VCVTPS2PH $0: to the
// nearest, ties to even, as F32ToF16; NaNs come out quiet with their top payload bits,
// which is also what F32ToF16 returns.
TEXT ·encodeF16F16CBlocks(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX

narrow:
	VMOVUPS   (SI), Y1
	VCVTPS2PH $0, Y1, X1
	VMOVDQU   X1, (DI)
	ADDQ      $32, SI
	ADDQ      $16, DI
	SUBQ      $8, CX
	JNZ       narrow
	VZEROUPPER
	RET

// func quantizeQ8_0AVX512Blocks(dst *byte, src *float32, blocks int) int
//
// ggml's x86 activation quantizer for Q8_0 (formatQ8_0.encode with x86 true), 32 values a
// block: d = amax/127 stored as binary16, q = round-half-even(v · 127/amax) saturated to a
// signed byte (VPMOVSDB; |v·127/amax| rounds to 127 at most), all zeros for amax 0. The
// largest |v| is taken on the integer bits of |v| (the same order as the floats' for
// finite values). It stops before a block holding an infinity or a NaN, which the scalar
// code decides, and returns the blocks done. Uses Z0-Z8 only.
TEXT ·quantizeQ8_0AVX512Blocks(SB), NOSPLIT, $0-32
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         blocks+16(FP), CX
	XORQ         AX, AX
	MOVL         $0x7FFFFFFF, DX
	VPBROADCASTD DX, Z7
	MOVL         $0x42FE0000, DX // 127.0
	VMOVD        DX, X6

q8block:
	VMOVUPS       (SI), Z0
	VMOVUPS       64(SI), Z1
	VPANDD        Z7, Z0, Z2
	VPANDD        Z7, Z1, Z3
	VPMAXUD       Z3, Z2, Z2
	VEXTRACTI64X4 $1, Z2, Y3
	VPMAXUD       Y3, Y2, Y2
	VEXTRACTI128  $1, Y2, X3
	VPMAXUD       X3, X2, X2
	VPSHUFD       $0x4E, X2, X3
	VPMAXUD       X3, X2, X2
	VPSHUFD       $0xB1, X2, X3
	VPMAXUD       X3, X2, X2
	VMOVD         X2, DX
	CMPL          DX, $0x7F800000
	JAE           q8done
	TESTL         DX, DX
	JZ            q8zero
	VDIVSS        X6, X2, X4 // d = amax/127
	VCVTPS2PH     $0, X4, X4
	VPEXTRW       $0, X4, DX
	MOVW          DX, (DI)
	VDIVSS        X2, X6, X5 // 127/amax
	VBROADCASTSS  X5, Z5
	VMULPS        Z5, Z0, Z0
	VMULPS        Z5, Z1, Z1
	VCVTPS2DQ     Z0, Z0
	VCVTPS2DQ     Z1, Z1
	VPMOVSDB      Z0, X0
	VPMOVSDB      Z1, X1
	VMOVDQU       X0, 2(DI)
	VMOVDQU       X1, 18(DI)
	JMP           q8next

q8zero:
	MOVW    $0, (DI)
	VPXORD  X0, X0, X0
	VMOVDQU X0, 2(DI)
	VMOVDQU X0, 18(DI)

q8next:
	ADDQ $128, SI
	ADDQ $34, DI
	INCQ AX
	CMPQ AX, CX
	JNE  q8block

q8done:
	VZEROUPPER
	MOVQ AX, ret+24(FP)
	RET

// The wide F16 kernels compute F16 × F16 dot products as float64 fused multiply-adds of
// the values widened to float64 (each product of two binary16 values is exact in float64,
// so an FMA adds the exact product: the same as adding it), 32 values a step (16 for the
// last step of a length that is an odd multiple of 16) in two chains per vector. The order
// of the additions is not ggml's; the caller uses a sum only where a bound proves every
// order gives the same float64 (see f16Bound), from the summaries these kernels return
// beside it: the largest binary16 magnitude (bits & 0x7FFF) of a vector and its smallest
// nonzero magnitude less one (0xFFFF for a vector of zeros: the subtraction wraps), both
// as unsigned words.

// F16_SUMMARY folds the 32 binary16 values at off(SI) into the running word-lane maxima
// (Z30) and minima less one (Z31); Z28 holds 0x7FFF words, Z29 ones. Clobbers Z27.
#define F16_SUMMARY(off) \
	VPANDD  off(SI), Z28, Z27; \
	VPMAXUW Z27, Z30, Z30; \
	VPSUBW  Z29, Z27, Z27; \
	VPMINUW Z27, Z31, Z31

#define F16_SUMMARY_INIT \
	MOVL         $0xFFFF, AX; \
	KMOVD        AX, K1; \
	MOVL         $0x7FFF, AX; \
	VPBROADCASTW AX, Z28; \
	MOVL         $1, AX; \
	VPBROADCASTW AX, Z29; \
	VPXORD       Z30, Z30, Z30; \
	VPTERNLOGD   $0xFF, Z31, Z31, Z31

// F16_SUMMARY_TAIL is F16_SUMMARY for the last 16 values at (SI) of a vector whose length
// is an odd multiple of 16: loaded under K1 (0xFFFF), the other words are zeros, which
// change no maximum, and 0xFFFF less one, which change no minimum.
#define F16_SUMMARY_TAIL \
	VMOVDQU16.Z (SI), K1, Z27; \
	VPANDD      Z28, Z27, Z27; \
	VPMAXUW     Z27, Z30, Z30; \
	VPSUBW      Z29, Z27, Z27; \
	VPMINUW     Z27, Z31, Z31

// F16_SUMMARY_STORE folds Z30 and Z31 to one word each and stores them at 0(reg) and
// 2(reg) (VPHMINPOSUW, which finds the smallest of eight words, has no EVEX form, so the
// folding moves to Z0 and Z1; the largest word is the complement of the smallest
// complement). Clobbers Z0, Z1 and AX.
#define F16_SUMMARY_STORE(reg) \
	VPTERNLOGD    $0x55, Z30, Z30, Z30; \
	F16_FOLD_MIN(Z30, Y30); \
	NOTL          AX; \
	MOVW          AX, 0(reg); \
	F16_FOLD_MIN(Z31, Y31); \
	MOVW          AX, 2(reg)

// F16_FOLD_MIN leaves the smallest word of z (zY its lower half) in AX. Clobbers Z0 and Z1.
#define F16_FOLD_MIN(z, zY) \
	VEXTRACTI64X4 $1, z, Y0; \
	VPMINUW       Y0, zY, Y0; \
	VEXTRACTI128  $1, Y0, X1; \
	VPMINUW       X1, X0, X0; \
	VPHMINPOSUW   X0, X0; \
	VMOVD         X0, AX

// F16_WIDEN widens the 32 binary16 values at (SI) to float64 in Z2-Z5.
#define F16_WIDEN \
	VCVTPH2PS     (SI), Z0; \
	VCVTPH2PS     32(SI), Z1; \
	VCVTPS2PD     Y0, Z2; \
	VEXTRACTF64X4 $1, Z0, Y3; \
	VCVTPS2PD     Y3, Z3; \
	VCVTPS2PD     Y1, Z4; \
	VEXTRACTF64X4 $1, Z1, Y5; \
	VCVTPS2PD     Y5, Z5

// F16_WIDEN16 widens the 16 binary16 values at (SI) to float64 in Z2 and Z3.
#define F16_WIDEN16 \
	VCVTPH2PS     (SI), Z0; \
	VCVTPS2PD     Y0, Z2; \
	VEXTRACTF64X4 $1, Z0, Y3; \
	VCVTPS2PD     Y3, Z3

// F16_WIDE_FMA16 is F16_WIDE_FMA for F16_WIDEN16's 16 values.
#define F16_WIDE_FMA16(areg, a, b) \
	VFMADD231PD (areg), Z2, a; \
	VFMADD231PD 64(areg), Z3, b

// F16_WIDE_FMA adds the products of Z2-Z5 with the 32 float64 values at off(areg) into
// accumulators a and b.
#define F16_WIDE_FMA(areg, off, a, b) \
	VFMADD231PD off(areg), Z2, a; \
	VFMADD231PD 64+off(areg), Z3, b; \
	VFMADD231PD 128+off(areg), Z4, a; \
	VFMADD231PD 192+off(areg), Z5, b

// F16_WIDE_FOLD adds the eight lanes of a (clobbered, with b) and stores the sum at off(DI).
#define F16_WIDE_FOLD(a, aY, bY, aX, bX, off) \
	VEXTRACTF64X4 $1, a, bY; \
	VADDPD        bY, aY, aY; \
	VEXTRACTF128  $1, aY, bX; \
	VADDPD        bX, aX, aX; \
	VUNPCKHPD     aX, aX, bX; \
	VADDSD        bX, aX, aX; \
	VMOVSD        aX, off(DI)

// F16_WIDE_SUM adds accumulators a and b (clobbered) to one float64 and stores it at
// off(DI).
#define F16_WIDE_SUM(a, b, aY, bY, aX, bX, off) \
	VADDPD b, a, a; \
	F16_WIDE_FOLD(a, aY, bY, aX, bX, off)

// func widenF16Summary(dst *float64, src *byte, n int, summary *[2]uint16)
// Widens n binary16 values (a positive multiple of 16) to float64 and summarizes them.
TEXT ·widenF16Summary(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ summary+24(FP), DX
	F16_SUMMARY_INIT

widen32:
	CMPQ    CX, $32
	JLT     widen16
	F16_WIDEN
	F16_SUMMARY(0)
	VMOVUPD Z2, (DI)
	VMOVUPD Z3, 64(DI)
	VMOVUPD Z4, 128(DI)
	VMOVUPD Z5, 192(DI)
	ADDQ    $64, SI
	ADDQ    $256, DI
	SUBQ    $32, CX
	JMP     widen32

widen16:
	TESTQ   CX, CX
	JZ      widened
	F16_WIDEN16
	F16_SUMMARY_TAIL
	VMOVUPD Z2, (DI)
	VMOVUPD Z3, 64(DI)

widened:
	F16_SUMMARY_STORE(DX)
	CLEAR_HIGH
	RET

// func dotF16WideRows1(w *byte, rowBytes, rows, n int, a *float64, out *float64, summaries *[2]uint16)
// For each of rows weight rows (rowBytes apart, n binary16 values, n a positive multiple
// of 16): out[r] = Σ w·a in some order, summaries[r] its summary.
TEXT ·dotF16WideRows1(SB), NOSPLIT, $0-56
	WIDE1_ROWS(F16_SUMMARY_INIT, F16_SUMMARY, F16_SUMMARY_TAIL, F16_SUMMARY_STORE)

// func dotF16WideSums1(w *byte, rowBytes, rows, n int, a *float64, out *float64, summaries *[2]uint16)
// dotF16WideRows1 for rows whose summaries are known (summaries is not touched): a decode
// mat-vec of F16 weights, whose rows do not change, 10% faster on cache-hot rows.
TEXT ·dotF16WideSums1(SB), NOSPLIT, $0-56
	WIDE1_ROWS(NO_SUMMARY_INIT, NO_SUMMARY, NO_SUMMARY_TAIL, NO_SUMMARY_STORE)

// func dotF16WideRows4(w *byte, rowBytes, rows, n int, a *float64, out *float64, summaries *[2]uint16)
// dotF16WideRows1 against four activation vectors of n float64 values each, one after
// the other at a: out[4r+k] is row r times vector k. A row is widened once for the four.
TEXT ·dotF16WideRows4(SB), NOSPLIT, $0-56
	MOVQ w+0(FP), R8
	MOVQ rows+16(FP), R9
	MOVQ a+32(FP), R10
	MOVQ out+40(FP), DI
	MOVQ summaries+48(FP), DX
	MOVQ n+24(FP), BX
	SHLQ $3, BX // bytes of one activation vector

wide4row:
	F16_SUMMARY_INIT
	MOVQ   R8, SI
	MOVQ   R10, R11
	LEAQ   (R10)(BX*1), R12
	LEAQ   (R12)(BX*1), R13
	LEAQ   (R13)(BX*1), R14
	MOVQ   n+24(FP), CX
	VPXORQ Z8, Z8, Z8
	VPXORQ Z9, Z9, Z9
	VPXORQ Z10, Z10, Z10
	VPXORQ Z11, Z11, Z11
	VPXORQ Z12, Z12, Z12
	VPXORQ Z13, Z13, Z13
	VPXORQ Z14, Z14, Z14
	VPXORQ Z15, Z15, Z15

wide4step:
	CMPQ CX, $32
	JLT  wide4tail
	F16_WIDEN
	F16_SUMMARY(0)
	F16_WIDE_FMA(R11, 0, Z8, Z9)
	F16_WIDE_FMA(R12, 0, Z10, Z11)
	F16_WIDE_FMA(R13, 0, Z12, Z13)
	F16_WIDE_FMA(R14, 0, Z14, Z15)
	ADDQ $64, SI
	ADDQ $256, R11
	ADDQ $256, R12
	ADDQ $256, R13
	ADDQ $256, R14
	SUBQ $32, CX
	JMP  wide4step

wide4tail:
	TESTQ CX, CX
	JZ    wide4sum
	F16_WIDEN16
	F16_SUMMARY_TAIL
	F16_WIDE_FMA16(R11, Z8, Z9)
	F16_WIDE_FMA16(R12, Z10, Z11)
	F16_WIDE_FMA16(R13, Z12, Z13)
	F16_WIDE_FMA16(R14, Z14, Z15)

wide4sum:

	F16_WIDE_SUM(Z8, Z9, Y8, Y9, X8, X9, 0)
	F16_WIDE_SUM(Z10, Z11, Y10, Y11, X10, X11, 8)
	F16_WIDE_SUM(Z12, Z13, Y12, Y13, X12, X13, 16)
	F16_WIDE_SUM(Z14, Z15, Y14, Y15, X14, X15, 24)
	F16_SUMMARY_STORE(DX)
	ADDQ rowBytes+8(FP), R8
	ADDQ $32, DI
	ADDQ $4, DX
	DECQ R9
	JNZ  wide4row
	CLEAR_HIGH
	RET

// func dotF16WideRows8(w *byte, rowBytes, rows, n int, a *float64, out *float64, summaries *[2]uint16)
// dotF16WideRows4 for eight activation vectors: out[8r+k] is row r times vector k. The
// widening of a row, which costs as much as four vectors' FMAs, is shared by eight. The
// pointers to the eight vectors take R9-R14, AX and BX, so the rows left are counted in
// the argument's own slot; the sixteen accumulators (two chains a vector, as in the other
// kernels) take Z8-Z23. On a 64-row tile of 256 values, 25% faster than two four-vector
// passes (BenchmarkF16WideRows).
TEXT ·dotF16WideRows8(SB), NOSPLIT, $0-56
	WIDE8_ROWS(F16_SUMMARY_INIT, F16_SUMMARY, F16_SUMMARY_TAIL, F16_SUMMARY_STORE)

// func dotF16WideSums8(w *byte, rowBytes, rows, n int, a *float64, out *float64, summaries *[2]uint16)
// dotF16WideRows8 for rows whose summaries are known (summaries is not touched).
TEXT ·dotF16WideSums8(SB), NOSPLIT, $0-56
	WIDE8_ROWS(NO_SUMMARY_INIT, NO_SUMMARY, NO_SUMMARY_TAIL, NO_SUMMARY_STORE)

// func f16SumSquares(x *byte, n int) float64
// The sum of the squares of n binary16 values (n a positive multiple of 16), each square
// exact in float64, added in some order (so within n·2^-53 of the exact sum, relatively).
TEXT ·f16SumSquares(SB), NOSPLIT, $0-24
	MOVQ   x+0(FP), SI
	MOVQ   n+8(FP), CX
	LEAQ   ret+16(FP), DI
	VPXORQ Z8, Z8, Z8
	VPXORQ Z9, Z9, Z9

squares32:
	CMPQ        CX, $32
	JLT         squares16
	F16_WIDEN
	VFMADD231PD Z2, Z2, Z8
	VFMADD231PD Z3, Z3, Z9
	VFMADD231PD Z4, Z4, Z8
	VFMADD231PD Z5, Z5, Z9
	ADDQ        $64, SI
	SUBQ        $32, CX
	JMP         squares32

squares16:
	TESTQ       CX, CX
	JZ          squared
	F16_WIDEN16
	VFMADD231PD Z2, Z2, Z8
	VFMADD231PD Z3, Z3, Z9

squared:
	F16_WIDE_SUM(Z8, Z9, Y8, Y9, X8, X9, 0)
	VZEROUPPER
	RET

// func exp32Blocks(x *float32, n int, table *[32]uint64) int
//
// exp32 on n float32 values in place (n a positive multiple of 8), eight a step in
// float64 lanes with exp32's operations: the same fused multiply-adds (VFMADD231PD is one
// rounding, as math.FMA), the table entry (ki mod 32, picked from the 32 in Z20-Z23 by two
// VPERMT2Q and bit 4 of the index) plus ki<<47, and one rounding to float32 at the end
// (VCVTPD2PS, to nearest). It stops before a step holding a value exp32 treats apart
// (|x| ≥ 88, infinities, NaNs: its exponent field test) and returns the values done.
TEXT ·exp32Blocks(SB), NOSPLIT, $0-32
	MOVQ          x+0(FP), SI
	MOVQ          n+8(FP), CX
	MOVQ          table+16(FP), DI
	XORQ          AX, AX
	VMOVDQU64     (DI), Z20
	VMOVDQU64     64(DI), Z21
	VMOVDQU64     128(DI), Z22
	VMOVDQU64     192(DI), Z23
	MOVQ          $0x40471547652B82FE, DX // 32/ln 2
	VPBROADCASTQ  DX, Z24
	MOVQ          $0x4338000000000000, DX // 0x1.8p52
	VPBROADCASTQ  DX, Z25
	MOVQ          $0x3EBC6AF84B912394, DX // c0
	VPBROADCASTQ  DX, Z26
	MOVQ          $0x3F2EBFCE50FAC4F3, DX // c1
	VPBROADCASTQ  DX, Z27
	MOVQ          $0x3F962E42FF0C52D6, DX // c2
	VPBROADCASTQ  DX, Z28
	MOVQ          $0x3FF0000000000000, DX // 1
	VPBROADCASTQ  DX, Z29
	MOVL          $0x7FF00000, DX
	VPBROADCASTD  DX, Y30
	MOVL          $0x42A00000, DX
	VPBROADCASTD  DX, Y31
	MOVQ          $16, DX
	VPBROADCASTQ  DX, Z19 // bit 4 of a table index

exp8:
	VMOVDQU       (SI), Y0
	VPANDD        Y30, Y0, Y1
	VPCMPUD       $6, Y31, Y1, K1 // exponent field > 0x42A: exp32's special cases
	KORTESTB      K1, K1
	JNZ           expdone
	VCVTPS2PD     Y0, Z0
	VMOVAPD       Z25, Z1
	VFMADD231PD   Z24, Z0, Z1 // kdShifted = 32/ln2·x + shift
	VSUBPD        Z25, Z1, Z2 // kd
	VMOVAPD       Z2, Z3
	VFMSUB231PD   Z24, Z0, Z3 // 32/ln2·x − kd, one rounding (−kd exact)
	VMOVDQA64     Z1, Z4
	VPERMI2Q      Z21, Z20, Z4 // entries 0-15 by bits 0-3
	VMOVDQA64     Z1, Z5
	VPERMI2Q      Z23, Z22, Z5 // entries 16-31
	VPTESTMQ      Z19, Z1, K2
	VMOVDQA64     Z5, K2, Z4
	VPSLLQ        $47, Z1, Z6
	VPADDQ        Z6, Z4, Z4 // scale
	VMOVAPD       Z27, Z5
	VFMADD231PD   Z26, Z3, Z5 // z = r·c0 + c1
	VMULPD        Z3, Z3, Z6 // r·r
	VMOVAPD       Z29, Z7
	VFMADD231PD   Z28, Z3, Z7 // r·c2 + 1
	VFMADD231PD   Z6, Z5, Z7 // z·r² + (r·c2 + 1)
	VMULPD        Z4, Z7, Z7
	VCVTPD2PS     Z7, Y7
	VMOVDQU       Y7, (SI)
	ADDQ          $32, SI
	ADDQ          $8, AX
	CMPQ          AX, CX
	JNE           exp8

expdone:
	CLEAR_HIGH
	MOVQ AX, ret+24(FP)
	RET

// Q8K_QUANT scales, rounds and narrows the 16 values in r (Q8_K's quants, a bsum group) and
// stores them at off(DI).
#define Q8K_QUANT(r, x, off) \
	VMULPS    Z19, r, r; \
	VCVTPS2DQ r, r; \
	VPMOVSDB  r, x; \
	VMOVDQU   x, off(DI)

// Q8K_SAD sums the quants at off(DI) (four bsum groups) as unsigned bytes (each plus 128,
// Z29 = 0x80 bytes) eight at a time (VPSADBW against zero, Z17) into x's eight words.
#define Q8K_SAD(r, x, off) \
	VMOVDQU64 off(DI), r; \
	VPXORD    Z29, r, r; \
	VPSADBW   Z17, r, r; \
	VPMOVQW   r, x

// func quantizeQ8KAVX512Blocks(dst *byte, src *float32, blocks int) int
//
// Q8_K's activation quantizer (encodeQ8_K, ggml's quantize_row_q8_K_ref), 256 values a
// block: iscale = -127/vmax for the first value of largest magnitude, d = 1/iscale, q =
// round-half-even(iscale·v) (nearest_int's rounding; |iscale·v| ≤ 127 rounds inside a signed
// byte), the sixteen bsums of 16 quants; an all-zero block for amax 0. The largest |v| is
// taken on the integer bits of |v| and its first occurrence found by comparing them. It
// stops before a block holding an infinity or a NaN, or whose iscale overflows (a subnormal
// largest value), which the scalar code decides, and returns the blocks done.
TEXT ·quantizeQ8KAVX512Blocks(SB), NOSPLIT, $0-32
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         blocks+16(FP), CX
	XORQ         R9, R9
	MOVL         $0x7FFFFFFF, DX
	VPBROADCASTD DX, Z30
	MOVL         $0x80808080, DX
	VPBROADCASTD DX, Z29
	VPXORD       Z17, Z17, Z17

q8kblock:
	VMOVUPS (SI), Z0
	VMOVUPS 64(SI), Z1
	VMOVUPS 128(SI), Z2
	VMOVUPS 192(SI), Z3
	VMOVUPS 256(SI), Z4
	VMOVUPS 320(SI), Z5
	VMOVUPS 384(SI), Z6
	VMOVUPS 448(SI), Z7
	VMOVUPS 512(SI), Z8
	VMOVUPS 576(SI), Z9
	VMOVUPS 640(SI), Z10
	VMOVUPS 704(SI), Z11
	VMOVUPS 768(SI), Z12
	VMOVUPS 832(SI), Z13
	VMOVUPS 896(SI), Z14
	VMOVUPS 960(SI), Z15
	VPANDD  Z30, Z0, Z16
	VPANDD  Z30, Z1, Z18
	VPMAXUD Z18, Z16, Z16
	VPANDD  Z30, Z2, Z18
	VPMAXUD Z18, Z16, Z16
	VPANDD  Z30, Z3, Z18
	VPMAXUD Z18, Z16, Z16
	VPANDD  Z30, Z4, Z18
	VPMAXUD Z18, Z16, Z16
	VPANDD  Z30, Z5, Z18
	VPMAXUD Z18, Z16, Z16
	VPANDD  Z30, Z6, Z18
	VPMAXUD Z18, Z16, Z16
	VPANDD  Z30, Z7, Z18
	VPMAXUD Z18, Z16, Z16
	VPANDD  Z30, Z8, Z18
	VPMAXUD Z18, Z16, Z16
	VPANDD  Z30, Z9, Z18
	VPMAXUD Z18, Z16, Z16
	VPANDD  Z30, Z10, Z18
	VPMAXUD Z18, Z16, Z16
	VPANDD  Z30, Z11, Z18
	VPMAXUD Z18, Z16, Z16
	VPANDD  Z30, Z12, Z18
	VPMAXUD Z18, Z16, Z16
	VPANDD  Z30, Z13, Z18
	VPMAXUD Z18, Z16, Z16
	VPANDD  Z30, Z14, Z18
	VPMAXUD Z18, Z16, Z16
	VPANDD  Z30, Z15, Z18
	VPMAXUD Z18, Z16, Z16
	VEXTRACTI64X4 $1, Z16, Y18
	VPMAXUD       Y18, Y16, Y16
	VEXTRACTI32X4 $1, Y16, X18
	VPMAXUD       X18, X16, X16
	VPSHUFD       $0x4E, X16, X18
	VPMAXUD       X18, X16, X16
	VPSHUFD       $0xB1, X16, X18
	VPMAXUD       X18, X16, X16
	VMOVD         X16, DX
	CMPL          DX, $0x7F800000
	JAE           q8kdone
	TESTL         DX, DX
	JZ            q8kzero
	VPBROADCASTD  DX, Z16

	// The first value of largest magnitude, its sign kept.
	MOVQ SI, R8

q8kfind:
	VPANDD   (R8), Z30, Z18
	VPCMPEQD Z16, Z18, K1
	KMOVW    K1, AX
	TESTL    AX, AX
	JNZ      q8kfound
	ADDQ     $64, R8
	JMP      q8kfind

q8kfound:
	TZCNTL AX, AX
	VMOVSS (R8)(AX*4), X18
	MOVL   $0xC2FE0000, DX   // -127
	VMOVD  DX, X19
	VDIVSS X18, X19, X19     // iscale = -127/vmax
	VMOVD  X19, DX
	ANDL   $0x7FFFFFFF, DX
	CMPL   DX, $0x7F800000
	JAE    q8kdone
	MOVL   $0x3F800000, DX   // 1
	VMOVD  DX, X20
	VDIVSS X19, X20, X20     // d = 1/iscale
	VMOVSS X20, (DI)
	VBROADCASTSS X19, Z19
	Q8K_QUANT(Z0, X0, 4)
	Q8K_QUANT(Z1, X1, 20)
	Q8K_QUANT(Z2, X2, 36)
	Q8K_QUANT(Z3, X3, 52)
	Q8K_QUANT(Z4, X4, 68)
	Q8K_QUANT(Z5, X5, 84)
	Q8K_QUANT(Z6, X6, 100)
	Q8K_QUANT(Z7, X7, 116)
	Q8K_QUANT(Z8, X8, 132)
	Q8K_QUANT(Z9, X9, 148)
	Q8K_QUANT(Z10, X10, 164)
	Q8K_QUANT(Z11, X11, 180)
	Q8K_QUANT(Z12, X12, 196)
	Q8K_QUANT(Z13, X13, 212)
	Q8K_QUANT(Z14, X14, 228)
	Q8K_QUANT(Z15, X15, 244)

	// bsums: each word pair of a group's sums less 2·8·128.
	Q8K_SAD(Z0, X0, 4)
	Q8K_SAD(Z1, X1, 68)
	Q8K_SAD(Z2, X2, 132)
	Q8K_SAD(Z3, X3, 196)
	VPHADDW      X1, X0, X0
	VPHADDW      X3, X2, X2
	MOVL         $0x08000800, DX // 2048 as words
	VMOVD        DX, X4
	VPBROADCASTD X4, X4
	VPSUBW       X4, X0, X0
	VPSUBW       X4, X2, X2
	VMOVDQU      X0, 260(DI)
	VMOVDQU      X2, 276(DI)
	JMP          q8knext

q8kzero:
	MOVL      $0, (DI)
	VPXORD    Z0, Z0, Z0
	VMOVDQU64 Z0, 4(DI)
	VMOVDQU64 Z0, 68(DI)
	VMOVDQU64 Z0, 132(DI)
	VMOVDQU64 Z0, 196(DI)
	VMOVDQU   Y0, 260(DI)

q8knext:
	ADDQ $1024, SI
	ADDQ $292, DI
	INCQ R9
	CMPQ R9, CX
	JNE  q8kblock

q8kdone:
	CLEAR_HIGH
	MOVQ R9, ret+24(FP)
	RET

// F16H_REDUCE adds up the four 16-lane accumulators Z16-Z19 of a head in dotF16WideAVX2's
// order and stores the score at (R12).
#define F16H_REDUCE \
	VADDPS        Z18, Z16, Z16; \
	VADDPS        Z19, Z17, Z17; \
	VADDPS        Z17, Z16, Z16; \
	VEXTRACTF32X8 $1, Z16, Y17; \
	VADDPS        Y16, Y17, Y17; \
	VEXTRACTF32X4 $1, Y17, X18; \
	VADDPS        X17, X18, X18; \
	VPERMILPS     $0x4E, X18, X19; \
	VADDPS        X19, X18, X19; \
	VMOVSHDUP     X19, X18; \
	VADDSS        X18, X19, X19; \
	VMOVSS        X19, (R12)

// func dotF16HeadsAVX512(q *float32, k *byte, kStride, positions, dk, heads int, scores *float32, headStride int)
//
// dotF16Wide of every query head against each of positions F16 key rows (kStride bytes
// apart), for dk = 64, 128, 192 or 256: scores[h·headStride + p] = q_h · k_p. A key row is
// widened once (VCVTPH2PS, exact) into dk/16 registers (Z0-Z15) and met by every head's
// query (dk floats each, consecutive) with four 16-lane accumulators, each the 512-bit
// form of dotF16WideAVX2's pair (a_j, b_j): the same fused multiply-adds lane by lane, then
// the same reduction ((a0+a2)+(a1+a3) in both halves, high half onto low, high four onto
// low four, then (h0+h2)+(h1+h3)), so the same bits.
TEXT ·dotF16HeadsAVX512(SB), NOSPLIT, $0-64
	MOVQ k+8(FP), SI
	MOVQ positions+24(FP), R8
	MOVQ scores+48(FP), R9
	MOVQ headStride+56(FP), R10
	SHLQ $2, R10
	MOVQ dk+32(FP), R11

f16hpos:
	VCVTPH2PS (SI), Z0
	VCVTPH2PS 32(SI), Z1
	VCVTPH2PS 64(SI), Z2
	VCVTPH2PS 96(SI), Z3
	CMPQ      R11, $64
	JEQ       f16hkey
	VCVTPH2PS 128(SI), Z4
	VCVTPH2PS 160(SI), Z5
	VCVTPH2PS 192(SI), Z6
	VCVTPH2PS 224(SI), Z7
	CMPQ      R11, $128
	JEQ       f16hkey
	VCVTPH2PS 256(SI), Z8
	VCVTPH2PS 288(SI), Z9
	VCVTPH2PS 320(SI), Z10
	VCVTPH2PS 352(SI), Z11
	CMPQ      R11, $192
	JEQ       f16hkey
	VCVTPH2PS 384(SI), Z12
	VCVTPH2PS 416(SI), Z13
	VCVTPH2PS 448(SI), Z14
	VCVTPH2PS 480(SI), Z15

f16hkey:
	MOVQ q+0(FP), DI
	MOVQ heads+40(FP), CX
	MOVQ R9, R12

f16hhead:
	VPXORD      Z16, Z16, Z16
	VPXORD      Z17, Z17, Z17
	VPXORD      Z18, Z18, Z18
	VPXORD      Z19, Z19, Z19
	VFMADD231PS (DI), Z0, Z16
	VFMADD231PS 64(DI), Z1, Z17
	VFMADD231PS 128(DI), Z2, Z18
	VFMADD231PS 192(DI), Z3, Z19
	CMPQ        R11, $64
	JEQ         f16hsum
	VFMADD231PS 256(DI), Z4, Z16
	VFMADD231PS 320(DI), Z5, Z17
	VFMADD231PS 384(DI), Z6, Z18
	VFMADD231PS 448(DI), Z7, Z19
	CMPQ        R11, $128
	JEQ         f16hsum
	VFMADD231PS 512(DI), Z8, Z16
	VFMADD231PS 576(DI), Z9, Z17
	VFMADD231PS 640(DI), Z10, Z18
	VFMADD231PS 704(DI), Z11, Z19
	CMPQ        R11, $192
	JEQ         f16hsum
	VFMADD231PS 768(DI), Z12, Z16
	VFMADD231PS 832(DI), Z13, Z17
	VFMADD231PS 896(DI), Z14, Z18
	VFMADD231PS 960(DI), Z15, Z19

f16hsum:
	F16H_REDUCE
	ADDQ          R10, R12
	LEAQ          (DI)(R11*4), DI
	DECQ          CX
	JNZ           f16hhead

	ADDQ kStride+16(FP), SI
	ADDQ $4, R9
	DECQ R8
	JNZ  f16hpos
	CLEAR_HIGH
	RET

// func dotF16HeadsRowAVX512(q, k *float32, dk, heads int, scores *float32, headStride int)
//
// dotF16HeadsAVX512 for one key row already widened to float32 (k) of any multiple of 64
// values: each head's query against it, 64 values a step from memory, the same
// accumulators and reduction.
TEXT ·dotF16HeadsRowAVX512(SB), NOSPLIT, $0-48
	MOVQ q+0(FP), DI
	MOVQ dk+16(FP), R11
	MOVQ heads+24(FP), CX
	MOVQ scores+32(FP), R12
	MOVQ headStride+40(FP), R10
	SHLQ $2, R10

f16rhead:
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19
	MOVQ   k+8(FP), SI
	MOVQ   R11, R9
	SHRQ   $6, R9

f16rstep:
	VMOVUPS     (SI), Z0
	VMOVUPS     64(SI), Z1
	VMOVUPS     128(SI), Z2
	VMOVUPS     192(SI), Z3
	VFMADD231PS (DI), Z0, Z16
	VFMADD231PS 64(DI), Z1, Z17
	VFMADD231PS 128(DI), Z2, Z18
	VFMADD231PS 192(DI), Z3, Z19
	ADDQ        $256, SI
	ADDQ        $256, DI
	DECQ        R9
	JNZ         f16rstep
	F16H_REDUCE
	ADDQ        R10, R12
	DECQ        CX
	JNZ         f16rhead
	CLEAR_HIGH
	RET
