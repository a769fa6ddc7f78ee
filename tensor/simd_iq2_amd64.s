//go:build goexperiment.simd

#include "textflag.h"
#include "simd_amd64.h"

// AVX2 kernels of IQ2_XXS, IQ2_XS and IQ2_S against Q8_K: see simd_iq2_amd64.go. The
// block loop, the float steps and the sign handling are the LATTICE_ macros of
// simd_amd64.h. Go's operand order is Intel's reversed: VPBLENDD $m, B, A, D is D = A with
// the dwords of m's set bits from B; VPMADDUBSW Y, G, D is D = G (unsigned) · Y (signed).
//
// Registers (besides LATTICE_ROWS's): R13 the grid, R14 ·iq2SignBytes(SB), R9 the scale
// table; AX BX DX scratch. Y2 a sub-block's grid bytes, Y3 its signs, Y4 Y6 scratch, Y5
// the activations; IQ2_S keeps iq2SSignSpread in Y12 and iq2SSignBit in Y13.

// GRID_AT broadcasts grid point AX (a byte or 9/10-bit index) into all of dst.
#define GRID_AT(dst) \
	VPBROADCASTQ (R13)(AX*8), dst

// GRID_LANE puts grid point AX into 64-bit lane m of dst (m the lane's dword mask).
#define GRID_LANE(m, dst) \
	VPBROADCASTQ (R13)(AX*8), Y4; \
	VPBLENDD     $m, Y4, dst, dst

// SIGN_AT and SIGN_LANE do the same with iq2SignBytes' entry BX (IQ2_XS, whose codes
// come one per u16, not four per u32 as LATTICE_SIGN_CODES takes them).
#define SIGN_AT(dst) \
	VPBROADCASTQ (R14)(BX*8), dst

#define SIGN_LANE(m, dst) \
	VPBROADCASTQ (R14)(BX*8), Y6; \
	VPBLENDD     $m, Y6, dst, dst

// IQ2_XXS: sub-block at SI+o: four index bytes, then a u32 of four 7-bit sign codes and
// the scale in its top 4 bits (LATTICE_SIGN_CODES).
#define XXS_SUB(o, q8) \
	MOVBLZX o+0(SI), AX; \
	GRID_AT(Y2); \
	MOVBLZX o+1(SI), AX; \
	GRID_LANE(0x0C, Y2); \
	MOVBLZX o+2(SI), AX; \
	GRID_LANE(0x30, Y2); \
	MOVBLZX o+3(SI), AX; \
	GRID_LANE(0xC0, Y2); \
	LATTICE_SIGN_CODES(o+4); \
	LATTICE_SIGNED_DOT(q8)

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
	LATTICE_SIGNED_DOT(q8)

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
	MOVBLZX      sc(SI), BX; \
	SHLL         $5, BX; \
	LATTICE_SIGN_BITS_DOT(sg, q8)

// The AVX2 kernels' block bodies: LATTICE_ROWS runs one over the rows, and ends each row
// as ggml's hsum_float_8 times 0.125.
#define XXS_BLOCK \
	VPXOR Y1, Y1, Y1; \
	XXS_SUB(2, 4); \
	XXS_SUB(10, 36); \
	XXS_SUB(18, 68); \
	XXS_SUB(26, 100); \
	XXS_SUB(34, 132); \
	XXS_SUB(42, 164); \
	XXS_SUB(50, 196); \
	XXS_SUB(58, 228)

#define XS_BLOCK \
	VPXOR Y1, Y1, Y1; \
	XS_SUB(2, 66, 4); \
	XS_SUB(10, 67, 36); \
	XS_SUB(18, 68, 68); \
	XS_SUB(26, 69, 100); \
	XS_SUB(34, 70, 132); \
	XS_SUB(42, 71, 164); \
	XS_SUB(50, 72, 196); \
	XS_SUB(58, 73, 228)

#define S_BLOCK \
	VPXOR Y1, Y1, Y1; \
	S_SUB(2, 66, 34, 74, 4); \
	S_SUB(6, 67, 38, 75, 36); \
	S_SUB(10, 68, 42, 76, 68); \
	S_SUB(14, 69, 46, 77, 100); \
	S_SUB(18, 70, 50, 78, 132); \
	S_SUB(22, 71, 54, 79, 164); \
	S_SUB(26, 72, 58, 80, 196); \
	S_SUB(30, 73, 62, 81, 228)

// AVX-512 kernels (VNNI, VBMI): a 512-bit register takes two sub-blocks (a pair) at once,
// and the scalar work of the AVX2 kernels goes: all 32 sign codes of a block are cut out
// of their u32s at once (VPMULTISHIFTQB) and looked up in a 128-byte table held in two
// registers (VPERMI2B), the 256 sign bits go through the stack into mask registers (KMOVQ)
// that negate the activations (a masked VPSUBB from zero), the grid points come from
// VPGATHERQQ, and VPDPWSSD multiplies the VPMADDUBSW pairs by the scales and adds them.
// LATTICE_PAIRS runs the four pairs and folds their 16 integer lanes to ggml's eight
// (lower plus upper half) once per block; the float steps are the AVX2 kernels'
// (LATTICE_ROWS).
//
// Registers: Z0 (Y0) the row's float lanes, Z1 the block's index bytes and codes, Z10 Z11
// the integer lanes (pairs 0 2 and 1 3), Z5 the scales as qwords, Z6 Z7 a pair's indices
// and grid bytes, Z8 its activations, Z9 Z12 scratch; constants Z20-Z23 the scale words'
// VPERMW indices per pair, Z25 qwords of 1, Z28 zero, Z29 Z30 the sign table, Z31 the code
// shifts. The stack holds the block's sign bytes (0-31) and index bytes (32-63).

// XXS_PAIR: sub-blocks 2p and 2p+1 into acc.
#define XXS_PAIR(p, sidx, acc) \
	VPMOVZXBQ  32+8*p(SP), Z6; \
	KXNORB     K1, K1, K1; \
	VPGATHERQQ (R13)(Z6*8), K1, Z7; \
	KMOVQ      8*p(SP), K2; \
	LATTICE_PAIR_DOT(p, sidx, acc)

#define XXS_VNNI_BLOCK \
	VMOVDQU64      2(SI), Z1; \
	VPMULTISHIFTQB Z1, Z31, Z2; \
	VPERMI2B       Z30, Z29, Z2; \
	VPMOVQD        Z2, Y3; \
	VPMOVQD        Z1, Y4; \
	VMOVDQU        Y3, 0(SP); \
	VMOVDQU        Y4, 32(SP); \
	VPSRLQ         $60, Z1, Z5; \
	VPSLLQ         $1, Z5, Z5; \
	VPORQ          Z25, Z5, Z5; \
	LATTICE_PAIRS(XXS_PAIR)

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
// It is LATTICE_PAIR_DOT but for the scales: bytes (sixteen per block) widened by a
// zero-masked VPERMB, where LATTICE_PAIR_DOT's are words (one per sub-block) for VPERMW.
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

#define XS_VNNI_BLOCK \
	VPSRLW   $9, 2(SI), Z2; \
	VPERMI2B Z30, Z29, Z2; \
	VPMOVWB  Z2, Y3; \
	VMOVDQU  Y3, 0(SP); \
	SCALES_16(66); \
	LATTICE_PAIRS(XS_PAIR)

// S_PAIR: the pair's 10-bit indices are words 8p..8p+7 on the stack, its signs the block's
// bytes 34+8p..
#define S_PAIR(p, sidx, acc) \
	VPMOVZXWQ  16*p(SP), Z6; \
	KXNORB     K1, K1, K1; \
	VPGATHERQQ (R13)(Z6*8), K1, Z7; \
	KMOVQ      34+8*p(SI), K2; \
	PAIR_DOT(p, sidx, acc)

// S_VNNI_BLOCK builds the block's 32 indices as words: the low bytes widened, and each
// group's two high bits, from its sub-block's qh byte put in the word's high byte (VPERMB,
// indices Z31), shifted right by 2l (Z26) and masked to bits 8-9 (Z24).
#define S_VNNI_BLOCK \
	VPMOVZXBW    2(SI), Z1; \
	VPBROADCASTQ 66(SI), Z2; \
	VPERMB       Z2, Z31, Z2; \
	VPSRLVW      Z26, Z2, Z2; \
	VPTERNLOGD   $0xF8, Z24, Z2, Z1; \
	VMOVDQU64    Z1, 0(SP); \
	SCALES_16(74); \
	LATTICE_PAIRS(S_PAIR)

// The kernels, after all the macros (go vet reads a macro's stack offsets against the
// frame of the TEXT before it).

// func dotIQ2_XXSRowsAVX2(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)
TEXT ·dotIQ2_XXSRowsAVX2(SB), NOSPLIT, $0-48
	LEAQ ·iq2xxsGrid(SB), R13
	LEAQ ·iq2SignBytes(SB), R14
	LEAQ ·iq2ScaleWords(SB), R9
	LATTICE_ROWS(xxsRow, xxsBlock, XXS_BLOCK, 66, 0x3E000000)
	VZEROUPPER
	RET

// func dotIQ2_XSRowsAVX2(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)
TEXT ·dotIQ2_XSRowsAVX2(SB), NOSPLIT, $0-48
	LEAQ ·iq2xsGrid(SB), R13
	LEAQ ·iq2SignBytes(SB), R14
	LEAQ ·iq2ScalePairs(SB), R9
	LATTICE_ROWS(xsRow, xsBlock, XS_BLOCK, 74, 0x3E000000)
	VZEROUPPER
	RET

// func dotIQ2_SRowsAVX2(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)
TEXT ·dotIQ2_SRowsAVX2(SB), NOSPLIT, $0-48
	LEAQ    ·iq2sGrid(SB), R13
	LEAQ    ·iq2ScalePairs(SB), R9
	VMOVDQU ·iq2SSignSpread(SB), Y12
	VMOVDQU ·iq2SSignBit(SB), Y13
	LATTICE_ROWS(sRow, sBlock, S_BLOCK, 82, 0x3E000000)
	VZEROUPPER
	RET

// func dotIQ2_XXSRowsVNNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)
TEXT ·dotIQ2_XXSRowsVNNI(SB), NOSPLIT, $64-48
	LEAQ      ·iq2xxsGrid(SB), R13
	VMOVDQU64 ·iq2PairScaleIdx+0(SB), Z20
	VMOVDQU64 ·iq2PairScaleIdx+64(SB), Z21
	VMOVDQU64 ·iq2PairScaleIdx+128(SB), Z22
	VMOVDQU64 ·iq2PairScaleIdx+192(SB), Z23
	VMOVDQU64 ·iq2QwordOnes(SB), Z25
	VPXORD    Z28, Z28, Z28
	VMOVDQU64 ·iq2SignTable+0(SB), Z29
	VMOVDQU64 ·iq2SignTable+64(SB), Z30
	VMOVDQU64 ·iq2XXSCodeShifts(SB), Z31
	LATTICE_ROWS(xxsVRow, xxsVBlock, XXS_VNNI_BLOCK, 66, 0x3E000000)
	CLEAR_HIGH
	RET

// func dotIQ2_XSRowsVNNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)
TEXT ·dotIQ2_XSRowsVNNI(SB), NOSPLIT, $32-48
	LEAQ      ·iq2xsGrid(SB), R13
	SCALE_CONSTS
	VMOVDQU64 ·iq2QwordMask511(SB), Z24
	VPXORD    Z28, Z28, Z28
	VMOVDQU64 ·iq2SignTable+0(SB), Z29
	VMOVDQU64 ·iq2SignTable+64(SB), Z30
	LATTICE_ROWS(xsVRow, xsVBlock, XS_VNNI_BLOCK, 74, 0x3E000000)
	CLEAR_HIGH
	RET

// func dotIQ2_SRowsVNNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)
TEXT ·dotIQ2_SRowsVNNI(SB), NOSPLIT, $64-48
	LEAQ      ·iq2sGrid(SB), R13
	SCALE_CONSTS
	VMOVDQU64 ·iq2SHighWordMask(SB), Z24
	VMOVDQU64 ·iq2SHighShifts(SB), Z26
	VPXORD    Z28, Z28, Z28
	VMOVDQU64 ·iq2SHighSpread(SB), Z31
	LATTICE_ROWS(sVRow, sVBlock, S_VNNI_BLOCK, 82, 0x3E000000)
	CLEAR_HIGH
	RET
