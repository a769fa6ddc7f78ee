package tensor

import (
	"math"
)

// The 4-bit float formats. Each nibble indexes the E2M1 values, stored doubled so they are
// integers (fp4Values); the block scale is halved to compensate.
//   MXFP4 (17 bytes per 32): an E8M0 exponent e (scale 2^(e-127), halved: 2^(e-128)), then
//   16 bytes of nibbles (element j low, j+16 high).
//   NVFP4 (36 bytes per 64): four UE4M3 scales, one per 16 values, then 32 bytes of nibbles;
//   sub-block s uses bytes 8s..8s+7 (low nibbles are its first 8 values, high its last 8).

var fp4Values = [16]int8{0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}

const (
	qkNVFP4    = 64
	qkNVFP4Sub = 16
)

func init() {
	traits[MXFP4] = &Traits{ToFloat: decodeMXFP4, FromFloat: encodeMXFP4, VecDotType: Q8_0, VecDot: dotMXFP4}
	traits[NVFP4] = &Traits{ToFloat: decodeNVFP4, FromFloat: encodeNVFP4, VecDotType: Q8_0, VecDot: dotNVFP4}
}

// e8m0Half is 2^(e-128), ggml_e8m0_to_fp32_half; e = 0 and 1 are float32 subnormals.
func e8m0Half(e uint8) float32 {
	if e < 2 {
		return math.Float32frombits(0x00200000 << e)
	}
	return math.Float32frombits(uint32(e-1) << 23)
}

// ue4m3Half is half the value of an unsigned E4M3 byte (bias 7, 3 mantissa bits),
// ggml_ue4m3_to_fp32; 0 and 0x7F (NaN in the format) decode to 0, and the top bit is ignored.
func ue4m3Half(x uint8) float32 {
	if x == 0 || x == 0x7F {
		return 0
	}
	exp, man := int(x>>3&15), float64(x&7)
	var raw float32
	if exp == 0 {
		raw = float32(math.Ldexp(man, -9))
	} else {
		raw = float32(math.Ldexp(8+man, exp-10)) // (1 + man/8)·2^(exp-7)
	}
	return raw * 0.5
}

// toUE4M3 is ggml_fp32_to_ue4m3: the nearest E4M3 value (the rounding bit is added to the
// mantissa, saturating at 448 = 0x7E); non-positive and NaN inputs give 0.
func toUE4M3(x float32) uint8 {
	if !(x > 0) {
		return 0
	}
	x = min(x, 448)
	bits := math.Float32bits(x)
	exp := int(bits>>23&0xFF) - 127 + 7
	if exp <= 0 {
		man := truncInt(float32(x*512) + 0.5)
		if man < 1 {
			return 0
		}
		return uint8(min(man, 7))
	}
	man := int(bits>>20&7) + int(bits>>19&1)
	if man > 7 {
		man = 0
		exp++
	}
	if exp >= 15 {
		return 0x7E
	}
	return uint8(exp<<3 | man)
}

// nearestFP4 is ggml's best_index_mxfp4: the first of the 16 values closest to x at scale e.
func nearestFP4(x, e float32) uint8 {
	best := 0
	bestErr := abs32(float32(float32(fp4Values[0])*e) - x)
	for i := 1; i < 16; i++ {
		if err := abs32(float32(float32(fp4Values[i])*e) - x); err < bestErr {
			best, bestErr = i, err
		}
	}
	return uint8(best)
}

func decodeMXFP4(src []byte, dst []float32) {
	for i := range len(dst) / qk32 {
		b, y := src[i*17:][:17], dst[i*qk32:][:qk32]
		d := e8m0Half(b[0])
		for j, q := range b[1:17] {
			y[j] = float32(fp4Values[q&15]) * d
			y[j+16] = float32(fp4Values[q>>4]) * d
		}
	}
}

func decodeNVFP4(src []byte, dst []float32) {
	for i := range len(dst) / qkNVFP4 {
		b, y := src[i*36:][:36], dst[i*qkNVFP4:][:qkNVFP4]
		for s := range 4 {
			d := ue4m3Half(b[s])
			ys := y[s*qkNVFP4Sub:][:qkNVFP4Sub]
			for j, q := range b[4+8*s : 12+8*s] {
				ys[j] = float32(fp4Values[q&15]) * d
				ys[j+8] = float32(fp4Values[q>>4]) * d
			}
		}
	}
}

// encodeMXFP4 is quantize_row_mxfp4_ref: e = floor(log2(amax)) - 2 + 127 (so amax lands
// near the largest value, 6), then each value takes the nearest E2M1 value.
func encodeMXFP4(src []float32, dst []byte) {
	for i := range len(src) / qk32 {
		x, b := src[i*qk32:][:qk32], dst[i*17:][:17]
		amax, _ := absMax(x)
		var e uint8
		if amax > 0 {
			// ggml floors log2f's float32 result: just below a power of two (from 8 up)
			// that result has already rounded up to the integer, so round it here too.
			log2 := float32(math.Log2(float64(amax)))
			e = uint8(truncInt(float32(math.Floor(float64(log2))) - 2 + 127))
		}
		b[0] = e
		d := e8m0Half(e)
		for j := range 16 {
			b[1+j] = nearestFP4(x[j], d) | nearestFP4(x[j+16], d)<<4
		}
	}
}

// encodeNVFP4 is quantize_row_nvfp4_ref: per 16 values the scale is amax/6 rounded to
// UE4M3, then each value takes the nearest E2M1 value.
func encodeNVFP4(src []float32, dst []byte) {
	for i := range len(src) / qkNVFP4 {
		b := dst[i*36:][:36]
		for s := range 4 {
			x := src[i*qkNVFP4+s*qkNVFP4Sub:][:qkNVFP4Sub]
			amax, _ := absMax(x)
			b[s] = toUE4M3(amax / 6)
			d := ue4m3Half(b[s])
			for j := range 8 {
				b[4+8*s+j] = nearestFP4(x[j], d) | nearestFP4(x[j+8], d)<<4
			}
		}
	}
}

// dotMXFP4 is ggml_vec_dot_mxfp4_q8_0_generic.
func dotMXFP4(n int, w, a []byte) float32 {
	var sumf float32
	for i := range n / qk32 {
		x, y := w[i*17:][:17], a[i*34:][:34]
		qy := q8Quants(y)
		d := halfAt(y, 0) * e8m0Half(x[0])
		sumi := 0
		for j, q := range x[1:17] {
			sumi += int(int8(qy[j]))*int(fp4Values[q&15]) + int(int8(qy[j+16]))*int(fp4Values[q>>4])
		}
		sumf += float32(d * float32(sumi))
	}
	return sumf
}

// dotNVFP4 is ggml_vec_dot_nvfp4_q8_0_generic: sub-blocks s = 0, 1 pair with the first Q8_0
// block, 2, 3 with the second.
func dotNVFP4(n int, w, a []byte) float32 {
	var sumf float32
	for i := range n / qkNVFP4 {
		x := w[i*36:][:36]
		for s := range 4 {
			y := a[(2*i+s/2)*34:][:34]
			qy := q8Quants(y)[(s%2)*qkNVFP4Sub:][:qkNVFP4Sub]
			sumi := 0
			for j, q := range x[4+8*s : 12+8*s] {
				sumi += int(int8(qy[j]))*int(fp4Values[q&15]) + int(int8(qy[j+8]))*int(fp4Values[q>>4])
			}
			sumf += float32(halfAt(y, 0) * ue4m3Half(x[s]) * float32(sumi))
		}
	}
	return sumf
}
