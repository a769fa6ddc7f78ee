//go:build goexperiment.simd

#include "textflag.h"
#include "simd_amd64.h"

// IQ1_S and IQ1_M kernels on AVX2: see simd_iq1_amd64.go. Go's operand order is Intel's
// reversed: VPMADDUBSW S, U, D is D = pairs of U (unsigned) · S (signed), VPSIGNB S, V, D
// is D = V with the sign of S, VPBLENDD $m, S, V, D takes dwords of S where m has a bit.
// Only VEX instructions (no AVX-512): the kernels end with ROWS_NEXT and VZEROUPPER (not
// ROWS_END, whose CLEAR_HIGH touches Z16-Z31). The rows' sums reduce by HSUM_FLOAT_8.
//
// The indices of a block are stored to the stack one block ahead, while the block before
// is computed: read back right after the vector store, each load waited for it (a quarter
// of the time of a row). Frame: two buffers (offset R9 the current block's, AX the next
// one's while it is prepared), each the block's 32 indices as words at 0, and for IQ1_S
// its eight scales at 64 (a dword each, the scale in every byte) and signed at 96 (in both
// words). Registers: SI the block, DI its activations, R13 the grid, AX BX DX R8 a
// sub-block's indices; Y0 (and Y1, IQ1_M) the float sums, X1 the IQ1_S shift sum, Y2 (and
// Y3) the block's integer pair sums, Y4-Y8 scratch, Y8 IQ1_M's scales, Y9 its shift
// signs, Y10-Y15 constants.

// IQ1_INDICES computes sixteen indices (four sub-blocks) and stores them at
// dst(SP)(buf): the qs bytes at qs(SI) widened to words, or'ed with the top bits from the 8
// bytes at qh(SI) (Y13 the VPSHUFB, Y12 the VPMULLW constant; Y11 the mask).
#define IQ1_INDICES(qs, qh, dst, buf) \
	VPMOVZXBW    qs(SI), Y4; \
	VPBROADCASTQ qh(SI), Y5; \
	VPSHUFB      Y13, Y5, Y5; \
	VPMULLW      Y12, Y5, Y5; \
	VPAND        Y11, Y5, Y5; \
	VPOR         Y4, Y5, Y5; \
	VMOVDQU      Y5, dst(SP)(buf*1)

// IQ1_POINTS loads the four points of the sub-block whose indices are at idx(SP)(R9) into
// Y4 (Y5 scratch).
#define IQ1_POINTS(idx) \
	MOVWLZX      idx(SP)(R9*1), AX; \
	MOVWLZX      idx+2(SP)(R9*1), BX; \
	MOVWLZX      idx+4(SP)(R9*1), DX; \
	MOVWLZX      idx+6(SP)(R9*1), R8; \
	VMOVQ        (R13)(AX*8), X4; \
	VPBROADCASTQ (R13)(BX*8), Y5; \
	VPBLENDD     $0x0C, Y5, Y4, Y4; \
	VPBROADCASTQ (R13)(DX*8), Y5; \
	VPBLENDD     $0x30, Y5, Y4, Y4; \
	VPBROADCASTQ (R13)(R8*8), Y5; \
	VPBLENDD     $0xC0, Y5, Y4, Y4

// IQ1_S (50-byte blocks: F16 d, 32 qs, eight u16 qh). IQ1S_PREP stores the indices and
// scales of the block at off(SI) to the buffer at AX: the scales from qh's dwords with qh
// in both words, (qh>>12 & 7)·2 + 1 per word, spread to all bytes for the points and
// signed by qh's bit 15 (VPSIGNW by qh|1, never zero) for the shift.
#define IQ1S_PREP(off) \
	IQ1_INDICES(off+2, off+34, 0, AX); \
	IQ1_INDICES(off+18, off+42, 32, AX); \
	VPMOVZXWD off+34(SI), Y6; \
	VPSLLD    $16, Y6, Y7; \
	VPOR      Y7, Y6, Y6; \
	VPSRLW    $12, Y6, Y7; \
	VPAND     Y14, Y7, Y7; \
	VPADDW    Y7, Y7, Y7; \
	VPOR      Y15, Y7, Y7; \
	VPSLLD    $8, Y7, Y8; \
	VPOR      Y7, Y8, Y8; \
	VMOVDQU   Y8, 64(SP)(AX*1); \
	VPOR      Y15, Y6, Y6; \
	VPSIGNW   Y6, Y7, Y7; \
	VMOVDQU   Y7, 96(SP)(AX*1)

// IQ1S_SUB adds sub-block ib's pairs to the words of Y2: the points (indices at 8ib)
// against the activations at 4+32ib(DI), as VPMADDUBSW(scale, sign(y, p)) with the scale
// in every byte (dword ib at 64). A pair is at most 15·2·127 in magnitude: the eight
// sub-blocks' sum fits a word.
#define IQ1S_SUB(idx, act, ls) \
	IQ1_POINTS(idx); \
	VMOVDQU      act(DI), Y5; \
	VPSIGNB      Y4, Y5, Y5; \
	VPBROADCASTD ls(SP)(R9*1), Y6; \
	VPMADDUBSW   Y5, Y6, Y5; \
	VPADDW       Y5, Y2, Y2

// func dotIQ1_SRowsAVX2(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)
TEXT ·dotIQ1_SRowsAVX2(SB), NOSPLIT, $256-48
	LEAQ    ·iq1sGrid(SB), R13
	VMOVDQU ·iq1HighMask(SB), Y11
	VMOVDQU ·iq1SHighMul(SB), Y12
	VMOVDQU ·iq1SHighBytes(SB), Y13
	VMOVDQU ·iq1Sevens(SB), Y14
	VMOVDQU ·iq1Ones(SB), Y15
	ROWS_BEGIN(iq1srow)
	VXORPS  Y0, Y0, Y0
	VXORPS  X1, X1, X1
	XORQ    R9, R9
	XORQ    AX, AX
	IQ1S_PREP(0)

iq1sblock:
	PREFETCHT0 512(SI)
	CMPQ       CX, $1
	JEQ        iq1sbody
	MOVQ       R9, AX
	XORQ       $128, AX
	IQ1S_PREP(50)

iq1sbody:
	// The shift's integer: the signed scales against the bsums' pairs.
	VMOVDQU  96(SP)(R9*1), Y7
	VPMADDWD 260(DI), Y7, Y7

	VPXOR Y2, Y2, Y2
	IQ1S_SUB(0, 4, 64)
	IQ1S_SUB(8, 36, 68)
	IQ1S_SUB(16, 68, 72)
	IQ1S_SUB(24, 100, 76)
	IQ1S_SUB(32, 132, 80)
	IQ1S_SUB(40, 164, 84)
	IQ1S_SUB(48, 196, 88)
	IQ1S_SUB(56, 228, 92)

	// d·dy; the lanes (Y2's words paired by VPMADDWD) by FMA into Y0, the shift's integer
	// (Y7's dwords summed) into X1.
	VPMADDWD     Y15, Y2, Y2
	VMOVD        (SI), X4
	VCVTPH2PS    X4, X4
	VMULSS       (DI), X4, X4
	VBROADCASTSS X4, Y5
	VCVTDQ2PS    Y2, Y2
	VFMADD231PS  Y2, Y5, Y0
	VEXTRACTI128 $1, Y7, X6
	VPADDD       X6, X7, X7
	VPSHUFD      $0x4E, X7, X6
	VPADDD       X6, X7, X7
	VPSHUFD      $0xB1, X7, X6
	VPADDD       X6, X7, X7
	VCVTDQ2PS    X7, X7
	VFMADD231SS  X7, X4, X1

	XORQ $128, R9
	ADDQ $50, SI
	ADDQ $292, DI
	DECQ CX
	JNZ  iq1sblock

	HSUM_FLOAT_8(Y0, X0, X2)
	MOVL        $0x3E000000, AX // 0.125
	VMOVD       AX, X3
	VFMADD231SS X3, X1, X0
	ROWS_NEXT(iq1srow)
	VZEROUPPER
	RET

// IQ1_M (56-byte blocks: 32 qs, 16 qh bytes of a nibble per group, four u16 of scales
// with d in their top nibbles). IQ1M_PREP stores the indices of the block at off(SI) to the
// buffer at AX. IQ1M_SUB adds sub-block ib's pairs to the words of Y2 as IQ1S_SUB, its
// scales spread from Y8 (iq1MScaleSpread[ib]: the lower lane's for values 0-15, the
// upper's for 16-31); and to Y3 the shift's: the activations signed per group of 8
// (iq1MSignSpread[ib] from Y9) against the same scales.
#define IQ1M_PREP(off) \
	IQ1_INDICES(off+0, off+32, 0, AX); \
	IQ1_INDICES(off+16, off+40, 32, AX)

#define IQ1M_SUB(idx, act, sel) \
	IQ1_POINTS(idx); \
	VMOVDQU    act(DI), Y5; \
	VPSHUFB    ·iq1MScaleSpread+sel(SB), Y8, Y6; \
	VPSIGNB    Y4, Y5, Y7; \
	VPMADDUBSW Y7, Y6, Y7; \
	VPADDW     Y7, Y2, Y2; \
	VPSHUFB    ·iq1MSignSpread+sel(SB), Y9, Y4; \
	VPSIGNB    Y4, Y5, Y5; \
	VPMADDUBSW Y5, Y6, Y5; \
	VPADDW     Y5, Y3, Y3

// func dotIQ1_MRowsAVX2(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)
TEXT ·dotIQ1_MRowsAVX2(SB), NOSPLIT, $128-48
	LEAQ    ·iq1sGrid(SB), R13
	VMOVDQU ·iq1OneBytes(SB), Y10
	VMOVDQU ·iq1HighMask(SB), Y11
	VMOVDQU ·iq1MHighMul(SB), Y12
	VMOVDQU ·iq1MHighBytes(SB), Y13
	ROWS_BEGIN(iq1mrow)
	VXORPS  Y0, Y0, Y0
	VXORPS  Y1, Y1, Y1
	XORQ    R9, R9
	XORQ    AX, AX
	IQ1M_PREP(0)

iq1mblock:
	PREFETCHT0 512(SI)
	CMPQ       CX, $1
	JEQ        iq1mbody
	MOVQ       R9, AX
	XORQ       $64, AX
	IQ1M_PREP(56)

iq1mbody:
	// Scales (Y8): word j of the lower lane sub-block j's scale for its values 0-15, of
	// the upper lane for 16-31.
	VPBROADCASTQ 48(SI), Y6
	VPSHUFB      ·iq1MScaleBytes(SB), Y6, Y8
	VPMULLW      ·iq1MScaleMul(SB), Y8, Y8
	VPAND        ·iq1ScaleMask(SB), Y8, Y8
	VPSRLW       $8, Y8, Y8
	VPOR         ·iq1Ones(SB), Y8, Y8

	// Shift signs (Y9): byte 2j of the lower lane negative where sub-block j's group 0 is
	// shifted down (bit 3 of qh byte 2j), byte 2j+1 for group 1 (bit 7); the upper lane
	// groups 2 and 3 from qh byte 2j+1. Or'ed with 1: never zero.
	VBROADCASTI128 32(SI), Y9
	VPSHUFB        ·iq1MSignBytes(SB), Y9, Y9
	VPSLLW         $4, Y9, Y4
	VPSLLW         $8, Y9, Y9
	VPOR           Y4, Y9, Y9
	VPOR           Y10, Y9, Y9

	VPXOR Y2, Y2, Y2
	VPXOR Y3, Y3, Y3
	IQ1M_SUB(0, 4, 0)
	IQ1M_SUB(8, 36, 32)
	IQ1M_SUB(16, 68, 64)
	IQ1M_SUB(24, 100, 96)
	IQ1M_SUB(32, 132, 128)
	IQ1M_SUB(40, 164, 160)
	IQ1M_SUB(48, 196, 192)
	IQ1M_SUB(56, 228, 224)

	// d: the top nibbles of the scales' u16 gathered into an F16, times dy; both sums'
	// lanes (their words paired) by FMA.
	VMOVQ        48(SI), X6
	VPSRLW       $12, X6, X6
	VPMADDWD     ·iq1MDNibbles(SB), X6, X6
	VPSHUFD      $1, X6, X7
	VPADDD       X7, X6, X6
	VCVTPH2PS    X6, X6
	VMULSS       (DI), X6, X6
	VBROADCASTSS X6, Y6
	VPMADDWD     ·iq1Ones(SB), Y2, Y2
	VPMADDWD     ·iq1Ones(SB), Y3, Y3
	VCVTDQ2PS    Y2, Y2
	VFMADD231PS  Y2, Y6, Y0
	VCVTDQ2PS    Y3, Y3
	VFMADD231PS  Y3, Y6, Y1

	XORQ $64, R9
	ADDQ $56, SI
	ADDQ $292, DI
	DECQ CX
	JNZ  iq1mblock

	HSUM_FLOAT_8(Y0, X0, X2)
	HSUM_FLOAT_8(Y1, X1, X2)
	MOVL        $0x3E000000, AX // 0.125
	VMOVD       AX, X3
	VFMADD231SS X3, X1, X0
	ROWS_NEXT(iq1mrow)
	VZEROUPPER
	RET
