package tensor

// The K-quants (Q2_K … Q6_K) store 256 values as 16 groups of 16 (or 8 of 32) small
// integers, each group with its own integer scale (and for Q2_K, Q4_K, Q5_K an integer
// min), under a super-block scale d (and dmin). Each format differs only in how the bits are
// packed, so each one unpacks its block into a kBlock and decoding and dot products are
// shared. Value k of a block is (d·scale[k/16])·q[k] - dmin·min[k/16], evaluated in that
// order as ggml's dequantize_row_q*_K do.

// kBlock is one unpacked K-quant super-block. Formats with groups of 32 repeat each group's
// scale and min for its two halves.
type kBlock struct {
	d, dmin float32
	scale   [16]int8
	min     [16]uint8
	q       [qkK]int8
}

// kFormat describes one K-quant format for the shared decoder and dot product.
type kFormat struct {
	blockBytes int
	unpack     func(b []byte) kBlock
	// dot is the float accumulation ggml's generic kernel for the format uses.
	dot kDotStyle
}

type kDotStyle int

const (
	// kDotQ2 (Q2_K): one integer sum per super-block, scaled once: d·isum - dmin·Σ bsum·min.
	kDotQ2 kDotStyle = iota
	// kDotLanes (Q3_K, Q6_K): eight integer lanes (value k in lane k%8), each scaled and
	// summed in float per super-block, the lanes added together at the end.
	kDotLanes
	// kDotLanesMin (Q4_K, Q5_K): kDotLanes, and the mins subtracted per super-block.
	kDotLanesMin
)

var (
	formatQ2_K = kFormat{84, unpackQ2_K, kDotQ2}
	formatQ3_K = kFormat{110, unpackQ3_K, kDotLanes}
	formatQ4_K = kFormat{144, unpackQ4_K, kDotLanesMin}
	formatQ5_K = kFormat{176, unpackQ5_K, kDotLanesMin}
	formatQ6_K = kFormat{210, unpackQ6_K, kDotLanes}
)

func init() {
	for _, f := range []struct {
		t      Type
		format *kFormat
		encode func([]float32, []byte)
	}{
		{Q2_K, &formatQ2_K, encodeQ2_K},
		{Q3_K, &formatQ3_K, encodeQ3_K},
		{Q4_K, &formatQ4_K, encodeQ4_K},
		{Q5_K, &formatQ5_K, encodeQ5_K},
		{Q6_K, &formatQ6_K, encodeQ6_K},
	} {
		format := f.format
		traits[f.t] = &Traits{
			ToFloat:    func(src []byte, dst []float32) { format.decode(src, dst) },
			FromFloat:  f.encode,
			VecDotType: Q8_K,
			VecDot:     func(n int, w, a []byte) float32 { return format.vecDot(n, w, a) },
		}
	}
}

func (f *kFormat) decode(src []byte, dst []float32) {
	for i := range len(dst) / qkK {
		k := f.unpack(src[i*f.blockBytes:][:f.blockBytes])
		y := dst[i*qkK:][:qkK]
		for g := range 16 {
			dl := k.d * float32(k.scale[g])
			ml := float32(k.dmin * float32(k.min[g]))
			for j, q := range k.q[16*g : 16*g+16] {
				y[16*g+j] = float32(dl*float32(q)) - ml
			}
		}
	}
}

// vecDot is ggml_vec_dot_q{2,3,4,5,6}_K_q8_K_generic.
func (f *kFormat) vecDot(n int, w, a []byte) float32 {
	var sumf float32
	var sums [8]float32
	for i := range n / qkK {
		k := f.unpack(w[i*f.blockBytes:][:f.blockBytes])
		y := blockQ8K(a, i)
		var lanes [8]int32
		minSum := 0
		qy := y.quants()
		for g := range 16 {
			scale := int32(k.scale[g])
			qa, qb := k.q[16*g:16*g+16], qy[16*g:16*g+16]
			for j := range 8 {
				lanes[j] += scale * (int32(qa[j])*int32(int8(qb[j])) + int32(qa[j+8])*int32(int8(qb[j+8])))
			}
			if f.dot != kDotLanes {
				minSum += y.bsum(g) * int(k.min[g])
			}
		}
		switch f.dot {
		case kDotQ2:
			var isum int32
			for _, l := range lanes {
				isum += l
			}
			dall, dmin := y.d()*k.d, y.d()*k.dmin
			sumf += float32(dall*float32(isum)) - float32(dmin*float32(minSum))
		case kDotLanesMin:
			sumf -= float32(k.dmin * y.d() * float32(minSum))
			fallthrough
		case kDotLanes:
			d := k.d * y.d()
			for l, v := range lanes {
				sums[l] += float32(d * float32(v))
			}
		}
	}
	for _, s := range sums {
		sumf += s
	}
	return sumf
}

// unpackTwoBits reads the 2-bit layout of Q2_K, Q3_K and TQ2_0: byte l of each 32-byte
// half of qs holds values l, l+32, l+64, l+96 of its 128 at bit pairs 0, 2, 4, 6.
func unpackTwoBits(qs []byte, out *[qkK]int8) {
	for h := range 2 {
		q := out[128*h : 128*h+128]
		for l, v := range qs[32*h : 32*h+32] {
			q[l], q[l+32], q[l+64], q[l+96] = int8(v&3), int8(v>>2&3), int8(v>>4&3), int8(v>>6)
		}
	}
}

// addMaskBits adds delta to each value e whose bit e/32 of mask[e%32] is set (bitSet) or
// clear: the extra bit of Q3_K (clear: -4) and Q5_K (set: +16).
func addMaskBits(mask []byte, bitSet bool, delta int8, k *kBlock) {
	flip := uint8(1) // turns "bit clear" into 1, so the add needs no branch
	if bitSet {
		flip = 0
	}
	q := &k.q
	for l, m := range mask[:32] {
		m ^= -flip // complement every bit when counting clear bits
		q[l] += int8(m&1) * delta
		q[32+l] += int8(m>>1&1) * delta
		q[64+l] += int8(m>>2&1) * delta
		q[96+l] += int8(m>>3&1) * delta
		q[128+l] += int8(m>>4&1) * delta
		q[160+l] += int8(m>>5&1) * delta
		q[192+l] += int8(m>>6&1) * delta
		q[224+l] += int8(m>>7) * delta
	}
}

func unpackQ2_K(b []byte) (k kBlock) {
	k.d, k.dmin = halfAt(b, 80), halfAt(b, 82)
	for g, sc := range b[0:16] {
		k.scale[g], k.min[g] = int8(sc&15), sc>>4
	}
	unpackTwoBits(b[16:80], &k.q)
	return k
}

// unpackQ3_K: hmask bit e/32 of byte e%32 is the 3rd bit; a clear bit means q - 4. The 16
// 6-bit scales are stored offset by 32: low nibbles in scales[0..7] (groups 0-7 low, 8-15
// high), top two bits in scales[8..11].
func unpackQ3_K(b []byte) (k kBlock) {
	hmask, scales := b[0:32], b[96:108]
	k.d = halfAt(b, 108)
	for g := range 16 {
		low := scales[g%8] >> (4 * (g / 8)) & 15
		high := scales[8+g%4] >> (2 * (g / 4)) & 3
		k.scale[g] = int8(low|high<<4) - 32
	}
	unpackTwoBits(b[32:96], &k.q)
	addMaskBits(hmask, false, -4, &k)
	return k
}

// scaleMinK4 is ggml's get_scale_min_k4: the 6-bit scale and min of sub-block j (of 8) from
// the 12 packed bytes of Q4_K and Q5_K.
func scaleMinK4(j int, s []byte) (sc, m uint8) {
	if j < 4 {
		return s[j] & 63, s[j+4] & 63
	}
	return s[j+4]&15 | s[j-4]>>6<<4, s[j+4]>>4 | s[j]>>6<<4
}

// unpackQ4Nibbles fills d, dmin, scales, mins and the nibbles shared by Q4_K and Q5_K:
// byte l of each 32-byte chunk c holds value 64c+l (low nibble) and 64c+32+l (high).
func unpackQ4Nibbles(b, qs []byte) (k kBlock) {
	k.d, k.dmin = halfAt(b, 0), halfAt(b, 2)
	for j := range 8 {
		sc, m := scaleMinK4(j, b[4:16])
		k.scale[2*j], k.scale[2*j+1] = int8(sc), int8(sc)
		k.min[2*j], k.min[2*j+1] = m, m
	}
	for c := range 4 {
		for l, q := range qs[32*c : 32*c+32] {
			k.q[64*c+l] = int8(q & 15)
			k.q[64*c+32+l] = int8(q >> 4)
		}
	}
	return k
}

func unpackQ4_K(b []byte) kBlock { return unpackQ4Nibbles(b, b[16:144]) }

// unpackQ5_K adds the 5th bits: bit e/32 of qh[e%32] (bit 2c for the low nibbles of chunk
// c, 2c+1 for the high).
func unpackQ5_K(b []byte) kBlock {
	k := unpackQ4Nibbles(b, b[48:176])
	addMaskBits(b[16:48], true, 16, &k)
	return k
}

// unpackQ6_K: in half h, value 32s+l (s = 0..3, l < 32) takes its low 4 bits from
// ql[64h+l] (s = 0, 2) or ql[64h+32+l] (s = 1, 3), low nibble for s < 2, and its top 2 bits
// from bits 2s of qh[32h+l]; stored offset by 32. Scales are signed bytes.
func unpackQ6_K(b []byte) (k kBlock) {
	k.d = halfAt(b, 208)
	for g, sc := range b[192:208] {
		k.scale[g] = int8(sc)
	}
	for h := range 2 {
		ql, qh, q := b[64*h:64*h+64], b[128+32*h:128+32*h+32], k.q[128*h:128*h+128]
		for l, hi := range qh {
			lo0, lo1 := ql[l], ql[l+32]
			q[l] = int8(lo0&15|hi&3<<4) - 32
			q[l+32] = int8(lo1&15|hi>>2&3<<4) - 32
			q[l+64] = int8(lo0>>4|hi>>4&3<<4) - 32
			q[l+96] = int8(lo1>>4|hi>>6<<4) - 32
		}
	}
	return k
}
