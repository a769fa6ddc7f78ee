//go:build !(goexperiment.simd && amd64)

package tensor

import "testing"

// TestSIMDNotInstalled: without the experiment the scalar kernels are the only ones.
func TestSIMDNotInstalled(t *testing.T) {
	if len(scalarVecDots()) != 0 {
		t.Fatalf("%d vector kernels installed in a build without them", len(scalarVecDots()))
	}
}
