// Host definitions of the CUDA features matvec.cu and quants.cuh use, so that a plain C++
// compiler builds the kernels unchanged and emulate.cc runs them on the CPU. quants.cuh
// includes <cuda_fp16.h> first; with this directory on the include path it gets this file.
//
// Each intrinsic follows the CUDA documentation (and PTX's definition of the instruction
// behind it) literally; a warp's lanes run as cooperative fibers (emulate.cc) that switch at
// every shuffle, so the kernels' control flow runs exactly as written.
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>

#define __device__
#define __host__
#define __global__
#define __forceinline__ inline
#define __launch_bounds__(...)
// A __shared__ variable is one static variable: blocks run one after another and a block's
// threads all see it, as on the GPU. The kernels that use shared memory run one-warp blocks
// ordered by __syncwarp (there is no __syncthreads here).
#define __shared__ static

struct uint2 {
    unsigned int x, y;
};
struct uint4 {
    unsigned int x, y, z, w;
};
struct float4 {
    float x, y, z, w;
};
struct dim3 {
    unsigned int x, y, z;
};

inline uint4 make_uint4(unsigned int x, unsigned int y, unsigned int z, unsigned int w) { return {x, y, z, w}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }

// The thread's coordinates: emulate.cc sets them before it resumes a lane.
extern dim3 threadIdx, blockIdx, blockDim, gridDim;

// checkLoad (emulate.cc) aborts unless p is size-aligned, as the GPU requires, and [p,
// p+size) lies in a buffer of the launch (its size rounded up to 4 bytes: the contract).
void checkLoad(const void* p, unsigned long size);

template <class T>
inline T __ldg(const T* p) {
    checkLoad(p, sizeof(T));
    return *p;
}

inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }

inline float __int_as_float(int i) {
    float f;
    memcpy(&f, &i, 4);
    return f;
}
inline unsigned int __float_as_uint(float f) {
    unsigned int i;
    memcpy(&i, &f, 4);
    return i;
}
inline float __uint_as_float(unsigned int i) {
    float f;
    memcpy(&f, &i, 4);
    return f;
}

// __byte_perm: byte n of the result is byte s[4n+2 : 4n] of the 8 bytes y:x (x the low
// four); the selector's bit 3 of each nibble and its upper 16 bits are not used.
inline unsigned int __byte_perm(unsigned int x, unsigned int y, unsigned int s) {
    const uint64_t v = uint64_t(y) << 32 | x;
    unsigned int r = 0;
    for (int n = 0; n < 4; n++) r |= unsigned((v >> (8 * ((s >> (4 * n)) & 7))) & 0xFF) << (8 * n);
    return r;
}

// __funnelshift_r: the low 32 bits of hi:lo shifted right by shift & 31.
inline unsigned int __funnelshift_r(unsigned int lo, unsigned int hi, unsigned int shift) {
    return unsigned(((uint64_t(hi) << 32 | lo) >> (shift & 31)) & 0xFFFFFFFF);
}

// The rounded operations: with -ffp-contract=off every host operation is rounded alone.
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }

struct __half {
    unsigned short bits;
};
inline __half __ushort_as_half(unsigned short b) { return {b}; }
inline unsigned short __half_as_ushort(__half h) { return h.bits; }

// __half2float widens IEEE binary16 exactly, NaN payloads kept.
inline float __half2float(__half h) {
    const unsigned int sign = unsigned(h.bits >> 15) << 31, exp = (h.bits >> 10) & 31, mant = h.bits & 1023;
    if (exp == 31) return __uint_as_float(sign | 0x7F800000u | mant << 13);
    if (exp != 0) return __uint_as_float(sign | (exp + 112) << 23 | mant << 13);
    const float v = float(mant) * (1.0f / 16777216.0f);
    return sign ? -v : v;
}

// __float2half_rn rounds to the nearest binary16, ties to even (cvt.rn.f16.f32): overflow
// gives infinity, values below half the smallest subnormal zero; a NaN stays a NaN.
inline __half __float2half_rn(float f) {
    const unsigned int b = __float_as_uint(f), mant = b & 0x7FFFFF;
    const unsigned short sign = (b >> 16) & 0x8000;
    const int exp = (b >> 23) & 0xFF, e = exp - 127 + 15;
    if (exp == 0xFF) return {(unsigned short)(sign | (mant ? 0x7E00 : 0x7C00))};
    if (e >= 0x1F) return {(unsigned short)(sign | 0x7C00)};
    if (e < -10) return {sign};
    // The binary16 bits before rounding (a normal's exponent and mantissa, or a
    // subnormal's shifted significand) and the bits shifted out.
    unsigned int shift, h;
    if (e > 0) {
        shift = 13, h = unsigned(e) << 10 | mant >> 13;
    } else {
        shift = unsigned(14 - e), h = (mant | 0x800000) >> shift;
    }
    const unsigned int rest = (mant | (e > 0 ? 0 : 0x800000)) & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (h & 1))) h++;  // a carry may raise the exponent, up to infinity
    return {(unsigned short)(sign | h)};
}

float __shfl_xor_sync(unsigned int mask, float v, int laneMask);
void __syncwarp(unsigned int mask = 0xFFFFFFFFu);
double __shfl_xor_sync(unsigned int mask, double v, int laneMask);
