package tensor

// SIMD dot products. Built with GOEXPERIMENT=simd on amd64 (simd_*_amd64.go), the AVX2 and
// AVX-512 levels (kernels.go, simd_amd64.go) give the hot weight types (Q4_K, Q5_K, Q6_K,
// Q8_0, Q4_0, IQ4_XS, MXFP4, F16, BF16, F32 and more) vector kernels where the CPU has them.
// The matmul and DotRow then use them. Without the experiment, or on another CPU, or under
// MOERUN_ISA=generic, the scalar kernels run.
//
// The vector kernels add up the integer block sums in a different order (exact) and
// accumulate the float terms in eight lanes with fused multiply-adds, as ggml's own x86
// kernels do, so their results differ from the scalar kernels in the last bits: within
// 1e-5·Σ|w·x| (testdata/quant/README.md §6). The F16 kernel is the exception: it keeps
// the scalar kernel's float64 sum, bit for bit, which the attention kernel relies on.
//
// Where the speed comes from and what the Go 1.26 compiler needs for it is described in
// simd_amd64.go.
