//go:build goexperiment.simd && amd64

package tensor

import (
	"encoding/binary"
	"simd/archsimd"

	"golang.org/x/sys/cpu"
)

// Kernels on F16C's conversions between float32 and binary16 (VCVTPS2PH rounds to the
// nearest binary16, ties to even, subnormals and overflow to infinity included; VCVTPH2PS
// widens exactly): one instruction each for what roundToF16 and F16ToF32 compute with
// integer and float tricks eight lanes at a time in the AVX2 kernels. Every CPU with AVX2
// has F16C in practice; useF16C checks anyway.

var useF16C = cpu.X86.HasF16C

// useAVX512 is whether the 512-bit form of madHalf can run (AVX-512 F, with the OS saving
// the 512-bit state).
var useAVX512 = archsimd.X86.AVX512()

//go:noescape
func madHalfF16CBlocks(acc, x *float32, n int, s float32)

//go:noescape
func madHalfAVX512Blocks(acc, x *float32, n int, s float32)

//go:noescape
func decodeF16F16CBlocks(dst *float32, src *byte, n int) int

//go:noescape
func dotF16ExactAVX512Blocks(x, y *byte, blocks int) (sum float64, peak float32, field, lsb uint16)

// dotF16ExactAVX512 is dotF16ExactAVX2 32 values a step on AVX-512 (several times faster):
// the same proof, so the same result, or ok false where the bound fails, for lengths not a
// multiple of 32 and for infinities and NaNs.
func dotF16ExactAVX512(n int, w, a []byte) (sum float32, ok bool) {
	if n == 0 || n%32 != 0 {
		return 0, false
	}
	s, peak, field, g := dotF16ExactAVX512Blocks(&w[:2*n][0], &a[:2*n][0], n/32)
	return exactF16Sum(n, int32(field), int32(g), peak, s)
}

// madHalfF16C is madHalf: a float32 FMA (as madHalfAVX2) rounded to binary16 by
// VCVTPS2PH, sixteen values a step with AVX-512, then eight, the rest by the scalar code.
func madHalfF16C(acc, x []float32, s float32) {
	acc = acc[:len(x)]
	d := 0
	if useAVX512 && len(x) >= 16 {
		d = len(x) &^ 15
		madHalfAVX512Blocks(&acc[0], &x[0], d, s)
	}
	if whole := len(x) &^ 7; whole > d {
		madHalfF16CBlocks(&acc[d], &x[d], whole-d, s)
		d = whole
	}
	for ; d < len(x); d++ {
		acc[d] = roundToF16(fma32(x[d], s, acc[d]))
	}
}

// decodeF16F16C widens F16 values with VCVTPH2PS, eight at a time; a block holding a NaN
// and the values after the last whole block one by one.
func decodeF16F16C(src []byte, dst []float32) {
	src = src[:2*len(dst)]
	whole := len(dst) &^ 7
	d := 0
	for d < whole {
		d += decodeF16F16CBlocks(&dst[d], &src[2*d], whole-d)
		if d < whole { // a NaN
			for end := d + 8; d < end; d++ {
				dst[d] = F16ToF32(binary.LittleEndian.Uint16(src[2*d:]))
			}
		}
	}
	for ; d < len(dst); d++ {
		dst[d] = F16ToF32(binary.LittleEndian.Uint16(src[2*d:]))
	}
}
