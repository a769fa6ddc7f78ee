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
