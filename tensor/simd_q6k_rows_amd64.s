//go:build goexperiment.simd

#include "textflag.h"
#include "simd_amd64.h"

// dotQ6_KRows2AVX2: Q6_K × Q8_K over pairs of consecutive rows, two rows through each
// block together (see simd_q6k_rows_amd64.go). VEX instructions only (AVX2, FMA): it ends
// with VZEROUPPER. Go's operand order is Intel's reversed: VPMADDUBSW S, U, D is
// D = pairs of U (unsigned) · S (signed); VPSHUFB I, V, D is D = V's bytes picked by I;
// VPSUBD B, A, D is D = A - B.
//
// Registers: SI row 0's block, R9 row 1's (SI + rowBytes), DI their activations, CX the
// blocks left in the row, DX the prefetch distance, R8 f16Table, R10 the pairs left, R11
// the next two outputs, R12 the pair's first row, R13 rowBytes, AX scratch. Y15
// nibbleMask, Y14 bits45Mask; Y13 and Y12 the rows' float lanes, Y11 and Y10 their integer
// lanes in the block, Y9 and Y8 the half's eight scales as words (in both 128-bit halves),
// Y7 and Y6 the half's high bits, Y5 the 32 activations of a group, Y0-Y3 scratch.

// Q6_GROUP adds one group of 32 values of one row to sum: code = lo | hi, where lo is the
// low or high nibbles of the 32 bytes at ql(p) and hi the group's two high bits at bits 4
// and 5 (from qh, the half's high-bit bytes), times the activations Y5 (VPMADDUBSW), the
// pair sums times the group's two sub-block scales spread from sc by ·q6KSpread+j
// (VPMADDWD): dotQ6_KAVX2's steps.
#define Q6_LO(p, ql, t0) \
	VPAND ql(p), Y15, t0

#define Q6_HI(p, ql, t0) \
	VMOVDQU ql(p), t0; \
	VPSRLW  $4, t0, t0; \
	VPAND   Y15, t0, t0

#define Q6_BITS_SHL(sh, qh, t1) \
	VPSLLW $sh, qh, t1; \
	VPAND  Y14, t1, t1

#define Q6_BITS_AS_IS(sh, qh, t1) \
	VPAND Y14, qh, t1

#define Q6_BITS_SHR(sh, qh, t1) \
	VPSRLW $sh, qh, t1; \
	VPAND  Y14, t1, t1

#define Q6_GROUP(nibbles, bits, p, ql, sh, qh, sc, j, sum, t0, t1) \
	nibbles(p, ql, t0); \
	bits(sh, qh, t1); \
	VPOR       t1, t0, t0; \
	VPMADDUBSW Y5, t0, t0; \
	VPSHUFB    ·q6KSpread+j(SB), sc, t1; \
	VPMADDWD   t1, t0, t0; \
	VPADDD     t0, sum, sum

// Q6_GROUPS runs group g (its activations at y(DI)) for both rows.
#define Q6_GROUPS(nibbles, bits, ql, sh, y, j) \
	VMOVDQU y(DI), Y5; \
	Q6_GROUP(nibbles, bits, SI, ql, sh, Y7, Y9, j, Y11, Y0, Y1); \
	Q6_GROUP(nibbles, bits, R9, ql, sh, Y6, Y8, j, Y10, Y2, Y3)

// Q6_HALF runs the four groups of half h of both rows' blocks: its scales (bytes 192+8h..
// 192+8h+7) as words in both 128-bit halves, its high bits at 128+32h, low bits at 64h
// and 64h+32, activations at 4+128h.
#define Q6_HALF(sc, qh, ql, y) \
	VPBROADCASTQ sc(SI), X9; \
	VPMOVSXBW    X9, Y9; \
	VPBROADCASTQ sc(R9), X8; \
	VPMOVSXBW    X8, Y8; \
	VMOVDQU      qh(SI), Y7; \
	VMOVDQU      qh(R9), Y6; \
	Q6_GROUPS(Q6_LO, Q6_BITS_SHL, ql, 4, y, 0); \
	Q6_GROUPS(Q6_LO, Q6_BITS_SHL, ql+32, 2, y+32, 32); \
	Q6_GROUPS(Q6_HI, Q6_BITS_AS_IS, ql, 0, y+64, 64); \
	Q6_GROUPS(Q6_HI, Q6_BITS_SHR, ql+32, 2, y+96, 96)

// Q6_OFFSET starts a row's integer lanes at -32·Σ scale·bsum (the 16 scales of the block
// at p as words against the 16 bsums), which dotQ6_KAVX2 subtracts at the end: the lanes
// are exact int32 sums, the same in either order.
#define Q6_OFFSET(p, sum, t) \
	VPMOVSXBW 192(p), t; \
	VPMADDWD  260(DI), t, t; \
	VPSLLD    $5, t, t; \
	VPXOR     sum, sum, sum; \
	VPSUBD    t, sum, sum

// Q6_ACCUMULATE adds a row's block to its float lanes: acc += (d_y·d_x)·float(sum), with
// d_y in all lanes of Y5 and d_x the F16 at 208(p).
#define Q6_ACCUMULATE(p, sum, acc, t) \
	MOVWLZX      208(p), AX; \
	VBROADCASTSS (R8)(AX*4), t; \
	VMULPS       Y5, t, t; \
	VCVTDQ2PS    sum, sum; \
	VFMADD231PS  sum, t, acc

// func dotQ6_KRows2AVX2(w, a unsafe.Pointer, nb, pairs, rowBytes, ahead int, out *float32)
TEXT ·dotQ6_KRows2AVX2(SB), NOSPLIT, $0-56
	MOVQ    ahead+40(FP), DX
	MOVQ    w+0(FP), R12
	MOVQ    pairs+24(FP), R10
	MOVQ    rowBytes+32(FP), R13
	MOVQ    out+48(FP), R11
	LEAQ    ·f16Table(SB), R8
	VMOVDQU ·nibbleMask(SB), Y15
	VMOVDQU ·bits45Mask(SB), Y14

pair:
	MOVQ   R12, SI
	LEAQ   (R12)(R13*1), R9
	MOVQ   a+8(FP), DI
	MOVQ   nb+16(FP), CX
	VXORPS Y13, Y13, Y13
	VXORPS Y12, Y12, Y12

block:
	// The lines of the same block ahead bytes on (whole pairs, at least 4 KiB: the
	// hardware prefetcher stops at every page) into L2, as prefetchNext does row by row,
	// and each row's next block into L1 (from DRAM 19 -> 20 GB/s on the build machine).
	PREFETCHT1 (SI)(DX*1)
	PREFETCHT1 64(SI)(DX*1)
	PREFETCHT1 128(SI)(DX*1)
	PREFETCHT1 192(SI)(DX*1)
	PREFETCHT1 (R9)(DX*1)
	PREFETCHT1 64(R9)(DX*1)
	PREFETCHT1 128(R9)(DX*1)
	PREFETCHT1 192(R9)(DX*1)
	PREFETCHT0 210(SI)
	PREFETCHT0 274(SI)
	PREFETCHT0 338(SI)
	PREFETCHT0 402(SI)
	PREFETCHT0 210(R9)
	PREFETCHT0 274(R9)
	PREFETCHT0 338(R9)
	PREFETCHT0 402(R9)

	Q6_OFFSET(SI, Y11, Y0)
	Q6_OFFSET(R9, Y10, Y1)
	Q6_HALF(192, 128, 0, 4)
	Q6_HALF(200, 160, 64, 132)

	VBROADCASTSS (DI), Y5
	Q6_ACCUMULATE(SI, Y11, Y13, Y0)
	Q6_ACCUMULATE(R9, Y10, Y12, Y1)
	ADDQ         $210, SI
	ADDQ         $210, R9
	ADDQ         $292, DI
	DECQ         CX
	JNZ          block

	// Both rows' hsum_float_8 at once: [r0, r1, r0, r1] in X0, whose low half is stored.
	VEXTRACTF128 $1, Y13, X0
	VADDPS       X13, X0, X0
	VEXTRACTF128 $1, Y12, X1
	VADDPS       X12, X1, X1
	CROSS_PAIRS(X0, X1, X2)
	VHADDPS      X0, X0, X0
	VMOVQ        X0, (R11)
	ADDQ         $8, R11
	LEAQ         (R12)(R13*2), R12
	DECQ         R10
	JNZ          pair

	VZEROUPPER
	RET

// dotQ6_KTokens4RowsAVX2: one row against four tokens (R8-R11 their activations, as
// TOKENS4_ROWS_BEGIN sets them up). Each group's 6-bit codes are assembled (Y0) and its
// scales spread (Y1) once for the four; per token the pair sums, the scaled sums and the
// integer lanes (Y8-Y11) are dotQ6_KAVX2's, the lanes started at the offset -32·Σ
// scale·bsum (Y3 the block's scales times -32 as words, at most 32·128 in magnitude) as
// Q6_OFFSET does, and the float steps go into Y12, Y13, Y4 and Y5, then hsum_float_8
// each. Y6 the half's scales (then the block's d), Y7 its high bits, Y2 scratch; R12
// f16Table.

// Q6T_TOKEN adds the group's products with the token's 32 activations at y(a) to sum.
#define Q6T_TOKEN(y, a, sum) \
	VPMADDUBSW y(a), Y0, Y2; \
	VPMADDWD   Y1, Y2, Y2; \
	VPADDD     Y2, sum, sum

// Q6T_TOKENS4 and Q6T_TOKENS2 are Q6T_TOKEN for each token of the kernel.
#define Q6T_TOKENS4(y) \
	Q6T_TOKEN(y, R8, Y8); \
	Q6T_TOKEN(y, R9, Y9); \
	Q6T_TOKEN(y, R10, Y10); \
	Q6T_TOKEN(y, R11, Y11)

#define Q6T_TOKENS2(y) \
	Q6T_TOKEN(y, R8, Y8); \
	Q6T_TOKEN(y, R9, Y9)

#define Q6T_GROUP(nibbles, bits, ql, sh, y, j, tokens) \
	nibbles(SI, ql, Y0); \
	bits(sh, Y7, Y1); \
	VPOR    Y1, Y0, Y0; \
	VPSHUFB ·q6KSpread+j(SB), Y6, Y1; \
	tokens(y)

// Q6T_HALF is Q6_HALF for one row and the kernel's tokens.
#define Q6T_HALF(sc, qh, ql, y, tokens) \
	VPBROADCASTQ sc(SI), X6; \
	VPMOVSXBW    X6, Y6; \
	VMOVDQU      qh(SI), Y7; \
	Q6T_GROUP(Q6_LO, Q6_BITS_SHL, ql, 4, y, 0, tokens); \
	Q6T_GROUP(Q6_LO, Q6_BITS_SHL, ql+32, 2, y+32, 32, tokens); \
	Q6T_GROUP(Q6_HI, Q6_BITS_AS_IS, ql, 0, y+64, 64, tokens); \
	Q6T_GROUP(Q6_HI, Q6_BITS_SHR, ql+32, 2, y+96, 96, tokens)

// Q6T_OFFSETS sets Y3 to the block's scales times -32 as words (Y2 scratch);
// Q6T_START begins a token's integer lanes with its offset.
#define Q6T_OFFSETS \
	VPMOVSXBW 192(SI), Y3; \
	VPSLLW    $5, Y3, Y3; \
	VPXOR     Y2, Y2, Y2; \
	VPSUBW    Y3, Y2, Y3

#define Q6T_START(a, sum) \
	VPMADDWD 260(a), Y3, sum

// Q6T_D leaves the block's d in every lane of Y6.
#define Q6T_D \
	MOVWLZX      208(SI), AX; \
	VBROADCASTSS (R12)(AX*4), Y6

// Q6T_BLOCK runs a block's integer work for the kernel's tokens: their offsets (starts),
// both halves (tokens), and leaves d in Y6.
#define Q6T_BLOCK(starts, tokens) \
	PREFETCH_AHEAD; \
	Q6T_OFFSETS; \
	starts; \
	Q6T_HALF(192, 128, 0, 4, tokens); \
	Q6T_HALF(200, 160, 64, 132, tokens); \
	Q6T_D

#define Q6T_STARTS4 \
	Q6T_START(R8, Y8); \
	Q6T_START(R9, Y9); \
	Q6T_START(R10, Y10); \
	Q6T_START(R11, Y11)

#define Q6T_STARTS2 \
	Q6T_START(R8, Y8); \
	Q6T_START(R9, Y9)

// Q6T_ACCUMULATE takes the token's float step: acc += (d_y·d_x)·float(sum), d_x in Y6.
#define Q6T_ACCUMULATE(a, sum, acc) \
	VBROADCASTSS (a), Y2; \
	VMULPS       Y6, Y2, Y2; \
	VCVTDQ2PS    sum, sum; \
	VFMADD231PS  sum, Y2, acc

// Q6T_SETUP loads the multi-token kernels' constants: f16Table's address (R12), the
// nibble and bits 4-5 masks (Y15, Y14).
#define Q6T_SETUP \
	LEAQ    ·f16Table(SB), R12; \
	VMOVDQU ·nibbleMask(SB), Y15; \
	VMOVDQU ·bits45Mask(SB), Y14

// func dotQ6_KTokens4RowsAVX2(w, a0, a1, a2, a3 unsafe.Pointer, nb, rows, rowBytes int, o0, o1, o2, o3 *float32)
TEXT ·dotQ6_KTokens4RowsAVX2(SB), NOSPLIT, $0-96
	Q6T_SETUP
	TOKENS4_ROWS_BEGIN(q6t4row)
	VXORPS  Y12, Y12, Y12
	VXORPS  Y13, Y13, Y13
	VXORPS  Y4, Y4, Y4
	VXORPS  Y5, Y5, Y5

q6t4block:
	Q6T_BLOCK(Q6T_STARTS4, Q6T_TOKENS4)
	Q6T_ACCUMULATE(R8, Y8, Y12)
	Q6T_ACCUMULATE(R9, Y9, Y13)
	Q6T_ACCUMULATE(R10, Y10, Y4)
	Q6T_ACCUMULATE(R11, Y11, Y5)
	NEXT_BLOCK4(210)
	JNZ  q6t4block

	HSUM_FLOAT_8(Y12, X12, X3)
	HSUM_FLOAT_8(Y13, X13, X3)
	HSUM_FLOAT_8(Y4, X4, X3)
	HSUM_FLOAT_8(Y5, X5, X3)
	LANES4_TO_X0(X12, X13, X4, X5)
	TOKENS4_ROWS_END(q6t4row)
	VZEROUPPER
	RET

// func dotQ6_KTokens2RowsAVX2(w, a0, a1 unsafe.Pointer, nb, rows, rowBytes int, o0, o1 *float32)
//
// dotQ6_KTokens4RowsAVX2 for two tokens (a0 in R8, a1 in R9; BX the row, DX its index).
TEXT ·dotQ6_KTokens2RowsAVX2(SB), NOSPLIT, $0-64
	Q6T_SETUP
	TOKENS2_ROWS_BEGIN(q6t2row)
	VXORPS Y12, Y12, Y12
	VXORPS Y13, Y13, Y13

q6t2block:
	Q6T_BLOCK(Q6T_STARTS2, Q6T_TOKENS2)
	Q6T_ACCUMULATE(R8, Y8, Y12)
	Q6T_ACCUMULATE(R9, Y9, Y13)
	NEXT_BLOCK2(210)
	JNZ  q6t2block

	HSUM_FLOAT_8(Y12, X12, X3)
	HSUM_FLOAT_8(Y13, X13, X3)
	TOKENS2_ROWS_END(q6t2row, X12, X13)
	VZEROUPPER
	RET
