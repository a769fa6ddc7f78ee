//go:build goexperiment.simd && amd64

package tensor

import (
	"encoding/binary"
	"simd/archsimd"
)

// dotQ4_KTokens2AVX2 is dotQ4_KAVX2 for one weight row against two activation rows (see
// dotTokens2): each block's scales are unpacked and its nibbles split once for both tokens,
// and each token's integer sums and float accumulation are the single-row kernel's, step
// for step, so each result has its bits. dotQ4_KTokens4AVX2 takes four tokens at a time;
// this one takes the pair left over.
func dotQ4_KTokens2AVX2(n int, w, a0, a1 []byte) [2]float32 {
	nb := n / qkK
	if nb == 0 {
		return [2]float32{}
	}
	prefetchNext(w)
	x, y, z := (*[144]byte)(w[:nb*144]), (*[292]byte)(a0[:nb*292]), (*[292]byte)(a1[:nb*292])
	var acc0, accMin0, acc1, accMin1 archsimd.Float32x8
	for i := 0; ; {
		// Scales and mins as bytes [sc0..7, m0..7] in both 128-bit halves.
		v := archsimd.LoadUint8x16((*[16]uint8)(x[4:20])).AsInt8x16()
		lo := v.PermuteOrZero(archsimd.LoadInt8x16(&q4KPickLo)).AsInt32x4().ShiftRight(archsimd.LoadInt32x4(&q4KShift)).And(archsimd.LoadInt32x4(&q4KMaskLo))
		packed := v.PermuteOrZero(archsimd.LoadInt8x16(&q4KPickHi)).AsInt32x4().ShiftAllRight(2).And(archsimd.LoadInt32x4(&q4KMaskHi)).Or(lo).AsInt8x16()
		m4 := archsimd.LoadUint8x32(&nibbleMask)
		sc := m4.AsInt8x32().SetLo(packed).SetHi(packed)
		dmin := archsimd.LoadFloat32x4((*[4]float32)(f16Table[binary.LittleEndian.Uint16(x[2:4]):])).Broadcast1To8()
		mins := sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q4KMinPairs)).AsInt16x16()
		yd := archsimd.LoadUint8x16((*[16]uint8)(y[0:16])).AsFloat32x4().Broadcast1To8()
		minSum := mins.DotProductPairs(archsimd.LoadUint8x32((*[32]uint8)(y[260:292])).AsInt16x16())
		accMin0 = yd.Mul(dmin).MulAdd(minSum.ConvertToFloat32(), accMin0)
		zd := archsimd.LoadUint8x16((*[16]uint8)(z[0:16])).AsFloat32x4().Broadcast1To8()
		minSum = mins.DotProductPairs(archsimd.LoadUint8x32((*[32]uint8)(z[260:292])).AsInt16x16())
		accMin1 = zd.Mul(dmin).MulAdd(minSum.ConvertToFloat32(), accMin1)

		bits := archsimd.LoadUint8x32((*[32]uint8)(x[16:48]))
		nib := bits.And(m4)
		s := sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[0])).AsInt16x16()
		sum0 := nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[4:36])).AsInt8x32()).DotProductPairs(s)
		sum1 := nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(z[4:36])).AsInt8x32()).DotProductPairs(s)
		nib = bits.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4)
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[1])).AsInt16x16()
		sum0 = sum0.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[36:68])).AsInt8x32()).DotProductPairs(s))
		sum1 = sum1.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(z[36:68])).AsInt8x32()).DotProductPairs(s))

		bits = archsimd.LoadUint8x32((*[32]uint8)(x[48:80]))
		nib = bits.And(m4)
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[2])).AsInt16x16()
		sum0 = sum0.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[68:100])).AsInt8x32()).DotProductPairs(s))
		sum1 = sum1.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(z[68:100])).AsInt8x32()).DotProductPairs(s))
		nib = bits.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4)
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[3])).AsInt16x16()
		sum0 = sum0.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[100:132])).AsInt8x32()).DotProductPairs(s))
		sum1 = sum1.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(z[100:132])).AsInt8x32()).DotProductPairs(s))

		bits = archsimd.LoadUint8x32((*[32]uint8)(x[80:112]))
		nib = bits.And(m4)
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[4])).AsInt16x16()
		sum0 = sum0.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[132:164])).AsInt8x32()).DotProductPairs(s))
		sum1 = sum1.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(z[132:164])).AsInt8x32()).DotProductPairs(s))
		nib = bits.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4)
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[5])).AsInt16x16()
		sum0 = sum0.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[164:196])).AsInt8x32()).DotProductPairs(s))
		sum1 = sum1.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(z[164:196])).AsInt8x32()).DotProductPairs(s))

		bits = archsimd.LoadUint8x32((*[32]uint8)(x[112:144]))
		nib = bits.And(m4)
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[6])).AsInt16x16()
		sum0 = sum0.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[196:228])).AsInt8x32()).DotProductPairs(s))
		sum1 = sum1.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(z[196:228])).AsInt8x32()).DotProductPairs(s))
		nib = bits.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4)
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[7])).AsInt16x16()
		sum0 = sum0.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[228:260])).AsInt8x32()).DotProductPairs(s))
		sum1 = sum1.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(z[228:260])).AsInt8x32()).DotProductPairs(s))

		d := f16Lanes(x[0:2])
		acc0 = yd.Mul(d).MulAdd(sum0.ConvertToFloat32(), acc0)
		acc1 = zd.Mul(d).MulAdd(sum1.ConvertToFloat32(), acc1)
		if i++; i == nb {
			break
		}
		x, y, z = next(x), next(y), next(z)
	}
	return sumLanes2(acc0.Sub(accMin0), acc1.Sub(accMin1))
}

// dotQ4_KTokens4AVX2 is dotQ4_KTokens2AVX2 for four activation rows (see dotTokens4): each
// block's scales and mins are unpacked, and its nibbles split, once for four tokens, and
// each token's integer sums and float accumulation are still dotQ4_KAVX2's, step for step.
// Eight float accumulators and four sums do not fit the 15 vector registers beside the
// groups' values; the compiler keeps accumulators in memory, each touched once per block.
// For that the mins' step must end before the groups begin: dmin's f16 is read byte by
// byte, as binary.LittleEndian's inlined code would be scheduled after the groups, with
// the four tokens' min sums held across them (spilled: a few per cent slower).
func dotQ4_KTokens4AVX2(n int, w, a0, a1, a2, a3 []byte) [4]float32 {
	nb := n / qkK
	if nb == 0 {
		return [4]float32{}
	}
	prefetchNext(w)
	x := (*[144]byte)(w[:nb*144])
	y0, y1, y2, y3 := (*[292]byte)(a0[:nb*292]), (*[292]byte)(a1[:nb*292]), (*[292]byte)(a2[:nb*292]), (*[292]byte)(a3[:nb*292])
	var acc0, accMin0, acc1, accMin1, acc2, accMin2, acc3, accMin3 archsimd.Float32x8
	for i := 0; ; {
		// Scales and mins as bytes [sc0..7, m0..7] in both 128-bit halves.
		v := archsimd.LoadUint8x16((*[16]uint8)(x[4:20])).AsInt8x16()
		lo := v.PermuteOrZero(archsimd.LoadInt8x16(&q4KPickLo)).AsInt32x4().ShiftRight(archsimd.LoadInt32x4(&q4KShift)).And(archsimd.LoadInt32x4(&q4KMaskLo))
		packed := v.PermuteOrZero(archsimd.LoadInt8x16(&q4KPickHi)).AsInt32x4().ShiftAllRight(2).And(archsimd.LoadInt32x4(&q4KMaskHi)).Or(lo).AsInt8x16()
		m4 := archsimd.LoadUint8x32(&nibbleMask)
		sc := m4.AsInt8x32().SetLo(packed).SetHi(packed)
		dmin := archsimd.LoadFloat32x4((*[4]float32)(f16Table[uint16(x[2])|uint16(x[3])<<8:])).Broadcast1To8()
		mins := sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q4KMinPairs)).AsInt16x16()
		minSum := mins.DotProductPairs(archsimd.LoadUint8x32((*[32]uint8)(y0[260:292])).AsInt16x16())
		accMin0 = archsimd.LoadUint8x16((*[16]uint8)(y0[0:16])).AsFloat32x4().Broadcast1To8().Mul(dmin).MulAdd(minSum.ConvertToFloat32(), accMin0)
		minSum = mins.DotProductPairs(archsimd.LoadUint8x32((*[32]uint8)(y1[260:292])).AsInt16x16())
		accMin1 = archsimd.LoadUint8x16((*[16]uint8)(y1[0:16])).AsFloat32x4().Broadcast1To8().Mul(dmin).MulAdd(minSum.ConvertToFloat32(), accMin1)
		minSum = mins.DotProductPairs(archsimd.LoadUint8x32((*[32]uint8)(y2[260:292])).AsInt16x16())
		accMin2 = archsimd.LoadUint8x16((*[16]uint8)(y2[0:16])).AsFloat32x4().Broadcast1To8().Mul(dmin).MulAdd(minSum.ConvertToFloat32(), accMin2)
		minSum = mins.DotProductPairs(archsimd.LoadUint8x32((*[32]uint8)(y3[260:292])).AsInt16x16())
		accMin3 = archsimd.LoadUint8x16((*[16]uint8)(y3[0:16])).AsFloat32x4().Broadcast1To8().Mul(dmin).MulAdd(minSum.ConvertToFloat32(), accMin3)

		bits := archsimd.LoadUint8x32((*[32]uint8)(x[16:48]))
		nib := bits.And(m4)
		s := sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[0])).AsInt16x16()
		sum0 := nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y0[4:36])).AsInt8x32()).DotProductPairs(s)
		sum1 := nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y1[4:36])).AsInt8x32()).DotProductPairs(s)
		sum2 := nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y2[4:36])).AsInt8x32()).DotProductPairs(s)
		sum3 := nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y3[4:36])).AsInt8x32()).DotProductPairs(s)
		nib = bits.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4)
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[1])).AsInt16x16()
		sum0 = sum0.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y0[36:68])).AsInt8x32()).DotProductPairs(s))
		sum1 = sum1.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y1[36:68])).AsInt8x32()).DotProductPairs(s))
		sum2 = sum2.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y2[36:68])).AsInt8x32()).DotProductPairs(s))
		sum3 = sum3.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y3[36:68])).AsInt8x32()).DotProductPairs(s))

		bits = archsimd.LoadUint8x32((*[32]uint8)(x[48:80]))
		nib = bits.And(m4)
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[2])).AsInt16x16()
		sum0 = sum0.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y0[68:100])).AsInt8x32()).DotProductPairs(s))
		sum1 = sum1.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y1[68:100])).AsInt8x32()).DotProductPairs(s))
		sum2 = sum2.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y2[68:100])).AsInt8x32()).DotProductPairs(s))
		sum3 = sum3.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y3[68:100])).AsInt8x32()).DotProductPairs(s))
		nib = bits.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4)
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[3])).AsInt16x16()
		sum0 = sum0.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y0[100:132])).AsInt8x32()).DotProductPairs(s))
		sum1 = sum1.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y1[100:132])).AsInt8x32()).DotProductPairs(s))
		sum2 = sum2.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y2[100:132])).AsInt8x32()).DotProductPairs(s))
		sum3 = sum3.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y3[100:132])).AsInt8x32()).DotProductPairs(s))

		bits = archsimd.LoadUint8x32((*[32]uint8)(x[80:112]))
		nib = bits.And(m4)
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[4])).AsInt16x16()
		sum0 = sum0.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y0[132:164])).AsInt8x32()).DotProductPairs(s))
		sum1 = sum1.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y1[132:164])).AsInt8x32()).DotProductPairs(s))
		sum2 = sum2.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y2[132:164])).AsInt8x32()).DotProductPairs(s))
		sum3 = sum3.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y3[132:164])).AsInt8x32()).DotProductPairs(s))
		nib = bits.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4)
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[5])).AsInt16x16()
		sum0 = sum0.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y0[164:196])).AsInt8x32()).DotProductPairs(s))
		sum1 = sum1.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y1[164:196])).AsInt8x32()).DotProductPairs(s))
		sum2 = sum2.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y2[164:196])).AsInt8x32()).DotProductPairs(s))
		sum3 = sum3.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y3[164:196])).AsInt8x32()).DotProductPairs(s))

		bits = archsimd.LoadUint8x32((*[32]uint8)(x[112:144]))
		nib = bits.And(m4)
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[6])).AsInt16x16()
		sum0 = sum0.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y0[196:228])).AsInt8x32()).DotProductPairs(s))
		sum1 = sum1.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y1[196:228])).AsInt8x32()).DotProductPairs(s))
		sum2 = sum2.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y2[196:228])).AsInt8x32()).DotProductPairs(s))
		sum3 = sum3.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y3[196:228])).AsInt8x32()).DotProductPairs(s))
		nib = bits.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4)
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[7])).AsInt16x16()
		sum0 = sum0.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y0[228:260])).AsInt8x32()).DotProductPairs(s))
		sum1 = sum1.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y1[228:260])).AsInt8x32()).DotProductPairs(s))
		sum2 = sum2.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y2[228:260])).AsInt8x32()).DotProductPairs(s))
		sum3 = sum3.Add(nib.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y3[228:260])).AsInt8x32()).DotProductPairs(s))

		d := f16Lanes(x[0:2])
		acc0 = archsimd.LoadUint8x16((*[16]uint8)(y0[0:16])).AsFloat32x4().Broadcast1To8().Mul(d).MulAdd(sum0.ConvertToFloat32(), acc0)
		acc1 = archsimd.LoadUint8x16((*[16]uint8)(y1[0:16])).AsFloat32x4().Broadcast1To8().Mul(d).MulAdd(sum1.ConvertToFloat32(), acc1)
		acc2 = archsimd.LoadUint8x16((*[16]uint8)(y2[0:16])).AsFloat32x4().Broadcast1To8().Mul(d).MulAdd(sum2.ConvertToFloat32(), acc2)
		acc3 = archsimd.LoadUint8x16((*[16]uint8)(y3[0:16])).AsFloat32x4().Broadcast1To8().Mul(d).MulAdd(sum3.ConvertToFloat32(), acc3)
		if i++; i == nb {
			break
		}
		x, y0, y1, y2, y3 = next(x), next(y0), next(y1), next(y2), next(y3)
	}
	return sumLanes4(acc0.Sub(accMin0), acc1.Sub(accMin1), acc2.Sub(accMin2), acc3.Sub(accMin3))
}

// dotQ5_KTokens2AVX2 is dotQ5_KAVX2 for one weight row against two activation rows (see
// dotTokens2): as dotQ4_KTokens2AVX2, with each group's fifth bits joined to its nibbles
// once for both tokens.
func dotQ5_KTokens2AVX2(n int, w, a0, a1 []byte) [2]float32 {
	nb := n / qkK
	if nb == 0 {
		return [2]float32{}
	}
	prefetchNext(w)
	x, y, z := (*[176]byte)(w[:nb*176]), (*[292]byte)(a0[:nb*292]), (*[292]byte)(a1[:nb*292])
	var acc0, accMin0, acc1, accMin1 archsimd.Float32x8
	for i := 0; ; {
		// Scales and mins as bytes [sc0..7, m0..7] in both 128-bit halves.
		v := archsimd.LoadUint8x16((*[16]uint8)(x[4:20])).AsInt8x16()
		lo := v.PermuteOrZero(archsimd.LoadInt8x16(&q4KPickLo)).AsInt32x4().ShiftRight(archsimd.LoadInt32x4(&q4KShift)).And(archsimd.LoadInt32x4(&q4KMaskLo))
		packed := v.PermuteOrZero(archsimd.LoadInt8x16(&q4KPickHi)).AsInt32x4().ShiftAllRight(2).And(archsimd.LoadInt32x4(&q4KMaskHi)).Or(lo).AsInt8x16()
		m4 := archsimd.LoadUint8x32(&nibbleMask)
		sc := m4.AsInt8x32().SetLo(packed).SetHi(packed)
		dmin := archsimd.LoadFloat32x4((*[4]float32)(f16Table[binary.LittleEndian.Uint16(x[2:4]):])).Broadcast1To8()
		mins := sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q4KMinPairs)).AsInt16x16()
		yd := archsimd.LoadUint8x16((*[16]uint8)(y[0:16])).AsFloat32x4().Broadcast1To8()
		minSum := mins.DotProductPairs(archsimd.LoadUint8x32((*[32]uint8)(y[260:292])).AsInt16x16())
		accMin0 = yd.Mul(dmin).MulAdd(minSum.ConvertToFloat32(), accMin0)
		zd := archsimd.LoadUint8x16((*[16]uint8)(z[0:16])).AsFloat32x4().Broadcast1To8()
		minSum = mins.DotProductPairs(archsimd.LoadUint8x32((*[32]uint8)(z[260:292])).AsInt16x16())
		accMin1 = zd.Mul(dmin).MulAdd(minSum.ConvertToFloat32(), accMin1)

		m5 := archsimd.LoadUint8x32(&bit4Mask)
		qh := archsimd.LoadUint8x32((*[32]uint8)(x[16:48])).AsInt16x16()
		bits := archsimd.LoadUint8x32((*[32]uint8)(x[48:80]))
		code := bits.And(m4).Or(qh.ShiftAllLeft(4).AsUint8x32().And(m5))
		s := sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[0])).AsInt16x16()
		sum0 := code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[4:36])).AsInt8x32()).DotProductPairs(s)
		sum1 := code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(z[4:36])).AsInt8x32()).DotProductPairs(s)
		code = bits.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4).Or(qh.ShiftAllLeft(3).AsUint8x32().And(m5))
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[1])).AsInt16x16()
		sum0 = sum0.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[36:68])).AsInt8x32()).DotProductPairs(s))
		sum1 = sum1.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(z[36:68])).AsInt8x32()).DotProductPairs(s))

		bits = archsimd.LoadUint8x32((*[32]uint8)(x[80:112]))
		code = bits.And(m4).Or(qh.ShiftAllLeft(2).AsUint8x32().And(m5))
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[2])).AsInt16x16()
		sum0 = sum0.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[68:100])).AsInt8x32()).DotProductPairs(s))
		sum1 = sum1.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(z[68:100])).AsInt8x32()).DotProductPairs(s))
		code = bits.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4).Or(qh.ShiftAllLeft(1).AsUint8x32().And(m5))
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[3])).AsInt16x16()
		sum0 = sum0.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[100:132])).AsInt8x32()).DotProductPairs(s))
		sum1 = sum1.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(z[100:132])).AsInt8x32()).DotProductPairs(s))

		bits = archsimd.LoadUint8x32((*[32]uint8)(x[112:144]))
		code = bits.And(m4).Or(qh.AsUint8x32().And(m5))
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[4])).AsInt16x16()
		sum0 = sum0.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[132:164])).AsInt8x32()).DotProductPairs(s))
		sum1 = sum1.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(z[132:164])).AsInt8x32()).DotProductPairs(s))
		code = bits.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4).Or(qh.ShiftAllRight(1).AsUint8x32().And(m5))
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[5])).AsInt16x16()
		sum0 = sum0.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[164:196])).AsInt8x32()).DotProductPairs(s))
		sum1 = sum1.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(z[164:196])).AsInt8x32()).DotProductPairs(s))

		bits = archsimd.LoadUint8x32((*[32]uint8)(x[144:176]))
		code = bits.And(m4).Or(qh.ShiftAllRight(2).AsUint8x32().And(m5))
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[6])).AsInt16x16()
		sum0 = sum0.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[196:228])).AsInt8x32()).DotProductPairs(s))
		sum1 = sum1.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(z[196:228])).AsInt8x32()).DotProductPairs(s))
		code = bits.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4).Or(qh.ShiftAllRight(3).AsUint8x32().And(m5))
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[7])).AsInt16x16()
		sum0 = sum0.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[228:260])).AsInt8x32()).DotProductPairs(s))
		sum1 = sum1.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(z[228:260])).AsInt8x32()).DotProductPairs(s))

		d := f16Lanes(x[0:2])
		acc0 = yd.Mul(d).MulAdd(sum0.ConvertToFloat32(), acc0)
		acc1 = zd.Mul(d).MulAdd(sum1.ConvertToFloat32(), acc1)
		if i++; i == nb {
			break
		}
		x, y, z = next(x), next(y), next(z)
	}
	return sumLanes2(acc0.Sub(accMin0), acc1.Sub(accMin1))
}

// dotQ6_KTokens2AVX2 is dotQ6_KAVX2 for one weight row against two activation rows (see
// dotTokens2): each group of 6-bit codes is assembled from its low and high bits, and each
// sub-block scale spread, once for both tokens; per token the integer sums, the offset and
// the float accumulation are the single-row kernel's.
func dotQ6_KTokens2AVX2(n int, w, a0, a1 []byte) [2]float32 {
	nb := n / qkK
	if nb == 0 {
		return [2]float32{}
	}
	prefetchNext(w)
	x, y, z := (*[210]byte)(w[:nb*210]), (*[292]byte)(a0[:nb*292]), (*[292]byte)(a1[:nb*292])
	var acc0, acc1 archsimd.Float32x8
	for i := 0; ; {
		m4 := archsimd.LoadUint8x32(&nibbleMask)
		m6 := archsimd.LoadUint8x32(&bits45Mask)
		scales := archsimd.LoadUint8x16((*[16]uint8)(x[192:208])).AsInt8x16()

		sc := scales.PermuteOrZero(archsimd.LoadInt8x16(&q6KHalf[0])).ExtendToInt16().AsInt8x32()
		ql0, ql1 := archsimd.LoadUint8x32((*[32]uint8)(x[0:32])), archsimd.LoadUint8x32((*[32]uint8)(x[32:64]))
		qh := archsimd.LoadUint8x32((*[32]uint8)(x[128:160])).AsInt16x16()
		code := ql0.And(m4).Or(qh.ShiftAllLeft(4).AsUint8x32().And(m6))
		s := sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q6KSpread[0])).AsInt16x16()
		sum0 := code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[4:36])).AsInt8x32()).DotProductPairs(s)
		sum1 := code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(z[4:36])).AsInt8x32()).DotProductPairs(s)
		code = ql1.And(m4).Or(qh.ShiftAllLeft(2).AsUint8x32().And(m6))
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q6KSpread[1])).AsInt16x16()
		sum0 = sum0.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[36:68])).AsInt8x32()).DotProductPairs(s))
		sum1 = sum1.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(z[36:68])).AsInt8x32()).DotProductPairs(s))
		code = ql0.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4).Or(qh.AsUint8x32().And(m6))
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q6KSpread[2])).AsInt16x16()
		sum0 = sum0.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[68:100])).AsInt8x32()).DotProductPairs(s))
		sum1 = sum1.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(z[68:100])).AsInt8x32()).DotProductPairs(s))
		code = ql1.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4).Or(qh.ShiftAllRight(2).AsUint8x32().And(m6))
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q6KSpread[3])).AsInt16x16()
		sum0 = sum0.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[100:132])).AsInt8x32()).DotProductPairs(s))
		sum1 = sum1.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(z[100:132])).AsInt8x32()).DotProductPairs(s))

		sc = scales.PermuteOrZero(archsimd.LoadInt8x16(&q6KHalf[1])).ExtendToInt16().AsInt8x32()
		ql0, ql1 = archsimd.LoadUint8x32((*[32]uint8)(x[64:96])), archsimd.LoadUint8x32((*[32]uint8)(x[96:128]))
		qh = archsimd.LoadUint8x32((*[32]uint8)(x[160:192])).AsInt16x16()
		code = ql0.And(m4).Or(qh.ShiftAllLeft(4).AsUint8x32().And(m6))
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q6KSpread[0])).AsInt16x16()
		sum0 = sum0.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[132:164])).AsInt8x32()).DotProductPairs(s))
		sum1 = sum1.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(z[132:164])).AsInt8x32()).DotProductPairs(s))
		code = ql1.And(m4).Or(qh.ShiftAllLeft(2).AsUint8x32().And(m6))
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q6KSpread[1])).AsInt16x16()
		sum0 = sum0.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[164:196])).AsInt8x32()).DotProductPairs(s))
		sum1 = sum1.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(z[164:196])).AsInt8x32()).DotProductPairs(s))
		code = ql0.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4).Or(qh.AsUint8x32().And(m6))
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q6KSpread[2])).AsInt16x16()
		sum0 = sum0.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[196:228])).AsInt8x32()).DotProductPairs(s))
		sum1 = sum1.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(z[196:228])).AsInt8x32()).DotProductPairs(s))
		code = ql1.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4).Or(qh.ShiftAllRight(2).AsUint8x32().And(m6))
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q6KSpread[3])).AsInt16x16()
		sum0 = sum0.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[228:260])).AsInt8x32()).DotProductPairs(s))
		sum1 = sum1.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(z[228:260])).AsInt8x32()).DotProductPairs(s))

		wide := scales.ExtendToInt16()
		d := f16Lanes(x[208:210])
		acc0 = q6KAccumulate(acc0, sum0, wide, d, y)
		acc1 = q6KAccumulate(acc1, sum1, wide, d, z)
		if i++; i == nb {
			break
		}
		x, y, z = next(x), next(y), next(z)
	}
	return sumLanes2(acc0, acc1)
}

// dotQ6_KTokens4AVX2 is dotQ6_KTokens2AVX2 for four activation rows (see dotTokens4): each
// group of 6-bit codes is assembled, and each sub-block scale spread, once for four
// tokens; per token the integer sums, the offset and the float accumulation are still
// dotQ6_KAVX2's. As in dotQ4_KTokens4AVX2, the compiler keeps accumulators in memory.
func dotQ6_KTokens4AVX2(n int, w, a0, a1, a2, a3 []byte) [4]float32 {
	nb := n / qkK
	if nb == 0 {
		return [4]float32{}
	}
	prefetchNext(w)
	x := (*[210]byte)(w[:nb*210])
	y0, y1, y2, y3 := (*[292]byte)(a0[:nb*292]), (*[292]byte)(a1[:nb*292]), (*[292]byte)(a2[:nb*292]), (*[292]byte)(a3[:nb*292])
	var acc0, acc1, acc2, acc3 archsimd.Float32x8
	for i := 0; ; {
		m4 := archsimd.LoadUint8x32(&nibbleMask)
		m6 := archsimd.LoadUint8x32(&bits45Mask)
		// The 16 scales as words: held as a 128-bit vector across the block, scales would
		// be spilled with the legacy-SSE MOVUPS (see simd_amd64.go).
		wide := archsimd.LoadUint8x16((*[16]uint8)(x[192:208])).AsInt8x16().ExtendToInt16()

		sc := wide.Select128FromPair(0, 0, wide).AsInt8x32()
		ql0, ql1 := archsimd.LoadUint8x32((*[32]uint8)(x[0:32])), archsimd.LoadUint8x32((*[32]uint8)(x[32:64]))
		qh := archsimd.LoadUint8x32((*[32]uint8)(x[128:160])).AsInt16x16()
		code := ql0.And(m4).Or(qh.ShiftAllLeft(4).AsUint8x32().And(m6))
		s := sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q6KSpread[0])).AsInt16x16()
		sum0 := code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y0[4:36])).AsInt8x32()).DotProductPairs(s)
		sum1 := code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y1[4:36])).AsInt8x32()).DotProductPairs(s)
		sum2 := code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y2[4:36])).AsInt8x32()).DotProductPairs(s)
		sum3 := code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y3[4:36])).AsInt8x32()).DotProductPairs(s)
		code = ql1.And(m4).Or(qh.ShiftAllLeft(2).AsUint8x32().And(m6))
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q6KSpread[1])).AsInt16x16()
		sum0 = sum0.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y0[36:68])).AsInt8x32()).DotProductPairs(s))
		sum1 = sum1.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y1[36:68])).AsInt8x32()).DotProductPairs(s))
		sum2 = sum2.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y2[36:68])).AsInt8x32()).DotProductPairs(s))
		sum3 = sum3.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y3[36:68])).AsInt8x32()).DotProductPairs(s))
		code = ql0.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4).Or(qh.AsUint8x32().And(m6))
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q6KSpread[2])).AsInt16x16()
		sum0 = sum0.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y0[68:100])).AsInt8x32()).DotProductPairs(s))
		sum1 = sum1.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y1[68:100])).AsInt8x32()).DotProductPairs(s))
		sum2 = sum2.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y2[68:100])).AsInt8x32()).DotProductPairs(s))
		sum3 = sum3.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y3[68:100])).AsInt8x32()).DotProductPairs(s))
		code = ql1.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4).Or(qh.ShiftAllRight(2).AsUint8x32().And(m6))
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q6KSpread[3])).AsInt16x16()
		sum0 = sum0.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y0[100:132])).AsInt8x32()).DotProductPairs(s))
		sum1 = sum1.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y1[100:132])).AsInt8x32()).DotProductPairs(s))
		sum2 = sum2.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y2[100:132])).AsInt8x32()).DotProductPairs(s))
		sum3 = sum3.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y3[100:132])).AsInt8x32()).DotProductPairs(s))

		sc = wide.Select128FromPair(1, 1, wide).AsInt8x32()
		ql0, ql1 = archsimd.LoadUint8x32((*[32]uint8)(x[64:96])), archsimd.LoadUint8x32((*[32]uint8)(x[96:128]))
		qh = archsimd.LoadUint8x32((*[32]uint8)(x[160:192])).AsInt16x16()
		code = ql0.And(m4).Or(qh.ShiftAllLeft(4).AsUint8x32().And(m6))
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q6KSpread[0])).AsInt16x16()
		sum0 = sum0.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y0[132:164])).AsInt8x32()).DotProductPairs(s))
		sum1 = sum1.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y1[132:164])).AsInt8x32()).DotProductPairs(s))
		sum2 = sum2.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y2[132:164])).AsInt8x32()).DotProductPairs(s))
		sum3 = sum3.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y3[132:164])).AsInt8x32()).DotProductPairs(s))
		code = ql1.And(m4).Or(qh.ShiftAllLeft(2).AsUint8x32().And(m6))
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q6KSpread[1])).AsInt16x16()
		sum0 = sum0.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y0[164:196])).AsInt8x32()).DotProductPairs(s))
		sum1 = sum1.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y1[164:196])).AsInt8x32()).DotProductPairs(s))
		sum2 = sum2.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y2[164:196])).AsInt8x32()).DotProductPairs(s))
		sum3 = sum3.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y3[164:196])).AsInt8x32()).DotProductPairs(s))
		code = ql0.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4).Or(qh.AsUint8x32().And(m6))
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q6KSpread[2])).AsInt16x16()
		sum0 = sum0.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y0[196:228])).AsInt8x32()).DotProductPairs(s))
		sum1 = sum1.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y1[196:228])).AsInt8x32()).DotProductPairs(s))
		sum2 = sum2.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y2[196:228])).AsInt8x32()).DotProductPairs(s))
		sum3 = sum3.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y3[196:228])).AsInt8x32()).DotProductPairs(s))
		code = ql1.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4).Or(qh.ShiftAllRight(2).AsUint8x32().And(m6))
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q6KSpread[3])).AsInt16x16()
		sum0 = sum0.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y0[228:260])).AsInt8x32()).DotProductPairs(s))
		sum1 = sum1.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y1[228:260])).AsInt8x32()).DotProductPairs(s))
		sum2 = sum2.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y2[228:260])).AsInt8x32()).DotProductPairs(s))
		sum3 = sum3.Add(code.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y3[228:260])).AsInt8x32()).DotProductPairs(s))

		d := f16Lanes(x[208:210])
		acc0 = q6KAccumulate(acc0, sum0, wide, d, y0)
		acc1 = q6KAccumulate(acc1, sum1, wide, d, y1)
		acc2 = q6KAccumulate(acc2, sum2, wide, d, y2)
		acc3 = q6KAccumulate(acc3, sum3, wide, d, y3)
		if i++; i == nb {
			break
		}
		x, y0, y1, y2, y3 = next(x), next(y0), next(y1), next(y2), next(y3)
	}
	return sumLanes4(acc0, acc1, acc2, acc3)
}

// q6KAccumulate is the end of a Q6_K block for one token, as in dotQ6_KAVX2: the offset
// (32 × the token's sums of 16 quants, each times its scale, wide) comes off the block's
// integer lanes, which are accumulated into acc with its scale d and the token's. Inlined after the groups, where
// the multi-token kernels call it, it is scheduled where it stands.
func q6KAccumulate(acc archsimd.Float32x8, sum archsimd.Int32x8, wide archsimd.Int16x16, d archsimd.Float32x8, y *[292]byte) archsimd.Float32x8 {
	sum = sum.Sub(wide.DotProductPairs(archsimd.LoadUint8x32((*[32]uint8)(y[260:292])).AsInt16x16()).ShiftAllLeft(5))
	return f32Lanes(y[0:16]).Mul(d).MulAdd(sum.ConvertToFloat32(), acc)
}

// dotMXFP4Tokens2AVX2 is dotMXFP4AVX2 for one weight row against two activation rows (see
// dotTokens2): each block's nibbles are looked up in the FP4 table, and its exponent
// widened, once for both tokens; per token the integer sums and the float accumulation are
// the single-row kernel's.
func dotMXFP4Tokens2AVX2(n int, w, a0, a1 []byte) [2]float32 {
	nb := n / qk32
	if nb == 0 {
		return [2]float32{}
	}
	prefetchNext(w)
	x, y, z := (*[17]byte)(w[:nb*17]), (*[34]byte)(a0[:nb*34]), (*[34]byte)(a1[:nb*34])
	var acc0, acc1 archsimd.Float32x8
	for i := 0; ; {
		idx := nibbles32(x[1:17])
		q := archsimd.LoadInt8x32(&fp4Shifted).PermuteOrZeroGrouped(idx.AsInt8x32()).AsUint8x32()
		twelve := archsimd.LoadUint8x32(&twelves)
		one := archsimd.LoadInt16x16(&ones16)
		e := archsimd.LoadFloat32x4((*[4]float32)(e8m0Table[x[0]:])).Broadcast1To8()
		qy := archsimd.LoadUint8x32((*[32]uint8)(y[2:34])).AsInt8x32()
		p := q.DotProductPairsSaturated(qy).Sub(twelve.DotProductPairsSaturated(qy))
		p32 := p.DotProductPairs(one)
		acc0 = f16Lanes(y[0:2]).Mul(e).MulAdd(p32.ConvertToFloat32(), acc0)
		qz := archsimd.LoadUint8x32((*[32]uint8)(z[2:34])).AsInt8x32()
		p = q.DotProductPairsSaturated(qz).Sub(twelve.DotProductPairsSaturated(qz))
		p32 = p.DotProductPairs(one)
		acc1 = f16Lanes(z[0:2]).Mul(e).MulAdd(p32.ConvertToFloat32(), acc1)
		if i++; i == nb {
			break
		}
		x, y, z = next(x), next(y), next(z)
	}
	return sumLanes2(acc0, acc1)
}

// dotQ8_0Tokens2AVX2 is dotQ8_0AVX2 for one weight row against two activation rows (see
// dotTokens2): each block's weight magnitudes and scale are taken once for both tokens,
// and per token the signs move onto the activations and the sums and float accumulation
// run as in the single-row kernel.
func dotQ8_0Tokens2AVX2(n int, w, a0, a1 []byte) [2]float32 {
	nb := n / qk32
	if nb == 0 {
		return [2]float32{}
	}
	prefetchNext(w)
	x, y, z := (*[34]byte)(w[:nb*34]), (*[34]byte)(a0[:nb*34]), (*[34]byte)(a1[:nb*34])
	var acc0, acc1 archsimd.Float32x8
	for i := 0; ; {
		qx := archsimd.LoadUint8x32((*[32]uint8)(x[2:34])).AsInt8x32()
		mag := qx.Abs().AsUint8x32()
		one := archsimd.LoadInt16x16(&ones16)
		d := f16Lanes(x[0:2])
		qy := archsimd.LoadUint8x32((*[32]uint8)(y[2:34])).AsInt8x32()
		p := mag.DotProductPairsSaturated(qy.CopySign(qx)).DotProductPairs(one)
		acc0 = d.Mul(f16Lanes(y[0:2])).MulAdd(p.ConvertToFloat32(), acc0)
		qz := archsimd.LoadUint8x32((*[32]uint8)(z[2:34])).AsInt8x32()
		p = mag.DotProductPairsSaturated(qz.CopySign(qx)).DotProductPairs(one)
		acc1 = d.Mul(f16Lanes(z[0:2])).MulAdd(p.ConvertToFloat32(), acc1)
		if i++; i == nb {
			break
		}
		x, y, z = next(x), next(y), next(z)
	}
	return sumLanes2(acc0, acc1)
}

// dotIQ4_XSTokens2AVX2 is dotIQ4_XSAVX2 for one weight row against two activation rows
// (see dotTokens2): each block's scales are assembled, and each sub-block's nibbles looked
// up in the level table and regrouped, once for both tokens; per token the signs move onto
// the activations and the sums and float accumulation are the single-row kernel's.
func dotIQ4_XSTokens2AVX2(n int, w, a0, a1 []byte) [2]float32 {
	nb := n / qkK
	if nb == 0 {
		return [2]float32{}
	}
	prefetchNext(w)
	x, y, z := (*[136]byte)(w[:nb*136]), (*[292]byte)(a0[:nb*292]), (*[292]byte)(a1[:nb*292])
	var acc0, acc1 archsimd.Float32x8
	for i := 0; ; {
		// The scales as in dotIQ4_XSAVX2.
		lo := uint64(x[4]) | uint64(x[5])<<16 | uint64(x[6])<<32 | uint64(x[7])<<48
		lo = (lo | lo<<4) & 0x0F0F0F0F0F0F0F0F
		hi := uint64(x[2]) | uint64(x[3])<<32
		hi = (hi | hi<<12) & 0x000F000F000F000F
		hi = (hi | hi<<6) & 0x0303030303030303
		sc := archsimd.BroadcastUint64x2(lo | hi<<4).AsInt8x16().Sub(archsimd.LoadInt8x16(&thirtyTwos)).ExtendToInt16().AsInt8x32()
		levels := archsimd.LoadInt8x32(&iq4Levels)
		m4 := archsimd.LoadUint8x32(&nibbleMask)

		bits := archsimd.LoadUint8x32((*[32]uint8)(x[8:40]))
		l0 := levels.PermuteOrZeroGrouped(bits.And(m4).AsInt8x32())
		l1 := levels.PermuteOrZeroGrouped(bits.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4).AsInt8x32())
		v := l0.Select128FromPair(0, 2, l1)
		mag := v.Abs().AsUint8x32()
		s := sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadWord[0])).AsInt16x16()
		sum0 := mag.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[4:36])).AsInt8x32().CopySign(v)).DotProductPairs(s)
		sum1 := mag.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(z[4:36])).AsInt8x32().CopySign(v)).DotProductPairs(s)
		v = l0.Select128FromPair(1, 3, l1)
		mag = v.Abs().AsUint8x32()
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadWord[1])).AsInt16x16()
		sum0 = sum0.Add(mag.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[36:68])).AsInt8x32().CopySign(v)).DotProductPairs(s))
		sum1 = sum1.Add(mag.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(z[36:68])).AsInt8x32().CopySign(v)).DotProductPairs(s))

		bits = archsimd.LoadUint8x32((*[32]uint8)(x[40:72]))
		l0 = levels.PermuteOrZeroGrouped(bits.And(m4).AsInt8x32())
		l1 = levels.PermuteOrZeroGrouped(bits.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4).AsInt8x32())
		v = l0.Select128FromPair(0, 2, l1)
		mag = v.Abs().AsUint8x32()
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadWord[2])).AsInt16x16()
		sum0 = sum0.Add(mag.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[68:100])).AsInt8x32().CopySign(v)).DotProductPairs(s))
		sum1 = sum1.Add(mag.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(z[68:100])).AsInt8x32().CopySign(v)).DotProductPairs(s))
		v = l0.Select128FromPair(1, 3, l1)
		mag = v.Abs().AsUint8x32()
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadWord[3])).AsInt16x16()
		sum0 = sum0.Add(mag.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[100:132])).AsInt8x32().CopySign(v)).DotProductPairs(s))
		sum1 = sum1.Add(mag.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(z[100:132])).AsInt8x32().CopySign(v)).DotProductPairs(s))

		bits = archsimd.LoadUint8x32((*[32]uint8)(x[72:104]))
		l0 = levels.PermuteOrZeroGrouped(bits.And(m4).AsInt8x32())
		l1 = levels.PermuteOrZeroGrouped(bits.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4).AsInt8x32())
		v = l0.Select128FromPair(0, 2, l1)
		mag = v.Abs().AsUint8x32()
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadWord[4])).AsInt16x16()
		sum0 = sum0.Add(mag.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[132:164])).AsInt8x32().CopySign(v)).DotProductPairs(s))
		sum1 = sum1.Add(mag.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(z[132:164])).AsInt8x32().CopySign(v)).DotProductPairs(s))
		v = l0.Select128FromPair(1, 3, l1)
		mag = v.Abs().AsUint8x32()
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadWord[5])).AsInt16x16()
		sum0 = sum0.Add(mag.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[164:196])).AsInt8x32().CopySign(v)).DotProductPairs(s))
		sum1 = sum1.Add(mag.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(z[164:196])).AsInt8x32().CopySign(v)).DotProductPairs(s))

		bits = archsimd.LoadUint8x32((*[32]uint8)(x[104:136]))
		l0 = levels.PermuteOrZeroGrouped(bits.And(m4).AsInt8x32())
		l1 = levels.PermuteOrZeroGrouped(bits.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4).AsInt8x32())
		v = l0.Select128FromPair(0, 2, l1)
		mag = v.Abs().AsUint8x32()
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadWord[6])).AsInt16x16()
		sum0 = sum0.Add(mag.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[196:228])).AsInt8x32().CopySign(v)).DotProductPairs(s))
		sum1 = sum1.Add(mag.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(z[196:228])).AsInt8x32().CopySign(v)).DotProductPairs(s))
		v = l0.Select128FromPair(1, 3, l1)
		mag = v.Abs().AsUint8x32()
		s = sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadWord[7])).AsInt16x16()
		sum0 = sum0.Add(mag.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[228:260])).AsInt8x32().CopySign(v)).DotProductPairs(s))
		sum1 = sum1.Add(mag.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(z[228:260])).AsInt8x32().CopySign(v)).DotProductPairs(s))

		d := f16Lanes(x[0:2])
		acc0 = f32Lanes(y[0:16]).Mul(d).MulAdd(sum0.ConvertToFloat32(), acc0)
		acc1 = f32Lanes(z[0:16]).Mul(d).MulAdd(sum1.ConvertToFloat32(), acc1)
		if i++; i == nb {
			break
		}
		x, y, z = next(x), next(y), next(z)
	}
	return sumLanes2(acc0, acc1)
}

// sumLanes2 is sumLanes of v0 and of v1, the same additions in the same order for each
// (see sumLanes4).
func sumLanes2(v0, v1 archsimd.Float32x8) [2]float32 {
	h := crossPairs(v0.GetLo().Add(v0.GetHi()), v1.GetLo().Add(v1.GetHi()))
	l := storeLanes4(h.AddPairs(h))
	return [2]float32(l[:2])
}

// sumLanes4 is sumLanes of each of v0..v3, the same additions in the same order for each:
// crossPairs of two vectors, then VHADDPS, adds them as sumLanes does for one.
func sumLanes4(v0, v1, v2, v3 archsimd.Float32x8) [4]float32 {
	h01 := crossPairs(v0.GetLo().Add(v0.GetHi()), v1.GetLo().Add(v1.GetHi()))
	h23 := crossPairs(v2.GetLo().Add(v2.GetHi()), v3.GetLo().Add(v3.GetHi()))
	return storeLanes4(h01.AddPairs(h23))
}

// storeLanes4 is the four lanes of v, with the upper halves of the vector registers
// cleared as in sumLanes. They are stored at once: the multi-token kernels' results are
// copied by one load, which waits some 15 cycles for narrower stores (they cannot be
// forwarded to it), about 4% of a prefill when each token's lane was stored on its own.
func storeLanes4(v archsimd.Float32x4) [4]float32 {
	var s [4]float32
	v.Store(&s)
	archsimd.ClearAVXUpperBits()
	return s
}
