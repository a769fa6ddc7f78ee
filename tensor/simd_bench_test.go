package tensor

import (
	"fmt"
	"testing"
)

// BenchmarkVecDotSIMD times one 4096-value row dot product (operands from benchOperands,
// cache-hot) with the scalar kernel and with the vector kernel where this build has one.
// MB/s counts the weight row's bytes.
//
//	GOEXPERIMENT=simd go test -run '^$' -bench VecDotSIMD ./tensor
func BenchmarkVecDotSIMD(b *testing.B) {
	type kernel struct {
		name string
		dot  func(n int, w, a []byte) float32
	}
	for _, typ := range simdHotTypes {
		kernels := []kernel{{"scalar", active.traits[typ].VecDot}}
		if scalar, ok := scalarVecDots()[typ]; ok {
			kernels = []kernel{{"scalar", scalar}, {"simd", active.traits[typ].VecDot}}
		}
		for _, k := range kernels {
			b.Run(fmt.Sprintf("type=%s/kernel=%s", typ, k.name), func(b *testing.B) {
				w, a := benchOperands(b, typ)
				b.SetBytes(int64(len(w)))
				var sink float32
				for b.Loop() {
					sink += k.dot(benchRow, w, a)
				}
				_ = sink
			})
		}
	}
}
