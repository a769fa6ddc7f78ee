package tensor_test

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/moerun/moerun/tensor"
)

// TestSIMDMatchesScalarOnFixtures runs the installed kernels (the vector ones where this
// build has them) and the scalar ones on every row of the fixture tensors, edge rows
// included (all-zero row, f16-subnormal scales, ±1000 scale, outliers), against ggml's
// encodings of the test vectors: within 1e-5·Σ|w·x| of each other, the bound of
// testdata/quant/README.md §6.
func TestSIMDMatchesScalarOnFixtures(t *testing.T) {
	fx := quantFixtureT(t)
	vectors, dots := activationsT(t)
	const n = 512
	for _, ft := range fx.types {
		typ, data := fx.weight(t, ft.Name)
		tr, err := tensor.TraitsOf(typ)
		if err != nil || tr.VecDot == nil {
			continue
		}
		var want activationDots
		if err := json.Unmarshal(dots[ft.Name], &want); err != nil {
			t.Fatal(err)
		}
		scalar := tensor.ScalarVecDot(typ)
		rowBytes := len(data) / 64
		weights, acts := make([]float32, n), make([]float32, n)
		for _, v := range vectors {
			act := v.encoding(t, want.Activation)
			if err := tensor.Dequantize(tr.VecDotType, act, acts); err != nil {
				t.Fatal(err)
			}
			for r := range 64 {
				row := data[r*rowBytes : (r+1)*rowBytes]
				got, ref := tr.VecDot(n, row, act), scalar(n, row, act)
				if err := tensor.Dequantize(typ, row, weights); err != nil {
					t.Fatal(err)
				}
				var magnitude float64
				for k, w := range weights {
					magnitude += math.Abs(float64(w) * float64(acts[k]))
				}
				if diff := math.Abs(float64(got) - float64(ref)); !(diff <= 1e-5*magnitude) {
					t.Errorf("%s vector %s row %d: %g, scalar %g: differs by %g > 1e-5·%g", typ, v.Name, r, got, ref, diff, magnitude)
				}
			}
		}
	}
}
