package backendtest_test

import (
	"testing"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/backend/backendtest"
	"github.com/moerun/moerun/backend/cpu"
)

// A second CPU backend is the reference itself: the suite's self-check.
func TestCPU(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) backend.Backend {
		return cpu.New(cpu.Options{Threads: 1})
	}, backendtest.Options{Exact: true})
}
