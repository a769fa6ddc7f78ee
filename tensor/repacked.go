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
// and four of mins. The fixtures' Q4_K models ran that way. moerun's AVX-512 VNNI Q4_K kernels
// have both forms (simd_vnni_amd64.s: the one-token kernel's TOTALS arguments, the
// four-token kernels' Q4K_FOLD4 per block or per chunk); the repacked ones read the weights
// where they lie, as the others do, so they need no copy. Which tokens get which
// arithmetic follows llama.cpp (useRepacked).
// Elsewhere (no VNNI) repackedKernels is empty and Q4_K runs VecDot's arithmetic.

// rowKernels are a type's kernels over whole rows against one vector (as dotRowsOne) and
// four (as dotTokens4Rows), in gemv's arithmetic, and against four in gemm's.
type rowKernels struct {
	rows1          func(n int, rows, a []byte, out []float32)
	rows4T, gemm4T func(n int, rows []byte, rowBytes int, a0, a1, a2, a3 []byte, o0, o1, o2, o3 []float32)
}

// repackedKernels holds, for a type whose repacked arithmetic needs no layout of its own
// (Q4_K), its kernels in that arithmetic.
var repackedKernels = map[Type]*rowKernels{}

// repackedKernelsOf is t's repacked kernels for a matrix of rows rows, or nil (see
// repackedRows).
func repackedKernelsOf(t Type, rows int) *rowKernels {
	if !repackedRows(rows) {
		return nil
	}
	return repackedKernels[t]
}

// repackedRows reports whether llama.cpp repacks a matrix of rows rows: only a multiple of
// 8 is interleaved.
func repackedRows(rows int) bool { return rows%8 == 0 }

// useRepacked gives m, an operation's copy of a matrix, its repacked kernels, unless the
// pool turns repacking off. Which arithmetic a token gets follows llama.cpp: mul_mat_id
// runs gemv for every token, mul_mat gemm for the batch's tokens in fours from the first
// and gemv for the last T mod 4 (matmul true). mulTokens takes a tile's tokens four at a
// time from its first, and tiles start at multiples of matTokenTile (a multiple of 4), so
// the fours are the same.
func (p *Pool) useRepacked(m *Matrix, matmul bool) {
	r := m.repacked
	if r == nil || p.noRepack {
		return
	}
	m.rows1, m.rows4T, m.dot2, m.dot4T = r.rows1, r.rows4T, nil, nil
	if matmul {
		m.rows4T = r.gemm4T
	}
}
