//go:build goexperiment.simd

#include "textflag.h"
#include "simd_amd64.h"

// The row-interleaved kernels of the 32-value 4-bit formats (Q4_0, IQ4_NL, MXFP4) against
// Q8_0 activations: see simd_packed_amd64.go. Go's operand order is Intel's reversed.

// PACK_LOAD4 loads 16 bytes of each of four rows into the four 128-bit lanes of z, row r0
// in lane 0.
#define PACK_LOAD4(r0, r1, r2, r3, z, x) \
	VMOVDQU32    r0, x; \
	VINSERTI32X4 $1, r1, z, z; \
	VINSERTI32X4 $2, r2, z, z; \
	VINSERTI32X4 $3, r3, z, z

// PACK_VALUES widens the 16 rows' dword j (Z8-Z11 after the transpose) to the value bytes
// of the packed block: low nibbles (values 4j..4j+3) to W(2j), high nibbles (values
// 16+4j..16+4j+3) to W(2j+1), each looked up in the format's table (LUT) and stored.
#define PACK_VALUES(t, j, LUT) \
	VPANDD    Z30, t, Z12; \
	VPSRLW    $4, t, Z13; \
	VPANDD    Z30, Z13, Z13; \
	LUT(Z12); \
	LUT(Z13); \
	VMOVDQU64 Z12, (128*j)(DI); \
	VMOVDQU64 Z13, (128*j+64)(DI)

#define LUT_NONE(z)
#define LUT_TABLE(z) VPSHUFB z, Z29, z

// Scales: the 16 rows' first dword of the block gathered (Z15 holds the rows' byte
// offsets), then widened to float32 as the rows kernels' tables do.
#define SCALE_F16 \
	KXNORW      K1, K1, K1; \
	VPGATHERDD  (SI)(Z15*1), K1, Z14; \
	VPMOVDW     Z14, Y14; \
	VCVTPH2PS   Y14, Z14

// E8M0's byte e becomes e8m0Half(e) = 2^(e-128) by its bits: (e-1)<<23, or for e < 2
// the subnormal 0x00200000<<e (Z23-Z25 hold 0x00200000, 2 and 1 in every dword).
#define SCALE_E8M0 \
	KXNORW      K1, K1, K1; \
	VPGATHERDD  (SI)(Z15*1), K1, Z14; \
	VPANDD      Z28, Z14, Z14; \
	VPSUBD      Z25, Z14, Z13; \
	VPSLLD      $23, Z13, Z13; \
	VPCMPUD     $1, Z24, Z14, K2; \
	VPSLLVD     Z14, Z23, K2, Z13; \
	VMOVAPS     Z13, Z14

// PACK_PREFETCH asks (into L2) for the next 320 bytes of the 16 rows after these (R15),
// a little more than a block of them takes, so that they stream in while these are
// packed: the rows of a tile follow each other in memory, and hardware prefetching stops
// at every 4 KiB page. Past a tile's last rows it asks for bytes that may not be ours,
// which a prefetch may: it never faults.
#define PACK_PREFETCH \
	PREFETCHT1 (R15); \
	PREFETCHT1 64(R15); \
	PREFETCHT1 128(R15); \
	PREFETCHT1 192(R15); \
	PREFETCHT1 256(R15)

// The 16 rows of a group: ROW_POINTERS16 sets rows 0-3 (SI BX DX R10) and 8-11 (R11-R14)
// from SI and R9 = rowBytes (rows 4-7 and 12-15 are the same plus 4 rowBytes);
// LOAD_ROWS16 loads 16 bytes at qoff of each row's block, four rows a register (Z0-Z3);
// NEXT_BLOCK16 moves every row, and R15 (PACK_PREFETCH), on by a block.
#define ROW_POINTERS16 \
	LEAQ (SI)(R9*1), BX; \
	LEAQ (BX)(R9*1), DX; \
	LEAQ (DX)(R9*1), R10; \
	LEAQ (SI)(R9*8), R11; \
	LEAQ (BX)(R9*8), R12; \
	LEAQ (DX)(R9*8), R13; \
	LEAQ (R10)(R9*8), R14

#define LOAD_ROWS16(qoff) \
	PACK_LOAD4(qoff(SI), qoff(BX), qoff(DX), qoff(R10), Z0, X0); \
	PACK_LOAD4(qoff(SI)(R9*4), qoff(BX)(R9*4), qoff(DX)(R9*4), qoff(R10)(R9*4), Z1, X1); \
	PACK_LOAD4(qoff(R11), qoff(R12), qoff(R13), qoff(R14), Z2, X2); \
	PACK_LOAD4(qoff(R11)(R9*4), qoff(R12)(R9*4), qoff(R13)(R9*4), qoff(R14)(R9*4), Z3, X3)

#define NEXT_BLOCK16(bs) \
	ADDQ $bs, SI; \
	ADDQ $bs, BX; \
	ADDQ $bs, DX; \
	ADDQ $bs, R10; \
	ADDQ $bs, R11; \
	ADDQ $bs, R12; \
	ADDQ $bs, R13; \
	ADDQ $bs, R14; \
	ADDQ $(16*bs), R15

// MXFP4_CONSTANTS loads its value table (Z29) and SCALE_E8M0's constants.
#define MXFP4_CONSTANTS \
	VBROADCASTI32X4 ·fp4Shifted(SB), Z29; \
	MOVL            $0x00200000, AX; \
	VPBROADCASTD    AX, Z23; \
	MOVL            $2, AX; \
	VPBROADCASTD    AX, Z24; \
	MOVL            $1, AX; \
	VPBROADCASTD    AX, Z25

// PACK16 packs 16 rows (SI the first, R9 rowBytes apart) of nb blocks of bs bytes, the
// values at qoff in the block, into dst: per block eight 64-byte registers of value bytes
// (W0-W7, lane r row r: W(2j) values 4j..4j+3, W(2j+1) values 16+4j..16+4j+3) and the
// 16 rows' scales as float32, 576 bytes. The rows' registers are ROW_POINTERS16's; R15
// walks the next 16 rows for PACK_PREFETCH.
#define PACK16(bs, qoff, LUT, SCALE) \
	MOVQ         w+0(FP), SI; \
	MOVQ         rowBytes+8(FP), R9; \
	MOVQ         nb+16(FP), CX; \
	MOVQ         dst+24(FP), DI; \
	ROW_POINTERS16; \
	MOVQ         R9, R15; \
	SHLQ         $4, R15; \
	ADDQ         SI, R15; \
	VPBROADCASTD R9, Z15; \
	VPMULLD      ·packRowIndex(SB), Z15, Z15; \
	VMOVDQU64    ·packPairs01(SB), Z26; \
	VMOVDQU64    ·packPairs23(SB), Z27; \
	VPBROADCASTB ·nibbleMask(SB), Z30; \
	MOVL         $0xFF, AX; \
	VPBROADCASTD AX, Z28; \
packblock: \
	PACK_PREFETCH; \
	LOAD_ROWS16(qoff); \
	VMOVDQA64    Z26, Z4; \
	VPERMI2D     Z1, Z0, Z4; \
	VMOVDQA64    Z27, Z5; \
	VPERMI2D     Z1, Z0, Z5; \
	VMOVDQA64    Z26, Z6; \
	VPERMI2D     Z3, Z2, Z6; \
	VMOVDQA64    Z27, Z7; \
	VPERMI2D     Z3, Z2, Z7; \
	VSHUFI64X2   $0x44, Z6, Z4, Z8; \
	VSHUFI64X2   $0xEE, Z6, Z4, Z9; \
	VSHUFI64X2   $0x44, Z7, Z5, Z10; \
	VSHUFI64X2   $0xEE, Z7, Z5, Z11; \
	PACK_VALUES(Z8, 0, LUT); \
	PACK_VALUES(Z9, 1, LUT); \
	PACK_VALUES(Z10, 2, LUT); \
	PACK_VALUES(Z11, 3, LUT); \
	SCALE; \
	VMOVUPS      Z14, 512(DI); \
	ADDQ         $576, DI; \
	NEXT_BLOCK16(bs); \
	DECQ         CX; \
	JNZ          packblock; \
	CLEAR_HIGH; \
	RET

// ROWS1 is the packed arithmetic for one token straight from the weights (decode), groups
// groups of 16 rows: per block, four registers of four rows' value bytes (PACK_LOAD4, one
// row a 128-bit lane) against the token's values broadcast to every lane give each row
// four dword sums, which a 4×4 transpose of the registers' dwords adds up (VPUNPCK*),
// leaving row 4j+l in dword 4l+j; the rows' scales are gathered in that order (Z15) and
// the sums put back in row order at the end (VPERMD by Z22). Registers as PACK16's; Z16
// the group's float sums, DI the token's prepared activations, R8 the next group.
#define ROWS1_DOT(r, ints, LUT) \
	VPANDD   Z30, r, Z12; \
	VPSRLW   $4, r, Z13; \
	VPANDD   Z30, Z13, Z13; \
	LUT(Z12); \
	LUT(Z13); \
	VPXORD   ints, ints, ints; \
	VPDPBUSD Z4, Z12, ints; \
	VPDPBUSD Z5, Z13, ints

#define ROWS1(bs, qoff, LUT, SCALE) \
	MOVQ         w+0(FP), R8; \
	MOVQ         rowBytes+8(FP), R9; \
	MOVQ         out+40(FP), AX; \
	VPBROADCASTD R9, Z15; \
	VPMULLD      ·transpose4x4(SB), Z15, Z15; \
	VMOVDQU64    ·transpose4x4(SB), Z22; \
	VPBROADCASTB ·nibbleMask(SB), Z30; \
	MOVL         $0xFF, BX; \
	VPBROADCASTD BX, Z28; \
rows1group: \
	MOVQ         R8, SI; \
	ROW_POINTERS16; \
	LEAQ         (R11)(R9*8), R8; \
	MOVQ         R8, R15; \
	MOVQ         a+32(FP), DI; \
	MOVQ         nb+24(FP), CX; \
	VPXORD       Z16, Z16, Z16; \
rows1block: \
	PACK_PREFETCH; \
	LOAD_ROWS16(qoff); \
	VBROADCASTI32X4 (DI), Z4; \
	VBROADCASTI32X4 16(DI), Z5; \
	ROWS1_DOT(Z0, Z6, LUT); \
	ROWS1_DOT(Z1, Z7, LUT); \
	ROWS1_DOT(Z2, Z8, LUT); \
	ROWS1_DOT(Z3, Z9, LUT); \
	VPUNPCKLDQ   Z7, Z6, Z10; \
	VPUNPCKHDQ   Z7, Z6, Z11; \
	VPADDD       Z11, Z10, Z10; \
	VPUNPCKLDQ   Z9, Z8, Z11; \
	VPUNPCKHDQ   Z9, Z8, Z12; \
	VPADDD       Z12, Z11, Z11; \
	VPUNPCKLQDQ  Z11, Z10, Z12; \
	VPUNPCKHQDQ  Z11, Z10, Z13; \
	VPADDD       Z13, Z12, Z12; \
	VPADDD.BCST  32(DI), Z12, Z12; \
	SCALE; \
	VMULPS.BCST  36(DI), Z14, Z14; \
	VCVTDQ2PS    Z12, Z12; \
	VFMADD231PS  Z12, Z14, Z16; \
	NEXT_BLOCK16(bs); \
	ADDQ         $40, DI; \
	DECQ         CX; \
	JNZ          rows1block; \
	VPERMD       Z16, Z22, Z16; \
	VMOVUPS      Z16, (AX); \
	ADDQ         $64, AX; \
	DECQ         groups+16(FP); \
	JNZ          rows1group; \
	CLEAR_HIGH; \
	RET

// Multiplying packed blocks by prepared activations (packedAct: per block the 32 value
// bytes, the offset correction as int32 and the scale as float32, 40 bytes), G tokens at
// a time (8, 4, 2 or 1): token t's activations in R8+t, its integer sums (16 rows, started
// at the correction) in Z8+t, its float sums in Zt; Z16 the weight bytes of a step, Z17
// the block's row scales, Z18 a token's scales d_w·d_y. Each row and token gets ggml's
// repacked kernels' arithmetic: per block the exact integer sum, then
// acc = float(sum)·(d_w·d_y) + acc in one rounding.
#define PK_INIT(a, ints) VPBROADCASTD 32(a), ints
#define PK_DOT(off, a, ints) VPDPBUSD.BCST off(a), Z16, ints
#define PK_END(a, ints, acc) \
	VMULPS.BCST 36(a), Z17, Z18; \
	VCVTDQ2PS   ints, ints; \
	VFMADD231PS ints, Z18, acc

#define PK_NEXT(a) ADDQ $40, a
#define PK_LOAD(slot, a) MOVQ slot(AX), a
#define PK_STORE(slot, acc) \
	MOVQ    slot(AX), DX; \
	VMOVUPS acc, K1, (DX)

// The kernels for 1, 2, 4 and 8 tokens: each family's macro for G tokens is that for G/2
// and the next G/2 tokens.
#define PK_INIT1 \
	PK_INIT(R8, Z8)
#define PK_INIT2 \
	PK_INIT1; \
	PK_INIT(R9, Z9)
#define PK_INIT4 \
	PK_INIT2; \
	PK_INIT(R10, Z10); \
	PK_INIT(R11, Z11)
#define PK_INIT8 \
	PK_INIT4; \
	PK_INIT(R12, Z12); \
	PK_INIT(R13, Z13); \
	PK_INIT(R14, Z14); \
	PK_INIT(R15, Z15)

#define PK_DOT1(off) \
	PK_DOT(off, R8, Z8)
#define PK_DOT2(off) \
	PK_DOT1(off); \
	PK_DOT(off, R9, Z9)
#define PK_DOT4(off) \
	PK_DOT2(off); \
	PK_DOT(off, R10, Z10); \
	PK_DOT(off, R11, Z11)
#define PK_DOT8(off) \
	PK_DOT4(off); \
	PK_DOT(off, R12, Z12); \
	PK_DOT(off, R13, Z13); \
	PK_DOT(off, R14, Z14); \
	PK_DOT(off, R15, Z15)

#define PK_END1 \
	PK_END(R8, Z8, Z0)
#define PK_END2 \
	PK_END1; \
	PK_END(R9, Z9, Z1)
#define PK_END4 \
	PK_END2; \
	PK_END(R10, Z10, Z2); \
	PK_END(R11, Z11, Z3)
#define PK_END8 \
	PK_END4; \
	PK_END(R12, Z12, Z4); \
	PK_END(R13, Z13, Z5); \
	PK_END(R14, Z14, Z6); \
	PK_END(R15, Z15, Z7)

#define PK_NEXT1 \
	PK_NEXT(R8)
#define PK_NEXT2 \
	PK_NEXT1; \
	PK_NEXT(R9)
#define PK_NEXT4 \
	PK_NEXT2; \
	PK_NEXT(R10); \
	PK_NEXT(R11)
#define PK_NEXT8 \
	PK_NEXT4; \
	PK_NEXT(R12); \
	PK_NEXT(R13); \
	PK_NEXT(R14); \
	PK_NEXT(R15)

#define PK_ZERO1 \
	VPXORD Z0, Z0, Z0
#define PK_ZERO2 \
	PK_ZERO1; \
	VPXORD Z1, Z1, Z1
#define PK_ZERO4 \
	PK_ZERO2; \
	VPXORD Z2, Z2, Z2; \
	VPXORD Z3, Z3, Z3
#define PK_ZERO8 ZERO_Z0_7

#define PK_LOAD1 \
	PK_LOAD(0, R8)
#define PK_LOAD2 \
	PK_LOAD1; \
	PK_LOAD(8, R9)
#define PK_LOAD4 \
	PK_LOAD2; \
	PK_LOAD(16, R10); \
	PK_LOAD(24, R11)
#define PK_LOAD8 \
	PK_LOAD4; \
	PK_LOAD(32, R12); \
	PK_LOAD(40, R13); \
	PK_LOAD(48, R14); \
	PK_LOAD(56, R15)

#define PK_STORE1 \
	PK_STORE(0, Z0)
#define PK_STORE2 \
	PK_STORE1; \
	PK_STORE(8, Z1)
#define PK_STORE4 \
	PK_STORE2; \
	PK_STORE(16, Z2); \
	PK_STORE(24, Z3)
#define PK_STORE8 \
	PK_STORE4; \
	PK_STORE(32, Z4); \
	PK_STORE(40, Z5); \
	PK_STORE(48, Z6); \
	PK_STORE(56, Z7)

// PACKED_TOKENS runs G tokens (their activation pointers at acts) down one packed group of
// 16 rows (w, nb blocks), and stores each token's 16 sums, those mask selects, at its
// output pointer (outs).
#define PACKED_TOKENS(LOAD, ZERO, INIT, DOT, END, NEXT, STORE) \
	MOVQ  w+0(FP), SI; \
	MOVQ  nb+8(FP), CX; \
	MOVQ  acts+16(FP), AX; \
	LOAD; \
	ZERO; \
packedblock: \
	INIT; \
	VMOVDQU64 0(SI), Z16; \
	DOT(0); \
	VMOVDQU64 64(SI), Z16; \
	DOT(16); \
	VMOVDQU64 128(SI), Z16; \
	DOT(4); \
	VMOVDQU64 192(SI), Z16; \
	DOT(20); \
	VMOVDQU64 256(SI), Z16; \
	DOT(8); \
	VMOVDQU64 320(SI), Z16; \
	DOT(24); \
	VMOVDQU64 384(SI), Z16; \
	DOT(12); \
	VMOVDQU64 448(SI), Z16; \
	DOT(28); \
	VMOVUPS   512(SI), Z17; \
	END; \
	ADDQ $576, SI; \
	NEXT; \
	DECQ CX; \
	JNZ  packedblock; \
	MOVQ  outs+24(FP), AX; \
	MOVWLZX mask+32(FP), DX; \
	KMOVW DX, K1; \
	STORE; \
	CLEAR_HIGH; \
	RET

// func packQ4_0Rows16(w unsafe.Pointer, rowBytes, nb int, dst unsafe.Pointer)
TEXT ·packQ4_0Rows16(SB), NOSPLIT, $0-32
	PACK16(18, 2, LUT_NONE, SCALE_F16)

// func packIQ4_NLRows16(w unsafe.Pointer, rowBytes, nb int, dst unsafe.Pointer)
TEXT ·packIQ4_NLRows16(SB), NOSPLIT, $0-32
	VBROADCASTI32X4 ·iq4Unsigned(SB), Z29
	PACK16(18, 2, LUT_TABLE, SCALE_F16)

// func packMXFP4Rows16(w unsafe.Pointer, rowBytes, nb int, dst unsafe.Pointer)
TEXT ·packMXFP4Rows16(SB), NOSPLIT, $0-32
	MXFP4_CONSTANTS
	PACK16(17, 1, LUT_TABLE, SCALE_E8M0)

// func dotQ4_0Rows16x1(w unsafe.Pointer, rowBytes, groups, nb int, a unsafe.Pointer, out *float32)
TEXT ·dotQ4_0Rows16x1(SB), NOSPLIT, $0-48
	ROWS1(18, 2, LUT_NONE, SCALE_F16)

// func dotIQ4_NLRows16x1(w unsafe.Pointer, rowBytes, groups, nb int, a unsafe.Pointer, out *float32)
TEXT ·dotIQ4_NLRows16x1(SB), NOSPLIT, $0-48
	VBROADCASTI32X4 ·iq4Unsigned(SB), Z29
	ROWS1(18, 2, LUT_TABLE, SCALE_F16)

// func dotMXFP4Rows16x1(w unsafe.Pointer, rowBytes, groups, nb int, a unsafe.Pointer, out *float32)
TEXT ·dotMXFP4Rows16x1(SB), NOSPLIT, $0-48
	MXFP4_CONSTANTS
	ROWS1(17, 1, LUT_TABLE, SCALE_E8M0)

// func dotPackedTokens8(w unsafe.Pointer, nb int, acts *[8]unsafe.Pointer, outs *[8]*float32, mask uint16)
TEXT ·dotPackedTokens8(SB), NOSPLIT, $0-34
	PACKED_TOKENS(PK_LOAD8, PK_ZERO8, PK_INIT8, PK_DOT8, PK_END8, PK_NEXT8, PK_STORE8)

// func dotPackedTokens4(w unsafe.Pointer, nb int, acts *[4]unsafe.Pointer, outs *[4]*float32, mask uint16)
TEXT ·dotPackedTokens4(SB), NOSPLIT, $0-34
	PACKED_TOKENS(PK_LOAD4, PK_ZERO4, PK_INIT4, PK_DOT4, PK_END4, PK_NEXT4, PK_STORE4)

// func dotPackedTokens2(w unsafe.Pointer, nb int, acts *[2]unsafe.Pointer, outs *[2]*float32, mask uint16)
TEXT ·dotPackedTokens2(SB), NOSPLIT, $0-34
	PACKED_TOKENS(PK_LOAD2, PK_ZERO2, PK_INIT2, PK_DOT2, PK_END2, PK_NEXT2, PK_STORE2)

// func dotPackedTokens1(w unsafe.Pointer, nb int, acts *[1]unsafe.Pointer, outs *[1]*float32, mask uint16)
TEXT ·dotPackedTokens1(SB), NOSPLIT, $0-34
	PACKED_TOKENS(PK_LOAD1, PK_ZERO1, PK_INIT1, PK_DOT1, PK_END1, PK_NEXT1, PK_STORE1)
