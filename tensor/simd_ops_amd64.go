//go:build goexperiment.simd && amd64

package tensor

import "simd/archsimd"

// vsiluAVX2 is vsiluRun eight lanes at a time: vexp32's arithmetic with real float32 fused
// multiply-adds, which is what ggml_v_expf runs (vexp32's fma32 rounds through float64 and
// could differ from it only where that double rounding lands on a float32 tie). The scale
// by 2^n is one multiplication by a float32 power of two, rounded once as _mm512_scalef_ps
// is, while |n| ≤ 126 keeps 2^n a normal float32; a step holding a larger |n| (|x| above
// ~87) or a NaN is finished by vsilu32.
func vsiluAVX2(dst, x []float32) {
	dst = dst[:len(x)]
	if len(x) < 8 {
		for i, v := range x {
			dst[i] = vsilu32(v)
		}
		return
	}
	log2e, shift := archsimd.BroadcastFloat32x8(0x1.715476p+0), archsimd.BroadcastFloat32x8(0x1.8p23)
	limit, one := archsimd.BroadcastFloat32x8(126), archsimd.BroadcastFloat32x8(1)
	var zero archsimd.Float32x8
	i := 0
	for ; i+8 <= len(x); i += 8 {
		v := archsimd.LoadFloat32x8((*[8]float32)(x[i : i+8]))
		nx := zero.Sub(v)
		n := nx.MulAdd(log2e, shift).Sub(shift)
		if n.Greater(limit).Or(zero.Sub(n).Greater(limit)).Or(n.IsNaN()).ToBits() != 0 {
			// vsilu32 is scalar (legacy-SSE) code: with the upper halves dirty each of its
			// instructions paid the transition, ~650 ns an element (random-weight models
			// have many such gate values).
			archsimd.ClearAVXUpperBits()
			for l := i; l < i+8; l++ {
				dst[l] = vsilu32(x[l])
			}
			continue
		}
		v.Div(one.Add(expfAVX2(nx, n))).Store((*[8]float32)(dst[i : i+8]))
	}
	archsimd.ClearAVXUpperBits()
	for ; i < len(x); i++ {
		dst[i] = vsilu32(x[i])
	}
}

// expfAVX2 is ggml_v_expf's core for eight lanes: e^x = 2^n · p(b), where n = round(x·log2 e)
// (the caller computes it, to check |n| ≤ 126 first) and b = x − n·ln 2 in two parts; p is
// the degree-5 polynomial, and the scale by 2^n one multiplication by a float32 power of two.
func expfAVX2(x, n archsimd.Float32x8) archsimd.Float32x8 {
	var zero archsimd.Float32x8
	negN := zero.Sub(n)
	b := negN.MulAdd(archsimd.BroadcastFloat32x8(0x1.7f7d1cp-20), negN.MulAdd(archsimd.BroadcastFloat32x8(0x1.62e4p-1), x))
	u := b.Mul(b)
	c5, c4 := archsimd.BroadcastFloat32x8(0x1.0e4020p-7), archsimd.BroadcastFloat32x8(0x1.573e2ep-5)
	c3, c2 := archsimd.BroadcastFloat32x8(0x1.555e66p-3), archsimd.BroadcastFloat32x8(0x1.fffdb6p-2)
	c1, one := archsimd.BroadcastFloat32x8(0x1.ffffecp-1), archsimd.BroadcastFloat32x8(1)
	j := c5.MulAdd(b, c4).MulAdd(u, c3.MulAdd(b, c2)).MulAdd(u, c1.MulAdd(b, one))
	pow := n.ConvertToInt32().Add(archsimd.BroadcastInt32x8(127)).ShiftAllLeft(23).AsFloat32x8()
	return j.Mul(pow)
}

// addMulAVX2 is addRow (mul false) or mulRow (mul true) eight elements a step.
func addMulAVX2(dst, a, b []float32, mul bool) {
	dst, a = dst[:len(b)], a[:len(b)]
	i := 0
	if len(b) >= 8 {
		for ; i+8 <= len(b); i += 8 {
			x, y := archsimd.LoadFloat32x8((*[8]float32)(a[i:i+8])), archsimd.LoadFloat32x8((*[8]float32)(b[i:i+8]))
			if mul {
				x = x.Mul(y)
			} else {
				x = x.Add(y)
			}
			x.Store((*[8]float32)(dst[i : i+8]))
		}
		archsimd.ClearAVXUpperBits()
	}
	for ; i < len(b); i++ {
		if mul {
			dst[i] = a[i] * b[i]
		} else {
			dst[i] = a[i] + b[i]
		}
	}
}
