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
// The row kernels (rms_norm_f32, l2_norm_f32) give each row a warp: blockDim is
// (kOpThreads, 1, 1) as for the others, rows go kOpThreads/32 to a block, grid.x =
// ceil(rows / (kOpThreads/32)) or fewer.
//
// copy_f32(dst, src, cols, rows, dstStride, srcStride): dst[r][c] = src[r][c].
// add_f32, mul_f32(dst, a, b, cols, rows, dstStride, aStride, bStride): dst = a + b or a·b,
//   bStride 0 to repeat b's one row over every row of a.
// scale_f32(dst, x, s, cols, rows, dstStride, xStride): dst = x·s.
// scale_rows_f32(dst, x, s, cols, rows, dstStride, xStride): dst[r] = x[r]·s[r].
// sigmoid_f32, softplus_f32, silu_f32(dst, x, cols, rows, dstStride, xStride).
// swiglu_f32(dst, gate, up, cols, rows, dstStride, gateStride, upStride): silu(gate)·up.
// swiglu_oai_f32(dst, gate, up, alpha, limit, cols, rows, dstStride, gateStride, upStride).
// rms_norm_f32(dst, x, w, eps, cols, rows, dstStride, xStride): x / sqrt(mean(x²) + eps),
//   times w (one row) unless w is null.
// l2_norm_f32(x, eps, cols, rows, stride): x / max(‖x‖, eps), in place.
// add_id_f32(x, b, ids, cols, rows, bRows, xStride, bStride): x[r] += b[ids[r]] where
//   0 ≤ ids[r] < bRows (the router's ids; -1, an unused slot, leaves the row alone).
// map_ids_i32(dst, ids, table, n, tableLen): dst[i] = table[ids[i]] for the n elements of
//   ids, -1 where ids[i] is negative or not below tableLen (a thread per element, any grid).
// weighted_sum_f32(dst, y, w, k, cols, rows): dst[t] = Σ_j y[t·k+j]·w[t·k+j] over rows
//   tokens t, each product rounded before it is added, in slot order (y and dst contiguous).
// rope_f32(x, table, rowLen, rows, heads, half, offset, neox): rotates, in each of rows rows
//   of rowLen values (contiguous, heads rows a token), the window of 2·half values at offset
//   by token t's angles: table holds for each token half cosines then half sines (as
//   tensor.RoPE's Angles). NeoX (neox != 0) pairs x[i] with x[i+half], normal x[2i] with
//   x[2i+1]; x0·cos − x1·sin and x0·sin + x1·cos, the first product fused as in ggml.
// set_rows_f32, set_rows_f16, set_rows_q8_0(dst, first, src, cols, rows, dstRowBytes,
//   srcStride): row r of src (F32) converted into row first[0] + r of dst, at byte
//   (first[0] + r)·dstRowBytes. The row comes from device memory, not a parameter, so that
//   a CUDA graph of a decode step replays unchanged at the next position. F16 rounds to
//   nearest even; Q8_0 is ggml's x86 activation quantizer, as tensor.QuantizeActivations:
//   d = amax/127, quants round-to-even(x·127/amax), clamped to [-128, 127]. dst must be
//   2-byte aligned (Q8_0's blocks are 34 bytes); Q8_0 rows are 32-value blocks, a warp each.
// quantize_act_f32(dst, x, cols, rows, kind): rows of x as the CPU matmul quantizes them for
//   a quantized weight (kind kActQ8_0 or kActQ8_K), expanded back to floats; a warp per
//   block of 32 or 256 values (see the kernel).
// attention_f32(dst, q, k, v, sinks, pos, heads, kvHeads, dk, dv, kType, vType,
//   kPosStride, vPosStride, scale, window, tokens, ggml, cells): flash attention, a
//   warp per (token, query head): query row t·heads + h (dk floats, contiguous) over the cache
//   positions token t sees (j ≤ pos[t], j < kvLen, pos[t] − j < window unless window is 0),
//   where kvLen is pos[tokens] (in device memory with the positions, as set_rows's row is),
//   in position order, of KV head h / (heads / kvHeads); the caches hold per position kvHeads
//   rows of dk (K) or dv (V) values of type kType or vType (kCacheF32, kCacheF16, kCacheQ8_0),
//   positions kPosStride or vPosStride bytes apart, heads one row's bytes apart; position j
//   is at row j mod cells of both, a sliding window's ring cache (tensor.KV.Cells). The softmax runs online over the
//   positions as tensor's kernels do (float32 scores and sums, fused steps); a sink logit per
//   head (sinks, or null) joins its denominator after them. dst row t·heads + h gets dv
//   floats. ggml != 0 takes ggml-cpu's per-row numerics (tensor.AttnGGML below its tiled
//   kernel's batches): queries rounded to F16 for an F16 K, or quantized to Q8_0 blocks for a
//   Q8_0 K (a score is then the blocks' integer dot products times both scales), and an F16 V
//   accumulated in F16, rounded after every step. dk and dv are at most kAttnMaxDim. Rows = tokens·heads go a warp each, as the
//   norms' rows.
// route_f32(ids, weights, logits, bias, scratch, experts, used, gating, norm, scale, groups,
//   groupsUsed, serMin, serThreshold, tokens): the MoE router of tensor.Router.Route, a
//   thread per token (grid.x = ceil(tokens / kOpThreads), or fewer): logits has experts
//   values per token, bias (or null) experts; ids and weights receive used slots per token;
//   scratch holds (3·experts + groups) 4-byte words per token. gating is tensor.Gating's
//   value; norm divides by the weights' sum; scale applies unless 0 or 1; SER is off unless
//   serMin and serThreshold are both positive.
//
// The arithmetic is package tensor's, operation for operation: each product that feeds an
// addition is rounded first (__fmul_rn, never fused), the norms sum the rounded squares in
// double. expf and logf are CUDA's (within 2 ulp; tensor uses glibc's), so those kernels
// match the CPU within the conformance suite's bounds rather than bit for bit.
#pragma once

constexpr int kOpThreads = 128;
constexpr int kRowsPerOpBlock = kOpThreads / 32;

// forEach runs f(r, c) for every element of a rows × cols tensor, blocks over rows.
template <class F>
__device__ __forceinline__ void forEach(i64 cols, i64 rows, F f) {
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x)
        for (i64 c = threadIdx.x; c < cols; c += blockDim.x) f(r, c);
}

__device__ __forceinline__ float sigmoidOf(float v) { return 1.0f / (1.0f + expf(-v)); }
__device__ __forceinline__ float siluOf(float v) { return v / (1.0f + expf(-v)); }

extern "C" __global__ void __launch_bounds__(kOpThreads)
    copy_f32(float* dst, const float* src, i64 cols, i64 rows, i64 dstStride, i64 srcStride) {
    forEach(cols, rows, [&](i64 r, i64 c) { dst[r * dstStride + c] = src[r * srcStride + c]; });
}

extern "C" __global__ void __launch_bounds__(kOpThreads)
    add_f32(float* dst, const float* a, const float* b, i64 cols, i64 rows, i64 dstStride, i64 aStride, i64 bStride) {
    forEach(cols, rows, [&](i64 r, i64 c) { dst[r * dstStride + c] = __fadd_rn(a[r * aStride + c], b[r * bStride + c]); });
}

extern "C" __global__ void __launch_bounds__(kOpThreads)
    mul_f32(float* dst, const float* a, const float* b, i64 cols, i64 rows, i64 dstStride, i64 aStride, i64 bStride) {
    forEach(cols, rows, [&](i64 r, i64 c) { dst[r * dstStride + c] = __fmul_rn(a[r * aStride + c], b[r * bStride + c]); });
}

extern "C" __global__ void __launch_bounds__(kOpThreads)
    scale_f32(float* dst, const float* x, double s, i64 cols, i64 rows, i64 dstStride, i64 xStride) {
    const float f = float(s);
    forEach(cols, rows, [&](i64 r, i64 c) { dst[r * dstStride + c] = __fmul_rn(x[r * xStride + c], f); });
}

extern "C" __global__ void __launch_bounds__(kOpThreads)
    scale_rows_f32(float* dst, const float* x, const float* s, i64 cols, i64 rows, i64 dstStride, i64 xStride) {
    forEach(cols, rows, [&](i64 r, i64 c) { dst[r * dstStride + c] = __fmul_rn(x[r * xStride + c], s[r]); });
}

extern "C" __global__ void __launch_bounds__(kOpThreads)
    sigmoid_f32(float* dst, const float* x, i64 cols, i64 rows, i64 dstStride, i64 xStride) {
    forEach(cols, rows, [&](i64 r, i64 c) { dst[r * dstStride + c] = sigmoidOf(x[r * xStride + c]); });
}

// softplus_f32: x above 20 as it is, else log(1 + e^x), the logarithm taken in double.
extern "C" __global__ void __launch_bounds__(kOpThreads)
    softplus_f32(float* dst, const float* x, i64 cols, i64 rows, i64 dstStride, i64 xStride) {
    forEach(cols, rows, [&](i64 r, i64 c) {
        const float v = x[r * xStride + c];
        dst[r * dstStride + c] = v > 20.0f ? v : float(log(double(1.0f + expf(v))));
    });
}

extern "C" __global__ void __launch_bounds__(kOpThreads)
    silu_f32(float* dst, const float* x, i64 cols, i64 rows, i64 dstStride, i64 xStride) {
    forEach(cols, rows, [&](i64 r, i64 c) { dst[r * dstStride + c] = siluOf(x[r * xStride + c]); });
}

extern "C" __global__ void __launch_bounds__(kOpThreads)
    swiglu_f32(float* dst, const float* gate, const float* up, i64 cols, i64 rows, i64 dstStride, i64 gateStride,
               i64 upStride) {
    forEach(cols, rows, [&](i64 r, i64 c) {
        dst[r * dstStride + c] = __fmul_rn(siluOf(gate[r * gateStride + c]), up[r * upStride + c]);
    });
}

// swiglu_oai_f32: g = min(gate, limit), u = clamp(up, -limit, limit),
// g·sigmoid(alpha·g)·(u + 1), as tensor.SwiGLUOAI rounds it.
extern "C" __global__ void __launch_bounds__(kOpThreads)
    swiglu_oai_f32(float* dst, const float* gate, const float* up, double alpha, double limit, i64 cols, i64 rows,
                   i64 dstStride, i64 gateStride, i64 upStride) {
    const float a = float(alpha), l = float(limit);
    forEach(cols, rows, [&](i64 r, i64 c) {
        const float g = fminf(gate[r * gateStride + c], l);
        const float u = fmaxf(-l, fminf(up[r * upStride + c], l));
        const float out = g / (1.0f + expf(__fmul_rn(a, -g)));
        dst[r * dstStride + c] = __fmul_rn(out, u + 1.0f);
    });
}

__device__ __forceinline__ double warpSumDouble(double v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, offset);
    return v;
}

// sumSquares is the double sum of a row's rounded squares, every lane of the warp getting
// it.
__device__ __forceinline__ double sumSquares(const float* row, i64 cols, int lane) {
    double sum = 0;
    for (i64 c = lane; c < cols; c += 32) {
        const float v = row[c];
        sum += double(__fmul_rn(v, v));
    }
    return warpSumDouble(sum);
}

extern "C" __global__ void __launch_bounds__(kOpThreads)
    rms_norm_f32(float* dst, const float* x, const float* w, double eps, i64 cols, i64 rows, i64 dstStride,
                 i64 xStride) {
    const int lane = threadIdx.x % 32;
    for (i64 r = i64(blockIdx.x) * kRowsPerOpBlock + threadIdx.x / 32; r < rows; r += i64(gridDim.x) * kRowsPerOpBlock) {
        const float* in = x + r * xStride;
        const float mean = float(sumSquares(in, cols, lane) / double(cols));
        const float scale = 1.0f / float(sqrt(double(mean + float(eps))));
        float* out = dst + r * dstStride;
        for (i64 c = lane; c < cols; c += 32) {
            const float v = __fmul_rn(in[c], scale);
            out[c] = w ? __fmul_rn(v, w[c]) : v;
        }
    }
}

extern "C" __global__ void __launch_bounds__(kOpThreads)
    l2_norm_f32(float* x, double eps, i64 cols, i64 rows, i64 stride) {
    const int lane = threadIdx.x % 32;
    for (i64 r = i64(blockIdx.x) * kRowsPerOpBlock + threadIdx.x / 32; r < rows; r += i64(gridDim.x) * kRowsPerOpBlock) {
        float* row = x + r * stride;
        const float norm = float(sqrt(double(float(sumSquares(row, cols, lane)))));
        const float scale = 1.0f / fmaxf(norm, float(eps));
        for (i64 c = lane; c < cols; c += 32) row[c] = __fmul_rn(row[c], scale);
    }
}

extern "C" __global__ void __launch_bounds__(kOpThreads)
    add_id_f32(float* x, const float* b, const int* ids, i64 cols, i64 rows, i64 bRows, i64 xStride, i64 bStride) {
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const i64 id = ids[r];
        if (id < 0 || id >= bRows) continue;
        for (i64 c = threadIdx.x; c < cols; c += blockDim.x) x[r * xStride + c] = __fadd_rn(x[r * xStride + c], b[id * bStride + c]);
    }
}

extern "C" __global__ void __launch_bounds__(kOpThreads)
    map_ids_i32(int* dst, const int* ids, const int* table, i64 n, i64 tableLen) {
    for (i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += i64(gridDim.x) * blockDim.x) {
        const i64 id = ids[i];
        dst[i] = id < 0 || id >= tableLen ? -1 : table[id];
    }
}

extern "C" __global__ void __launch_bounds__(kOpThreads)
    weighted_sum_f32(float* dst, const float* y, const float* w, i64 k, i64 cols, i64 rows) {
    forEach(cols, rows, [&](i64 t, i64 c) {
        float acc = __fmul_rn(y[t * k * cols + c], w[t * k]);
        for (i64 j = 1; j < k; j++) acc = __fadd_rn(acc, __fmul_rn(y[(t * k + j) * cols + c], w[t * k + j]));
        dst[t * cols + c] = acc;
    });
}

extern "C" __global__ void __launch_bounds__(kOpThreads)
    rope_f32(float* x, const float* table, i64 rowLen, i64 rows, i64 heads, i64 half, i64 offset, i64 neox) {
    const i64 other = neox ? half : 1, step = neox ? 1 : 2;
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* cosines = table + (r / heads) * 2 * half;
        const float* sines = cosines + half;
        float* w = x + r * rowLen + offset;
        for (i64 i = threadIdx.x; i < half; i += blockDim.x) {
            float* a = w + i * step;
            float* b = a + other;
            const float x0 = *a, x1 = *b, c = cosines[i], s = sines[i];
            *a = fmaf(x0, c, -__fmul_rn(x1, s));
            *b = fmaf(x0, s, __fmul_rn(x1, c));
        }
    }
}

extern "C" __global__ void __launch_bounds__(kOpThreads)
    set_rows_f32(u8* dst, const int* first, const float* src, i64 cols, i64 rows, i64 dstRowBytes, i64 srcStride) {
    dst += i64(*first) * dstRowBytes;
    forEach(cols, rows, [&](i64 r, i64 c) { reinterpret_cast<float*>(dst + r * dstRowBytes)[c] = src[r * srcStride + c]; });
}

extern "C" __global__ void __launch_bounds__(kOpThreads)
    set_rows_f16(u8* dst, const int* first, const float* src, i64 cols, i64 rows, i64 dstRowBytes, i64 srcStride) {
    dst += i64(*first) * dstRowBytes;
    forEach(cols, rows, [&](i64 r, i64 c) {
        reinterpret_cast<unsigned short*>(dst + r * dstRowBytes)[c] = __half_as_ushort(__float2half_rn(src[r * srcStride + c]));
    });
}

__device__ __forceinline__ float warpMax(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, offset));
    return v;
}

extern "C" __global__ void __launch_bounds__(kOpThreads)
    set_rows_q8_0(u8* dst, const int* first, const float* src, i64 cols, i64 rows, i64 dstRowBytes, i64 srcStride) {
    dst += i64(*first) * dstRowBytes;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const i64 blocks = cols / 32;
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
        for (i64 blk = warp; blk < blocks; blk += kRowsPerOpBlock) {
            const float v = src[r * srcStride + blk * 32 + lane];
            const float amax = warpMax(fabsf(v));
            const float d = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
            u8* block = dst + r * dstRowBytes + blk * 34;
            const float q = fminf(fmaxf(rintf(__fmul_rn(v, id)), -128.0f), 127.0f);
            block[2 + lane] = u8(int(q));
            if (lane == 0) *reinterpret_cast<unsigned short*>(block) = __half_as_ushort(__float2half_rn(d));
        }
    }
}

__device__ __forceinline__ float roundToHalf(float v) { return __half2float(__float2half_rn(v)); }

// The activation formats quantize_act_f32 rounds to, as its kind parameter names them.
constexpr int kActQ8_0 = 0, kActQ8_K = 1;

// quantize_act_f32: each row of x (contiguous) as the CPU matmul sees it before its dot
// products with a quantized weight: quantized to the weight's vec_dot type, then expanded
// back to floats, so that mmv's float products with it are the CPU's integer ones up to
// float32 rounding. Without this the GPU would multiply the exact activations and differ
// from the CPU (and from ggml's CUDA build, whose kernels quantize to 8 bits as well) by
// the 8-bit rounding of every activation: about 1% of a product, which the MoE routers of
// small models turn into other experts.
//   kActQ8_0 (for Q8_0 and Q8_1, whose quants and scale are the same): blocks of 32, a warp
//     each, as set_rows_q8_0 quantizes them: the value is q·d with d = amax/127 in F16.
//   kActQ8_K: blocks of 256, a warp each (8 values a lane), as tensor's encodeQ8_K: the
//     value of largest magnitude (the first of equals) maps to -127, q = min(127,
//     round-to-even(x·iscale)) with iscale = -127/vmax, the value q·(1/iscale).
// cols must be a multiple of the block; dst may not overlap x. Launch as the row kernels.
extern "C" __global__ void __launch_bounds__(kOpThreads)
    quantize_act_f32(float* dst, const float* x, i64 cols, i64 rows, i64 kind) {
    const int lane = threadIdx.x % 32;
    const i64 per = kind == kActQ8_K ? 8 : 1, size = 32 * per, blocks = rows * (cols / size);
    for (i64 b = i64(blockIdx.x) * kRowsPerOpBlock + threadIdx.x / 32; b < blocks; b += i64(gridDim.x) * kRowsPerOpBlock) {
        const float* in = x + b * size + lane * per;
        float* out = dst + b * size + lane * per;
        if (kind != kActQ8_K) {
            const float v = in[0], amax = warpMax(fabsf(v));
            const float d = roundToHalf(amax / 127.0f), id = amax != 0.0f ? 127.0f / amax : 0.0f;
            // The code goes through an integer, as the CPU's byte does: a zero code has no sign.
            out[0] = __fmul_rn(float(int(fminf(fmaxf(rintf(__fmul_rn(v, id)), -128.0f), 127.0f))), d);
            continue;
        }
        // The first value of largest magnitude: each lane's own, then the warp's (the
        // lowest index among lanes of equal magnitude).
        float amax = 0.0f;
        i64 at = 0;
        for (i64 i = 0; i < per; i++)
            if (fabsf(in[i]) > amax) amax = fabsf(in[i]), at = i;
        at += lane * per;
        const float best = warpMax(amax);
        // The index travels as a float (exact below 2^24) through the float shuffle.
        float first = amax == best && best != 0.0f ? float(at) : float(size);
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1) first = fminf(first, __shfl_xor_sync(0xFFFFFFFFu, first, offset));
        if (best == 0.0f) {
            for (i64 i = 0; i < per; i++) out[i] = 0.0f;
            continue;
        }
        const float iscale = -127.0f / x[b * size + i64(first)], d = 1.0f / iscale;
        for (i64 i = 0; i < per; i++) out[i] = __fmul_rn(float(int(fminf(rintf(__fmul_rn(iscale, in[i])), 127.0f))), d);
    }
}

// The cache types attention reads, as its kType and vType parameters name them.
constexpr int kCacheF32 = 0, kCacheF16 = 1, kCacheQ8_0 = 2;
constexpr int kAttnMaxDim = 576;  // DeepSeek's MLA key: 512 latent and 64 rotated values
constexpr int kAttnPerLane = kAttnMaxDim / 32;

// cacheValue decodes value d of a cache row of type t.
__device__ __forceinline__ float cacheValue(const u8* row, i64 d, int t) {
    if (t == kCacheF32) return reinterpret_cast<const float*>(row)[d];
    if (t == kCacheF16) return halfBits(reinterpret_cast<const unsigned short*>(row)[d]);
    const u8* block = row + (d / 32) * 34;
    return __fmul_rn(float(static_cast<signed char>(block[2 + d % 32])),
                     halfBits(*reinterpret_cast<const unsigned short*>(block)));
}

// cacheRowBytes is the size of a row of n values of type t.
__device__ __forceinline__ i64 cacheRowBytes(i64 n, int t) { return t == kCacheF32 ? 4 * n : t == kCacheF16 ? 2 * n : n / 32 * 34; }

// quantizeQ8 turns a lane's query values into Q8_0 codes (as floats, exact) and each 32-value
// block's scale, as tensor.QuantizeActivations(Q8_0) does: value i of the lane is element
// lane of block i.
__device__ __forceinline__ void quantizeQ8(float (&qv)[kAttnPerLane], float (&scales)[kAttnPerLane]) {
#pragma unroll
    for (int i = 0; i < kAttnPerLane; i++) {
        const float amax = warpMax(fabsf(qv[i]));
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        scales[i] = roundToHalf(amax / 127.0f);
        qv[i] = fminf(fmaxf(rintf(__fmul_rn(qv[i], id)), -128.0f), 127.0f);
    }
}

// q8Dot is a Q8_0 score: for each block the integer dot product of the codes (exact in
// float) times both scales, summed over the blocks in order.
__device__ __forceinline__ float q8Dot(const float (&qv)[kAttnPerLane], const float (&scales)[kAttnPerLane], const u8* krow,
                                       i64 dk) {
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < kAttnPerLane; i++) {
        if (32 * i >= dk) break;  // the same for the whole warp
        const u8* block = krow + i * 34;
        const float products = warpSum(qv[i] * float(static_cast<signed char>(block[2 + threadIdx.x % 32])));
        const float d = __fmul_rn(halfBits(*reinterpret_cast<const unsigned short*>(block)), scales[i]);
        sum = __fadd_rn(sum, __fmul_rn(products, d));
    }
    return sum;
}

extern "C" __global__ void __launch_bounds__(kOpThreads)
    attention_f32(float* dst, const float* q, const u8* k, const u8* v, const float* sinks, const int* pos, i64 heads,
                  i64 kvHeads, i64 dk, i64 dv, i64 kType, i64 vType, i64 kPosStride, i64 vPosStride,
                  double scale, i64 window, i64 tokens, i64 ggml, i64 cells) {
    const int lane = threadIdx.x % 32;
    const i64 kvLen = pos[tokens];
    const float s = float(scale);
    const i64 rows = tokens * heads, group = heads / kvHeads;
    const i64 kHeadBytes = cacheRowBytes(dk, int(kType)), vHeadBytes = cacheRowBytes(dv, int(vType));
    const bool q8 = ggml && kType == kCacheQ8_0, halfV = ggml && vType == kCacheF16;
    for (i64 r = i64(blockIdx.x) * kRowsPerOpBlock + threadIdx.x / 32; r < rows; r += i64(gridDim.x) * kRowsPerOpBlock) {
        const i64 t = r / heads, h = r % heads, g = h / group;
        float qv[kAttnPerLane], acc[kAttnPerLane], scales[kAttnPerLane];
#pragma unroll
        for (int i = 0; i < kAttnPerLane; i++) {
            const i64 d = lane + 32 * i;
            qv[i] = d < dk ? q[r * dk + d] : 0.0f;
            if (ggml && kType == kCacheF16) qv[i] = roundToHalf(qv[i]);
            acc[i] = 0.0f;
        }
        if (q8) quantizeQ8(qv, scales);
        const i64 p = pos[t];
        const i64 first = window > 0 ? max(i64(0), p - window + 1) : 0, last = min(p, kvLen - 1);
        float m = -INFINITY, sum = 0.0f;
        for (i64 j = first; j <= last; j++) {
            const u8* krow = k + (j % cells) * kPosStride + g * kHeadBytes;
            const u8* vrow = v + (j % cells) * vPosStride + g * vHeadBytes;
            float dot;
            if (q8) {
                dot = q8Dot(qv, scales, krow, dk);
            } else {
                dot = 0.0f;
#pragma unroll
                for (int i = 0; i < kAttnPerLane; i++) {
                    const i64 d = lane + 32 * i;
                    if (d < dk) dot = fmaf(qv[i], cacheValue(krow, d, int(kType)), dot);
                }
                dot = warpSum(dot);
            }
            const float score = __fmul_rn(dot, s);
            // A new maximum rescales what came before by e^(old - new); otherwise the
            // position weighs e^(score - max).
            float ms = 1.0f, vs;
            if (score > m) {
                ms = expf(m - score), vs = 1.0f, m = score;
            } else {
                vs = expf(score - m);
            }
            sum = fmaf(sum, ms, vs);
#pragma unroll
            for (int i = 0; i < kAttnPerLane; i++) {
                const i64 d = lane + 32 * i;
                if (d < dv) {
                    const float scaled = halfV ? roundToHalf(__fmul_rn(acc[i], ms)) : __fmul_rn(acc[i], ms);
                    acc[i] = fmaf(cacheValue(vrow, d, int(vType)), vs, scaled);
                    if (halfV) acc[i] = roundToHalf(acc[i]);
                }
            }
        }
        if (sinks != nullptr) {
            const float sink = sinks[h];
            float ms = 1.0f, vs = 1.0f;
            if (sink > m) {
                ms = expf(m - sink);
            } else {
                vs = expf(sink - m);
            }
            sum = fmaf(sum, ms, vs);
#pragma unroll
            for (int i = 0; i < kAttnPerLane; i++) acc[i] = __fmul_rn(acc[i], ms);
        }
        const float inv = sum != 0.0f ? 1.0f / sum : 0.0f;
#pragma unroll
        for (int i = 0; i < kAttnPerLane; i++) {
            const i64 d = lane + 32 * i;
            if (d < dv) dst[r * dv + d] = __fmul_rn(acc[i], inv);
        }
    }
}

// softmaxInPlace is tensor's softmaxRow: exponentials of y − max, their sum in double, then
// a multiplication by the float reciprocal.
__device__ __forceinline__ void softmaxInPlace(float* y, i64 n) {
    float m = -INFINITY;
    for (i64 i = 0; i < n; i++)
        if (!(m > y[i])) m = y[i];  // C's MAX(m, v), which lets a NaN through like ggml
    double sum = 0;
    for (i64 i = 0; i < n; i++) {
        y[i] = expf(y[i] - m);
        sum += double(y[i]);
    }
    const float inv = float(1.0 / sum);
    for (i64 i = 0; i < n; i++) y[i] = __fmul_rn(y[i], inv);
}

// topIndices writes to top[:k] the indices of the k highest of n scores, highest first,
// equal scores keeping the lower index first (tensor's topIndices).
__device__ __forceinline__ void topIndices(int* top, const float* score, i64 n, i64 k) {
    i64 count = 0;
    for (i64 i = 0; i < n; i++) {
        const float s = score[i];
        if (count == k && !(s > score[top[count - 1]])) continue;
        i64 j = min(count, k - 1);
        for (; j > 0 && s > score[top[j - 1]]; j--) top[j] = top[j - 1];
        top[j] = int(i);
        count = min(count + 1, k);
    }
}

// The gatings, as tensor.Gating numbers them.
constexpr int kGatingSoftmax = 1, kGatingSigmoid = 2, kGatingSoftmaxWeight = 3, kGatingSqrtSoftplus = 4;

extern "C" __global__ void __launch_bounds__(kOpThreads)
    route_f32(int* ids, float* weights, const float* logits, const float* bias, float* scratch, i64 experts, i64 used,
              i64 gating, i64 norm, double scale, i64 groups, i64 groupsUsed, i64 serMin, double serThreshold,
              i64 tokens) {
    const bool ser = serMin > 0 && serThreshold > 0;
    const float threshold = float(serThreshold);
    for (i64 t = i64(blockIdx.x) * blockDim.x + threadIdx.x; t < tokens; t += i64(gridDim.x) * blockDim.x) {
        float* probs = scratch + t * (3 * experts + groups);
        float* sel = probs + experts;
        int* order = reinterpret_cast<int*>(sel + experts);
        float* groupScores = reinterpret_cast<float*>(order + experts);
        const float* x = logits + t * experts;
        int* tokenIDs = ids + t * used;
        float* w = weights + t * used;

        for (i64 i = 0; i < experts; i++) {
            const float v = x[i];
            switch (int(gating)) {
            case kGatingSigmoid: probs[i] = sigmoidOf(v); break;
            case kGatingSqrtSoftplus: {
                const double d = v > 20.0f ? double(v) : log1p(exp(double(v)));
                probs[i] = float(sqrt(d));
                break;
            }
            default: probs[i] = v;  // softmax follows; softmax-over-selected selects on logits
            }
        }
        if (gating == kGatingSoftmax) softmaxInPlace(probs, experts);
        for (i64 i = 0; i < experts; i++) sel[i] = bias ? __fadd_rn(probs[i], bias[i]) : probs[i];

        if (groups > 1) {
            // Keep the groupsUsed groups whose two best scores sum highest.
            const i64 size = experts / groups;
            for (i64 g = 0; g < groups; g++) {
                float first = -INFINITY, second = -INFINITY;
                for (i64 i = g * size; i < (g + 1) * size; i++) {
                    const float s = sel[i];
                    if (s > first) {
                        second = first, first = s;
                    } else if (s > second) {
                        second = s;
                    }
                }
                groupScores[g] = __fadd_rn(first, second);
            }
            topIndices(order, groupScores, groups, groupsUsed);
            for (i64 g = 0; g < groups; g++) {
                bool keep = false;
                for (i64 j = 0; j < groupsUsed; j++) keep = keep || order[j] == g;
                if (!keep)
                    for (i64 i = g * size; i < (g + 1) * size; i++) sel[i] = -INFINITY;
            }
        }

        topIndices(order, sel, experts, used);
        const float best = sel[order[0]];
        for (i64 j = 0; j < used; j++) {
            const int e = order[j];
            bool drop = false;
            if (ser && j >= serMin)
                drop = gating == kGatingSoftmaxWeight ? float(exp(double(__fsub_rn(sel[e], best)))) < threshold
                                                      : sel[e] < __fmul_rn(threshold, best);
            tokenIDs[j] = drop ? -1 : e;
            w[j] = drop ? 0.0f : probs[e];
        }
        if (gating == kGatingSoftmaxWeight) {
            // The softmax over the kept slots' weights, gathered in front and spread back.
            i64 n = 0;
            for (i64 j = 0; j < used; j++)
                if (tokenIDs[j] >= 0) w[n++] = w[j];
            if (n > 0) softmaxInPlace(w, n);
            for (i64 j = used - 1; j >= 0; j--) w[j] = tokenIDs[j] >= 0 ? w[--n] : 0.0f;
        }
        if (norm) {
            double sum = 0;
            for (i64 j = 0; j < used; j++) sum += double(w[j]);
            const float s = fmaxf(float(sum), 6.103515625e-5f);  // llama.cpp clamps to the smallest normal f16
            for (i64 j = 0; j < used; j++) w[j] = w[j] / s;
        }
        if (scale != 0 && scale != 1)
            for (i64 j = 0; j < used; j++) w[j] = __fmul_rn(w[j], float(scale));
    }
}

// indexer_scores_f32(dst, q, w, keys, pos, heads, dim, kvLen, kType, posBytes, tokens): the
//   lightning indexer, a warp per (token t, position j): dst[t·kvLen + j] = Σ_h w[t·heads+h]·
//   (q[t·heads+h]·k[j] where positive) over the heads in order, -inf for j > pos[t]; keys are
//   one row of dim values (dim ≤ kAttnMaxDim) of type kType per position, posBytes apart.
//   The warp holds the key in registers and reduces each head's product as attention does.
extern "C" __global__ void __launch_bounds__(kOpThreads)
    indexer_scores_f32(float* dst, const float* q, const float* w, const u8* keys, const int* pos, i64 heads, i64 dim,
                       i64 kvLen, i64 kType, i64 posBytes, i64 tokens) {
    const int lane = threadIdx.x % 32;
    for (i64 r = i64(blockIdx.x) * kRowsPerOpBlock + threadIdx.x / 32; r < tokens * kvLen; r += i64(gridDim.x) * kRowsPerOpBlock) {
        const i64 t = r / kvLen, j = r % kvLen;
        if (j > pos[t]) {
            if (lane == 0) dst[r] = -INFINITY;
            continue;
        }
        const u8* krow = keys + j * posBytes;
        float key[kAttnPerLane];
#pragma unroll
        for (int i = 0; i < kAttnPerLane; i++) {
            const i64 d = lane + 32 * i;
            key[i] = d < dim ? cacheValue(krow, d, int(kType)) : 0.0f;
        }
        float score = 0.0f;
        for (i64 h = 0; h < heads; h++) {
            const float* qh = q + (t * heads + h) * dim;
            float dot = 0.0f;
#pragma unroll
            for (int i = 0; i < kAttnPerLane; i++) {
                const i64 d = lane + 32 * i;
                if (d < dim) dot = fmaf(qh[d], key[i], dot);
            }
            dot = warpSum(dot);
            if (dot > 0.0f) score = __fadd_rn(score, __fmul_rn(dot, w[t * heads + h]));
        }
        if (lane == 0) dst[r] = score;
    }
}

// causal_conv_f32(dst, x, state, kernel, channels, taps, tokens): tensor.CausalConv.Run, a
//   thread per channel. x and dst are [tokens][channels], kernel [taps][channels] (one row
//   of every channel's weight per tap), state [channels][taps−1] (the channel's previous
//   inputs, oldest first), left holding the last taps−1 inputs. Each output is the sum in
//   tap order, oldest input first, of input times weight, added as ggml's compiled loop
//   adds them (tensor's leftoverTerm: the taps past the last multiple of 8 fused), so the
//   results are the CPU's bits.
extern "C" __global__ void __launch_bounds__(kOpThreads)
    causal_conv_f32(float* dst, const float* x, float* state, const float* kernel, i64 channels, i64 taps, i64 tokens) {
    const i64 hist = taps - 1, unfused = taps & ~i64(7);
    for (i64 ch = i64(blockIdx.x) * blockDim.x + threadIdx.x; ch < channels; ch += i64(gridDim.x) * blockDim.x) {
        float* st = state + ch * hist;
        for (i64 t = 0; t < tokens; t++) {
            float sum = 0.0f;
            for (i64 i = 0; i < taps; i++) {
                const i64 s = t + i;
                const float in = s < hist ? st[s] : x[(s - hist) * channels + ch], w = kernel[i * channels + ch];
                sum = i < unfused ? __fadd_rn(sum, __fmul_rn(in, w)) : fmaf(in, w, sum);
            }
            dst[t * channels + ch] = sum;
        }
        // Entry j takes position tokens + j of the old state and x: never an entry already
        // overwritten.
        for (i64 j = 0; j < hist; j++) {
            const i64 s = tokens + j;
            st[j] = s < hist ? st[s] : x[(s - hist) * channels + ch];
        }
    }
}

// gated_delta_rule_f32(o, q, k, v, decay, beta, states, tokens, dim, kHeads, vHeads, grouped,
//   stride, scale): tensor.Pool.GatedDeltaRule, a warp per (value head h, row j of its
//   transposed state), the row in registers (dim ≤ kDeltaMaxDim)
//   over the tokens: decayed by g = exp(decay[t][h]), then delta = (v[j] − row·k)·beta[t][h],
//   row += k·delta (fused), o[t][h][j] = (row·q)·scale. q, k and v hold token t's heads from
//   t·stride; value head h reads query/key head h / (vHeads/kHeads) when grouped, else
//   h mod kHeads. The dot products are the warp's sums, not ggml's order: within rounding of
//   the CPU's.
constexpr int kDeltaMaxDim = 128;
constexpr int kDeltaPerLane = kDeltaMaxDim / 32;

extern "C" __global__ void __launch_bounds__(kOpThreads)
    gated_delta_rule_f32(float* o, const float* q, const float* k, const float* v, const float* decay, const float* beta,
                         float* states, i64 tokens, i64 dim, i64 kHeads, i64 vHeads, i64 grouped, i64 stride, double scale) {
    const int lane = threadIdx.x % 32;
    const float sc = float(scale);
    for (i64 r = i64(blockIdx.x) * kRowsPerOpBlock + threadIdx.x / 32; r < vHeads * dim; r += i64(gridDim.x) * kRowsPerOpBlock) {
        const i64 h = r / dim, j = r % dim;
        const i64 kh = (grouped ? h / (vHeads / kHeads) : h % kHeads) * dim;
        float* row = states + r * dim;
        float s[kDeltaPerLane];
#pragma unroll
        for (int i = 0; i < kDeltaPerLane; i++) {
            const i64 d = lane + 32 * i;
            s[i] = d < dim ? row[d] : 0.0f;
        }
        for (i64 t = 0; t < tokens; t++) {
            const i64 base = t * stride;
            const float g = expf(decay[t * vHeads + h]), b = beta[t * vHeads + h];
            float kv[kDeltaPerLane], dot = 0.0f;
#pragma unroll
            for (int i = 0; i < kDeltaPerLane; i++) {
                const i64 d = lane + 32 * i;
                kv[i] = d < dim ? k[base + kh + d] : 0.0f;
                s[i] = __fmul_rn(s[i], g);
                dot = fmaf(s[i], kv[i], dot);
            }
            dot = warpSum(dot);
            const float delta = __fmul_rn(__fsub_rn(v[base + h * dim + j], dot), b);
            float out = 0.0f;
#pragma unroll
            for (int i = 0; i < kDeltaPerLane; i++) {
                const i64 d = lane + 32 * i;
                s[i] = fmaf(kv[i], delta, s[i]);
                if (d < dim) out = fmaf(s[i], q[base + kh + d], out);
            }
            out = warpSum(out);
            if (lane == 0) o[(t * vHeads + h) * dim + j] = __fmul_rn(out, sc);
        }
#pragma unroll
        for (int i = 0; i < kDeltaPerLane; i++) {
            const i64 d = lane + 32 * i;
            if (d < dim) row[d] = s[i];
        }
    }
}

// layer_norm_f32(x, w, b, eps, cols, rows, stride): tensor.LayerNorm on each row of x in
//   place, a thread per row summing in the CPU's order (in double, as ggml_norm), so the
//   results are the CPU's bits: x − mean, times 1/sqrt(variance + eps), times w, plus b, each
//   step rounded on its own. For the short rows it serves (DeepSeek Sparse Attention's
//   indexer key).
extern "C" __global__ void __launch_bounds__(kOpThreads)
    layer_norm_f32(float* x, const float* w, const float* b, double eps, i64 cols, i64 rows, i64 stride) {
    for (i64 r = i64(blockIdx.x) * blockDim.x + threadIdx.x; r < rows; r += i64(gridDim.x) * blockDim.x) {
        float* row = x + r * stride;
        double sum = 0;
        for (i64 c = 0; c < cols; c++) sum += double(row[c]);
        const float mean = float(sum / double(cols));
        double sq = 0;
        for (i64 c = 0; c < cols; c++) {
            row[c] = __fsub_rn(row[c], mean);
            sq += double(__fmul_rn(row[c], row[c]));
        }
        const float scale = float(1.0 / sqrt(sq / double(cols) + eps));
        for (i64 c = 0; c < cols; c++) row[c] = __fadd_rn(__fmul_rn(__fmul_rn(row[c], scale), w[c]), b[c]);
    }
}

// hadamard_f32(x, cols, rows, stride): tensor.Hadamard on each row of x in place (cols a
//   power of two), a thread per row: the fast transform's butterflies at strides 1, 2, 4 and
//   up, then the scale 1/sqrt(cols), in the CPU's order, so its bits.
extern "C" __global__ void __launch_bounds__(kOpThreads) hadamard_f32(float* x, i64 cols, i64 rows, i64 stride) {
    const float norm = float(1.0 / sqrt(double(cols)));
    for (i64 r = i64(blockIdx.x) * blockDim.x + threadIdx.x; r < rows; r += i64(gridDim.x) * blockDim.x) {
        float* row = x + r * stride;
        for (i64 h = 1; h < cols; h *= 2)
            for (i64 i = 0; i < cols; i += 2 * h)
                for (i64 j = i; j < i + h; j++) {
                    const float a = row[j], c = row[j + h];
                    row[j] = __fadd_rn(a, c);
                    row[j + h] = __fsub_rn(a, c);
                }
        for (i64 c = 0; c < cols; c++) row[c] = __fmul_rn(row[c], norm);
    }
}

// MOERUN_OPS lists the entry points above and matvec.cu's group_pairs: every entry but the
// per-type ones.
#define MOERUN_OPS(X)                                                                                         \
    X(group_pairs) X(copy_f32)                                                                                \
    X(add_f32) X(mul_f32) X(scale_f32) X(scale_rows_f32) X(sigmoid_f32) X(softplus_f32) X(silu_f32) X(swiglu_f32) \
        X(swiglu_oai_f32) X(rms_norm_f32) X(l2_norm_f32) X(add_id_f32) X(map_ids_i32) X(weighted_sum_f32) X(rope_f32) X(set_rows_f32) \
            X(set_rows_f16) X(set_rows_q8_0) X(quantize_act_f32) X(attention_f32) X(route_f32) X(indexer_scores_f32) \
                X(causal_conv_f32) X(gated_delta_rule_f32) X(layer_norm_f32) X(hadamard_f32)
