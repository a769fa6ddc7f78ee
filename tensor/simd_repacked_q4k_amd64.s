//go:build goexperiment.simd

#include "textflag.h"
#include "simd_amd64.h"

// The four-token Q4_K kernels in llama.cpp's repacked arithmetic (see
// simd_repacked_q4k_amd64.go): each row's super-blocks against the prepared activations
// (q4KRepackedTokensBlock), with the integer lanes and float steps that
// q4KRepackedGemm4AVX2's comment describes. The AVX2 kernels are VEX instructions only
// (AVX2, FMA) and end with VZEROUPPER; the AVX-512 ones (below) end with CLEAR_HIGH.
// Go's operand order is Intel's reversed: VPMADDUBSW S, U, D is D = pairs of U
// (unsigned) · S (signed); VPSHUFB I, V, D is D = V's bytes picked by I; VPHADDD B, A, D
// is D = [A's pair sums, B's pair sums] in each 128-bit half; VSUBPS B, A, D is D = A - B.
//
// Written as archsimd, the same steps ran at 16 cycles a super-block and token in L1 on the
// build machine: the compiler neither folds loads into the instructions nor keeps the
// constants in registers, and every load took an instruction of its own. Here the loads
// are folded and the nibble mask, the scales and the float state stay in registers.
//
// Registers: BX the row, DX its index, SI its super-block, DI the prepared block, CX the
// super-blocks left, R8 f16Table, AX scratch. Y15 nibbleMask, Y14 the super-block's scales
// and mins as bytes [sc0..7, m0..7] in both halves, Y13 the row's float lanes [acc0, acc2,
// accMin0, accMin2 | acc1, acc3, accMin1, accMin3], Y12 their factors [d·dy0, d·dy2,
// dmin·dy0, dmin·dy2 | …]; Y11 and Y10 the mins' sums as the float steps take them (gemv:
// Y11 alone); Y9 and Y8 the sums carried between chunks; Y0-Y7 scratch.

// Q4K_SCALES decodes the packed scales at 4(r) into bytes [sc0..7, m0..7] in x (t
// scratch), dotQ4_KAVX2's steps.
#define Q4K_SCALES(r, x, t) \
	VMOVDQU 4(r), x; \
	VPSHUFB ·q4KPickLo(SB), x, t; \
	VPSRAVD ·q4KShift(SB), t, t; \
	VPAND   ·q4KMaskLo(SB), t, t; \
	VPSHUFB ·q4KPickHi(SB), x, x; \
	VPSRAD  $2, x, x; \
	VPAND   ·q4KMaskHi(SB), x, x; \
	VPOR    t, x, x

// Q4KT_SCALES decodes the super-block's packed scales into both halves of Y14, and sets
// Y12 from its d and dmin and the block's dy.
#define Q4KT_SCALES \
	Q4K_SCALES(SI, X0, X1); \
	VINSERTI128  $1, X0, Y0, Y14; \
	MOVWLZX      (SI), AX; \
	VBROADCASTSS (R8)(AX*4), Y12; \
	MOVWLZX      2(SI), AX; \
	VBROADCASTSS (R8)(AX*4), Y0; \
	VSHUFPS      $0x44, Y0, Y12, Y12; \
	VMULPS       1088(DI), Y12, Y12

// Q4KT_MINS leaves the mins times the sub-blocks' activation sums in Y1 ([t0 c0..3 | t1
// c0..3]) and Y0 ([t2 | t3]).
#define Q4KT_MINS \
	VPSHUFB  ·q4KMinWords(SB), Y14, Y0; \
	VPMADDWD 1024(DI), Y0, Y1; \
	VPMADDWD 1056(DI), Y0, Y0

// Q4K_SUBBLOCK sets d to a sub-block's word sums times its scales s: the nibbles u1
// against the quants at y1, u2 against those at y2 (a row's or token's two halves each),
// the pairs added as words (t scratch).
#define Q4K_SUBBLOCK(y1, u1, y2, u2, s, d, t) \
	VPMADDUBSW y1, u1, d; \
	VPMADDUBSW y2, u2, t; \
	VPADDW     t, d, d; \
	VPMADDWD   s, d, d

// Q4KT_CHUNK leaves chunk c's integer lanes of tokens 0 and 1 in r01, of tokens 2 and 3
// in r23: the 32 bytes of nibbles at 16+32c, low (sub-block 2c) and high (2c+1), as they
// lie and with their halves swapped, against the prepared quants at 256c, each sub-block's
// word sums times its scales (spreadByte[2c] and [2c+1]).
#define Q4KT_CHUNK(q, y, sp, r01, r23) \
	VMOVDQU    q(SI), Y0; \
	VPAND      Y15, Y0, Y1; \
	VPERM2I128 $1, Y1, Y1, Y2; \
	VPSHUFB    ·spreadByte+sp(SB), Y14, Y4; \
	Q4K_SUBBLOCK(y(DI), Y1, y+64(DI), Y2, Y4, r01, Y7); \
	Q4K_SUBBLOCK(y+32(DI), Y1, y+96(DI), Y2, Y4, r23, Y7); \
	VPSRLW     $4, Y0, Y0; \
	VPAND      Y15, Y0, Y0; \
	VPERM2I128 $1, Y0, Y0, Y1; \
	VPSHUFB    ·spreadByte+sp+32(SB), Y14, Y2; \
	Q4K_SUBBLOCK(y+128(DI), Y0, y+192(DI), Y1, Y2, Y4, Y5); \
	VPADDD     Y4, r01, r01; \
	Q4K_SUBBLOCK(y+160(DI), Y0, y+224(DI), Y1, Y2, Y4, Y5); \
	VPADDD     Y4, r23, r23

// Q4KT_GEMM_STEPS takes gemm's two float steps for a pair of chunks: the first chunk's
// sums, added pairwise (Y9), and the second's (Y6, Y3) become [I0, I2 of the first, of
// the second | I1, I3 …], each chunk's next to its mins' sums from m.
#define Q4KT_GEMM_STEPS(m) \
	VPHADDD     Y3, Y6, Y6; \
	VPHADDD     Y6, Y9, Y0; \
	VSHUFPS     $0x44, m, Y0, Y1; \
	VCVTDQ2PS   Y1, Y1; \
	VFMADD231PS Y1, Y12, Y13; \
	VSHUFPS     $0xEE, m, Y0, Y1; \
	VCVTDQ2PS   Y1, Y1; \
	VFMADD231PS Y1, Y12, Y13

// Q4KR_ROWS runs body over the super-blocks of every row (each after the level's scales
// macro), prefetching the lines 4 KiB ahead of each super-block into L2, as prefetchNext
// asks for them row by row, and stores each row's four sums, [r0, r1, r2, r3] = the
// lanes' acc - accMin (put in X0 by fold), to o0..o3 at the row's index; zero clears the
// float lanes (register 13) for each row, and end ends the function. setup loads the
// level's constants.
#define Q4KR_ROWS(setup, row, block, zero, scales, body, fold, end) \
	MOVQ       w+0(FP), BX; \
	XORQ       DX, DX; \
	LEAQ       ·f16Table(SB), R8; \
	setup; \
row: \
	MOVQ       BX, SI; \
	MOVQ       pre+8(FP), DI; \
	MOVQ       nb+16(FP), CX; \
	zero; \
block: \
	PREFETCHT1 4096(SI); \
	PREFETCHT1 4160(SI); \
	PREFETCHT1 4224(SI); \
	scales; \
	body; \
	ADDQ       $144, SI; \
	ADDQ       $1120, DI; \
	DECQ       CX; \
	JNZ        block; \
	fold; \
	STORE_LANES4(AX, o0+40(FP), o1+48(FP), o2+56(FP), o3+64(FP)); \
	ADDQ       rowBytes+32(FP), BX; \
	INCQ       DX; \
	CMPQ       DX, rows+24(FP); \
	JLT        row; \
	end; \
	RET

// The AVX2 kernels' constants, float lanes and their fold to the rows' sums.
#define Q4KT_SETUP VMOVDQU ·nibbleMask(SB), Y15
#define Q4KT_ZERO VXORPS Y13, Y13, Y13
#define Q4KT_FOLD \
	VSHUFPS      $0x4E, Y13, Y13, Y0; \
	VSUBPS       Y0, Y13, Y0; \
	VEXTRACTF128 $1, Y0, X1; \
	VPUNPCKLDQ   X1, X0, X0

// Gemm's super-block: a float step after every chunk, two at a time, with the mins' sums
// of chunks 0 and 1 in Y11, of 2 and 3 in Y10.
#define Q4KT_GEMM_BLOCK \
	Q4KT_MINS; \
	VPUNPCKLDQ Y0, Y1, Y11; \
	VPUNPCKHDQ Y0, Y1, Y10; \
	Q4KT_CHUNK(16, 0, 0, Y6, Y3); \
	VPHADDD    Y3, Y6, Y9; \
	Q4KT_CHUNK(48, 256, 64, Y6, Y3); \
	Q4KT_GEMM_STEPS(Y11); \
	Q4KT_CHUNK(80, 512, 128, Y6, Y3); \
	VPHADDD    Y3, Y6, Y9; \
	Q4KT_CHUNK(112, 768, 192, Y6, Y3); \
	Q4KT_GEMM_STEPS(Y10)

// Gemv's super-block: the chunks' lanes add up (Y9, Y8) to one float step, with the mins'
// sums [M0, M2, M0, M2 | M1, M3, M1, M3] in Y11.
#define Q4KT_GEMV_BLOCK \
	Q4KT_MINS; \
	VPHADDD     Y0, Y1, Y11; \
	VPHADDD     Y11, Y11, Y11; \
	Q4KT_CHUNK(16, 0, 0, Y9, Y8); \
	Q4KT_CHUNK(48, 256, 64, Y6, Y3); \
	VPADDD      Y6, Y9, Y9; \
	VPADDD      Y3, Y8, Y8; \
	Q4KT_CHUNK(80, 512, 128, Y6, Y3); \
	VPADDD      Y6, Y9, Y9; \
	VPADDD      Y3, Y8, Y8; \
	Q4KT_CHUNK(112, 768, 192, Y6, Y3); \
	VPADDD      Y6, Y9, Y9; \
	VPADDD      Y3, Y8, Y8; \
	VPHADDD     Y8, Y9, Y0; \
	VPHADDD     Y0, Y0, Y0; \
	VSHUFPS     $0xE4, Y11, Y0, Y0; \
	VCVTDQ2PS   Y0, Y0; \
	VFMADD231PS Y0, Y12, Y13

// func q4KRepackedGemm4AVX2(w, pre unsafe.Pointer, nb, rows, rowBytes int, o0, o1, o2, o3 *float32)
TEXT ·q4KRepackedGemm4AVX2(SB), NOSPLIT, $0-72
	Q4KR_ROWS(Q4KT_SETUP, gemmrow, gemmblock, Q4KT_ZERO, Q4KT_SCALES, Q4KT_GEMM_BLOCK, Q4KT_FOLD, VZEROUPPER)

// func q4KRepackedGemv4AVX2(w, pre unsafe.Pointer, nb, rows, rowBytes int, o0, o1, o2, o3 *float32)
TEXT ·q4KRepackedGemv4AVX2(SB), NOSPLIT, $0-72
	Q4KR_ROWS(Q4KT_SETUP, gemvrow, gemvblock, Q4KT_ZERO, Q4KT_SCALES, Q4KT_GEMV_BLOCK, Q4KT_FOLD, VZEROUPPER)

// The AVX-512 four-token kernels (q4KRepackedGemm4AVX512, q4KRepackedGemv4AVX512): the
// same integer sums and float steps, with token k in 128-bit lane k of a 512-bit register,
// so that each VPMADDUBSW, VPADDW and VPMADDWD covers the four tokens where the AVX2 kernels
// need two. AVX-512 F/BW only (no VNNI), for every CPU of the AVX-512 level.
//
// A chunk's 32 bytes of nibbles are loaded into both 256-bit halves, [first 16 | last 16 |
// first 16 | last 16], and, split into low and high nibbles, also with the 128-bit lanes
// of each half swapped (VSHUFI64X2 once per nibble, rather than a second load and split):
// y[c][v] of the prepared block then is [t0 first | t1 last | t2 first | t3 last] (v even)
// and [t0 last | t1 first | t2 last | t3 first] (v odd), so each lane's two products are
// one token's (VPADDW, at most 2·2·15·128, as in the AVX2 kernels), and a chunk leaves
// four int32 lanes a token.
//
// The float lanes are a token's 128-bit lane [acc, accMin, ·, ·] (Z13) and the factors
// [d·dyk, dmin·dyk, d·dyk, dmin·dyk] (Z12): the products are the AVX2 kernels' (VMULPS of
// [d, d, dmin, dmin] by their dy vector, then VPERMILPS puts token k's in lane k), so a
// step is one FMA of the same operands in the same order. Gemv adds the chunks' lanes and
// the mins' sums down to [I, M, I, M] a token and steps once a super-block; gemm adds each
// chunk's lanes up (a 4×4 transposition of the four chunks, VPUNPCK and VPADDD), pairs
// them with the chunks' M as [Ic, Mc, Ic+1, Mc+1] and steps four times in chunk order,
// VSHUFPS bringing the odd chunks to the first two positions. Lanes 2 and 3 of Z13 then
// gather junk that is never read.
//
// On the build machine (Zen 5, whose four vector pipes take 512-bit operations at the
// rate of 256-bit ones), 16 rows of 2048 values in L1 (BenchmarkRepackedQ4KTokens4Levels):
// gemm 2.5-2.7 ns a super-block and token against the AVX2 kernel's 3.4-3.6, gemv 2.2-2.5
// against 3.0-3.2. The multiplications halve; the split and swaps of the nibbles, the
// spread of the scales and the float steps are per row and do not. Tried and not kept: GFNI
// for the split with VPDPWSSD for the scaling (a VNNI-level variant), within the noise
// (at most 5%); the scales spread by VPBROADCASTD from the stack instead of VPSHUFB, no
// faster (gemv slower).
//
// Registers: BX the row, DX its index, SI its super-block, DI the prepared block, CX the
// super-blocks left, R8 f16Table, AX scratch. Z15 nibbleMask, Z14 the super-block's scales
// and mins as bytes [sc0..7, m0..7] in every lane, Z13 the float lanes, Z12 their factors;
// Z16-Z23 spreadByte[0..7], Z24 q4KMinWords, Z25 q4KTokenFirsts, Z26 q4KTokenFactors;
// Z8-Z11 the chunks' int32 lanes (gemv: Z8 alone), Z7 the mins' sums; Z0-Z6 scratch.

// Q4KZ_SCALES decodes the super-block's packed scales into every lane of Z14, and sets
// Z12 to the factors.
#define Q4KZ_SCALES \
	Q4K_SCALES(SI, X0, X1); \
	VSHUFI64X2      $0, Z0, Z0, Z14; \
	MOVWLZX         (SI), AX; \
	VBROADCASTSS    (R8)(AX*4), Z12; \
	MOVWLZX         2(SI), AX; \
	VBROADCASTSS    (R8)(AX*4), Z0; \
	VSHUFPS         $0x44, Z0, Z12, Z12; \
	VBROADCASTF64X4 1088(DI), Z1; \
	VMULPS          Z1, Z12, Z12; \
	VPERMILPS       Z26, Z12, Z12

// Q4KZ_MINS leaves the mins times the sub-blocks' activation sums in Z7: token k's lane
// holds its M of chunks 0-3.
#define Q4KZ_MINS \
	VPSHUFB  Z24, Z14, Z0; \
	VPMADDWD 1024(DI), Z0, Z7

// Q4KZ_CHUNK leaves chunk c's int32 lanes in r: the nibbles at q (16+32c) against the
// prepared quants at y (256c), sub-block 2c's word sums times its scales (s0, spreadByte
// [2c]) and 2c+1's (s1).
#define Q4KZ_CHUNK(q, y, s0, s1, r) \
	VBROADCASTI64X4 q(SI), Z0; \
	VPSRLW          $4, Z0, Z1; \
	VPANDD          Z15, Z0, Z0; \
	VPANDD          Z15, Z1, Z1; \
	VSHUFI64X2      $0xB1, Z0, Z0, Z2; \
	VSHUFI64X2      $0xB1, Z1, Z1, Z3; \
	VPSHUFB         s0, Z14, Z4; \
	Q4K_SUBBLOCK(y(DI), Z0, y+64(DI), Z2, Z4, r, Z5); \
	VPSHUFB         s1, Z14, Z4; \
	Q4K_SUBBLOCK(y+128(DI), Z1, y+192(DI), Z3, Z4, Z5, Z6); \
	VPADDD          Z5, r, r

// The AVX-512 kernels' constants (see Q4KZ_SCALES and Q4KZ_CHUNK), float lanes and their
// fold to the rows' sums (acc - accMin of lane k), for Q4KR_ROWS.
#define Q4KZ_SETUP \
	VBROADCASTI64X4 ·nibbleMask(SB), Z15; \
	VBROADCASTI64X4 ·spreadByte+0(SB), Z16; \
	VBROADCASTI64X4 ·spreadByte+32(SB), Z17; \
	VBROADCASTI64X4 ·spreadByte+64(SB), Z18; \
	VBROADCASTI64X4 ·spreadByte+96(SB), Z19; \
	VBROADCASTI64X4 ·spreadByte+128(SB), Z20; \
	VBROADCASTI64X4 ·spreadByte+160(SB), Z21; \
	VBROADCASTI64X4 ·spreadByte+192(SB), Z22; \
	VBROADCASTI64X4 ·spreadByte+224(SB), Z23; \
	VBROADCASTI64X4 ·q4KMinWords(SB), Z24; \
	VMOVDQU32       ·q4KTokenFirsts(SB), Z25; \
	VMOVDQU32       ·q4KTokenFactors(SB), Z26

#define Q4KZ_ZERO VPXORD Z13, Z13, Z13

#define Q4KZ_FOLD \
	VMOVSHDUP       Z13, Z0; \
	VSUBPS          Z0, Z13, Z0; \
	VPERMD          Z0, Z25, Z0

// Gemm's super-block: the four chunks' lanes (Z8-Z11) transposed and added up to
// [I0, I1, I2, I3] a token, interleaved with the mins' sums, and four float steps.
#define Q4KZ_GEMM_BLOCK \
	Q4KZ_MINS; \
	Q4KZ_CHUNK(16, 0, Z16, Z17, Z8); \
	Q4KZ_CHUNK(48, 256, Z18, Z19, Z9); \
	Q4KZ_CHUNK(80, 512, Z20, Z21, Z10); \
	Q4KZ_CHUNK(112, 768, Z22, Z23, Z11); \
	VPUNPCKLDQ  Z9, Z8, Z0; \
	VPUNPCKHDQ  Z9, Z8, Z1; \
	VPADDD      Z1, Z0, Z0; \
	VPUNPCKLDQ  Z11, Z10, Z1; \
	VPUNPCKHDQ  Z11, Z10, Z2; \
	VPADDD      Z2, Z1, Z1; \
	VPUNPCKLQDQ Z1, Z0, Z2; \
	VPUNPCKHQDQ Z1, Z0, Z3; \
	VPADDD      Z3, Z2, Z2; \
	VPUNPCKLDQ  Z7, Z2, Z0; \
	VPUNPCKHDQ  Z7, Z2, Z1; \
	VCVTDQ2PS   Z0, Z0; \
	VCVTDQ2PS   Z1, Z1; \
	VFMADD231PS Z0, Z12, Z13; \
	VSHUFPS     $0x4E, Z0, Z0, Z0; \
	VFMADD231PS Z0, Z12, Z13; \
	VFMADD231PS Z1, Z12, Z13; \
	VSHUFPS     $0x4E, Z1, Z1, Z1; \
	VFMADD231PS Z1, Z12, Z13

// Gemv's super-block: the chunks' lanes add up (Z8), and with the mins' sums to [I, M, I,
// M] a token, for one float step.
#define Q4KZ_GEMV_BLOCK \
	Q4KZ_MINS; \
	Q4KZ_CHUNK(16, 0, Z16, Z17, Z8); \
	Q4KZ_CHUNK(48, 256, Z18, Z19, Z9); \
	VPADDD      Z9, Z8, Z8; \
	Q4KZ_CHUNK(80, 512, Z20, Z21, Z9); \
	VPADDD      Z9, Z8, Z8; \
	Q4KZ_CHUNK(112, 768, Z22, Z23, Z9); \
	VPADDD      Z9, Z8, Z8; \
	VPUNPCKLDQ  Z7, Z8, Z0; \
	VPUNPCKHDQ  Z7, Z8, Z1; \
	VPADDD      Z1, Z0, Z0; \
	VPSHUFD     $0x4E, Z0, Z1; \
	VPADDD      Z1, Z0, Z0; \
	VCVTDQ2PS   Z0, Z0; \
	VFMADD231PS Z0, Z12, Z13

// func q4KRepackedGemm4AVX512(w, pre unsafe.Pointer, nb, rows, rowBytes int, o0, o1, o2, o3 *float32)
TEXT ·q4KRepackedGemm4AVX512(SB), NOSPLIT, $0-72
	Q4KR_ROWS(Q4KZ_SETUP, gemmrowz, gemmblockz, Q4KZ_ZERO, Q4KZ_SCALES, Q4KZ_GEMM_BLOCK, Q4KZ_FOLD, CLEAR_HIGH)

// func q4KRepackedGemv4AVX512(w, pre unsafe.Pointer, nb, rows, rowBytes int, o0, o1, o2, o3 *float32)
TEXT ·q4KRepackedGemv4AVX512(SB), NOSPLIT, $0-72
	Q4KR_ROWS(Q4KZ_SETUP, gemvrowz, gemvblockz, Q4KZ_ZERO, Q4KZ_SCALES, Q4KZ_GEMV_BLOCK, Q4KZ_FOLD, CLEAR_HIGH)

// q4KRepackedIntegersAVX2's registers: SI and R9 the two rows' super-blocks, DI the
// activations, R10 their swapped quants, R12 the buffer block's lanes for this pair of
// rows (sums[slot], scales[slot] 128 bytes on), R13 its d and dmin (d[slot] 256 bytes on,
// d[slot+4] 272, dmin[slot] 288, dmin[slot+4] 304), CX the super-blocks left, R8
// f16Table, AX scratch. Y15 nibbleMask, Y14 the scales and mins of the first row in the
// lower half and of the second in the upper, Y13 the integer lanes; Y0-Y9 scratch.
// q4KRepackedIntegers2AVX2 adds the second token: R11 and R14 its activations and
// swapped quants, BX the distance from the first token's buffer to its own, Y12 its
// integer lanes (the nibbles in Y6, Y7, Y2 and Y3 serve both tokens).

// Q4KI_SETUP points R12 and R13 at the buffer p's lanes for the pair of rows slot (in AX),
// and loads f16Table's address and the nibble mask.
#define Q4KI_SETUP(p) \
	MOVQ    p, R12; \
	LEAQ    (R12)(AX*4), R13; \
	SHLQ    $5, AX; \
	ADDQ    AX, R12; \
	LEAQ    ·f16Table(SB), R8; \
	VMOVDQU ·nibbleMask(SB), Y15

// Q4KI_PREFETCH asks (into L2) for the lines 4 KiB past the row's super-block at r, as
// PREFETCH_AHEAD does for the VNNI kernels: three lines cover its 144 bytes together with
// the next super-block's. In the loop rather than once a row from Go (prefetchNext, which
// the kernel took before): on the build machine, MOERUN_ISA=avx2, bench8 tg on 2 threads
// went from 38.9-42.0 to 42.1-44.0 t/s (four alternating pairs, each better), and 1 GiB of
// Q4_K [2048 → 768] experts on one thread from 12.7-14.4 to 13.3-15.7 GB/s.
#define Q4KI_PREFETCH(r) \
	PREFETCHT1 4096(r); \
	PREFETCHT1 4160(r); \
	PREFETCHT1 4224(r)

// Q4KI_BLOCK_BEGIN prefetches and decodes the two rows' scales into Y14, stores them to
// the buffer and zeroes the first token's lanes.
#define Q4KI_BLOCK_BEGIN \
	Q4KI_PREFETCH(SI); \
	Q4KI_PREFETCH(R9); \
	Q4K_SCALES(SI, X0, X1); \
	Q4K_SCALES(R9, X2, X3); \
	VINSERTI128 $1, X2, Y0, Y14; \
	VMOVDQU     Y14, 128(R12); \
	VPXOR       Y13, Y13, Y13

// Q4KI_F16 copies the f16Table entry of the F16 at off(r) to dst(R13) (its float32 bits);
// Q4KI2_F16 also to the second token's buffer.
#define Q4KI_F16(off, r, dst) \
	MOVWLZX off(r), AX; \
	MOVL    (R8)(AX*4), AX; \
	MOVL    AX, dst(R13)

#define Q4KI2_F16(off, r, dst) \
	Q4KI_F16(off, r, dst); \
	MOVL AX, dst(R13)(BX*1)

// Q4KI_BLOCK_END stores the first token's lanes and, by f16, the rows' d and dmin, and
// moves the rows, the first token's activations and the buffer on by a super-block.
#define Q4KI_BLOCK_END(f16) \
	VMOVDQU Y13, (R12); \
	f16(0, SI, 256); \
	f16(0, R9, 272); \
	f16(2, SI, 288); \
	f16(2, R9, 304); \
	ADDQ    $144, SI; \
	ADDQ    $144, R9; \
	ADDQ    $292, DI; \
	ADDQ    $256, R10; \
	ADDQ    $320, R12; \
	ADDQ    $320, R13

// Q4KI_SUBBLOCKS adds a sub-block's scaled sums to Y13: the nibbles u1 against the quants
// at y(DI), u2 against those at z(R10), times the scales s; Q4KI2_SUBBLOCKS also the
// second token's (y(R11), z(R14)) to Y12.
#define Q4KI_SUBBLOCKS(y, u1, z, u2, s) \
	Q4K_SUBBLOCK(y(DI), u1, z(R10), u2, s, Y8, Y9); \
	VPADDD Y8, Y13, Y13

#define Q4KI2_SUBBLOCKS(y, u1, z, u2, s) \
	Q4KI_SUBBLOCKS(y, u1, z, u2, s); \
	Q4K_SUBBLOCK(y(R11), u1, z(R14), u2, s, Y8, Y9); \
	VPADDD Y8, Y12, Y12

// Q4KI_CHUNK adds chunk c's lanes by subblocks: the two rows' 32 bytes of nibbles at q
// regrouped into [first row's first 16 | second row's last 16] (Y2) and [first row's last
// 16 | second row's first 16] (Y3), low nibbles (sub-block 2c) against the quants as they
// lie at y and as swapped at z, high ones (2c+1) at y+32 and z+32, each sub-block's word
// sums times its scales (spreadByte[2c] and [2c+1] at sp).
#define Q4KI_CHUNK(q, y, z, sp, subblocks) \
	VMOVDQU    q(SI), Y0; \
	VMOVDQU    q(R9), Y1; \
	VPBLENDD   $0xF0, Y1, Y0, Y2; \
	VPERM2I128 $0x21, Y1, Y0, Y3; \
	VPSHUFB    ·spreadByte+sp(SB), Y14, Y4; \
	VPSHUFB    ·spreadByte+sp+32(SB), Y14, Y5; \
	VPAND      Y15, Y2, Y6; \
	VPAND      Y15, Y3, Y7; \
	subblocks(y, Y6, z, Y7, Y4); \
	VPSRLW     $4, Y2, Y2; \
	VPAND      Y15, Y2, Y2; \
	VPSRLW     $4, Y3, Y3; \
	VPAND      Y15, Y3, Y3; \
	subblocks(y+32, Y2, z+32, Y3, Y5)

// Q4KI_CHUNKS runs the super-block's four chunks.
#define Q4KI_CHUNKS(subblocks) \
	Q4KI_CHUNK(16, 4, 0, 0, subblocks); \
	Q4KI_CHUNK(48, 68, 64, 64, subblocks); \
	Q4KI_CHUNK(80, 132, 128, 128, subblocks); \
	Q4KI_CHUNK(112, 196, 192, 192, subblocks)

// func q4KRepackedIntegersAVX2(w0, w1, a, swapped, p unsafe.Pointer, nb, slot int)
TEXT ·q4KRepackedIntegersAVX2(SB), NOSPLIT, $0-56
	MOVQ w0+0(FP), SI
	MOVQ w1+8(FP), R9
	MOVQ a+16(FP), DI
	MOVQ swapped+24(FP), R10
	MOVQ nb+40(FP), CX
	MOVQ slot+48(FP), AX
	Q4KI_SETUP(p+32(FP))

block:
	Q4KI_BLOCK_BEGIN
	Q4KI_CHUNKS(Q4KI_SUBBLOCKS)
	Q4KI_BLOCK_END(Q4KI_F16)
	DECQ CX
	JNZ  block

	VZEROUPPER
	RET

// func q4KRepackedIntegers2AVX2(w0, w1, a0, z0, p0, a1, z1, p1 unsafe.Pointer, nb, slot int)
TEXT ·q4KRepackedIntegers2AVX2(SB), NOSPLIT, $0-80
	MOVQ w0+0(FP), SI
	MOVQ w1+8(FP), R9
	MOVQ a0+16(FP), DI
	MOVQ z0+24(FP), R10
	MOVQ a1+40(FP), R11
	MOVQ z1+48(FP), R14
	MOVQ nb+64(FP), CX
	MOVQ slot+72(FP), AX
	Q4KI_SETUP(p0+32(FP))
	MOVQ p1+56(FP), BX
	SUBQ p0+32(FP), BX

block2:
	Q4KI_BLOCK_BEGIN
	VMOVDQU Y14, 128(R12)(BX*1)
	VPXOR   Y12, Y12, Y12
	Q4KI_CHUNKS(Q4KI2_SUBBLOCKS)
	VMOVDQU Y12, (R12)(BX*1)
	Q4KI_BLOCK_END(Q4KI2_F16)
	ADDQ    $292, R11
	ADDQ    $256, R14
	DECQ    CX
	JNZ     block2

	VZEROUPPER
	RET
