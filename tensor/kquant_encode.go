package tensor

// The K-quant reference quantizers (quantize_row_q{2,3,4,5,6}_K_ref, what llama-quantize
// runs without an importance matrix). Each fits every group (kquant_fit.go), quantizes the
// group scales (and mins) against the super-block's largest, stores d (and dmin) as f16,
// then re-derives every level from the rounded scales, skipping groups whose scale rounds
// to zero (they keep the levels of the fit).

// packTwoBits stores 256 levels of 0..3 the Q2_K/Q3_K way: byte l of quarter h holds
// values 128h+l, +32, +64, +96 at bit pairs 0, 2, 4, 6.
func packTwoBits(L *[qkK]uint8, qs []byte) {
	for h := range 2 {
		for l := range 32 {
			e := 128*h + l
			qs[32*h+l] = L[e] | L[e+32]<<2 | L[e+64]<<4 | L[e+96]<<6
		}
	}
}

// encodeQ2_K: groups of 16 fit as scale·l - min with l ∈ 0..3 (absolute-error search);
// scales and mins become 4-bit fractions of the largest.
func encodeQ2_K(src []float32, dst []byte) {
	var (
		L              [qkK]uint8
		laux           [16]uint8
		weights        [16]float32
		scales, mins   [16]float32
		maxScale, maxM float32
	)
	for i := range len(src) / qkK {
		x, b := src[i*qkK:][:qkK], dst[i*84:][:84]
		maxScale, maxM = 0, 0
		for g := range 16 {
			xg := x[16*g : 16*g+16]
			for l, v := range xg {
				weights[l] = abs32(v)
			}
			scales[g], mins[g] = fitAffine(3, xg, weights[:], L[16*g:16*g+16], laux[:], -0.5, 0.1, 15, true)
			maxScale = max32(maxScale, scales[g])
			maxM = max32(maxM, mins[g])
		}
		sc := b[0:16]
		if maxScale > 0 {
			iscale := 15 / maxScale
			for g := range 16 {
				sc[g] = uint8(nearestInt(iscale * scales[g]))
			}
			putHalf(b, 80, maxScale/15)
		} else {
			clear(sc)
			putHalf(b, 80, 0)
		}
		if maxM > 0 {
			iscale := 15 / maxM
			for g := range 16 {
				sc[g] |= uint8(nearestInt(iscale*mins[g]) << 4)
			}
			putHalf(b, 82, maxM/15)
		} else {
			putHalf(b, 82, 0)
		}
		d, dmin := halfAt(b, 80), halfAt(b, 82)
		for g := range 16 {
			dg := d * float32(sc[g]&15)
			if dg == 0 {
				continue
			}
			mg := float32(dmin * float32(sc[g]>>4))
			for l, v := range x[16*g : 16*g+16] {
				L[16*g+l] = uint8(clampInt(nearestInt((v+mg)/dg), 0, 3))
			}
		}
		packTwoBits(&L, b[16:80])
	}
}

// fitGroups16 fits the 16 groups of 16 of a super-block symmetrically (levels in L) and
// returns their scales.
func fitGroups16(x []float32, L *[qkK]int8, nmax int, fit func(int, []float32, []int8) float32) (scales [16]float32) {
	for g := range 16 {
		scales[g] = fit(nmax, x[16*g:16*g+16], L[16*g:16*g+16])
	}
	return scales
}

// encodeQ3_K: groups of 16 fit symmetrically with l ∈ -4..3 (x²-weighted refinement);
// signed 6-bit scales relative to the group scale of largest magnitude (mapped to -32).
func encodeQ3_K(src []float32, dst []byte) {
	var L [qkK]int8
	for i := range len(src) / qkK {
		x, b := src[i*qkK:][:qkK], dst[i*110:][:110]
		scales := fitGroups16(x, &L, 4, fitSymmetricRefined)
		_, maxScale := absMax(scales[:])
		hmask, qs, sc := b[0:32], b[32:96], b[96:108]
		clear(sc)
		if maxScale != 0 {
			iscale := -32 / maxScale
			for g := range 16 {
				l := uint8(max(-32, min(31, int8(nearestInt(iscale*scales[g])))) + 32)
				sc[g%8] |= (l & 15) << (4 * (g / 8))
				sc[8+g%4] |= (l >> 4) << (2 * (g / 4))
			}
			putHalf(b, 108, 1/iscale)
		} else {
			putHalf(b, 108, 0)
		}
		d := halfAt(b, 108)
		for g := range 16 {
			low := sc[g%8] >> (4 * (g / 8)) & 15
			high := sc[8+g%4] >> (2 * (g / 4)) & 3
			dg := d * float32(int8(low|high<<4)-32)
			if dg == 0 {
				continue
			}
			for l, v := range x[16*g : 16*g+16] {
				L[16*g+l] = int8(clampInt(nearestInt(v/dg), -4, 3) + 4)
			}
		}
		// Levels 4..7 set the high bit (hmask bit e/32 of byte e%32) and keep the low two.
		clear(hmask)
		var low [qkK]uint8
		for e, l := range L {
			if l > 3 {
				hmask[e%32] |= 1 << (e / 32)
				l -= 4
			}
			low[e] = uint8(l)
		}
		packTwoBits(&low, qs)
	}
}

// k4Fit fits the 8 groups of 32 of a Q4_K/Q5_K super-block (affine, squared error
// weighted by rms + |x|; make_qkx2_quants with nmax, rmin, rdelta 0.1 and nstep): each
// group's scale and min, and the levels of the fit in L.
type k4Fit func(x []float32, L *[qkK]uint8, nmax int, rmin float32, nstep int) (scales, mins [8]float32)

// fitK4Groups is the scalar k4Fit, one group after the other.
func fitK4Groups(x []float32, L *[qkK]uint8, nmax int, rmin float32, nstep int) (scales, mins [8]float32) {
	var (
		laux    [32]uint8
		weights [32]float32
	)
	for j := range 8 {
		xg := x[32*j : 32*j+32]
		var sumX2 float32
		for _, v := range xg {
			sumX2 += float32(v * v)
		}
		avX := sqrt32(sumX2 / 32)
		for l, v := range xg {
			weights[l] = avX + abs32(v)
		}
		scales[j], mins[j] = fitAffine(nmax, xg, weights[:], L[32*j:32*j+32], laux[:], rmin, 0.1, nstep, false)
	}
	return scales, mins
}

// storeK4Scales stores the groups' scales and mins as 6-bit values relative to the
// largest of each, which become d and dmin.
func storeK4Scales(b []byte, scales, mins [8]float32) {
	var maxScale, maxM float32
	for j := range 8 {
		maxScale = max32(maxScale, scales[j])
		maxM = max32(maxM, mins[j])
	}
	var invScale, invMin float32
	if maxScale > 0 {
		invScale = 63 / maxScale
	}
	if maxM > 0 {
		invMin = 63 / maxM
	}
	s := b[4:16]
	for j := range 8 {
		ls := min(63, uint8(nearestInt(invScale*scales[j])))
		lm := min(63, uint8(nearestInt(invMin*mins[j])))
		if j < 4 {
			s[j], s[j+4] = ls, lm
		} else {
			s[j+4] = ls&15 | lm&15<<4
			s[j-4] |= ls >> 4 << 6
			s[j] |= lm >> 4 << 6
		}
	}
	putHalf(b, 0, maxScale/63)
	putHalf(b, 2, maxM/63)
}

// requantK4 re-derives the levels (0..nmax) of a Q4_K/Q5_K super-block from its stored
// scales and mins.
func requantK4(x []float32, b []byte, L *[qkK]uint8, nmax int) {
	d, dmin := halfAt(b, 0), halfAt(b, 2)
	for j := range 8 {
		sc, m := scaleMinK4(j, b[4:16])
		dj := d * float32(sc)
		if dj == 0 {
			continue
		}
		mj := float32(dmin * float32(m))
		for l, v := range x[32*j : 32*j+32] {
			L[32*j+l] = uint8(clampInt(nearestInt((v+mj)/dj), 0, nmax))
		}
	}
}

// encodeQ4_K: groups of 32 with l ∈ 0..15.
func encodeQ4_K(src []float32, dst []byte) { encodeQ4KWith(fitK4Groups, src, dst) }

// encodeQ5_K: groups of 32 with l ∈ 0..31; the 5th bits go to qh (bit e/32 of byte e%32).
func encodeQ5_K(src []float32, dst []byte) { encodeQ5KWith(fitK4Groups, src, dst) }

func encodeQ4KWith(fit k4Fit, src []float32, dst []byte) {
	var L [qkK]uint8
	for i := range len(src) / qkK {
		x, b := src[i*qkK:][:qkK], dst[i*144:][:144]
		scales, mins := fit(x, &L, 15, -1, 20)
		storeK4Scales(b, scales, mins)
		requantK4(x, b, &L, 15)
		qs := b[16:144]
		for c := range 4 {
			for l := range 32 {
				qs[32*c+l] = L[64*c+l] | L[64*c+32+l]<<4
			}
		}
	}
}

func encodeQ5KWith(fit k4Fit, src []float32, dst []byte) {
	var L [qkK]uint8
	for i := range len(src) / qkK {
		x, b := src[i*qkK:][:qkK], dst[i*176:][:176]
		scales, mins := fit(x, &L, 31, -0.5, 15)
		storeK4Scales(b, scales, mins)
		requantK4(x, b, &L, 31)
		qh, qs := b[16:48], b[48:176]
		clear(qh)
		for c := range 4 {
			for l := range 32 {
				lo, hi := L[64*c+l], L[64*c+32+l]
				qh[l] |= lo >> 4 << (2 * c)
				qh[l] |= hi >> 4 << (2*c + 1)
				qs[32*c+l] = lo&15 | (hi&15)<<4
			}
		}
	}
}

// encodeQ6_K: groups of 16 fit symmetrically with l ∈ -32..31 (x²-weighted search);
// signed 8-bit scales relative to the group scale of largest magnitude (mapped to -128).
func encodeQ6_K(src []float32, dst []byte) { encodeQ6KWith(fitQ6Groups, src, dst) }

// q6Fit fits the 16 groups of 16 of a Q6_K super-block (fitSymmetric with nmax 32): each
// group's scale, and its levels + 32 in L.
type q6Fit func(x []float32, L *[qkK]int8) [16]float32

// fitQ6Groups is the scalar q6Fit.
func fitQ6Groups(x []float32, L *[qkK]int8) [16]float32 { return fitGroups16(x, L, 32, fitSymmetric) }

func encodeQ6KWith(fit q6Fit, src []float32, dst []byte) {
	var L [qkK]int8
	for i := range len(src) / qkK {
		x, b := src[i*qkK:][:qkK], dst[i*210:][:210]
		scales := fit(x, &L)
		maxAbs, maxScale := absMax(scales[:])
		if maxAbs < groupMaxEps {
			clear(b)
			continue
		}
		iscale := -128 / maxScale
		putHalf(b, 208, 1/iscale)
		sc := b[192:208]
		for g := range 16 {
			sc[g] = uint8(int8(min(127, nearestInt(iscale*scales[g]))))
		}
		d := halfAt(b, 208)
		for g := range 16 {
			dg := d * float32(int8(sc[g]))
			if dg == 0 {
				continue
			}
			for l, v := range x[16*g : 16*g+16] {
				L[16*g+l] = int8(clampInt(nearestInt(v/dg), -32, 31) + 32)
			}
		}
		ql, qh := b[0:128], b[128:192]
		for h := range 2 {
			for l := range 32 {
				e := 128*h + l
				q1, q2, q3, q4 := uint8(L[e]), uint8(L[e+32]), uint8(L[e+64]), uint8(L[e+96])
				ql[64*h+l] = q1&15 | q3&15<<4
				ql[64*h+32+l] = q2&15 | q4&15<<4
				qh[32*h+l] = q1>>4 | q2>>4<<2 | q3>>4<<4 | q4>>4<<6
			}
		}
	}
}
