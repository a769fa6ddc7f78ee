// Macros shared by the amd64 assembly kernels (simd_f16c_amd64.s, simd_vnni_amd64.s,
// simd_legacy_vnni_amd64.s).

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
// Looping here spares a prefill tile a call per row and four tokens.
#define TOKENS4_ROWS_BEGIN(label) \
	MOVQ w+0(FP), BX; \
	XORQ DX, DX; \
label: \
	MOVQ BX, SI; \
	MOVQ a0+8(FP), R8; \
	MOVQ a1+16(FP), R9; \
	MOVQ a2+24(FP), R10; \
	MOVQ a3+32(FP), R11; \
	MOVQ nb+40(FP), CX

#define TOKENS4_ROWS_END(label) \
	MOVQ       o0+64(FP), DI; \
	VMOVSS     X0, (DI)(DX*4); \
	MOVQ       o1+72(FP), DI; \
	VEXTRACTPS $1, X0, (DI)(DX*4); \
	MOVQ       o2+80(FP), DI; \
	VEXTRACTPS $2, X0, (DI)(DX*4); \
	MOVQ       o3+88(FP), DI; \
	VEXTRACTPS $3, X0, (DI)(DX*4); \
	ADDQ       rowBytes+56(FP), BX; \
	INCQ       DX; \
	CMPQ       DX, rows+48(FP); \
	JLT        label

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
	VMOVSS X0, (R11); \
	ADDQ   $4, R11; \
	MOVQ   R12, SI; \
	ADDQ   rowBytes+32(FP), SI; \
	DECQ   R10; \
	JNZ    label; \
	CLEAR_HIGH; \
	RET
