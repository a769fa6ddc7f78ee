package tensor

import (
	"encoding/binary"
	"math"
	"math/bits"
)

// ggml's original 32-element formats: Q4_0, Q4_1, Q5_0, Q5_1 (4 or 5 bits with a scale d,
// and for _1 a min m) and Q8_0/Q8_1 (bytes with a scale; Q8_1 adds s = d·Σq for the dot
// products of _1 weights). Layouts: d f16 first, then m or s f16 for _1, the 5th bits as
// a little-endian u32 for Q5 (bit j for element j), then the quants (for 4/5 bits:
// element j in the low nibble of byte j, element j+16 in the high nibble).

const qk32 = 32

// legacyFormat describes one of these formats for the shared code below.
type legacyFormat struct {
	blockBytes int
	// hasMin: values are q·d + m (_1, m at offset 2); otherwise (q - 2^(bits-1))·d for the
	// 4/5-bit formats and q·d for Q8.
	hasMin bool
	qhOff  int // offset of the 5th bits, 0 for the formats without them
	qsOff  int
	bytes  bool // Q8_0/Q8_1: one signed byte per value
	// partner is the activation format of the dot product: Q8_0, or Q8_1 for formats with a
	// min (its s = d·Σq carries the min's contribution).
	partner Type
	// sumFirst: ggml's kernel scales the integer sum by the weight scale, then by the
	// activation scale (Q4_0); the others multiply the two scales first.
	sumFirst bool
}

var (
	formatQ4_0 = legacyFormat{blockBytes: 18, qsOff: 2, partner: Q8_0, sumFirst: true}
	formatQ4_1 = legacyFormat{blockBytes: 20, hasMin: true, qsOff: 4, partner: Q8_1}
	formatQ5_0 = legacyFormat{blockBytes: 22, qhOff: 2, qsOff: 6, partner: Q8_0}
	formatQ5_1 = legacyFormat{blockBytes: 24, hasMin: true, qhOff: 4, qsOff: 8, partner: Q8_1}
	formatQ8_0 = legacyFormat{blockBytes: 34, qsOff: 2, bytes: true, partner: Q8_0}
	formatQ8_1 = legacyFormat{blockBytes: 36, qsOff: 4, bytes: true, partner: Q8_1}
)

func init() {
	for t, f := range map[Type]*legacyFormat{Q4_0: &formatQ4_0, Q4_1: &formatQ4_1, Q5_0: &formatQ5_0, Q5_1: &formatQ5_1, Q8_0: &formatQ8_0} {
		traits[t] = &Traits{
			ToFloat:    func(src []byte, dst []float32) { f.decode(src, dst) },
			FromFloat:  func(src []float32, dst []byte) { f.encode(src, dst, false) },
			VecDotType: f.partner,
			VecDot:     func(n int, w, a []byte) float32 { return f.vecDot(n, w, a) },
		}
	}
	// Q8_1 only ever holds activations (ggml has no kernels with Q8_1 weights); decoding it
	// is the same d·q as Q8_0.
	traits[Q8_1] = &Traits{
		ToFloat:    func(src []byte, dst []float32) { formatQ8_1.decode(src, dst) },
		FromFloat:  func(src []float32, dst []byte) { formatQ8_1.encode(src, dst, false) },
		VecDotType: Q8_1,
	}
	activationFromFloat[Q8_0] = func(src []float32, dst []byte) { formatQ8_0.encode(src, dst, true) }
	activationFromFloat[Q8_1] = func(src []float32, dst []byte) { formatQ8_1.encode(src, dst, true) }
}

// bits is the width of the quants: 4, 5 or 8.
func (f *legacyFormat) bits() int {
	switch {
	case f.bytes:
		return 8
	case f.qhOff > 0:
		return 5
	}
	return 4
}

// header returns a block's d, m (0 without a min), 5th bits (0 without them) and the
// offset its codes are stored with.
func (f *legacyFormat) header(b []byte) (d, m float32, qh uint32, offset int) {
	d = halfAt(b, 0)
	if f.hasMin {
		m = halfAt(b, 2)
	} else if !f.bytes {
		offset = 1 << (f.bits() - 1)
	}
	if f.qhOff > 0 {
		qh = binary.LittleEndian.Uint32(b[f.qhOff:])
	}
	return d, m, qh, offset
}

// decode computes the value of each of the 16 or 32 codes once per block and looks the
// elements up: the same float operations as ggml's per-element formula.
func (f *legacyFormat) decode(src []byte, dst []float32) {
	var values [32]float32
	codes := 1 << f.bits()
	for i := range len(dst) / qk32 {
		b, y := src[i*f.blockBytes:][:f.blockBytes], dst[i*qk32:][:qk32]
		d, m, qh, offset := f.header(b)
		switch {
		case f.bytes:
			for j, q := range b[f.qsOff : f.qsOff+qk32] {
				y[j] = float32(int8(q)) * d
			}
			continue
		case f.hasMin:
			for c := range values[:codes] {
				values[c] = float32(float32(c)*d) + m
			}
		default:
			for c := range values[:codes] {
				values[c] = float32(c-offset) * d
			}
		}
		qs := b[f.qsOff : f.qsOff+16]
		if f.qhOff == 0 {
			for j, q := range qs {
				y[j], y[j+16] = values[q&15], values[q>>4]
			}
			continue
		}
		for j, q := range qs {
			y[j] = values[q&15|uint8(qh>>j&1)<<4]
			y[j+16] = values[q>>4|uint8(qh>>(j+16)&1)<<4]
		}
	}
}

// vecDot is ggml_vec_dot_{q4_0,q5_0,q8_0}_q8_0_generic and ggml_vec_dot_{q4_1,q5_1}_q8_1_generic.
func (f *legacyFormat) vecDot(n int, w, a []byte) float32 {
	y8 := &formatQ8_0
	if f.partner == Q8_1 {
		y8 = &formatQ8_1
	}
	var sumf float32
	for i := range n / qk32 {
		b := w[i*f.blockBytes:][:f.blockBytes]
		y := a[i*y8.blockBytes:][:y8.blockBytes]
		qy := y[y8.qsOff : y8.qsOff+qk32]
		d, m, qh, offset := f.header(b)
		sumi := 0
		if f.bytes {
			for j, q := range b[f.qsOff : f.qsOff+qk32] {
				sumi += int(int8(q)) * int(int8(qy[j]))
			}
		} else {
			qs := b[f.qsOff : f.qsOff+16]
			for j, q := range qs {
				lo, hi := int(q&15)-offset, int(q>>4)-offset
				sumi += lo*int(int8(qy[j])) + hi*int(int8(qy[j+16]))
			}
			// A 5th bit adds 16 to element j's code: 16·y[j] to the sum.
			for ; qh != 0; qh &= qh - 1 {
				sumi += 16 * int(int8(qy[bits.TrailingZeros32(qh)]))
			}
		}
		dy := halfAt(y, 0)
		switch {
		case f.sumFirst:
			sumf += float32(float32(sumi) * d * dy)
		case f.hasMin:
			sumf += float32(d*dy*float32(sumi)) + float32(m*halfAt(y, 2))
		default:
			sumf += float32(d * dy * float32(sumi))
		}
	}
	return sumf
}

// encode is ggml's reference quantizer (quantize_row_*_ref). The _0 formats map the value
// of largest magnitude to -2^(bits-1) and round by adding 2^(bits-1) + 0.5 and truncating;
// the _1 formats spread the levels from min to max. For Q8 see encodeBytes.
func (f *legacyFormat) encode(src []float32, dst []byte, x86 bool) {
	if f.bytes {
		f.encodeBytes(src, dst, x86)
		return
	}
	nmax := int8(1)<<f.bits() - 1
	for i := range len(src) / qk32 {
		x, b := src[i*qk32:][:qk32], dst[i*f.blockBytes:][:f.blockBytes]
		var d, base, offset float32
		if f.hasMin {
			lo, hi := minMax(x)
			d, base, offset = (hi-lo)/float32(nmax), lo, 0.5
			putHalf(b, 2, lo)
		} else {
			half := float32(nmax/2 + 1)
			_, vmax := absMax(x)
			d, offset = vmax/-half, half+0.5
		}
		id := inverse(d)
		putHalf(b, 0, d)
		var qh uint32
		for j := range 16 {
			q0 := uint8(min(nmax, int8(truncInt(float32((x[j]-base)*id)+offset))))
			q1 := uint8(min(nmax, int8(truncInt(float32((x[j+16]-base)*id)+offset))))
			b[f.qsOff+j] = q0&15 | q1<<4
			qh |= uint32(q0>>4)<<j | uint32(q1>>4)<<(j+16)
		}
		if f.qhOff > 0 {
			binary.LittleEndian.PutUint32(b[f.qhOff:], qh)
		}
	}
}

// encodeBytes quantizes Q8_0/Q8_1 blocks; for Q8_1 it also stores s = d·Σq. The reference
// quantizer multiplies by 1/d and rounds halves away from zero; ggml's x86 matmul path
// (x86 true) multiplies by 127/amax and rounds halves to even, which gives different bytes
// for some inputs.
func (f *legacyFormat) encodeBytes(src []float32, dst []byte, x86 bool) {
	for i := range len(src) / qk32 {
		x, b := src[i*qk32:][:qk32], dst[i*f.blockBytes:][:f.blockBytes]
		amax, _ := absMax(x)
		d := amax / 127
		id := inverse(d)
		if x86 {
			id = 0
			if amax != 0 {
				id = 127 / amax
			}
		}
		putHalf(b, 0, d)
		sum := 0
		for j, v := range x {
			var q int8
			if x86 {
				q = int8(max(-128, min(127, truncInt(float32(math.RoundToEven(float64(v*id)))))))
			} else {
				q = int8(truncInt(roundAway(v * id)))
			}
			b[f.qsOff+j] = uint8(q)
			sum += int(q)
		}
		if f.qsOff == 4 {
			putHalf(b, 2, float32(sum)*d)
		}
	}
}

// q8Quants returns the 32 signed quants of a Q8_0 block.
func q8Quants(b []byte) []byte { return b[2 : 2+qk32] }

// absMax returns the largest |x| and the x it came from (the first one on ties), the
// scan ggml's symmetric quantizers start with.
func absMax(x []float32) (amax, signed float32) {
	for _, v := range x {
		if a := abs32(v); a > amax {
			amax, signed = a, v
		}
	}
	return amax, signed
}

// minMax returns the smallest and largest x, starting from ±FLT_MAX as ggml does.
func minMax(x []float32) (lo, hi float32) {
	lo, hi = math.MaxFloat32, -math.MaxFloat32
	for _, v := range x {
		if v < lo {
			lo = v
		}
		if v > hi {
			hi = v
		}
	}
	return lo, hi
}

// inverse is ggml's `d ? 1.0f/d : 0.0f`.
func inverse(d float32) float32 {
	if d == 0 {
		return 0
	}
	return 1 / d
}
