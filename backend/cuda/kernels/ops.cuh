// The operations between the products, on F32 values: each entry point is listed in
// MOERUN_OPS, which package kernels' Ops and the emulator's entry table mirror. Every
// scalar parameter is 8 bytes: pointers, 64-bit integers (i64) and float parameters passed
// as doubles (exact: each is a float32 widened).
//
// Rows of a tensor are `stride` elements apart (a strided view's rows need not be
// contiguous with each other), `cols` elements each. The element-wise kernels run
// blockDim = (kOpThreads, 1, 1) threads and any grid.x ≥ 1 (at most 2^31 - 1): blocks
// stride over the rows, threads over a row's columns. No kernel here needs a barrier or
// shared memory.
//
// copy_f32(dst, src, cols, rows, dstStride, srcStride): dst[r][c] = src[r][c].
#pragma once

constexpr int kOpThreads = 128;

extern "C" __global__ void __launch_bounds__(kOpThreads)
    copy_f32(float* dst, const float* src, i64 cols, i64 rows, i64 dstStride, i64 srcStride) {
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x)
        for (i64 c = threadIdx.x; c < cols; c += blockDim.x) dst[r * dstStride + c] = __ldg(src + r * srcStride + c);
}

// MOERUN_OPS lists the entry points above.
#define MOERUN_OPS(X) X(copy_f32)
