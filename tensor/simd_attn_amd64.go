//go:build goexperiment.simd && amd64

package tensor

import (
	"math"
	"simd/archsimd"
)

// Vector versions of the plain attention kernel's loops, the AVX2 level's (simd_amd64.go).
// addScaledAVX2 gives the scalar code's bits (the same roundings, lane by lane);
// dotFloat64AVX2 sums in four float64 lanes.

// dotFloat64AVX2 is q·k in float64: eight values a step widened to two vectors of four
// float64, multiplied and added in two accumulators (fused, so each product is exact).
func dotFloat64AVX2(q, k []float32) float64 {
	k = k[:len(q)]
	var acc0, acc1 archsimd.Float64x4
	d := 0
	for ; d+8 <= len(q); d += 8 {
		q0 := archsimd.LoadFloat32x4((*[4]float32)(q[d : d+4])).ConvertToFloat64()
		k0 := archsimd.LoadFloat32x4((*[4]float32)(k[d : d+4])).ConvertToFloat64()
		acc0 = q0.MulAdd(k0, acc0)
		q1 := archsimd.LoadFloat32x4((*[4]float32)(q[d+4 : d+8])).ConvertToFloat64()
		k1 := archsimd.LoadFloat32x4((*[4]float32)(k[d+4 : d+8])).ConvertToFloat64()
		acc1 = q1.MulAdd(k1, acc1)
	}
	var lanes [4]float64
	acc0.Add(acc1).Store(&lanes)
	archsimd.ClearAVXUpperBits()
	sum := (lanes[0] + lanes[1]) + (lanes[2] + lanes[3])
	for ; d < len(q); d++ {
		sum += float64(q[d]) * float64(k[d])
	}
	return sum
}

// f32x8s loads the eight float32 values of v.
func f32x8s(v []float32) archsimd.Float32x8 { return archsimd.LoadFloat32x8((*[8]float32)(v)) }

// addScaledAVX2 is acc += x·s eight values a step, multiplied and added separately as the
// scalar loop does.
func addScaledAVX2(acc, x []float32, s float32) {
	acc = acc[:len(x)]
	d := 0
	if len(x) >= 8 {
		sv := archsimd.BroadcastFloat32x8(s)
		for ; d+8 <= len(x); d += 8 {
			a := (*[8]float32)(acc[d : d+8])
			archsimd.LoadFloat32x8(a).Add(archsimd.LoadFloat32x8((*[8]float32)(x[d : d+8])).Mul(sv)).Store(a)
		}
		archsimd.ClearAVXUpperBits()
	}
	for ; d < len(x); d++ {
		acc[d] += x[d] * s
	}
}

// madFloatAVX2 is madFloat eight values a step by float32 FMAs, as ggml's vector kernel
// does (the scalar fma32 rounds through float64 first, which differs only when that double
// rounding lands on a float32 tie).
func madFloatAVX2(acc, x []float32, s float32) {
	acc = acc[:len(x)]
	d := 0
	if len(x) >= 8 {
		sv := archsimd.BroadcastFloat32x8(s)
		for ; d+8 <= len(x); d += 8 {
			a := (*[8]float32)(acc[d : d+8])
			archsimd.LoadFloat32x8((*[8]float32)(x[d:d+8])).MulAdd(sv, archsimd.LoadFloat32x8(a)).Store(a)
		}
		archsimd.ClearAVXUpperBits()
	}
	for ; d < len(x); d++ {
		acc[d] = fma32(x[d], s, acc[d])
	}
}

// f32Sign8 is the float32 sign bit in eight lanes (simd_lowk_vnni_amd64.s negates with it).
var f32Sign8 = [8]uint32{0x80000000, 0x80000000, 0x80000000, 0x80000000, 0x80000000, 0x80000000, 0x80000000, 0x80000000}

// tileScoresAVX2 is tileScores eight positions at a time: for each dimension d, q[d] times
// row d of the transposed tile is added to eight running dot products with one fused
// multiply-add each, so every lane is the scalar chain over d in the same order. Half the
// tile (four vectors) runs per pass over the dimensions, so that the accumulators, the
// loaded keys and the broadcast query value fit the sixteen registers; the scale is applied
// after ClearAVXUpperBits, in scalar float32 (the same rounding), and positions outside
// lo..hi get −Inf.
func tileScoresAVX2(scores *[ggmlTile]float32, q, keys []float32, lo, hi int, scale float32) {
	keys = keys[:len(q)*ggmlTile]
	for half := 0; half < ggmlTile; half += ggmlTile / 2 {
		var a0, a1, a2, a3 archsimd.Float32x8
		for d, qd := range q {
			k := (*[ggmlTile / 2]float32)(keys[d*ggmlTile+half : d*ggmlTile+half+ggmlTile/2])
			qv := archsimd.BroadcastFloat32x8(qd)
			a0 = qv.MulAdd(archsimd.LoadFloat32x8((*[8]float32)(k[0:8])), a0)
			a1 = qv.MulAdd(archsimd.LoadFloat32x8((*[8]float32)(k[8:16])), a1)
			a2 = qv.MulAdd(archsimd.LoadFloat32x8((*[8]float32)(k[16:24])), a2)
			a3 = qv.MulAdd(archsimd.LoadFloat32x8((*[8]float32)(k[24:32])), a3)
		}
		out := (*[ggmlTile / 2]float32)(scores[half : half+ggmlTile/2])
		a0.Store((*[8]float32)(out[0:8]))
		a1.Store((*[8]float32)(out[8:16]))
		a2.Store((*[8]float32)(out[16:24]))
		a3.Store((*[8]float32)(out[24:32]))
	}
	archsimd.ClearAVXUpperBits()
	for r := range scores {
		if r < lo || r > hi {
			scores[r] = float32(math.Inf(-1))
		} else {
			scores[r] *= scale
		}
	}
}

// tileExpAVX2 is tileExp eight lanes at a time, with expfAVX2 (vsiluAVX2's arithmetic for
// ggml_v_expf); a step with a lane beyond |n| ≤ 126 other than a masked −Inf (a score far
// below the maximum, or a NaN: rare) is finished by vexp32.
func tileExpAVX2(scores *[ggmlTile]float32, max float32) {
	log2e, shift := archsimd.BroadcastFloat32x8(0x1.715476p+0), archsimd.BroadcastFloat32x8(0x1.8p23)
	limit := archsimd.BroadcastFloat32x8(126)
	mv, negInf := archsimd.BroadcastFloat32x8(max), archsimd.BroadcastFloat32x8(float32(math.Inf(-1)))
	var zero archsimd.Float32x8
	for i := 0; i < ggmlTile; i += 8 {
		lanes := (*[8]float32)(scores[i : i+8])
		x := archsimd.LoadFloat32x8(lanes).Sub(mv)
		n := x.MulAdd(log2e, shift).Sub(shift)
		// Masked positions (−Inf) give 0, as vexp32 does; they are common at the edges
		// of the causal triangle, so they stay on the vector path.
		masked := x.Equal(negInf)
		if n.Greater(limit).Or(n.IsNaN()).ToBits()|(zero.Sub(n).Greater(limit).ToBits()&^masked.ToBits()) != 0 {
			// The differences go through memory: reading max here would put a scalar
			// (legacy SSE) load of it into every iteration, under dirty upper AVX state.
			x.Store(lanes)
			archsimd.ClearAVXUpperBits()
			for l, v := range lanes {
				lanes[l] = vexp32(v)
			}
			continue
		}
		zero.Merge(expfAVX2(x, n), masked).Store(lanes)
	}
	archsimd.ClearAVXUpperBits()
}

// tileAccumulateAVX2 is tileAccumulate 32 values of acc at a time (four vectors held in
// registers across the positions): each lane is the scalar chain of fused multiply-adds
// over the positions in order. len(acc) is a multiple of 16 (the tiled kernel's
// condition); a last group of 16 takes two vectors.
func tileAccumulateAVX2(acc, values []float32, weights *[ggmlTile]float32, lo, hi int) {
	dv := len(acc)
	values = values[:ggmlTile*dv]
	d := 0
	for ; d+32 <= dv; d += 32 {
		a := (*[32]float32)(acc[d : d+32])
		a0, a1 := archsimd.LoadFloat32x8((*[8]float32)(a[0:8])), archsimd.LoadFloat32x8((*[8]float32)(a[8:16]))
		a2, a3 := archsimd.LoadFloat32x8((*[8]float32)(a[16:24])), archsimd.LoadFloat32x8((*[8]float32)(a[24:32]))
		for r := lo; r <= hi; r++ {
			w := archsimd.BroadcastFloat32x8(weights[r])
			v := (*[32]float32)(values[r*dv+d : r*dv+d+32])
			a0 = archsimd.LoadFloat32x8((*[8]float32)(v[0:8])).MulAdd(w, a0)
			a1 = archsimd.LoadFloat32x8((*[8]float32)(v[8:16])).MulAdd(w, a1)
			a2 = archsimd.LoadFloat32x8((*[8]float32)(v[16:24])).MulAdd(w, a2)
			a3 = archsimd.LoadFloat32x8((*[8]float32)(v[24:32])).MulAdd(w, a3)
		}
		a0.Store((*[8]float32)(a[0:8]))
		a1.Store((*[8]float32)(a[8:16]))
		a2.Store((*[8]float32)(a[16:24]))
		a3.Store((*[8]float32)(a[24:32]))
	}
	for ; d+16 <= dv; d += 16 {
		a := (*[16]float32)(acc[d : d+16])
		a0, a1 := archsimd.LoadFloat32x8((*[8]float32)(a[0:8])), archsimd.LoadFloat32x8((*[8]float32)(a[8:16]))
		for r := lo; r <= hi; r++ {
			w := archsimd.BroadcastFloat32x8(weights[r])
			v := (*[16]float32)(values[r*dv+d : r*dv+d+16])
			a0 = archsimd.LoadFloat32x8((*[8]float32)(v[0:8])).MulAdd(w, a0)
			a1 = archsimd.LoadFloat32x8((*[8]float32)(v[8:16])).MulAdd(w, a1)
		}
		a0.Store((*[8]float32)(a[0:8]))
		a1.Store((*[8]float32)(a[8:16]))
	}
	archsimd.ClearAVXUpperBits()
}

// tileScoresAVX512 is tileScoresAVX2 sixteen positions a vector: the four vectors cover the
// whole tile at once, so each dimension's query value is broadcast once. Every lane is the
// same chain of fused multiply-adds over the dimensions, so the scores are the same bits;
// the scale is applied by a vector multiply (the same rounding as the scalar one), and
// only the masked positions are written one by one.
func tileScoresAVX512(scores *[ggmlTile]float32, q, keys []float32, lo, hi int, scale float32) {
	keys = keys[:len(q)*ggmlTile]
	var a0, a1, a2, a3 archsimd.Float32x16
	for d, qd := range q {
		k := (*[ggmlTile]float32)(keys[d*ggmlTile : (d+1)*ggmlTile])
		qv := archsimd.BroadcastFloat32x16(qd)
		a0 = qv.MulAdd(archsimd.LoadFloat32x16((*[16]float32)(k[0:16])), a0)
		a1 = qv.MulAdd(archsimd.LoadFloat32x16((*[16]float32)(k[16:32])), a1)
		a2 = qv.MulAdd(archsimd.LoadFloat32x16((*[16]float32)(k[32:48])), a2)
		a3 = qv.MulAdd(archsimd.LoadFloat32x16((*[16]float32)(k[48:64])), a3)
	}
	storeScaled(scores, a0, a1, a2, a3, scale)
	maskTile(scores, lo, hi)
}

// storeScaled stores a tile's four vectors of dot products times scale (one rounding, as
// the scalar multiply) and clears the upper halves for the scalar code that follows.
func storeScaled(scores *[ggmlTile]float32, a0, a1, a2, a3 archsimd.Float32x16, scale float32) {
	sv := archsimd.BroadcastFloat32x16(scale)
	a0.Mul(sv).Store((*[16]float32)(scores[0:16]))
	a1.Mul(sv).Store((*[16]float32)(scores[16:32]))
	a2.Mul(sv).Store((*[16]float32)(scores[32:48]))
	a3.Mul(sv).Store((*[16]float32)(scores[48:64]))
	archsimd.ClearAVXUpperBits()
}

// maskTile sets the scores of the positions outside lo..hi to −Inf.
func maskTile(scores *[ggmlTile]float32, lo, hi int) {
	for r := range lo {
		scores[r] = float32(math.Inf(-1))
	}
	for r := hi + 1; r < ggmlTile; r++ {
		scores[r] = float32(math.Inf(-1))
	}
}

// tileAccumulateAVX512 is tileAccumulateAVX2 64 values of acc at a time in four 16-lane
// vectors, then 32 and 16; each lane is still the scalar chain over the positions in order.
func tileAccumulateAVX512(acc, values []float32, weights *[ggmlTile]float32, lo, hi int) {
	dv := len(acc)
	values = values[:ggmlTile*dv]
	d := 0
	for ; d+64 <= dv; d += 64 {
		a := (*[64]float32)(acc[d : d+64])
		a0, a1 := archsimd.LoadFloat32x16((*[16]float32)(a[0:16])), archsimd.LoadFloat32x16((*[16]float32)(a[16:32]))
		a2, a3 := archsimd.LoadFloat32x16((*[16]float32)(a[32:48])), archsimd.LoadFloat32x16((*[16]float32)(a[48:64]))
		for r := lo; r <= hi; r++ {
			w := archsimd.BroadcastFloat32x16(weights[r])
			v := (*[64]float32)(values[r*dv+d : r*dv+d+64])
			a0 = archsimd.LoadFloat32x16((*[16]float32)(v[0:16])).MulAdd(w, a0)
			a1 = archsimd.LoadFloat32x16((*[16]float32)(v[16:32])).MulAdd(w, a1)
			a2 = archsimd.LoadFloat32x16((*[16]float32)(v[32:48])).MulAdd(w, a2)
			a3 = archsimd.LoadFloat32x16((*[16]float32)(v[48:64])).MulAdd(w, a3)
		}
		a0.Store((*[16]float32)(a[0:16]))
		a1.Store((*[16]float32)(a[16:32]))
		a2.Store((*[16]float32)(a[32:48]))
		a3.Store((*[16]float32)(a[48:64]))
	}
	accumulate16From(acc, values, weights, lo, hi, d)
}

// accumulate16From is tileAccumulateAVX512's last step: acc's values from d on (a
// multiple of 16 values) 16 at a time, V's rows len(acc) values apart.
func accumulate16From(acc, values []float32, weights *[ggmlTile]float32, lo, hi, d int) {
	dv := len(acc)
	values = values[:ggmlTile*dv]
	for ; d+16 <= dv; d += 16 {
		a := (*[16]float32)(acc[d : d+16])
		a0 := archsimd.LoadFloat32x16(a)
		for r := lo; r <= hi; r++ {
			a0 = archsimd.LoadFloat32x16((*[16]float32)(values[r*dv+d:r*dv+d+16])).MulAdd(archsimd.BroadcastFloat32x16(weights[r]), a0)
		}
		a0.Store(a)
	}
	archsimd.ClearAVXUpperBits()
}

//go:noescape
func tileExpSumAVX512(scores *[ggmlTile]float32, max float32) (sum float64, ok bool)

//go:noescape
func tileMaxAVX512(scores *[ggmlTile]float32) (max float32, nan bool)

//go:noescape
func tileAccumulate2Blocks(acc0, acc1, values, w0, w1 *float32, positions, dv int)

// tileAccumulate2AVX512 is tileAccumulateAVX512 for two rows against the same tile's
// values, each lane still its row's scalar chain over the positions in order: 64 values
// of both rows at a time in assembly (tileAccumulate2Blocks), where each values vector
// loaded once feeds both rows and the eight independent chains keep both FMA ports busy
// (one row's four waited on their own latency, an FMA's four cycles a position), then
// 16 at a time. len(acc0) is a multiple of 16.
func tileAccumulate2AVX512(acc0, acc1, values []float32, weights0, weights1 *[ggmlTile]float32, lo, hi int) {
	dv := len(acc0)
	acc1, values = acc1[:dv], values[:ggmlTile*dv]
	d := dv &^ 63
	if d > 0 {
		tileAccumulate2Blocks(&acc0[0], &acc1[0], &values[lo*dv], &weights0[lo], &weights1[lo], hi-lo+1, dv)
	}
	accumulate16From(acc0, values, weights0, lo, hi, d)
	accumulate16From(acc1, values, weights1, lo, hi, d)
}

//go:noescape
func tileAccumulate4Blocks(acc *[4]*float32, values *float32, w *[4]*float32, positions, dv int)

// tileAccumulate4AVX512 is tileAccumulate2AVX512 for four rows (tileAccumulate4Blocks).
func tileAccumulate4AVX512(acc *[4][]float32, values []float32, weights *[4]*[ggmlTile]float32, lo, hi int) {
	dv := len(acc[0])
	values = values[:ggmlTile*dv]
	d := dv &^ 63
	if d > 0 {
		var rows, w [4]*float32
		for r := range rows {
			rows[r], w[r] = &acc[r][:dv][0], &weights[r][lo]
		}
		tileAccumulate4Blocks(&rows, &values[lo*dv], &w, hi-lo+1, dv)
	}
	for r, row := range acc {
		accumulate16From(row[:dv], values, weights[r], lo, hi, d)
	}
}

//go:noescape
func tileDots4AVX512(scores *[4]*[ggmlTile]float32, q *[4]*float32, keys *float32, dk int, scale float32)

// tileScores4AVX512 is tileScores2AVX512 for four rows (tileDots4AVX512).
func tileScores4AVX512(scores *[4]*[ggmlTile]float32, q *[4][]float32, keys []float32, lo, hi int, scale float32) {
	dk := len(q[0])
	if dk == 0 {
		tileScores4Go(scores, q, keys, lo, hi, scale)
		return
	}
	_ = keys[dk*ggmlTile-1]
	var rows [4]*float32
	for r := range rows {
		rows[r] = &q[r][:dk][0]
	}
	tileDots4AVX512(scores, &rows, &keys[0], dk, scale)
	for _, sc := range scores {
		maskTile(sc, lo, hi)
	}
}

//go:noescape
func tileDots2AVX512(scores0, scores1 *[ggmlTile]float32, q0, q1, keys *float32, dk int, scale float32)

// tileScores2AVX512 is tileScoresAVX512 for two query rows against the same tile
// (tileDots2AVX512, in assembly): each key vector loaded once feeds both rows' chains,
// and the eight independent chains keep both FMA ports busy where four waited on each
// other's latency. Every lane is the same chain of fused multiply-adds over the
// dimensions, then the same rounded multiply by the scale.
func tileScores2AVX512(scores0, scores1 *[ggmlTile]float32, q0, q1, keys []float32, lo, hi int, scale float32) {
	if len(q0) == 0 {
		tileScores2Go(scores0, scores1, q0, q1, keys, lo, hi, scale)
		return
	}
	_, _ = keys[len(q0)*ggmlTile-1], q1[len(q0)-1]
	tileDots2AVX512(scores0, scores1, &q0[0], &q1[0], &keys[0], len(q0), scale)
	maskTile(scores0, lo, hi)
	maskTile(scores1, lo, hi)
}

// madFloatsAVX2 is madFloatsGo eight lanes a step, each a fused multiply-add.
func madFloatsAVX2(row, k []float32, delta float32) {
	k = k[:len(row)]
	whole := len(row) &^ 7
	dv := archsimd.BroadcastFloat32x8(delta)
	for i := 0; i < whole; i += 8 {
		f32x8s(k[i:i+8]).MulAdd(dv, f32x8s(row[i:i+8])).Store((*[8]float32)(row[i : i+8]))
	}
	archsimd.ClearAVXUpperBits()
	madFloatsGo(row[whole:], k[whole:], delta)
}

// convRowAVX2 is convRowGo eight channels a step, each lane a channel's terms in tap
// order as leftoverTerm adds them: the same bits.
func convRowAVX2(dst, rows, kernel []float32) {
	C := len(dst)
	rows, whole := rows[:len(kernel)], C&^7
	unfused := len(kernel) / C &^ 7 * C // the taps leftoverTerm adds unfused, in values
	for ch := 0; ch < whole; ch += 8 {
		var sum archsimd.Float32x8
		for i := ch; i < len(kernel); i += C {
			r, w := f32x8s(rows[i:i+8]), f32x8s(kernel[i:i+8])
			if i < unfused {
				sum = sum.Add(r.Mul(w))
			} else {
				sum = r.MulAdd(w, sum)
			}
		}
		sum.Store((*[8]float32)(dst[ch : ch+8]))
	}
	archsimd.ClearAVXUpperBits()
	convColumns(dst, rows, kernel, whole)
}
