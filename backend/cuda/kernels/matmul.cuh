// The tiled product for batches (prompt processing): mmq_<type>, included by matvec.cu,
// whose helpers (member, activation, loadFloats) it uses and whose header documents its
// parameters, which are mmv's.
//
// mmv reads each weight row once per kGroup (8) activation rows, dequantizing it again for
// every 8 tokens of a prompt. mmq gives a block a tile of kTileRows weight rows and serves
// kTileTokens activation rows per pass over it: the block walks the columns in slices of
// kSlice values, dequantizes the tile's slice of weights once into shared memory, stages
// the tokens' slice of activations beside it (rounded as mmv rounds them: activation<T>),
// and multiplies the two there. The dequantized weights are bit-exact with the CPU's as in
// mmv (T::chunk), and the sums equal mmv's up to float32 summation order, which follows the
// CPU's where it can: a slice's 32 products are summed by themselves (a chain of fused
// multiply-adds) and the slices' sums added in column order, as ggml's dot products sum
// each 32-value block (exactly, in integers) and then add the blocks in order. That keeps
// the error of a long row to about one slice's plus one addition per slice, and on the
// golden models it is what keeps an op-offloaded prompt's logits as close to the CPU's as
// mmv's (a single chain over the whole row drifted past the CPU bar on synth-glm4moe).
//
// A block is one warp (blockDim = (32, 1, 1)), so the shared tiles need no block-wide
// barrier: __syncwarp orders the lanes' writes before the reads and the reads before the
// next slice's writes. (The CPU emulator runs a warp's lanes as fibers and blocks one
// after another, which is exactly this model.) Shared memory: kSlice × (kTileRows +
// kTileTokens) floats = 12 KiB, static.
//
// Roles. Filling: lane l dequantizes tile rows l and l+32 (the slice's kSlice/16 chunks of
// each) and loads token l's slice of activations; it writes them transposed (value-major:
// ws[c][row], xs[c][token]), so the 32 lanes' stores hit 32 consecutive words, one bank
// each. Multiplying: lane l owns an 8 × 8 block of outputs, rows 4·(l%8)+{0..3} and
// 32+4·(l%8)+{0..3}, tokens 4·(l/8)+{0..3} and 16+4·(l/8)+{0..3}: per column it reads
// 4 float4s (8 weights, 8 activations) for 64 fused multiply-adds. A quarter warp (8 lanes)
// reads 8 consecutive float4s of ws (128 bytes, no conflict) and one float4 of xs (a
// broadcast).

constexpr int kTileRows = 64;    // weight rows per block
constexpr int kTileTokens = 32;  // activation rows per pass over the tile
constexpr int kSlice = 32;       // columns staged in shared memory at a time (a multiple of 16)

// tileWeights writes the slice's columns c0 .. c0+kSlice-1 of one weight row (row, which
// live says exists) to ws[·][at]: zeros past the row's end or for a row past the matrix.
template <class T>
__device__ __forceinline__ void tileWeights(float (*ws)[kTileRows], int at, const u8* row, bool live, i64 cols, i64 c0) {
#pragma unroll
    for (int h = 0; h < kSlice / 16; h++) {
        const i64 first = c0 + 16 * h;
        float w[16];
        if (live && first + 16 <= cols) {
            T::chunk(row, int(first / 16), w);
        } else {
#pragma unroll
            for (int i = 0; i < 16; i++) w[i] = 0;
            // Only a float row ends inside a chunk; the block formats' cols is a multiple
            // of kSlice (32 or 256 values a block).
            if constexpr (T::kBlockValues == 1) {
                if (live)
                    for (int i = 0; i < 16 && first + i < cols; i++) w[i] = T::value(row, first + i);
            }
        }
#pragma unroll
        for (int i = 0; i < 16; i++) ws[16 * h + i][at] = w[i];
    }
}

// tileActivations writes the slice of one activation row (x, which live says exists) to
// xs[·][at], rounded as the product with T sees it: zeros past the row's end or for a
// token past the tile's count.
template <class T>
__device__ __forceinline__ void tileActivations(float (*xs)[kTileTokens], int at, const float* x, bool live, i64 cols,
                                                i64 c0) {
#pragma unroll
    for (int h = 0; h < kSlice / 16; h++) {
        const i64 first = c0 + 16 * h;
        float v[16];
        if (live && first + 16 <= cols) {
            // As in mmv: 16-byte loads for the block formats, whose cols keep rows aligned.
            loadFloats<T::kBlockValues != 1>(x + first, v);
        } else {
#pragma unroll
            for (int i = 0; i < 16; i++) v[i] = 0;
            if (live)
                for (int i = 0; i < 16 && first + i < cols; i++) v[i] = __ldg(x + first + i);
        }
#pragma unroll
        for (int i = 0; i < 16; i++) xs[16 * h + i][at] = activation<T>(v[i]);
    }
}

// matMulTile computes the outputs of tile rows 0 .. min(kTileRows, rowsLeft)-1, whose first
// row starts at w0 (row r0 of the matrix), for members first .. first+count-1 (count ≤
// kTileTokens) of the launch.
template <class T>
__device__ __forceinline__ void matMulTile(const u8* w0, i64 rowsLeft, i64 r0, i64 first, int count, const float* X,
                                           float* Y, const int* sel, i64 cols, i64 rows, i64 k, i64 xPerSlot,
                                           i64 rowBytes) {
    __shared__ float4 wTile[kSlice][kTileRows / 4];
    __shared__ float4 xTile[kSlice][kTileTokens / 4];
    float(*ws)[kTileRows] = reinterpret_cast<float(*)[kTileRows]>(wTile);
    float(*xs)[kTileTokens] = reinterpret_cast<float(*)[kTileTokens]>(xTile);
    const int lane = threadIdx.x;

    // The rows and the token this lane stages.
    const bool live0 = lane < rowsLeft, live1 = lane + kWarp < rowsLeft;
    const u8* row0 = w0 + lane * rowBytes;
    const u8* row1 = w0 + (lane + kWarp) * rowBytes;
    const bool xLive = lane < count;
    const float* x = X;
    if (xLive) {
        i64 xRow, yRow;
        member(sel, first + lane, k, xPerSlot, xRow, yRow);
        x = X + xRow * cols;
    }

    // The outputs this lane owns: acc[i][j] is row 4·rq + i (i < 4) or 32 + 4·rq + i-4, token
    // 4·tq + j (j < 4) or 16 + 4·tq + j-4; part[i][j] is the running slice's sum.
    const int rq = lane % 8, tq = lane / 8;
    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; i++)
#pragma unroll
        for (int j = 0; j < 8; j++) acc[i][j] = 0;

    for (i64 c0 = 0; c0 < cols; c0 += kSlice) {
        tileWeights<T>(ws, lane, row0, live0, cols, c0);
        tileWeights<T>(ws, lane + kWarp, row1, live1, cols, c0);
        tileActivations<T>(xs, lane, x, xLive, cols, c0);
        __syncwarp();
        float part[8][8];
#pragma unroll
        for (int i = 0; i < 8; i++)
#pragma unroll
            for (int j = 0; j < 8; j++) part[i][j] = 0;
#pragma unroll 4
        for (int c = 0; c < kSlice; c++) {
            const float4 wa = wTile[c][rq], wb = wTile[c][kTileRows / 8 + rq];
            const float4 xa = xTile[c][tq], xb = xTile[c][kTileTokens / 8 + tq];
            const float w[8] = {wa.x, wa.y, wa.z, wa.w, wb.x, wb.y, wb.z, wb.w};
            const float v[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
#pragma unroll
            for (int i = 0; i < 8; i++)
#pragma unroll
                for (int j = 0; j < 8; j++) part[i][j] = fmaf(w[i], v[j], part[i][j]);
        }
#pragma unroll
        for (int i = 0; i < 8; i++)
#pragma unroll
            for (int j = 0; j < 8; j++) acc[i][j] += part[i][j];
        __syncwarp();  // every lane has read the slice before the next one overwrites it
    }

#pragma unroll
    for (int j = 0; j < 8; j++) {
        const int token = (j < 4 ? 0 : kTileTokens / 2) + 4 * tq + j % 4;
        if (token < count) {
            i64 xRow, yRow;
            member(sel, first + token, k, xPerSlot, xRow, yRow);
            float* y = Y + yRow * rows + r0;
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const int r = (i < 4 ? 0 : kTileRows / 2) + 4 * rq + i % 4;
                if (r < rowsLeft) y[r] = acc[i][j];
            }
        }
    }
}

template <class T>
__device__ __forceinline__ void matMulTiled(const u8* __restrict__ W, const float* __restrict__ X, float* __restrict__ Y,
                                           const int* __restrict__ sel, const int* __restrict__ gstart,
                                           const int* __restrict__ gexpert, i64 cols, i64 rows, i64 n, i64 k,
                                           i64 xPerSlot, i64 rowBytes, i64 expertBytes) {
    const i64 r0 = i64(blockIdx.x) * kTileRows;
    if (r0 >= rows) return;  // the whole block (one warp) leaves
    const i64 groups = sel == nullptr ? (n + kTileTokens - 1) / kTileTokens : n;
    for (i64 g = blockIdx.y; g < groups; g += gridDim.y) {
        i64 first, end;
        const u8* w0 = groupSpan(W, sel, gstart, gexpert, g, kTileTokens, n, r0, rowBytes, expertBytes, first, end);
        for (; first < end; first += kTileTokens)
            matMulTile<T>(w0, rows - r0, r0, first, int(min(i64(kTileTokens), end - first)), X, Y, sel, cols, rows, k,
                          xPerSlot, rowBytes);
    }
}
