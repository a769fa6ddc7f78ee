package backendtest_test

import (
	"testing"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/backend/backendtest"
	"github.com/moerun/moerun/backend/sim"
	"github.com/moerun/moerun/tensor"
)

// The simulated GPU computes with the CPU's kernels on memory the host cannot address: it
// must give the reference's bits, every value crossing through Set and Get.
func TestSim(t *testing.T) {
	pool := tensor.NewPool(1) // as many workers as the reference's, for Exact
	t.Cleanup(pool.Close)
	n := 0
	backendtest.Run(t, func(t *testing.T) backend.Backend {
		n++
		return sim.New(n%2, 1<<30, pool)
	}, backendtest.Options{Exact: true})
}
