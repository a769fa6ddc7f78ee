//go:build goexperiment.simd && amd64

package tensor

import (
	"simd/archsimd"
)

// fitK4LanesAVX2 is the group fits of fitK4Groups (fitAffine with the rms + |x| weights,
// squared error) for the 8 groups of 32 of a Q4_K/Q5_K super-block at once, group j in
// lane j of eight: each lane takes the float32 operations of its group in the scalar
// order, without fused multiply-adds, so the scales, mins and levels are the scalar fit's
// bits; the branches of the search become per-lane masks. Random model synthesis spends
// most of its time here (make_qkx2_quants tries 21 scales per group). ok is false when the
// super-block holds a NaN, whose comparisons the scalar scans treat their own way: the
// caller then fits it in scalar code.
func fitK4LanesAVX2(x []float32, L *[qkK]uint8, nmax int, rmin float32, nstep int) (scales, mins [8]float32, ok bool) {
	var xs, ws [32]archsimd.Float32x8
	var lane [8]float32
	for i := range 32 {
		for j := range 8 {
			v := x[32*j+i]
			if v != v {
				return scales, mins, false
			}
			lane[j] = v
		}
		xs[i] = archsimd.LoadFloat32x8(&lane)
	}
	absMask := archsimd.BroadcastInt32x8(0x7FFFFFFF)
	// The weights: rms of the group + |x|.
	var sumX2 archsimd.Float32x8
	for i := range 32 {
		sumX2 = sumX2.Add(xs[i].Mul(xs[i]))
	}
	avX := sumX2.Div(archsimd.BroadcastFloat32x8(32)).Sqrt()
	for i := range 32 {
		ws[i] = avX.Add(xs[i].AsInt32x8().And(absMask).AsFloat32x8())
	}
	vmin, vmax, sumW := xs[0], xs[0], ws[0]
	sumX := ws[0].Mul(xs[0])
	for i := 1; i < 32; i++ {
		vmin, vmax = vmin.Min(xs[i]), vmax.Max(xs[i])
		sumW = sumW.Add(ws[i])
		sumX = sumX.Add(ws[i].Mul(xs[i]))
	}
	zero := archsimd.BroadcastFloat32x8(0)
	vmin = vmin.Min(zero)
	flat := vmax.Equal(vmin) // such a group has levels 0, scale 0 and min -vmin
	flatMin := vmin

	fnmax := archsimd.BroadcastFloat32x8(float32(nmax))
	lo, hi := archsimd.BroadcastInt32x8(0), archsimd.BroadcastInt32x8(int32(nmax))
	magic, mantissa, offset := archsimd.BroadcastFloat32x8(12582912), archsimd.BroadcastInt32x8(0x7FFFFF), archsimd.BroadcastInt32x8(0x400000)
	level := func(iscale, m, v archsimd.Float32x8) archsimd.Float32x8 { // clamp(nearestInt(iscale·(v-m)), 0, nmax)
		n := iscale.Mul(v.Sub(m)).Add(magic).AsInt32x8().And(mantissa).Sub(offset)
		return n.Max(lo).Min(hi).ConvertToFloat32()
	}
	iscale := fnmax.Div(vmax.Sub(vmin))
	scale := archsimd.BroadcastFloat32x8(1).Div(iscale)
	var bestError archsimd.Float32x8
	for i := range 32 {
		l := level(iscale, vmin, xs[i])
		diff := scale.Mul(l).Add(vmin).Sub(xs[i])
		bestError = bestError.Add(ws[i].Mul(diff.Mul(diff)))
	}
	// The levels are recomputed at the end from the inverse scale and min that made them.
	bestIscale, bestMin := iscale, vmin
	var ls [32]archsimd.Float32x8
	for is := 0; is <= nstep; is++ {
		num := rmin + float32(float32(0.1)*float32(is)) + float32(nmax) // fitAffine's, rdelta 0.1
		iscale = archsimd.BroadcastFloat32x8(num).Div(vmax.Sub(vmin))
		var sumL, sumL2, sumXL archsimd.Float32x8
		for i := range 32 {
			l := level(iscale, vmin, xs[i])
			ls[i] = l
			wl := ws[i].Mul(l)
			sumL = sumL.Add(wl)
			sumL2 = sumL2.Add(wl.Mul(l))
			sumXL = sumXL.Add(wl.Mul(xs[i]))
		}
		D := sumW.Mul(sumL2).Sub(sumL.Mul(sumL))
		valid := D.Greater(zero)
		thisScale := sumW.Mul(sumXL).Sub(sumX.Mul(sumL)).Div(D)
		thisMin := sumL2.Mul(sumX).Sub(sumL.Mul(sumXL)).Div(D)
		positive := thisMin.Greater(zero)
		thisScale = sumXL.Div(sumL2).Merge(thisScale, positive)
		thisMin = zero.Merge(thisMin, positive)
		var curError archsimd.Float32x8
		for i := range 32 {
			diff := thisScale.Mul(ls[i]).Add(thisMin).Sub(xs[i])
			curError = curError.Add(ws[i].Mul(diff.Mul(diff)))
		}
		better := valid.And(curError.Less(bestError))
		bestIscale, bestMin = iscale.Merge(bestIscale, better), vmin.Merge(bestMin, better)
		bestError = curError.Merge(bestError, better)
		scale, vmin = thisScale.Merge(scale, better), thisMin.Merge(vmin, better)
	}
	scale = zero.Merge(scale, flat)
	vmin = flatMin.Merge(vmin, flat)
	var lv [32][8]float32
	for i := range 32 {
		zero.Merge(level(bestIscale, bestMin, xs[i]), flat).Store(&lv[i])
	}
	for j := range 8 {
		for i := range 32 {
			L[32*j+i] = uint8(lv[i][j])
		}
	}
	scale.Store(&scales)
	vmin.AsInt32x8().Xor(archsimd.BroadcastInt32x8(-1 << 31)).AsFloat32x8().Store(&mins) // -vmin
	return scales, mins, true
}

// fitK4GroupsAVX2 is the k4Fit of the AVX2 level: fitK4LanesAVX2, or the scalar fit for a
// super-block it leaves to it.
func fitK4GroupsAVX2(x []float32, L *[qkK]uint8, nmax int, rmin float32, nstep int) (scales, mins [8]float32) {
	if scales, mins, ok := fitK4LanesAVX2(x, L, nmax, rmin, nstep); ok {
		return scales, mins
	}
	return fitK4Groups(x, L, nmax, rmin, nstep)
}

// fitSymmetricLanesAVX2 is fitSymmetric (nmax 32, Q6_K's) for 8 consecutive groups of 16
// at once, group j in lane j: the scalar operations of each group in its order, so the same
// scales and levels (L gets l + 32). ok is false when a group holds a NaN, which the caller
// then fits in scalar code.
func fitSymmetricLanesAVX2(x []float32, L []int8) (scales [8]float32, ok bool) {
	const nmax = 32
	var xs [16]archsimd.Float32x8
	var lane [8]float32
	for i := range 16 {
		for j := range 8 {
			v := x[16*j+i]
			if v != v {
				return scales, false
			}
			lane[j] = v
		}
		xs[i] = archsimd.LoadFloat32x8(&lane)
	}
	absMask := archsimd.BroadcastInt32x8(0x7FFFFFFF)
	var amax, vmax archsimd.Float32x8
	for i := range 16 {
		a := xs[i].AsInt32x8().And(absMask).AsFloat32x8()
		gt := a.Greater(amax) // the first of equal magnitudes stays, as in absMax
		amax, vmax = a.Merge(amax, gt), xs[i].Merge(vmax, gt)
	}
	zero := archsimd.BroadcastFloat32x8(0)
	flat := amax.Less(archsimd.BroadcastFloat32x8(groupMaxEps))
	lo, hi := archsimd.BroadcastInt32x8(-nmax), archsimd.BroadcastInt32x8(nmax-1)
	magic, mantissa, offset := archsimd.BroadcastFloat32x8(12582912), archsimd.BroadcastInt32x8(0x7FFFFF), archsimd.BroadcastInt32x8(0x400000)
	level := func(iscale, v archsimd.Float32x8) archsimd.Int32x8 { // clamp(nearestInt(iscale·v), -nmax, nmax-1)
		return iscale.Mul(v).Add(magic).AsInt32x8().And(mantissa).Sub(offset).Max(lo).Min(hi)
	}
	sums := func(iscale archsimd.Float32x8) (sumlx, suml2 archsimd.Float32x8) {
		for i := range 16 {
			l := level(iscale, xs[i]).ConvertToFloat32()
			w := xs[i].Mul(xs[i])
			sumlx = sumlx.Add(w.Mul(xs[i]).Mul(l))
			suml2 = suml2.Add(w.Mul(l).Mul(l))
		}
		return sumlx, suml2
	}
	iscale := archsimd.BroadcastFloat32x8(-nmax).Div(vmax)
	bestIscale := iscale
	sumlx, suml2 := sums(iscale)
	scale := sumlx.Div(suml2).Merge(zero, suml2.NotEqual(zero))
	best := scale.Mul(sumlx)
	for is := -9; is <= 9; is++ {
		if is == 0 {
			continue
		}
		iscale = archsimd.BroadcastFloat32x8(-(float32(nmax) + float32(float32(0.1)*float32(is)))).Div(vmax)
		sumlx, suml2 = sums(iscale)
		better := suml2.Greater(zero).And(sumlx.Mul(sumlx).Greater(best.Mul(suml2)))
		bestIscale = iscale.Merge(bestIscale, better)
		scale = sumlx.Div(suml2).Merge(scale, better)
		best = scale.Mul(sumlx).Merge(best, better)
	}
	zero.Merge(scale, flat).Store(&scales)
	var lv [16][8]int32
	offsetL := archsimd.BroadcastInt32x8(nmax)
	zeroL := archsimd.BroadcastInt32x8(0)
	for i := range 16 {
		zeroL.Merge(level(bestIscale, xs[i]).Add(offsetL), flat).Store(&lv[i])
	}
	for j := range 8 {
		for i := range 16 {
			L[16*j+i] = int8(lv[i][j])
		}
	}
	return scales, true
}

// fitQ6GroupsAVX2 is the q6Fit of the AVX2 level: fitSymmetricLanesAVX2 on each half of the
// super-block, or the scalar fit for a half it leaves to it.
func fitQ6GroupsAVX2(x []float32, L *[qkK]int8) (scales [16]float32) {
	for h := range 2 {
		part, ok := fitSymmetricLanesAVX2(x[128*h:128*h+128], L[128*h:128*h+128])
		if !ok {
			for g := 8 * h; g < 8*h+8; g++ {
				part[g-8*h] = fitSymmetric(32, x[16*g:16*g+16], L[16*g:16*g+16])
			}
		}
		copy(scales[8*h:], part[:])
	}
	return scales
}
