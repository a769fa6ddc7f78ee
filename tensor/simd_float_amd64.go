//go:build goexperiment.simd && amd64

package tensor

import (
	"encoding/binary"
	"math"
	"math/bits"
	"simd/archsimd"
	"unsafe"
)

// Vector dot products of the float formats (activations in the same format). F32 and BF16
// take 32 values a step into four accumulators of eight (FMA), the last n%32 values by the
// scalar kernel: the scalar kernels sum in float64, these in float32 as ggml's SIMD ones
// do. F16 keeps the scalar kernel's results (see dotF16AVX2).

// dotF32AVX2 is F32 × F32.
func dotF32AVX2(n int, w, a []byte) float32 {
	steps := n / 32
	if steps == 0 {
		return dotF32(n, w, a)
	}
	prefetchNext(w)
	x, y := (*[128]byte)(w[:steps*128]), (*[128]byte)(a[:steps*128])
	var acc0, acc1, acc2, acc3 archsimd.Float32x8
	for i := 0; ; {
		acc0 = f32x8(x[0:32]).MulAdd(f32x8(y[0:32]), acc0)
		acc1 = f32x8(x[32:64]).MulAdd(f32x8(y[32:64]), acc1)
		acc2 = f32x8(x[64:96]).MulAdd(f32x8(y[64:96]), acc2)
		acc3 = f32x8(x[96:128]).MulAdd(f32x8(y[96:128]), acc3)
		if i++; i == steps {
			break
		}
		x, y = next(x), next(y)
	}
	return sumLanes(acc0.Add(acc1).Add(acc2.Add(acc3))) + dotF32(n-32*steps, w[steps*128:], a[steps*128:])
}

// dotF16AVX2 is F16 × F16, bit for bit the scalar kernel's result: the products of two
// binary16 values are exact in float32 (22 significant bits at most, no underflow or
// overflow), so the vector products equal the scalar ones, and they are added to the
// float64 sum one by one in the same order. The attention kernel relies on that (its F16
// scores must be ggml's bits). Only the widening is vectorized, four values at a time in
// 128-bit registers; the upper halves stay clean, so the scalar float64 additions that
// follow cost no transitions.
func dotF16AVX2(n int, w, a []byte) float32 {
	if sum, ok := dotF16Exact(n, w, a); ok {
		return sum
	}
	w, a = w[:2*n], a[:2*n]
	archsimd.ClearAVXUpperBits()
	var sum float64
	var p [4]float32
	k := 0
	for ; k+4 <= n; k += 4 {
		fx := f16x4(binary.LittleEndian.Uint64(w[2*k:]))
		fy := f16x4(binary.LittleEndian.Uint64(a[2*k:]))
		fx.Mul(fy).Store(&p)
		sum += float64(p[0])
		sum += float64(p[1])
		sum += float64(p[2])
		sum += float64(p[3])
	}
	for ; k < n; k++ {
		sum += float64(F16ToF32(binary.LittleEndian.Uint16(w[2*k:])) * F16ToF32(binary.LittleEndian.Uint16(a[2*k:])))
	}
	return float32(sum)
}

// dotF16ExactAVX2 is dotF16AVX2's result without its chain of float64 additions, when it
// can prove the chain never rounds. Each product x·y of two binary16 values is a multiple
// of 2^g, g the sum of their last-bit exponents (max(E,1)−25 for an exponent field E), and
// so is every partial sum, in any order; while n·max|x·y| < 2^(g+53), every such sum is
// an integer multiple of 2^g below 2^53 of them, exact in float64. Then the sequential sum
// and the vector one (eight products a step, two float64 accumulators) are both the exact
// sum, bit for bit. g is the smallest over the nonzero products; a step holding an
// infinity or a NaN, a vector that fails the bound (values spanning more than about 2^24
// in magnitude), or n not a multiple of eight returns ok false for the sequential kernel.
func dotF16ExactAVX2(n int, w, a []byte) (sum float32, ok bool) {
	steps := n / 8
	if steps == 0 || n%8 != 0 {
		return 0, false
	}
	x, y := (*[16]byte)(w[:steps*16]), (*[16]byte)(a[:steps*16])
	expMant, rebias := archsimd.LoadUint32x8(&f16ExpMant8), archsimd.LoadFloat32x8(&f16Rebias8)
	var acc0, acc1 archsimd.Float64x4
	var maxAbs archsimd.Float32x8
	var maxField archsimd.Int32x8
	minLSB := archsimd.LoadInt32x8(&int32Big8)
	for i := 0; ; {
		hx := archsimd.LoadUint16x8((*[8]uint16)(unsafe.Pointer(&x[0]))).ExtendToUint32()
		hy := archsimd.LoadUint16x8((*[8]uint16)(unsafe.Pointer(&y[0]))).ExtendToUint32()
		fx := hx.ShiftAllLeft(13).And(expMant).AsFloat32x8().Mul(rebias).AsUint32x8().Or(hx.ShiftAllLeft(16).And(archsimd.LoadUint32x8(&f32Sign8))).AsFloat32x8()
		fy := hy.ShiftAllLeft(13).And(expMant).AsFloat32x8().Mul(rebias).AsUint32x8().Or(hy.ShiftAllLeft(16).And(archsimd.LoadUint32x8(&f32Sign8))).AsFloat32x8()
		// The exponent fields stay in place (times 2^10): a right shift by a constant
		// compiles to a legacy-SSE MOVQ of the count, which would cost a transition per
		// step under the dirty upper state.
		ex := hx.And(archsimd.LoadUint32x8(&f16Field8)).AsInt32x8()
		ey := hy.And(archsimd.LoadUint32x8(&f16Field8)).AsInt32x8()
		maxField = maxField.Max(ex).Max(ey)
		one := archsimd.LoadInt32x8(&f16FieldOne8)
		lsb := ex.Max(one).Add(ey.Max(one))
		zero := archsimd.Int32x8{}
		nonzero := hx.And(archsimd.LoadUint32x8(&f16Magnitude8)).AsInt32x8().Greater(zero).And(hy.And(archsimd.LoadUint32x8(&f16Magnitude8)).AsInt32x8().Greater(zero))
		minLSB = minLSB.Min(lsb.Merge(archsimd.LoadInt32x8(&int32Big8), nonzero))
		p := fx.Mul(fy)
		maxAbs = maxAbs.Max(p.AsInt32x8().And(archsimd.LoadInt32x8(&f32AbsMask8)).AsFloat32x8())
		acc0 = acc0.Add(p.GetLo().ConvertToFloat64())
		acc1 = acc1.Add(p.GetHi().ConvertToFloat64())
		if i++; i == steps {
			break
		}
		x, y = next(x), next(y)
	}
	var fields, lsbs [8]int32
	var peaks [8]float32
	var lanes0, lanes1 [4]float64
	maxField.Store(&fields)
	minLSB.Store(&lsbs)
	maxAbs.Store(&peaks)
	acc0.Store(&lanes0)
	acc1.Store(&lanes1)
	archsimd.ClearAVXUpperBits()
	field, g, peak := int32(0), int32(1<<20), float32(0) // 1<<30>>10 for lanes of zero products only
	for l := range fields {
		field, g, peak = max(field, fields[l]>>10), min(g, lsbs[l]>>10), max(peak, peaks[l])
	}
	return exactF16Sum(n, field, g, peak, (lanes0[0]+lanes0[1]+lanes0[2]+lanes0[3])+(lanes1[0]+lanes1[1]+lanes1[2]+lanes1[3]))
}

// exactF16Sum finishes an exact F16 dot of n values from its lanes' summaries: the largest
// exponent field of any value (31: an infinity or a NaN, which the sequential kernel
// decides), g, the smallest max(Ex,1)+max(Ey,1) over the nonzero products, the largest
// |product|, and the sum of the products in any order, which is the exact sum when the
// bound holds.
func exactF16Sum(n int, maxField, g int32, peak float32, sum float64) (float32, bool) {
	if maxField == 31 {
		return 0, false
	}
	if peak == 0 {
		return 0, true // every product ±0: the sequential sum from +0 is +0
	}
	if !f16PeakBound(peak, g, f16BoundLimit(n)) {
		return 0, false
	}
	return float32(sum), true
}

// f16PeakBound is the exactness bound of the F16 dots: n products below 2^(e+1), e the
// exponent of peak (the largest |product|), so Σ|x·y| ≤ n·2^(e+1) ≤ 2^(e+1+⌈log2 n⌉), must
// stay within 2^53 units of 2^(g−50) (g counts the exponent fields' 2×25 offset); lim is
// f16BoundLimit(n). A zero peak passes.
func f16PeakBound(peak float32, g, lim int32) bool {
	e := int32(math.Float32bits(peak)>>23&0xFF) - 127
	return e+lim <= g
}

// f16BoundLimit is ⌈log2 n⌉ − 2, f16PeakBound's term for sums of n products.
func f16BoundLimit(n int) int32 { return int32(bits.Len(uint(n-1))) - 2 }

// dotF16Exact is the exact vector F16 dot this CPU runs fastest (AVX-512 for lengths that
// are multiples of 32), ok false where the sequential kernel must decide.
func dotF16Exact(n int, w, a []byte) (float32, bool) {
	if useAVX512 && n%32 == 0 {
		return dotF16ExactAVX512(n, w, a)
	}
	return dotF16ExactAVX2(n, w, a)
}

var (
	int32Big8     = [8]int32{1 << 30, 1 << 30, 1 << 30, 1 << 30, 1 << 30, 1 << 30, 1 << 30, 1 << 30}
	f16Field8     = [8]uint32{0x7C00, 0x7C00, 0x7C00, 0x7C00, 0x7C00, 0x7C00, 0x7C00, 0x7C00}
	f16FieldOne8  = [8]int32{0x400, 0x400, 0x400, 0x400, 0x400, 0x400, 0x400, 0x400}
	f16Magnitude8 = [8]uint32{0x7FFF, 0x7FFF, 0x7FFF, 0x7FFF, 0x7FFF, 0x7FFF, 0x7FFF, 0x7FFF}
)

// dotF16Rows4AVX2 is dotF16AVX2 for four weight rows against one activation vector (see
// dotRows4), in scalar code: widened through f16Table (the products are exact in float32),
// each row's float64 sum adds them in the single-row kernel's order. On the build
// machine 16 rows of 256 values took about 4 µs against 5.5 µs row by row; a float64
// table (no conversions) and 64-bit reads of four values ran no faster. On AVX-512,
// f16Tile takes every length this kernel would see as a multiple of 16 first.
func dotF16Rows4AVX2(n int, w0, w1, w2, w3, a []byte) [4]float32 {
	w0, w1, w2, w3, a = w0[:2*n], w1[:2*n], w2[:2*n], w3[:2*n], a[:2*n]
	archsimd.ClearAVXUpperBits()
	var s0, s1, s2, s3 float64
	for i := 0; i < 2*n; i += 2 {
		y := f16Table[binary.LittleEndian.Uint16(a[i:])]
		s0 += float64(f16Table[binary.LittleEndian.Uint16(w0[i:])] * y)
		s1 += float64(f16Table[binary.LittleEndian.Uint16(w1[i:])] * y)
		s2 += float64(f16Table[binary.LittleEndian.Uint16(w2[i:])] * y)
		s3 += float64(f16Table[binary.LittleEndian.Uint16(w3[i:])] * y)
	}
	return [4]float32{float32(s0), float32(s1), float32(s2), float32(s3)}
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
