//go:build goexperiment.simd && amd64

package tensor

import (
	"reflect"
	"simd/archsimd"
	"testing"
)

// TestSIMDInstalled checks that every hot type runs its vector kernel when the CPU can:
// the matmul and DotRow reach the kernels through the traits table only.
func TestSIMDInstalled(t *testing.T) {
	if !archsimd.X86.AVX2() || !archsimd.X86.FMA() {
		if len(scalarVecDot) != 0 {
			t.Fatalf("vector kernels installed on a CPU without AVX2/FMA: %v", simdTypes(t))
		}
		t.Skip("CPU without AVX2 and FMA: the scalar kernels run")
	}
	for _, typ := range simdHotTypes {
		scalar, ok := scalarVecDot[typ]
		if !ok || scalar == nil {
			t.Errorf("%s: no vector kernel installed", typ)
			continue
		}
		if reflect.ValueOf(traits[typ].VecDot).Pointer() == reflect.ValueOf(scalar).Pointer() {
			t.Errorf("%s: VecDot is still the scalar kernel", typ)
		}
	}
}
