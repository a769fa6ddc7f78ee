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
