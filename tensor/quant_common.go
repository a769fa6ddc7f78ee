package tensor

import (
	"encoding/binary"
	"math"
)

// Conventions shared by the block formats (quant_*.go, kquant_*.go, iq_*.go).
//
// Every float expression follows ggml's C evaluation order, one float32 rounding per
// operation. Go may fuse x*y + z into one fused multiply-add (it does on arm64, and on amd64
// with GOAMD64=v3), which changes the last bit; an explicit float32(x*y) conversion forbids
// that, so every product that feeds an addition or subtraction is written that way (on
// either side, and also when it was computed in an earlier statement or passed in as an
// argument). To audit, list the fused instructions of an FMA target:
//
//	GOARCH=arm64 go build -gcflags=-S ./tensor 2>&1 | grep -E 'FN?M(ADD|SUB)' | grep -E 'quant_|iq_'
//
// prints nothing for these files.
//
// Block layouts and field offsets are ggml's structs at the fixtures' commit
// (testdata/quant/README.md §3).

// qkK is the super-block size of the K-quants, Q8_K, TQ and IQ formats (ggml's QK_K).
const qkK = 256

// halfAt reads the little-endian binary16 stored at b[off:off+2].
func halfAt(b []byte, off int) float32 {
	return F16ToF32(binary.LittleEndian.Uint16(b[off:]))
}

// putHalf stores f as a little-endian binary16 at b[off:off+2], rounding to nearest even.
func putHalf(b []byte, off int, f float32) {
	binary.LittleEndian.PutUint16(b[off:], F32ToF16(f))
}

// abs32 is fabsf: clears the sign bit, so -0 becomes +0 and NaNs stay NaNs.
func abs32(f float32) float32 {
	return math.Float32frombits(math.Float32bits(f) &^ (1 << 31))
}

// nearestInt is ggml's nearest_int: adding 1.5·2^23 leaves the rounded integer (half to
// even) in the low mantissa bits. It is exact for |f| ≤ 4194303; beyond that it returns the
// same garbage ggml's does, so quantizers stay byte-identical even on absurd input.
func nearestInt(f float32) int {
	// The conversion keeps a caller's product from fusing with this addition.
	v := float32(f) + 12582912
	return int(math.Float32bits(v)&0x7FFFFF) - 0x400000
}

// truncInt is C's float-to-integer conversion as x86-64 compiles it (cvttss2si): toward
// zero, and 0x80000000 for NaN and out-of-range values. Narrowing to int8/uint8 afterwards
// keeps the low bits, which is what ggml's (int8_t)/(uint8_t) casts of floats do there.
func truncInt(f float32) int32 {
	if !(f > -2147483649 && f < 2147483648) {
		return math.MinInt32
	}
	return int32(f)
}

// roundAway is C's roundf: to nearest, halves away from zero.
func roundAway(f float32) float32 {
	return float32(math.Round(float64(f)))
}

// sqrt32 is sqrtf; float64 square root rounded to float32 is correctly rounded.
func sqrt32(f float32) float32 {
	return float32(math.Sqrt(float64(f)))
}

// clampInt limits v to [lo, hi], like ggml's MAX(lo, MIN(hi, v)).
func clampInt(v, lo, hi int) int {
	return max(lo, min(hi, v))
}
