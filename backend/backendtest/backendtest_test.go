package backendtest_test

import (
	"testing"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/backend/backendtest"
	"github.com/moerun/moerun/backend/cpu"
	"github.com/moerun/moerun/backend/sim"
	"github.com/moerun/moerun/tensor"
)

// The simulated GPU: memory of its own, the CPU's kernels; it must agree exactly.
func TestSimulatedGPU(t *testing.T) {
	backendtest.Run(t, func(t *testing.T, pool *tensor.Pool) backend.Backend {
		b := sim.New(0, 1<<30, pool)
		t.Cleanup(func() { b.Close() })
		return b
	})
}

// A second CPU backend under another name: the suite's own check (its operands cross
// nowhere, its answers are the reference's).
func TestCPU(t *testing.T) {
	backendtest.Run(t, func(t *testing.T, pool *tensor.Pool) backend.Backend {
		b := cpu.New(cpu.Options{Device: backend.GPU(1, 1<<30), Pool: pool})
		t.Cleanup(func() { b.Close() })
		return b
	})
}

// A simulated GPU without the element-wise kernels: those checks are skipped, the rest run.
func TestPartialBackend(t *testing.T) {
	backendtest.Run(t, func(t *testing.T, pool *tensor.Pool) backend.Backend {
		b := sim.New(0, 1<<30, pool, backend.OpRMSNorm, backend.OpAdd, backend.OpRoPE)
		t.Cleanup(func() { b.Close() })
		return b
	})
}
