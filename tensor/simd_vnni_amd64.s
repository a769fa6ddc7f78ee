//go:build goexperiment.simd

#include "textflag.h"
#include "simd_amd64.h"

// AVX-512 VNNI kernels: see simd_vnni_amd64.go. Go's operand order is Intel's reversed:
// VPDPWSSD Z14, Z13, Z12 is Z12 += Z13·Z14, VPERMW table, index, dst, VPTERNLOGD $f, C, B, A
// (A is also the destination; f's bit 4A+2B+C is the result).
//
// Each block prefetches the lines 4 KiB ahead (PREFETCH_AHEAD, simd_amd64.h).
//
// All end with VZEROUPPER (which clears the upper halves of Z0-Z15) and zero Z16-Z31:
// Go's scalar float code is legacy SSE, which would otherwise pay the AVX-SSE transition
// on every instruction (see simd_amd64.go).
//
// The one- and four-token kernels of a format are built from the same macros, so a token
// of the four-token kernel runs the one-token kernel's integer and float operations
// (hence its bits). Registers: Z20-Z31 hold constants, Z16-Z19 a token's integer sums,
// Z0 Z1 Z4 Z5 a token's float sums, Z2 a Q4_K block's scale bytes (Z10 a Q6_K block's
// scales as words), Z11-Z15 are scratch; the one-token Q4_K kernel, which decodes blocks
// in pairs, keeps the second block's d indices in Z5 and its scale bytes in Z17 instead.

// PREFETCH_NEAR pulls the lines 512 bytes ahead on into L1 (PREFETCHT0), so the one-token
// kernels' loads hit L1 rather than waiting on L2: with their arithmetic removed the decode
// mat-vecs read at the memory's full pace (16.6 GB/s on one thread here), with it they lost
// a fifth of that. Out-of-cache Q6_K [2048 → 151936] mat-vec, file-like 2 MiB pages, medians
// of 24 runs in alternation with the kernel without it: 1 thread 11.8-13.4 → 12.1-14.7 GB/s,
// 2 threads 21.9-24.4 → 23.9-28.4; bench8 tg128 on 2 threads 41.8 → 44.7 t/s (four pairs,
// each better; the mean leaves out a first pair measured under a neighbour's load). 1024 bytes ahead did no better; alone (no PREFETCHT1) T0 was
// slower. The one-token Q4_K pair loop adds a fifth line for its 288 bytes.
#define PREFETCH_NEAR \
	PREFETCHT0 512(SI); \
	PREFETCHT0 576(SI); \
	PREFETCHT0 640(SI); \
	PREFETCHT0 704(SI)

// DOT_TOKEN: ints += scales · (values · the 64 activation bytes at off(areg)), the
// products paired by VPMADDUBSW and each pair sum times its scale word by VPDPWSSD.
#define DOT_TOKEN(values, scales, off, areg, ints) \
	VPMADDUBSW off(areg), values, Z11; \
	VPDPWSSD   scales, Z11, ints

// Q4_K. Q4K_DECODE turns the 12 packed scale bytes of a block in each 128-bit lane of Y3
// into [sc0..7, m0..7] in the same lane of Y2, as dotQ4_KAVX2 (its VPTERNLOGD is
// Y2 = (Y2 & maskHi) | Y15). Q4K_SCALES decodes one block (Q4K_SCALES_PAIR two, one per
// lane) and repeats its sixteen bytes in every 128-bit lane of Z2 (the pair's second
// block's in Z17). Q4K_PICK takes a block's mins from there as word pairs against the
// bsums (VPSHUFB by Z29) and its [d ×8, dmin ×8] (VPERMPS by ddIdx) from X6, which holds
// the F16 d and dmin of the one or two blocks converted to float32. Q4K_CHUNK broadcasts
// 32-byte chunk c to both halves of Z13 and splits it so that its low nibbles (sub-block 2c)
// fill the lower half and its high nibbles (2c+1) the upper, against 64 contiguous
// activation bytes; Z14 gets their scales as words by VPSHUFB from the repeated bytes.
// (VPERMW from the bytes widened to words did both, 10% slower for the scales, 3-4% for the
// mins.) Q4K_END adds the integer sums' halves (dotQ4_KAVX2's eight
// lanes), puts the mins' sums beside them, folds them (fold, below) and accumulates both
// at once: with Q4K_LANES acc's lower eight lanes are dotQ4_KAVX2's acc, the upper its
// accMin, each lane the same operations, so the same bits. Constants: Z20-Z23 the chunks' scale-byte indices (q4KScaleBytes, for either
// block of a pair), Y24-Y28 the decoding, Z29 the mins' byte indices (q4KMinBytes, either
// block), Z8 the first block's d indices (Z5 the next block's), Z30 and Z31 the split's.
#define Q4K_CONSTANTS \
	VBROADCASTI64X4 ·nibbleMask(SB), Z31; \
	VMOVDQU64       ·q4KScaleBytes+0(SB), Z20; \
	VMOVDQU64       ·q4KScaleBytes+64(SB), Z21; \
	VMOVDQU64       ·q4KScaleBytes+128(SB), Z22; \
	VMOVDQU64       ·q4KScaleBytes+192(SB), Z23; \
	VBROADCASTI32X4 ·q4KPickLo(SB), Y24; \
	VBROADCASTI32X4 ·q4KShift(SB), Y25; \
	VBROADCASTI32X4 ·q4KMaskLo(SB), Y26; \
	VBROADCASTI32X4 ·q4KPickHi(SB), Y27; \
	VBROADCASTI32X4 ·q4KMaskHi(SB), Y28; \
	VMOVDQU64       ·q4KMinBytes(SB), Z29; \
	VMOVDQU64       ·q4KDLanes+0(SB), Z8

#define Q4K_DECODE \
	VPSHUFB    Y24, Y3, Y15; \
	VPSRLVD    Y25, Y15, Y15; \
	VPANDD     Y26, Y15, Y15; \
	VPSHUFB    Y27, Y3, Y2; \
	VPSRLD     $2, Y2, Y2; \
	VPTERNLOGD $0xEC, Y28, Y15, Y2

#define Q4K_PICK(bytes, mins, dIdx, d) \
	VPSHUFB Z29, bytes, mins; \
	VPERMPS Z6, dIdx, d

#define Q4K_SCALES \
	VMOVDQU    4(SI), X3; \
	Q4K_DECODE; \
	VSHUFI32X4 $0x00, Z2, Z2, Z2; \
	VMOVD      (SI), X6; \
	VCVTPH2PS X6, X6; \
	Q4K_PICK(Z2, Z3, Z8, Z7)

// Q4K_SCALES_PAIR leaves the pair's d and dmin in X6 as [dA, dminA, dB, dminB], for the
// kernel's end of the pair to pick.
#define Q4K_SCALES_PAIR(bsize) \
	VMOVDQU     4(SI), X3; \
	VINSERTI128 $1, bsize+4(SI), Y3, Y3; \
	Q4K_DECODE; \
	VSHUFI32X4  $0x55, Z2, Z2, Z17; \
	VSHUFI32X4  $0x00, Z2, Z2, Z2; \
	VMOVD       (SI), X6; \
	VPINSRD     $1, bsize(SI), X6, X6; \
	VCVTPH2PS   X6, X6; \
	VPSHUFB     Z29, Z2, Z3; \
	VPSHUFB     Z29, Z17, Z12

// The two ways to split a chunk's nibbles, for Q4K_CHUNK's split argument: words of the
// upper half shifted right by 4 (VPSRLVW by Z30 = highHalfShift4), then masked to the low
// nibble; or one GFNI affine byte transform whose matrix (Z30 = nibbleMatrix, one per
// 64-bit lane) keeps bits 0-3 in the lower half and moves bits 4-7 down in the upper: one
// instruction instead of two, on CPUs with GFNI (Ice Lake, Zen 4 and later; Cascade Lake
// has VNNI without it). Both leave the same bytes.
#define SPLIT_SHIFT \
	VPSRLVW Z30, Z13, Z13; \
	VPANDD  Z31, Z13, Z13

#define SPLIT_GFNI \
	VGF2P8AFFINEQB $0, Z30, Z13, Z13

#define Q4K_CHUNK(split, woff, index, bytes) \
	VBROADCASTI64X4 woff(SI), Z13; \
	split; \
	VPSHUFB         index, bytes, Z14

#define Q4K_END(ints, intsY, aoff, areg, acc, minsY, d) \
	VEXTRACTI64X4 $1, ints, Y15; \
	VPADDD        Y15, intsY, Y15; \
	VPMADDWD      260+aoff(areg), minsY, Y14; \
	VINSERTI64X4  $1, Y14, Z15, Z15; \
	VCVTDQ2PS     Z15, Z15; \
	VBROADCASTSS  aoff(areg), Z13; \
	VMULPS        d, Z13, Z14; \
	VFMADD231PS   Z15, Z14, acc

// DOT_FRESH is DOT_TOKEN that sets ints to the products' sums rather than adding them.
#define DOT_FRESH(values, scales, off, areg, ints) \
	VPMADDUBSW off(areg), values, Z11; \
	VPMADDWD   scales, Z11, ints

// Q4K_DOTS leaves in ints the one-token kernel's integer sums of the block at SI+woff
// against the activations at DI+aoff, with its scale bytes; its nibbles start qoff bytes
// into the block, and fifth(woff, c) adds what else a chunk's values hold (Q5_K's fifth
// bits; nothing for Q4_K).
#define Q4K_DOTS(split, fifth, qoff, woff, aoff, bytes, ints) \
	Q4K_CHUNK(split, woff+qoff, Z20, bytes); \
	fifth(woff, 0); \
	DOT_FRESH(Z13, Z14, aoff+4, DI, ints); \
	Q4K_CHUNK(split, woff+qoff+32, Z21, bytes); \
	fifth(woff, 64); \
	DOT_TOKEN(Z13, Z14, aoff+68, DI, ints); \
	Q4K_CHUNK(split, woff+qoff+64, Z22, bytes); \
	fifth(woff, 128); \
	DOT_TOKEN(Z13, Z14, aoff+132, DI, ints); \
	Q4K_CHUNK(split, woff+qoff+96, Z23, bytes); \
	fifth(woff, 192); \
	DOT_TOKEN(Z13, Z14, aoff+196, DI, ints)

#define NO_FIFTH(woff, c)

// Q5K_FIFTH puts the fifth bits of chunk c's values (qh, the 32 bytes after the scales:
// bit 2c of byte l for value 64c+l below, bit 2c+1 for 64c+32+l above) at bit 4 of their
// bytes, by one GFNI affine transform per half (q5KFifthBits, c the chunk's offset there).
#define Q5K_FIFTH(woff, c) \
	VBROADCASTI64X4 woff+16(SI), Z11; \
	VGF2P8AFFINEQB  $0, ·q5KFifthBits+c(SB), Z11, Z11; \
	VPORD           Z11, Z13, Z13

// WITHIN_LANES adds the four dwords of each 128-bit lane of v up, the total in each (t
// scratch).
#define WITHIN_LANES(v, t) \
	VPSHUFD $0x4E, v, t; \
	VPADDD  t, v, v; \
	VPSHUFD $0xB1, v, t; \
	VPADDD  t, v, v

// The one-token kernels' two arithmetics, for Q4K_ROWS's setup, pair, last and finish
// arguments (block A of a pair has its sums in Z16, mins' words in Y3; block B in Z18 and
// Y12; a last block alone in Z16 and Y3).
//
// LANES is ggml_vec_dot_q4_K_q8_K's (dotQ4_KAVX2's): Q4K_END per block, with d picked as
// [d ×8, dmin ×8] (Z8, Z5: q4KDLanes), then Q4K_HALVES leaves in X of acc its sums less
// its mins, halves added (sumLanes' first step), and the row ends as hsum_float_8.
#define Q4K_LANES_SETUP \
	VMOVDQU64 ·q4KDLanes+64(SB), Z5

#define Q4K_LANES_PAIR \
	VPERMPS Z6, Z8, Z7; \
	VPERMPS Z6, Z5, Z9; \
	Q4K_END(Z16, Y16, 0, DI, Z0, Y3, Z7); \
	Q4K_END(Z18, Y18, 292, DI, Z0, Y12, Z9)

#define Q4K_LANES_LAST \
	Q4K_END(Z16, Y16, 0, DI, Z0, Y3, Z7)

#define Q4K_HALVES(acc, accY, accX) \
	VEXTRACTF64X4 $1, acc, Y2; \
	VSUBPS        Y2, accY, accY; \
	VEXTRACTF128  $1, accY, X2; \
	VADDPS        X2, accX, accX

#define Q4K_LANES_FINISH \
	Q4K_HALVES(Z0, Y0, X0); \
	CROSS_PAIRS(X0, X0, X2); \
	VHADDPS X0, X0, X0

// TOTALS is llama.cpp's repacked one (ggml_gemv_q4_K_8x8_q8_K, repacked.go): each block's
// sums, and its mins' sums, added up to an exact total, then one FMA each. A pair's four
// totals are folded at once: [I_A, I_B, M_A, M_B] by 128-bit lane (each in every dword),
// times Z14 = [dA·ydA, dB·ydB, dminA·ydA, dminB·ydB] (d picked by Z8 = q4KPairLanes, yd
// broadcast to lanes 1 and 3 by K1); acc lives in lanes 0 (sums) and 2 (mins), and takes
// A's terms, moves to lanes 1 and 3 for B's and moves back. A last block alone gets
// [I, ·, M, ·] (its d picked the same way, from [d, dmin, 0, 0]). The row ends as lane 0
// less lane 2.
#define Q4K_TOTALS_SETUP \
	VMOVDQU64 ·q4KPairLanes(SB), Z8; \
	MOVL      $0xF0F0, AX; \
	KMOVW     AX, K1

#define Q4K_TOTALS_PAIR \
	VPERMPS       Z6, Z8, Z7; \
	VPMADDWD      260(DI), Y3, Y19; \
	VPMADDWD      552(DI), Y12, Y14; \
	VINSERTI64X4  $1, Y14, Z19, Z19; \
	VSHUFI64X2    $0x44, Z18, Z16, Z15; \
	VSHUFI64X2    $0xEE, Z18, Z16, Z16; \
	VPADDD        Z15, Z16, Z16; \
	VSHUFI64X2    $0x88, Z19, Z16, Z15; \
	VSHUFI64X2    $0xDD, Z19, Z16, Z16; \
	VPADDD        Z15, Z16, Z16; \
	WITHIN_LANES(Z16, Z15); \
	VCVTDQ2PS     Z16, Z16; \
	VBROADCASTSS  (DI), Z14; \
	VBROADCASTSS  292(DI), K1, Z14; \
	VMULPS        Z7, Z14, Z14; \
	VFMADD231PS   Z16, Z14, Z0; \
	VSHUFI64X2    $0xB1, Z0, Z0, Z0; \
	VFMADD231PS   Z16, Z14, Z0; \
	VSHUFI64X2    $0xB1, Z0, Z0, Z0

#define Q4K_TOTALS_LAST \
	VEXTRACTI64X4 $1, Z16, Y15; \
	VPADDD        Y15, Y16, Y15; \
	VPMADDWD      260(DI), Y3, Y14; \
	VINSERTI64X4  $1, Y14, Z15, Z15; \
	VSHUFI64X2    $0xB1, Z15, Z15, Z16; \
	VPADDD        Z15, Z16, Z16; \
	WITHIN_LANES(Z16, Z15); \
	VCVTDQ2PS     Z16, Z16; \
	VBROADCASTSS  (DI), Z14; \
	VMULPS        Z7, Z14, Z14; \
	VFMADD231PS   Z16, Z14, Z0

#define Q4K_TOTALS_FINISH \
	VEXTRACTF32X4 $2, Z0, X2; \
	VSUBSS        X2, X0, X0

// Q4K_ROWS is the one-token kernel (dotQ4_KRowsVNNI, dotQ4_KRowsGFNI, and with fifth bits
// dotQ5_KRowsGFNI; in TOTALS the repacked ones), once Z30 holds the split's constant:
// blocks of bsize bytes (pair, two) whose nibbles start at qoff. Blocks go in pairs, whose
// scales are decoded together (one 128-bit lane each), then a last block alone when nb is
// odd.
#define Q4K_ROWS(split, fifth, setup, pairEnd, lastEnd, finish, bsize, pair, qoff) \
	Q4K_CONSTANTS; \
	setup; \
	ROWS_BEGIN(q4krow); \
	VPXORD Z0, Z0, Z0; \
	CMPQ   CX, $2; \
	JLT    q4klast; \
q4kpair: \
	PREFETCH_AHEAD; \
	PREFETCHT1 4352(SI); \
	PREFETCH_NEAR; \
	PREFETCHT0 768(SI); \
	Q4K_SCALES_PAIR(bsize); \
	Q4K_DOTS(split, fifth, qoff, 0, 0, Z2, Z16); \
	Q4K_DOTS(split, fifth, qoff, bsize, 292, Z17, Z18); \
	pairEnd; \
	ADDQ  $pair, SI; \
	ADDQ  $584, DI; \
	SUBQ  $2, CX; \
	CMPQ  CX, $2; \
	JGE   q4kpair; \
	TESTQ CX, CX; \
	JZ    q4kdone; \
q4klast: \
	PREFETCH_AHEAD; \
	Q4K_SCALES; \
	Q4K_DOTS(split, fifth, qoff, 0, 0, Z2, Z16); \
	lastEnd; \
q4kdone: \
	finish; \
	ROWS_END(q4krow)

#define Q4K_LANES_ROWS(split, fifth, bsize, pair, qoff) \
	Q4K_ROWS(split, fifth, Q4K_LANES_SETUP, Q4K_LANES_PAIR, Q4K_LANES_LAST, Q4K_LANES_FINISH, bsize, pair, qoff)

#define Q4K_TOTALS_ROWS(split) \
	Q4K_ROWS(split, NO_FIFTH, Q4K_TOTALS_SETUP, Q4K_TOTALS_PAIR, Q4K_TOTALS_LAST, Q4K_TOTALS_FINISH, 144, 288, 16)

// func dotQ4_KRowsVNNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)
TEXT ·dotQ4_KRowsVNNI(SB), NOSPLIT, $0-48
	VMOVDQU64 ·highHalfShift4(SB), Z30
	Q4K_LANES_ROWS(SPLIT_SHIFT, NO_FIFTH, 144, 288, 16)

// func dotQ4_KRowsGFNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)
TEXT ·dotQ4_KRowsGFNI(SB), NOSPLIT, $0-48
	VMOVDQU64 ·nibbleMatrix(SB), Z30
	Q4K_LANES_ROWS(SPLIT_GFNI, NO_FIFTH, 144, 288, 16)

// func dotQ4_KRepackedRowsVNNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)
TEXT ·dotQ4_KRepackedRowsVNNI(SB), NOSPLIT, $0-48
	VMOVDQU64 ·highHalfShift4(SB), Z30
	Q4K_TOTALS_ROWS(SPLIT_SHIFT)

// func dotQ4_KRepackedRowsGFNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)
TEXT ·dotQ4_KRepackedRowsGFNI(SB), NOSPLIT, $0-48
	VMOVDQU64 ·nibbleMatrix(SB), Z30
	Q4K_TOTALS_ROWS(SPLIT_GFNI)

// func dotQ5_KRowsGFNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)
//
// Q5_K: Q4_K's block with the fifth bits (qh) between the scales and the nibbles, as
// dotQ5_KAVX2 (values 0-31, the same scales, mins and float steps).
TEXT ·dotQ5_KRowsGFNI(SB), NOSPLIT, $0-48
	VMOVDQU64 ·nibbleMatrix(SB), Z30
	Q4K_LANES_ROWS(SPLIT_GFNI, Q5K_FIFTH, 176, 352, 48)

// Q4K_TOKENS4 is one chunk against the four tokens, by dot (DOT_FRESH or DOT_TOKEN).
#define Q4K_TOKENS4(split, dot, woff, index, aoff) \
	Q4K_CHUNK(split, woff, index, Z2); \
	dot(Z13, Z14, aoff, R8, Z16); \
	dot(Z13, Z14, aoff, R9, Z17); \
	dot(Z13, Z14, aoff, R10, Z18); \
	dot(Z13, Z14, aoff, R11, Z19)

// Q4K_BLOCK4 leaves each token's integer sums of a block in Z16-Z19.
#define Q4K_BLOCK4(split) \
	Q4K_TOKENS4(split, DOT_FRESH, 16, Z20, 4); \
	Q4K_TOKENS4(split, DOT_TOKEN, 48, Z21, 68); \
	Q4K_TOKENS4(split, DOT_TOKEN, 80, Z22, 132); \
	Q4K_TOKENS4(split, DOT_TOKEN, 112, Z23, 196)

// Q4K_TOKENS4_ROWS is the four-token kernel in LANES (dotQ4_KTokens4RowsVNNI and …GFNI,
// for prefill): Q4K_ROWS's one-block steps for four activation vectors at once, each
// block's scales and each chunk's nibbles unpacked once for all four; the sums come out
// in sumLanes4's order (each token's halves added, then lanes 0+2 and 1+3, then those two).
#define Q4K_TOKENS4_ROWS(split) \
	Q4K_CONSTANTS; \
	TOKENS4_ROWS_BEGIN(q4k4row); \
	VPXORD Z0, Z0, Z0; \
	VPXORD Z1, Z1, Z1; \
	VPXORD Z4, Z4, Z4; \
	VPXORD Z5, Z5, Z5; \
q4k4block: \
	PREFETCH_AHEAD; \
	Q4K_SCALES; \
	Q4K_BLOCK4(split); \
	Q4K_END(Z16, Y16, 0, R8, Z0, Y3, Z7); \
	Q4K_END(Z17, Y17, 0, R9, Z1, Y3, Z7); \
	Q4K_END(Z18, Y18, 0, R10, Z4, Y3, Z7); \
	Q4K_END(Z19, Y19, 0, R11, Z5, Y3, Z7); \
	NEXT_BLOCK4(144); \
	JNZ  q4k4block; \
	Q4K_HALVES(Z0, Y0, X0); \
	Q4K_HALVES(Z1, Y1, X1); \
	Q4K_HALVES(Z4, Y4, X4); \
	Q4K_HALVES(Z5, Y5, X5); \
	CROSS_PAIRS(X0, X1, X2); \
	CROSS_PAIRS(X4, X5, X2); \
	VHADDPS X4, X0, X0; \
	TOKENS4_ROWS_END(q4k4row); \
	CLEAR_HIGH; \
	RET

// func dotQ4_KTokens4RowsVNNI(w, a0, a1, a2, a3 unsafe.Pointer, nb, rows, rowBytes int, o0, o1, o2, o3 *float32)
TEXT ·dotQ4_KTokens4RowsVNNI(SB), NOSPLIT, $0-96
	VMOVDQU64 ·highHalfShift4(SB), Z30
	Q4K_TOKENS4_ROWS(SPLIT_SHIFT)

// func dotQ4_KTokens4RowsGFNI(w, a0, a1, a2, a3 unsafe.Pointer, nb, rows, rowBytes int, o0, o1, o2, o3 *float32)
TEXT ·dotQ4_KTokens4RowsGFNI(SB), NOSPLIT, $0-96
	VMOVDQU64 ·nibbleMatrix(SB), Z30
	Q4K_TOKENS4_ROWS(SPLIT_GFNI)

// Q6_K. Per half h of a block, Q6K_HALF_A loads ql's 64 bytes into Z13 (values 128h+0..63
// in their low nibbles, 128h+64..127 in their high) and qh's 32 bytes broadcast to both
// halves of Z14, and leaves the unsigned 6-bit values 128h+0..63 in Z15 (each value's two
// high bits moved to bits 4-5 and merged by VPTERNLOGD: Z15 |= Z11 & 0x30) and their
// 16-value sub-blocks' scales as words in Z12 (VPSHUFB from half h's eight scale words,
// repeated in every lane of Z22 or Z23; the sixteen as words stay in Y10 for the total);
// Q6K_HALF_B does the same for 128h+64..127 into Z13.
// A token's integer sums start from the -32 offset, -32·Σ scale·bsum (Q6K_START, below),
// in eight lanes, each exact, as the AVX2 kernel's.
#define Q6K_CONSTANTS \
	VBROADCASTI64X4 ·nibbleMask(SB), Z31; \
	VBROADCASTI64X4 ·bits45Mask(SB), Z30; \
	VMOVDQU64       ·q6KHighBitsLo(SB), Z29; \
	VMOVDQU64       ·q6KHighBitsHi(SB), Z28; \
	VMOVDQU64       ·q6KScaleBytes+0(SB), Z20; \
	VMOVDQU64       ·q6KScaleBytes+64(SB), Z21

#define Q6K_HALF_A(qloff, qhoff, index, scales) \
	VMOVDQU64       qloff(SI), Z13; \
	VBROADCASTI64X4 qhoff(SI), Z14; \
	VPANDD          Z31, Z13, Z15; \
	VPSLLVW         Z29, Z14, Z11; \
	VPTERNLOGD      $0xF8, Z30, Z11, Z15; \
	VPSHUFB         index, scales, Z12

#define Q6K_HALF_B(index, scales) \
	VPSRLW     $4, Z13, Z13; \
	VPANDD     Z31, Z13, Z13; \
	VPSRLVW    Z28, Z14, Z14; \
	VPTERNLOGD $0xF8, Z30, Z14, Z13; \
	VPSHUFB    index, scales, Z12

// Q6K_OFFSETS sets Y9 to the block's scales times -32 as words (at most 32·128 in
// magnitude), from the scale words in Y10. Q6K_START begins a token's sixteen integer
// lanes (intsY of them) with the offset, Σ bsum·(-32·scale) by pairs in the lower eight:
// the 256-bit write zeroes the upper eight, so it also stands for zeroing them. The offset
// used to be taken at the end (its own VPMADDWD, shift and subtraction each block and
// token); the lanes are exact integers, so they come out the same, and the four-token
// kernel in L1 takes 4-5% less time (18.0-18.9 ns a row of 2048 values and token, from
// 19.1-19.5). Q6K_TOTAL folds the sixteen lanes to eight.
#define Q6K_OFFSETS \
	VPSLLW $5, Y10, Y11; \
	VPXORD Y9, Y9, Y9; \
	VPSUBW Y11, Y9, Y9

#define Q6K_START(areg, intsY) \
	VPMADDWD 260(areg), Y9, intsY

#define Q6K_TOTAL(ints, intsY, out) \
	VEXTRACTI64X4 $1, ints, Y15; \
	VPADDD        Y15, intsY, out

// Q6K_BLOCK_START takes a block's scales (as words in Y10, each half's eight repeated in
// Z22 and Z23) and offsets; Q6K_BLOCK_DOTS unpacks its two halves and runs tokens (a macro
// of the values and their activations' offset: Q6K_TOKENS1, 2 or 4) on each quarter;
// Q6K_D leaves its d in every lane of X14 and Z3.
#define Q6K_BLOCK_START \
	VPMOVSXBW  192(SI), Y10; \
	VSHUFI32X4 $0x00, Z10, Z10, Z22; \
	VSHUFI32X4 $0x55, Z10, Z10, Z23; \
	Q6K_OFFSETS

#define Q6K_BLOCK_DOTS(tokens) \
	Q6K_HALF_A(0, 128, Z20, Z22); \
	tokens(Z15, 4); \
	Q6K_HALF_B(Z21, Z22); \
	tokens(Z13, 68); \
	Q6K_HALF_A(64, 160, Z20, Z23); \
	tokens(Z15, 132); \
	Q6K_HALF_B(Z21, Z23); \
	tokens(Z13, 196)

#define Q6K_D \
	VPBROADCASTW 208(SI), X14; \
	VCVTPH2PS    X14, X14; \
	VBROADCASTSS X14, Z3

// Q6K_TOKENS1 is DOT_TOKEN of values against the one token's activations at aoff.
#define Q6K_TOKENS1(values, aoff) \
	DOT_TOKEN(values, Z12, aoff, DI, Z16)

// Q6K_PAIR is the one-token kernel's end of a block (Q6K_TOTAL, conversion, and the
// float step by yd·d) for two tokens at once: intsA's eight lanes folded into the lower
// half of Z1, intsB's into the upper, converted, and added times [yd_A·d ×8 | yd_B·d ×8]
// into acc, whose lower eight lanes are token A's sums, the upper token B's (every lane
// the one-token kernel's operations). d in every lane of Z3; K2 selects the upper eight
// lanes; Z2 scratch. A pair in one register takes a third fewer instructions than two
// tokens one by one.
#define Q6K_PAIR(intsA, intsB, aregA, aregB, acc) \
	VSHUFI64X2   $0x44, intsB, intsA, Z1; \
	VSHUFI64X2   $0xEE, intsB, intsA, Z2; \
	VPADDD       Z2, Z1, Z1; \
	VCVTDQ2PS    Z1, Z1; \
	VBROADCASTSS (aregA), Z2; \
	VBROADCASTSS (aregB), K2, Z2; \
	VMULPS       Z3, Z2, Z2; \
	VFMADD231PS  Z2, Z1, acc

// Q6K_PAIR_SUMS adds up the pair's eight lanes each as hsum_float_8: token A's in acc's
// lower half (accY, accX) to accX, token B's (moved to yb) to xb.
#define Q6K_PAIR_SUMS(acc, accY, accX, xb, yb) \
	VEXTRACTF64X4 $1, acc, yb; \
	HSUM_FLOAT_8(accY, accX, X13); \
	HSUM_FLOAT_8(yb, xb, X13)

// func dotQ6_KRowsVNNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)
//
// The block's eight integer lanes are converted and accumulated by yd·d into Y0, which
// the row ends with as hsum_float_8 (dotQ6_KAVX2's order, ggml's).
TEXT ·dotQ6_KRowsVNNI(SB), NOSPLIT, $0-48
	Q6K_CONSTANTS
	ROWS_BEGIN(q6krow)
	VXORPS X0, X0, X0

q6kblock:
	PREFETCH_AHEAD
	PREFETCH_NEAR
	Q6K_BLOCK_START
	Q6K_START(DI, Y16)
	Q6K_BLOCK_DOTS(Q6K_TOKENS1)
	Q6K_TOTAL(Z16, Y16, Y1)
	VCVTDQ2PS    Y1, Y1
	VMOVSS       (DI), X13        // yd
	VPBROADCASTW 208(SI), X14
	VCVTPH2PS    X14, X14         // d
	VMULSS       X14, X13, X13
	VBROADCASTSS X13, Y13
	VFMADD231PS  Y1, Y13, Y0
	ADDQ $210, SI
	ADDQ $292, DI
	DECQ CX
	JNZ  q6kblock

	HSUM_FLOAT_8(Y0, X0, X13)
	ROWS_END(q6krow)

// Q6K_TOKENS4 is DOT_TOKEN of values against the four tokens' activations at aoff.
#define Q6K_TOKENS4(values, aoff) \
	DOT_TOKEN(values, Z12, aoff, R8, Z16); \
	DOT_TOKEN(values, Z12, aoff, R9, Z17); \
	DOT_TOKEN(values, Z12, aoff, R10, Z18); \
	DOT_TOKEN(values, Z12, aoff, R11, Z19)

// func dotQ6_KTokens4RowsVNNI(w, a0, a1, a2, a3 unsafe.Pointer, nb, rows, rowBytes int, o0, o1, o2, o3 *float32)
//
// dotQ6_KRowsVNNI for four activation vectors at once (prefill): each half block's
// 6-bit values and scales are unpacked once for all four; tokens 0 and 1 accumulate in
// Z5, 2 and 3 in Z7 (Q6K_PAIR), each lane as the one-token kernel's, so its bits.
TEXT ·dotQ6_KTokens4RowsVNNI(SB), NOSPLIT, $0-96
	Q6K_CONSTANTS
	MOVW  $0xFF00, AX
	KMOVW AX, K2
	TOKENS4_ROWS_BEGIN(q6k4row)
	VPXORD Z5, Z5, Z5
	VPXORD Z7, Z7, Z7

q6k4block:
	PREFETCH_AHEAD
	Q6K_BLOCK_START
	Q6K_START(R8, Y16)
	Q6K_START(R9, Y17)
	Q6K_START(R10, Y18)
	Q6K_START(R11, Y19)
	Q6K_BLOCK_DOTS(Q6K_TOKENS4)
	Q6K_D
	Q6K_PAIR(Z16, Z17, R8, R9, Z5)
	Q6K_PAIR(Z18, Z19, R10, R11, Z7)
	NEXT_BLOCK4(210)
	JNZ  q6k4block

	Q6K_PAIR_SUMS(Z7, Y7, X7, X8, Y8)
	Q6K_PAIR_SUMS(Z5, Y5, X5, X6, Y6)
	LANES4_TO_X0(X5, X6, X7, X8)
	TOKENS4_ROWS_END(q6k4row)
	CLEAR_HIGH
	RET

// Q6K_TOKENS2 is DOT_TOKEN of values against the two tokens' activations at aoff.
#define Q6K_TOKENS2(values, aoff) \
	DOT_TOKEN(values, Z12, aoff, R8, Z16); \
	DOT_TOKEN(values, Z12, aoff, R9, Z17)

// func dotQ6_KTokens2RowsVNNI(w, a0, a1 unsafe.Pointer, nb, rows, rowBytes int, o0, o1 *float32)
//
// dotQ6_KTokens4RowsVNNI for two activation vectors (two sequences decoding together, the
// output head's pair): the values and scales unpacked once for both, each token's lanes
// as the one-token kernel's, so its bits.
TEXT ·dotQ6_KTokens2RowsVNNI(SB), NOSPLIT, $0-64
	Q6K_CONSTANTS
	MOVW  $0xFF00, AX
	KMOVW AX, K2
	TOKENS2_ROWS_BEGIN(q6k2row)
	VPXORD Z5, Z5, Z5

q6k2block:
	PREFETCH_AHEAD
	Q6K_BLOCK_START
	Q6K_START(R8, Y16)
	Q6K_START(R9, Y17)
	Q6K_BLOCK_DOTS(Q6K_TOKENS2)
	Q6K_D
	Q6K_PAIR(Z16, Z17, R8, R9, Z5)
	NEXT_BLOCK2(210)
	JNZ  q6k2block

	Q6K_PAIR_SUMS(Z5, Y5, X5, X6, Y6)
	TOKENS2_ROWS_END(q6k2row, X5, X6)
	CLEAR_HIGH
	RET

// Q4_K in gemv's arithmetic, four rows at a time (dotQ4_KRepackedRows4GFNI): the rows
// kernel above spends most of its shuffles on per-row work that four rows can share. Per
// block, the four rows' scale bytes are decoded at once (row r in 128-bit lane r of Z5),
// their mins' sums come from one VPMADDWD pair against the bsums, their d and dmin from
// one conversion, and their sixteen-lane integer sums are folded to one lane each by a
// shared tree. Each row's 128 nibble bytes are read as two 64-byte halves: the low nibbles
// (VPANDD) hold sub-blocks 0 and 2 (4 and 6), the high ones (GFNI, Z30) 1 and 3 (5 and 7),
// against the activations rearranged to match once per block for all four rows (Z1-Z4).
// VPDPBUSD sums four products to a dword (at most 4·15·128 in magnitude, so VPACKSSDW
// keeps it exact) and VPMADDWD/VPDPWSSD multiply the packed words by their sub-blocks'
// scales (VPERMB from Z5, index Z16+2r and Z17+2r, the odd bytes zeroed by K1). The block
// totals I and M are the repacked kernel's exact integers, so the float steps (one FMA
// each, lane r of Z0: [I-acc, ·, M-acc, ·]) give its bits. Registers: Z0 the sums, Z1-Z4
// activations, Z5 scales, Z6 d·yd and dmin·yd, Z7 mins' sums, Z8-Z11 the rows' integer
// sums, Z12-Z15 and Z24-Z28 scratch, Z29 d's lane index, Z30 the high-nibble matrix, Z31
// the nibble mask; R8-R10 rows 1-3 of the block in SI, BX the row stride, R13 three.

// Q4K4_ROW leaves in sum row's integer sums of the block at (row) against Z1-Z4.
#define Q4K4_ROW(row, sum, idxLo, idxHi) \
	VMOVDQU64      16(row), Z12; \
	VMOVDQU64      80(row), Z13; \
	VPANDD         Z31, Z12, Z14; \
	VGF2P8AFFINEQB $0, Z30, Z12, Z12; \
	VPANDD         Z31, Z13, Z15; \
	VGF2P8AFFINEQB $0, Z30, Z13, Z13; \
	VPXORD         Z24, Z24, Z24; \
	VPDPBUSD       Z1, Z14, Z24; \
	VPXORD         Z25, Z25, Z25; \
	VPDPBUSD       Z2, Z12, Z25; \
	VPXORD         Z26, Z26, Z26; \
	VPDPBUSD       Z3, Z15, Z26; \
	VPXORD         Z27, Z27, Z27; \
	VPDPBUSD       Z4, Z13, Z27; \
	VPACKSSDW      Z25, Z24, Z24; \
	VPACKSSDW      Z27, Z26, Z26; \
	VPERMB.Z       Z5, idxLo, K1, Z25; \
	VPERMB.Z       Z5, idxHi, K1, Z27; \
	VPMADDWD       Z25, Z24, sum; \
	VPDPWSSD       Z27, Z26, sum

// Q4K4_PREFETCH asks for the lines of row's block two groups on (R15 = eight rows ahead)
// into L2, and those 512 bytes on in the row into L1, as PREFETCH_AHEAD and PREFETCH_NEAR
// do for the one-row kernels. Out-of-cache Q4_K [2048 → 768] mat-vecs, ten alternating
// runs on the build machine, medians (1 / 2 threads): no prefetch 7.4 / 14.9 GB/s, L1 only
// 9.3 / 17.5, L2 only (four or eight rows ahead) 12.2-14.1 / 23.3-25.9, both 13.5-13.7 /
// 24.7-25.3 (the one-row kernel 12.9-13.0 / 24.0-24.1); a linear stream of L2 prefetches
// over the group, 8 KiB on, did no better.
#define Q4K4_PREFETCH(row) \
	PREFETCHT1 (row)(R15*1); \
	PREFETCHT1 64(row)(R15*1); \
	PREFETCHT1 128(row)(R15*1); \
	PREFETCHT0 512(row); \
	PREFETCHT0 576(row); \
	PREFETCHT0 640(row)

// Q4K4_GROUP_BEGIN sets up a group of four rows' block at SI: R8-R10 the other three rows,
// their prefetches.
#define Q4K4_GROUP_BEGIN \
	LEAQ (SI)(BX*1), R8; \
	LEAQ (SI)(BX*2), R9; \
	LEAQ (SI)(R13*1), R10; \
	Q4K4_PREFETCH(SI); \
	Q4K4_PREFETCH(R8); \
	Q4K4_PREFETCH(R9); \
	Q4K4_PREFETCH(R10)

// Q4K4_ACTS loads the token's activations at (a) as the nibble halves meet them:
// [0-31 | 64-95], [32-63 | 96-127], … in z1-z4.
#define Q4K4_ACTS(a, y1, z1, y2, z2, y3, z3, y4, z4) \
	VMOVDQU64    4(a), y1; \
	VINSERTI64X4 $1, 68(a), z1, z1; \
	VMOVDQU64    36(a), y2; \
	VINSERTI64X4 $1, 100(a), z2, z2; \
	VMOVDQU64    132(a), y3; \
	VINSERTI64X4 $1, 196(a), z3, z3; \
	VMOVDQU64    164(a), y4; \
	VINSERTI64X4 $1, 228(a), z4, z4

// Q4K4_SCALES decodes the four rows' scale bytes as Q4K_DECODE does, to [sc0..7, m0..7]
// a lane of Z5 (Z12 scratch), and leaves the mins as words against the bsums' pairs in
// Z12 and Z13.
#define Q4K4_SCALES \
	VMOVDQU      4(SI), X5; \
	VINSERTI32X4 $1, 4(R8), Z5, Z5; \
	VINSERTI32X4 $2, 4(R9), Z5, Z5; \
	VINSERTI32X4 $3, 4(R10), Z5, Z5; \
	VPSHUFB      ·q4K4Decode+0(SB), Z5, Z12; \
	VPSRLVD      ·q4K4Decode+64(SB), Z12, Z12; \
	VPANDD       ·q4K4Decode+128(SB), Z12, Z12; \
	VPSHUFB      ·q4K4Decode+192(SB), Z5, Z5; \
	VPSRLD       $2, Z5, Z5; \
	VPTERNLOGD   $0xEC, ·q4K4Decode+256(SB), Z12, Z5; \
	VPSHUFB      ·q4K4MinWords+0(SB), Z5, Z12; \
	VPSHUFB      ·q4K4MinWords+64(SB), Z5, Z13

// Q4K4_MINS leaves the token's mins' sums in mins: lane r gets four dwords adding up to
// Σ m_j·(bsum_2j + bsum_2j+1), from the token's bsums at (a) (Z14, Z15 scratch).
#define Q4K4_MINS(a, mins) \
	VBROADCASTI32X4 260(a), Z14; \
	VBROADCASTI32X4 276(a), Z15; \
	VPMADDWD        Z14, Z12, mins; \
	VPMADDWD        Z15, Z13, Z15; \
	VPADDD          Z15, mins, mins

// Q4K4_D leaves [d, d, dmin, dmin] for row r in lane r of Z6, by way of the lane index
// in idx.
#define Q4K4_D(idx) \
	VMOVD        (SI), X6; \
	VPINSRD      $1, (R8), X6, X6; \
	VPINSRD      $2, (R9), X6, X6; \
	VPINSRD      $3, (R10), X6, X6; \
	VCVTPH2PS    X6, Y6; \
	VPERMPS      Z6, idx, Z6

// Q4K4_FOLD folds each row's sixteen dwords (r0-r3) to four in its lane, then beside the
// mins' four to [I, I, M, M], and takes the float step into acc with factors dyd (Z12-Z15
// scratch).
#define Q4K4_FOLD(r0, r1, r2, r3, mins, dyd, acc) \
	VSHUFI64X2  $0x44, r1, r0, Z12; \
	VSHUFI64X2  $0xEE, r1, r0, Z13; \
	VPADDD      Z13, Z12, Z12; \
	VSHUFI64X2  $0x44, r3, r2, Z13; \
	VSHUFI64X2  $0xEE, r3, r2, Z14; \
	VPADDD      Z14, Z13, Z13; \
	VSHUFI64X2  $0x88, Z13, Z12, Z14; \
	VSHUFI64X2  $0xDD, Z13, Z12, Z15; \
	VPADDD      Z15, Z14, Z14; \
	VPUNPCKLQDQ mins, Z14, Z12; \
	VPUNPCKHQDQ mins, Z14, Z13; \
	VPADDD      Z13, Z12, Z12; \
	VPSHUFD     $0xB1, Z12, Z13; \
	VPADDD      Z13, Z12, Z12; \
	VCVTDQ2PS   Z12, Z12; \
	VFMADD231PS dyd, Z12, acc

// Q4K4_STORE stores row r's result, I-acc − M-acc, from lane r of acc (accX its lower
// 128 bits) to out[r] (Z12 scratch) and moves out on.
#define Q4K4_STORE(acc, accX, out) \
	VPSRLDQ   $8, acc, Z12; \
	VSUBPS    Z12, acc, acc; \
	VMOVDQU64 ·q4K4OutLanes(SB), Z12; \
	VPERMPS   acc, Z12, acc; \
	VMOVUPS   accX, (out); \
	ADDQ      $16, out

// Q4K4_SETUP loads what every block of both kernels needs: K1 (the even bytes), BX the
// row stride, R13 three of it and R15 eight, R12 the first group, R14 the groups.
#define Q4K4_SETUP(stride, w, groups) \
	MOVQ  $0x5555555555555555, AX; \
	KMOVQ AX, K1; \
	MOVQ  stride, BX; \
	LEAQ  (BX)(BX*2), R13; \
	LEAQ  (BX*8), R15; \
	MOVQ  w, R12; \
	MOVQ  groups, R14

// func dotQ4_KRepackedRows4GFNI(w, a unsafe.Pointer, nb, groups, rowBytes int, out *float32)
TEXT ·dotQ4_KRepackedRows4GFNI(SB), NOSPLIT, $0-48
	VBROADCASTI64X4 ·nibbleMask(SB), Z31
	VPBROADCASTQ    ·nibbleMatrix+32(SB), Z30 // highNibble: every byte's high nibble moved down
	VMOVDQU64       ·q4K4DLanes(SB), Z29
	VMOVDQU64       ·q4K4ScaleWords+0(SB), Z16
	VMOVDQU64       ·q4K4ScaleWords+64(SB), Z17
	VMOVDQU64       ·q4K4ScaleWords+128(SB), Z18
	VMOVDQU64       ·q4K4ScaleWords+192(SB), Z19
	VMOVDQU64       ·q4K4ScaleWords+256(SB), Z20
	VMOVDQU64       ·q4K4ScaleWords+320(SB), Z21
	VMOVDQU64       ·q4K4ScaleWords+384(SB), Z22
	VMOVDQU64       ·q4K4ScaleWords+448(SB), Z23
	Q4K4_SETUP(rowBytes+32(FP), w+0(FP), groups+24(FP))
	MOVQ            out+40(FP), R11

q4k4group:
	MOVQ   R12, SI
	MOVQ   a+8(FP), DI
	MOVQ   nb+16(FP), CX
	VPXORD Z0, Z0, Z0

q4k4block:
	Q4K4_GROUP_BEGIN
	Q4K4_ACTS(DI, Y1, Z1, Y2, Z2, Y3, Z3, Y4, Z4)
	Q4K4_SCALES
	Q4K4_MINS(DI, Z7)
	Q4K4_D(Z29)
	VMULPS.BCST (DI), Z6, Z6
	Q4K4_ROW(SI, Z8, Z16, Z17)
	Q4K4_ROW(R8, Z9, Z18, Z19)
	Q4K4_ROW(R9, Z10, Z20, Z21)
	Q4K4_ROW(R10, Z11, Z22, Z23)
	Q4K4_FOLD(Z8, Z9, Z10, Z11, Z7, Z6, Z0)
	ADDQ $144, SI
	ADDQ $292, DI
	DECQ CX
	JNZ  q4k4block

	Q4K4_STORE(Z0, X0, R11)
	LEAQ (R12)(BX*4), R12
	DECQ R14
	JNZ  q4k4group
	CLEAR_HIGH
	RET

// The same for two tokens (dotQ4_KRepackedRows4x2GFNI): what depends on the rows alone
// (prefetches, scales, d and dmin, the nibble split and the scale words) is done once for
// both, the products, folds and float steps for each as the one-token kernel does them,
// so each token's bits. Two sequences decoding together, or two tokens routed to one
// expert, read the rows once at about 1.5 times one token's instructions, where the packed
// kernels first pack the group (about three tokens' worth) and running the one-token
// kernel twice costs two. Registers: token A as the one-token kernel's (Z0, Z1-Z4, Z6,
// Z7, Z8-Z11 its rows' sums), token B in Z22, Z16-Z19, Z20, Z21, Z23-Z26; Z5 the scales,
// Z12-Z15 the nibbles, Z27 and Z28 the scale words (their indices loaded in turn), Z29-Z31
// the products' scratch. With no register left for the nibble mask and the high-nibble
// matrix, those are broadcast from memory.

// Q4K42_NIBBLES splits the row's nibbles for both tokens: low halves in Z14 and Z15, high
// in Z12 and Z13 (as Q4K4_ROW), and its scale words for the low and high halves in Z27
// and Z28 (the indices at ·q4K4ScaleWords+idx).
#define Q4K42_NIBBLES(row, idx) \
	VMOVDQU64           16(row), Z12; \
	VMOVDQU64           80(row), Z13; \
	VPANDD.BCST         ·nibbleMask(SB), Z12, Z14; \
	VGF2P8AFFINEQB.BCST $0, ·nibbleMatrix+32(SB), Z12, Z12; \
	VPANDD.BCST         ·nibbleMask(SB), Z13, Z15; \
	VGF2P8AFFINEQB.BCST $0, ·nibbleMatrix+32(SB), Z13, Z13; \
	VMOVDQU64           ·q4K4ScaleWords+idx(SB), Z27; \
	VPERMB.Z            Z5, Z27, K1, Z27; \
	VMOVDQU64           ·q4K4ScaleWords+idx+64(SB), Z28; \
	VPERMB.Z            Z5, Z28, K1, Z28

// Q4K42_PRODUCTS is Q4K4_ROW's products for the token whose activations are a1-a4.
#define Q4K42_PRODUCTS(a1, a2, a3, a4, sum) \
	VPXORD    Z29, Z29, Z29; \
	VPDPBUSD  a1, Z14, Z29; \
	VPXORD    Z30, Z30, Z30; \
	VPDPBUSD  a2, Z12, Z30; \
	VPACKSSDW Z30, Z29, Z29; \
	VPXORD    Z30, Z30, Z30; \
	VPDPBUSD  a3, Z15, Z30; \
	VPXORD    Z31, Z31, Z31; \
	VPDPBUSD  a4, Z13, Z31; \
	VPACKSSDW Z31, Z30, Z30; \
	VPMADDWD  Z27, Z29, sum; \
	VPDPWSSD  Z28, Z30, sum

#define Q4K42_ROW(row, sumA, sumB, idx) \
	Q4K42_NIBBLES(row, idx); \
	Q4K42_PRODUCTS(Z1, Z2, Z3, Z4, sumA); \
	Q4K42_PRODUCTS(Z16, Z17, Z18, Z19, sumB)

// func dotQ4_KRepackedRows4x2GFNI(w, a, b unsafe.Pointer, nb, groups, rowBytes int, outA, outB *float32)
TEXT ·dotQ4_KRepackedRows4x2GFNI(SB), NOSPLIT, $0-64
	Q4K4_SETUP(rowBytes+40(FP), w+0(FP), groups+32(FP))
	MOVQ outA+48(FP), R11
	MOVQ outB+56(FP), AX

q4k42group:
	MOVQ   R12, SI
	MOVQ   a+8(FP), DI
	MOVQ   b+16(FP), DX
	MOVQ   nb+24(FP), CX
	VPXORD Z0, Z0, Z0
	VPXORD Z22, Z22, Z22

q4k42block:
	Q4K4_GROUP_BEGIN
	Q4K4_ACTS(DI, Y1, Z1, Y2, Z2, Y3, Z3, Y4, Z4)
	Q4K4_ACTS(DX, Y16, Z16, Y17, Z17, Y18, Z18, Y19, Z19)
	Q4K4_SCALES
	Q4K4_MINS(DI, Z7)
	Q4K4_MINS(DX, Z21)
	VMOVDQU64   ·q4K4DLanes(SB), Z29
	Q4K4_D(Z29)
	VMULPS.BCST (DX), Z6, Z20
	VMULPS.BCST (DI), Z6, Z6
	Q4K42_ROW(SI, Z8, Z23, 0)
	Q4K42_ROW(R8, Z9, Z24, 128)
	Q4K42_ROW(R9, Z10, Z25, 256)
	Q4K42_ROW(R10, Z11, Z26, 384)
	Q4K4_FOLD(Z8, Z9, Z10, Z11, Z7, Z6, Z0)
	Q4K4_FOLD(Z23, Z24, Z25, Z26, Z21, Z20, Z22)
	ADDQ $144, SI
	ADDQ $292, DI
	ADDQ $292, DX
	DECQ CX
	JNZ  q4k42block

	Q4K4_STORE(Z0, X0, R11)
	Q4K4_STORE(Z22, X22, AX)
	LEAQ (R12)(BX*4), R12
	DECQ R14
	JNZ  q4k42group
	CLEAR_HIGH
	RET
