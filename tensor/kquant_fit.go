package tensor

// The scale searches of ggml's K-quant reference quantizers (make_qx_quants, make_q3_quants,
// make_qkx2_quants in ggml-quants.c). Each fits a group of 16 or 32 values and returns the
// group's scale with the levels in L. They are written in ggml's float32 operation order so
// that the chosen levels, and hence the bytes of a model file, are the same.

// groupMaxEps: a group whose largest |x| is below this is treated as all zeros.
const groupMaxEps = 1e-15

// fitSymmetric is make_qx_quants with rmse_type 1 and no importance weights (all the Q6_K
// reference quantizer uses): levels L ∈ [0, 2·nmax) stand for l - nmax, and the scale is the
// least-squares one for weights x², searched over 19 trial inverse scales around -nmax/max.
func fitSymmetric(nmax int, x []float32, L []int8) float32 {
	amax, vmax := absMax(x)
	if amax < groupMaxEps {
		clear(L)
		return 0
	}
	level := func(iscale, v float32) int { return clampInt(nearestInt(iscale*v), -nmax, nmax-1) }
	// sums returns Σw·x·l and Σw·l² for the levels at iscale, w = x².
	sums := func(iscale float32) (sumlx, suml2 float32) {
		for _, v := range x {
			l := float32(level(iscale, v))
			w := v * v
			sumlx += float32(w * v * l)
			suml2 += float32(w * l * l)
		}
		return sumlx, suml2
	}
	setLevels := func(iscale float32) {
		for i, v := range x {
			L[i] = int8(nmax + level(iscale, v))
		}
	}

	iscale := float32(-nmax) / vmax
	setLevels(iscale)
	sumlx, suml2 := sums(iscale)
	var scale float32
	if suml2 != 0 {
		scale = sumlx / suml2
	}
	best := scale * sumlx
	for is := -9; is <= 9; is++ {
		if is == 0 {
			continue
		}
		iscale = -(float32(nmax) + float32(0.1*float32(is))) / vmax
		sumlx, suml2 = sums(iscale)
		if suml2 > 0 && sumlx*sumlx > best*suml2 {
			setLevels(iscale)
			scale = sumlx / suml2
			best = scale * sumlx
		}
	}
	return scale
}

// fitSymmetricRefined is make_q3_quants with do_rmse: levels in [-nmax, nmax) from the
// scale -nmax/max, then up to 5 passes that move single levels while that lowers the
// x²-weighted error. L receives l + nmax.
func fitSymmetricRefined(nmax int, x []float32, L []int8) float32 {
	amax, vmax := absMax(x)
	if amax < groupMaxEps {
		clear(L)
		return 0
	}
	iscale := float32(-nmax) / vmax
	var sumlx, suml2 float32
	for i, v := range x {
		l := clampInt(nearestInt(iscale*v), -nmax, nmax-1)
		L[i] = int8(l)
		w := v * v
		sumlx += float32(w * v * float32(l))
		suml2 += float32(w * float32(l) * float32(l))
	}
	for range 5 {
		changed := false
		for i, v := range x {
			w := v * v
			li := float32(L[i])
			slx := sumlx - float32(w*v*li)
			if !(slx > 0) {
				continue
			}
			sl2 := suml2 - float32(w*li*li)
			newL := clampInt(nearestInt(v*sl2/slx), -nmax, nmax-1)
			if newL == int(L[i]) {
				continue
			}
			nl := float32(newL)
			slx += float32(w * v * nl)
			sl2 += float32(w * nl * nl)
			if sl2 > 0 && slx*slx*suml2 > sumlx*sumlx*sl2 {
				L[i], sumlx, suml2 = int8(newL), slx, sl2
				changed = true
			}
		}
		if !changed {
			break
		}
	}
	for i := range L {
		L[i] += int8(nmax)
	}
	if suml2 > 0 {
		return sumlx / suml2
	}
	return 0
}

// fitAffine is make_qkx2_quants: levels L ∈ [0, nmax] with x ≈ scale·l - min, starting from
// the full range and then trying nstep+1 inverse scales (rmin + rdelta·is + nmax)/(max -
// min), each refitted by weighted least squares; the lowest weighted error (absolute if mad,
// else squared) wins. It returns the scale and min (as a positive offset subtracted).
// Laux is scratch of len(x).
func fitAffine(nmax int, x, weights []float32, L, Laux []uint8, rmin, rdelta float32, nstep int, mad bool) (scale, theMin float32) {
	vmin, vmax := x[0], x[0]
	sumW := weights[0]
	sumX := float32(sumW * x[0])
	for i := 1; i < len(x); i++ {
		vmin = min32(vmin, x[i])
		vmax = max32(vmax, x[i])
		sumW += weights[i]
		sumX += float32(weights[i] * x[i])
	}
	vmin = min32(vmin, 0)
	if vmax == vmin {
		clear(L)
		return 0, -vmin
	}
	errorOf := func(d, m, v float32, l uint8) float32 {
		diff := float32(d*float32(l)) + m - v
		if mad {
			return abs32(diff)
		}
		return diff * diff
	}
	iscale := float32(nmax) / (vmax - vmin)
	scale = 1 / iscale
	var bestError float32
	for i, v := range x {
		L[i] = uint8(clampInt(nearestInt(iscale*(v-vmin)), 0, nmax))
		bestError += float32(weights[i] * errorOf(scale, vmin, v, L[i]))
	}
	if nstep < 1 {
		return scale, -vmin
	}
	for is := 0; is <= nstep; is++ {
		iscale = (rmin + float32(rdelta*float32(is)) + float32(nmax)) / (vmax - vmin)
		var sumL, sumL2, sumXL float32
		for i, v := range x {
			l := uint8(clampInt(nearestInt(iscale*(v-vmin)), 0, nmax))
			Laux[i] = l
			w, fl := weights[i], float32(l)
			sumL += float32(w * fl)
			sumL2 += float32(w * fl * fl)
			sumXL += float32(w * fl * v)
		}
		D := float32(sumW*sumL2) - float32(sumL*sumL)
		if !(D > 0) {
			continue
		}
		thisScale := (float32(sumW*sumXL) - float32(sumX*sumL)) / D
		thisMin := (float32(sumL2*sumX) - float32(sumL*sumXL)) / D
		if thisMin > 0 {
			thisMin = 0
			thisScale = sumXL / sumL2
		}
		var curError float32
		for i, v := range x {
			curError += float32(weights[i] * errorOf(thisScale, thisMin, v, Laux[i]))
		}
		if curError < bestError {
			copy(L, Laux)
			bestError, scale, vmin = curError, thisScale, thisMin
		}
	}
	return scale, -vmin
}

// min32 and max32 are C's `if (v < m) m = v` scans: unlike the builtins they ignore NaNs
// in v, as ggml's loops do.
func min32(m, v float32) float32 {
	if v < m {
		return v
	}
	return m
}

func max32(m, v float32) float32 {
	if v > m {
		return v
	}
	return m
}
