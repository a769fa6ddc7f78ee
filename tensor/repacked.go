package tensor

// Q4_K in llama.cpp's repacked arithmetic.
//
// On an x86 CPU with AVX2, llama.cpp repacks Q4_K matrices whose rows are a multiple of 8
// (its CPU_REPACK buffer, eight rows interleaved) and multiplies them with
// ggml_gemv_q4_K_8x8_q8_K (one token) and ggml_gemm_q4_K_8x8_q8_K (four at a time). Per
// row, token and 256-value super-block gemv adds the scaled sub-block sums up to one exact
// integer I, and the mins times the activations' sums to another, M, then
//
//	acc    = float(I)·(d·d_y)    + acc,    one FMA a block,
//	accMin = float(M)·(dmin·d_y) + accMin,
//	result = acc − accMin;
//
// gemm does the same per 64-value chunk (two sub-blocks), four FMAs a block. Both differ
// from ggml_vec_dot_q4_K_q8_K (--no-repack), which keeps eight float lanes of scaled sums
// and four of mins. The fixtures' Q4_K models ran that way. moerun has both forms on
// AVX-512 VNNI: many tokens take the packed kernels (packed.go; gemm for a mul_mat's
// tokens in fours, gemv for the rest), one token the rows kernel below
// (simd_vnni_amd64.s, the TOTALS arguments of Q4K_ROWS, and four rows at a time where the
// CPU has GFNI and VBMI), which reads the weights where they lie, and so does the
// two-token kernel there (an expert that two or three of a batch's tokens chose, or a
// mul_mat's last two or three). Which tokens get which arithmetic follows llama.cpp
// (useRepacked, mulPacked).
// The AVX2 level (and AVX-512 without VNNI) runs Q4_K's repacked arithmetic in rows
// kernels with assembly integer passes (simd_repacked_q4k_amd64.go: one token, two in
// gemv's arithmetic, and four in gemm's or gemv's); only the generic level runs VecDot's,
// as llama.cpp's generic build does.
//
// Q2_K is the same on a CPU with AVX-512 (ggml_gemv_q2_K_8x8_q8_K per super-block,
// ggml_gemm_q2_K_8x8_q8_K per 128-value half): packed kernels for two tokens or more, and
// for one the rows kernel's totals (Q2K_TOTALS, simd_lowk_vnni_amd64.s).

// repackedKernelsOf is t's repacked kernel for a matrix of rows rows, or nil (see
// repackedRows).
func repackedKernelsOf(t Type, rows int) func(n int, rows, a []byte, out []float32) {
	if !repackedRows(rows) {
		return nil
	}
	return active.repackedKernels[t]
}

// repackedRows reports whether llama.cpp repacks a matrix of rows rows: only a multiple of
// 8 is interleaved.
func repackedRows(rows int) bool { return rows%8 == 0 }

// useRepacked gives m, an operation's copy of a matrix, its repacked kernels, unless the
// pool turns repacking off: the one-token kernel, in gemv's arithmetic as llama.cpp's lone
// tokens are (mul_mat_id's always, mul_mat's as its batch's last T mod 4), and the
// four-token kernel in the operation's arithmetic (gemm for mul_mat, whose tiles start at
// multiples of matTokenTile, a multiple of 4, so that the fours fall where llama.cpp's do;
// gemv for mul_mat_id). Where the packed kernels run (mulPacked, two tokens or more) the
// four-token kernels are not used.
func (p *Pool) useRepacked(m *Matrix, arithmetic int) {
	if m.repacked == nil || p.noRepack {
		return
	}
	m.rows1, m.rows4T, m.dot2, m.dot4T = m.repacked, m.repacked4[arithmetic], nil, nil
	m.rows2 = m.repacked2
}
