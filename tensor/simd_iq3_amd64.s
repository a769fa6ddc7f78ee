//go:build goexperiment.simd

#include "textflag.h"
#include "simd_amd64.h"

// IQ3_XXS and IQ3_S against Q8_K: see simd_iq3_amd64.go. The block loop, the float steps
// and the sign handling are the LATTICE_ macros of simd_amd64.h; Go's operand order is
// Intel's reversed (VPBLENDD $m, B, A, D is D = A with the dwords of m's set bits from B).
//
// AVX2 registers (besides LATTICE_ROWS's): R13 the grid, R14 iq2SignBytes (IQ3_XXS), R9
// iq2ScaleWords; AX BX DX scratch; Y2 a sub-block's grid bytes, Y3 its signs, Y4 Y5 Y6
// scratch; IQ3_S keeps its high-bit constants in Y10 Y11, iq2SSignSpread in Y12 and
// iq2SSignBit in Y13, and the block's 64 indices as words at 0-127(SP).

// POINTS8 puts a sub-block's eight 4-byte grid points into Y2: the index of point j read
// by mov (MOVBLZX or MOVWLZX) from o+j·s(base), its grid entry broadcast from memory (a
// load port only) and blended into dword j (any vector port), Y4 scratch.
#define POINT(mov, at, m) \
	mov          at, AX; \
	VPBROADCASTD (R13)(AX*4), Y4; \
	VPBLENDD     $m, Y4, Y2, Y2

#define POINTS8(mov, o, s, base) \
	mov          o(base), AX; \
	VPBROADCASTD (R13)(AX*4), Y2; \
	POINT(mov, o+s(base), 0x02); \
	POINT(mov, o+2*s(base), 0x04); \
	POINT(mov, o+3*s(base), 0x08); \
	POINT(mov, o+4*s(base), 0x10); \
	POINT(mov, o+5*s(base), 0x20); \
	POINT(mov, o+6*s(base), 0x40); \
	POINT(mov, o+7*s(base), 0x80)

// IQ3_XXS (98 bytes: d, 64 index bytes, eight u32 of sign codes and scale). Sub-block ib:
// indices at 2+8ib, its u32 at 66+4ib, activations at DI+4+32ib.
#define XXS3_SUB(ib) \
	POINTS8(MOVBLZX, 2+8*ib, 1, SI); \
	LATTICE_SIGN_CODES(66+4*ib); \
	LATTICE_SIGNED_DOT(4+32*ib)

#define XXS3_BLOCK \
	VPXOR Y1, Y1, Y1; \
	XXS3_SUB(0); \
	XXS3_SUB(1); \
	XXS3_SUB(2); \
	XXS3_SUB(3); \
	XXS3_SUB(4); \
	XXS3_SUB(5); \
	XXS3_SUB(6); \
	XXS3_SUB(7)

// func dotIQ3_XXSRowsAVX2(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)
TEXT ·dotIQ3_XXSRowsAVX2(SB), NOSPLIT, $0-48
	LEAQ ·iq3xxsGrid(SB), R13
	LEAQ ·iq2SignBytes(SB), R14
	LEAQ ·iq2ScaleWords(SB), R9
	LATTICE_ROWS(xxs3Row, xxs3Block, XXS3_BLOCK, 98, 0x3E800000)
	VZEROUPPER
	RET

// IQ3_S (110 bytes: d, 64 index low bytes, 8 qh bytes, 32 sign bytes, 4 scale bytes).
// S3_INDICES stores the 9-bit indices of sub-blocks 2p and 2p+1 as words at 32p(SP): the
// low bytes widened, or'ed with 0x100 where word k's bit k of the u16 qh[2p..2p+1] is set
// (Y10 the words 1<<k, Y11 words of 0x100).
#define S3_INDICES(p) \
	VPMOVZXBW    2+16*p(SI), Y4; \
	VPBROADCASTW 66+2*p(SI), Y5; \
	VPAND        Y10, Y5, Y5; \
	VPCMPEQW     Y10, Y5, Y5; \
	VPAND        Y11, Y5, Y5; \
	VPOR         Y5, Y4, Y4; \
	VMOVDQU      Y4, 32*p(SP)

// S3_SUB: sub-block ib, its scale the nibble of byte 106+ib/2 that keep selects (15 for
// even ib, 0xF0 for odd), BX 32·s after the shift left by shl.
#define S3_SUB(ib, keep, shl) \
	POINTS8(MOVWLZX, 16*ib, 2, SP); \
	MOVBLZX 106+ib/2(SI), BX; \
	ANDL    $keep, BX; \
	SHLL    $shl, BX; \
	LATTICE_SIGN_BITS_DOT(74+4*ib, 4+32*ib)

#define S3_BLOCK \
	S3_INDICES(0); \
	S3_INDICES(1); \
	S3_INDICES(2); \
	S3_INDICES(3); \
	VPXOR Y1, Y1, Y1; \
	S3_SUB(0, 15, 5); \
	S3_SUB(1, 0xF0, 1); \
	S3_SUB(2, 15, 5); \
	S3_SUB(3, 0xF0, 1); \
	S3_SUB(4, 15, 5); \
	S3_SUB(5, 0xF0, 1); \
	S3_SUB(6, 15, 5); \
	S3_SUB(7, 0xF0, 1)

// func dotIQ3_SRowsAVX2(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)
TEXT ·dotIQ3_SRowsAVX2(SB), NOSPLIT, $128-48
	LEAQ         ·iq3sGrid(SB), R13
	LEAQ         ·iq2ScaleWords(SB), R9
	VMOVDQU      ·iq3SHighBits(SB), Y10
	VPBROADCASTW ·iq3SHighBits+16(SB), Y11
	VMOVDQU      ·iq2SSignSpread(SB), Y12
	VMOVDQU      ·iq2SSignBit(SB), Y13
	LATTICE_ROWS(s3Row, s3Block, S3_BLOCK, 110, 0x3F800000)
	VZEROUPPER
	RET

// AVX-512 kernels (VNNI; VBMI for IQ3_XXS): LATTICE_PAIRS runs IQ3_PAIR for the four
// pairs of sub-blocks, 16 grid points (64 bytes) gathered by one VPGATHERDD. The scales are
// qwords 2s+1 in Z5 (sub-block q in qword q), spread to words by VPERMW (Z20-Z23,
// iq2PairScaleIdx). Constants: Z25 qwords of 1, Z28 zero; IQ3_XXS Z29 Z30 the sign table,
// Z31 the code shifts; IQ3_S Z24 qwords of 30, Z26 the scale shifts, Z27 dwords of 0x100.
#define VNNI3_CONSTS \
	VMOVDQU64 ·iq2PairScaleIdx+0(SB), Z20; \
	VMOVDQU64 ·iq2PairScaleIdx+64(SB), Z21; \
	VMOVDQU64 ·iq2PairScaleIdx+128(SB), Z22; \
	VMOVDQU64 ·iq2PairScaleIdx+192(SB), Z23; \
	VMOVDQU64 ·iq2QwordOnes(SB), Z25; \
	VPXORD    Z28, Z28, Z28

// IQ3_PAIR: pair p's indices are its 16 index bytes widened to dwords (Z6), with high
// applied (IQ3_S's ninth bits); the gather's destination is zeroed first and its mask set
// from K0 so that it waits on no earlier gather. signs is where the pair's 64 sign bits are.
#define IQ3_PAIR(p, sidx, acc, high, signs) \
	VPMOVZXBD  2+16*p(SI), Z6; \
	high; \
	VPXORD     Z7, Z7, Z7; \
	KXNORW     K0, K0, K1; \
	VPGATHERDD (R13)(Z6*4), K1, Z7; \
	KMOVQ      signs, K2; \
	LATTICE_PAIR_DOT(p, sidx, acc)

#define NO_HIGH

// IQ3_XXS: the eight u32 widened to qwords (Z1), their four codes each cut out by
// VPMULTISHIFTQB (Z31: 0, 7, 14, 21) and looked up in iq2SignTable (VPERMI2B uses the low
// 7 bits), the 32 sign bytes stored at 0(SP); the scales are (u32 >> 27) | 1 = 2s+1.
#define XXS3_PAIR(p, sidx, acc) \
	IQ3_PAIR(p, sidx, acc, NO_HIGH, 8*p(SP))

#define XXS3_VNNI_BLOCK \
	VPMOVZXDQ      66(SI), Z1; \
	VPMULTISHIFTQB Z1, Z31, Z2; \
	VPERMI2B       Z30, Z29, Z2; \
	VPMOVQD        Z2, Y3; \
	VMOVDQU        Y3, 0(SP); \
	VPSRLQ         $27, Z1, Z5; \
	VPORQ          Z25, Z5, Z5; \
	LATTICE_PAIRS(XXS3_PAIR)

// func dotIQ3_XXSRowsVNNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)
TEXT ·dotIQ3_XXSRowsVNNI(SB), NOSPLIT, $32-48
	LEAQ         ·iq3xxsGrid(SB), R13
	VNNI3_CONSTS
	VMOVDQU64    ·iq2SignTable+0(SB), Z29
	VMOVDQU64    ·iq2SignTable+64(SB), Z30
	VPBROADCASTQ ·iq3XXSCodeShifts(SB), Z31
	LATTICE_ROWS(xxs3VRow, xxs3VBlock, XXS3_VNNI_BLOCK, 98, 0x3E800000)
	CLEAR_HIGH
	RET

// IQ3_S: bit k of the u16 qh[2p..2p+1] is index k's ninth bit (a mask for VPORD), the
// pair's sign bits are the qword at 74+8p. The scales: the u32 of nibbles broadcast to
// dwords, qword q shifted right by 4q (Z26) and doubled, then (x & 30) | 1.
#define S3_HIGH(p) \
	KMOVW 66+2*p(SI), K3; \
	VPORD Z27, Z6, K3, Z6

#define S3_PAIR(p, sidx, acc) \
	IQ3_PAIR(p, sidx, acc, S3_HIGH(p), 74+8*p(SI))

#define S3_VNNI_BLOCK \
	VPBROADCASTD 106(SI), Z5; \
	VPSRLVQ      Z26, Z5, Z5; \
	VPADDQ       Z5, Z5, Z5; \
	VPTERNLOGQ   $0xEA, Z25, Z24, Z5; \
	LATTICE_PAIRS(S3_PAIR)

// func dotIQ3_SRowsVNNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)
TEXT ·dotIQ3_SRowsVNNI(SB), NOSPLIT, $0-48
	LEAQ         ·iq3sGrid(SB), R13
	VNNI3_CONSTS
	MOVQ         $30, AX
	VPBROADCASTQ AX, Z24
	VMOVDQU64    ·iq3SScaleShifts(SB), Z26
	MOVL         $0x100, AX
	VPBROADCASTD AX, Z27
	LATTICE_ROWS(s3VRow, s3VBlock, S3_VNNI_BLOCK, 110, 0x3F800000)
	CLEAR_HIGH
	RET
