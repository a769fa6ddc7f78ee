#!/bin/sh
# Regenerates moerun.ptx and moerun.ptx.sum; run it through `go generate ./backend/cuda/kernels`
# (needs nvcc, no GPU).
#
# -arch=compute_70 emits PTX only, for Volta and every later GPU: the driver compiles it for
# the GPU at hand when the module is loaded, so one embedded file serves them all. CUDA 11.8
# writes PTX ISA 7.8, which drivers from R520 on accept; a newer nvcc writes a newer ISA
# and so raises the minimum driver. No fast math: the dequantizers are bit-exact with
# package tensor's and must stay so.
#
# nvcc 11.8 refuses gcc 12 and later as its host compiler; g++-11 is used where installed
# (a supported compiler, rather than -allow-unsupported-compiler's untested combination).
# Only the preprocessor and the host stubs see it, so the PTX does not depend on it.
set -eu
cd "$(dirname "$0")"
set -- -ptx -arch=compute_70 -O3 -std=c++17
if command -v g++-11 >/dev/null 2>&1; then
	set -- "$@" -ccbin g++-11
fi
"${NVCC:-nvcc}" "$@" -o moerun.ptx matvec.cu
# The sum covers everything the PTX is built from (kernels_test.go recomputes it over the
# same files), so a stale moerun.ptx fails the tests.
sha256sum gen.sh *.cu *.cuh >moerun.ptx.sum
