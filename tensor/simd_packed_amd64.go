//go:build goexperiment.simd && amd64

package tensor

import "unsafe"

// The packed kernels of packed.go (simd_packed_amd64.s). Packing a group of 16 rows loads
// each block's 16 value bytes of four rows into one register, transposes the four
// registers' dwords (VPERMI2D, VSHUFI64X2) so that register j holds dword j of every row,
// splits the nibbles and looks them up in the format's table (Q4_0's nibbles are its
// unsigned bytes already), and gathers the rows' scales.

// Constants of the packing: packRowIndex numbers the 16 lanes (times rowBytes, each row's
// offset for the scale gather); packPairs01 picks dwords 0 and 1 of eight rows from two
// registers of four rows each (VPERMI2D), packPairs23 dwords 2 and 3; iq4Unsigned is the
// IQ4 levels plus 128.
var (
	packRowIndex = [16]int32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
	packPairs01  = [16]int32{0, 4, 8, 12, 16, 20, 24, 28, 1, 5, 9, 13, 17, 21, 25, 29}
	packPairs23  = [16]int32{2, 6, 10, 14, 18, 22, 26, 30, 3, 7, 11, 15, 19, 23, 27, 31}
	// transpose4x4 maps dword 4l+j to 4j+l (its own inverse): the one-token kernel's row
	// order, and back.
	transpose4x4 = [16]int32{0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15}
	// q4KPick are VPSHUFB controls for the Q4_K packing: q4KPick[b] moves byte b of every
	// dword to its low byte and zeroes the rest, q4KPick[4+b] puts it in both words.
	q4KPick = func() (t [8][64]uint8) {
		for b := range 4 {
			for i := range 16 {
				src := uint8(i%4*4 + b)
				copy(t[b][4*i:], []uint8{src, 0x80, 0x80, 0x80})
				copy(t[4+b][4*i:], []uint8{src, 0x80, src, 0x80})
			}
		}
		return t
	}()
	// q2KPack are the Q2_K packing's byte constants: [0] 4·(a dword's place in its 128-bit
	// lane) in each of its bytes (Q2KP_PACK_VALUE's table rows), [1] and [2] VPSHUFB
	// controls that widen bytes 0-1 and 2-3 of each dword to words (the mins pairs).
	q2KPack = func() (t [3][64]uint8) {
		for i := range 16 {
			l := uint8(i % 4 * 4)
			copy(t[0][4*i:], []uint8{l, l, l, l})
			copy(t[1][4*i:], []uint8{l, 0x80, l + 1, 0x80})
			copy(t[2][4*i:], []uint8{l + 2, 0x80, l + 3, 0x80})
		}
		return t
	}()
	iq4Unsigned = func() (t [16]uint8) {
		for i, v := range iq4Values {
			t[i] = uint8(int(v) + 128)
		}
		return t
	}()
)

//go:noescape
func packQ4_0Rows16(w unsafe.Pointer, rowBytes, nb int, dst unsafe.Pointer)

//go:noescape
func packIQ4_NLRows16(w unsafe.Pointer, rowBytes, nb int, dst unsafe.Pointer)

//go:noescape
func packMXFP4Rows16(w unsafe.Pointer, rowBytes, nb int, dst unsafe.Pointer)

//go:noescape
func packQ4_KRows16(w unsafe.Pointer, rowBytes, nb int, dst unsafe.Pointer)

//go:noescape
func dotQ4_0Rows16x1(w unsafe.Pointer, rowBytes, groups, nb int, a unsafe.Pointer, out *float32)

//go:noescape
func dotIQ4_NLRows16x1(w unsafe.Pointer, rowBytes, groups, nb int, a unsafe.Pointer, out *float32)

//go:noescape
func dotMXFP4Rows16x1(w unsafe.Pointer, rowBytes, groups, nb int, a unsafe.Pointer, out *float32)

//go:noescape
func dotPackedTokens8(w unsafe.Pointer, nb int, acts *unsafe.Pointer, outs **float32, mask uint16)

//go:noescape
func dotPackedTokens4(w unsafe.Pointer, nb int, acts *unsafe.Pointer, outs **float32, mask uint16)

//go:noescape
func dotPackedTokens2(w unsafe.Pointer, nb int, acts *unsafe.Pointer, outs **float32, mask uint16)

//go:noescape
func dotPackedTokens1(w unsafe.Pointer, nb int, acts *unsafe.Pointer, outs **float32, mask uint16)

//go:noescape
func dotQ4_KPackedGemm4(w unsafe.Pointer, nb int, acts *unsafe.Pointer, outs **float32, mask uint16)

//go:noescape
func dotQ4_KPackedGemv4(w unsafe.Pointer, nb int, acts *unsafe.Pointer, outs **float32, mask uint16)

//go:noescape
func dotQ4_KPackedGemv2(w unsafe.Pointer, nb int, acts *unsafe.Pointer, outs **float32, mask uint16)

//go:noescape
func dotQ4_KPackedGemv1(w unsafe.Pointer, nb int, acts *unsafe.Pointer, outs **float32, mask uint16)

//go:noescape
func packQ2_KRows16(w unsafe.Pointer, rowBytes, nb int, dst unsafe.Pointer)

//go:noescape
func dotQ2_KPackedGemm4(w unsafe.Pointer, nb int, acts *unsafe.Pointer, outs **float32, mask uint16)

//go:noescape
func dotQ2_KPackedGemv4(w unsafe.Pointer, nb int, acts *unsafe.Pointer, outs **float32, mask uint16)

//go:noescape
func dotQ2_KPackedGemv2(w unsafe.Pointer, nb int, acts *unsafe.Pointer, outs **float32, mask uint16)

//go:noescape
func dotQ2_KPackedGemv1(w unsafe.Pointer, nb int, acts *unsafe.Pointer, outs **float32, mask uint16)

// installPacked registers the packed kernels (the CPU has AVX-512 VNNI).
func installPacked(k *kernelSet) {
	q4KMinTokens := kPackedMinTokens
	if k.repackedTokens2[Q4_K] != nil {
		q4KMinTokens = kPackedMinTokensInPlace2
	}
	dots := [4]packedDot{dotPackedTokens8, dotPackedTokens4, dotPackedTokens2, dotPackedTokens1}
	legacy := func(pack func(w unsafe.Pointer, rowBytes, nb int, dst unsafe.Pointer), rows1 func(w unsafe.Pointer, rowBytes, groups, nb int, a unsafe.Pointer, out *float32), offset int32) *packedFormat {
		return &packedFormat{pack: pack, rows1: rows1, prepared: true, offset: offset, blockValues: qk32, blockBytes: packedBlockBytes, dots: dots}
	}
	k.packedFormats[Q4_0] = legacy(packQ4_0Rows16, dotQ4_0Rows16x1, 8)
	k.packedFormats[IQ4_NL] = legacy(packIQ4_NLRows16, dotIQ4_NLRows16x1, 128)
	k.packedFormats[MXFP4] = legacy(packMXFP4Rows16, dotMXFP4Rows16x1, 12)
	k.packedFormats[Q4_K] = &packedFormat{pack: packQ4_KRows16, blockValues: qkK, blockBytes: q4KPackedBytes,
		dots: [4]packedDot{nil, dotQ4_KPackedGemv4, dotQ4_KPackedGemv2, dotQ4_KPackedGemv1}, gemm4: dotQ4_KPackedGemm4, minTokens: q4KMinTokens}
	k.packedFormats[Q2_K] = &packedFormat{pack: packQ2_KRows16, blockValues: qkK, blockBytes: q2KPackedBytes,
		dots: [4]packedDot{nil, dotQ2_KPackedGemv4, dotQ2_KPackedGemv2, dotQ2_KPackedGemv1}, gemm4: dotQ2_KPackedGemm4, minTokens: kPackedMinTokens}
}
