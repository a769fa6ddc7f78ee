//go:build cuda

package cuda

import (
	"testing"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/backend/backendtest"
	"github.com/moerun/moerun/tensor"
)

// TestConformance runs the backend conformance suite (package backendtest) on CUDA0: every
// operation against a fresh CPU reference, within the suite's bounds for a backend with its
// own kernels (not bit-exact: the GPU sums in another order). On a machine without a GPU it
// skips, or fails under MOERUN_REQUIRE_GPU=1; tools/gpu/check.sh runs it on the GPU machine.
func TestConformance(t *testing.T) {
	needGPU(t)
	pool := tensor.NewPool(4)
	t.Cleanup(pool.Close)
	backendtest.Run(t, func(t *testing.T) backend.Backend {
		b, err := New(0, Options{Host: pool})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}, backendtest.Options{})
}
