//go:build goexperiment.simd && amd64

package tensor

import (
	"encoding/binary"
	"math"
	"simd/archsimd"
	"sync/atomic"

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
func scaleHalfF16CBlocks(acc *float32, n int, s float32)

//go:noescape
func scaleHalfAVX512Blocks(acc *float32, n int, s float32)

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
// VCVTPS2PH, in halfSteps.
func madHalfF16C(acc, x []float32, s float32) {
	acc = acc[:len(x)]
	d := halfSteps(len(x),
		func(d, n int) { madHalfAVX512Blocks(&acc[d], &x[d], n, s) },
		func(d, n int) { madHalfF16CBlocks(&acc[d], &x[d], n, s) })
	for ; d < len(x); d++ {
		acc[d] = roundToF16(fma32(x[d], s, acc[d]))
	}
}

// scaleHalfF16C is scaleHalf: a float32 product rounded to binary16 by VCVTPS2PH, in
// halfSteps.
func scaleHalfF16C(acc []float32, s float32) {
	d := halfSteps(len(acc),
		func(d, n int) { scaleHalfAVX512Blocks(&acc[d], n, s) },
		func(d, n int) { scaleHalfF16CBlocks(&acc[d], n, s) })
	for ; d < len(acc); d++ {
		acc[d] = roundToF16(acc[d] * s)
	}
}

// halfSteps runs a kernel over n values sixteen a step with AVX-512 (wide), then eight
// (narrow), from value d for a multiple of the step, and returns how many it did: the
// caller's scalar code does the rest.
func halfSteps(n int, wide, narrow func(d, n int)) int {
	d := 0
	if useAVX512 && n >= 16 {
		d = n &^ 15
		wide(0, d)
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

//go:noescape
func widenF16Summary(dst *float64, src *byte, n int, summary *[2]uint16)

//go:noescape
func dotF16WideRows1(w *byte, rowBytes, rows, n int, a *float64, out *float64, summaries *[2]uint16)

//go:noescape
func dotF16WideSums1(w *byte, rowBytes, rows, n int, a *float64, out *float64, summaries *[2]uint16)

//go:noescape
func dotF16WideRows4(w *byte, rowBytes, rows, n int, a *float64, out *float64, summaries *[2]uint16)

//go:noescape
func f16SumSquares(x *byte, n int) float64

//go:noescape
func dotF16WideSums8(w *byte, rowBytes, rows, n int, a *float64, out *float64, summaries *[2]uint16)

//go:noescape
func dotF16WideRows8(w *byte, rowBytes, rows, n int, a *float64, out *float64, summaries *[2]uint16)

// dotF16WideTile is the f16Tile hook on AVX-512, for lengths n a multiple of 16 (F16
// weight matmuls, the tiny fixtures' attention and output, and attention scores of heads
// below 128). dotF16Exact proves its sums product by product, which costs as much as the
// sums; here a vector is widened to float64 once, each row once for up to eight vectors,
// and the products are summed by float64 FMAs in any order, with only each row's and each
// vector's largest and smallest magnitudes kept. Those bound every product (f16Bound), more
// loosely than product by product; a pair the loose bound cannot prove (3-4% of them on
// tiny-qwen3moe) goes to dotF16AVX2, which tries the tight bound and else adds in ggml's
// order. So every output is the sequential float64 sum's bits.
func dotF16WideTile(n int, rows []byte, rowBytes, nr int, acts []byte, dst []float32, stride int, s *wideScratch, summaries []atomic.Uint32) bool {
	if !useAVX512 || n%16 != 0 || nr == 0 {
		return false
	}
	rows = rows[:(nr-1)*rowBytes+2*n]
	count := len(acts) / (2 * n)
	s.reserve(n, nr)
	lim := f16BoundLimit(n)
	for i := 0; i < count; {
		group, kernel := 1, dotF16WideRows1
		switch {
		case count-i >= 8:
			group, kernel = 8, dotF16WideRows8
		case count-i >= 4:
			group, kernel = 4, dotF16WideRows4
		}
		var as [8][2]uint16
		var bounds [8]f16Bound
		for k := range group {
			widenF16Summary(&s.act[k*n], &acts[(i+k)*2*n], n, &as[k])
			bounds[k] = f16BoundOf(as[k])
		}
		// Rows whose summaries a matrix keeps skip that work in the one- and eight-vector
		// kernels (the four-vector one, for a tile's last few vectors, recomputes the same
		// values); unknown ones are kept for the next tiles.
		cached := len(summaries) == nr
		known := cached && loadSummaries(s.summaries[:nr], summaries)
		switch {
		case known && group == 1:
			kernel = dotF16WideSums1
		case known && group == 8:
			kernel = dotF16WideSums8
		}
		kernel(&rows[0], rowBytes, nr, n, &s.act[0], &s.sums[0], &s.summaries[0])
		if cached && !known {
			keepSummaries(summaries, s.summaries[:nr])
		}
		var squares [8]float64 // the vectors' sums of squares, found when first needed
		var squared [8]bool
		for r, summary := range s.summaries[:nr] {
			row, rowSquares := f16BoundOf(summary), -1.0
			for k, sum := range s.sums[r*group : (r+1)*group] {
				if row.exact(bounds[k], lim) {
					dst[(i+k)*stride+r] = float32(sum)
					continue
				}
				w, a := rows[r*rowBytes:][:2*n], acts[(i+k)*2*n:][:2*n]
				if rowSquares < 0 {
					rowSquares = f16SumSquares(&w[0], n)
				}
				if !squared[k] {
					squares[k], squared[k] = f16SumSquares(&a[0], n), true
				}
				if f16NormsExact(rowSquares, squares[k], row.g+bounds[k].g) {
					dst[(i+k)*stride+r] = float32(sum)
				} else {
					dst[(i+k)*stride+r] = dotF16AVX2(n, w, a)
				}
			}
		}
		i += group
	}
	return true
}

// loadSummaries unpacks the rows' stored summaries (Matrix.summaries) into out and reports
// whether all were known. A stored summary is 1<<31 | largest<<16 | smallest nonzero less
// one (the largest magnitude has bit 15 clear, so a known summary is never 0).
func loadSummaries(out [][2]uint16, stored []atomic.Uint32) bool {
	for r := range out {
		v := stored[r].Load()
		if v == 0 {
			return false
		}
		out[r] = [2]uint16{uint16(v >> 16 & 0x7FFF), uint16(v)}
	}
	return true
}

// keepSummaries stores the rows' summaries for later decode steps.
func keepSummaries(stored []atomic.Uint32, summaries [][2]uint16) {
	for r, sum := range summaries {
		stored[r].Store(1<<31 | uint32(sum[0])<<16 | uint32(sum[1]))
	}
}

// f16Bound is what exactF16Sum's bound needs to know of one vector, from its summary
// (largest magnitude, smallest nonzero magnitude less one, as binary16 bits): the largest
// magnitude, and max(E,1) for the exponent field E of the smallest nonzero value; g is
// far below any reachable value for a vector holding an infinity or a NaN. A pair's
// largest magnitudes bound every |product|, the sum of their g every product's last bit
// from below.
type f16Bound struct {
	peak float32
	g    int32
}

func f16BoundOf(s [2]uint16) f16Bound {
	if s[0] >= 0x7C00 {
		return f16Bound{g: -1 << 20}
	}
	return f16Bound{peak: f16Table[s[0]], g: max(int32((s[1]+1)>>10), 1)} // +1 wraps to 0 for zeros
}

// exact is f16PeakBound for the pair of b and o (lim = f16BoundLimit(n)): their largest
// magnitudes' product bounds every |product|. A vector of zeros passes with any other: its
// products are ±0 and sum to +0 in any order.
func (b f16Bound) exact(o f16Bound, lim int32) bool {
	return f16PeakBound(b.peak*o.peak, b.g+o.g, lim)
}

// f16NormsExact is the second chance of a pair that f16Bound.exact cannot prove: by
// Cauchy-Schwarz, Σ|x·y| ≤ √(Σx²·Σy²), which for values spread over many binades is
// several bits below n·max|x|·max|y|; every partial sum must stay within 2^53 units of
// 2^(g−50), g the sum of the pair's f16Bound.g. sx and sy are f16SumSquares (each square
// exact, the sums within n·2^-53 relatively), so the bound, computed in float64, is
// widened by 2^-30 (more than all the roundings for n up to 2^20). A vector holding an
// infinity or a NaN has an infinite or NaN sum of squares and fails.
func f16NormsExact(sx, sy float64, g int32) bool {
	return math.Sqrt(sx*sy)*(1+0x1p-30) <= math.Ldexp(1, int(g)+3)
}

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
