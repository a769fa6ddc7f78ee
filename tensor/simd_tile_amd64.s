//go:build goexperiment.simd

#include "textflag.h"
#include "simd_amd64.h"

// The tiled attention's two-row products (see tileScores2AVX512 and tileAccumulate2AVX512
// in simd_attn_amd64.go). Written here rather than with archsimd because the compiler
// kept the broadcast query value on the stack and copied each accumulator around its
// three-operand FMA, about as many moves and reloads as multiply-adds. Go's operand order
// is Intel's reversed: VFMADD231PS Z20, Z16, Z0 is Z0 += Z16·Z20, one rounding.

// FMA8 adds the four vectors Z16-Z19 times Z20 to Z0-Z3 and times Z21 to Z4-Z7: eight
// independent chains, enough to keep both FMA ports busy through an FMA's latency.
#define FMA8 \
	VFMADD231PS Z20, Z16, Z0; \
	VFMADD231PS Z20, Z17, Z1; \
	VFMADD231PS Z20, Z18, Z2; \
	VFMADD231PS Z20, Z19, Z3; \
	VFMADD231PS Z21, Z16, Z4; \
	VFMADD231PS Z21, Z17, Z5; \
	VFMADD231PS Z21, Z18, Z6; \
	VFMADD231PS Z21, Z19, Z7

#define LOAD4(mem0, mem1, mem2, mem3, a, b, c, d) \
	VMOVUPS mem0, a; \
	VMOVUPS mem1, b; \
	VMOVUPS mem2, c; \
	VMOVUPS mem3, d

#define SCALE4(s, a, b, c, d) \
	VMULPS s, a, a; \
	VMULPS s, b, b; \
	VMULPS s, c, c; \
	VMULPS s, d, d

#define STORE4(a, b, c, d, reg) \
	VMOVUPS a, (reg); \
	VMOVUPS b, 64(reg); \
	VMOVUPS c, 128(reg); \
	VMOVUPS d, 192(reg)

// func tileDots2AVX512(scores0, scores1 *[ggmlTile]float32, q0, q1, keys *float32, dk int, scale float32)
//
// scores0[r] = (q0·K[r])·scale and scores1[r] = (q1·K[r])·scale for the tile's 64
// positions, each dot one chain of fused multiply-adds over the dk > 0 dimensions in
// order; keys is the tile transposed (keys[64d + r]).
TEXT ·tileDots2AVX512(SB), NOSPLIT, $0-52
	MOVQ   q0+16(FP), AX
	MOVQ   q1+24(FP), BX
	MOVQ   keys+32(FP), SI
	MOVQ   dk+40(FP), CX
	ZERO_Z0_7

dims:
	LOAD4((SI), 64(SI), 128(SI), 192(SI), Z16, Z17, Z18, Z19)
	VBROADCASTSS (AX), Z20
	VBROADCASTSS (BX), Z21
	FMA8
	ADDQ $4, AX
	ADDQ $4, BX
	ADDQ $256, SI
	DECQ CX
	JNZ  dims

	VBROADCASTSS scale+48(FP), Z20
	SCALE4(Z20, Z0, Z1, Z2, Z3)
	SCALE4(Z20, Z4, Z5, Z6, Z7)
	MOVQ         scores0+0(FP), DI
	MOVQ         scores1+8(FP), DX
	STORE4(Z0, Z1, Z2, Z3, DI)
	STORE4(Z4, Z5, Z6, Z7, DX)
	CLEAR_HIGH
	RET

// func tileAccumulate2Blocks(acc0, acc1, values, w0, w1 *float32, positions, dv int)
//
// acc0 += Σ_r w0[r]·V[r] and acc1 += Σ_r w1[r]·V[r] over positions > 0 rows of values
// (dv floats each, dv a positive multiple of 64), each lane one chain of fused
// multiply-adds over the rows in order; 64 values of both accumulators at a time.
TEXT ·tileAccumulate2Blocks(SB), NOSPLIT, $0-56
	MOVQ acc0+0(FP), DI
	MOVQ acc1+8(FP), DX
	MOVQ values+16(FP), R10
	MOVQ dv+48(FP), R8
	LEAQ (R8*4), R9 // a row's bytes
	SHRQ $6, R8     // blocks of 64 values

block:
	LOAD4((DI), 64(DI), 128(DI), 192(DI), Z0, Z1, Z2, Z3)
	LOAD4((DX), 64(DX), 128(DX), 192(DX), Z4, Z5, Z6, Z7)
	MOVQ R10, SI
	MOVQ w0+24(FP), AX
	MOVQ w1+32(FP), BX
	MOVQ positions+40(FP), CX

rows:
	VBROADCASTSS (AX), Z20
	VBROADCASTSS (BX), Z21
	LOAD4((SI), 64(SI), 128(SI), 192(SI), Z16, Z17, Z18, Z19)
	FMA8
	ADDQ $4, AX
	ADDQ $4, BX
	ADDQ R9, SI
	DECQ CX
	JNZ  rows

	STORE4(Z0, Z1, Z2, Z3, DI)
	STORE4(Z4, Z5, Z6, Z7, DX)
	ADDQ $256, DI
	ADDQ $256, DX
	ADDQ $256, R10
	DECQ R8
	JNZ  block
	CLEAR_HIGH
	RET

// func tileMaxAVX512(scores *[ggmlTile]float32) (max float32, nan bool)
//
// The largest of the tile's 64 scores (−Inf if all are), and whether any is a NaN, for
// which the caller keeps its scalar scan (where a NaN and the values after it interact).
TEXT ·tileMaxAVX512(SB), NOSPLIT, $0-13
	MOVQ          scores+0(FP), SI
	LOAD4((SI), 64(SI), 128(SI), 192(SI), Z0, Z1, Z2, Z3)
	VCMPPS        $3, Z0, Z0, K1 // unordered: a NaN lane
	VCMPPS        $3, Z1, Z1, K2
	VCMPPS        $3, Z2, Z2, K3
	VCMPPS        $3, Z3, Z3, K4
	KORW          K1, K2, K1
	KORW          K3, K4, K3
	KORTESTW      K1, K3
	SETNE         nan+12(FP)
	VMAXPS        Z1, Z0, Z0
	VMAXPS        Z3, Z2, Z2
	VMAXPS        Z2, Z0, Z0
	VEXTRACTF64X4 $1, Z0, Y1
	VMAXPS        Y1, Y0, Y0
	VEXTRACTF128  $1, Y0, X1
	VMAXPS        X1, X0, X0
	VPERMILPS     $0x4E, X0, X1
	VMAXPS        X1, X0, X0
	VPERMILPS     $0xB1, X0, X1
	VMAXPS        X1, X0, X0
	VMOVSS        X0, max+8(FP)
	VZEROUPPER
	RET

// FMA16 is FMA8 for four rows: Z16-Z19 times Z20-Z23 added to Z0-Z3, Z4-Z7, Z8-Z11 and
// Z12-Z15. Four rows load each vector of the tile once for sixteen multiply-adds: the
// tile (32 KiB of keys or values for 128 dimensions) comes from L2, whose bandwidth two
// rows' eight multiply-adds a load outran.
#define FMA16 \
	FMA8; \
	VFMADD231PS Z22, Z16, Z8; \
	VFMADD231PS Z22, Z17, Z9; \
	VFMADD231PS Z22, Z18, Z10; \
	VFMADD231PS Z22, Z19, Z11; \
	VFMADD231PS Z23, Z16, Z12; \
	VFMADD231PS Z23, Z17, Z13; \
	VFMADD231PS Z23, Z18, Z14; \
	VFMADD231PS Z23, Z19, Z15

// func tileDots4AVX512(scores *[4]*[ggmlTile]float32, q *[4]*float32, keys *float32, dk int, scale float32)
//
// tileDots2AVX512 for four query rows.
TEXT ·tileDots4AVX512(SB), NOSPLIT, $0-36
	MOVQ   q+8(FP), DX
	MOVQ   (DX), AX
	MOVQ   8(DX), BX
	MOVQ   16(DX), R8
	MOVQ   24(DX), R9
	MOVQ   keys+16(FP), SI
	MOVQ   dk+24(FP), CX
	ZERO_Z0_7
	ZERO_Z8_15

dims4:
	LOAD4((SI), 64(SI), 128(SI), 192(SI), Z16, Z17, Z18, Z19)
	VBROADCASTSS (AX), Z20
	VBROADCASTSS (BX), Z21
	VBROADCASTSS (R8), Z22
	VBROADCASTSS (R9), Z23
	FMA16
	ADDQ $4, AX
	ADDQ $4, BX
	ADDQ $4, R8
	ADDQ $4, R9
	ADDQ $256, SI
	DECQ CX
	JNZ  dims4

	VBROADCASTSS scale+32(FP), Z20
	SCALE4(Z20, Z0, Z1, Z2, Z3)
	SCALE4(Z20, Z4, Z5, Z6, Z7)
	SCALE4(Z20, Z8, Z9, Z10, Z11)
	SCALE4(Z20, Z12, Z13, Z14, Z15)
	MOVQ         scores+0(FP), DX
	MOVQ         (DX), DI
	STORE4(Z0, Z1, Z2, Z3, DI)
	MOVQ         8(DX), DI
	STORE4(Z4, Z5, Z6, Z7, DI)
	MOVQ         16(DX), DI
	STORE4(Z8, Z9, Z10, Z11, DI)
	MOVQ         24(DX), DI
	STORE4(Z12, Z13, Z14, Z15, DI)
	CLEAR_HIGH
	RET

// func tileAccumulate4Blocks(acc *[4]*float32, values *float32, w *[4]*float32, positions, dv int)
//
// tileAccumulate2Blocks for four rows.
TEXT ·tileAccumulate4Blocks(SB), NOSPLIT, $0-40
	MOVQ acc+0(FP), DX
	MOVQ (DX), DI
	MOVQ 8(DX), R11
	MOVQ 16(DX), R12
	MOVQ 24(DX), DX
	MOVQ values+8(FP), R10
	MOVQ dv+32(FP), R14
	LEAQ (R14*4), R13 // a row's bytes
	SHRQ $6, R14      // blocks of 64 values

block4:
	LOAD4((DI), 64(DI), 128(DI), 192(DI), Z0, Z1, Z2, Z3)
	LOAD4((R11), 64(R11), 128(R11), 192(R11), Z4, Z5, Z6, Z7)
	LOAD4((R12), 64(R12), 128(R12), 192(R12), Z8, Z9, Z10, Z11)
	LOAD4((DX), 64(DX), 128(DX), 192(DX), Z12, Z13, Z14, Z15)
	MOVQ R10, SI
	MOVQ w+16(FP), CX
	MOVQ (CX), AX
	MOVQ 8(CX), BX
	MOVQ 16(CX), R8
	MOVQ 24(CX), R9
	MOVQ positions+24(FP), CX

rows4:
	VBROADCASTSS (AX), Z20
	VBROADCASTSS (BX), Z21
	VBROADCASTSS (R8), Z22
	VBROADCASTSS (R9), Z23
	LOAD4((SI), 64(SI), 128(SI), 192(SI), Z16, Z17, Z18, Z19)
	FMA16
	ADDQ $4, AX
	ADDQ $4, BX
	ADDQ $4, R8
	ADDQ $4, R9
	ADDQ R13, SI
	DECQ CX
	JNZ  rows4

	STORE4(Z0, Z1, Z2, Z3, DI)
	STORE4(Z4, Z5, Z6, Z7, R11)
	STORE4(Z8, Z9, Z10, Z11, R12)
	STORE4(Z12, Z13, Z14, Z15, DX)
	ADDQ $256, DI
	ADDQ $256, R11
	ADDQ $256, R12
	ADDQ $256, DX
	ADDQ $256, R10
	DECQ R14
	JNZ  block4
	CLEAR_HIGH
	RET

// expfAVX2's constants (ggml_v_expf), broadcast.
DATA tileExpConsts<>+0(SB)/4, $0x3fb8aa3b  // log2(e), 0x1.715476p+0
DATA tileExpConsts<>+4(SB)/4, $0x4b400000  // 0x1.8p23, the rounding shift
DATA tileExpConsts<>+8(SB)/4, $0x3f317200  // 0x1.62e4p-1
DATA tileExpConsts<>+12(SB)/4, $0x35bfbe8e // 0x1.7f7d1cp-20
DATA tileExpConsts<>+16(SB)/4, $0x3c072010 // c5 0x1.0e4020p-7
DATA tileExpConsts<>+20(SB)/4, $0x3d2b9f17 // c4 0x1.573e2ep-5
DATA tileExpConsts<>+24(SB)/4, $0x3e2aaf33 // c3 0x1.555e66p-3
DATA tileExpConsts<>+28(SB)/4, $0x3efffedb // c2 0x1.fffdb6p-2
DATA tileExpConsts<>+32(SB)/4, $0x3f7ffff6 // c1 0x1.ffffecp-1
DATA tileExpConsts<>+36(SB)/4, $0x3f800000 // 1
DATA tileExpConsts<>+40(SB)/4, $0x42fc0000 // 126, the range expfAVX2 covers
DATA tileExpConsts<>+44(SB)/4, $0xff800000 // −Inf, a masked position
DATA tileExpConsts<>+48(SB)/4, $127        // the exponent bias
GLOBL tileExpConsts<>(SB), RODATA|NOPTR, $52

// EXP16 turns the 16 scores in v into expfAVX2(v − max) (max in Z20), 0 where a score is
// −Inf, and ORs into K7 the lanes expfAVX2 leaves to the scalar code (|n| > 126 other than
// a masked lane, or a NaN). Z28 holds 126, Z29 −Inf, Z31 zeros; scratch: Z21-Z27, K1-K3.
#define EXP16(v) \
	VSUBPS        Z20, v, v; \
	VBROADCASTSS  tileExpConsts<>+4(SB), Z22; \
	VMOVAPS       Z22, Z21; \
	VFMADD231PS.BCST tileExpConsts<>+0(SB), v, Z21; \
	VSUBPS        Z22, Z21, Z21; \
	VCMPPS        $0x1E, Z28, Z21, K1; \
	VCMPPS        $3, Z21, Z21, K2; \
	KORW          K1, K2, K1; \
	VPXORD        Z23, Z23, Z23; \
	VSUBPS        Z21, Z23, Z23; \
	VCMPPS        $0x1E, Z28, Z23, K2; \
	VCMPPS        $0, Z29, v, K3; \
	KANDNW        K2, K3, K2; \
	KORW          K1, K2, K1; \
	KORW          K1, K7, K7; \
	VMOVAPS       v, Z24; \
	VFMADD231PS.BCST tileExpConsts<>+8(SB), Z23, Z24; \
	VMOVAPS       Z24, Z25; \
	VFMADD231PS.BCST tileExpConsts<>+12(SB), Z23, Z25; \
	VMULPS        Z25, Z25, Z26; \
	VBROADCASTSS  tileExpConsts<>+20(SB), Z22; \
	VFMADD231PS.BCST tileExpConsts<>+16(SB), Z25, Z22; \
	VBROADCASTSS  tileExpConsts<>+28(SB), Z24; \
	VFMADD231PS.BCST tileExpConsts<>+24(SB), Z25, Z24; \
	VFMADD213PS   Z24, Z26, Z22; \
	VBROADCASTSS  tileExpConsts<>+36(SB), Z24; \
	VFMADD231PS.BCST tileExpConsts<>+32(SB), Z25, Z24; \
	VFMADD213PS   Z24, Z26, Z22; \
	VCVTPS2DQ     Z21, Z27; \
	VPADDD.BCST   tileExpConsts<>+48(SB), Z27, Z27; \
	VPSLLD        $23, Z27, Z27; \
	VMULPS        Z27, Z22, v; \
	VMOVAPS       Z31, K3, v

// SUM16 adds v's lanes as sum16 does (high eight onto low eight, high four onto low four,
// then (0+2)+(1+3)) and adds the result, widened, to X30 (float64).
#define SUM16(v, vY, vX) \
	VEXTRACTF64X4 $1, v, Y21; \
	VADDPS        Y21, vY, Y21; \
	VEXTRACTF32X4 $1, Y21, X22; \
	VADDPS        X22, X21, X21; \
	VPERMILPS     $0x4E, X21, X22; \
	VADDPS        X22, X21, X21; \
	VMOVSHDUP     X21, X22; \
	VADDSS        X22, X21, X21; \
	VCVTSS2SD     X21, X21, X21; \
	VADDSD        X21, X30, X30

// func tileExpSumAVX512(scores *[ggmlTile]float32, max float32) (sum float64, ok bool)
//
// tileExp's exponentials of the tile in place and the float64 sum of its four sum16s, in
// order; ok false (scores untouched) when a lane needs expfAVX2's scalar finish.
TEXT ·tileExpSumAVX512(SB), NOSPLIT, $0-25
	MOVQ         scores+0(FP), SI
	VBROADCASTSS max+8(FP), Z20
	VBROADCASTSS tileExpConsts<>+40(SB), Z28
	VBROADCASTSS tileExpConsts<>+44(SB), Z29
	VPXORD       Z31, Z31, Z31
	KXORW        K7, K7, K7
	LOAD4((SI), 64(SI), 128(SI), 192(SI), Z0, Z1, Z2, Z3)
	EXP16(Z0)
	EXP16(Z1)
	EXP16(Z2)
	EXP16(Z3)
	KORTESTW     K7, K7
	JNZ          special
	STORE4(Z0, Z1, Z2, Z3, SI)
	VPXORD       X30, X30, X30
	SUM16(Z0, Y0, X0)
	SUM16(Z1, Y1, X1)
	SUM16(Z2, Y2, X2)
	SUM16(Z3, Y3, X3)
	VMOVSD       X30, sum+16(FP)
	MOVB         $1, ok+24(FP)
	CLEAR_HIGH
	RET

special:
	MOVB $0, ok+24(FP)
	CLEAR_HIGH
	RET
