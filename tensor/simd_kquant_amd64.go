//go:build goexperiment.simd && amd64

package tensor

import (
	"encoding/binary"
	"simd/archsimd"
)

// Vector dot products of the 256-value super-block formats with Q8_K activations (292
// bytes: d f32, 256 int8 quants, 16 int16 sums of 16). Each super-block's integer sum is
// exact and scaled once: sum·(d_w·d_y), plus for Q4_K/Q5_K the mins term
// -(dmin_w·d_y)·Σ min·bsum kept in its own accumulator, as ggml's AVX2 kernels do. The four
// 64-value chunks of a super-block are written out (see simd_amd64.go for why a helper or a
// loop per chunk is slower).

var (
	// q4KPickLo/q4KPickHi, q4KShift and the masks decode the 12 packed scale bytes b of
	// Q4_K and Q5_K in a vector, a 32-bit lane at a time, into bytes [sc0..7, m0..7]
	// (written out in both kernels: as a helper it was scheduled late, see simd_amd64.go):
	//   sc0-3 = b0-3 & 63             m0-3 = b4-7 & 63
	//   sc4-7 = b8-11 & 15 | (b0-3 >> 6) << 4    m4-7 = b8-11 >> 4 | (b4-7 >> 6) << 4
	q4KPickLo = [16]int8{0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11}
	q4KShift  = [4]int32{0, 0, 0, 4}
	q4KMaskLo = [4]int32{0x3F3F3F3F, 0x0F0F0F0F, 0x3F3F3F3F, 0x0F0F0F0F}
	q4KPickHi = [16]int8{-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7}
	q4KMaskHi = [4]int32{0, 0x30303030, 0, 0x30303030}
	// q4KMinPairs widens each min (bytes 8-15 of the decoded scales) to two words in a row,
	// to meet the two bsums of its 32 values in VPMADDWD: mins 0-3 in the first 128 bits,
	// 4-7 in the second.
	q4KMinPairs = func() (idx [32]int8) {
		for l := 0; l < 32; l += 2 {
			idx[l], idx[l+1] = int8(8+l/4), -1
		}
		return idx
	}()
	bit4Mask = [32]uint8{0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10,
		0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10}
)

// dotQ4_KAVX2 is Q4_K × Q8_K. Chunk c of 32 bytes holds sub-block 2c in its low nibbles and
// 2c+1 in its high nibbles, against quants 64c..64c+31 and 64c+32..64c+63.
func dotQ4_KAVX2(n int, w, a []byte) float32 {
	nb := n / qkK
	if nb == 0 {
		return 0
	}
	prefetchNext(w)
	x, y := (*[144]byte)(w[:nb*144]), (*[292]byte)(a[:nb*292])
	var acc, accMin archsimd.Float32x8
	for i := 0; ; {
		// Scales and mins as bytes [sc0..7, m0..7] in both 128-bit halves.
		v := archsimd.LoadUint8x16((*[16]uint8)(x[4:20])).AsInt8x16()
		lo := v.PermuteOrZero(archsimd.LoadInt8x16(&q4KPickLo)).AsInt32x4().ShiftRight(archsimd.LoadInt32x4(&q4KShift)).And(archsimd.LoadInt32x4(&q4KMaskLo))
		packed := v.PermuteOrZero(archsimd.LoadInt8x16(&q4KPickHi)).AsInt32x4().ShiftAllRight(2).And(archsimd.LoadInt32x4(&q4KMaskHi)).Or(lo).AsInt8x16()
		m4 := archsimd.LoadUint8x32(&nibbleMask)
		sc := m4.AsInt8x32().SetLo(packed).SetHi(packed)
		yd := archsimd.LoadUint8x16((*[16]uint8)(y[0:16])).AsFloat32x4().Broadcast1To8()
		mins := sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q4KMinPairs)).AsInt16x16()
		minSum := mins.DotProductPairs(archsimd.LoadUint8x32((*[32]uint8)(y[260:292])).AsInt16x16())
		dmin := archsimd.LoadFloat32x4((*[4]float32)(f16Table[binary.LittleEndian.Uint16(x[2:4]):])).Broadcast1To8()
		accMin = yd.Mul(dmin).MulAdd(minSum.ConvertToFloat32(), accMin)

		bits := archsimd.LoadUint8x32((*[32]uint8)(x[16:48]))
		q := bits.And(m4).DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[4:36])).AsInt8x32())
		sum := q.DotProductPairs(sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[0])).AsInt16x16())
		q = bits.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4).DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[36:68])).AsInt8x32())
		sum = sum.Add(q.DotProductPairs(sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[1])).AsInt16x16()))

		bits = archsimd.LoadUint8x32((*[32]uint8)(x[48:80]))
		q = bits.And(m4).DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[68:100])).AsInt8x32())
		sum = sum.Add(q.DotProductPairs(sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[2])).AsInt16x16()))
		q = bits.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4).DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[100:132])).AsInt8x32())
		sum = sum.Add(q.DotProductPairs(sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[3])).AsInt16x16()))

		bits = archsimd.LoadUint8x32((*[32]uint8)(x[80:112]))
		q = bits.And(m4).DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[132:164])).AsInt8x32())
		sum = sum.Add(q.DotProductPairs(sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[4])).AsInt16x16()))
		q = bits.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4).DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[164:196])).AsInt8x32())
		sum = sum.Add(q.DotProductPairs(sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[5])).AsInt16x16()))

		bits = archsimd.LoadUint8x32((*[32]uint8)(x[112:144]))
		q = bits.And(m4).DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[196:228])).AsInt8x32())
		sum = sum.Add(q.DotProductPairs(sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[6])).AsInt16x16()))
		q = bits.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4).DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[228:260])).AsInt8x32())
		sum = sum.Add(q.DotProductPairs(sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[7])).AsInt16x16()))

		acc = yd.Mul(f16Lanes(x[0:2])).MulAdd(sum.ConvertToFloat32(), acc)
		if i++; i == nb {
			break
		}
		x, y = next(x), next(y)
	}
	return sumLanes(acc.Sub(accMin))
}

// dotQ5_KAVX2 is Q5_K × Q8_K: Q4_K's layout with the fifth bits in qh, bit 2c of qh[l] for
// value l of sub-block 2c, bit 2c+1 for sub-block 2c+1. Each is moved to bit 4 by a 16-bit
// shift (bits that cross into the neighbouring byte land outside bit 4) and masked.
func dotQ5_KAVX2(n int, w, a []byte) float32 {
	nb := n / qkK
	if nb == 0 {
		return 0
	}
	prefetchNext(w)
	x, y := (*[176]byte)(w[:nb*176]), (*[292]byte)(a[:nb*292])
	var acc, accMin archsimd.Float32x8
	for i := 0; ; {
		// Scales and mins as bytes [sc0..7, m0..7] in both 128-bit halves.
		v := archsimd.LoadUint8x16((*[16]uint8)(x[4:20])).AsInt8x16()
		lo := v.PermuteOrZero(archsimd.LoadInt8x16(&q4KPickLo)).AsInt32x4().ShiftRight(archsimd.LoadInt32x4(&q4KShift)).And(archsimd.LoadInt32x4(&q4KMaskLo))
		packed := v.PermuteOrZero(archsimd.LoadInt8x16(&q4KPickHi)).AsInt32x4().ShiftAllRight(2).And(archsimd.LoadInt32x4(&q4KMaskHi)).Or(lo).AsInt8x16()
		m4 := archsimd.LoadUint8x32(&nibbleMask)
		sc := m4.AsInt8x32().SetLo(packed).SetHi(packed)
		yd := archsimd.LoadUint8x16((*[16]uint8)(y[0:16])).AsFloat32x4().Broadcast1To8()
		mins := sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q4KMinPairs)).AsInt16x16()
		minSum := mins.DotProductPairs(archsimd.LoadUint8x32((*[32]uint8)(y[260:292])).AsInt16x16())
		dmin := archsimd.LoadFloat32x4((*[4]float32)(f16Table[binary.LittleEndian.Uint16(x[2:4]):])).Broadcast1To8()
		accMin = yd.Mul(dmin).MulAdd(minSum.ConvertToFloat32(), accMin)

		m5 := archsimd.LoadUint8x32(&bit4Mask)
		qh := archsimd.LoadUint8x32((*[32]uint8)(x[16:48])).AsInt16x16()
		bits := archsimd.LoadUint8x32((*[32]uint8)(x[48:80]))
		q := bits.And(m4).Or(qh.ShiftAllLeft(4).AsUint8x32().And(m5)).DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[4:36])).AsInt8x32())
		sum := q.DotProductPairs(sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[0])).AsInt16x16())
		q = bits.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4).Or(qh.ShiftAllLeft(3).AsUint8x32().And(m5)).DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[36:68])).AsInt8x32())
		sum = sum.Add(q.DotProductPairs(sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[1])).AsInt16x16()))

		bits = archsimd.LoadUint8x32((*[32]uint8)(x[80:112]))
		q = bits.And(m4).Or(qh.ShiftAllLeft(2).AsUint8x32().And(m5)).DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[68:100])).AsInt8x32())
		sum = sum.Add(q.DotProductPairs(sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[2])).AsInt16x16()))
		q = bits.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4).Or(qh.ShiftAllLeft(1).AsUint8x32().And(m5)).DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[100:132])).AsInt8x32())
		sum = sum.Add(q.DotProductPairs(sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[3])).AsInt16x16()))

		bits = archsimd.LoadUint8x32((*[32]uint8)(x[112:144]))
		q = bits.And(m4).Or(qh.AsUint8x32().And(m5)).DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[132:164])).AsInt8x32())
		sum = sum.Add(q.DotProductPairs(sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[4])).AsInt16x16()))
		q = bits.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4).Or(qh.ShiftAllRight(1).AsUint8x32().And(m5)).DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[164:196])).AsInt8x32())
		sum = sum.Add(q.DotProductPairs(sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[5])).AsInt16x16()))

		bits = archsimd.LoadUint8x32((*[32]uint8)(x[144:176]))
		q = bits.And(m4).Or(qh.ShiftAllRight(2).AsUint8x32().And(m5)).DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[196:228])).AsInt8x32())
		sum = sum.Add(q.DotProductPairs(sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[6])).AsInt16x16()))
		q = bits.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4).Or(qh.ShiftAllRight(3).AsUint8x32().And(m5)).DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[228:260])).AsInt8x32())
		sum = sum.Add(q.DotProductPairs(sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadByte[7])).AsInt16x16()))

		acc = yd.Mul(f16Lanes(x[0:2])).MulAdd(sum.ConvertToFloat32(), acc)
		if i++; i == nb {
			break
		}
		x, y = next(x), next(y)
	}
	return sumLanes(acc.Sub(accMin))
}

var (
	// q6KHalf[h] copies scale bytes 8h..8h+7 to both 64-bit halves of a 128-bit vector.
	q6KHalf = [2][16]int8{
		{0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7},
		{8, 9, 10, 11, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15},
	}
	// q6KSpread[j] picks, from a half's eight scales as words in each 128-bit half, scale
	// 2j for the first 128 bits and 2j+1 for the second: the scales of quants 32j..32j+15
	// and 32j+16..32j+31.
	q6KSpread = func() (idx [4][32]int8) {
		for j := range idx {
			for l := 0; l < 16; l += 2 {
				idx[j][l], idx[j][l+1] = int8(4*j), int8(4*j+1)
				idx[j][16+l], idx[j][17+l] = int8(4*j+2), int8(4*j+3)
			}
		}
		return idx
	}()
	bits45Mask = [32]uint8{0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30,
		0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30}
)

// q2KScaleShuffle[k] makes VPSHUFB give the values of shift k (32 of a half, two 16-value
// sub-blocks) their scale words: word 2k in the lower 128 bits, 2k+1 in the upper, from
// the half's eight scales as words in both (ggml's get_scale_shuffle_q3k).
var q2KScaleShuffle = func() (idx [4][32]int8) {
	for k := range idx {
		for b := 0; b < 16; b += 2 {
			idx[k][b], idx[k][b+1] = int8(4*k), int8(4*k+1)
			idx[k][16+b], idx[k][17+b] = int8(4*k+2), int8(4*k+3)
		}
	}
	return idx
}()

var threes = [32]uint8{3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3,
	3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3}

// dotQ2_KAVX2 is Q2_K × Q8_K as ggml's AVX2 kernel: the mins (high nibbles of the 16 scale
// bytes) against the bsums by VPMADDWD, accumulated with -y.d·dmin; the 2-bit codes of a
// 128-value half (32 bytes, four shifts) by VPMADDUBSW, each pair sum times its sub-block
// scale (low nibbles) by VPMADDWD, accumulated with y.d·d. Q2_K is the experts' type of the
// low-bit DeepSeek files that fit a 256 GB machine.
func dotQ2_KAVX2(n int, w, a []byte) float32 {
	nb := n / qkK
	if nb == 0 {
		return 0
	}
	prefetchNext(w)
	x, y := (*[84]byte)(w[:nb*84]), (*[292]byte)(a[:nb*292])
	var acc archsimd.Float32x8
	for i := 0; ; {
		m4 := archsimd.LoadUint8x32(&nibbleMask).GetLo()
		ms := archsimd.LoadUint8x16((*[16]uint8)(x[0:16]))
		mins := ms.AsInt16x8().ShiftAllRight(4).AsUint8x16().And(m4).AsInt8x16().ExtendToInt16()
		prod := mins.DotProductPairs(archsimd.LoadUint8x32((*[32]uint8)(y[260:292])).AsInt16x16())
		negYD := f32Lanes(y[0:16]).AsUint32x8().Xor(archsimd.BroadcastUint32x8(0x80000000)).AsFloat32x8()
		acc = negYD.Mul(f16Lanes(x[82:84])).MulAdd(prod.ConvertToFloat32(), acc)

		all := ms.And(m4).AsInt8x16().ExtendToInt16().AsInt8x32()
		m3 := archsimd.LoadUint8x32(&threes)
		sumi := q2KHalf(all.Select128FromPair(0, 0, all), (*[32]byte)(x[16:48]), (*[128]byte)(y[4:132]), m3)
		sumi = sumi.Add(q2KHalf(all.Select128FromPair(1, 1, all), (*[32]byte)(x[48:80]), (*[128]byte)(y[132:260]), m3))
		acc = f32Lanes(y[0:16]).Mul(f16Lanes(x[80:82])).MulAdd(sumi.ConvertToFloat32(), acc)
		if i++; i == nb {
			break
		}
		x, y = next(x), next(y)
	}
	return sumLanes(acc)
}

// q2KHalf is a Q2_K half's integer lanes: its 32 bytes of codes at the four shifts against
// its 128 activations, each pair sum times its sub-block's scale word from sc. (Unrolled,
// with constant shifts: a loop over the shifts compiled to far slower code.)
func q2KHalf(sc archsimd.Int8x32, bits *[32]byte, y *[128]byte, m3 archsimd.Uint8x32) archsimd.Int32x8 {
	b := archsimd.LoadUint8x32((*[32]uint8)(bits)).AsInt16x16()
	mul := func(q archsimd.Uint8x32, y []byte, k int) archsimd.Int32x8 {
		return q.And(m3).DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y)).AsInt8x32()).
			DotProductPairs(sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q2KScaleShuffle[k])).AsInt16x16())
	}
	p0 := mul(b.AsUint8x32(), y[0:32], 0)
	p1 := mul(b.ShiftAllRight(2).AsUint8x32(), y[32:64], 1)
	p2 := mul(b.ShiftAllRight(4).AsUint8x32(), y[64:96], 2)
	p3 := mul(b.ShiftAllRight(6).AsUint8x32(), y[96:128], 3)
	return p0.Add(p1).Add(p2.Add(p3))
}

// dotQ3_KAVX2 is Q3_K × Q8_K as ggml's AVX2 kernel: the 16 six-bit scales unpacked (less 32)
// to words, each half's 2-bit codes at four shifts by VPMADDUBSW less 4 times the
// activations where the code's hmask bit is clear (a second VPMADDUBSW), each pair sum
// times its sub-block scale as for Q2_K, accumulated with y.d·d.
func dotQ3_KAVX2(n int, w, a []byte) float32 {
	nb := n / qkK
	if nb == 0 {
		return 0
	}
	prefetchNext(w)
	x, y := (*[110]byte)(w[:nb*110]), (*[292]byte)(a[:nb*292])
	var acc archsimd.Float32x8
	for i := 0; ; {
		const low, top = 0x0F0F0F0F, 0x03030303
		a0, a1, a2 := binary.LittleEndian.Uint32(x[96:]), binary.LittleEndian.Uint32(x[100:]), binary.LittleEndian.Uint32(x[104:])
		packed := [4]uint32{a0&low | (a2&top)<<4, a1&low | (a2>>2&top)<<4, a0>>4&low | (a2>>4&top)<<4, a1>>4&low | (a2>>6&top)<<4}
		all := archsimd.LoadUint32x4(&packed).AsInt8x16().Sub(archsimd.LoadInt8x16(&thirtyTwos)).ExtendToInt16().AsInt8x32()
		// 1 where a code's high bit is clear, per hmask bit.
		clear := archsimd.LoadUint8x32((*[32]uint8)(x[0:32])).Xor(archsimd.BroadcastUint8x32(0xFF)).AsInt16x16()
		m3 := archsimd.LoadUint8x32(&threes)
		sumi := q3KHalf(all.Select128FromPair(0, 0, all), (*[32]byte)(x[32:64]), clear, (*[128]byte)(y[4:132]), m3)
		sumi = sumi.Add(q3KHalf(all.Select128FromPair(1, 1, all), (*[32]byte)(x[64:96]), clear.ShiftAllRight(4), (*[128]byte)(y[132:260]), m3))
		acc = f32Lanes(y[0:16]).Mul(f16Lanes(x[108:110])).MulAdd(sumi.ConvertToFloat32(), acc)
		if i++; i == nb {
			break
		}
		x, y = next(x), next(y)
	}
	return sumLanes(acc)
}

// q3KHalf is a Q3_K half's integer lanes (see q2KHalf): clear holds, at bits 0-3 of each
// byte, whether the high bit of the codes at shifts 0-3 is clear.
func q3KHalf(sc archsimd.Int8x32, bits *[32]byte, clear archsimd.Int16x16, y *[128]byte, m3 archsimd.Uint8x32) archsimd.Int32x8 {
	b := archsimd.LoadUint8x32((*[32]uint8)(bits)).AsInt16x16()
	one := archsimd.LoadUint8x32(&onesU8)
	mul := func(q archsimd.Uint8x32, c archsimd.Int16x16, y []byte, k int) archsimd.Int32x8 {
		yv := archsimd.LoadUint8x32((*[32]uint8)(y)).AsInt8x32()
		fours := c.AsUint8x32().And(one).AsUint16x16().ShiftAllLeft(2).AsUint8x32()
		return q.And(m3).DotProductPairsSaturated(yv).Sub(fours.DotProductPairsSaturated(yv)).
			DotProductPairs(sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q2KScaleShuffle[k])).AsInt16x16())
	}
	p0 := mul(b.AsUint8x32(), clear, y[0:32], 0)
	p1 := mul(b.ShiftAllRight(2).AsUint8x32(), clear.ShiftAllRight(1), y[32:64], 1)
	p2 := mul(b.ShiftAllRight(4).AsUint8x32(), clear.ShiftAllRight(2), y[64:96], 2)
	p3 := mul(b.ShiftAllRight(6).AsUint8x32(), clear.ShiftAllRight(3), y[96:128], 3)
	return p0.Add(p1).Add(p2.Add(p3))
}

// dotQ6_KAVX2 is Q6_K × Q8_K. The 6-bit codes q are stored offset by 32; the kernel
// multiplies the codes as they are (unsigned, as VPMADDUBSW wants) and subtracts
// 32·Σ scale·bsum once per super-block, which the bsums of Q8_K make one VPMADDWD.
// Half h: code l of 32 has its low bits in ql[64h+l] (values l, l+64) or ql[64h+32+l]
// (values l+32, l+96), low nibble first, and its top bits in qh[32h+l] at bits 0, 2, 4, 6
// for values l, l+32, l+64, l+96; scale s = 8h + value/16.
func dotQ6_KAVX2(n int, w, a []byte) float32 {
	nb := n / qkK
	if nb == 0 {
		return 0
	}
	prefetchNext(w)
	x, y := (*[210]byte)(w[:nb*210]), (*[292]byte)(a[:nb*292])
	var acc archsimd.Float32x8
	for i := 0; ; {
		m4 := archsimd.LoadUint8x32(&nibbleMask)
		m6 := archsimd.LoadUint8x32(&bits45Mask)
		scales := archsimd.LoadUint8x16((*[16]uint8)(x[192:208])).AsInt8x16()
		// The offset: Σ_g scale_g·bsum_g, the 16 scales as words against the 16 bsums.
		offset := scales.ExtendToInt16().DotProductPairs(archsimd.LoadUint8x32((*[32]uint8)(y[260:292])).AsInt16x16())

		sc := scales.PermuteOrZero(archsimd.LoadInt8x16(&q6KHalf[0])).ExtendToInt16().AsInt8x32()
		ql0, ql1 := archsimd.LoadUint8x32((*[32]uint8)(x[0:32])), archsimd.LoadUint8x32((*[32]uint8)(x[32:64]))
		qh := archsimd.LoadUint8x32((*[32]uint8)(x[128:160])).AsInt16x16()
		q := ql0.And(m4).Or(qh.ShiftAllLeft(4).AsUint8x32().And(m6)).DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[4:36])).AsInt8x32())
		sum := q.DotProductPairs(sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q6KSpread[0])).AsInt16x16())
		q = ql1.And(m4).Or(qh.ShiftAllLeft(2).AsUint8x32().And(m6)).DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[36:68])).AsInt8x32())
		sum = sum.Add(q.DotProductPairs(sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q6KSpread[1])).AsInt16x16()))
		q = ql0.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4).Or(qh.AsUint8x32().And(m6)).DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[68:100])).AsInt8x32())
		sum = sum.Add(q.DotProductPairs(sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q6KSpread[2])).AsInt16x16()))
		q = ql1.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4).Or(qh.ShiftAllRight(2).AsUint8x32().And(m6)).DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[100:132])).AsInt8x32())
		sum = sum.Add(q.DotProductPairs(sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q6KSpread[3])).AsInt16x16()))

		sc = scales.PermuteOrZero(archsimd.LoadInt8x16(&q6KHalf[1])).ExtendToInt16().AsInt8x32()
		ql0, ql1 = archsimd.LoadUint8x32((*[32]uint8)(x[64:96])), archsimd.LoadUint8x32((*[32]uint8)(x[96:128]))
		qh = archsimd.LoadUint8x32((*[32]uint8)(x[160:192])).AsInt16x16()
		q = ql0.And(m4).Or(qh.ShiftAllLeft(4).AsUint8x32().And(m6)).DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[132:164])).AsInt8x32())
		sum = sum.Add(q.DotProductPairs(sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q6KSpread[0])).AsInt16x16()))
		q = ql1.And(m4).Or(qh.ShiftAllLeft(2).AsUint8x32().And(m6)).DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[164:196])).AsInt8x32())
		sum = sum.Add(q.DotProductPairs(sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q6KSpread[1])).AsInt16x16()))
		q = ql0.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4).Or(qh.AsUint8x32().And(m6)).DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[196:228])).AsInt8x32())
		sum = sum.Add(q.DotProductPairs(sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q6KSpread[2])).AsInt16x16()))
		q = ql1.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4).Or(qh.ShiftAllRight(2).AsUint8x32().And(m6)).DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[228:260])).AsInt8x32())
		sum = sum.Add(q.DotProductPairs(sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q6KSpread[3])).AsInt16x16()))

		// The offset comes off lane by lane in another arrangement of the values than the
		// products' (it is right only in total), and each lane is converted and accumulated
		// on its own: ggml_vec_dot_q6_K_q8_K's AVX2 steps, so its bits.
		sum = sum.Sub(offset.ShiftAllLeft(5))
		acc = f32Lanes(y[0:16]).Mul(f16Lanes(x[208:210])).MulAdd(sum.ConvertToFloat32(), acc)
		if i++; i == nb {
			break
		}
		x, y = next(x), next(y)
	}
	return sumLanes(acc)
}

// iq4Levels is the IQ4 level table in both 128-bit halves, for VPSHUFB lookups.
var iq4Levels = func() (t [32]int8) {
	copy(t[:16], iq4Values[:])
	copy(t[16:], iq4Values[:])
	return t
}()

var thirtyTwos = [16]int8{32, 32, 32, 32, 32, 32, 32, 32, 32, 32, 32, 32, 32, 32, 32, 32}

// dotIQ4_XSAVX2 is IQ4_XS × Q8_K. A 32-byte load holds sub-blocks 2k and 2k+1 (16 bytes
// each, values j and j+16 in the low and high nibble of byte j); the nibbles are looked up
// in the level table, then the 128-bit halves are regrouped so that each vector is one
// sub-block in value order. The levels are signed, so their signs move onto the
// activations (as in dotQ8_0AVX2).
func dotIQ4_XSAVX2(n int, w, a []byte) float32 {
	nb := n / qkK
	if nb == 0 {
		return 0
	}
	prefetchNext(w)
	x, y := (*[136]byte)(w[:nb*136]), (*[292]byte)(a[:nb*292])
	var acc archsimd.Float32x8
	for i := 0; ; {
		// The eight 6-bit scales: low 4 bits from the nibbles of scales_l (x[4:8]), top 2
		// bits from the bit pairs of scales_h (x[2:4]), spread to one byte each.
		lo := uint64(x[4]) | uint64(x[5])<<16 | uint64(x[6])<<32 | uint64(x[7])<<48
		lo = (lo | lo<<4) & 0x0F0F0F0F0F0F0F0F
		hi := uint64(x[2]) | uint64(x[3])<<32
		hi = (hi | hi<<12) & 0x000F000F000F000F
		hi = (hi | hi<<6) & 0x0303030303030303
		// Minus 32, as signed words in both 128-bit halves.
		sc := archsimd.BroadcastUint64x2(lo | hi<<4).AsInt8x16().Sub(archsimd.LoadInt8x16(&thirtyTwos)).ExtendToInt16().AsInt8x32()
		levels := archsimd.LoadInt8x32(&iq4Levels)
		m4 := archsimd.LoadUint8x32(&nibbleMask)

		bits := archsimd.LoadUint8x32((*[32]uint8)(x[8:40]))
		l0 := levels.PermuteOrZeroGrouped(bits.And(m4).AsInt8x32())
		l1 := levels.PermuteOrZeroGrouped(bits.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4).AsInt8x32())
		v := l0.Select128FromPair(0, 2, l1)
		q := v.Abs().AsUint8x32().DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[4:36])).AsInt8x32().CopySign(v))
		sum := q.DotProductPairs(sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadWord[0])).AsInt16x16())
		v = l0.Select128FromPair(1, 3, l1)
		q = v.Abs().AsUint8x32().DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[36:68])).AsInt8x32().CopySign(v))
		sum = sum.Add(q.DotProductPairs(sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadWord[1])).AsInt16x16()))

		bits = archsimd.LoadUint8x32((*[32]uint8)(x[40:72]))
		l0 = levels.PermuteOrZeroGrouped(bits.And(m4).AsInt8x32())
		l1 = levels.PermuteOrZeroGrouped(bits.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4).AsInt8x32())
		v = l0.Select128FromPair(0, 2, l1)
		q = v.Abs().AsUint8x32().DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[68:100])).AsInt8x32().CopySign(v))
		sum = sum.Add(q.DotProductPairs(sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadWord[2])).AsInt16x16()))
		v = l0.Select128FromPair(1, 3, l1)
		q = v.Abs().AsUint8x32().DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[100:132])).AsInt8x32().CopySign(v))
		sum = sum.Add(q.DotProductPairs(sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadWord[3])).AsInt16x16()))

		bits = archsimd.LoadUint8x32((*[32]uint8)(x[72:104]))
		l0 = levels.PermuteOrZeroGrouped(bits.And(m4).AsInt8x32())
		l1 = levels.PermuteOrZeroGrouped(bits.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4).AsInt8x32())
		v = l0.Select128FromPair(0, 2, l1)
		q = v.Abs().AsUint8x32().DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[132:164])).AsInt8x32().CopySign(v))
		sum = sum.Add(q.DotProductPairs(sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadWord[4])).AsInt16x16()))
		v = l0.Select128FromPair(1, 3, l1)
		q = v.Abs().AsUint8x32().DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[164:196])).AsInt8x32().CopySign(v))
		sum = sum.Add(q.DotProductPairs(sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadWord[5])).AsInt16x16()))

		bits = archsimd.LoadUint8x32((*[32]uint8)(x[104:136]))
		l0 = levels.PermuteOrZeroGrouped(bits.And(m4).AsInt8x32())
		l1 = levels.PermuteOrZeroGrouped(bits.AsInt16x16().ShiftAllRight(4).AsUint8x32().And(m4).AsInt8x32())
		v = l0.Select128FromPair(0, 2, l1)
		q = v.Abs().AsUint8x32().DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[196:228])).AsInt8x32().CopySign(v))
		sum = sum.Add(q.DotProductPairs(sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadWord[6])).AsInt16x16()))
		v = l0.Select128FromPair(1, 3, l1)
		q = v.Abs().AsUint8x32().DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[228:260])).AsInt8x32().CopySign(v))
		sum = sum.Add(q.DotProductPairs(sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&spreadWord[7])).AsInt16x16()))

		acc = f32Lanes(y[0:16]).Mul(f16Lanes(x[0:2])).MulAdd(sum.ConvertToFloat32(), acc)
		if i++; i == nb {
			break
		}
		x, y = next(x), next(y)
	}
	return sumLanes(acc)
}
