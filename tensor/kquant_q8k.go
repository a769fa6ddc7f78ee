package tensor

import (
	"encoding/binary"
	"math"
)

// Q8_K is the activation format paired with the K-quants, TQ and most IQ formats (292 bytes
// per 256): d f32, 256 signed quants, then 16 i16 sums of consecutive 16 quants (bsums),
// which let kernels apply per-16 mins without touching the quants again.

func init() {
	// ggml has no dot product with Q8_K weights: it only ever holds activations. On x86 the
	// CPU matmul quantizes with the reference quantizer itself.
	traits[Q8_K] = &Traits{ToFloat: decodeQ8_K, FromFloat: encodeQ8_K, VecDotType: Q8_K}
}

// q8K is a view of one Q8_K block.
type q8K []byte

func blockQ8K(a []byte, i int) q8K { return q8K(a[i*292:][:292]) }

func (y q8K) d() float32 { return math.Float32frombits(binary.LittleEndian.Uint32(y)) }

// q returns quant k (0..255).
func (y q8K) q(k int) int { return int(int8(y[4+k])) }

// quants returns the 256 quants as bytes (read each as int8).
func (y q8K) quants() []byte { return y[4 : 4+qkK] }

// bsum returns the sum of quants 16j..16j+15.
func (y q8K) bsum(j int) int { return int(int16(binary.LittleEndian.Uint16(y[260+2*j:]))) }

func decodeQ8_K(src []byte, dst []float32) {
	for i := range len(dst) / qkK {
		y, out := blockQ8K(src, i), dst[i*qkK:][:qkK]
		d := y.d()
		for k, q := range y.quants() {
			out[k] = d * float32(int8(q))
		}
	}
}

// encodeQ8_K is quantize_row_q8_K_ref: the value of largest magnitude maps to -127 (its sign
// is kept in d), and an all-zero block has d = 0. Its sums are written as 0 there, where
// ggml leaves them untouched.
func encodeQ8_K(src []float32, dst []byte) {
	for i := range len(src) / qkK {
		x, y := src[i*qkK:][:qkK], blockQ8K(dst, i)
		amax, vmax := absMax(x)
		if amax == 0 {
			clear(y)
			continue
		}
		iscale := -127 / vmax
		for k, v := range x {
			y[4+k] = uint8(int8(min(127, nearestInt(iscale*v))))
		}
		for j := range qkK / 16 {
			sum := 0
			for k := range 16 {
				sum += y.q(16*j + k)
			}
			binary.LittleEndian.PutUint16(y[260+2*j:], uint16(int16(sum)))
		}
		binary.LittleEndian.PutUint32(y, math.Float32bits(1/iscale))
	}
}
