//go:build goexperiment.simd

#include "textflag.h"
#include "simd_amd64.h"

// AVX-512 VNNI kernels of the 32-value formats Q4_0, Q5_0, Q8_0 and MXFP4 against Q8_0
// activations, and of IQ4_XS (whose 32-value sub-blocks unpack as theirs) against Q8_K:
// see simd_legacy_vnni_amd64.go. Go's operand order is Intel's reversed:
// VPDPBUSD Y, W, S is S += W·Y, four unsigned bytes of W times four signed bytes of Y
// per 32-bit lane.
//
// A 512-bit register holds two 8-lane sums side by side, its lower 256 bits one weight row
// (or one token) and its upper 256 bits the other: each half runs the AVX2 kernel's
// integer lanes and its FMA chain, so one 512-bit FMA steps two chains, and the one-token
// kernel runs four rows at once (two registers), which hides the FMA latency that bounds a
// single row. A lone row runs in both halves, the upper half's result unused.
//
// Registers: Z0 Z1 the float sums (two rows or tokens each), Z2 the activation bytes, Z3
// their offset sums, Z4 the shared scale (dy for rows, the weights' d for tokens), Z5-Z7 and
// Z8-Z10 a pair's weights, integer sums and scales, Z11 Z12 scratch, K1 the upper half's
// dwords (merging broadcasts), K2 K3 the weights' signs (Q8_0). Constants: Z27 the FP4
// values, Z28 zero, Z29 the offset bytes, Z30 Z31 the nibble split's. R13 points at
// f16Table, R12 at e8m0Table (the AVX2 kernels' scale tables, so the same floats).

// Nibble splits for a register whose 128-bit lanes are [q, q, q', q'] (a block's 16 packed
// bytes, twice per row): lanes 0 and 2 keep the low nibbles (values 0-15 of the block),
// lanes 1 and 3 take the high ones (16-31), the byte order of the AVX2 kernels. Either by
// words shifted right by 0 or 4 (Z31 = laneShift4) and masked (Z30 = nibbleMask), or by one
// GFNI affine transform per byte (Z31 = nibbleMatrixLanes), one instruction instead of two.
#define SPLIT_SHIFT(r) \
	VPSRLVW Z31, r, r; \
	VPANDD  Z30, r, r

#define SPLIT_GFNI(r) \
	VGF2P8AFFINEQB $0, Z31, r, r

// Per format: W2 unpacks the weight bytes of one block of row wa into the lower half of w
// and of row wb into the upper (Q8_0_W1 of one row into both); INTS leaves in ints the 16 exact
// lane sums of w against the activation bytes y; CY is what INTS needs per activation
// vector; WD and WD_HI broadcast the weights' block scale (as float) to all or to the upper
// lanes of a register, from the block at r.
//
// Q4_0 and MXFP4 weights are unsigned (the nibble, or the FP4 value doubled plus 12), so
// INTS is VPDPBUSD less the offset times Σy (Z3, from Z29's bytes): Σ(q-8)·y, as the AVX2
// kernels' VPMADDUBSW differences give it. Q8_0 moves the weights' signs onto the
// activations as AVX2's VPSIGNB does: |w|·(±y), with y negated where w < 0 (-(-128) stays
// -128 in both) and left where w = 0 (times |w| = 0 either way), so the integers agree for
// every byte.
#define Q4_0_W2(split, wa, wb, w, ks) \
	VBROADCASTI32X4 2(wa), w; \
	VBROADCASTI32X4 2(wb), K1, w; \
	split(w)

// Q5_0 adds each value's fifth bit (qh, bit i for value i) as 16 to its nibble: the two
// rows' qh words make a 64-bit byte mask in ks, one bit per byte of w.
#define Q5_0_W2(split, wa, wb, w, ks) \
	VBROADCASTI32X4 6(wa), w; \
	VBROADCASTI32X4 6(wb), K1, w; \
	split(w); \
	KMOVD           2(wa), K4; \
	KMOVD           2(wb), K5; \
	KUNPCKDQ        K4, K5, ks; \
	VPADDB          Z29, w, ks, w

#define MXFP4_W2(split, wa, wb, w, ks) \
	VBROADCASTI32X4 1(wa), w; \
	VBROADCASTI32X4 1(wb), K1, w; \
	split(w); \
	VPSHUFB w, Z27, w

#define Q8_0_W2(split, wa, wb, w, ks) \
	VBROADCASTI64X4 2(wa), w; \
	VINSERTI64X4    $1, 2(wb), w, w; \
	VPMOVB2M        w, ks; \
	VPABSB          w, w

#define Q8_0_W1(wa, w, ks) \
	VBROADCASTI64X4 2(wa), w; \
	VPMOVB2M        w, ks; \
	VPABSB          w, w

#define OFFSET_CY(y, cy) \
	VPXORD   cy, cy, cy; \
	VPDPBUSD y, Z29, cy

#define OFFSET_INTS(w, y, cy, ks, tmp, ints) \
	VPXORD   ints, ints, ints; \
	VPDPBUSD y, w, ints; \
	VPSUBD   cy, ints, ints

#define SIGNED_CY(y, cy)

#define SIGNED_INTS(w, y, cy, ks, tmp, ints) \
	VMOVDQA64 y, tmp; \
	VPSUBB    y, Z28, ks, tmp; \
	VPXORD    ints, ints, ints; \
	VPDPBUSD  tmp, w, ints

#define F16_D(r, d) \
	MOVWLZX      (r), AX; \
	VBROADCASTSS (R13)(AX*4), d

#define F16_D_HI(r, d) \
	MOVWLZX      (r), AX; \
	VBROADCASTSS (R13)(AX*4), K1, d

#define E8M0_D(r, d) \
	MOVBLZX      (r), AX; \
	VBROADCASTSS (R12)(AX*4), d

#define E8M0_D_HI(r, d) \
	MOVBLZX      (r), AX; \
	VBROADCASTSS (R12)(AX*4), K1, d

// ACCUMULATE converts a pair's integer sums and FMAs them with their scales into acc:
// each half the AVX2 kernel's acc = d·float(p) + acc.
#define ACCUMULATE(ints, sc, acc) \
	VCVTDQ2PS   ints, ints; \
	VFMADD231PS ints, sc, acc

// LEGACY_SETUP loads the masks, tables and zero every kernel uses.
#define LEGACY_SETUP \
	MOVL   $0xFF00, AX; \
	KMOVW  AX, K1; \
	VPXORD Z28, Z28, Z28; \
	LEAQ   ·f16Table(SB), R13; \
	LEAQ   ·e8m0Table(SB), R12

// REDUCE_PAIR leaves in lanes 0 and 2 of acc's X the two halves' eight lanes added as
// sumLanes does (lower 128 bits plus upper), and in accX lanes 0-3 the first half's lanes
// 0+2 and 1+3 beside the second's (CROSS_PAIRS, X15 scratch): [a02, a13, b02, b13].
#define REDUCE_PAIR(acc, accX, tmp, tmpX) \
	VSHUFF32X4    $0xB1, acc, acc, tmp; \
	VADDPS        tmp, acc, acc; \
	VEXTRACTF32X4 $2, acc, tmpX; \
	CROSS_PAIRS(accX, tmpX, X15)

// PREFETCH_NEXT4 (NEXT2) asks (into L2) for the line of each row's current block four
// (two) rows on, the same place in the next group of rows (R9 = rowBytes): a tile's rows
// follow each other in memory, so this streams the lines a group ahead, as prefetchNext
// does row by row for the AVX2 kernels (hardware prefetching stops at every 4 KiB page).
// Past the last rows it asks for bytes that may not be ours, which a prefetch may: it
// never faults.
#define PREFETCH_NEXT4 \
	PREFETCHT1 (SI)(R9*4); \
	PREFETCHT1 (BX)(R9*4); \
	PREFETCHT1 (DX)(R9*4); \
	PREFETCHT1 (R14)(R9*4)

#define PREFETCH_NEXT2 \
	PREFETCHT1 (SI)(R9*2); \
	PREFETCHT1 (BX)(R9*2)

// ACTIVATIONS loads a block of the one vector of the one-token kernel: its bytes to both
// halves of Z2, what INTS needs of them to Z3 (CY), its d to Z4.
#define ACTIVATIONS(CY) \
	VBROADCASTI64X4 2(DI), Z2; \
	CY(Z2, Z3); \
	F16_D(DI, Z4)

// ROW_PAIR is one block of rows wa (lower half) and wb (upper half) against the block in
// Z2-Z4: scales [d_a·dy ×8, d_b·dy ×8], the AVX2 kernels' d_w·d_y.
#define ROW_PAIR(W2, INTS, WD, WD_HI, split, wa, wb, w, ints, sc, ks, tmp, acc) \
	W2(split, wa, wb, w, ks); \
	INTS(w, Z2, Z3, ks, tmp, ints); \
	WD(wa, sc); \
	WD_HI(wb, sc); \
	VMULPS Z4, sc, sc; \
	ACCUMULATE(ints, sc, acc)

// LEGACY_ROWS is the one-token kernel over rows: groups of four rows (SI BX DX R14) step
// through their blocks together, two in Z0 and two in Z1, and store their four sums at
// once; one or two rows left over run as one pair (a lone row in both halves). R8 is the
// next group's first row, R9 rowBytes, R10 the rows left, R11 the next output.
#define LEGACY_ROWS(W2, INTS, CY, WD, WD_HI, split, bs) \
	LEGACY_SETUP; \
	MOVQ w+0(FP), R8; \
	MOVQ rows+24(FP), R10; \
	MOVQ rowBytes+32(FP), R9; \
	MOVQ out+40(FP), R11; \
group4: \
	CMPQ R10, $4; \
	JLT  tail; \
	MOVQ R8, SI; \
	LEAQ (SI)(R9*1), BX; \
	LEAQ (BX)(R9*1), DX; \
	LEAQ (DX)(R9*1), R14; \
	LEAQ (R14)(R9*1), R8; \
	MOVQ   a+8(FP), DI; \
	MOVQ   nb+16(FP), CX; \
	VPXORD Z0, Z0, Z0; \
	VPXORD Z1, Z1, Z1; \
step4: \
	PREFETCH_NEXT4; \
	ACTIVATIONS(CY); \
	ROW_PAIR(W2, INTS, WD, WD_HI, split, SI, BX, Z5, Z6, Z7, K2, Z11, Z0); \
	ROW_PAIR(W2, INTS, WD, WD_HI, split, DX, R14, Z8, Z9, Z10, K3, Z12, Z1); \
	ADDQ $bs, SI; \
	ADDQ $bs, BX; \
	ADDQ $bs, DX; \
	ADDQ $bs, R14; \
	ADDQ $34, DI; \
	DECQ CX; \
	JNZ  step4; \
	REDUCE_PAIR(Z0, X0, Z13, X13); \
	REDUCE_PAIR(Z1, X1, Z14, X14); \
	VHADDPS X1, X0, X0; \
	VMOVUPS X0, (R11); \
	ADDQ    $16, R11; \
	SUBQ    $4, R10; \
	JMP     group4; \
tail: \
	TESTQ R10, R10; \
	JZ    done; \
	MOVQ  R8, SI; \
	MOVQ  SI, BX; \
	CMPQ  R10, $1; \
	JEQ   lone; \
	ADDQ  R9, BX; \
lone: \
	LEAQ (BX)(R9*1), R8; \
	MOVQ   a+8(FP), DI; \
	MOVQ   nb+16(FP), CX; \
	VPXORD Z0, Z0, Z0; \
step2: \
	PREFETCH_NEXT2; \
	ACTIVATIONS(CY); \
	ROW_PAIR(W2, INTS, WD, WD_HI, split, SI, BX, Z5, Z6, Z7, K2, Z11, Z0); \
	ADDQ $bs, SI; \
	ADDQ $bs, BX; \
	ADDQ $34, DI; \
	DECQ CX; \
	JNZ  step2; \
	REDUCE_PAIR(Z0, X0, Z13, X13); \
	VHADDPS X0, X0, X0; \
	VMOVSS  X0, (R11); \
	CMPQ    R10, $1; \
	JEQ     done; \
	VEXTRACTPS $1, X0, 4(R11); \
	ADDQ    $8, R11; \
	SUBQ    $2, R10; \
	JMP     tail; \
done: \
	CLEAR_HIGH; \
	RET

#define Q4_0_CONSTANTS VBROADCASTI64X4 ·eights(SB), Z29
#define Q5_0_CONSTANTS VBROADCASTI64X4 ·sixteens(SB), Z29
#define MXFP4_CONSTANTS \
	VBROADCASTI64X4 ·twelves(SB), Z29; \
	VBROADCASTI32X4 ·fp4Shifted(SB), Z27
#define SHIFT_CONSTANTS \
	VMOVDQU64       ·laneShift4(SB), Z31; \
	VBROADCASTI64X4 ·nibbleMask(SB), Z30
#define GFNI_CONSTANTS VMOVDQU64 ·nibbleMatrixLanes(SB), Z31

// func dotQ4_0RowsVNNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)
TEXT ·dotQ4_0RowsVNNI(SB), NOSPLIT, $0-48
	Q4_0_CONSTANTS
	SHIFT_CONSTANTS
	LEGACY_ROWS(Q4_0_W2, OFFSET_INTS, OFFSET_CY, F16_D, F16_D_HI, SPLIT_SHIFT, 18)

// func dotQ4_0RowsGFNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)
TEXT ·dotQ4_0RowsGFNI(SB), NOSPLIT, $0-48
	Q4_0_CONSTANTS
	GFNI_CONSTANTS
	LEGACY_ROWS(Q4_0_W2, OFFSET_INTS, OFFSET_CY, F16_D, F16_D_HI, SPLIT_GFNI, 18)

// func dotQ5_0RowsVNNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)
TEXT ·dotQ5_0RowsVNNI(SB), NOSPLIT, $0-48
	Q5_0_CONSTANTS
	SHIFT_CONSTANTS
	LEGACY_ROWS(Q5_0_W2, OFFSET_INTS, OFFSET_CY, F16_D, F16_D_HI, SPLIT_SHIFT, 22)

// func dotQ5_0RowsGFNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)
TEXT ·dotQ5_0RowsGFNI(SB), NOSPLIT, $0-48
	Q5_0_CONSTANTS
	GFNI_CONSTANTS
	LEGACY_ROWS(Q5_0_W2, OFFSET_INTS, OFFSET_CY, F16_D, F16_D_HI, SPLIT_GFNI, 22)

// func dotMXFP4RowsVNNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)
TEXT ·dotMXFP4RowsVNNI(SB), NOSPLIT, $0-48
	MXFP4_CONSTANTS
	SHIFT_CONSTANTS
	LEGACY_ROWS(MXFP4_W2, OFFSET_INTS, OFFSET_CY, E8M0_D, E8M0_D_HI, SPLIT_SHIFT, 17)

// func dotMXFP4RowsGFNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)
TEXT ·dotMXFP4RowsGFNI(SB), NOSPLIT, $0-48
	MXFP4_CONSTANTS
	GFNI_CONSTANTS
	LEGACY_ROWS(MXFP4_W2, OFFSET_INTS, OFFSET_CY, E8M0_D, E8M0_D_HI, SPLIT_GFNI, 17)

// func dotQ8_0RowsVNNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)
TEXT ·dotQ8_0RowsVNNI(SB), NOSPLIT, $0-48
	LEGACY_ROWS(Q8_0_W2, SIGNED_INTS, SIGNED_CY, F16_D, F16_D_HI, SPLIT_SHIFT, 34)

// TOKEN_PAIR is one Q8_0 block of the weights in Z5 (K2 their signs, Z4 their d) against
// the activation vectors ya (lower half) and yb (upper half): scales [d·dy_a ×8, d·dy_b ×8].
#define TOKEN_PAIR(ya, yb, ints, sc, tmp, acc) \
	VMOVDQU      2(ya), Y2; \
	VINSERTI64X4 $1, 2(yb), Z2, Z2; \
	SIGNED_INTS(Z5, Z2, Z3, K2, tmp, ints); \
	F16_D(ya, sc); \
	F16_D_HI(yb, sc); \
	VMULPS Z4, sc, sc; \
	ACCUMULATE(ints, sc, acc)

// func dotQ8_0Tokens4RowsVNNI(w, a0, a1, a2, a3 unsafe.Pointer, nb, rows, rowBytes int, o0, o1, o2, o3 *float32)
//
// The four-token Q8_0 kernel (prefill): rows weight rows (rowBytes apart) against four
// activation vectors, ok[r] the product of row r with vector k. Per row, tokens 0-1 in Z0
// and 2-3 in Z1, each block's weight magnitudes and signs taken once for all four. Each
// token's half runs the one-token kernel's operations, so its bits. Looping over the rows
// here (TOKENS4_ROWS_BEGIN) spares a small model's short rows a call each (a row of 256
// values took 39 ns a call, 29 of them in blocks). (For Q4_0 and MXFP4 the rows kernel is
// as fast a way to run a prefill tile: their four-token kernels, also over rows, spend the
// weights' unpacking once per four tokens but pay each token's offset sum per row. 16
// cache-hot 4096-value rows against four vectors, medians of 6: Q4_0 6.9 against 6.9 µs
// token by token through the rows kernel, MXFP4 7.8 against 7.5, Q8_0 7.4 against 9.3;
// gpt-oss-20b-shaped prefill and tiny-qwen3moe's showed no gain either, so only Q8_0 has one.)
TEXT ·dotQ8_0Tokens4RowsVNNI(SB), NOSPLIT, $0-96
	LEGACY_SETUP
	TOKENS4_ROWS_BEGIN(row)
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1

step:
	Q8_0_W1(SI, Z5, K2)
	F16_D(SI, Z4)
	TOKEN_PAIR(R8, R9, Z6, Z7, Z11, Z0)
	TOKEN_PAIR(R10, R11, Z9, Z10, Z12, Z1)
	ADDQ $34, SI
	ADDQ $34, R8
	ADDQ $34, R9
	ADDQ $34, R10
	ADDQ $34, R11
	DECQ CX
	JNZ  step

	REDUCE_PAIR(Z0, X0, Z13, X13)
	REDUCE_PAIR(Z1, X1, Z14, X14)
	VHADDPS X1, X0, X0
	TOKENS4_ROWS_END(row)
	CLEAR_HIGH
	RET

// IQ4_XS (256-value blocks: F16 d, the eight sub-blocks' 6-bit scales, 128 bytes of 4-bit
// indices into the IQ4 levels) against Q8_K, one row at a time as the Q4_K kernel, two
// 32-value sub-blocks a step: lanes [q, q, q', q'] of the sub-blocks' 16 index bytes each,
// split as the 32-value formats' (values 0-15 and 16-31 of sub-block 2c below, of 2c+1
// above). dotIQ4_XSAVX2 multiplies the signed levels by the signed activations as
// VPMADDUBSW(|v|, sign(y, v)); here |v| comes from a table of the levels' magnitudes
// (Z29) and the sign from the index (levels 0-7 are the negative ones, VPTESTNMB with
// Z27 = 8), which negates y under the mask (Z28 = 0): the same pairs, so the same integer
// lanes, then the same scale words (Z10, picked per step by Z20-Z23), float step and
// reduction. PDEP spreads the scales' bits: the low four of sub-block i from scales_l's
// nibble i (R8 = 0x0F per byte), the top two from scales_h's bits 2i and 2i+1 (R9 = 0x30).
//
// IQ4XS_UNPACK leaves a step's level magnitudes in Z13, their signs in K2 and their scale
// words in Z12; IQ4XS_DOT adds their products with the 64 activation bytes at aoff(areg)
// to ints (the four-token kernel runs it per token on one unpacking).
#define IQ4XS_UNPACK(split, woff, idx) \
	VBROADCASTI32X4 woff(SI), Z13; \
	VBROADCASTI32X4 woff+16(SI), K1, Z13; \
	split(Z13); \
	VPTESTNMB       Z27, Z13, K2; \
	VPSHUFB         Z13, Z29, Z13; \
	VPSHUFB         idx, Z10, Z12

#define IQ4XS_DOT(aoff, areg, ints) \
	VMOVDQU8   aoff(areg), Z14; \
	VPSUBB     Z14, Z28, K2, Z14; \
	VPMADDUBSW Z14, Z13, Z15; \
	VPDPWSSD   Z12, Z15, ints

// IQ4XS_SCALES puts the block's eight scales as words (less 32) in every lane of Z10, by
// PDEP with the masks in masklo and maskhi; t1 and t2 are scratch.
#define IQ4XS_SCALES(masklo, maskhi, t1, t2) \
	MOVL         4(SI), t1; \
	PDEPQ        masklo, t1, t1; \
	MOVWLZX      2(SI), t2; \
	PDEPQ        maskhi, t2, t2; \
	ORQ          t2, t1; \
	VMOVQ        t1, X10; \
	VPSUBB       X26, X10, X10; \
	VPMOVSXBW    X10, X10; \
	VSHUFI32X4   $0, Z10, Z10, Z10

// IQ4XS_END folds a token's integer lanes to eight and accumulates them with d·yd (d, as
// float32, in X9): dotIQ4_XSAVX2's float step.
#define IQ4XS_END(ints, intsY, areg, acc) \
	VEXTRACTI64X4 $1, ints, Y15; \
	VPADDD        Y15, intsY, Y15; \
	VCVTDQ2PS     Y15, Y15; \
	VMULSS        (areg), X9, X14; \
	VBROADCASTSS  X14, Y14; \
	VFMADD231PS   Y15, Y14, acc

#define IQ4XS_D \
	VPBROADCASTW (SI), X9; \
	VCVTPH2PS    X9, X9

#define IQ4XS_PREFETCH \
	PREFETCHT1 4096(SI); \
	PREFETCHT1 4160(SI); \
	PREFETCHT1 4224(SI)

#define IQ4XS_CONSTANTS \
	MOVL            $0xFF00, AX; \
	KMOVW           AX, K1; \
	MOVL            $8, AX; \
	VPBROADCASTB    AX, Z27; \
	MOVL            $32, AX; \
	VPBROADCASTB    AX, Z26; \
	VPXORD          Z28, Z28, Z28; \
	VBROADCASTI32X4 ·iq4AbsLevels(SB), Z29; \
	VMOVDQU64       ·iq4XSScaleWords+0(SB), Z20; \
	VMOVDQU64       ·iq4XSScaleWords+64(SB), Z21; \
	VMOVDQU64       ·iq4XSScaleWords+128(SB), Z22; \
	VMOVDQU64       ·iq4XSScaleWords+192(SB), Z23

#define IQ4XS_ROWS(split) \
	IQ4XS_CONSTANTS; \
	MOVQ            $0x0F0F0F0F0F0F0F0F, R8; \
	MOVQ            $0x3030303030303030, R9; \
	ROWS_BEGIN(iq4xsrow); \
	VXORPS          X0, X0, X0; \
iq4xsblock: \
	IQ4XS_PREFETCH; \
	IQ4XS_SCALES(R8, R9, AX, BX); \
	IQ4XS_D; \
	VPXORD          Z16, Z16, Z16; \
	IQ4XS_UNPACK(split, 8, Z20); \
	IQ4XS_DOT(4, DI, Z16); \
	IQ4XS_UNPACK(split, 40, Z21); \
	IQ4XS_DOT(68, DI, Z16); \
	IQ4XS_UNPACK(split, 72, Z22); \
	IQ4XS_DOT(132, DI, Z16); \
	IQ4XS_UNPACK(split, 104, Z23); \
	IQ4XS_DOT(196, DI, Z16); \
	IQ4XS_END(Z16, Y16, DI, Y0); \
	ADDQ            $136, SI; \
	ADDQ            $292, DI; \
	DECQ            CX; \
	JNZ             iq4xsblock; \
	VEXTRACTF128    $1, Y0, X1; \
	VADDPS          X1, X0, X0; \
	CROSS_PAIRS(X0, X0, X1); \
	VHADDPS         X0, X0, X0; \
	ROWS_END(iq4xsrow)

// func dotIQ4_XSRowsVNNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)
TEXT ·dotIQ4_XSRowsVNNI(SB), NOSPLIT, $0-48
	SHIFT_CONSTANTS
	IQ4XS_ROWS(SPLIT_SHIFT)

// func dotIQ4_XSRowsGFNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)
TEXT ·dotIQ4_XSRowsGFNI(SB), NOSPLIT, $0-48
	GFNI_CONSTANTS
	IQ4XS_ROWS(SPLIT_GFNI)

// IQ4XS_STEP4 is a step's unpacking against the four tokens' activations at aoff.
#define IQ4XS_STEP4(split, woff, aoff, idx) \
	IQ4XS_UNPACK(split, woff, idx); \
	IQ4XS_DOT(aoff, R8, Z16); \
	IQ4XS_DOT(aoff, R9, Z17); \
	IQ4XS_DOT(aoff, R10, Z18); \
	IQ4XS_DOT(aoff, R11, Z19)

// IQ4XS_TOKENS4_ROWS is the one-token kernel for four activation vectors (prefill): each
// block's scales and each step's levels unpacked once for all four, each token's
// operations the one-token kernel's (so its bits). R8-R11 hold the activations here, so
// the PDEP masks live in R12 and R13.
#define IQ4XS_TOKENS4_ROWS(split) \
	IQ4XS_CONSTANTS; \
	MOVQ $0x0F0F0F0F0F0F0F0F, R12; \
	MOVQ $0x3030303030303030, R13; \
	TOKENS4_ROWS_BEGIN(iq4xs4row); \
	ZERO_ACCS4; \
iq4xs4block: \
	IQ4XS_PREFETCH; \
	IQ4XS_SCALES(R12, R13, AX, R14); \
	IQ4XS_D; \
	ZERO_INTS4; \
	IQ4XS_STEP4(split, 8, 4, Z20); \
	IQ4XS_STEP4(split, 40, 68, Z21); \
	IQ4XS_STEP4(split, 72, 132, Z22); \
	IQ4XS_STEP4(split, 104, 196, Z23); \
	IQ4XS_END(Z16, Y16, R8, Y0); \
	IQ4XS_END(Z17, Y17, R9, Y1); \
	IQ4XS_END(Z18, Y18, R10, Y4); \
	IQ4XS_END(Z19, Y19, R11, Y5); \
	NEXT_BLOCK4(136); \
	JNZ iq4xs4block; \
	SUM4_LANES8; \
	TOKENS4_ROWS_END(iq4xs4row); \
	CLEAR_HIGH; \
	RET

// func dotIQ4_XSTokens4RowsVNNI(w, a0, a1, a2, a3 unsafe.Pointer, nb, rows, rowBytes int, o0, o1, o2, o3 *float32)
TEXT ·dotIQ4_XSTokens4RowsVNNI(SB), NOSPLIT, $0-96
	SHIFT_CONSTANTS
	IQ4XS_TOKENS4_ROWS(SPLIT_SHIFT)

// func dotIQ4_XSTokens4RowsGFNI(w, a0, a1, a2, a3 unsafe.Pointer, nb, rows, rowBytes int, o0, o1, o2, o3 *float32)
TEXT ·dotIQ4_XSTokens4RowsGFNI(SB), NOSPLIT, $0-96
	GFNI_CONSTANTS
	IQ4XS_TOKENS4_ROWS(SPLIT_GFNI)

// Q8_0_ROW4 is one block of row r (signed weight bytes in both halves of Z12) against the
// four tokens' blocks prepared in Z8 Z9 (their bytes plus 128, as unsigned: two tokens a
// register) and Z10 Z11 (their d, eight lanes a token): VPDPBUSD of the weights by
// y+128 less 128·Σw (Z13, from VPDPBUSD by the constant 128 bytes in Z19) is Σ w·y for each
// lane, the integers the four-token kernel gets with the signs moved onto y (for every
// activation byte but -128, whose negation stays -128 there; quantizeQ8_0 never writes
// it), and the float step is its d_w·d_y and FMA, so each (row, token) keeps its bits.
#define Q8_0_ROW4(r, acc01, acc23) \
	VBROADCASTI64X4 2(r), Z12; \
	VPXORD          Z13, Z13, Z13; \
	VPDPBUSD        Z12, Z19, Z13; \
	VPSUBD          Z13, Z28, Z13; \
	F16_D(r, Z14); \
	VMOVDQA64       Z13, Z15; \
	VPDPBUSD        Z12, Z8, Z15; \
	VMULPS          Z14, Z10, Z17; \
	VCVTDQ2PS       Z15, Z15; \
	VFMADD231PS     Z15, Z17, acc01; \
	VMOVDQA64       Z13, Z16; \
	VPDPBUSD        Z12, Z9, Z16; \
	VMULPS          Z14, Z11, Z18; \
	VCVTDQ2PS       Z16, Z16; \
	VFMADD231PS     Z16, Z18, acc23

// Q8_0_TOKENS2 loads the blocks of tokens a and b into y (bytes plus 128) and dy.
#define Q8_0_TOKENS2(a, b, y, yY, dy) \
	VMOVDQU      2(a), yY; \
	VINSERTI64X4 $1, 2(b), y, y; \
	VPXORD       Z19, y, y; \
	F16_D(a, dy); \
	F16_D_HI(b, dy)

// Q8_0_SUMS4 reduces a row's two registers of float lanes (tokens 0-1, 2-3) to its four
// sums in x, in the four-token kernel's order.
#define Q8_0_SUMS4(acc01, x01, acc23, x23) \
	REDUCE_PAIR(acc01, x01, Z13, X13); \
	REDUCE_PAIR(acc23, x23, Z14, X14); \
	VHADDPS x23, x01, x01

// func dotQ8_0Tokens4Rows4VNNI(w, a0, a1, a2, a3 unsafe.Pointer, nb, rows, rowBytes int, o0, o1, o2, o3 *float32)
//
// dotQ8_0Tokens4RowsVNNI four rows at a time (rows a multiple of 4): each block's four
// activation vectors are loaded and converted once for the four rows, and the weights'
// signs need no per-token step (see Q8_0_ROW4). The four rows' sums are transposed to
// four tokens' and stored together.
TEXT ·dotQ8_0Tokens4Rows4VNNI(SB), NOSPLIT, $0-96
	LEGACY_SETUP
	MOVL         $0x80, AX
	VPBROADCASTB AX, Z19
	MOVQ         w+0(FP), R15
	MOVQ         rowBytes+56(FP), R14
	XORQ         DI, DI

q8rows4:
	MOVQ   R15, SI
	LEAQ   (SI)(R14*1), BX
	LEAQ   (BX)(R14*1), DX
	LEAQ   (DX)(R14*1), R12
	LEAQ   (R12)(R14*1), R15
	MOVQ   a0+8(FP), R8
	MOVQ   a1+16(FP), R9
	MOVQ   a2+24(FP), R10
	MOVQ   a3+32(FP), R11
	MOVQ   nb+40(FP), CX
	ZERO_Z0_7

q8rows4block:
	Q8_0_TOKENS2(R8, R9, Z8, Y8, Z10)
	Q8_0_TOKENS2(R10, R11, Z9, Y9, Z11)
	Q8_0_ROW4(SI, Z0, Z1)
	Q8_0_ROW4(BX, Z2, Z3)
	Q8_0_ROW4(DX, Z4, Z5)
	Q8_0_ROW4(R12, Z6, Z7)
	ADDQ $34, SI
	ADDQ $34, BX
	ADDQ $34, DX
	ADDQ $34, R12
	ADDQ $34, R8
	ADDQ $34, R9
	ADDQ $34, R10
	ADDQ $34, R11
	DECQ CX
	JNZ  q8rows4block

	Q8_0_SUMS4(Z0, X0, Z1, X1)
	Q8_0_SUMS4(Z2, X2, Z3, X3)
	Q8_0_SUMS4(Z4, X4, Z5, X5)
	Q8_0_SUMS4(Z6, X6, Z7, X7)
	VUNPCKLPS X2, X0, X8
	VUNPCKHPS X2, X0, X9
	VUNPCKLPS X6, X4, X10
	VUNPCKHPS X6, X4, X11
	VMOVLHPS  X10, X8, X0
	VMOVHLPS  X8, X10, X1
	VMOVLHPS  X11, X9, X2
	VMOVHLPS  X9, X11, X3
	MOVQ      o0+64(FP), AX
	VMOVUPS   X0, (AX)(DI*1)
	MOVQ      o1+72(FP), AX
	VMOVUPS   X1, (AX)(DI*1)
	MOVQ      o2+80(FP), AX
	VMOVUPS   X2, (AX)(DI*1)
	MOVQ      o3+88(FP), AX
	VMOVUPS   X3, (AX)(DI*1)
	ADDQ      $16, DI
	SUBQ      $4, rows+48(FP)
	JNZ       q8rows4
	CLEAR_HIGH
	RET
