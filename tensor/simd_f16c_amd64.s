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

// ROWS4_POINTERS points BX, DX and R10 at the three rows after SI's, R9 bytes apart.
#define ROWS4_POINTERS \
	LEAQ (SI)(R9*1), BX; \
	LEAQ (BX)(R9*1), DX; \
	LEAQ (DX)(R9*1), R10

// VEC_F16_ROW multiplies the four 16-value quarters of a step of row r (F16 at p, widened
// by VCVTPH2PS) by the activations in Z16-Z19 into the row's four accumulators: the
// fused multiply-adds of ggml_vec_dot_f16's AVX-512 loop.
#define VEC_F16_ROW(p, a0, a1, a2, a3) \
	VCVTPH2PS   (p), Z20; \
	VFMADD231PS Z16, Z20, a0; \
	VCVTPH2PS   32(p), Z21; \
	VFMADD231PS Z17, Z21, a1; \
	VCVTPH2PS   64(p), Z22; \
	VFMADD231PS Z18, Z22, a2; \
	VCVTPH2PS   96(p), Z23; \
	VFMADD231PS Z19, Z23, a3

// TINY_REDUCE stores at off(AX) the 16 lanes of c added as _mm512_reduce_add_ps does.
#define TINY_REDUCE(c, cY, off) \
	VEXTRACTF32X8 $1, c, Y24; \
	VADDPS        Y24, cY, Y24; \
	VEXTRACTF32X4 $1, Y24, X25; \
	VADDPS        X25, X24, X25; \
	VMOVHLPS      X25, X25, X26; \
	VADDPS        X26, X25, X25; \
	VMOVSHDUP     X25, X26; \
	VADDSS        X26, X25, X25; \
	VMOVSS        X25, off(AX)

// VEC_REDUCE stores at off(AX) a row's four accumulators added as GGML_F32x16_REDUCE
// does: (a0+a2)+(a1+a3), then the 16 lanes as TINY_REDUCE.
#define VEC_REDUCE(a0, a1, a2, a3, a0Y, off) \
	VADDPS a2, a0, a0; \
	VADDPS a3, a1, a1; \
	VADDPS a1, a0, a0; \
	TINY_REDUCE(a0, a0Y, off)

// func vecF16Rows4AVX512(w *byte, rowBytes, steps int, a *float32, out *[4]float32)
//
// vecReduced of four F16 rows (rowBytes apart) by one widened vector, steps steps of 64
// values, the rows read as F16 and widened in registers.
TEXT ·vecF16Rows4AVX512(SB), NOSPLIT, $0-40
	MOVQ   w+0(FP), SI
	MOVQ   rowBytes+8(FP), R9
	MOVQ   steps+16(FP), CX
	MOVQ   a+24(FP), DI
	MOVQ   out+32(FP), AX
	ROWS4_POINTERS
	ZERO_Z0_7
	ZERO_Z8_15

vecf16step:
	VMOVUPS (DI), Z16
	VMOVUPS 64(DI), Z17
	VMOVUPS 128(DI), Z18
	VMOVUPS 192(DI), Z19
	VEC_F16_ROW(SI, Z0, Z1, Z2, Z3)
	VEC_F16_ROW(BX, Z4, Z5, Z6, Z7)
	VEC_F16_ROW(DX, Z8, Z9, Z10, Z11)
	VEC_F16_ROW(R10, Z12, Z13, Z14, Z15)
	ADDQ $128, SI
	ADDQ $128, BX
	ADDQ $128, DX
	ADDQ $128, R10
	ADDQ $256, DI
	DECQ CX
	JNZ  vecf16step

	VEC_REDUCE(Z0, Z1, Z2, Z3, Y0, 0)
	VEC_REDUCE(Z4, Z5, Z6, Z7, Y4, 4)
	VEC_REDUCE(Z8, Z9, Z10, Z11, Y8, 8)
	VEC_REDUCE(Z12, Z13, Z14, Z15, Y12, 12)
	CLEAR_HIGH
	RET

// TINY_F16_ROW widens 16 values of an F16 row (p) and multiplies them by the four
// vectors' 16 values in Z16-Z19 into the row's four accumulators.
#define TINY_F16_ROW(p, c0, c1, c2, c3) \
	VCVTPH2PS   (p), Z20; \
	VFMADD231PS Z16, Z20, c0; \
	VFMADD231PS Z17, Z20, c1; \
	VFMADD231PS Z18, Z20, c2; \
	VFMADD231PS Z19, Z20, c3

// func tinyF16Rows4x4AVX512(w *byte, rowBytes, steps int, a *float32, aStride int, out *[16]float32)
//
// tinyDot of four F16 rows (rowBytes apart, read as F16 and widened in registers) by four
// widened vectors (aStride bytes apart), steps steps of 16 values: out[4r+t] for row r and
// vector t, each output in its own accumulator.
TEXT ·tinyF16Rows4x4AVX512(SB), NOSPLIT, $0-48
	MOVQ   w+0(FP), SI
	MOVQ   rowBytes+8(FP), R9
	MOVQ   steps+16(FP), CX
	MOVQ   a+24(FP), DI
	MOVQ   aStride+32(FP), R11
	MOVQ   out+40(FP), AX
	ROWS4_POINTERS
	LEAQ   (DI)(R11*1), R8
	LEAQ   (R8)(R11*1), R12
	LEAQ   (R12)(R11*1), R13
	ZERO_Z0_7
	ZERO_Z8_15

tinyf16step:
	VMOVUPS (DI), Z16
	VMOVUPS (R8), Z17
	VMOVUPS (R12), Z18
	VMOVUPS (R13), Z19
	TINY_F16_ROW(SI, Z0, Z1, Z2, Z3)
	TINY_F16_ROW(BX, Z4, Z5, Z6, Z7)
	TINY_F16_ROW(DX, Z8, Z9, Z10, Z11)
	TINY_F16_ROW(R10, Z12, Z13, Z14, Z15)
	ADDQ $32, SI
	ADDQ $32, BX
	ADDQ $32, DX
	ADDQ $32, R10
	ADDQ $64, DI
	ADDQ $64, R8
	ADDQ $64, R12
	ADDQ $64, R13
	DECQ CX
	JNZ  tinyf16step

	TINY_REDUCE(Z0, Y0, 0)
	TINY_REDUCE(Z1, Y1, 4)
	TINY_REDUCE(Z2, Y2, 8)
	TINY_REDUCE(Z3, Y3, 12)
	TINY_REDUCE(Z4, Y4, 16)
	TINY_REDUCE(Z5, Y5, 20)
	TINY_REDUCE(Z6, Y6, 24)
	TINY_REDUCE(Z7, Y7, 28)
	TINY_REDUCE(Z8, Y8, 32)
	TINY_REDUCE(Z9, Y9, 36)
	TINY_REDUCE(Z10, Y10, 40)
	TINY_REDUCE(Z11, Y11, 44)
	TINY_REDUCE(Z12, Y12, 48)
	TINY_REDUCE(Z13, Y13, 52)
	TINY_REDUCE(Z14, Y14, 56)
	TINY_REDUCE(Z15, Y15, 60)
	CLEAR_HIGH
	RET

// The F16 V accumulation of ggml's per-row attention for eight query heads at once
// (madHalfHeads8AVX512). Head h's two 16-value slices live in Z(h) and Z(8+h) across all
// the positions, so each step is one FMA and the rounding to binary16 and back, with no
// loads or stores of the accumulators; sixteen independent chains cover the latency of
// the conversions. HEAD_ACC applies op to head h's two slices in memory (R10 is head 0's,
// R11 head 1's, R8 the bytes between heads, R12 three times that).
#define HEAD_ACC(op, mem0, mem1, a, b) \
	op mem0, a; \
	op mem1, b

#define HEADS_ACC(op) \
	HEAD_ACC(op, (R10), 64(R10), Z0, Z8); \
	HEAD_ACC(op, (R11), 64(R11), Z1, Z9); \
	HEAD_ACC(op, (R10)(R8*2), 64(R10)(R8*2), Z2, Z10); \
	HEAD_ACC(op, (R10)(R12*1), 64(R10)(R12*1), Z3, Z11); \
	HEAD_ACC(op, (R10)(R8*4), 64(R10)(R8*4), Z4, Z12); \
	HEAD_ACC(op, (R11)(R8*4), 64(R11)(R8*4), Z5, Z13); \
	HEAD_ACC(op, (R10)(R12*2), 64(R10)(R12*2), Z6, Z14); \
	HEAD_ACC(op, (R11)(R12*2), 64(R11)(R12*2), Z7, Z15)

#define STORE_HEAD(a, b, mem0, mem1) \
	VMOVUPS a, mem0; \
	VMOVUPS b, mem1

#define HEADS_STORE \
	STORE_HEAD(Z0, Z8, (R10), 64(R10)); \
	STORE_HEAD(Z1, Z9, (R11), 64(R11)); \
	STORE_HEAD(Z2, Z10, (R10)(R8*2), 64(R10)(R8*2)); \
	STORE_HEAD(Z3, Z11, (R10)(R12*1), 64(R10)(R12*1)); \
	STORE_HEAD(Z4, Z12, (R10)(R8*4), 64(R10)(R8*4)); \
	STORE_HEAD(Z5, Z13, (R11)(R8*4), 64(R11)(R8*4)); \
	STORE_HEAD(Z6, Z14, (R10)(R12*2), 64(R10)(R12*2)); \
	STORE_HEAD(Z7, Z15, (R11)(R12*2), 64(R11)(R12*2))

// ROUND16 rounds a and b to binary16 precision (to nearest, ties to even) through Y19
// and Y20.
#define ROUND16(a, b) \
	VCVTPS2PH $0, a, Y19; \
	VCVTPS2PH $0, b, Y20; \
	VCVTPH2PS Y19, a; \
	VCVTPH2PS Y20, b

// MAD_STEP is head h's step at a position: acc = round16(v·ws[h] + acc), fused.
#define MAD_STEP(h, a, b) \
	VBROADCASTSS h*4(AX), Z18; \
	VFMADD231PS  Z18, Z16, a; \
	VFMADD231PS  Z18, Z17, b; \
	ROUND16(a, b)

// SCALE_STEP rescales head h's accumulator, acc = round16(acc·ms[h]), when bit h of R14
// says its running maximum rose at this position.
#define SCALE_STEP(h, a, b, skip) \
	BTL          $h, R14; \
	JCC          skip; \
	VBROADCASTSS h*4(DX), Z21; \
	VMULPS       Z21, a, a; \
	VMULPS       Z21, b, b; \
	ROUND16(a, b); \
skip:

// func madHalfHeads8AVX512(acc *float32, accStride int, v *byte, vStride, positions, dv int, ws, ms *float32, raised *uint8)
//
// For eight heads whose accumulators (dv float32 values, F16-exact) start accStride bytes
// apart at acc, and positions F16 value rows vStride bytes apart from v, position p runs
// for each head h, in order: if bit h of raised[p] is set, acc = round16(acc·ms[8p+h]);
// then acc = round16(v_p·ws[8p+h] + acc) fused. That is madHalf and scaleHalf step by step
// (the same bits). dv is a positive multiple of 32.
TEXT ·madHalfHeads8AVX512(SB), NOSPLIT, $0-72
	MOVQ acc+0(FP), R10
	MOVQ accStride+8(FP), R8
	LEAQ (R8)(R8*2), R12
	MOVQ dv+40(FP), R13
	SHRQ $5, R13 // pairs of slices left
	MOVQ v+16(FP), SI

slices:
	LEAQ (R10)(R8*1), R11
	HEADS_ACC(VMOVUPS)
	MOVQ SI, BX
	MOVQ ws+48(FP), AX
	MOVQ ms+56(FP), DX
	MOVQ raised+64(FP), DI
	MOVQ positions+32(FP), CX

position:
	VCVTPH2PS (BX), Z16
	VCVTPH2PS 32(BX), Z17
	MOVBLZX   (DI), R14
	TESTL     R14, R14
	JZ        steps
	SCALE_STEP(0, Z0, Z8, scaled0)
	SCALE_STEP(1, Z1, Z9, scaled1)
	SCALE_STEP(2, Z2, Z10, scaled2)
	SCALE_STEP(3, Z3, Z11, scaled3)
	SCALE_STEP(4, Z4, Z12, scaled4)
	SCALE_STEP(5, Z5, Z13, scaled5)
	SCALE_STEP(6, Z6, Z14, scaled6)
	SCALE_STEP(7, Z7, Z15, scaled7)

steps:
	MAD_STEP(0, Z0, Z8)
	MAD_STEP(1, Z1, Z9)
	MAD_STEP(2, Z2, Z10)
	MAD_STEP(3, Z3, Z11)
	MAD_STEP(4, Z4, Z12)
	MAD_STEP(5, Z5, Z13)
	MAD_STEP(6, Z6, Z14)
	MAD_STEP(7, Z7, Z15)
	ADDQ vStride+24(FP), BX
	ADDQ $32, AX
	ADDQ $32, DX
	INCQ DI
	DECQ CX
	JNZ  position

	HEADS_STORE
	ADDQ $128, R10
	ADDQ $64, SI
	DECQ R13
	JNZ  slices
	CLEAR_HIGH
	RET
