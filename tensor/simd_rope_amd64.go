//go:build goexperiment.simd && amd64

package tensor

import "simd/archsimd"

// The RoPE rotation eight lanes at a time, with float32 fused multiply-adds where the
// scalar code's fma32 rounds through float64: ggml's build fuses in float32, and the two
// differ only where that double rounding lands on a float32 tie. Scalar RoPE was 17 µs of
// each Qwen3-30B-A3B layer's decode step (32 query and 4 key heads of 128), paid with one
// worker idle.

var (
	signBits       = archsimd.BroadcastUint32x8(1 << 31)
	ropeEvenLanes  = archsimd.LoadUint32x8(&[8]uint32{0, 0, 2, 2, 4, 4, 6, 6})
	ropeOddLanes   = archsimd.LoadUint32x8(&[8]uint32{1, 1, 3, 3, 5, 5, 7, 7})
	ropeCosSinDeal = archsimd.LoadUint32x8(&[8]uint32{0, 4, 1, 5, 2, 6, 3, 7})
	ropeSinCosDeal = archsimd.LoadUint32x8(&[8]uint32{4, 0, 5, 1, 6, 2, 7, 3})
)

// ropeNeoXAVX2 is rotateNeoX for eight pairs at a time (each row's x[i..i+7] with
// x[half+i..half+i+7]); pairs past a multiple of eight are left to the scalar code.
func ropeNeoXAVX2(x []float32, rowLen, rows int, cos, sin []float32) {
	half := len(cos)
	vec := half &^ 7
	for i := 0; i < vec; i += 8 {
		c := archsimd.LoadFloat32x8((*[8]float32)(cos[i : i+8]))
		s := archsimd.LoadFloat32x8((*[8]float32)(sin[i : i+8]))
		for h := range rows {
			w := x[h*rowLen : h*rowLen+2*half]
			p0, p1 := (*[8]float32)(w[i:i+8]), (*[8]float32)(w[half+i:half+i+8])
			x0, x1 := archsimd.LoadFloat32x8(p0), archsimd.LoadFloat32x8(p1)
			negX1Sin := x1.Mul(s).AsUint32x8().Xor(signBits).AsFloat32x8()
			x0.MulAdd(c, negX1Sin).Store(p0)
			x0.MulAdd(s, x1.Mul(c)).Store(p1)
		}
	}
	archsimd.ClearAVXUpperBits()
	if vec < half {
		rotatePairs(x, rowLen, rows, cos, sin, vec, half, 1)
	}
}

// ropeNormalAVX2 is rotateNormal for four pairs (eight adjacent elements) at a time: with
// each pair's x0 and x1 both repeated in their two lanes, [x0·cos − x1·sin, x0·sin + x1·cos]
// is one alternating fused multiply-subtract/add of x0 by [cos, sin] and x1·[sin, cos].
func ropeNormalAVX2(x []float32, rowLen, rows int, cos, sin []float32) {
	half := len(cos)
	vec := half &^ 3
	for i := 0; i < vec; i += 4 {
		var both archsimd.Float32x8
		both = both.SetLo(archsimd.LoadFloat32x4((*[4]float32)(cos[i : i+4]))).SetHi(archsimd.LoadFloat32x4((*[4]float32)(sin[i : i+4])))
		cs, sc := both.Permute(ropeCosSinDeal), both.Permute(ropeSinCosDeal)
		for h := range rows {
			p := (*[8]float32)(x[h*rowLen+2*i : h*rowLen+2*i+8])
			v := archsimd.LoadFloat32x8(p)
			x0, x1 := v.Permute(ropeEvenLanes), v.Permute(ropeOddLanes)
			x0.MulAddSub(cs, x1.Mul(sc)).Store(p)
		}
	}
	archsimd.ClearAVXUpperBits()
	if vec < half {
		rotatePairs(x, rowLen, rows, cos, sin, vec, 1, 2)
	}
}
