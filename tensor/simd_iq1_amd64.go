//go:build goexperiment.simd && amd64

package tensor

import "unsafe"

// IQ1_S and IQ1_M dot products against Q8_K in assembly (simd_iq1_amd64.s), in place of
// the generic kernel that unpacks every block (iqFormat.vecDot).
//
// Both kernels give the bits of ggml's AVX2 kernels (ggml_vec_dot_iq1_s_q8_K and
// ggml_vec_dot_iq1_m_q8_K): each 32-value sub-block's point values (eight {-1, 0, 1} per
// index, looked up in iq1sGrid) meet its 32 activation bytes in a 256-bit register, and
// 32-bit lane k sums values 4k to 4k+3 of every sub-block of the block, times the
// sub-block's (or half sub-block's) odd scale 2s+1; the eight lanes are converted and
// accumulated by one FMA with the block's d·dy. The ±1/8 shift goes to a separate sum:
// for IQ1_S one integer per block (the scale times the sign times the Q8_K bsums of the
// sub-block) accumulated in a scalar float by FMA, for IQ1_M eight lanes of the
// activations' quad sums (signed per group of 8, times the half sub-block scale) in a
// second vector float sum. The ends reduce eight lanes in ggml's hsum_float_8 order,
// (l0+l4 + l2+l6) + (l1+l5 + l3+l7), and add the shift sum times 1/8.
//
// The eleven-bit indices of a block are computed in vector registers (sixteen at a time:
// the bytes widened to words, the high bits brought to the words by VPSHUFB and moved to
// bits 8-10 by VPMULLW with a power of two) and stored to the stack one block ahead, then
// read back one by one as the addresses of the grid loads; a sub-block's four points are
// put together by a load and three broadcasts blended in (no shuffle-port work). The
// points' signs go onto the activations (VPSIGNB) and VPMADDUBSW multiplies them by the
// scale repeated in every byte: a pair is at most 15·2·127, so the eight sub-blocks add up
// in words, paired to the lanes by one VPMADDWD per block. As in ggml's kernels, a -128
// activation (which Q8_K's quantizer never makes) against a negative sign stays -128.
//
// Measured on the build machine (BenchmarkIQ1Kernels, best of many runs as it is shared):
// reading the indices back right after their store cost a quarter of the time (hence one
// block ahead); VPGATHERQQ for the points was 12% slower, VPBLENDD from memory (split
// loads) 9% slower, AVX-512 masked broadcasts no faster; an AVX-512 VNNI IQ1_S kernel (two
// sub-blocks a register, points by VPGATHERQQ from a table of p+1, VPDPBUSD and VPDPWSSD)
// gave the same bits 5% slower, so there is none.

// In simd_iq1_amd64.s: nb ≥ 1 whole blocks per row, rows ≥ 1 rows rowBytes apart.
//
//go:noescape
func dotIQ1_SRowsAVX2(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)

//go:noescape
func dotIQ1_MRowsAVX2(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)

var (
	iq1SShape = blockShape{values: qkK, bytes: 50, actBytes: 292}
	iq1MShape = blockShape{values: qkK, bytes: 56, actBytes: 292}
)

// iq1Words is a 256-bit vector of sixteen words, all v.
func iq1Words(v uint16) (w [16]uint16) {
	for i := range w {
		w[i] = v
	}
	return w
}

// Constant vectors of the kernels (see simd_iq1_amd64.s for their use).
var (
	// iq1HighMask keeps bits 8-10 of each word: an index's top three bits.
	iq1HighMask = iq1Words(0x0700)
	// iq1SHighBytes (VPSHUFB) and iq1SHighMul (VPMULLW) take IQ1_S's qh, four sub-blocks'
	// u16 in the low 8 bytes of each 128-bit lane, to the top bits of the indices of
	// sixteen groups of 8 (two sub-blocks per lane): group l of a sub-block needs bits
	// 3l..3l+2 of its qh at bits 8-10, qh times 2^8, 2^5 and 2^2 for l = 0-2, and for
	// l = 3 (bits 9-11) qh's high byte times 2^7.
	iq1SHighBytes = func() (idx [32]int8) {
		for lane := range 2 {
			for g := range 8 {
				sub := 2*lane + g/4
				lo, hi := int8(2*sub), int8(2*sub+1)
				if g%4 == 3 {
					lo, hi = hi, -128
				}
				idx[16*lane+2*g], idx[16*lane+2*g+1] = lo, hi
			}
		}
		return idx
	}()
	iq1SHighMul = func() (m [16]uint16) {
		for i := range m {
			m[i] = [4]uint16{1 << 8, 1 << 5, 1 << 2, 1 << 7}[i%4]
		}
		return m
	}()
	// iq1MHighBytes and iq1MHighMul do the same for IQ1_M, whose groups have a nibble of
	// qh each (low nibble first; 8 bytes in the low half of each lane for 16 groups): the
	// byte to the low byte of the word, times 2^8 (even group) or 2^4 (odd).
	iq1MHighBytes = func() (idx [32]int8) {
		for lane := range 2 {
			for g := range 8 {
				idx[16*lane+2*g], idx[16*lane+2*g+1] = int8(4*lane+g/2), -128
			}
		}
		return idx
	}()
	iq1MHighMul = func() (m [16]uint16) {
		for i := range m {
			m[i] = [2]uint16{1 << 8, 1 << 4}[i%2]
		}
		return m
	}()
	// iq1Sevens and iq1Ones are words 7 and 1 (IQ1_S's scale: 2·(qh>>12 & 7) + 1).
	iq1Sevens = iq1Words(7)
	iq1Ones   = iq1Words(1)
	// iq1OneBytes is 32 bytes 1.
	iq1OneBytes = func() (b [32]uint8) {
		for i := range b {
			b[i] = 1
		}
		return b
	}()
	// IQ1_M's scales: from the four u16 of a block's scales (low 8 bytes of each lane),
	// iq1MScaleBytes (VPSHUFB) puts u16 j/2 in word j of both lanes and iq1MScaleMul
	// (VPMULLW) moves the 3-bit scale of half sub-block 2j (lower lane) or 2j+1 (upper)
	// to bits 9-11 (u16 j/2 holds sub-block j's two scales at bits 6(j%2) and 6(j%2)+3);
	// masked (iq1ScaleMask) and shifted right by 8 that is 2s, with bit 0 set 2s+1. Word
	// j of each lane then holds sub-block j's scale for its values 0-15 (lower lane) and
	// 16-31 (upper), spread to all bytes of the lane by iq1MScaleSpread[j] (VPSHUFB).
	iq1MScaleBytes = func() (idx [32]int8) {
		for i := range 16 {
			j := i % 8
			idx[2*i], idx[2*i+1] = int8(2*(j/2)), int8(2*(j/2)+1)
		}
		return idx
	}()
	iq1MScaleMul = func() (m [16]uint16) {
		for i := range m {
			shift := 6*(i%8%2) + 3*(i/8)
			m[i] = 1 << (9 - shift)
		}
		return m
	}()
	iq1ScaleMask    = iq1Words(0x0E00)
	iq1MScaleSpread = func() (idx [8][32]int8) {
		for j := range idx {
			for i := range 32 {
				idx[j][i] = int8(2 * j)
			}
		}
		return idx
	}()
	// iq1MDNibbles gathers the top nibbles of the four scale u16 (shifted down to bits
	// 0-3) into IQ1_M's F16 d by VPMADDWD: n0 + 16·n1 in dword 0, 256·n2 + 4096·n3 in 1.
	iq1MDNibbles = [8]uint16{1, 16, 256, 4096}
	// iq1MSignBytes (VPSHUFB) takes IQ1_M's 16 qh bytes (in both lanes) to words: in the
	// lower lane word j is qh byte 2j (the signs of sub-block j's groups 0 and 1, bit 3 of
	// each nibble), in the upper lane byte 2j+1 (groups 2 and 3), high bytes zero; the
	// kernel then makes byte 2j of the lane negative for group 0 (or 2) and byte 2j+1 for
	// group 1 (or 3), and iq1MSignSpread[j] (VPSHUFB) spreads them over a sub-block's 32
	// bytes, eight each.
	iq1MSignBytes = func() (idx [32]int8) {
		for lane := range 2 {
			for j := range 8 {
				idx[16*lane+2*j], idx[16*lane+2*j+1] = int8(2*j+lane), -128
			}
		}
		return idx
	}()
	iq1MSignSpread = func() (idx [8][32]int8) {
		for j := range idx {
			for i := range 32 {
				idx[j][i] = int8(2*j + i%16/8)
			}
		}
		return idx
	}()
)

// iq1Kernels lists the AVX2 kernels per type (there are no AVX-512 ones).
var iq1Kernels = map[Type]latticeKernel{
	IQ1_S: {iq1SShape, dotIQ1_SRowsAVX2},
	IQ1_M: {iq1MShape, dotIQ1_MRowsAVX2},
}
