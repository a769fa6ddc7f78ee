//go:build goexperiment.simd

#include "textflag.h"

// AVX-512 VNNI kernels: see simd_vnni_amd64.go. Go's operand order is Intel's reversed:
// VPDPWSSD Z14, Z13, Z12 is Z12 += Z13·Z14, VPERMW table, index, dst, VPTERNLOGD $f, C, B, A
// (A is also the destination; f's bit 4A+2B+C is the result).
//
// Each block prefetches (into L2) the lines 4 KiB ahead: a mat-vec reads its rows
// sequentially, and this keeps enough lines in flight that a worker's reads run at the
// memory's pace rather than stalling at each 4 KiB page, where the hardware prefetcher
// stops (it replaces prefetchNext for these kernels). Measured on the build machine, 2
// threads, out-of-cache [2048 → 151936] Q6_K mat-vec: none 16-18 GB/s, PREFETCHT0 at 512 B /
// 1 / 2 / 4 / 8 / 16 KiB 17-18 / 20 / 20 / 22-24 / 18 / 17 GB/s, PREFETCHT1 at 4 KiB 26-28,
// PREFETCHNTA 16 (a stream read: 28 GB/s). Lines past the row are the next rows' (a tile
// runs on) or harmless: a prefetch never faults.
//
// Both end with VZEROUPPER (which clears the upper halves of Z0-Z15) and zero the
// registers from Z16 on that they used: Go's scalar float code is legacy SSE, which would
// otherwise pay the AVX-SSE transition on every instruction (see simd_amd64.go).

// func dotQ4_KBlocksVNNI(w, a unsafe.Pointer, nb int) float32
//
// Per block: the 12 scale bytes decode to bytes [sc0..7, m0..7] (as dotQ4_KAVX2), the mins
// meet the bsums in Y11 (float, accumulated in Y1), and each 32-byte chunk c is broadcast to
// both halves of Z13, shifted so that its low nibbles (sub-block 2c) fill the lower half and
// its high nibbles (2c+1) the upper, multiplied with 64 contiguous activation bytes and
// added with its scales into Z12; Z12's halves then add up to dotQ4_KAVX2's eight lanes.
TEXT ·dotQ4_KBlocksVNNI(SB), NOSPLIT, $0-28
	MOVQ w+0(FP), SI
	MOVQ a+8(FP), DI
	MOVQ nb+16(FP), CX

	VBROADCASTI64X4 ·nibbleMask(SB), Z31
	VMOVDQU64       ·highHalfShift4(SB), Z30
	VMOVDQU64       ·q4KScaleWords+0(SB), Z20
	VMOVDQU64       ·q4KScaleWords+64(SB), Z21
	VMOVDQU64       ·q4KScaleWords+128(SB), Z22
	VMOVDQU64       ·q4KScaleWords+192(SB), Z23
	VMOVDQU64       ·q4KPickLo(SB), X24
	VMOVDQU64       ·q4KShift(SB), X25
	VMOVDQU64       ·q4KMaskLo(SB), X26
	VMOVDQU64       ·q4KPickHi(SB), X27
	VMOVDQU64       ·q4KMaskHi(SB), X28
	VMOVDQU64       ·q4KMinPairs(SB), Y29
	VXORPS          Y0, Y0, Y0 // acc
	VXORPS          Y1, Y1, Y1 // accMin

q4kblock:
	PREFETCHT1 4096(SI)
	PREFETCHT1 4160(SI)
	PREFETCHT1 4224(SI)
	// Scales and mins: X2 = [sc0..7, m0..7].
	VMOVDQU    4(SI), X3
	VPSHUFB    X24, X3, X4
	VPSRLVD    X25, X4, X4
	VPANDD     X26, X4, X4
	VPSHUFB    X27, X3, X2
	VPSRLD     $2, X2, X2
	VPTERNLOGD $0xEC, X28, X4, X2 // X2 = (X2 & maskHi) | X4

	// Mins: accMin += (yd·dmin)·Σ m·bsum, in dotQ4_KAVX2's lanes.
	VINSERTI128     $1, X2, Y2, Y3
	VPSHUFB         Y29, Y3, Y3
	VPMADDWD        260(DI), Y3, Y3
	VCVTDQ2PS       Y3, Y3
	VBROADCASTSS    (DI), Y5       // yd
	VPBROADCASTW    2(SI), X6
	VCVTPH2PS       X6, Y6         // dmin
	VMULPS          Y6, Y5, Y6
	VFMADD231PS     Y3, Y6, Y1

	// The quants: Z12 = Σ_c sc·(q·y) per lane pair.
	VPMOVZXBW       X2, Y10
	VPXORD          Z12, Z12, Z12
	VBROADCASTI64X4 16(SI), Z13
	VPSRLVW         Z30, Z13, Z13
	VPANDD          Z31, Z13, Z13
	VPMADDUBSW      4(DI), Z13, Z13
	VPERMW          Z10, Z20, Z14
	VPDPWSSD        Z14, Z13, Z12
	VBROADCASTI64X4 48(SI), Z13
	VPSRLVW         Z30, Z13, Z13
	VPANDD          Z31, Z13, Z13
	VPMADDUBSW      68(DI), Z13, Z13
	VPERMW          Z10, Z21, Z14
	VPDPWSSD        Z14, Z13, Z12
	VBROADCASTI64X4 80(SI), Z13
	VPSRLVW         Z30, Z13, Z13
	VPANDD          Z31, Z13, Z13
	VPMADDUBSW      132(DI), Z13, Z13
	VPERMW          Z10, Z22, Z14
	VPDPWSSD        Z14, Z13, Z12
	VBROADCASTI64X4 112(SI), Z13
	VPSRLVW         Z30, Z13, Z13
	VPANDD          Z31, Z13, Z13
	VPMADDUBSW      196(DI), Z13, Z13
	VPERMW          Z10, Z23, Z14
	VPDPWSSD        Z14, Z13, Z12

	// acc += (yd·d)·sum, the sum's two halves added first.
	VEXTRACTI64X4 $1, Z12, Y13
	VPADDD        Y13, Y12, Y12
	VCVTDQ2PS     Y12, Y12
	VPBROADCASTW  (SI), X7
	VCVTPH2PS     X7, Y7           // d
	VMULPS        Y7, Y5, Y7
	VFMADD231PS   Y12, Y7, Y0

	ADDQ $144, SI
	ADDQ $292, DI
	DECQ CX
	JNZ  q4kblock

	// Σ lanes of acc - accMin, in sumLanes' order.
	VSUBPS       Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VHADDPS      X0, X0, X0
	VHADDPS      X0, X0, X0
	VZEROUPPER
	VPXORD       X20, X20, X20
	VPXORD       X21, X21, X21
	VPXORD       X22, X22, X22
	VPXORD       X23, X23, X23
	VPXORD       X24, X24, X24
	VPXORD       X25, X25, X25
	VPXORD       X26, X26, X26
	VPXORD       X27, X27, X27
	VPXORD       X28, X28, X28
	VPXORD       X29, X29, X29
	VPXORD       X30, X30, X30
	VPXORD       X31, X31, X31
	MOVSS        X0, ret+24(FP)
	RET

// func dotQ6_KBlocksVNNI(w, a unsafe.Pointer, nb int) float32
//
// Per half h of a block: the 64 bytes of ql in Z13 (values 128h+0..63 in their low nibbles,
// 128h+64..127 in their high), qh's 32 bytes broadcast to both halves of Z14 and shifted so
// that each value's two high bits sit on bits 4-5; the unsigned 6-bit values meet 64
// contiguous activation bytes and their 16-value sub-blocks' scales (VPERMW from the
// sixteen scales as words) in Z12. The -32 offset comes off as 32·Σ scale·bsum (Y11), and
// the block's exact total is scaled by yd·d into X0 (dotQ6_KAVX2's order).
TEXT ·dotQ6_KBlocksVNNI(SB), NOSPLIT, $0-28
	MOVQ w+0(FP), SI
	MOVQ a+8(FP), DI
	MOVQ nb+16(FP), CX

	VBROADCASTI64X4 ·nibbleMask(SB), Z31
	VBROADCASTI64X4 ·bits45Mask(SB), Z30
	VMOVDQU64       ·q6KHighBitsLo(SB), Z29
	VMOVDQU64       ·q6KHighBitsHi(SB), Z28
	VMOVDQU64       ·q6KScaleWords+0(SB), Z20
	VMOVDQU64       ·q6KScaleWords+64(SB), Z21
	VMOVDQU64       ·q6KScaleWords+128(SB), Z22
	VMOVDQU64       ·q6KScaleWords+192(SB), Z23
	VXORPS          X0, X0, X0 // acc

q6kblock:
	PREFETCHT1 4096(SI)
	PREFETCHT1 4160(SI)
	PREFETCHT1 4224(SI)
	PREFETCHT1 4288(SI)
	VPMOVSXBW 192(SI), Y10
	VPMADDWD  260(DI), Y10, Y11
	VPSLLD    $5, Y11, Y11       // 32·Σ scale·bsum
	VPXORD    Z12, Z12, Z12

	// Half 0.
	VMOVDQU64       (SI), Z13
	VBROADCASTI64X4 128(SI), Z14
	VPANDD          Z31, Z13, Z15
	VPSLLVW         Z29, Z14, Z16
	VPTERNLOGD      $0xF8, Z30, Z16, Z15 // Z15 |= Z16 & 0x30
	VPMADDUBSW      4(DI), Z15, Z15
	VPERMW          Z10, Z20, Z16
	VPDPWSSD        Z16, Z15, Z12
	VPSRLW          $4, Z13, Z13
	VPANDD          Z31, Z13, Z13
	VPSRLVW         Z28, Z14, Z14
	VPTERNLOGD      $0xF8, Z30, Z14, Z13
	VPMADDUBSW      68(DI), Z13, Z13
	VPERMW          Z10, Z21, Z16
	VPDPWSSD        Z16, Z13, Z12

	// Half 1.
	VMOVDQU64       64(SI), Z13
	VBROADCASTI64X4 160(SI), Z14
	VPANDD          Z31, Z13, Z15
	VPSLLVW         Z29, Z14, Z16
	VPTERNLOGD      $0xF8, Z30, Z16, Z15
	VPMADDUBSW      132(DI), Z15, Z15
	VPERMW          Z10, Z22, Z16
	VPDPWSSD        Z16, Z15, Z12
	VPSRLW          $4, Z13, Z13
	VPANDD          Z31, Z13, Z13
	VPSRLVW         Z28, Z14, Z14
	VPTERNLOGD      $0xF8, Z30, Z14, Z13
	VPMADDUBSW      196(DI), Z13, Z13
	VPERMW          Z10, Z23, Z16
	VPDPWSSD        Z16, Z13, Z12

	// The block's total, exact in 32 bits, then acc += (yd·d)·total.
	VEXTRACTI64X4 $1, Z12, Y13
	VPADDD        Y13, Y12, Y12
	VPSUBD        Y11, Y12, Y12
	VEXTRACTI128  $1, Y12, X13
	VPADDD        X13, X12, X12
	VPSHUFD       $0x4E, X12, X13
	VPADDD        X13, X12, X12
	VPSHUFD       $0xB1, X12, X13
	VPADDD        X13, X12, X12
	VCVTDQ2PS     X12, X12
	VMOVSS        (DI), X13        // yd
	VPBROADCASTW  208(SI), X14
	VCVTPH2PS     X14, X14         // d
	VMULSS        X14, X13, X13
	VFMADD231SS   X12, X13, X0

	ADDQ $210, SI
	ADDQ $292, DI
	DECQ CX
	JNZ  q6kblock

	VZEROUPPER
	VPXORD X16, X16, X16
	VPXORD X20, X20, X20
	VPXORD X21, X21, X21
	VPXORD X22, X22, X22
	VPXORD X23, X23, X23
	VPXORD X28, X28, X28
	VPXORD X29, X29, X29
	VPXORD X30, X30, X30
	VPXORD X31, X31, X31
	MOVSS  X0, ret+24(FP)
	RET

// func dotQ4_KTokens4BlocksVNNI(w, a0, a1, a2, a3 unsafe.Pointer, nb int, out *[4]float32)
//
// dotQ4_KBlocksVNNI for four activation vectors at once (prefill): each block's scales
// and each chunk's nibbles are unpacked once for all four; each token keeps its own lanes
// (integer sums Z16-Z19, float sums and mins Z0 Z1 Z4 Z5) and gets the
// one-token kernel's bits.
//
// Each token's float sums and mins share one 512-bit accumulator (Z0 Z1 Z4 Z5: the sums in
// the lower eight lanes, the mins in the upper), so that one conversion, one multiply by
// yd·[d, dmin] and one FMA per token and block do what took two of each: the same
// operations lane by lane, so the same bits.
TEXT ·dotQ4_KTokens4BlocksVNNI(SB), NOSPLIT, $0-56
	MOVQ w+0(FP), SI
	MOVQ a0+8(FP), R8
	MOVQ a1+16(FP), R9
	MOVQ a2+24(FP), R10
	MOVQ a3+32(FP), R11
	MOVQ nb+40(FP), CX
	MOVQ out+48(FP), DI

	VBROADCASTI64X4 ·nibbleMask(SB), Z31
	VMOVDQU64       ·highHalfShift4(SB), Z30
	VMOVDQU64       ·q4KScaleWords+0(SB), Z20
	VMOVDQU64       ·q4KScaleWords+64(SB), Z21
	VMOVDQU64       ·q4KScaleWords+128(SB), Z22
	VMOVDQU64       ·q4KScaleWords+192(SB), Z23
	VMOVDQU64       ·q4KPickLo(SB), X24
	VMOVDQU64       ·q4KShift(SB), X25
	VMOVDQU64       ·q4KMaskLo(SB), X26
	VMOVDQU64       ·q4KPickHi(SB), X27
	VMOVDQU64       ·q4KMaskHi(SB), X28
	VMOVDQU64       ·q4KMinPairs(SB), Y29
	VPXORD          Z0, Z0, Z0
	VPXORD          Z1, Z1, Z1
	VPXORD          Z4, Z4, Z4
	VPXORD          Z5, Z5, Z5

q4k4block:
	PREFETCHT1 4096(SI)
	PREFETCHT1 4160(SI)
	PREFETCHT1 4224(SI)

	VMOVDQU      4(SI), X3
	VPSHUFB      X24, X3, X15
	VPSRLVD      X25, X15, X15
	VPANDD       X26, X15, X15
	VPSHUFB      X27, X3, X2
	VPSRLD       $2, X2, X2
	VPTERNLOGD   $0xEC, X28, X15, X2
	VINSERTI128  $1, X2, Y2, Y3
	VPSHUFB      Y29, Y3, Y3 // mins as word pairs
	VPBROADCASTW 2(SI), X6
	VPBROADCASTW (SI), X7
	VINSERTI128  $1, X6, Y7, Y7
	VCVTPH2PS    Y7, Z7      // [d ×8, dmin ×8]
	VPMOVZXBW    X2, Y10

	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19

	VBROADCASTI64X4 16(SI), Z13
	VPSRLVW         Z30, Z13, Z13
	VPANDD          Z31, Z13, Z13
	VPERMW          Z10, Z20, Z14
	VPMADDUBSW      4(R8), Z13, Z15
	VPDPWSSD        Z14, Z15, Z16
	VPMADDUBSW      4(R9), Z13, Z15
	VPDPWSSD        Z14, Z15, Z17
	VPMADDUBSW      4(R10), Z13, Z15
	VPDPWSSD        Z14, Z15, Z18
	VPMADDUBSW      4(R11), Z13, Z15
	VPDPWSSD        Z14, Z15, Z19

	VBROADCASTI64X4 48(SI), Z13
	VPSRLVW         Z30, Z13, Z13
	VPANDD          Z31, Z13, Z13
	VPERMW          Z10, Z21, Z14
	VPMADDUBSW      68(R8), Z13, Z15
	VPDPWSSD        Z14, Z15, Z16
	VPMADDUBSW      68(R9), Z13, Z15
	VPDPWSSD        Z14, Z15, Z17
	VPMADDUBSW      68(R10), Z13, Z15
	VPDPWSSD        Z14, Z15, Z18
	VPMADDUBSW      68(R11), Z13, Z15
	VPDPWSSD        Z14, Z15, Z19

	VBROADCASTI64X4 80(SI), Z13
	VPSRLVW         Z30, Z13, Z13
	VPANDD          Z31, Z13, Z13
	VPERMW          Z10, Z22, Z14
	VPMADDUBSW      132(R8), Z13, Z15
	VPDPWSSD        Z14, Z15, Z16
	VPMADDUBSW      132(R9), Z13, Z15
	VPDPWSSD        Z14, Z15, Z17
	VPMADDUBSW      132(R10), Z13, Z15
	VPDPWSSD        Z14, Z15, Z18
	VPMADDUBSW      132(R11), Z13, Z15
	VPDPWSSD        Z14, Z15, Z19

	VBROADCASTI64X4 112(SI), Z13
	VPSRLVW         Z30, Z13, Z13
	VPANDD          Z31, Z13, Z13
	VPERMW          Z10, Z23, Z14
	VPMADDUBSW      196(R8), Z13, Z15
	VPDPWSSD        Z14, Z15, Z16
	VPMADDUBSW      196(R9), Z13, Z15
	VPDPWSSD        Z14, Z15, Z17
	VPMADDUBSW      196(R10), Z13, Z15
	VPDPWSSD        Z14, Z15, Z18
	VPMADDUBSW      196(R11), Z13, Z15
	VPDPWSSD        Z14, Z15, Z19

	VEXTRACTI64X4 $1, Z16, Y15
	VPADDD        Y15, Y16, Y15
	VPMADDWD      260(R8), Y3, Y14
	VINSERTI64X4  $1, Y14, Z15, Z15
	VCVTDQ2PS     Z15, Z15
	VBROADCASTSS  (R8), Z13
	VMULPS        Z7, Z13, Z14
	VFMADD231PS   Z15, Z14, Z0
	VEXTRACTI64X4 $1, Z17, Y15
	VPADDD        Y15, Y17, Y15
	VPMADDWD      260(R9), Y3, Y14
	VINSERTI64X4  $1, Y14, Z15, Z15
	VCVTDQ2PS     Z15, Z15
	VBROADCASTSS  (R9), Z13
	VMULPS        Z7, Z13, Z14
	VFMADD231PS   Z15, Z14, Z1
	VEXTRACTI64X4 $1, Z18, Y15
	VPADDD        Y15, Y18, Y15
	VPMADDWD      260(R10), Y3, Y14
	VINSERTI64X4  $1, Y14, Z15, Z15
	VCVTDQ2PS     Z15, Z15
	VBROADCASTSS  (R10), Z13
	VMULPS        Z7, Z13, Z14
	VFMADD231PS   Z15, Z14, Z4
	VEXTRACTI64X4 $1, Z19, Y15
	VPADDD        Y15, Y19, Y15
	VPMADDWD      260(R11), Y3, Y14
	VINSERTI64X4  $1, Y14, Z15, Z15
	VCVTDQ2PS     Z15, Z15
	VBROADCASTSS  (R11), Z13
	VMULPS        Z7, Z13, Z14
	VFMADD231PS   Z15, Z14, Z5

	ADDQ $144, SI
	ADDQ $292, R8
	ADDQ $292, R9
	ADDQ $292, R10
	ADDQ $292, R11
	DECQ CX
	JNZ  q4k4block

	// sumLanes4's order: each token's halves added, then pairs twice.
	VEXTRACTF64X4 $1, Z0, Y2
	VSUBPS        Y2, Y0, Y0
	VEXTRACTF64X4 $1, Z1, Y2
	VSUBPS        Y2, Y1, Y1
	VEXTRACTF64X4 $1, Z4, Y2
	VSUBPS        Y2, Y4, Y4
	VEXTRACTF64X4 $1, Z5, Y2
	VSUBPS        Y2, Y5, Y5
	VEXTRACTF128 $1, Y0, X2
	VADDPS       X2, X0, X0
	VEXTRACTF128 $1, Y1, X2
	VADDPS       X2, X1, X1
	VEXTRACTF128 $1, Y4, X2
	VADDPS       X2, X4, X4
	VEXTRACTF128 $1, Y5, X2
	VADDPS       X2, X5, X5
	VHADDPS      X1, X0, X0
	VHADDPS      X5, X4, X4
	VHADDPS      X4, X0, X0
	VMOVUPS      X0, (DI)
	VZEROUPPER
	VPXORD       X16, X16, X16
	VPXORD       X17, X17, X17
	VPXORD       X18, X18, X18
	VPXORD       X19, X19, X19
	VPXORD       X20, X20, X20
	VPXORD       X21, X21, X21
	VPXORD       X22, X22, X22
	VPXORD       X23, X23, X23
	VPXORD       X24, X24, X24
	VPXORD       X25, X25, X25
	VPXORD       X26, X26, X26
	VPXORD       X27, X27, X27
	VPXORD       X28, X28, X28
	VPXORD       X29, X29, X29
	VPXORD       X30, X30, X30
	VPXORD       X31, X31, X31
	RET

// func dotQ6_KTokens4BlocksVNNI(w, a0, a1, a2, a3 unsafe.Pointer, nb int, out *[4]float32)
//
// dotQ6_KBlocksVNNI for four activation vectors at once (prefill): each half block's
// 6-bit values and scales are unpacked once for all four. The four blocks' totals are
// exact integers, so they are added up together (VPHADDD) into one vector, token t in lane
// t, and X0 lane t accumulates (yd_t·d)·total_t: the one-token kernel's operations on each
// token, so its bits.
TEXT ·dotQ6_KTokens4BlocksVNNI(SB), NOSPLIT, $0-56
	MOVQ w+0(FP), SI
	MOVQ a0+8(FP), R8
	MOVQ a1+16(FP), R9
	MOVQ a2+24(FP), R10
	MOVQ a3+32(FP), R11
	MOVQ nb+40(FP), CX
	MOVQ out+48(FP), DI

	VBROADCASTI64X4 ·nibbleMask(SB), Z31
	VBROADCASTI64X4 ·bits45Mask(SB), Z30
	VMOVDQU64       ·q6KHighBitsLo(SB), Z29
	VMOVDQU64       ·q6KHighBitsHi(SB), Z28
	VMOVDQU64       ·q6KScaleWords+0(SB), Z20
	VMOVDQU64       ·q6KScaleWords+64(SB), Z21
	VMOVDQU64       ·q6KScaleWords+128(SB), Z22
	VMOVDQU64       ·q6KScaleWords+192(SB), Z23
	VXORPS          X0, X0, X0

q6k4block:
	PREFETCHT1 4096(SI)
	PREFETCHT1 4160(SI)
	PREFETCHT1 4224(SI)
	PREFETCHT1 4288(SI)
	VPMOVSXBW 192(SI), Y10
	VPXORD    Z16, Z16, Z16
	VPXORD    Z17, Z17, Z17
	VPXORD    Z18, Z18, Z18
	VPXORD    Z19, Z19, Z19

	// Half 0.
	VMOVDQU64       0(SI), Z13
	VBROADCASTI64X4 128(SI), Z14
	VPANDD          Z31, Z13, Z15
	VPSLLVW         Z29, Z14, Z11
	VPTERNLOGD      $0xF8, Z30, Z11, Z15
	VPERMW          Z10, Z20, Z12
	VPMADDUBSW      4(R8), Z15, Z11
	VPDPWSSD        Z12, Z11, Z16
	VPMADDUBSW      4(R9), Z15, Z11
	VPDPWSSD        Z12, Z11, Z17
	VPMADDUBSW      4(R10), Z15, Z11
	VPDPWSSD        Z12, Z11, Z18
	VPMADDUBSW      4(R11), Z15, Z11
	VPDPWSSD        Z12, Z11, Z19
	VPSRLW          $4, Z13, Z13
	VPANDD          Z31, Z13, Z13
	VPSRLVW         Z28, Z14, Z14
	VPTERNLOGD      $0xF8, Z30, Z14, Z13
	VPERMW          Z10, Z21, Z12
	VPMADDUBSW      68(R8), Z13, Z11
	VPDPWSSD        Z12, Z11, Z16
	VPMADDUBSW      68(R9), Z13, Z11
	VPDPWSSD        Z12, Z11, Z17
	VPMADDUBSW      68(R10), Z13, Z11
	VPDPWSSD        Z12, Z11, Z18
	VPMADDUBSW      68(R11), Z13, Z11
	VPDPWSSD        Z12, Z11, Z19

	// Half 1.
	VMOVDQU64       64(SI), Z13
	VBROADCASTI64X4 160(SI), Z14
	VPANDD          Z31, Z13, Z15
	VPSLLVW         Z29, Z14, Z11
	VPTERNLOGD      $0xF8, Z30, Z11, Z15
	VPERMW          Z10, Z22, Z12
	VPMADDUBSW      132(R8), Z15, Z11
	VPDPWSSD        Z12, Z11, Z16
	VPMADDUBSW      132(R9), Z15, Z11
	VPDPWSSD        Z12, Z11, Z17
	VPMADDUBSW      132(R10), Z15, Z11
	VPDPWSSD        Z12, Z11, Z18
	VPMADDUBSW      132(R11), Z15, Z11
	VPDPWSSD        Z12, Z11, Z19
	VPSRLW          $4, Z13, Z13
	VPANDD          Z31, Z13, Z13
	VPSRLVW         Z28, Z14, Z14
	VPTERNLOGD      $0xF8, Z30, Z14, Z13
	VPERMW          Z10, Z23, Z12
	VPMADDUBSW      196(R8), Z13, Z11
	VPDPWSSD        Z12, Z11, Z16
	VPMADDUBSW      196(R9), Z13, Z11
	VPDPWSSD        Z12, Z11, Z17
	VPMADDUBSW      196(R10), Z13, Z11
	VPDPWSSD        Z12, Z11, Z18
	VPMADDUBSW      196(R11), Z13, Z11
	VPDPWSSD        Z12, Z11, Z19

	// Each token's lanes folded to eight, less 32·Σ scale·bsum, then the four totals.
	VEXTRACTI64X4 $1, Z16, Y15
	VPADDD        Y15, Y16, Y1
	VPMADDWD      260(R8), Y10, Y15
	VPSLLD        $5, Y15, Y15
	VPSUBD        Y15, Y1, Y1
	VEXTRACTI64X4 $1, Z17, Y15
	VPADDD        Y15, Y17, Y2
	VPMADDWD      260(R9), Y10, Y15
	VPSLLD        $5, Y15, Y15
	VPSUBD        Y15, Y2, Y2
	VEXTRACTI64X4 $1, Z18, Y15
	VPADDD        Y15, Y18, Y3
	VPMADDWD      260(R10), Y10, Y15
	VPSLLD        $5, Y15, Y15
	VPSUBD        Y15, Y3, Y3
	VEXTRACTI64X4 $1, Z19, Y15
	VPADDD        Y15, Y19, Y4
	VPMADDWD      260(R11), Y10, Y15
	VPSLLD        $5, Y15, Y15
	VPSUBD        Y15, Y4, Y4
	VPHADDD       Y2, Y1, Y1
	VPHADDD       Y4, Y3, Y3
	VPHADDD       Y3, Y1, Y1
	VEXTRACTI128  $1, Y1, X15
	VPADDD        X15, X1, X1
	VCVTDQ2PS     X1, X1
	VMOVSS        (R8), X13
	VINSERTPS     $0x10, (R9), X13, X13
	VINSERTPS     $0x20, (R10), X13, X13
	VINSERTPS     $0x30, (R11), X13, X13
	VPBROADCASTW  208(SI), X14
	VCVTPH2PS     X14, X14         // d
	VMULPS        X14, X13, X13
	VFMADD231PS   X1, X13, X0

	ADDQ $210, SI
	ADDQ $292, R8
	ADDQ $292, R9
	ADDQ $292, R10
	ADDQ $292, R11
	DECQ CX
	JNZ  q6k4block

	VMOVUPS X0, (DI)
	VZEROUPPER
	VPXORD X16, X16, X16
	VPXORD X17, X17, X17
	VPXORD X18, X18, X18
	VPXORD X19, X19, X19
	VPXORD X20, X20, X20
	VPXORD X21, X21, X21
	VPXORD X22, X22, X22
	VPXORD X23, X23, X23
	VPXORD X28, X28, X28
	VPXORD X29, X29, X29
	VPXORD X30, X30, X30
	VPXORD X31, X31, X31
	RET
