//go:build !(goexperiment.simd && amd64 && unix)

package main

// avoidAsyncPreemption has nothing to avoid without the SIMD kernels (see preempt_simd.go).
func avoidAsyncPreemption() {}
