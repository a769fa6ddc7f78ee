package tensor

import "encoding/binary"

// The lattice formats IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S and IQ1_M (256 values
// per block, 8 sub-blocks of 32). Each group of 8 (IQ3: 4) values is a point of a fixed
// table (iq_grids.go) with per-value signs, under a small integer scale s per sub-block or
// half sub-block; IQ1 points are in {-1, 0, 1} and each group of 8 is also shifted by
// ±1/8. As with the K-quants, each format unpacks its block into an iqBlock and decoding
// and dot products are shared.

// iqBlock is one unpacked lattice block. Formats with one scale per 32 values repeat it for
// both halves.
type iqBlock struct {
	d     float32
	scale [16]uint8     // s of each 16 values; the integer weight in dot products is 2s+1
	q     [qkK]int8     // the signed lattice value of each element
	shift [qkK / 8]int8 // IQ1: the sign (±1) of the 1/8 shift of each 8 values
}

type iqFormat struct {
	blockBytes int
	unpack     func(b []byte) iqBlock
	// subScale is the float scale of a group from d and s, in ggml's dequantize_row_*.
	subScale func(d float32, s uint8) float32
	// shifted marks IQ1: values are subScale·(q ± 1/8).
	shifted bool
	// shiftFromBsums: ggml's IQ1_S kernel takes the activation sums the shift multiplies
	// from Q8_K's bsums (one sign per 32 values); IQ1_M's sums the quants itself.
	shiftFromBsums bool
	// dotFactor is the constant ggml's generic kernel multiplies the sum by at the end.
	dotFactor float32
}

// iqShift is ggml's IQ1S_DELTA (= IQ1M_DELTA).
const iqShift = 0.125

var (
	formatIQ2_XXS = iqFormat{66, unpackIQ2_XXS, iq2Scale, false, false, 0.125}
	formatIQ2_XS  = iqFormat{74, unpackIQ2_XS, iq2Scale, false, false, 0.125}
	formatIQ2_S   = iqFormat{82, unpackIQ2_S, iq2Scale, false, false, 0.125}
	formatIQ3_XXS = iqFormat{98, unpackIQ3_XXS, iq3xxsScale, false, false, 0.25}
	formatIQ3_S   = iqFormat{110, unpackIQ3_S, oddScale, false, false, 1}
	formatIQ1_S   = iqFormat{50, unpackIQ1_S, oddScale, true, true, 1}
	formatIQ1_M   = iqFormat{56, unpackIQ1_M, oddScale, true, false, 1}
)

func iq2Scale(d float32, s uint8) float32    { return d * (0.5 + float32(s)) * 0.25 }
func iq3xxsScale(d float32, s uint8) float32 { return d * (0.5 + float32(s)) * 0.5 }
func oddScale(d float32, s uint8) float32    { return d * float32(2*int(s)+1) }

func init() {
	for t, format := range map[Type]*iqFormat{
		IQ2_XXS: &formatIQ2_XXS, IQ2_XS: &formatIQ2_XS, IQ2_S: &formatIQ2_S,
		IQ3_XXS: &formatIQ3_XXS, IQ3_S: &formatIQ3_S, IQ1_S: &formatIQ1_S, IQ1_M: &formatIQ1_M,
	} {
		// No quantizers: ggml's need an importance matrix (or, for IQ3_S, a lattice search
		// issue 3 leaves out).
		traits[t] = &Traits{
			ToFloat:    func(src []byte, dst []float32) { format.decode(src, dst) },
			VecDotType: Q8_K,
			VecDot:     func(n int, w, a []byte) float32 { return format.vecDot(n, w, a) },
		}
	}
}

func (f *iqFormat) decode(src []byte, dst []float32) {
	for i := range len(dst) / qkK {
		k := f.unpack(src[i*f.blockBytes:][:f.blockBytes])
		y := dst[i*qkK:][:qkK]
		for g := range 16 {
			dl := f.subScale(k.d, k.scale[g])
			for j, q := range k.q[16*g : 16*g+16] {
				e := 16*g + j
				if f.shifted {
					y[e] = dl * (float32(q) + float32(float32(k.shift[e/8])*iqShift))
				} else {
					y[e] = dl * float32(q)
				}
			}
		}
	}
}

// vecDot is ggml_vec_dot_iq*_q8_K_generic: integer sums weighted by 2s+1, one float term
// per block (plus the shift term for IQ1), and the format's constant at the end.
func (f *iqFormat) vecDot(n int, w, a []byte) float32 {
	var sumf float32
	for i := range n / qkK {
		k := f.unpack(w[i*f.blockBytes:][:f.blockBytes])
		y := blockQ8K(a, i)
		bsum, shiftSum := 0, 0
		for g := range 16 {
			ls := 2*int(k.scale[g]) + 1
			sum := 0
			for j, q := range k.q[16*g : 16*g+16] {
				sum += int(q) * y.q(16*g+j)
			}
			bsum += ls * sum
			switch {
			case f.shiftFromBsums:
				shiftSum += ls * int(k.shift[2*g]) * y.bsum(g)
			case f.shifted:
				for h := range 2 {
					part := 0
					for j := range 8 {
						part += y.q(16*g + 8*h + j)
					}
					shiftSum += ls * int(k.shift[2*g+h]) * part
				}
			}
		}
		d := k.d * y.d()
		if f.shifted {
			sumf += float32(d * (float32(bsum) + float32(iqShift*float32(shiftSum))))
		} else {
			sumf += float32(d * float32(bsum))
		}
	}
	return f.dotFactor * sumf
}

// setPoint writes 8 signed values of a point: value j of grid point p, negated where bit j
// of signs is set.
func setPoint[V uint8 | int8](dst []int8, grid []V, signs uint8) {
	for j, g := range grid[:8] {
		v := int8(g)
		if signs>>j&1 != 0 {
			v = -v
		}
		dst[j] = v
	}
}

// point8 returns point i of a table of 8-value points.
func point8[V uint8 | int8](grid []V, i int) []V { return grid[8*i : 8*i+8] }

// setPoints4 writes two 4-value points (IQ3) as one group of 8 with its signs.
func setPoints4(dst []int8, grid []uint8, i1, i2 int, signs uint8) {
	var pair [8]uint8
	copy(pair[:4], grid[4*i1:4*i1+4])
	copy(pair[4:], grid[4*i2:4*i2+4])
	setPoint(dst, pair[:], signs)
}

func (k *iqBlock) setScale32(ib int, s uint8) { k.scale[2*ib], k.scale[2*ib+1] = s, s }

// unpackIQ2_XXS: per sub-block two u32: the 4 bytes of the first index 4 points of
// iq2xxsGrid; the second holds four 7-bit sign codes (ksigns) and s in its top 4 bits.
func unpackIQ2_XXS(b []byte) (k iqBlock) {
	k.d = halfAt(b, 0)
	for ib := range 8 {
		idx, aux := b[2+8*ib:6+8*ib], binary.LittleEndian.Uint32(b[6+8*ib:])
		k.setScale32(ib, uint8(aux>>28))
		for l := range 4 {
			setPoint(k.q[32*ib+8*l:], point8(iq2xxsGrid[:], int(idx[l])), iqSigns[aux>>(7*l)&127])
		}
	}
	return k
}

// unpackIQ2_XS: one u16 per 8 values (9-bit index into iq2xsGrid, 7-bit sign code), and a
// 4-bit scale per 16 values.
func unpackIQ2_XS(b []byte) (k iqBlock) {
	k.d = halfAt(b, 0)
	for ib := range 8 {
		sc := b[66+ib]
		k.scale[2*ib], k.scale[2*ib+1] = sc&15, sc>>4
		for l := range 4 {
			code := binary.LittleEndian.Uint16(b[2+8*ib+2*l:])
			setPoint(k.q[32*ib+8*l:], point8(iq2xsGrid[:], int(code&511)), iqSigns[code>>9])
		}
	}
	return k
}

// unpackIQ2_S: 10-bit indices into iq2sGrid (low 8 bits in qs[0..31], top 2 in qh), 8
// explicit sign bits per 8 values (qs[32..63]), a 4-bit scale per 16 values.
func unpackIQ2_S(b []byte) (k iqBlock) {
	k.d = halfAt(b, 0)
	qs, signs, qh, scales := b[2:34], b[34:66], b[66:74], b[74:82]
	for ib := range 8 {
		k.scale[2*ib], k.scale[2*ib+1] = scales[ib]&15, scales[ib]>>4
		for l := range 4 {
			i := int(qs[4*ib+l]) | int(qh[ib])<<(8-2*l)&0x300
			setPoint(k.q[32*ib+8*l:], point8(iq2sGrid[:], i), signs[4*ib+l])
		}
	}
	return k
}

// unpackIQ3_XXS: 64 bytes of indices into iq3xxsGrid (4-value points, two per group of 8),
// then per sub-block a u32 of four 7-bit sign codes and s in its top 4 bits.
func unpackIQ3_XXS(b []byte) (k iqBlock) {
	k.d = halfAt(b, 0)
	qs := b[2:66]
	for ib := range 8 {
		aux := binary.LittleEndian.Uint32(b[66+4*ib:])
		k.setScale32(ib, uint8(aux>>28))
		for l := range 4 {
			i1, i2 := int(qs[8*ib+2*l]), int(qs[8*ib+2*l+1])
			setPoints4(k.q[32*ib+8*l:], iq3xxsGrid[:], i1, i2, iqSigns[aux>>(7*l)&127])
		}
	}
	return k
}

// unpackIQ3_S: 9-bit indices into iq3sGrid (low 8 bits in qs, the 9th in qh[sub-block]),
// explicit sign bits, a 4-bit scale per sub-block (two per byte of scales).
func unpackIQ3_S(b []byte) (k iqBlock) {
	k.d = halfAt(b, 0)
	qs, qh, signs, scales := b[2:66], b[66:74], b[74:106], b[106:110]
	for ib := range 8 {
		k.setScale32(ib, scales[ib/2]>>(4*(ib%2))&15)
		h := int(qh[ib])
		for l := range 4 {
			i1 := int(qs[8*ib+2*l]) | h<<(8-2*l)&256
			i2 := int(qs[8*ib+2*l+1]) | h<<(7-2*l)&256
			setPoints4(k.q[32*ib+8*l:], iq3sGrid[:], i1, i2, signs[4*ib+l])
		}
	}
	return k
}

// unpackIQ1_S: 11-bit indices into iq1sGrid (low 8 bits in qs, top 3 in the sub-block's u16
// qh, 3 bits per group), and in qh bits 12-14 s and bit 15 the shift's sign for all 32.
func unpackIQ1_S(b []byte) (k iqBlock) {
	k.d = halfAt(b, 0)
	qs := b[2:34]
	for ib := range 8 {
		qh := int(binary.LittleEndian.Uint16(b[34+2*ib:]))
		k.setScale32(ib, uint8(qh>>12&7))
		for l := range 4 {
			i := int(qs[4*ib+l]) | qh>>(3*l)&7<<8
			copyPoint(k.q[32*ib+8*l:], point8(iq1sGrid[:], i))
			k.shift[4*ib+l] = shiftSign(qh&0x8000 != 0)
		}
	}
	return k
}

// unpackIQ1_M: as IQ1_S, but each group of 8 has its own shift sign (bit 3 of its nibble of
// qh, whose low 3 bits are the index's top bits), a 3-bit scale per 16 values (four per u16
// of scales), and d is assembled from the top nibbles of those four u16.
func unpackIQ1_M(b []byte) (k iqBlock) {
	qs, qh := b[0:32], b[32:48]
	var sc [4]uint16
	for i := range sc {
		sc[i] = binary.LittleEndian.Uint16(b[48+2*i:])
	}
	k.d = F16ToF32(sc[0]>>12 | sc[1]>>8&0x00F0 | sc[2]>>4&0x0F00 | sc[3]&0xF000)
	for ib := range 8 {
		s := sc[ib/2] >> (6 * (ib % 2))
		k.scale[2*ib], k.scale[2*ib+1] = uint8(s&7), uint8(s>>3&7)
		for l := range 4 {
			nibble := int(qh[2*ib+l/2]) >> (4 * (l % 2)) & 15
			i := int(qs[4*ib+l]) | nibble&7<<8
			copyPoint(k.q[32*ib+8*l:], point8(iq1sGrid[:], i))
			k.shift[4*ib+l] = shiftSign(nibble&8 != 0)
		}
	}
	return k
}

func copyPoint(dst []int8, point []int8) { copy(dst[:8], point) }

func shiftSign(negative bool) int8 {
	if negative {
		return -1
	}
	return 1
}
