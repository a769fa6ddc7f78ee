//go:build goexperiment.simd

#include "textflag.h"

// func prefetchLines(p unsafe.Pointer, n int)
//
// PREFETCHT1 (into L2) for each 64-byte line, four a step; the last step may reach 192
// bytes past p+n, as a prefetch may: it never faults.
TEXT ·prefetchLines(SB), NOSPLIT|NOFRAME, $0-16
	MOVQ p+0(FP), AX
	MOVQ n+8(FP), CX
	ADDQ AX, CX
loop:
	CMPQ AX, CX
	JAE  done
	PREFETCHT1 (AX)
	PREFETCHT1 64(AX)
	PREFETCHT1 128(AX)
	PREFETCHT1 192(AX)
	ADDQ $256, AX
	JMP  loop
done:
	RET

// READ_STREAM reads 256 bytes a step (four 64-byte lines) from p to p+n with the loads
// of body, folded into registers so that nothing but the loads is asked of the core, and
// asks for the lines 4 KiB ahead as the decode kernels do (the hardware prefetcher stops
// at each 4 KiB page). n is a positive multiple of 256.
#define READ_STREAM(body) \
	MOVQ p+0(FP), AX; \
	MOVQ n+8(FP), CX; \
	ADDQ AX, CX; \
readstep: \
	PREFETCHT1 4096(AX); \
	PREFETCHT1 4160(AX); \
	PREFETCHT1 4224(AX); \
	PREFETCHT1 4288(AX); \
	body; \
	ADDQ $256, AX; \
	CMPQ AX, CX; \
	JB   readstep; \
	VZEROUPPER; \
	RET

#define READ_LINES_512 \
	VPXORQ (AX), Z0, Z0; \
	VPXORQ 64(AX), Z1, Z1; \
	VPXORQ 128(AX), Z0, Z0; \
	VPXORQ 192(AX), Z1, Z1

#define READ_LINES_256 \
	VPXOR (AX), Y0, Y0; \
	VPXOR 32(AX), Y1, Y1; \
	VPXOR 64(AX), Y0, Y0; \
	VPXOR 96(AX), Y1, Y1; \
	VPXOR 128(AX), Y0, Y0; \
	VPXOR 160(AX), Y1, Y1; \
	VPXOR 192(AX), Y0, Y0; \
	VPXOR 224(AX), Y1, Y1

// func readStreamAVX512(p unsafe.Pointer, n int)
TEXT ·readStreamAVX512(SB), NOSPLIT|NOFRAME, $0-16
	READ_STREAM(READ_LINES_512)

// func readStreamAVX2(p unsafe.Pointer, n int)
TEXT ·readStreamAVX2(SB), NOSPLIT|NOFRAME, $0-16
	READ_STREAM(READ_LINES_256)
