//go:build goexperiment.simd && amd64

package tensor

import "simd/archsimd"

// Vector dot products of the 32-value block formats with Q8_0 activations (34 bytes: d
// f16, 32 int8 quants). Each block's integer sum is exact (eight int32 lanes) and is
// accumulated, converted to float, by one FMA with the block's d_w·d_y: the order of
// ggml's AVX2 kernels, not of its generic ones (which add one float per block).

var (
	eights = [32]uint8{8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8,
		8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8}
	twelves = [32]uint8{12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12,
		12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12}
	sixteens = [32]uint8{16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16,
		16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16}
	// q5HighByte and q5HighBit pick Q5_0's fifth bit of value i (bit i of qh, broadcast to
	// every 32-bit lane) into byte i of a 256-bit vector: byte i/8 of each 128-bit lane's
	// copy of qh (values 0-15 take bytes 0-1, values 16-31 bytes 2-3), then bit i mod 8.
	q5HighByte = func() (t [32]int8) {
		for i := range t {
			t[i] = int8(i / 8)
		}
		return t
	}()
	q5HighBit = func() (t [32]uint8) {
		for i := range t {
			t[i] = 1 << (i % 8)
		}
		return t
	}()
	onesU8 = [32]uint8{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
		1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}
	// fp4Shifted is the doubled E2M1 value of each nibble plus 12 (0..24, so unsigned for
	// VPMADDUBSW), in both 128-bit halves.
	fp4Shifted = func() (t [32]int8) {
		for i, v := range fp4Values {
			t[i], t[16+i] = v+12, v+12
		}
		return t
	}()
)

// dotQ8_0AVX2 is Q8_0 × Q8_0. VPMADDUBSW takes one unsigned operand, so the weights' signs
// move onto the activations: |w|·(sign(w)·y). That is exact for every weight byte (|-128|
// is the unsigned 128) and every activation but -128 against a negative weight, whose
// product would need sign(w)·y = +128, which VPSIGNB cannot give. Activations come from
// the quantizer, which stays within ±127; ggml's x86 kernels rely on the same.
func dotQ8_0AVX2(n int, w, a []byte) float32 {
	nb := n / qk32
	if nb == 0 {
		return 0
	}
	prefetchNext(w)
	x, y := (*[34]byte)(w[:nb*34]), (*[34]byte)(a[:nb*34])
	var acc archsimd.Float32x8
	for i := 0; ; {
		qx := archsimd.LoadUint8x32((*[32]uint8)(x[2:34])).AsInt8x32()
		qy := archsimd.LoadUint8x32((*[32]uint8)(y[2:34])).AsInt8x32()
		p := qx.Abs().AsUint8x32().DotProductPairsSaturated(qy.CopySign(qx)).DotProductPairs(archsimd.LoadInt16x16(&ones16))
		acc = f16Lanes(x[0:2]).Mul(f16Lanes(y[0:2])).MulAdd(p.ConvertToFloat32(), acc)
		if i++; i == nb {
			break
		}
		x, y = next(x), next(y)
	}
	return sumLanes(acc)
}

// dotQ4_0AVX2 is Q4_0 × Q8_0: Σ(q-8)·y as Σq·y - 8·Σy, both by VPMADDUBSW on the unsigned
// nibbles (exact for any activation byte). The 16 bytes of nibbles become 32 values: the
// low nibbles (values 0-15) in the first 128 bits, the high nibbles (16-31) in the second.
func dotQ4_0AVX2(n int, w, a []byte) float32 {
	nb := n / qk32
	if nb == 0 {
		return 0
	}
	prefetchNext(w)
	x, y := (*[18]byte)(w[:nb*18]), (*[34]byte)(a[:nb*34])
	var acc archsimd.Float32x8
	for i := 0; ; {
		q := nibbles32(x[2:18])
		qy := archsimd.LoadUint8x32((*[32]uint8)(y[2:34])).AsInt8x32()
		p := q.DotProductPairsSaturated(qy).Sub(archsimd.LoadUint8x32(&eights).DotProductPairsSaturated(qy))
		p32 := p.DotProductPairs(archsimd.LoadInt16x16(&ones16))
		acc = f16Lanes(x[0:2]).Mul(f16Lanes(y[0:2])).MulAdd(p32.ConvertToFloat32(), acc)
		if i++; i == nb {
			break
		}
		x, y = next(x), next(y)
	}
	return sumLanes(acc)
}

// dotQ5_0AVX2 is Q5_0 × Q8_0 as dotQ4_0AVX2, each value's fifth bit (qh) added as 16 to its
// nibble and 16·Σy taken off: Σ(q-16)·y, the integers ggml's AVX2 kernel gets by its sign
// trick on q-16.
func dotQ5_0AVX2(n int, w, a []byte) float32 {
	nb := n / qk32
	if nb == 0 {
		return 0
	}
	prefetchNext(w)
	x, y := (*[22]byte)(w[:nb*22]), (*[34]byte)(a[:nb*34])
	var acc archsimd.Float32x8
	for i := 0; ; {
		q := nibbles32(x[6:22])
		q = q.Or(fifthBits((*[4]byte)(x[2:6])))
		qy := archsimd.LoadUint8x32((*[32]uint8)(y[2:34])).AsInt8x32()
		p := q.DotProductPairsSaturated(qy).Sub(archsimd.LoadUint8x32(&sixteens).DotProductPairsSaturated(qy))
		p32 := p.DotProductPairs(archsimd.LoadInt16x16(&ones16))
		acc = f16Lanes(x[0:2]).Mul(f16Lanes(y[0:2])).MulAdd(p32.ConvertToFloat32(), acc)
		if i++; i == nb {
			break
		}
		x, y = next(x), next(y)
	}
	return sumLanes(acc)
}

// nibbles32 spreads the 16 bytes of a 32-value block's nibbles (value j low in byte j,
// j+16 high) to one byte per value in value order: values 0-15 in the lower 128 bits,
// 16-31 in the upper.
func nibbles32(qs []byte) archsimd.Uint8x32 {
	m4 := archsimd.LoadUint8x32(&nibbleMask)
	q := archsimd.LoadUint8x16((*[16]uint8)(qs))
	return m4.SetLo(q).SetHi(q.AsInt16x8().ShiftAllRight(4).AsUint8x16()).And(m4)
}

// fifthBits is 16 in byte i where bit i of a Q5 block's qh is set, else 0.
func fifthBits(qh *[4]byte) archsimd.Uint8x32 {
	v := archsimd.BroadcastUint32x8(uint32(qh[0]) | uint32(qh[1])<<8 | uint32(qh[2])<<16 | uint32(qh[3])<<24).AsUint8x32()
	bit := v.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&q5HighByte)).And(archsimd.LoadUint8x32(&q5HighBit))
	// 0 or 1 per byte, times 16 by a word shift (no carry leaves its byte).
	return bit.Min(archsimd.LoadUint8x32(&onesU8)).AsUint16x16().ShiftAllLeft(4).AsUint8x32()
}

// dotQ4_1AVX2 and dotQ5_1AVX2 are Q4_1 and Q5_1 × Q8_1 (dotMinAVX2).
func dotQ4_1AVX2(n int, w, a []byte) float32 { return dotMinAVX2(n, w, a, &formatQ4_1) }
func dotQ5_1AVX2(n int, w, a []byte) float32 { return dotMinAVX2(n, w, a, &formatQ5_1) }

// dotMinAVX2 is a format with a min (value d·q + m, q unsigned: Q4_1, or Q5_1 with its
// fifth bits) against Q8_1 activations as ggml's AVX2 kernels take it: Σq·y by VPMADDUBSW
// into eight exact lanes, accumulated by an FMA with d_x·d_y per block, and the mins'
// part m·s (s the activations' d·Σy) summed apart, one float per block, then added.
func dotMinAVX2(n int, w, a []byte, f *legacyFormat) float32 {
	nb := n / qk32
	if nb == 0 {
		return 0
	}
	prefetchNext(w)
	// The mins' sum runs in the vector unit too (every lane the same sum): scalar float code
	// between the vector instructions would pay the AVX-SSE transition each time.
	var acc, mins archsimd.Float32x8
	for i := range nb {
		x, y := w[i*f.blockBytes:][:f.blockBytes], (*[36]byte)(a[i*36:][:36])
		mins = mins.Add(f16Lanes(x[2:4]).Mul(f16Lanes(y[2:4])))
		q := nibbles32(x[f.qsOff : f.qsOff+16])
		if f.qhOff != 0 {
			q = q.Or(fifthBits((*[4]byte)(x[f.qhOff : f.qhOff+4])))
		}
		p32 := q.DotProductPairsSaturated(archsimd.LoadUint8x32((*[32]uint8)(y[4:36])).AsInt8x32()).DotProductPairs(archsimd.LoadInt16x16(&ones16))
		acc = p32.ConvertToFloat32().MulAdd(f16Lanes(x[0:2]).Mul(f16Lanes(y[0:2])), acc)
	}
	var m [8]float32
	mins.Store(&m)
	return sumLanes(acc) + m[0]
}

// dotIQ4_NLAVX2 is IQ4_NL × Q8_0: the nibbles (laid out as Q4_0's) index the signed
// non-linear levels by VPSHUFB, whose signs move onto the activations (as in dotIQ4_XSAVX2),
// and each block's exact lanes are accumulated as Q4_0's are. IQ4_NL is llama-quantize's
// fallback for IQ4_XS, Q2_K and Q3_K tensors whose rows do not fit a 256-value block
// (DeepSeek's attn_k_b).
func dotIQ4_NLAVX2(n int, w, a []byte) float32 {
	nb := n / qk32
	if nb == 0 {
		return 0
	}
	prefetchNext(w)
	x, y := (*[18]byte)(w[:nb*18]), (*[34]byte)(a[:nb*34])
	var acc archsimd.Float32x8
	for i := 0; ; {
		idx := nibbles32(x[2:18])
		v := archsimd.LoadInt8x32(&iq4Levels).PermuteOrZeroGrouped(idx.AsInt8x32())
		qy := archsimd.LoadUint8x32((*[32]uint8)(y[2:34])).AsInt8x32()
		p32 := v.Abs().AsUint8x32().DotProductPairsSaturated(qy.CopySign(v)).DotProductPairs(archsimd.LoadInt16x16(&ones16))
		acc = f16Lanes(x[0:2]).Mul(f16Lanes(y[0:2])).MulAdd(p32.ConvertToFloat32(), acc)
		if i++; i == nb {
			break
		}
		x, y = next(x), next(y)
	}
	return sumLanes(acc)
}

// dotMXFP4AVX2 is MXFP4 × Q8_0: the nibbles (laid out as Q4_0's) index the doubled E2M1
// values by VPSHUFB, shifted by 12 to be unsigned, and 12·Σy is taken off again; the scale
// is the f16 d of the activations times half the E8M0 scale of the block.
func dotMXFP4AVX2(n int, w, a []byte) float32 {
	nb := n / qk32
	if nb == 0 {
		return 0
	}
	prefetchNext(w)
	x, y := (*[17]byte)(w[:nb*17]), (*[34]byte)(a[:nb*34])
	var acc archsimd.Float32x8
	for i := 0; ; {
		idx := nibbles32(x[1:17])
		q := archsimd.LoadInt8x32(&fp4Shifted).PermuteOrZeroGrouped(idx.AsInt8x32()).AsUint8x32()
		qy := archsimd.LoadUint8x32((*[32]uint8)(y[2:34])).AsInt8x32()
		p := q.DotProductPairsSaturated(qy).Sub(archsimd.LoadUint8x32(&twelves).DotProductPairsSaturated(qy))
		p32 := p.DotProductPairs(archsimd.LoadInt16x16(&ones16))
		e := archsimd.LoadFloat32x4((*[4]float32)(e8m0Table[x[0]:])).Broadcast1To8()
		acc = f16Lanes(y[0:2]).Mul(e).MulAdd(p32.ConvertToFloat32(), acc)
		if i++; i == nb {
			break
		}
		x, y = next(x), next(y)
	}
	return sumLanes(acc)
}
