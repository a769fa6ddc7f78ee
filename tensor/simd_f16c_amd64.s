//go:build goexperiment.simd

#include "textflag.h"

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

// func madHalfF16CBlocks(acc, x *float32, n int, s float32)
// n is a positive multiple of 8. VCVTPS2PH $0 rounds to nearest binary16, ties to even.
TEXT ·madHalfF16CBlocks(SB), NOSPLIT, $0-28
	MAD_HALF(mad8, Y0, Y1, X1, 32, 8)

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
