//go:build goexperiment.simd && amd64

package tensor

import "encoding/binary"

// Kernels on F16C's conversions between float32 and binary16 (VCVTPS2PH rounds to the
// nearest binary16, ties to even, subnormals and overflow to infinity included; VCVTPH2PS
// widens exactly): one instruction each for what roundToF16 and F16ToF32 compute with
// integer and float tricks eight lanes at a time. The AVX2 level requires F16C (every CPU
// with AVX2 has it in practice); the AVX-512 level adds 512-bit forms.

//go:noescape
func madHalfF16CBlocks(acc, x *float32, n int, s float32)

//go:noescape
func madHalfAVX512Blocks(acc, x *float32, n int, s float32)

//go:noescape
func scaleHalfF16CBlocks(acc *float32, n int, s float32)

//go:noescape
func scaleHalfAVX512Blocks(acc *float32, n int, s float32)

//go:noescape
func madHalfHeads8AVX512(acc *float32, accStride int, v *byte, vStride, positions, dv int, ws, ms *float32, raised *uint8)

// madHalfHeads8 is madHalfHeads on AVX-512 (madHalfHeads8AVX512), its arguments checked.
func madHalfHeads8(acc []float32, v []byte, vStride, positions, dv int, ws, ms []float32, raised []uint8) {
	if positions <= 0 {
		return
	}
	_ = acc[8*dv-1]
	_ = v[(positions-1)*vStride+2*dv-1]
	_, _ = ws[8*positions-1], ms[8*positions-1]
	_ = raised[positions-1]
	madHalfHeads8AVX512(&acc[0], 4*dv, &v[0], vStride, positions, dv, &ws[0], &ms[0], &raised[0])
}

//go:noescape
func decodeF16F16CBlocks(dst *float32, src *byte, n int) int

// madHalfF16C is madHalf: a float32 FMA rounded to binary16 by VCVTPS2PH, eight values a
// step; madHalfAVX512 the same sixteen a step first.
func madHalfF16C(acc, x []float32, s float32)   { madHalfSteps(acc, x, s, false) }
func madHalfAVX512(acc, x []float32, s float32) { madHalfSteps(acc, x, s, true) }

func madHalfSteps(acc, x []float32, s float32, wide bool) {
	acc = acc[:len(x)]
	d := halfSteps(len(x), wide,
		func(d, n int) { madHalfAVX512Blocks(&acc[d], &x[d], n, s) },
		func(d, n int) { madHalfF16CBlocks(&acc[d], &x[d], n, s) })
	for ; d < len(x); d++ {
		acc[d] = roundToF16(fma32(x[d], s, acc[d]))
	}
}

// scaleHalfF16C is scaleHalf: a float32 product rounded to binary16 by VCVTPS2PH, eight
// values a step; scaleHalfAVX512 the same sixteen a step first.
func scaleHalfF16C(acc []float32, s float32)   { scaleHalfSteps(acc, s, false) }
func scaleHalfAVX512(acc []float32, s float32) { scaleHalfSteps(acc, s, true) }

func scaleHalfSteps(acc []float32, s float32, wide bool) {
	d := halfSteps(len(acc), wide,
		func(d, n int) { scaleHalfAVX512Blocks(&acc[d], n, s) },
		func(d, n int) { scaleHalfF16CBlocks(&acc[d], n, s) })
	for ; d < len(acc); d++ {
		acc[d] = roundToF16(acc[d] * s)
	}
}

// halfSteps runs a kernel over n values sixteen a step with AVX-512 (wideSteps, if wide),
// then eight (narrow), from value d for a multiple of the step, and returns how many it
// did: the caller's scalar code does the rest.
func halfSteps(n int, wide bool, wideSteps, narrow func(d, n int)) int {
	d := 0
	if wide && n >= 16 {
		d = n &^ 15
		wideSteps(0, d)
	}
	if whole := n &^ 7; whole > d {
		narrow(d, whole-d)
		d = whole
	}
	return d
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

//go:noescape
func encodeF16F16CBlocks(dst *byte, src *float32, n int)

//go:noescape
func quantizeQ8_0AVX512Blocks(dst *byte, src *float32, blocks int) int

// encodeF16F16C is F16's FromFloat eight values a step (F32ToF16's bits, NaNs included),
// the values after the last whole step one by one. Every F16 matmul converts its
// activations this way, and one value at a time it cost a tenth of a tiny model's decode.
func encodeF16F16C(src []float32, dst []byte) {
	dst = dst[:2*len(src)]
	whole := len(src) &^ 7
	if whole > 0 {
		encodeF16F16CBlocks(&dst[0], &src[0], whole)
	}
	encodeHalf(src[whole:], dst[2*whole:], F32ToF16)
}

//go:noescape
func dotF16HeadsAVX512(q *float32, k *byte, kStride, positions, dk, heads int, scores *float32, headStride int)

//go:noescape
func dotF16HeadsRowAVX512(q, k *float32, dk, heads int, scores *float32, headStride int)

// dotF16HeadsTile is f16Heads on AVX-512 for keys of a multiple of 64 values, else false:
// up to 256 (dotF16HeadsAVX512) each row widened into registers, longer ones (MLA's
// latent) widened into scratch (keys, dk floats) a row at a time (dotF16HeadsRowAVX512).
func dotF16HeadsTile(q []float32, k []byte, kStride, positions, dk int, scores []float32, headStride int, keys []float32) bool {
	if dk%64 != 0 || dk == 0 || positions <= 0 {
		return positions <= 0
	}
	heads := len(q) / dk
	_ = k[(positions-1)*kStride+2*dk-1]
	_ = scores[(heads-1)*headStride+positions-1]
	if dk <= 256 {
		dotF16HeadsAVX512(&q[0], &k[0], kStride, positions, dk, heads, &scores[0], headStride)
		return true
	}
	keys = keys[:dk]
	for p := range positions {
		decodeF16F16C(k[p*kStride:p*kStride+2*dk], keys)
		dotF16HeadsRowAVX512(&q[0], &keys[0], dk, heads, &scores[p], headStride)
	}
	return true
}

//go:noescape
func quantizeQ8KAVX512Blocks(dst *byte, src *float32, blocks int) int

// quantizeQ8_0AVX512 and quantizeQ8KAVX512 are Q8_0's and Q8_K's activation quantizers
// (formatQ8_0.encode with x86 true, encodeQ8_K) a block in a few vector instructions; a
// block the kernel leaves (an infinity or a NaN, for Q8_K also a subnormal largest value)
// goes to the scalar code, which decides what such a block becomes. Every K-quant matmul
// converts its activations with Q8_K's, a hundred-odd nanoseconds a block in Go.
func quantizeQ8_0AVX512(src []float32, dst []byte) {
	vectorBlocks(src, dst, qk32, formatQ8_0.blockBytes, quantizeQ8_0AVX512Blocks,
		func(src []float32, dst []byte) { formatQ8_0.encode(src, dst, true) })
}

func quantizeQ8KAVX512(src []float32, dst []byte) {
	vectorBlocks(src, dst, qkK, 292, quantizeQ8KAVX512Blocks, encodeQ8_K)
}

// vectorBlocks runs a block quantizer kernel (which returns how many of the blocks it
// did) over src, and the scalar encoder on each block the kernel stops before.
func vectorBlocks(src []float32, dst []byte, values, bytes int, kernel func(dst *byte, src *float32, blocks int) int, scalar func([]float32, []byte)) {
	blocks := len(src) / values
	src, dst = src[:blocks*values], dst[:blocks*bytes]
	for b := 0; b < blocks; b++ {
		b += kernel(&dst[b*bytes], &src[b*values], blocks-b)
		if b < blocks {
			scalar(src[b*values:][:values], dst[b*bytes:][:bytes])
		}
	}
}

// vecF16Rows4AVX512 is vecReduced of four F16 rows (rowBytes apart) by a widened vector,
// steps steps of 64 values, widening the rows in registers (decode reads each row once).
//
//go:noescape
func vecF16Rows4AVX512(w *byte, rowBytes, steps int, a *float32, out *[4]float32)

// tinyF16Rows4x4AVX512 is tinyDot of four F16 rows (rowBytes apart, widened in
// registers) by four widened vectors (aStride bytes apart), steps steps of 16 values:
// out[4r+t] for row r and vector t.
//
//go:noescape
func tinyF16Rows4x4AVX512(w *byte, rowBytes, steps int, a *float32, aStride int, out *[16]float32)

//go:noescape
func exp32Blocks(x *float32, n int, table *[32]uint64) int

// exp32sAVX512 is exp32s eight values a step (exp32Blocks), with exp32's bits; steps
// holding a value exp32 treats apart, and the values after the last whole step, one by one.
func exp32sAVX512(x []float32) {
	whole := len(x) &^ 7
	for d := 0; d < whole; {
		d += exp32Blocks(&x[d], whole-d, &exp2Table32)
		if d < whole {
			for end := d + 8; d < end; d++ {
				x[d] = exp32(x[d])
			}
		}
	}
	for d := whole; d < len(x); d++ {
		x[d] = exp32(x[d])
	}
}
