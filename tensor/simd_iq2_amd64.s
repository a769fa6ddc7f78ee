//go:build goexperiment.simd

#include "textflag.h"
#include "simd_amd64.h"

// AVX2 kernels of IQ2_XXS, IQ2_XS and IQ2_S against Q8_K: see simd_iq2_amd64.go. Go's
// operand order is Intel's reversed: VPBLENDD $m, B, A, D is D = A with the dwords of
// m's set bits from B; VPMADDUBSW Y, G, D is D = G (unsigned) · Y (signed).
//
// Registers: SI the weight block, DI the activation block, CX the blocks left in the row,
// R12 the row, R10 the rows left, R11 the next output; R13 the grid, R14 ·iq2SignBytes(SB), R9
// the scale table, R8 f16Table; AX BX DX scratch. Y0 the row's float lanes, Y1 the block's
// integer lanes, Y2 a sub-block's grid bytes, Y3 its signs, Y4 Y6 scratch, Y5 the
// activations; IQ2_S keeps iq2SSignSpread in Y12 and iq2SSignBit in Y13.

// GRID_AT broadcasts grid point AX (a byte or 9/10-bit index) into all of dst.
#define GRID_AT(dst) \
	VPBROADCASTQ (R13)(AX*8), dst

// GRID_LANE puts grid point AX into 64-bit lane m of dst (m the lane's dword mask).
#define GRID_LANE(m, dst) \
	VPBROADCASTQ (R13)(AX*8), Y4; \
	VPBLENDD     $m, Y4, dst, dst

// SIGN_AT and SIGN_LANE do the same with iq2SignBytes' entry BX.
#define SIGN_AT(dst) \
	VPBROADCASTQ (R14)(BX*8), dst

#define SIGN_LANE(m, dst) \
	VPBROADCASTQ (R14)(BX*8), Y6; \
	VPBLENDD     $m, Y6, dst, dst

// SUB_DOT adds to Y1 the sub-block's eight lanes: grid Y2 times the activations at
// DI+q8 signed by Y3 (±1 bytes), pairs times the scale words at R9+BX.
#define SUB_DOT(q8) \
	VMOVDQU    q8(DI), Y5; \
	VPSIGNB    Y3, Y5, Y5; \
	VPMADDUBSW Y5, Y2, Y5; \
	VPMADDWD   (R9)(BX*1), Y5, Y5; \
	VPADDD     Y5, Y1, Y1

// IQ2_XXS: sub-block at SI+o: four index bytes, then a u32 of four 7-bit sign codes and
// the scale in its top 4 bits.
#define XXS_SUB(o, q8) \
	MOVBLZX o+0(SI), AX; \
	GRID_AT(Y2); \
	MOVBLZX o+1(SI), AX; \
	GRID_LANE(0x0C, Y2); \
	MOVBLZX o+2(SI), AX; \
	GRID_LANE(0x30, Y2); \
	MOVBLZX o+3(SI), AX; \
	GRID_LANE(0xC0, Y2); \
	MOVL    o+4(SI), DX; \
	MOVL    DX, BX; \
	ANDL    $127, BX; \
	SIGN_AT(Y3); \
	MOVL    DX, BX; \
	SHRL    $7, BX; \
	ANDL    $127, BX; \
	SIGN_LANE(0x0C, Y3); \
	MOVL    DX, BX; \
	SHRL    $14, BX; \
	ANDL    $127, BX; \
	SIGN_LANE(0x30, Y3); \
	MOVL    DX, BX; \
	SHRL    $21, BX; \
	ANDL    $127, BX; \
	SIGN_LANE(0xC0, Y3); \
	MOVL    DX, BX; \
	SHRL    $28, BX; \
	SHLL    $5, BX; \
	SUB_DOT(q8)

// IQ2_XS: one u16 per group of 8 at SI+o..o+7 (9-bit index, 7-bit sign code), the scale
// byte (two 4-bit scales) at SI+sc.
#define XS_GROUP(o, grid, sign) \
	MOVWLZX o(SI), AX; \
	MOVL    AX, BX; \
	ANDL    $511, AX; \
	SHRL    $9, BX; \
	grid; \
	sign

#define XS_SUB(o, sc, q8) \
	XS_GROUP(o+0, GRID_AT(Y2), SIGN_AT(Y3)); \
	XS_GROUP(o+2, GRID_LANE(0x0C, Y2), SIGN_LANE(0x0C, Y3)); \
	XS_GROUP(o+4, GRID_LANE(0x30, Y2), SIGN_LANE(0x30, Y3)); \
	XS_GROUP(o+6, GRID_LANE(0xC0, Y2), SIGN_LANE(0xC0, Y3)); \
	MOVBLZX sc(SI), BX; \
	SHLL    $5, BX; \
	SUB_DOT(q8)

// IQ2_S: the index's low bytes at SI+o..o+3, its top two bits in the byte at SI+h (bits
// 2l, 2l+1 for group l), the 32 sign bits at SI+sg, the scale byte at SI+sc.
#define S_GROUP(o, shift, grid) \
	MOVBLZX o(SI), AX; \
	MOVL    DX, BX; \
	SHLL    $shift, BX; \
	ANDL    $0x300, BX; \
	ORL     BX, AX; \
	grid

#define S_SUB(o, h, sg, sc, q8) \
	MOVBLZX      h(SI), DX; \
	S_GROUP(o+0, 8, GRID_AT(Y2)); \
	S_GROUP(o+1, 6, GRID_LANE(0x0C, Y2)); \
	S_GROUP(o+2, 4, GRID_LANE(0x30, Y2)); \
	S_GROUP(o+3, 2, GRID_LANE(0xC0, Y2)); \
	VPBROADCASTD sg(SI), Y3; \
	VPSHUFB      Y12, Y3, Y3; \
	VPAND        Y13, Y3, Y3; \
	VPCMPEQB     Y13, Y3, Y3; \
	MOVBLZX      sc(SI), BX; \
	SHLL         $5, BX; \
	VMOVDQU      q8(DI), Y5; \
	VPXOR        Y3, Y5, Y5; \
	VPSUBB       Y3, Y5, Y5; \
	VPMADDUBSW   Y5, Y2, Y5; \
	VPMADDWD     (R9)(BX*1), Y5, Y5; \
	VPADDD       Y5, Y1, Y1

// ROWS_START loads the tables and starts the first row; BLOCK_END scales the block's lanes
// by d_x·d_y into Y0 and steps to the next block (bs bytes); ROW_END reduces Y0 as ggml's
// hsum_float_8, times 0.125, stores it and starts the next row.
#define ROWS_START(grid, signs, scales) \
	LEAQ grid, R13; \
	LEAQ signs, R14; \
	LEAQ scales, R9; \
	LEAQ ·f16Table(SB), R8; \
	MOVQ w+0(FP), R12; \
	MOVQ rows+24(FP), R10; \
	MOVQ out+40(FP), R11

#define ROW_START \
	MOVQ   R12, SI; \
	MOVQ   a+8(FP), DI; \
	MOVQ   nb+16(FP), CX; \
	VXORPS Y0, Y0, Y0

#define BLOCK_START \
	PREFETCHT0 4096(SI); \
	PREFETCHT0 4160(SI); \
	VPXOR      Y1, Y1, Y1

#define BLOCK_END(bs) \
	MOVWLZX      (SI), AX; \
	VMOVSS       (R8)(AX*4), X7; \
	VMULSS       (DI), X7, X7; \
	VBROADCASTSS X7, Y7; \
	VCVTDQ2PS    Y1, Y1; \
	VFMADD231PS  Y7, Y1, Y0; \
	ADDQ         $bs, SI; \
	ADDQ         $292, DI; \
	DECQ         CX

#define ROW_END \
	VEXTRACTF128 $1, Y0, X1; \
	VADDPS       X1, X0, X0; \
	VMOVHLPS     X0, X0, X1; \
	VADDPS       X1, X0, X0; \
	VMOVSHDUP    X0, X1; \
	VADDSS       X1, X0, X0; \
	MOVL         $0x3E000000, AX; \
	VMOVD        AX, X1; \
	VMULSS       X1, X0, X0; \
	VMOVSS       X0, (R11); \
	ADDQ         $4, R11; \
	ADDQ         rowBytes+32(FP), R12; \
	DECQ         R10

// func dotIQ2_XXSRowsAVX2(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)
TEXT ·dotIQ2_XXSRowsAVX2(SB), NOSPLIT, $0-48
	ROWS_START(·iq2xxsGrid(SB), ·iq2SignBytes(SB), ·iq2ScaleWords(SB))

xxsRow:
	ROW_START

xxsBlock:
	BLOCK_START
	XXS_SUB(2, 4)
	XXS_SUB(10, 36)
	XXS_SUB(18, 68)
	XXS_SUB(26, 100)
	XXS_SUB(34, 132)
	XXS_SUB(42, 164)
	XXS_SUB(50, 196)
	XXS_SUB(58, 228)
	BLOCK_END(66)
	JNZ xxsBlock
	ROW_END
	JNZ xxsRow
	VZEROUPPER
	RET

// func dotIQ2_XSRowsAVX2(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)
TEXT ·dotIQ2_XSRowsAVX2(SB), NOSPLIT, $0-48
	ROWS_START(·iq2xsGrid(SB), ·iq2SignBytes(SB), ·iq2ScalePairs(SB))

xsRow:
	ROW_START

xsBlock:
	BLOCK_START
	XS_SUB(2, 66, 4)
	XS_SUB(10, 67, 36)
	XS_SUB(18, 68, 68)
	XS_SUB(26, 69, 100)
	XS_SUB(34, 70, 132)
	XS_SUB(42, 71, 164)
	XS_SUB(50, 72, 196)
	XS_SUB(58, 73, 228)
	BLOCK_END(74)
	JNZ xsBlock
	ROW_END
	JNZ xsRow
	VZEROUPPER
	RET

// func dotIQ2_SRowsAVX2(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)
TEXT ·dotIQ2_SRowsAVX2(SB), NOSPLIT, $0-48
	ROWS_START(·iq2sGrid(SB), ·iq2SignBytes(SB), ·iq2ScalePairs(SB))
	VMOVDQU ·iq2SSignSpread(SB), Y12
	VMOVDQU ·iq2SSignBit(SB), Y13

sRow:
	ROW_START

sBlock:
	BLOCK_START
	S_SUB(2, 66, 34, 74, 4)
	S_SUB(6, 67, 38, 75, 36)
	S_SUB(10, 68, 42, 76, 68)
	S_SUB(14, 69, 46, 77, 100)
	S_SUB(18, 70, 50, 78, 132)
	S_SUB(22, 71, 54, 79, 164)
	S_SUB(26, 72, 58, 80, 196)
	S_SUB(30, 73, 62, 81, 228)
	BLOCK_END(82)
	JNZ sBlock
	ROW_END
	JNZ sRow
	VZEROUPPER
	RET

// AVX-512 kernels (VNNI, VBMI): a 512-bit register takes two sub-blocks (a pair) at once,
// and the scalar work of the AVX2 kernels goes: all 32 sign codes of a block are cut out
// of their u32s at once (VPMULTISHIFTQB) and looked up in a 128-byte table held in two
// registers (VPERMI2B), the 256 sign bits go through the stack into mask registers (KMOVQ)
// that negate the activations (a masked VPSUBB from zero), the grid points come from
// VPGATHERQQ, and VPDPWSSD multiplies the VPMADDUBSW pairs by the scales and adds them.
// A pair's 16 integer lanes fold to ggml's eight (lower plus upper half) once per block;
// the float steps are the AVX2 kernels'.
//
// Registers: Z0 (Y0) the row's float lanes, Z1 the block's index bytes and codes, Z10 Z11
// the integer lanes (pairs 0 2 and 1 3), Z5 the scales as qwords, Z6 Z7 a pair's indices
// and grid bytes, Z8 its activations, Z9 Z12 scratch; constants Z20-Z23 the scale words'
// VPERMW indices per pair, Z25 qwords of 1, Z28 zero, Z29 Z30 the sign table, Z31 the code
// shifts. The stack holds the block's sign bytes (0-31) and index bytes (32-63).

// VNNI_ROWS_START is ROWS_START with the AVX-512 constants.
#define VNNI_ROWS_START(grid) \
	LEAQ      grid, R13; \
	LEAQ      ·f16Table(SB), R8; \
	VMOVDQU64 ·iq2PairScaleIdx+0(SB), Z20; \
	VMOVDQU64 ·iq2PairScaleIdx+64(SB), Z21; \
	VMOVDQU64 ·iq2PairScaleIdx+128(SB), Z22; \
	VMOVDQU64 ·iq2PairScaleIdx+192(SB), Z23; \
	VMOVDQU64 ·iq2QwordOnes(SB), Z25; \
	VPXORD    Z28, Z28, Z28; \
	VMOVDQU64 ·iq2SignTable+0(SB), Z29; \
	VMOVDQU64 ·iq2SignTable+64(SB), Z30; \
	VMOVDQU64 ·iq2XXSCodeShifts(SB), Z31; \
	MOVQ      w+0(FP), R12; \
	MOVQ      rows+24(FP), R10; \
	MOVQ      out+40(FP), R11

// XXS_PAIR: sub-blocks 2p and 2p+1 into acc.
#define XXS_PAIR(p, sidx, acc) \
	VPMOVZXBQ  32+8*p(SP), Z6; \
	KXNORB     K1, K1, K1; \
	VPGATHERQQ (R13)(Z6*8), K1, Z7; \
	VMOVDQU64  4+64*p(DI), Z8; \
	KMOVQ      8*p(SP), K2; \
	VPSUBB     Z8, Z28, K2, Z8; \
	VPMADDUBSW Z8, Z7, Z9; \
	VPERMW     Z5, sidx, Z12; \
	VPDPWSSD   Z12, Z9, acc

// func dotIQ2_XXSRowsVNNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)
TEXT ·dotIQ2_XXSRowsVNNI(SB), NOSPLIT, $64-48
	VNNI_ROWS_START(·iq2xxsGrid(SB))

xxsVRow:
	ROW_START

xxsVBlock:
	PREFETCHT0     4096(SI)
	PREFETCHT0     4160(SI)
	VMOVDQU64      2(SI), Z1
	VPMULTISHIFTQB Z1, Z31, Z2
	VPERMI2B       Z30, Z29, Z2
	VPMOVQD        Z2, Y3
	VPMOVQD        Z1, Y4
	VMOVDQU        Y3, 0(SP)
	VMOVDQU        Y4, 32(SP)
	VPSRLQ         $60, Z1, Z5
	VPSLLQ         $1, Z5, Z5
	VPORQ          Z25, Z5, Z5
	VPXORD         Z10, Z10, Z10
	VPXORD         Z11, Z11, Z11
	XXS_PAIR(0, Z20, Z10)
	XXS_PAIR(1, Z21, Z11)
	XXS_PAIR(2, Z22, Z10)
	XXS_PAIR(3, Z23, Z11)
	VPADDD         Z11, Z10, Z10
	VEXTRACTI64X4  $1, Z10, Y11
	VPADDD         Y11, Y10, Y1
	BLOCK_END(66)
	JNZ            xxsVBlock
	ROW_END
	JNZ            xxsVRow
	CLEAR_HIGH
	RET

// IQ2_XS and IQ2_S have a 4-bit scale per 16 values: SCALES_16 turns a block's eight scale
// bytes at SI+o into the bytes 2s+1 of its sixteen quarters in order (X5: low nibbles and
// high ones interleaved, then through the table of 2s+1 in X13, X14 holding 0x0F bytes),
// and a pair's VPERMB (indices Z20-Z23, K3 keeping the even bytes) widens quarters
// 4p..4p+3 to the words of its four 128-bit lanes.
#define SCALES_16(o) \
	VMOVQ      o(SI), X5; \
	VPSRLW     $4, X5, X9; \
	VPAND      X14, X5, X5; \
	VPAND      X14, X9, X9; \
	VPUNPCKLBW X9, X5, X5; \
	VPSHUFB    X5, X13, X5

// PAIR_DOT: the pair's grid bytes Z7 against the activations of pair p, negated where K2
// is set, the VPMADDUBSW pairs times the scale words of VPERMB index sidx added to acc.
#define PAIR_DOT(p, sidx, acc) \
	VMOVDQU64  4+64*p(DI), Z8; \
	VPSUBB     Z8, Z28, K2, Z8; \
	VPMADDUBSW Z8, Z7, Z9; \
	VPERMB.Z   Z5, sidx, K3, Z12; \
	VPDPWSSD   Z12, Z9, acc

#define SCALE_CONSTS \
	VMOVDQU64 ·iq2PairScaleBytes+0(SB), Z20; \
	VMOVDQU64 ·iq2PairScaleBytes+64(SB), Z21; \
	VMOVDQU64 ·iq2PairScaleBytes+128(SB), Z22; \
	VMOVDQU64 ·iq2PairScaleBytes+192(SB), Z23; \
	VMOVDQU   ·iq2OddScales(SB), X13; \
	VMOVDQU   ·nibbleMask(SB), X14; \
	MOVQ      $0x5555555555555555, AX; \
	KMOVQ     AX, K3

// XS_PAIR: the pair's indices are the low 9 bits of its eight u16 (Z24: qwords of 511),
// its signs the stack's bytes 8p..8p+7.
#define XS_PAIR(p, sidx, acc) \
	VPMOVZXWQ  2+16*p(SI), Z6; \
	VPANDQ     Z24, Z6, Z6; \
	KXNORB     K1, K1, K1; \
	VPGATHERQQ (R13)(Z6*8), K1, Z7; \
	KMOVQ      8*p(SP), K2; \
	PAIR_DOT(p, sidx, acc)

// func dotIQ2_XSRowsVNNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)
TEXT ·dotIQ2_XSRowsVNNI(SB), NOSPLIT, $32-48
	LEAQ      ·iq2xsGrid(SB), R13
	LEAQ      ·f16Table(SB), R8
	SCALE_CONSTS
	VMOVDQU64 ·iq2QwordMask511(SB), Z24
	VPXORD    Z28, Z28, Z28
	VMOVDQU64 ·iq2SignTable+0(SB), Z29
	VMOVDQU64 ·iq2SignTable+64(SB), Z30
	MOVQ      w+0(FP), R12
	MOVQ      rows+24(FP), R10
	MOVQ      out+40(FP), R11

xsVRow:
	ROW_START

xsVBlock:
	PREFETCHT0    4096(SI)
	PREFETCHT0    4160(SI)
	VPSRLW        $9, 2(SI), Z2
	VPERMI2B      Z30, Z29, Z2
	VPMOVWB       Z2, Y3
	VMOVDQU       Y3, 0(SP)
	SCALES_16(66)
	VPXORD        Z10, Z10, Z10
	VPXORD        Z11, Z11, Z11
	XS_PAIR(0, Z20, Z10)
	XS_PAIR(1, Z21, Z11)
	XS_PAIR(2, Z22, Z10)
	XS_PAIR(3, Z23, Z11)
	VPADDD        Z11, Z10, Z10
	VEXTRACTI64X4 $1, Z10, Y11
	VPADDD        Y11, Y10, Y1
	BLOCK_END(74)
	JNZ           xsVBlock
	ROW_END
	JNZ           xsVRow
	CLEAR_HIGH
	RET

// S_PAIR: the pair's 10-bit indices are words 8p..8p+7 on the stack, its signs the block's
// bytes 34+8p..
#define S_PAIR(p, sidx, acc) \
	VPMOVZXWQ  16*p(SP), Z6; \
	KXNORB     K1, K1, K1; \
	VPGATHERQQ (R13)(Z6*8), K1, Z7; \
	KMOVQ      34+8*p(SI), K2; \
	PAIR_DOT(p, sidx, acc)

// func dotIQ2_SRowsVNNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)
//
// The block's 32 indices are built as words: the low bytes widened, and each group's two
// high bits, from its sub-block's qh byte put in the word's high byte (VPERMB, indices
// Z31), shifted right by 2l (Z26) and masked to bits 8-9 (Z24).
TEXT ·dotIQ2_SRowsVNNI(SB), NOSPLIT, $64-48
	LEAQ      ·iq2sGrid(SB), R13
	LEAQ      ·f16Table(SB), R8
	SCALE_CONSTS
	VMOVDQU64 ·iq2SHighWordMask(SB), Z24
	VMOVDQU64 ·iq2SHighShifts(SB), Z26
	VPXORD    Z28, Z28, Z28
	VMOVDQU64 ·iq2SHighSpread(SB), Z31
	MOVQ      w+0(FP), R12
	MOVQ      rows+24(FP), R10
	MOVQ      out+40(FP), R11

sVRow:
	ROW_START

sVBlock:
	PREFETCHT0    4096(SI)
	PREFETCHT0    4160(SI)
	VPMOVZXBW     2(SI), Z1
	VPBROADCASTQ  66(SI), Z2
	VPERMB        Z2, Z31, Z2
	VPSRLVW       Z26, Z2, Z2
	VPTERNLOGD    $0xF8, Z24, Z2, Z1
	VMOVDQU64     Z1, 0(SP)
	SCALES_16(74)
	VPXORD        Z10, Z10, Z10
	VPXORD        Z11, Z11, Z11
	S_PAIR(0, Z20, Z10)
	S_PAIR(1, Z21, Z11)
	S_PAIR(2, Z22, Z10)
	S_PAIR(3, Z23, Z11)
	VPADDD        Z11, Z10, Z10
	VEXTRACTI64X4 $1, Z10, Y11
	VPADDD        Y11, Y10, Y1
	BLOCK_END(82)
	JNZ           sVBlock
	ROW_END
	JNZ           sVRow
	CLEAR_HIGH
	RET
