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
#define PACK_VALUES(t, j, LUT) PACK_VALUES_AT(t, 128*j, LUT)

// PACK_VALUES_AT is PACK_VALUES storing to off(DI) and off+64(DI).
#define PACK_VALUES_AT(t, off, LUT) \
	VPANDD    Z30, t, Z12; \
	VPSRLW    $4, t, Z13; \
	VPANDD    Z30, Z13, Z13; \
	LUT(Z12); \
	LUT(Z13); \
	VMOVDQU64 Z12, (off)(DI); \
	VMOVDQU64 Z13, (off+64)(DI)

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
#define PACK_PREFETCH PACK_PREFETCH_AT(0)

// PACK_PREFETCH_AT is PACK_PREFETCH for the 320 bytes at off(R15).
#define PACK_PREFETCH_AT(off) \
	PREFETCHT1 (off)(R15); \
	PREFETCHT1 (off+64)(R15); \
	PREFETCHT1 (off+128)(R15); \
	PREFETCHT1 (off+192)(R15); \
	PREFETCHT1 (off+256)(R15)

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

// TRANSPOSE16 turns LOAD_ROWS16's registers (four rows' four dwords each) into Z8-Z11,
// register j dword j of the 16 rows in row order, with packPairs01 and packPairs23 in Z26
// and Z27 (Z4-Z7 scratch).
#define TRANSPOSE16 \
	VMOVDQA64  Z26, Z4; \
	VPERMI2D   Z1, Z0, Z4; \
	VMOVDQA64  Z27, Z5; \
	VPERMI2D   Z1, Z0, Z5; \
	VMOVDQA64  Z26, Z6; \
	VPERMI2D   Z3, Z2, Z6; \
	VMOVDQA64  Z27, Z7; \
	VPERMI2D   Z3, Z2, Z7; \
	VSHUFI64X2 $0x44, Z6, Z4, Z8; \
	VSHUFI64X2 $0xEE, Z6, Z4, Z9; \
	VSHUFI64X2 $0x44, Z7, Z5, Z10; \
	VSHUFI64X2 $0xEE, Z7, Z5, Z11

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

// PACK_BEGIN starts a packing function (w, rowBytes, nb, dst): the rows' registers
// (ROW_POINTERS16), R15 at the next 16 rows (PACK_PREFETCH), TRANSPOSE16's permutations.
#define PACK_BEGIN \
	MOVQ      w+0(FP), SI; \
	MOVQ      rowBytes+8(FP), R9; \
	MOVQ      nb+16(FP), CX; \
	MOVQ      dst+24(FP), DI; \
	ROW_POINTERS16; \
	MOVQ      R9, R15; \
	SHLQ      $4, R15; \
	ADDQ      SI, R15; \
	VMOVDQU64 ·packPairs01(SB), Z26; \
	VMOVDQU64 ·packPairs23(SB), Z27

// PACK16 packs 16 rows (SI the first, R9 rowBytes apart) of nb blocks of bs bytes, the
// values at qoff in the block, into dst: per block eight 64-byte registers of value bytes
// (W0-W7, lane r row r: W(2j) values 4j..4j+3, W(2j+1) values 16+4j..16+4j+3) and the
// 16 rows' scales as float32, 576 bytes. The rows' registers are ROW_POINTERS16's; R15
// walks the next 16 rows for PACK_PREFETCH.
#define PACK16(bs, qoff, LUT, SCALE) \
	PACK_BEGIN; \
	VPBROADCASTD R9, Z15; \
	VPMULLD      ·packRowIndex(SB), Z15, Z15; \
	VPBROADCASTB ·nibbleMask(SB), Z30; \
	MOVL         $0xFF, AX; \
	VPBROADCASTD AX, Z28; \
packblock: \
	PACK_PREFETCH; \
	LOAD_ROWS16(qoff); \
	TRANSPOSE16; \
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

// Q4_K packed (see packed.go): a group of 16 rows is laid out per 256-value super-block
// as q4KPackedBytes bytes:
//
//	0     values: pair p of sub-blocks (2p, 2p+1), half h of its 32 bytes, dword k:
//	      at 1024p+512h+128k the 16 rows' values 16h+4k..+3 of sub-block 2p (low
//	      nibbles), 64 bytes on those of sub-block 2p+1 (high nibbles)
//	4096  the sub-blocks' scales as float32, 64 bytes a sub-block
//	4608  the sub-blocks' mins, each twice as int16 in a dword (m | m<<16), 64 bytes each
//	5120  d as float32, 5184 dmin.
//
// Activations are Q8_K blocks as they are (d_y, 256 value bytes, 16 int16 sums of 16).

// Q4KP_PACK_SCALE stores the scales of byte lane pick (VPSHUFB's control) of v's dwords
// as float32 at off(DI); Q4KP_PACK_MIN stores the mins of that lane, each as a pair of
// int16, at off(DI). Z17-Z20 pick bytes 0-3 alone, Z21-Z24 as word pairs (q4KPick).
#define Q4KP_PACK_SCALE(v, pick, off) \
	VPSHUFB   pick, v, Z16; \
	VCVTDQ2PS Z16, Z16; \
	VMOVUPS   Z16, (off)(DI)

#define Q4KP_PACK_MIN(v, pick, off) \
	VPSHUFB   pick, v, Z16; \
	VMOVDQU64 Z16, (off)(DI)

// Q4KP_PACK_QUARTER packs the 16 bytes at 32p+16h of the values of every row: low nibbles
// (sub-block 2p) and high (2p+1) to the layout's values, prefetching an eighth of the next
// 16 rows' block.
#define Q4KP_PACK_QUARTER(p, h) \
	PACK_PREFETCH_AT(576*p+288*h); \
	LOAD_ROWS16((16+32*p+16*h)); \
	TRANSPOSE16; \
	PACK_VALUES_AT(Z8, 1024*p+512*h, LUT_NONE); \
	PACK_VALUES_AT(Z9, 1024*p+512*h+128, LUT_NONE); \
	PACK_VALUES_AT(Z10, 1024*p+512*h+256, LUT_NONE); \
	PACK_VALUES_AT(Z11, 1024*p+512*h+384, LUT_NONE)

// The Q4_K packed kernels multiply one packed group of 16 rows by G tokens (4, 2 or 1) in
// llama.cpp's repacked arithmetic (repacked.go). Per 64-value chunk p (sub-blocks 2p and
// 2p+1) each token's integer dot products with the rows' values (Dl, Dh: VPDPBUSD against
// its bytes broadcast) are turned into the scaled sum Σ scale·dot as float32, exactly:
// every partial sum is an integer below 2^24 (a sub-block's |dot| <= 32·15·128, times a
// scale <= 63, four of them at most). The mins' integer sum Σ min·Σy comes from the
// activations' 16-value sums (VPDPWSSD of the mins' word pairs). gemm adds both to the
// accumulators per chunk; gemv adds the two halves' exact sums (X, Y) once per super-block,
// rounding as float(int) does, and the mins' sum likewise.
//
// Per token, Q4KP_TOKENS<G>(M, x) applies M(x, slot, a, Dl, Dh, X, Y, Mi, acc, accMin): its
// slot in acts and outs, its activations (R8-R11), integer sums, the two halves' scaled
// sums, the mins' sum and its two accumulators. Z12 and Z13 hold a step's weights, Z14
// and Z15 the super-block's d and dmin.
#define Q4KP_TOKENS1(M, x) \
	M(x, 0, R8, Z16, Z20, Z24, Z8, Z28, Z0, Z4)
#define Q4KP_TOKENS2(M, x) \
	Q4KP_TOKENS1(M, x); \
	M(x, 8, R9, Z17, Z21, Z25, Z9, Z29, Z1, Z5)
#define Q4KP_TOKENS4(M, x) \
	Q4KP_TOKENS2(M, x); \
	M(x, 16, R10, Z18, Z22, Z26, Z10, Z30, Z2, Z6); \
	M(x, 24, R11, Z19, Z23, Z27, Z11, Z31, Z3, Z7)

#define Q4KP_LOAD(x, slot, a, Dl, Dh, X, Y, Mi, acc, accMin) \
	MOVQ   slot(AX), a; \
	VPXORD acc, acc, acc; \
	VPXORD accMin, accMin, accMin

#define Q4KP_STORE(x, slot, a, Dl, Dh, X, Y, Mi, acc, accMin) \
	VSUBPS  accMin, acc, acc; \
	MOVQ    slot(AX), DX; \
	VMOVUPS acc, K1, (DX)

#define Q4KP_NEXT(x, slot, a, Dl, Dh, X, Y, Mi, acc, accMin) \
	ADDQ $292, a

#define Q4KP_ZERO(x, slot, a, Dl, Dh, X, Y, Mi, acc, accMin) \
	VPXORD Dl, Dl, Dl; \
	VPXORD Dh, Dh, Dh

#define Q4KP_DOT_LO(off, slot, a, Dl, Dh, X, Y, Mi, acc, accMin) \
	VPDPBUSD.BCST (off)(a), Z12, Dl

#define Q4KP_DOT_HI(off, slot, a, Dl, Dh, X, Y, Mi, acc, accMin) \
	VPDPBUSD.BCST (off)(a), Z13, Dh

// Q4KP_STEP: dword k of half h of pair p, against the tokens' bytes of sub-blocks 2p and
// 2p+1 (a Q8_K block's values start at 4).
#define Q4KP_STEP(TOKENS, p, h, k) \
	VMOVDQU64 (1024*p+512*h+128*k)(SI), Z12; \
	VMOVDQU64 (1024*p+512*h+128*k+64)(SI), Z13; \
	TOKENS(Q4KP_DOT_LO, 4+64*p+16*h+4*k); \
	TOKENS(Q4KP_DOT_HI, 36+64*p+16*h+4*k)

// Q4KP_SCALED sets X to the chunk's scaled sum Dl·scale(2p) + Dh·scale(2p+1);
// Q4KP_SCALED_MORE adds it to X.
#define Q4KP_SCALED(p, Dl, Dh, X) \
	VCVTDQ2PS   Dl, Dl; \
	VCVTDQ2PS   Dh, Dh; \
	VMULPS      (4096+128*p)(SI), Dl, X; \
	VFMADD231PS (4160+128*p)(SI), Dh, X

#define Q4KP_SCALED_MORE(p, Dl, Dh, X) \
	VCVTDQ2PS   Dl, Dl; \
	VCVTDQ2PS   Dh, Dh; \
	VFMADD231PS (4096+128*p)(SI), Dl, X; \
	VFMADD231PS (4160+128*p)(SI), Dh, X

// Q4KP_MINS adds the chunk's min·Σy to Mi: the mins of 2p and 2p+1 (Z12, Z13) each against
// its two 16-value sums.
#define Q4KP_MINS(p, a, Mi) \
	VPDPWSSD.BCST (260+8*p)(a), Z12, Mi; \
	VPDPWSSD.BCST (264+8*p)(a), Z13, Mi

// Q4KP_FLUSH: acc = X·(d·d_y) + acc and accMin = float(Mi)·(dmin·d_y) + accMin, one
// rounding each (Dl and Dh scratch).
#define Q4KP_FLUSH(a, Dl, Dh, X, Mi, acc, accMin) \
	VMULPS.BCST (a), Z14, Dl; \
	VFMADD231PS X, Dl, acc; \
	VCVTDQ2PS   Mi, Mi; \
	VMULPS.BCST (a), Z15, Dh; \
	VFMADD231PS Mi, Dh, accMin

#define Q4KP_GEMM_END(p, slot, a, Dl, Dh, X, Y, Mi, acc, accMin) \
	Q4KP_SCALED(p, Dl, Dh, X); \
	VPXORD Mi, Mi, Mi; \
	Q4KP_MINS(p, a, Mi); \
	Q4KP_FLUSH(a, Dl, Dh, X, Mi, acc, accMin)

#define Q4KP_GEMV_END0(p, slot, a, Dl, Dh, X, Y, Mi, acc, accMin) \
	Q4KP_SCALED(p, Dl, Dh, X); \
	VPXORD Mi, Mi, Mi; \
	Q4KP_MINS(p, a, Mi)

#define Q4KP_GEMV_END1(p, slot, a, Dl, Dh, X, Y, Mi, acc, accMin) \
	Q4KP_SCALED_MORE(p, Dl, Dh, X); \
	Q4KP_MINS(p, a, Mi)

#define Q4KP_GEMV_END2(p, slot, a, Dl, Dh, X, Y, Mi, acc, accMin) \
	Q4KP_SCALED(p, Dl, Dh, Y); \
	Q4KP_MINS(p, a, Mi)

#define Q4KP_GEMV_END3(p, slot, a, Dl, Dh, X, Y, Mi, acc, accMin) \
	Q4KP_SCALED_MORE(p, Dl, Dh, Y); \
	Q4KP_MINS(p, a, Mi); \
	VADDPS Y, X, X; \
	Q4KP_FLUSH(a, Dl, Dh, X, Mi, acc, accMin)

// Q4KP_CHUNK: chunk p's dot products, then END per token with the chunk's mins in Z12, Z13.
#define Q4KP_CHUNK(TOKENS, p, END) \
	TOKENS(Q4KP_ZERO, 0); \
	Q4KP_STEP(TOKENS, p, 0, 0); \
	Q4KP_STEP(TOKENS, p, 0, 1); \
	Q4KP_STEP(TOKENS, p, 0, 2); \
	Q4KP_STEP(TOKENS, p, 0, 3); \
	Q4KP_STEP(TOKENS, p, 1, 0); \
	Q4KP_STEP(TOKENS, p, 1, 1); \
	Q4KP_STEP(TOKENS, p, 1, 2); \
	Q4KP_STEP(TOKENS, p, 1, 3); \
	VMOVDQU64 (4608+128*p)(SI), Z12; \
	VMOVDQU64 (4672+128*p)(SI), Z13; \
	TOKENS(END, p)

#define Q4KP_GEMM(TOKENS) \
	Q4KP_CHUNK(TOKENS, 0, Q4KP_GEMM_END); \
	Q4KP_CHUNK(TOKENS, 1, Q4KP_GEMM_END); \
	Q4KP_CHUNK(TOKENS, 2, Q4KP_GEMM_END); \
	Q4KP_CHUNK(TOKENS, 3, Q4KP_GEMM_END)

#define Q4KP_GEMV(TOKENS) \
	Q4KP_CHUNK(TOKENS, 0, Q4KP_GEMV_END0); \
	Q4KP_CHUNK(TOKENS, 1, Q4KP_GEMV_END1); \
	Q4KP_CHUNK(TOKENS, 2, Q4KP_GEMV_END2); \
	Q4KP_CHUNK(TOKENS, 3, Q4KP_GEMV_END3)

// KP_PACKED_TOKENS runs the tokens (acts) down one packed group (w, nb super-blocks of
// bytes bytes, d and dmin at doff) in FORM's arithmetic and stores each token's 16
// results, those mask selects, at outs.
#define KP_PACKED_TOKENS(TOKENS, FORM, doff, bytes) \
	MOVQ    w+0(FP), SI; \
	MOVQ    nb+8(FP), CX; \
	MOVQ    acts+16(FP), AX; \
	TOKENS(Q4KP_LOAD, 0); \
kpblock: \
	VMOVUPS doff(SI), Z14; \
	VMOVUPS (doff+64)(SI), Z15; \
	FORM(TOKENS); \
	ADDQ    $bytes, SI; \
	TOKENS(Q4KP_NEXT, 0); \
	DECQ    CX; \
	JNZ     kpblock; \
	MOVQ    outs+24(FP), AX; \
	MOVWLZX mask+32(FP), DX; \
	KMOVW   DX, K1; \
	TOKENS(Q4KP_STORE, 0); \
	CLEAR_HIGH; \
	RET

// Q2_K packed: a group of 16 rows is laid out per super-block as q2KPackedBytes bytes:
//
//	0     values times their sub-block's scale (q·scale <= 45, a byte each): half h,
//	      shift s, dword k at 2048h+512s+64k, the 16 rows' values 128h+32s+4k..+3
//	4096  the mins of sub-blocks 2i and 2i+1 as an int16 pair (a dword), 64 bytes a pair
//	4608  d as float32, 4672 dmin.
//
// Scaled values need no step per sub-block: a super-block's integer sum Σ scale·q·y is one
// VPDPBUSD chain (two, even and odd dwords, for latency), exact, as llama.cpp's
// ggml_gemv_q2_K_8x8_q8_K (per super-block) and ggml_gemm_q2_K_8x8_q8_K (per 128-value
// half) add it before their FMA; the mins' sum Σ min·Σy against the activations' 16-value
// sums by VPDPWSSD. Per token the registers of Q4KP_TOKENS<G>: Dl and Dh are the even and
// odd sums, X scratch, Mi the mins' sum; Z8-Z11 (Y, unused here) hold four mins pairs.

#define Q2KP_ZERO(x, slot, a, Ie, Io, T, Y, Mi, acc, accMin) \
	VPXORD Ie, Ie, Ie; \
	VPXORD Io, Io, Io

#define Q2KP_DOT_E(off, slot, a, Ie, Io, T, Y, Mi, acc, accMin) \
	VPDPBUSD.BCST (off)(a), Z12, Ie

#define Q2KP_DOT_O(off, slot, a, Ie, Io, T, Y, Mi, acc, accMin) \
	VPDPBUSD.BCST (off)(a), Z13, Io

// Q2KP_STEP: dwords k and k+1 of shift s of half h against the tokens' bytes.
#define Q2KP_STEP(TOKENS, h, s, k) \
	VMOVDQU64 (2048*h+512*s+64*k)(SI), Z12; \
	VMOVDQU64 (2048*h+512*s+64*k+64)(SI), Z13; \
	TOKENS(Q2KP_DOT_E, 4+128*h+32*s+4*k); \
	TOKENS(Q2KP_DOT_O, 8+128*h+32*s+4*k)

#define Q2KP_SHIFT(TOKENS, h, s) \
	Q2KP_STEP(TOKENS, h, s, 0); \
	Q2KP_STEP(TOKENS, h, s, 2); \
	Q2KP_STEP(TOKENS, h, s, 4); \
	Q2KP_STEP(TOKENS, h, s, 6)

#define Q2KP_HALF(TOKENS, h) \
	Q2KP_SHIFT(TOKENS, h, 0); \
	Q2KP_SHIFT(TOKENS, h, 1); \
	Q2KP_SHIFT(TOKENS, h, 2); \
	Q2KP_SHIFT(TOKENS, h, 3)

// Q2KP_SUMS: acc = float(Ie+Io)·(d·d_y) + acc, and the mins' sum cleared.
#define Q2KP_SUMS(x, slot, a, Ie, Io, T, Y, Mi, acc, accMin) \
	VPADDD      Io, Ie, Ie; \
	VCVTDQ2PS   Ie, Ie; \
	VMULPS.BCST (a), Z14, T; \
	VFMADD231PS Ie, T, acc; \
	VPXORD      Mi, Mi, Mi

// Q2KP_LOAD_MINS loads the mins pairs of half q (4q..4q+3) into Z8-Z11; Q2KP_MINS adds
// them times the token's 16-value sums to Mi; Q2KP_MINS_END accMin = float(Mi)·(dmin·d_y)
// + accMin.
#define Q2KP_LOAD_MINS(q) \
	VMOVDQU64 (4096+256*q)(SI), Z8; \
	VMOVDQU64 (4160+256*q)(SI), Z9; \
	VMOVDQU64 (4224+256*q)(SI), Z10; \
	VMOVDQU64 (4288+256*q)(SI), Z11

#define Q2KP_MINS(q, slot, a, Ie, Io, T, Y, Mi, acc, accMin) \
	VPDPWSSD.BCST (260+16*q)(a), Z8, Mi; \
	VPDPWSSD.BCST (264+16*q)(a), Z9, Mi; \
	VPDPWSSD.BCST (268+16*q)(a), Z10, Mi; \
	VPDPWSSD.BCST (272+16*q)(a), Z11, Mi

#define Q2KP_MINS_END(x, slot, a, Ie, Io, T, Y, Mi, acc, accMin) \
	VCVTDQ2PS   Mi, Mi; \
	VMULPS.BCST (a), Z15, T; \
	VFMADD231PS Mi, T, accMin

// Q2KP_GEMM_HALF: half h's sums and mins, each into its accumulator.
#define Q2KP_GEMM_HALF(TOKENS, h) \
	TOKENS(Q2KP_ZERO, 0); \
	Q2KP_HALF(TOKENS, h); \
	TOKENS(Q2KP_SUMS, 0); \
	Q2KP_LOAD_MINS(h); \
	TOKENS(Q2KP_MINS, h); \
	TOKENS(Q2KP_MINS_END, 0)

#define Q2KP_GEMM(TOKENS) \
	Q2KP_GEMM_HALF(TOKENS, 0); \
	Q2KP_GEMM_HALF(TOKENS, 1)

#define Q2KP_GEMV(TOKENS) \
	TOKENS(Q2KP_ZERO, 0); \
	Q2KP_HALF(TOKENS, 0); \
	Q2KP_HALF(TOKENS, 1); \
	TOKENS(Q2KP_SUMS, 0); \
	Q2KP_LOAD_MINS(0); \
	TOKENS(Q2KP_MINS, 0); \
	Q2KP_LOAD_MINS(1); \
	TOKENS(Q2KP_MINS, 1); \
	TOKENS(Q2KP_MINS_END, 0)

// The Q2_K packing. Q2KP_PACK_VALUE stores shift sh's 2-bit values of v (16 rows' dword)
// times their rows' scales: the value plus 4·(the row's dword in its 128-bit lane, Z24)
// indexes table (each row's [0, s, 2s, 3s], Q2KP_TABLE).
#define Q2KP_PACK_VALUE(v, sh, table, off) \
	VPSRLW    $sh, v, Z12; \
	VPANDD    Z28, Z12, Z12; \
	VPORD     Z24, Z12, Z12; \
	VPSHUFB   Z12, table, Z13; \
	VMOVDQU64 Z13, (off)(DI)

#define Q2KP_PACK_REG(v, off, t0, t1, t2, t3) \
	Q2KP_PACK_VALUE(v, 0, t0, off); \
	Q2KP_PACK_VALUE(v, 2, t1, off+512); \
	Q2KP_PACK_VALUE(v, 4, t2, off+1024); \
	Q2KP_PACK_VALUE(v, 6, t3, off+1536)

// Q2KP_PACK_QUARTER packs the 16 code bytes at 32h+16q of the values (dwords 4q..4q+3
// of half h), their sub-blocks' tables t0-t3 (shifts 0-3).
#define Q2KP_PACK_QUARTER(h, q, t0, t1, t2, t3) \
	LOAD_ROWS16((16+32*h+16*q)); \
	TRANSPOSE16; \
	Q2KP_PACK_REG(Z8, 2048*h+256*q, t0, t1, t2, t3); \
	Q2KP_PACK_REG(Z9, 2048*h+256*q+64, t0, t1, t2, t3); \
	Q2KP_PACK_REG(Z10, 2048*h+256*q+128, t0, t1, t2, t3); \
	Q2KP_PACK_REG(Z11, 2048*h+256*q+192, t0, t1, t2, t3)

#define Q2KP_PACK_HALF(h) \
	Q2KP_PACK_QUARTER(h, 0, Z16, Z18, Z20, Z22); \
	Q2KP_PACK_QUARTER(h, 1, Z17, Z19, Z21, Z23)

// Q2KP_TABLE: byte sh/8 of each row's dword of scale bytes v, its scale s (low nibble),
// as [0, s, 2s, 3s] (s·0x03020100, Z25; Z30 the dword 0xF).
#define Q2KP_TABLE(v, sh, t) \
	VPSRLD  $sh, v, t; \
	VPANDD  Z30, t, t; \
	VPMULLD Z25, t, t

// Q2KP_TABLES: the tables of eight sub-blocks, scale bytes in v0 (4) and v1 (4), Z16-Z23.
#define Q2KP_TABLES(v0, v1) \
	Q2KP_TABLE(v0, 0, Z16); \
	Q2KP_TABLE(v0, 8, Z17); \
	Q2KP_TABLE(v0, 16, Z18); \
	Q2KP_TABLE(v0, 24, Z19); \
	Q2KP_TABLE(v1, 0, Z20); \
	Q2KP_TABLE(v1, 8, Z21); \
	Q2KP_TABLE(v1, 16, Z22); \
	Q2KP_TABLE(v1, 24, Z23)

// Q2KP_PACK_MINS stores the mins (high nibbles) of four sub-blocks' scale bytes v as two
// int16 pairs at off(DI) and off+64(DI).
#define Q2KP_PACK_MINS(v, off) \
	VPSRLD    $4, v, Z12; \
	VPANDD    Z29, Z12, Z12; \
	VPSHUFB   ·q2KPack+64(SB), Z12, Z13; \
	VMOVDQU64 Z13, (off)(DI); \
	VPSHUFB   ·q2KPack+128(SB), Z12, Z13; \
	VMOVDQU64 Z13, (off+64)(DI)

// func dotQ4_KPackedGemm4(w unsafe.Pointer, nb int, acts *unsafe.Pointer, outs **float32, mask uint16)
TEXT ·dotQ4_KPackedGemm4(SB), NOSPLIT, $0-34
	KP_PACKED_TOKENS(Q4KP_TOKENS4, Q4KP_GEMM, 5120, 5248)

// func dotQ4_KPackedGemv4(w unsafe.Pointer, nb int, acts *unsafe.Pointer, outs **float32, mask uint16)
TEXT ·dotQ4_KPackedGemv4(SB), NOSPLIT, $0-34
	KP_PACKED_TOKENS(Q4KP_TOKENS4, Q4KP_GEMV, 5120, 5248)

// func dotQ4_KPackedGemv2(w unsafe.Pointer, nb int, acts *unsafe.Pointer, outs **float32, mask uint16)
TEXT ·dotQ4_KPackedGemv2(SB), NOSPLIT, $0-34
	KP_PACKED_TOKENS(Q4KP_TOKENS2, Q4KP_GEMV, 5120, 5248)

// func dotQ4_KPackedGemv1(w unsafe.Pointer, nb int, acts *unsafe.Pointer, outs **float32, mask uint16)
TEXT ·dotQ4_KPackedGemv1(SB), NOSPLIT, $0-34
	KP_PACKED_TOKENS(Q4KP_TOKENS1, Q4KP_GEMV, 5120, 5248)

// func packQ4_KRows16(w unsafe.Pointer, rowBytes, nb int, dst unsafe.Pointer)
TEXT ·packQ4_KRows16(SB), NOSPLIT, $0-32
	PACK_BEGIN
	VPBROADCASTB ·nibbleMask(SB), Z30
	MOVL         $0x3F3F3F3F, AX
	VPBROADCASTD AX, Z29
	MOVL         $0x30303030, AX
	VPBROADCASTD AX, Z28
	VMOVDQU64    ·q4KPick+0(SB), Z17
	VMOVDQU64    ·q4KPick+64(SB), Z18
	VMOVDQU64    ·q4KPick+128(SB), Z19
	VMOVDQU64    ·q4KPick+192(SB), Z20
	VMOVDQU64    ·q4KPick+256(SB), Z21
	VMOVDQU64    ·q4KPick+320(SB), Z22
	VMOVDQU64    ·q4KPick+384(SB), Z23
	VMOVDQU64    ·q4KPick+448(SB), Z24

q4kpackblock:
	// The 16 bytes before the values: d|dmin<<16 (Z8), then the 12 bytes of scales and
	// mins (Z9-Z11), ggml's get_scale_min_k4 done a byte lane at a time: scales 0-3 are
	// Z9's bytes' low six bits, mins 0-3 Z10's, scales 4-7 Z11's low nibbles with Z9's
	// top two bits above, mins 4-7 Z11's high nibbles with Z10's top bits.
	LOAD_ROWS16(0)
	TRANSPOSE16
	VPMOVDW      Z8, Y12
	VCVTPH2PS    Y12, Z12
	VMOVUPS      Z12, 5120(DI)
	VPSRLD       $16, Z8, Z13
	VPMOVDW      Z13, Y13
	VCVTPH2PS    Y13, Z13
	VMOVUPS      Z13, 5184(DI)
	VPANDD       Z29, Z9, Z12
	VPANDD       Z29, Z10, Z13
	VPANDD       Z30, Z11, Z14
	VPSRLD       $2, Z9, Z16
	VPANDD       Z28, Z16, Z16
	VPORD        Z16, Z14, Z14
	VPSRLD       $4, Z11, Z15
	VPANDD       Z30, Z15, Z15
	VPSRLD       $2, Z10, Z16
	VPANDD       Z28, Z16, Z16
	VPORD        Z16, Z15, Z15
	Q4KP_PACK_SCALE(Z12, Z17, 4096)
	Q4KP_PACK_SCALE(Z12, Z18, 4160)
	Q4KP_PACK_SCALE(Z12, Z19, 4224)
	Q4KP_PACK_SCALE(Z12, Z20, 4288)
	Q4KP_PACK_SCALE(Z14, Z17, 4352)
	Q4KP_PACK_SCALE(Z14, Z18, 4416)
	Q4KP_PACK_SCALE(Z14, Z19, 4480)
	Q4KP_PACK_SCALE(Z14, Z20, 4544)
	Q4KP_PACK_MIN(Z13, Z21, 4608)
	Q4KP_PACK_MIN(Z13, Z22, 4672)
	Q4KP_PACK_MIN(Z13, Z23, 4736)
	Q4KP_PACK_MIN(Z13, Z24, 4800)
	Q4KP_PACK_MIN(Z15, Z21, 4864)
	Q4KP_PACK_MIN(Z15, Z22, 4928)
	Q4KP_PACK_MIN(Z15, Z23, 4992)
	Q4KP_PACK_MIN(Z15, Z24, 5056)
	Q4KP_PACK_QUARTER(0, 0)
	Q4KP_PACK_QUARTER(0, 1)
	Q4KP_PACK_QUARTER(1, 0)
	Q4KP_PACK_QUARTER(1, 1)
	Q4KP_PACK_QUARTER(2, 0)
	Q4KP_PACK_QUARTER(2, 1)
	Q4KP_PACK_QUARTER(3, 0)
	Q4KP_PACK_QUARTER(3, 1)
	ADDQ         $5248, DI
	NEXT_BLOCK16(144)
	DECQ         CX
	JNZ          q4kpackblock
	CLEAR_HIGH
	RET

// func dotQ2_KPackedGemm4(w unsafe.Pointer, nb int, acts *unsafe.Pointer, outs **float32, mask uint16)
TEXT ·dotQ2_KPackedGemm4(SB), NOSPLIT, $0-34
	KP_PACKED_TOKENS(Q4KP_TOKENS4, Q2KP_GEMM, 4608, 4736)

// func dotQ2_KPackedGemv4(w unsafe.Pointer, nb int, acts *unsafe.Pointer, outs **float32, mask uint16)
TEXT ·dotQ2_KPackedGemv4(SB), NOSPLIT, $0-34
	KP_PACKED_TOKENS(Q4KP_TOKENS4, Q2KP_GEMV, 4608, 4736)

// func dotQ2_KPackedGemv2(w unsafe.Pointer, nb int, acts *unsafe.Pointer, outs **float32, mask uint16)
TEXT ·dotQ2_KPackedGemv2(SB), NOSPLIT, $0-34
	KP_PACKED_TOKENS(Q4KP_TOKENS2, Q2KP_GEMV, 4608, 4736)

// func dotQ2_KPackedGemv1(w unsafe.Pointer, nb int, acts *unsafe.Pointer, outs **float32, mask uint16)
TEXT ·dotQ2_KPackedGemv1(SB), NOSPLIT, $0-34
	KP_PACKED_TOKENS(Q4KP_TOKENS1, Q2KP_GEMV, 4608, 4736)

// func packQ2_KRows16(w unsafe.Pointer, rowBytes, nb int, dst unsafe.Pointer)
TEXT ·packQ2_KRows16(SB), NOSPLIT, $0-32
	PACK_BEGIN
	VPBROADCASTB ·nibbleMask(SB), Z29
	VMOVDQU64    ·q2KPack+0(SB), Z24
	MOVL         $0x03030303, AX
	VPBROADCASTD AX, Z28
	MOVL         $0x03020100, AX
	VPBROADCASTD AX, Z25
	MOVL         $0x0F, AX
	VPBROADCASTD AX, Z30

q2kpackblock:
	// The next 16 rows' block, 16·84 bytes, into L2 while these are packed.
	PACK_PREFETCH_AT(0)
	PACK_PREFETCH_AT(320)
	PACK_PREFETCH_AT(640)
	PACK_PREFETCH_AT(960)
	PACK_PREFETCH_AT(1280)
	// d|dmin<<16 is dword 3 of the 16 bytes at 68.
	LOAD_ROWS16(68)
	TRANSPOSE16
	VPMOVDW      Z11, Y12
	VCVTPH2PS    Y12, Z12
	VMOVUPS      Z12, 4608(DI)
	VPSRLD       $16, Z11, Z13
	VPMOVDW      Z13, Y13
	VCVTPH2PS    Y13, Z13
	VMOVUPS      Z13, 4672(DI)
	// The 16 scale bytes: dword j of each row is sub-blocks 4j..4j+3's.
	LOAD_ROWS16(0)
	TRANSPOSE16
	Q2KP_PACK_MINS(Z8, 4096)
	Q2KP_PACK_MINS(Z9, 4224)
	Q2KP_PACK_MINS(Z10, 4352)
	Q2KP_PACK_MINS(Z11, 4480)
	VMOVDQA64    Z10, Z14
	VMOVDQA64    Z11, Z15
	Q2KP_TABLES(Z8, Z9)
	Q2KP_PACK_HALF(0)
	Q2KP_TABLES(Z14, Z15)
	Q2KP_PACK_HALF(1)
	ADDQ         $4736, DI
	NEXT_BLOCK16(84)
	DECQ         CX
	JNZ          q2kpackblock
	CLEAR_HIGH
	RET
