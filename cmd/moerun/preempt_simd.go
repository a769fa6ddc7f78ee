//go:build goexperiment.simd && amd64 && unix

package main

import (
	"os"
	"syscall"
)

// avoidAsyncPreemption re-executes moerun with GODEBUG=asyncpreemptoff=1, which only the
// environment can set. With GOEXPERIMENT=simd (our vector kernels), Go 1.26's asyncPreempt
// restores the full vector registers and returns without VZEROUPPER, so all later
// legacy-SSE code (every scalar float operation, math.Exp) runs with dirty upper register
// halves at ~80x its cost until something clears them. Measured on the 8-layer
// Qwen3-30B-A3B benchmark model: prefill 10.1 -> 46.8 tokens/s. Goroutines are still
// preempted at function calls, which every kernel loop makes. If the re-exec fails, moerun
// simply runs as it is.
func avoidAsyncPreemption() {
	env, changed := asyncPreemptOffEnv(os.Environ())
	if !changed {
		return
	}
	exe, err := os.Executable()
	if err != nil {
		return
	}
	_ = syscall.Exec(exe, os.Args, env) // returns only on failure
}
