//go:build goexperiment.simd

#include "textflag.h"

// F16C kernels: see simd_f16c_amd64.go. Go's operand order is Intel's reversed:
// VFMADD213PS m, Y0, Y1 is Y1 = Y0·Y1 + m. Both end with VZEROUPPER (Go's scalar float
// code is legacy SSE; see simd_amd64.go).

// func madHalfF16CBlocks(acc, x *float32, n int, s float32)
// n is a positive multiple of 8.
TEXT ·madHalfF16CBlocks(SB), NOSPLIT, $0-28
	MOVQ         acc+0(FP), DI
	MOVQ         x+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS s+24(FP), Y0

mad:
	VMOVUPS     (SI), Y1
	VFMADD213PS (DI), Y0, Y1
	VCVTPS2PH   $0, Y1, X1   // round to nearest binary16, ties to even
	VCVTPH2PS   X1, Y1
	VMOVUPS     Y1, (DI)
	ADDQ        $32, SI
	ADDQ        $32, DI
	SUBQ        $8, CX
	JNZ         mad
	VZEROUPPER
	RET

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
	MOVQ         acc+0(FP), DI
	MOVQ         x+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS s+24(FP), Z0

mad16:
	VMOVUPS     (SI), Z1
	VFMADD213PS (DI), Z0, Z1
	VCVTPS2PH   $0, Z1, Y1
	VCVTPH2PS   Y1, Z1
	VMOVUPS     Z1, (DI)
	ADDQ        $64, SI
	ADDQ        $64, DI
	SUBQ        $16, CX
	JNZ         mad16
	VZEROUPPER
	RET
