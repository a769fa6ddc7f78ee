// Macros shared by the amd64 assembly kernels (simd_f16c_amd64.s, simd_vnni_amd64.s, simd_repacked_q4k_amd64.s,
// simd_legacy_vnni_amd64.s, simd_lowk_vnni_amd64.s and the lattice formats' simd_iq*_amd64.s).

// CLEAR_HIGH ends a kernel that used 256- or 512-bit registers: VZEROUPPER clears the
// upper halves of Y0-Y15/Z0-Z15, and Z16-Z31, which it leaves alone, are zeroed whole, so
// that Go's legacy-SSE scalar float code pays no state transitions (see simd_amd64.go).
#define CLEAR_HIGH \
	VZEROUPPER; \
	VPXORD X16, X16, X16; \
	VPXORD X17, X17, X17; \
	VPXORD X18, X18, X18; \
	VPXORD X19, X19, X19; \
	VPXORD X20, X20, X20; \
	VPXORD X21, X21, X21; \
	VPXORD X22, X22, X22; \
	VPXORD X23, X23, X23; \
	VPXORD X24, X24, X24; \
	VPXORD X25, X25, X25; \
	VPXORD X26, X26, X26; \
	VPXORD X27, X27, X27; \
	VPXORD X28, X28, X28; \
	VPXORD X29, X29, X29; \
	VPXORD X30, X30, X30; \
	VPXORD X31, X31, X31

// TOKENS4_ARGS loads the four-token kernels' arguments: the weights in SI, the four
// activation vectors in R8-R11, the block count in CX, the output in DI.
#define TOKENS4_ARGS \
	MOVQ w+0(FP), SI; \
	MOVQ a0+8(FP), R8; \
	MOVQ a1+16(FP), R9; \
	MOVQ a2+24(FP), R10; \
	MOVQ a3+32(FP), R11; \
	MOVQ nb+40(FP), CX; \
	MOVQ out+48(FP), DI

// TOKENS4_ROWS_BEGIN and TOKENS4_ROWS_END run a four-token kernel's body over consecutive
// rows, for kernels declared (w, a0, a1, a2, a3 unsafe.Pointer, nb, rows, rowBytes int,
// o0, o1, o2, o3 *float32): BX walks the rows and DX counts them; for each row the body
// gets the row in SI, the four activation vectors in R8-R11 and the block count in CX, and
// leaves the row's four sums in X0 (vector k in lane k), which END stores to ok[row].
// Looping here spares a prefill tile a call per row and four tokens. TOKENS_ROWS_START is
// the part both four- and two-token kernels share: BX and DX set, the row's label, SI.
#define TOKENS_ROWS_START(label) \
	MOVQ w+0(FP), BX; \
	XORQ DX, DX; \
label: \
	MOVQ BX, SI

#define TOKENS4_ROWS_BEGIN(label) \
	TOKENS_ROWS_START(label); \
	MOVQ a0+8(FP), R8; \
	MOVQ a1+16(FP), R9; \
	MOVQ a2+24(FP), R10; \
	MOVQ a3+32(FP), R11; \
	MOVQ nb+40(FP), CX

#define TOKENS4_ROWS_END(label) \
	STORE_LANES4(DI, o0+64(FP), o1+72(FP), o2+80(FP), o3+88(FP)); \
	ADDQ       rowBytes+56(FP), BX; \
	INCQ       DX; \
	CMPQ       DX, rows+48(FP); \
	JLT        label

// TOKENS2_ROWS_BEGIN and TOKENS2_ROWS_END are TOKENS4_ROWS_BEGIN and TOKENS4_ROWS_END for
// two-token kernels declared (w, a0, a1 unsafe.Pointer, nb, rows, rowBytes int, o0, o1
// *float32): the body gets the row in SI, the two activation vectors in R8 and R9 and the
// block count in CX, and leaves the row's two sums in lane 0 of xa and xb.
#define TOKENS2_ROWS_BEGIN(label) \
	TOKENS_ROWS_START(label); \
	MOVQ a0+8(FP), R8; \
	MOVQ a1+16(FP), R9; \
	MOVQ nb+24(FP), CX

#define TOKENS2_ROWS_END(label, xa, xb) \
	MOVQ   o0+48(FP), DI; \
	VMOVSS xa, (DI)(DX*4); \
	MOVQ   o1+56(FP), DI; \
	VMOVSS xb, (DI)(DX*4); \
	ADDQ   rowBytes+40(FP), BX; \
	INCQ   DX; \
	CMPQ   DX, rows+32(FP); \
	JLT    label

// NEXT_BLOCK2 is NEXT_BLOCK4 for a two-token kernel.
#define NEXT_BLOCK2(bytes) \
	ADDQ $bytes, SI; \
	ADDQ $292, R8; \
	ADDQ $292, R9; \
	DECQ CX

// STORE_LANES4 stores lane k of X0 to element DX of the float32 array whose pointer is at
// ok (an argument), by way of reg.
#define STORE_LANES4(reg, o0, o1, o2, o3) \
	MOVQ       o0, reg; \
	VMOVSS     X0, (reg)(DX*4); \
	MOVQ       o1, reg; \
	VEXTRACTPS $1, X0, (reg)(DX*4); \
	MOVQ       o2, reg; \
	VEXTRACTPS $2, X0, (reg)(DX*4); \
	MOVQ       o3, reg; \
	VEXTRACTPS $3, X0, (reg)(DX*4)

// ROWS_BEGIN and ROWS_END run a one-token kernel over consecutive rows: SI walks the rows
// (each rowBytes long, nb blocks), DI restarts at the activation vector for every row, and
// each row's sum, left in X0 by the body, is stored to out[r]. Constants stay loaded and
// the upper registers are cleared once, after the last row.
#define ROWS_BEGIN(label) \
	MOVQ w+0(FP), SI; \
	MOVQ rows+24(FP), R10; \
	MOVQ out+40(FP), R11; \
label: \
	MOVQ SI, R12; \
	MOVQ a+8(FP), DI; \
	MOVQ nb+16(FP), CX

#define ROWS_END(label) \
	ROWS_NEXT(label); \
	CLEAR_HIGH; \
	RET

// ROWS_NEXT is ROWS_END without the ending, for kernels that end otherwise (VEX-only ones
// with VZEROUPPER) or do more after their last row.
#define ROWS_NEXT(label) \
	VMOVSS X0, (R11); \
	ADDQ   $4, R11; \
	MOVQ   R12, SI; \
	ADDQ   rowBytes+32(FP), SI; \
	DECQ   R10; \
	JNZ    label

// CROSS_PAIRS sets a to [a0+a2, a1+a3, b0+b2, b1+b3] (t scratch): the middle step of
// ggml's hsum_float_8 for two sums of four lanes, whose pairs VHADDPS then adds
// (crossPairs in the Go kernels).
#define CROSS_PAIRS(a, b, t) \
	VSHUFPS $0xEE, b, a, t; \
	VSHUFPS $0x44, b, a, a; \
	VADDPS  t, a, a

// HSUM_FLOAT_8 reduces the eight lanes of yr to lane 0 of xr (yr's low half) in ggml's
// hsum_float_8 order, (l0+l4 + l2+l6) + (l1+l5 + l3+l7); xt is scratch.
#define HSUM_FLOAT_8(yr, xr, xt) \
	VEXTRACTF128 $1, yr, xt; \
	VADDPS       xt, xr, xr; \
	VMOVHLPS     xr, xr, xt; \
	VADDPS       xt, xr, xr; \
	VMOVSHDUP    xr, xt; \
	VADDSS       xt, xr, xr

// The lattice kernels (simd_iq2_amd64.s, simd_iq3_amd64.s) run over rows declared
// (w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32) of 256-value blocks against
// Q8_K: SI the weight block, DI its activations, CX the blocks left in the row, R12 the
// row, R10 the rows left, R11 the next output, R8 f16Table; Y0 the row's float lanes, Y1
// the block's integer lanes (lane k the sum over the sub-blocks of (2s+1)·q·y for the
// values 4k..4k+3 of each, as in ggml's AVX2 kernels).
//
// LATTICE_ROWS runs body on every block (bs bytes) of every row, after asking for the
// lines 4 KiB ahead; body leaves the block's integer lanes in Y1, which go into Y0 times
// d_x·d_y by one FMA. A row ends as hsum_float_8 times the float32 whose bits are factor.
// AX, X1 and Y7 are scratch.
#define LATTICE_ROWS(row, block, body, bs, factor) \
	LEAQ         ·f16Table(SB), R8; \
	ROWS_BEGIN(row); \
	VXORPS       Y0, Y0, Y0; \
block: \
	PREFETCHT0   4096(SI); \
	PREFETCHT0   4160(SI); \
	body; \
	MOVWLZX      (SI), AX; \
	VMOVSS       (R8)(AX*4), X7; \
	VMULSS       (DI), X7, X7; \
	VBROADCASTSS X7, Y7; \
	VCVTDQ2PS    Y1, Y1; \
	VFMADD231PS  Y7, Y1, Y0; \
	ADDQ         $bs, SI; \
	ADDQ         $292, DI; \
	DECQ         CX; \
	JNZ          block; \
	HSUM_FLOAT_8(Y0, X0, X1); \
	MOVL         $factor, AX; \
	VMOVD        AX, X1; \
	VMULSS       X1, X0, X0; \
	ROWS_NEXT(row)

// LATTICE_SIGN_CODES: the u32 at SI+o holds four 7-bit sign codes (ggml's ksigns) and a
// 4-bit scale s in its top bits. Y3 gets the codes' ±1 bytes (iq2SignBytes at R14), BX
// 32·s, the offset of s's words in iq2ScaleWords. DX and Y6 are scratch.
#define LATTICE_SIGN_CODES(o) \
	MOVL         o(SI), DX; \
	MOVL         DX, BX; \
	ANDL         $127, BX; \
	VPBROADCASTQ (R14)(BX*8), Y3; \
	LATTICE_SIGN_CODE(7, 0x0C); \
	LATTICE_SIGN_CODE(14, 0x30); \
	LATTICE_SIGN_CODE(21, 0xC0); \
	MOVL         DX, BX; \
	SHRL         $28, BX; \
	SHLL         $5, BX

#define LATTICE_SIGN_CODE(shift, m) \
	MOVL         DX, BX; \
	SHRL         $shift, BX; \
	ANDL         $127, BX; \
	VPBROADCASTQ (R14)(BX*8), Y6; \
	VPBLENDD     $m, Y6, Y3, Y3

// LATTICE_SIGNED_DOT adds a sub-block's eight lanes to Y1: the grid bytes Y2 times the
// activations at DI+q8 signed by Y3 (±1 bytes), the pairs times the scale words at R9+BX.
// LATTICE_SIGN_BITS_DOT does it with explicit sign bits: the 32 at SI+sg made a byte mask
// (Y12 iq2SSignSpread, Y13 iq2SSignBit) that negates the activations as y ^ m - m. Both
// wrap a -128 activation against a negative sign to -128, as ggml's kernels do.
#define LATTICE_SCALED_ADD \
	VPMADDUBSW Y5, Y2, Y5; \
	VPMADDWD   (R9)(BX*1), Y5, Y5; \
	VPADDD     Y5, Y1, Y1

#define LATTICE_SIGNED_DOT(q8) \
	VMOVDQU q8(DI), Y5; \
	VPSIGNB Y3, Y5, Y5; \
	LATTICE_SCALED_ADD

#define LATTICE_SIGN_BITS_DOT(sg, q8) \
	VPBROADCASTD sg(SI), Y3; \
	VPSHUFB      Y12, Y3, Y3; \
	VPAND        Y13, Y3, Y3; \
	VPCMPEQB     Y13, Y3, Y3; \
	VMOVDQU      q8(DI), Y5; \
	VPXOR        Y3, Y5, Y5; \
	VPSUBB       Y3, Y5, Y5; \
	LATTICE_SCALED_ADD

// LATTICE_PAIRS is the AVX-512 body's core: pair(p, sidx, acc) adds the 16 lanes of
// sub-blocks 2p and 2p+1 to acc (Z10 for even p, Z11 for odd), sidx (Z20+p) the VPERMW
// indices of their scale words; the sum folds to Y1's eight lanes (lower plus upper half).
// LATTICE_PAIR_DOT is a pair's product: the grid bytes Z7 times pair p's activations,
// negated where K2 is set (Z28 zero), the VPMADDUBSW pairs times the words of Z5 that sidx
// picks, added to acc by VPDPWSSD.
#define LATTICE_PAIRS(pair) \
	VPXORD        Z10, Z10, Z10; \
	VPXORD        Z11, Z11, Z11; \
	pair(0, Z20, Z10); \
	pair(1, Z21, Z11); \
	pair(2, Z22, Z10); \
	pair(3, Z23, Z11); \
	VPADDD        Z11, Z10, Z10; \
	VEXTRACTI64X4 $1, Z10, Y11; \
	VPADDD        Y11, Y10, Y1

#define LATTICE_PAIR_DOT(p, sidx, acc) \
	VMOVDQU64  4+64*p(DI), Z8; \
	VPSUBB     Z8, Z28, K2, Z8; \
	VPMADDUBSW Z8, Z7, Z9; \
	VPERMW     Z5, sidx, Z12; \
	VPDPWSSD   Z12, Z9, acc

// The four-token kernels' common steps (eight float lanes per token in Y0 Y1 Y4 Y5,
// sixteen integer lanes in Z16-Z19, the weights in SI and the activations in R8-R11, as
// TOKENS4_ROWS_BEGIN sets them up). SUM4_LANES8 leaves the four tokens' sums in lanes 0-3
// of X0, each in sumLanes' order (halves added, then lanes 0+2 and 1+3, then those two); NEXT_BLOCK4 moves to
// the next block (of bytes bytes) and counts it, leaving the flags for the loop's JNZ.
#define SUM4_LANES8 \
	VEXTRACTF128 $1, Y0, X2; \
	VADDPS       X2, X0, X0; \
	VEXTRACTF128 $1, Y1, X2; \
	VADDPS       X2, X1, X1; \
	VEXTRACTF128 $1, Y4, X2; \
	VADDPS       X2, X4, X4; \
	VEXTRACTF128 $1, Y5, X2; \
	VADDPS       X2, X5, X5; \
	CROSS_PAIRS(X0, X1, X2); \
	CROSS_PAIRS(X4, X5, X2); \
	VHADDPS      X4, X0, X0

#define ZERO_ACCS4 \
	VPXORD Z0, Z0, Z0; \
	VPXORD Z1, Z1, Z1; \
	VPXORD Z4, Z4, Z4; \
	VPXORD Z5, Z5, Z5

#define ZERO_INTS4 \
	VPXORD Z16, Z16, Z16; \
	VPXORD Z17, Z17, Z17; \
	VPXORD Z18, Z18, Z18; \
	VPXORD Z19, Z19, Z19

#define NEXT_BLOCK4(bytes) \
	ADDQ $bytes, SI; \
	ADDQ $292, R8; \
	ADDQ $292, R9; \
	ADDQ $292, R10; \
	ADDQ $292, R11; \
	DECQ CX

// LANES4_TO_X0 gathers four tokens' sums, each in lane 0 of xa..xd, to lanes 0-3 of X0
// for TOKENS4_ROWS_END.
#define LANES4_TO_X0(xa, xb, xc, xd) \
	VINSERTPS $0x10, xb, xa, X0; \
	VINSERTPS $0x20, xc, X0, X0; \
	VINSERTPS $0x30, xd, X0, X0

// ZERO_Z0_7 and ZERO_Z8_15 clear a kernel's accumulators.
#define ZERO_Z0_7 \
	VPXORD Z0, Z0, Z0; \
	VPXORD Z1, Z1, Z1; \
	VPXORD Z2, Z2, Z2; \
	VPXORD Z3, Z3, Z3; \
	VPXORD Z4, Z4, Z4; \
	VPXORD Z5, Z5, Z5; \
	VPXORD Z6, Z6, Z6; \
	VPXORD Z7, Z7, Z7

#define ZERO_Z8_15 \
	VPXORD Z8, Z8, Z8; \
	VPXORD Z9, Z9, Z9; \
	VPXORD Z10, Z10, Z10; \
	VPXORD Z11, Z11, Z11; \
	VPXORD Z12, Z12, Z12; \
	VPXORD Z13, Z13, Z13; \
	VPXORD Z14, Z14, Z14; \
	VPXORD Z15, Z15, Z15

// PREFETCH_AHEAD: each block of a kernel over consecutive rows (at SI) prefetches into L2
// the lines 4 KiB ahead. A mat-vec reads its rows sequentially, and this keeps enough
// lines in flight that a worker's reads run at the memory's pace rather than stalling at
// each 4 KiB page, where the hardware prefetcher stops (it replaces prefetchNext for these
// kernels). Measured on the build machine, 2 threads, out-of-cache [2048 → 151936] Q6_K
// mat-vec: none 16-18 GB/s, PREFETCHT0 at 512 B / 1 / 2 / 4 / 8 / 16 KiB 17-18 / 20 / 20 /
// 22-24 / 18 / 17 GB/s, PREFETCHT1 at 4 KiB 26-28, PREFETCHNTA 16 (a stream read: 28
// GB/s). Lines past the row are the next rows' (a tile runs on) or harmless: a prefetch
// never faults.
#define PREFETCH_AHEAD \
	PREFETCHT1 4096(SI); \
	PREFETCHT1 4160(SI); \
	PREFETCHT1 4224(SI); \
	PREFETCHT1 4288(SI)
