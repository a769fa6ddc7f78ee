package tensor

import (
	"math"
	"math/big"
)

// The exponentials of ggml-cpu. Its softmax and SiLU do not call expf for every element: on
// the x86-64 build the fixtures come from (AVX-512F and DQ), groups of 16 consecutive elements
// go through ggml_v_expf, a polynomial approximation (from ARM's optimized-routines, error
// up to ~1.5 ulp), and only the rest of a row uses libm's expf. The functions here redo that
// arithmetic in scalar Go, one float32 rounding per vector instruction, so that router
// probabilities and activations come out with ggml's bits.

// vecWidth is the number of float32 lanes of ggml's AVX-512 vectors.
const vecWidth = 16

// exp32 is expf as glibc (2.27 on) computes it for the scalar code of llama.cpp on x86-64
// (its variant for CPUs with FMA, selected at load time on any CPU that runs the AVX2
// kernels): e^x = 2^(k/32) · 2^(r/32) with k = round(x·32/ln 2), 2^(k/32) from a table of
// 32 and 2^(r/32) a cubic, all in float64 with fused multiply-adds where glibc's compiler
// fused them, then rounded to float32. It is not correctly rounded (up to ~0.502 ulp), so
// the float64 exponential rounded to float32 differs from it in the last bit for a few
// inputs in a thousand; this gives its bits.
func exp32(x float32) float32 {
	const (
		invLn2N = 0x1.71547652b82fep+5 // 32/ln 2
		shift   = 0x1.8p+52            // adding it rounds to an integer in the low bits
		c0      = 0x1.c6af84b912394p-20
		c1      = 0x1.ebfce50fac4f3p-13
		c2      = 0x1.62e42ff0c52d6p-6
	)
	bits := math.Float32bits(x)
	if bits>>20&0x7FF > 0x42A { // |x| ≥ 88, infinities and NaNs
		switch {
		case bits == 0xFF800000: // −Inf
			return 0
		case bits&0x7FFFFFFF >= 0x7F800000:
			return x + x
		case x > 0x1.62e42ep6: // beyond float32's largest value
			return float32(math.Inf(1))
		case x < -0x1.9fe368p6: // below half the smallest subnormal
			return 0
		case x < -0x1.9d1d9ep6: // rounds to the smallest subnormal
			return math.Float32frombits(1)
		}
	}
	xd := float64(x)
	kdShifted := math.FMA(invLn2N, xd, shift)
	ki := math.Float64bits(kdShifted)
	kd := kdShifted - shift
	r := math.FMA(invLn2N, xd, -kd)
	scale := math.Float64frombits(exp2Table32[ki%32] + ki<<47)
	z := math.FMA(r, c0, c1)
	y := math.FMA(z, r*r, math.FMA(r, c2, 1))
	return float32(y * scale)
}

func exp32sGo(x []float32) {
	for i, v := range x {
		x[i] = exp32(v)
	}
}

// exp2Table32 holds 2^(i/32) rounded to float64, its bits less i<<47, so that adding k<<47
// to entry k%32 multiplies it by 2^(k/32 rounded down) through the exponent field.
var exp2Table32 = func() (t [32]uint64) {
	for i := range t {
		// Five correctly rounded square roots at 256 bits, then one rounding to float64.
		v := new(big.Float).SetPrec(256).SetMantExp(big.NewFloat(1), i)
		for range 5 {
			v.Sqrt(v)
		}
		f, _ := v.Float64()
		t[i] = math.Float64bits(f) - uint64(i)<<47
	}
	return t
}()

// fma32 is a float32 fused multiply-add, a·b + c with one rounding, as the CPU's FMA
// instructions give it. a·b is exact in float64, so the float64 FMA rounds only the sum;
// rounding that on to float32 can differ from rounding the exact sum once only where the
// float64 result lies exactly halfway between two float32 values (its low 28 bits zero,
// which also holds for float32's subnormal range). There the sum is redone with its last
// bit forced odd where it was inexact (round to odd), which makes the second rounding the
// same as one (float64 has more than two bits to spare).
func fma32(a, b, c float32) float32 {
	s := math.FMA(float64(a), float64(b), float64(c))
	if math.Float64bits(s)&(1<<28-1) != 0 || math.IsInf(s, 0) || math.IsNaN(s) {
		return float32(s)
	}
	// Knuth's two-sum of the exact product and c: the sum's rounding error.
	p, q := float64(a)*float64(b), float64(c)
	pv := s - q
	e := (p - pv) + (q - (s - pv))
	if bits := math.Float64bits(s); e != 0 && bits&1 == 0 {
		if (e > 0) == (s > 0) {
			bits++ // away from zero
		} else {
			bits--
		}
		s = math.Float64frombits(bits)
	}
	return float32(s)
}

// vexp32 is one lane of ggml_v_expf (AVX-512): e^x = 2^n · p(b) with n = round(x·log2 e) and
// b = x − n·ln 2 in two parts, p a degree-5 polynomial, and results beyond the range of n
// (|n| > 192) flushed to 0 or +Inf.
func vexp32(x float32) float32 {
	const shift = 0x1.8p23 // adding it rounds to an integer in the low mantissa bits
	z := fma32(x, 0x1.715476p+0, shift)
	n := z - shift
	if math.Abs(float64(n)) > 192 {
		if n <= 0 {
			return 0
		}
		return float32(math.Inf(1))
	}
	b := fma32(-n, 0x1.7f7d1cp-20, fma32(-n, 0x1.62e4p-1, x))
	u := b * b
	j := fma32(
		fma32(fma32(0x1.0e4020p-7, b, 0x1.573e2ep-5), u, fma32(0x1.555e66p-3, b, 0x1.fffdb6p-2)),
		u,
		fma32(0x1.ffffecp-1, b, 1))
	// _mm512_scalef_ps: j·2^n with a single rounding (only subnormal results round).
	return float32(float64(j) * math.Ldexp(1, int(n)))
}

// silu32 is libm's scalar SiLU, x/(1+e^-x).
func silu32(x float32) float32 { return x / (1 + exp32(-x)) }

// vsilu32 is one lane of ggml_v_silu: x/(1+ggml_v_expf(0−x)).
func vsilu32(x float32) float32 { return x / (1 + vexp32(0-x)) }

func vsiluRunGo(dst, x []float32) {
	dst = dst[:len(x)]
	for i, v := range x {
		dst[i] = vsilu32(v)
	}
}

// sum16 adds 16 lanes in the order of _mm512_reduce_add_ps (GCC's avx512fintrin.h): the
// high half onto the low half, then again on 8 and 4 lanes, then the last two.
func sum16(v *[vecWidth]float32) float32 {
	var h8 [8]float32
	for i := range h8 {
		h8[i] = v[8+i] + v[i]
	}
	var h4 [4]float32
	for i := range h4 {
		h4[i] = h8[4+i] + h8[i]
	}
	return (h4[0] + h4[2]) + (h4[1] + h4[3])
}
