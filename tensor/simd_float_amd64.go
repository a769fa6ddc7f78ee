//go:build goexperiment.simd && amd64

package tensor

import (
	"simd/archsimd"
)

// Vector forms of the float products (ggml_float.go), with the same bits: ggml's 16-lane
// float32 accumulators are held as two vectors of eight (lanes 0-7 and 8-15), and each
// lane takes the same fused multiply-adds; the reductions are sum16's (_mm512_reduce_add_ps
// adds the high eight lanes onto the low eight, then the high four onto the low four, then
// lanes 0+2 and 1+3, then those two). BF16 keeps a kernel of its own below.

// vecReducedAVX2 is vecReduced.
func vecReducedAVX2(q, k []float32) float32 {
	steps := len(q) / floatStep
	if steps == 0 {
		return 0
	}
	x, y := (*[floatStep]float32)(q[:steps*floatStep]), (*[floatStep]float32)(k[:steps*floatStep])
	var a0, b0, a1, b1, a2, b2, a3, b3 archsimd.Float32x8
	for i := 0; ; {
		a0 = f32x8s(x[0:8]).MulAdd(f32x8s(y[0:8]), a0)
		b0 = f32x8s(x[8:16]).MulAdd(f32x8s(y[8:16]), b0)
		a1 = f32x8s(x[16:24]).MulAdd(f32x8s(y[16:24]), a1)
		b1 = f32x8s(x[24:32]).MulAdd(f32x8s(y[24:32]), b1)
		a2 = f32x8s(x[32:40]).MulAdd(f32x8s(y[32:40]), a2)
		b2 = f32x8s(x[40:48]).MulAdd(f32x8s(y[40:48]), b2)
		a3 = f32x8s(x[48:56]).MulAdd(f32x8s(y[48:56]), a3)
		b3 = f32x8s(x[56:64]).MulAdd(f32x8s(y[56:64]), b3)
		if i++; i == steps {
			break
		}
		x, y = next(x), next(y)
	}
	return sum16x8(a0.Add(a2).Add(a1.Add(a3)), b0.Add(b2).Add(b1.Add(b3)))
}

// tinyDotAVX2 is tinyDot.
func tinyDotAVX2(q, k []float32) float32 {
	steps := len(q) / vecWidth
	x, y := (*[vecWidth]float32)(q[:steps*vecWidth]), (*[vecWidth]float32)(k[:steps*vecWidth])
	var lo, hi archsimd.Float32x8
	for i := 0; ; {
		lo = f32x8s(x[0:8]).MulAdd(f32x8s(y[0:8]), lo)
		hi = f32x8s(x[8:16]).MulAdd(f32x8s(y[8:16]), hi)
		if i++; i == steps {
			break
		}
		x, y = next(x), next(y)
	}
	return sum16x8(lo, hi)
}

// sum16x8 is sum16 of the 16 lanes lo (0-7) and hi (8-15).
func sum16x8(lo, hi archsimd.Float32x8) float32 {
	h8 := hi.Add(lo)
	var h4 [4]float32
	h8.GetHi().Add(h8.GetLo()).Store(&h4)
	archsimd.ClearAVXUpperBits()
	return (h4[0] + h4[2]) + (h4[1] + h4[3])
}

// f32x16s loads the 16 float32 values of v.
func f32x16s(v []float32) archsimd.Float32x16 {
	return archsimd.LoadFloat32x16((*[16]float32)(v))
}

// dotBF16AVX2 is BF16 × BF16. A 32-bit lane holding two bfloat16 values has the even one
// in its low half and the odd one in its high half: shifted up, the even one is a float32,
// and masked, the odd one is; so no widening is needed.
func dotBF16AVX2(n int, w, a []byte) float32 {
	steps := n / 32
	if steps == 0 {
		return dotHalf(n, w, a, BF16ToF32)
	}
	prefetchNext(w)
	x, y := (*[64]byte)(w[:steps*64]), (*[64]byte)(a[:steps*64])
	var acc0, acc1, acc2, acc3 archsimd.Float32x8
	for i := 0; ; {
		odd := archsimd.LoadUint32x8(&bf16Odd)
		x0, y0 := archsimd.LoadUint8x32((*[32]uint8)(x[0:32])).AsUint32x8(), archsimd.LoadUint8x32((*[32]uint8)(y[0:32])).AsUint32x8()
		acc0 = x0.ShiftAllLeft(16).AsFloat32x8().MulAdd(y0.ShiftAllLeft(16).AsFloat32x8(), acc0)
		acc1 = x0.And(odd).AsFloat32x8().MulAdd(y0.And(odd).AsFloat32x8(), acc1)
		x1, y1 := archsimd.LoadUint8x32((*[32]uint8)(x[32:64])).AsUint32x8(), archsimd.LoadUint8x32((*[32]uint8)(y[32:64])).AsUint32x8()
		acc2 = x1.ShiftAllLeft(16).AsFloat32x8().MulAdd(y1.ShiftAllLeft(16).AsFloat32x8(), acc2)
		acc3 = x1.And(odd).AsFloat32x8().MulAdd(y1.And(odd).AsFloat32x8(), acc3)
		if i++; i == steps {
			break
		}
		x, y = next(x), next(y)
	}
	return sumLanes(acc0.Add(acc1).Add(acc2.Add(acc3))) + dotHalf(n-32*steps, w[steps*64:], a[steps*64:], BF16ToF32)
}

var bf16Odd = [8]uint32{0xFFFF0000, 0xFFFF0000, 0xFFFF0000, 0xFFFF0000, 0xFFFF0000, 0xFFFF0000, 0xFFFF0000, 0xFFFF0000}

// f32x8 loads the eight float32 values at b[0:32].
func f32x8(b []byte) archsimd.Float32x8 {
	return archsimd.LoadUint8x32((*[32]uint8)(b)).AsFloat32x8()
}

var (
	f16ExpMant  = [4]uint32{0x0FFFE000, 0x0FFFE000, 0x0FFFE000, 0x0FFFE000}
	f16Rebias   = [4]float32{0x1p112, 0x1p112, 0x1p112, 0x1p112}
	f16InfNaN   = [4]float32{0x1p16, 0x1p16, 0x1p16, 0x1p16}
	f32Exponent = [4]uint32{0x7F800000, 0x7F800000, 0x7F800000, 0x7F800000}
	f32Sign     = [4]uint32{0x80000000, 0x80000000, 0x80000000, 0x80000000}
)

// f16x4 widens the four binary16 values packed in h (F16C's VCVTPH2PS, which archsimd does
// not offer): exponent and mantissa move to float32's positions and are rebiased by a
// multiplication by 2^112, which is exact and also turns binary16 subnormals (float32
// subnormals before it) into the right normal values. Exponent 31 (infinities and NaNs)
// comes out at 2^16 or more, where no finite binary16 lands, and gets the all-ones
// exponent; then the sign goes back on.
func f16x4(h uint64) archsimd.Float32x4 {
	v := archsimd.Uint64x2{}.SetElem(0, h).AsUint16x8().ExtendLo4ToUint32()
	f := v.ShiftAllLeft(13).And(archsimd.LoadUint32x4(&f16ExpMant)).AsFloat32x4().Mul(archsimd.LoadFloat32x4(&f16Rebias))
	special := archsimd.LoadUint32x4(&f32Exponent).Masked(f.GreaterEqual(archsimd.LoadFloat32x4(&f16InfNaN)))
	sign := v.ShiftAllLeft(16).And(archsimd.LoadUint32x4(&f32Sign))
	return f.AsUint32x4().Or(special).Or(sign).AsFloat32x4()
}

// tinyDots4x4AVX512 is tinyDot of four rows (w) by four vectors (x), out[4r+t] for row r and
// vector t, each in its own accumulator: sixteen independent chains instead of one, which
// a single tinyDot waits on. The rows go two at a time: sixteen accumulators, the four
// vectors and a row did not fit the sixteen vector registers Go allocates, and the spills
// (55 stack moves) made a router's [2048 → 128] F32 product for four tokens take 75-76 µs
// on one thread in cache, against 25 for one token's. With two rows' eight only the row
// is kept on the stack (FMA overwrites it, and it is used four times): 44-45 µs.
// Each output's chain of FMAs is the same, so are its bits.
func tinyDots4x4AVX512(w, x *[4][]float32, out *[16]float32) {
	n := len(w[0])
	x0, x1, x2, x3 := x[0][:n], x[1][:n], x[2][:n], x[3][:n]
	for r := 0; r < 4; r += 2 {
		wa, wb := w[r][:n], w[r+1][:n]
		var a0, a1, a2, a3, b0, b1, b2, b3 archsimd.Float32x16
		for l := 0; l+vecWidth <= n; l += vecWidth {
			v0, v1, v2, v3 := f32x16s(x0[l:l+16]), f32x16s(x1[l:l+16]), f32x16s(x2[l:l+16]), f32x16s(x3[l:l+16])
			row := f32x16s(wa[l : l+16])
			a0, a1, a2, a3 = row.MulAdd(v0, a0), row.MulAdd(v1, a1), row.MulAdd(v2, a2), row.MulAdd(v3, a3)
			row = f32x16s(wb[l : l+16])
			b0, b1, b2, b3 = row.MulAdd(v0, b0), row.MulAdd(v1, b1), row.MulAdd(v2, b2), row.MulAdd(v3, b3)
		}
		for t, c := range [8]archsimd.Float32x16{a0, a1, a2, a3, b0, b1, b2, b3} {
			out[4*r+t] = sum16x8(c.GetLo(), c.GetHi())
		}
	}
}

// vecReduced4AVX512 is vecReduced of four rows (w) by one vector (x), out[r] for row r.
func vecReduced4AVX512(w *[4][]float32, x []float32, out *[4]float32) {
	w0, w1, w2, w3 := w[0], w[1][:len(w[0])], w[2][:len(w[0])], w[3][:len(w[0])]
	x = x[:len(w0)]
	var c [4][4]archsimd.Float32x16
	for l := 0; l+floatStep <= len(w0); l += floatStep {
		for a := range 4 {
			o := l + 16*a
			v := f32x16s(x[o : o+16])
			c[0][a] = f32x16s(w0[o:o+16]).MulAdd(v, c[0][a])
			c[1][a] = f32x16s(w1[o:o+16]).MulAdd(v, c[1][a])
			c[2][a] = f32x16s(w2[o:o+16]).MulAdd(v, c[2][a])
			c[3][a] = f32x16s(w3[o:o+16]).MulAdd(v, c[3][a])
		}
	}
	for r := range 4 {
		v := c[r][0].Add(c[r][2]).Add(c[r][1].Add(c[r][3]))
		out[r] = sum16x8(v.GetLo(), v.GetHi())
	}
}

// vecReducedKey128AVX512 is vecReduced of each 128-value row of q (out[h] for row h) by one
// 128-value key, which stays in registers for all of them: ggml_vec_dot_f32's two steps of
// four 16-lane accumulators per row, then its reduction, as vecReduced computes them.
func vecReducedKey128AVX512(q []float32, key *[128]float32, out []float32) {
	q = q[:len(out)*128]
	k0, k1, k2, k3 := f32x16s(key[0:16]), f32x16s(key[16:32]), f32x16s(key[32:48]), f32x16s(key[48:64])
	k4, k5, k6, k7 := f32x16s(key[64:80]), f32x16s(key[80:96]), f32x16s(key[96:112]), f32x16s(key[112:128])
	var zero archsimd.Float32x16 // the accumulators start at zero, as ggml's do
	for h := range out {
		r := (*[128]float32)(q[h*128 : (h+1)*128])
		s0 := f32x16s(r[64:80]).MulAdd(k4, f32x16s(r[0:16]).MulAdd(k0, zero))
		s1 := f32x16s(r[80:96]).MulAdd(k5, f32x16s(r[16:32]).MulAdd(k1, zero))
		s2 := f32x16s(r[96:112]).MulAdd(k6, f32x16s(r[32:48]).MulAdd(k2, zero))
		s3 := f32x16s(r[112:128]).MulAdd(k7, f32x16s(r[48:64]).MulAdd(k3, zero))
		s := s0.Add(s2).Add(s1.Add(s3))
		h8 := s.GetHi().Add(s.GetLo())
		var h4 [4]float32
		h8.GetHi().Add(h8.GetLo()).Store(&h4)
		out[h] = (h4[0] + h4[2]) + (h4[1] + h4[3])
	}
	archsimd.ClearAVXUpperBits()
}

// vecReducedKey128AVX2 is vecReducedKey128 in eight-lane halves (vecReducedAVX2's
// arithmetic): too few registers to hold the key, which is read from the cache per row.
func vecReducedKey128AVX2(q []float32, key *[128]float32, out []float32) {
	q = q[:len(out)*128]
	var zero archsimd.Float32x8 // the accumulators start at zero, as ggml's do
	for h := range out {
		r := (*[128]float32)(q[h*128 : (h+1)*128])
		a0 := f32x8s(r[64:72]).MulAdd(f32x8s(key[64:72]), f32x8s(r[0:8]).MulAdd(f32x8s(key[0:8]), zero))
		b0 := f32x8s(r[72:80]).MulAdd(f32x8s(key[72:80]), f32x8s(r[8:16]).MulAdd(f32x8s(key[8:16]), zero))
		a1 := f32x8s(r[80:88]).MulAdd(f32x8s(key[80:88]), f32x8s(r[16:24]).MulAdd(f32x8s(key[16:24]), zero))
		b1 := f32x8s(r[88:96]).MulAdd(f32x8s(key[88:96]), f32x8s(r[24:32]).MulAdd(f32x8s(key[24:32]), zero))
		a2 := f32x8s(r[96:104]).MulAdd(f32x8s(key[96:104]), f32x8s(r[32:40]).MulAdd(f32x8s(key[32:40]), zero))
		b2 := f32x8s(r[104:112]).MulAdd(f32x8s(key[104:112]), f32x8s(r[40:48]).MulAdd(f32x8s(key[40:48]), zero))
		a3 := f32x8s(r[112:120]).MulAdd(f32x8s(key[112:120]), f32x8s(r[48:56]).MulAdd(f32x8s(key[48:56]), zero))
		b3 := f32x8s(r[120:128]).MulAdd(f32x8s(key[120:128]), f32x8s(r[56:64]).MulAdd(f32x8s(key[56:64]), zero))
		h8 := b0.Add(b2).Add(b1.Add(b3)).Add(a0.Add(a2).Add(a1.Add(a3)))
		var h4 [4]float32
		h8.GetHi().Add(h8.GetLo()).Store(&h4)
		out[h] = (h4[0] + h4[2]) + (h4[1] + h4[3])
	}
	archsimd.ClearAVXUpperBits()
}
