//go:build goexperiment.simd && amd64

package tensor

import "unsafe"

// Q2_K and Q3_K × Q8_K on AVX-512 VNNI (simd_lowk_vnni_amd64.s), one and four tokens over
// rows: the expert types of the low-bit DeepSeek and Qwen files (Q2_K, Q3_K_S/M/L and the
// mixes built on them). Their AVX2 kernels (dotQ2_KAVX2, dotQ3_KAVX2) are bound by their
// arithmetic: on the build machine a 1 GiB expert mat-vec ran at 13.0 (Q2_K) and 7.3 GB/s
// (Q3_K) on two threads against a 31-33 GB/s read, and prefill had only the one-token
// kernels, token by token (0.67-0.70× llama.cpp's prompt speed on such files).
//
// The kernels give the AVX2 kernels' bits (TestVNNIMatchesAVX2): a 512-bit vector holds
// the 64 values of two consecutive shifts of a half's code bytes (the lower 256 bits the
// even shift, the upper the odd), split by one GFNI affine transform; VPMADDUBSW pairs the
// products and VPDPWSSD multiplies each pair sum by its 16-value sub-block's scale and
// adds it. Each 32-bit lane of the lower and upper halves adds the same four products
// times the same scale as a lane of the AVX2 kernels (exact integers), so the halves added
// are the AVX2 kernels' eight lanes, scaled and accumulated in their float order. Q3_K's
// clear hmask bits become 4·clear bytes by a second GFNI transform (its constant flips the
// bit) and are subtracted as the AVX2 kernel does, by a second VPMADDUBSW.

//go:noescape
func dotQ2_KRowsVNNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)

//go:noescape
func dotQ2_KRepackedRowsVNNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)

//go:noescape
func dotQ3_KRowsVNNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)

//go:noescape
func dotQ2_KTokens4RowsVNNI(w, a0, a1, a2, a3 unsafe.Pointer, nb, rows, rowBytes int, o0, o1, o2, o3 *float32)

//go:noescape
func dotQ3_KTokens4RowsVNNI(w, a0, a1, a2, a3 unsafe.Pointer, nb, rows, rowBytes int, o0, o1, o2, o3 *float32)

var (
	q2KShape = blockShape{values: qkK, bytes: 84, actBytes: 292}
	q3KShape = blockShape{values: qkK, bytes: 110, actBytes: 292}

	dotQ2_KVNNI          = vnniDot(q2KShape, dotQ2_KRowsVNNI)
	dotQ3_KVNNI          = vnniDot(q3KShape, dotQ3_KRowsVNNI)
	dotQ2_KTokens4RowsOf = tokens4RowsOf(q2KShape, dotQ2_KTokens4RowsVNNI)
	dotQ3_KTokens4RowsOf = tokens4RowsOf(q3KShape, dotQ3_KTokens4RowsVNNI)
)

// Constants of the kernels.
var (
	// lowKCodes[p] are GFNI matrices that take a code byte's bits 4p, 4p+1 to bits 0-1 in
	// the lower 256 bits (shift 2p of the half) and bits 4p+2, 4p+3 in the upper (shift
	// 2p+1), clearing the rest: result bit i is the parity of matrix byte 7-i and the byte.
	lowKCodes = func() (m [2][8]uint64) {
		for p := range m {
			for q := range 8 {
				s := 4*p + 2*(q/4)
				m[p][q] = uint64(1)<<s<<56 | uint64(1)<<(s+1)<<48
			}
		}
		return m
	}()
	// q3KClear[2h+p] move hmask bit 4h+2p (lower 256 bits) or 4h+2p+1 (upper) to bit 2;
	// the transform's constant 0x04 then inverts it: 4 where the value's high bit is clear.
	q3KClear = func() (m [4][8]uint64) {
		for hp := range m {
			for q := range 8 {
				m[hp][q] = uint64(1) << (2*hp + q/4) << 40
			}
		}
		return m
	}()
	// Q3_K's scale unpacking (Q3K_SCALES): from the sixteen bytes at block offset 94 (the
	// scales are bytes 2-13), the dwords a0 a1 a0 a1 and a2 ×4, their shifts and rotations.
	q3KScaleLow  = [16]byte{2, 3, 4, 5, 6, 7, 8, 9, 2, 3, 4, 5, 6, 7, 8, 9}
	q3KScaleTop  = [16]byte{10, 11, 12, 13, 10, 11, 12, 13, 10, 11, 12, 13, 10, 11, 12, 13}
	q3KLowShifts = [4]uint32{0, 0, 4, 4}
	q3KTopRotate = [4]uint32{4, 2, 0, 30}
	q3KTopMask   = [16]byte{0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30}
)

// installLowKVNNI puts the kernels in place of the AVX2 ones: as VecDot, over rows for
// decode (dotRowsOne) and for four tokens (prefill).
func installLowKVNNI(k *kernelSet) {
	k.traits[Q2_K].VecDot, k.traits[Q3_K].VecDot = dotQ2_KVNNI, dotQ3_KVNNI
	k.dotRowsOne[Q2_K], k.dotRowsOne[Q3_K] = vnniDotRows(q2KShape, dotQ2_KRowsVNNI), vnniDotRows(q3KShape, dotQ3_KRowsVNNI)
	k.dotTokens4Rows[Q2_K], k.dotTokens4Rows[Q3_K] = dotQ2_KTokens4RowsOf, dotQ3_KTokens4RowsOf
	k.dotTokens4[Q2_K], k.dotTokens4[Q3_K] = vnniDotTokens4(dotQ2_KTokens4RowsOf), vnniDotTokens4(dotQ3_KTokens4RowsOf)
	k.repackedKernels[Q2_K] = vnniDotRows(q2KShape, dotQ2_KRepackedRowsVNNI)
}
