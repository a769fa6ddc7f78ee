// moerun's matrix-vector kernels: for each weight type, mmv_<type> (matmul of a weight
// matrix with a few activation rows, plain or grouped by expert as for MulMatID), mmq_<type>
// (the same for batches, tiled: matmul.cuh) and getrows_<type> (dequantized rows, e.g.
// embedding lookup). <type> is ggml's type name as
// tensor.Type's String() gives it (q4_K, iq4_xs, ...). Every scalar parameter is a 64-bit
// long long: the Go launcher passes each one as 8 bytes.
//
// mmv_<type>(W, X, Y, sel, gstart, gexpert, cols, rows, n, k, xPerSlot, rowBytes, expertBytes)
//   W: weights; row r of expert e starts at W + e·expertBytes + r·rowBytes, rowBytes being
//      the type's size of a row of cols values and expertBytes a multiple of it (rows·rowBytes
//      for densely stacked experts; anything for a plain matmul). W must be 16-byte aligned
//      and readable to the end of its last 4-byte word (every cudaMalloc allocation is):
//      the loads rely on rows being as aligned as the type's blocks (quants.cuh).
//   X: activations, `cols` floats per row, 16-byte aligned, rounded to F16 or BF16 as they
//      are read for weights of those types (activation); for the quantized types the
//      launcher passes them already rounded as ggml quantizes them (ops.cuh's
//      quantize_act_f32). Y: outputs, `rows` floats per row.
//   Plain (sel == NULL): Y[t·rows + r] = Σ_c W[r][c]·X[t·cols + c] for tokens t < n.
//   Grouped (sel != NULL): n groups; group g covers the pairs p = sel[gstart[g] ..
//      gstart[g+1]), all with expert gexpert[g]: Y[p·rows + r] = Σ_c W_e[r][c]·X[x·cols + c]
//      with x = p if xPerSlot != 0, else p/k (k slots per token). A group may hold any number
//      of pairs; one pass over its expert's rows serves 8 of them. Outputs of pairs in no
//      group are left as they are. The host validates sel, gstart and gexpert.
//   Launch: blockDim = (32, 4, 1); grid.x = ceil(rows / 4); grid.y = the number of groups,
//      ceil(n / 8) for a plain matmul and n for a grouped one, or any smaller value ≥ 1 (at
//      most 65535): blocks stride over the groups. No shared memory; n ≥ 1.
//   cols must be a multiple of the type's block size (any value for the float types), and
//      below 2^30.
//
// mmq_<type>(W, X, Y, sel, gstart, gexpert, cols, rows, n, k, xPerSlot, rowBytes, expertBytes)
//   The same product, tiled for batches (matmul.cuh): a block dequantizes a tile of 64
//   weight rows once per 32 activation rows, in shared memory. Parameters, results and
//   grouping as mmv's, but a pass over the tile serves 32 members, so a grouped launch wants
//   groups of up to 32 pairs (group_pairs' groupSize).
//   Launch: blockDim = (32, 1, 1); grid.x = ceil(rows / 64); grid.y = the number of groups,
//      ceil(n / 32) for a plain matmul and n for a grouped one, or any smaller value ≥ 1 (at
//      most 65535): blocks stride over the groups. 12 KiB of static shared memory, no
//      dynamic; n ≥ 1; cols as for mmv.
//
// getrows_<type>(W, ids, Y, cols, n, rowBytes): Y[i·cols + c] = W[ids[i]][c] for i < n.
//   Launch: blockDim = (128, 1, 1); grid.x = n or any smaller value ≥ 1 (at most 2^31 - 1):
//   blocks stride over the rows. W as for mmv; Y 4-byte aligned; the ids valid rows.
//
// Speed. Decoding is bound by reading the weights, so each weight is read once per 8
// activation rows: a warp owns an output row, lane i dequantizes chunks i, i+32, ... (16
// values each) into registers and multiplies each chunk with every activation row of the
// pass before moving on. The only branches in that loop test the pass's size, which is the
// same for the whole warp.

#include "quants.cuh"

typedef long long i64;

// Launch geometry, mirrored by package kernels' constants.
constexpr int kWarp = 32;         // lanes per output row
constexpr int kRowsPerBlock = 4;  // blockDim.y of mmv
constexpr int kGroup = 8;         // activation rows sharing one pass over a weight row
constexpr int kGetRowsThreads = 128;

__device__ __forceinline__ float warpSum(float v) {
#pragma unroll
    for (int offset = kWarp / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, offset);
    return v;
}

// member returns the activation row and the output row of member i of a launch: token i of
// a plain matmul, pair sel[i] of a grouped one.
__device__ __forceinline__ void member(const int* sel, i64 i, i64 k, i64 xPerSlot, i64& xRow, i64& yRow) {
    if (sel == nullptr) {
        xRow = yRow = i;
    } else {
        const i64 p = __ldg(sel + i);
        xRow = xPerSlot ? p : p / k;
        yRow = p;
    }
}

// activation is a value of X as ggml's dot product with a weight of type T sees it: rounded
// to F16 or BF16 for weights of those types (vec_dot_f16, and ggml-cuda's cuBLAS path),
// read as it is for the rest: for the quantized types, ops.cuh's quantize_act_f32 has
// already rounded it as ggml quantizes it (to 8 bits), so that these kernels' float
// products are ggml's integer ones up to float32 rounding.
template <class T>
__device__ __forceinline__ float activation(float v) {
    return v;
}
template <>
__device__ __forceinline__ float activation<TypeF16>(float v) {
    return __half2float(__float2half_rn(v));
}
template <>
__device__ __forceinline__ float activation<TypeBF16>(float v) {
    return roundToBF16(v);
}

// matVecPass computes output row r for members first .. first+count-1 (count ≤ kGroup) in
// one pass over the weight row: each chunk is dequantized once and used for all of them.
template <class T>
__device__ __forceinline__ void matVecPass(const u8* row, i64 first, int count, const float* X, float* Y,
                                           const int* sel, i64 cols, i64 rows, i64 r, i64 k, i64 xPerSlot) {
    const int lane = threadIdx.x;
    const int chunks = int(cols / 16);
    const float* x[kGroup];
    float acc[kGroup];
#pragma unroll
    for (int j = 0; j < kGroup; j++) {
        acc[j] = 0;
        x[j] = X;
        if (j < count) {
            i64 xRow, yRow;
            member(sel, first + j, k, xPerSlot, xRow, yRow);
            x[j] = X + xRow * cols;
        }
    }
    for (int c = lane; c < chunks; c += kWarp) {
        float w[16];
        T::chunk(row, c, w);
#pragma unroll
        for (int j = 0; j < kGroup; j++) {
            if (j < count) {
                float xv[16];
                // X is 16-byte aligned, so its chunks are when cols is a multiple of 4:
                // always for the block formats.
                loadFloats<T::kBlockValues != 1>(x[j] + 16 * c, xv);
#pragma unroll
                for (int i = 0; i < 16; i++) acc[j] = fmaf(w[i], activation<T>(xv[i]), acc[j]);
            }
        }
    }
    if constexpr (T::kBlockValues == 1) {
        // A float row may end in a partial chunk: its last cols % 16 values, one a lane.
        const i64 i = i64(chunks) * 16 + lane;
        if (i < cols) {
            const float w = T::value(row, i);
#pragma unroll
            for (int j = 0; j < kGroup; j++)
                if (j < count) acc[j] = fmaf(w, activation<T>(__ldg(x[j] + i)), acc[j]);
        }
    }
#pragma unroll
    for (int j = 0; j < kGroup; j++) {
        if (j < count) {
            const float sum = warpSum(acc[j]);
            if (lane == 0) {
                i64 xRow, yRow;
                member(sel, first + j, k, xPerSlot, xRow, yRow);
                Y[yRow * rows + r] = sum;
            }
        }
    }
}

// groupSpan sets [first, end) to group g's members and returns where its weight rows start,
// row rows into the matrix: without sel the n tokens in groups of size, in order; with sel
// the grouped launch's group g (gstart's bounds, gexpert's expert). mmv and mmq share it.
__device__ __forceinline__ const u8* groupSpan(const u8* __restrict__ W, const int* __restrict__ sel,
                                               const int* __restrict__ gstart, const int* __restrict__ gexpert,
                                               i64 g, i64 size, i64 n, i64 row, i64 rowBytes, i64 expertBytes,
                                               i64& first, i64& end) {
    if (sel == nullptr) {
        first = g * size;
        end = min(first + size, n);
        return W + row * rowBytes;
    }
    first = __ldg(gstart + g);
    end = __ldg(gstart + g + 1);
    return W + i64(__ldg(gexpert + g)) * expertBytes + row * rowBytes;
}

template <class T>
__device__ __forceinline__ void matVec(const u8* __restrict__ W, const float* __restrict__ X, float* __restrict__ Y,
                                       const int* __restrict__ sel, const int* __restrict__ gstart,
                                       const int* __restrict__ gexpert, i64 cols, i64 rows, i64 n, i64 k,
                                       i64 xPerSlot, i64 rowBytes, i64 expertBytes) {
    const i64 r = i64(blockIdx.x) * kRowsPerBlock + threadIdx.y;
    if (r >= rows) return;  // the whole warp leaves; the kernel has no barrier
    const i64 groups = sel == nullptr ? (n + kGroup - 1) / kGroup : n;
    for (i64 g = blockIdx.y; g < groups; g += gridDim.y) {
        // Group g's members, and the weight row they multiply.
        i64 first, end;
        const u8* row = groupSpan(W, sel, gstart, gexpert, g, kGroup, n, r, rowBytes, expertBytes, first, end);
        for (; first < end; first += kGroup)
            matVecPass<T>(row, first, int(min(i64(kGroup), end - first)), X, Y, sel, cols, rows, r, k, xPerSlot);
    }
}

// storeY writes 16 values; p's alignment is the same for every chunk of a row.
__device__ __forceinline__ void storeY(float* p, const float (&y)[16]) {
    if ((reinterpret_cast<uintptr_t>(p) & 15) == 0) {
#pragma unroll
        for (int i = 0; i < 4; i++)
            reinterpret_cast<float4*>(p)[i] = make_float4(y[4 * i], y[4 * i + 1], y[4 * i + 2], y[4 * i + 3]);
    } else {
#pragma unroll
        for (int i = 0; i < 16; i++) p[i] = y[i];
    }
}

template <class T>
__device__ __forceinline__ void getRows(const u8* __restrict__ W, const int* __restrict__ ids, float* __restrict__ Y,
                                        i64 cols, i64 n, i64 rowBytes) {
    const int chunks = int(cols / 16);
    for (i64 i = blockIdx.x; i < n; i += gridDim.x) {
        const u8* row = W + i64(__ldg(ids + i)) * rowBytes;
        float* out = Y + i * cols;
        for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
            float y[16];
            T::chunk(row, c, y);
            storeY(out + 16 * c, y);
        }
        if constexpr (T::kBlockValues == 1) {
            // A float row's last cols % 16 values, one a thread.
            const i64 c = i64(chunks) * 16 + threadIdx.x;
            if (c < cols) out[c] = T::value(row, c);
        }
    }
}

// The tiled product for batches.
#include "matmul.cuh"

// KERNELS defines the three entry points of one weight type.
#define KERNELS(name, T)                                                                                        \
    extern "C" __global__ void __launch_bounds__(kWarp* kRowsPerBlock)                                         \
        mmv_##name(const u8* W, const float* X, float* Y, const int* sel, const int* gstart, const int* gexpert, \
                   i64 cols, i64 rows, i64 n, i64 k, i64 xPerSlot, i64 rowBytes, i64 expertBytes) {             \
        matVec<T>(W, X, Y, sel, gstart, gexpert, cols, rows, n, k, xPerSlot, rowBytes, expertBytes);           \
    }                                                                                                           \
    extern "C" __global__ void __launch_bounds__(kWarp)                                                        \
        mmq_##name(const u8* W, const float* X, float* Y, const int* sel, const int* gstart, const int* gexpert, \
                   i64 cols, i64 rows, i64 n, i64 k, i64 xPerSlot, i64 rowBytes, i64 expertBytes) {             \
        matMulTiled<T>(W, X, Y, sel, gstart, gexpert, cols, rows, n, k, xPerSlot, rowBytes, expertBytes);      \
    }                                                                                                           \
    extern "C" __global__ void __launch_bounds__(kGetRowsThreads)                                              \
        getrows_##name(const u8* W, const int* ids, float* Y, i64 cols, i64 n, i64 rowBytes) {                  \
        getRows<T>(W, ids, Y, cols, n, rowBytes);                                                               \
    }

// MOERUN_TYPES lists the weight types with kernels: X(name, dequantizer).
#define MOERUN_TYPES(X)   \
    X(f32, TypeF32)       \
    X(f16, TypeF16)       \
    X(bf16, TypeBF16)     \
    X(q4_0, TypeQ4_0)     \
    X(q4_1, TypeQ4_1)     \
    X(q5_0, TypeQ5_0)     \
    X(q5_1, TypeQ5_1)     \
    X(q8_0, TypeQ8_0)     \
    X(q2_K, TypeQ2_K)     \
    X(q3_K, TypeQ3_K)     \
    X(q4_K, TypeQ4_K)     \
    X(q5_K, TypeQ5_K)     \
    X(q6_K, TypeQ6_K)     \
    X(iq4_nl, TypeIQ4_NL) \
    X(iq4_xs, TypeIQ4_XS) \
    X(mxfp4, TypeMXFP4)

MOERUN_TYPES(KERNELS)

// group_pairs(ids, sel, gstart, gexpert, next, n, experts, maxGroups, groupSize) builds
// mmv's or mmq's grouped work list on the device from n expert ids (one per (token, slot)
// pair; ids outside [0, experts), such as -1 for an unused slot, belong to no group): the
// pairs of each expert in pair order in sel, cut into groups of at most groupSize (≥ 1:
// kGroup for mmv, kTileTokens for mmq, a pass of each); maxGroups groups are written, the
// ones past the last real group empty (gstart = the pairs used), so that the host can
// launch with grid.y = maxGroups without reading the ids back. maxGroups must be at least
// ceil(n / groupSize) + min(experts, n). next is scratch of experts ints. One warp:
// blockDim = (32, 1, 1), grid (1, 1).
extern "C" __global__ void __launch_bounds__(kWarp)
    group_pairs(const int* ids, int* sel, int* gstart, int* gexpert, int* next, i64 n, i64 experts, i64 maxGroups,
                i64 groupSize) {
    const int lane = threadIdx.x;
    for (i64 e = lane; e < experts; e += kWarp) {
        int count = 0;
        for (i64 p = 0; p < n; p++) count += ids[p] == e;
        next[e] = count;
    }
    __syncwarp();
    if (lane == 0) {
        // Each expert's pairs start where the previous expert's end; its groups cover them.
        i64 used = 0, g = 0;
        for (i64 e = 0; e < experts; e++) {
            const i64 count = next[e];
            for (i64 s = used; s < used + count; s += groupSize) gstart[g] = int(s), gexpert[g] = int(e), g++;
            next[e] = int(used);
            used += count;
        }
        for (; g < maxGroups; g++) gstart[g] = int(used), gexpert[g] = 0;
        gstart[maxGroups] = int(used);
    }
    __syncwarp();
    for (i64 e = lane; e < experts; e += kWarp) {
        int at = next[e];
        for (i64 p = 0; p < n; p++)
            if (ids[p] == e) sel[at++] = int(p);
    }
}

// The operations between the products, on F32 values.
#include "ops.cuh"
