package tensor

import "math"

// F16 and BF16 are the 16-bit float formats ggml stores: IEEE binary16 and bfloat16 (the
// upper half of a float32). These conversions are ggml's: exact widening, and narrowing with
// round-to-nearest-even.

// F16ToF32 widens an IEEE binary16 value; every binary16 value is exactly representable.
func F16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1F
	mant := uint32(h) & 0x3FF
	switch {
	case exp == 0x1F: // infinity or NaN, keeping the payload
		return math.Float32frombits(sign | 0x7F800000 | mant<<13)
	case exp != 0: // normal: rebias the exponent from 15 to 127
		return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
	case mant == 0:
		return math.Float32frombits(sign)
	}
	// Subnormal: mant · 2^-24, exact in float32.
	v := float32(mant) * (1.0 / (1 << 24))
	if sign != 0 {
		v = -v
	}
	return v
}

// F32ToF16 narrows to IEEE binary16, rounding to nearest even; values beyond the binary16
// range become infinities and NaNs stay NaNs (quiet), as the F16C instruction does.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xFF
	mant := b & 0x7FFFFF
	if exp == 0xFF {
		if mant != 0 {
			return sign | 0x7E00 | uint16(mant>>13) // quiet NaN, top payload bits kept
		}
		return sign | 0x7C00
	}
	e := exp - 127 + 15 // binary16 biased exponent
	if e >= 0x1F {
		return sign | 0x7C00
	}
	if e <= 0 {
		// Subnormal (or zero) in binary16: shift the full significand into place.
		if e < -10 {
			return sign // below half the smallest subnormal: rounds to zero
		}
		m := mant | 0x800000
		shift := uint32(14 - e)
		return sign | uint16(roundShift(m, shift))
	}
	// Normal: drop 13 mantissa bits with rounding; a carry may bump the exponent, and a carry
	// out of the largest exponent correctly gives infinity.
	return sign | uint16(roundShift(uint32(e)<<23|mant, 13))
}

// roundToF16 is F16ToF32(F32ToF16(x)), x rounded to the nearest binary16 value (ties to
// even), computed on float32's own bits so that the hot loops that keep an F16 accumulator
// (attention's) take no data-dependent branches: for binary16's normal range the 13
// dropped mantissa bits are rounded away with an integer add, and below it (binary16
// subnormals, multiples of 2^-24) adding and subtracting 0.75 makes the float32 adder do
// the rounding, as the sum's last bit then weighs 2^-24 and 0.75 is an even multiple of it.
func roundToF16(x float32) float32 {
	b := math.Float32bits(x)
	sign, abs := b&0x80000000, b&0x7FFFFFFF
	var r uint32
	switch {
	case abs >= 0x7F800000: // infinity, or a NaN made quiet keeping its top payload bits
		r = abs | (min(abs&0x7FFFFF, 1) << 22)
		r &^= 0x1FFF
	case abs >= 0x477FF000: // rounds beyond 65504, binary16's largest finite value
		r = 0x7F800000
	case abs >= 0x38800000: // 2^-14 and up: binary16 normals
		r = (abs + 0xFFF + (abs>>13)&1) &^ 0x1FFF
	default:
		r = math.Float32bits((math.Float32frombits(abs) + 0.75) - 0.75)
	}
	return math.Float32frombits(sign | r)
}

// roundShift shifts v right by s bits rounding to nearest, ties to even.
func roundShift(v, s uint32) uint32 {
	half := uint32(1) << (s - 1)
	rest := v & (1<<s - 1)
	q := v >> s
	if rest > half || (rest == half && q&1 == 1) {
		q++
	}
	return q
}

// BF16ToF32 widens a bfloat16 value (exact).
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToBF16 narrows to bfloat16 with round-to-nearest-even; NaNs are kept quiet, as ggml's
// converter does.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7FFFFFFF > 0x7F800000 {
		return uint16(b>>16) | 64
	}
	return uint16((b + 0x7FFF + (b>>16)&1) >> 16)
}
