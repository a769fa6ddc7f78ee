package tensor

import "encoding/binary"

// The non-linear 4-bit formats: each nibble indexes 16 fixed levels (iq4Values) spaced
// closer near zero.
//   IQ4_NL (18 bytes per 32): d f16, 16 bytes of nibbles (element j low, j+16 high).
//   IQ4_XS (136 bytes per 256): d f16, scales_h u16, scales_l[4], qs[128]. 8 sub-blocks of 32
//   with a 6-bit scale ls (low 4 bits: nibble b%2 of scales_l[b/2]; top 2: bits 2b of
//   scales_h), value = (d·(ls-32))·level; sub-block b's nibbles are qs[16b..16b+15].

var iq4Values = [16]int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

func init() {
	traits[IQ4_NL] = &Traits{ToFloat: decodeIQ4_NL, FromFloat: encodeIQ4_NL, VecDotType: Q8_0, VecDot: dotIQ4_NL}
	traits[IQ4_XS] = &Traits{ToFloat: decodeIQ4_XS, FromFloat: encodeIQ4_XS, VecDotType: Q8_K, VecDot: dotIQ4_XS}
}

// iq4xsScale returns the 6-bit scale (0..63, stored offset by 32) of sub-block b.
func iq4xsScale(blk []byte, b int) int {
	low := int(blk[4+b/2]>>(4*(b%2))) & 15
	high := int(binary.LittleEndian.Uint16(blk[2:])>>(2*b)) & 3
	return low | high<<4
}

// decodeLevels writes d·level for 16 bytes of nibbles: low nibbles to y[0..15], high to
// y[16..31].
func decodeLevels(qs []byte, d float32, y []float32) {
	y = y[:32]
	for j, q := range qs[:16] {
		y[j] = d * float32(iq4Values[q&15])
		y[j+16] = d * float32(iq4Values[q>>4])
	}
}

func decodeIQ4_NL(src []byte, dst []float32) {
	for i := range len(dst) / qk32 {
		b := src[i*18:][:18]
		decodeLevels(b[2:18], halfAt(b, 0), dst[i*qk32:])
	}
}

func decodeIQ4_XS(src []byte, dst []float32) {
	for i := range len(dst) / qkK {
		blk, y := src[i*136:][:136], dst[i*qkK:][:qkK]
		d := halfAt(blk, 0)
		for b := range 8 {
			decodeLevels(blk[8+16*b:], d*float32(iq4xsScale(blk, b)-32), y[32*b:])
		}
	}
}

// nearestLevel is ggml's best_index_int8 over iq4Values: the index of the level nearest x,
// the lower one on ties.
func nearestLevel(x float32) uint8 {
	x = float32(x) // callers pass products: keep them from fusing with the subtractions below
	if x <= float32(iq4Values[0]) {
		return 0
	}
	if x >= float32(iq4Values[15]) {
		return 15
	}
	lo, hi := 0, 15
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if x < float32(iq4Values[mid]) {
			hi = mid
		} else {
			lo = mid
		}
	}
	if x-float32(iq4Values[hi-1]) < float32(iq4Values[hi])-x {
		return uint8(hi - 1)
	}
	return uint8(hi)
}

// iq4Tries is how many trial scales either side the file quantizer searches (ggml's
// quantize_iq4_nl/quantize_iq4_xs pass ntry = 7; the CPU's IQ4_NL row converter passes -1,
// but ggml never converts activations to IQ4_NL).
const iq4Tries = 7

// fitIQ4 returns the scale of 32 values: the x²-weighted least-squares scale for the levels
// nearest x/d, the best over 2·iq4Tries+1 trial scales; 0 for a group of zeros. (ggml also
// records the levels here, but both callers choose them again for the final scale.)
func fitIQ4(x []float32) float32 {
	amax, vmax := absMax(x)
	if amax < groupMaxEps {
		return 0
	}
	// sums returns Σw·q·x and Σw·q² for the levels nearest x·id, w = x².
	sums := func(id float32) (sumqx, sumq2 float32) {
		for _, v := range x {
			q, w := float32(iq4Values[nearestLevel(id*v)]), v*v
			sumqx += float32(w * q * v)
			sumq2 += float32(w * q * q)
		}
		return sumqx, sumq2
	}
	d := -vmax / float32(iq4Values[0])
	sumqx, sumq2 := sums(1 / d)
	d = 0
	if sumq2 > 0 {
		d = sumqx / sumq2
	}
	best := d * sumqx
	for try := -iq4Tries; try <= iq4Tries; try++ {
		sumqx, sumq2 = sums(float32(try+int(iq4Values[0])) / vmax)
		if sumq2 > 0 && sumqx*sumqx > best*sumq2 {
			d = sumqx / sumq2
			best = d * sumqx
		}
	}
	return d
}

// packNibbles stores 32 level indices: j in the low nibble of byte j, j+16 in the high.
func packNibbles(L []uint8, qs []byte) {
	for j := range 16 {
		qs[j] = L[j] | L[j+16]<<4
	}
}

// encodeIQ4_NL is quantize_iq4_nl without an importance matrix (what llama-quantize runs):
// the fitted scale is stored as f16 and the levels re-chosen for it.
func encodeIQ4_NL(src []float32, dst []byte) {
	var L [qk32]uint8
	for i := range len(src) / qk32 {
		x, b := src[i*qk32:][:qk32], dst[i*18:][:18]
		d := fitIQ4(x)
		putHalf(b, 0, d)
		id := inverse(d)
		for j, v := range x {
			L[j] = nearestLevel(id * v)
		}
		packNibbles(L[:], b[2:18])
	}
}

// encodeIQ4_XS is quantize_iq4_xs without an importance matrix: sub-block scales are fitted
// as for IQ4_NL, then quantized to 6 bits against d = -max/32 (the scale of largest
// magnitude), and the levels re-chosen for each quantized scale.
func encodeIQ4_XS(src []float32, dst []byte) {
	var (
		L      [qk32]uint8
		scales [8]float32
	)
	for i := range len(src) / qkK {
		x, blk := src[i*qkK:][:qkK], dst[i*136:][:136]
		for b := range 8 {
			scales[b] = fitIQ4(x[32*b : 32*b+32])
		}
		_, maxScale := absMax(scales[:])
		d := -maxScale / 32
		putHalf(blk, 0, d)
		id := inverse(d)
		var scalesH uint16
		for b := range 8 {
			l := clampInt(nearestInt(id*scales[b]), -32, 31)
			idl := inverse(d * float32(l))
			xb := x[32*b : 32*b+32]
			for j, v := range xb {
				L[j] = nearestLevel(idl * v)
			}
			packNibbles(L[:], blk[8+16*b:])
			l += 32
			if b%2 == 0 {
				blk[4+b/2] = uint8(l & 15)
			} else {
				blk[4+b/2] |= uint8(l&15) << 4
			}
			scalesH |= uint16(l>>4) << (2 * b)
		}
		binary.LittleEndian.PutUint16(blk[2:], scalesH)
	}
}

// levelDot returns Σ q8·level for 16 bytes of nibbles: low nibbles against q8[0..15], high
// against q8[16..31].
func levelDot(qs, q8 []byte) int {
	q8 = q8[:32]
	sum := 0
	for j, q := range qs[:16] {
		sum += int(int8(q8[j]))*int(iq4Values[q&15]) + int(int8(q8[j+16]))*int(iq4Values[q>>4])
	}
	return sum
}

// dotIQ4_NL is ggml_vec_dot_iq4_nl_q8_0_generic.
func dotIQ4_NL(n int, w, a []byte) float32 {
	var sumf float32
	for i := range n / qk32 {
		x, y := w[i*18:][:18], a[i*34:][:34]
		d := halfAt(y, 0) * halfAt(x, 0)
		sumf += float32(d * float32(levelDot(x[2:18], q8Quants(y))))
	}
	return sumf
}

// dotIQ4_XS is ggml_vec_dot_iq4_xs_q8_K_generic: one float term per sub-block.
func dotIQ4_XS(n int, w, a []byte) float32 {
	var sumf float32
	for i := range n / qkK {
		blk, y := w[i*136:][:136], blockQ8K(a, i)
		d4d8 := halfAt(blk, 0) * y.d()
		q8 := y.quants()
		for b := range 8 {
			db := d4d8 * float32(iq4xsScale(blk, b)-32)
			sumf += float32(db * float32(levelDot(blk[8+16*b:], q8[32*b:])))
		}
	}
	return sumf
}
