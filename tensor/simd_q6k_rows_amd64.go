//go:build goexperiment.simd && amd64

package tensor

import "unsafe"

// dotQ6_KRowsAVX2 is dotQ6_KAVX2 over len(out) consecutive whole rows of n values against
// one activation vector (dotRowsOne): out[r] = dotQ6_KAVX2(n, row r, a), the same bits.
// The rows go two at a time through each block (dotQ6_KRows2AVX2, in assembly): each
// group of 32 activations is loaded once for both rows, and so are the block's activation
// scale and bsums; per row the integer lanes, the per-block FMA into eight float lanes and
// the final hsum_float_8 are dotQ6_KAVX2's (ggml's AVX2 ggml_vec_dot_q6_K_q8_K), the two
// rows' horizontal sums taken together. An odd last row is dotQ6_KAVX2's.
//
// Written as archsimd, the two-row loop kept its loads (common subexpressions to the
// compiler) and the scale spreads in registers and spilled them, and the prefetch call
// reloaded everything: no faster than dotQ6_KAVX2 row by row. The assembly keeps all of a
// pair's state in the 16 vector registers, folds the loads into the instructions, and asks
// for lines ahead inline (PREFETCHT1, as prefetchLines): those of the pair computed
// whole pairs and at least prefetchAhead bytes later, at the same block. 4 KiB past each
// row's own block, as prefetchNext, covers only part of the next pair's second row when rows
// are long; PREFETCHT0 instead lost a third from DRAM on the build machine.
func dotQ6_KRowsAVX2(n int, rows, a []byte, out []float32) {
	nb := n / qkK
	if nb == 0 || len(out) == 0 {
		clear(out)
		return
	}
	rb := nb * 210
	rows, a = rows[:len(out)*rb], a[:nb*292]
	if pairs := len(out) / 2; pairs > 0 {
		// Whole pairs ahead, at least prefetchAhead bytes: the lines of the pair that will be
		// computed at the same block.
		ahead := (prefetchAhead + 2*rb - 1) / (2 * rb) * (2 * rb)
		dotQ6_KRows2AVX2(unsafe.Pointer(&rows[0]), unsafe.Pointer(&a[0]), nb, pairs, rb, ahead, &out[0])
	}
	if r := len(out) - 1; r%2 == 0 {
		out[r] = dotQ6_KAVX2(n, rows[r*rb:], a)
	}
}

// dotQ6_KRows2AVX2 sets out[r] for the 2·pairs rows of nb Q6_K blocks, rowBytes apart, at w
// against the nb Q8_K blocks at a (simd_q6k_rows_amd64.s).
//
//go:noescape
func dotQ6_KRows2AVX2(w, a unsafe.Pointer, nb, pairs, rowBytes, ahead int, out *float32)

// dotQ6_KTokens4RowsAVX2 is dotQ6_KAVX2 for four activation vectors over consecutive rows
// (dotTokens4Rows, simd_q6k_rows_amd64.s): the output head of four sequences decoding
// together, four tokens of a prefill tile. Each group's codes and scales are unpacked once
// for the four tokens, and the whole state stays in the 16 vector registers; per token the
// integer lanes, float steps and hsum_float_8 are dotQ6_KAVX2's, so its bits.
//
//go:noescape
func dotQ6_KTokens4RowsAVX2(w, a0, a1, a2, a3 unsafe.Pointer, nb, rows, rowBytes int, o0, o1, o2, o3 *float32)

// dotQ6_KTokens2RowsAVX2 is dotQ6_KTokens4RowsAVX2 for two activation vectors: two
// sequences decoding together, an expert two tokens chose, a prefill tile's pairs.
//
//go:noescape
func dotQ6_KTokens2RowsAVX2(w, a0, a1 unsafe.Pointer, nb, rows, rowBytes int, o0, o1 *float32)
