// Dequantizers of moerun's weight types, one struct per ggml type.
//
// Every struct has
//   kBlockValues, kBlockBytes: the type's block (as tensor.Type's table has it);
//   chunk(row, c, y): writes values 16c .. 16c+15 of the row starting at `row` to y.
// Blocks hold 32 or 256 values, so a chunk never straddles two blocks. The float types
// (kBlockValues == 1) also have value(row, i), value i alone, for rows whose length is not
// a multiple of 16.
//
// The layouts are those of package tensor's decoders (quant_legacy.go, kquant_block.go,
// quant_fp4.go, iq_nl.go), which are bit-exact with ggml; each struct's comment restates
// where its scales and bits live. The float operations are also the decoders' (a product
// that feeds an addition is rounded first, __fmul_rn, never fused), so a chunk is
// bit-identical to the CPU's dequantized values (a NaN stays a NaN, its payload may not).
//
// Alignment. The kernels require W to be 16-byte aligned, and its allocation to be readable
// up to the next multiple of 4 bytes past its end (every cudaMalloc allocation is). From
// that, a row's alignment is the largest power of two (at most 16) dividing the type's
// block size in bytes, as rowBytes and expertBytes are multiples of it; each struct loads
// with the widest access that alignment allows, and load16 handles the rest.
#pragma once

#include <cuda_fp16.h>
#include <stdint.h>

typedef unsigned char u8;
typedef unsigned int u32;

// ---- loads -----------------------------------------------------------------------------

// load16Aligned reads 16 bytes at a 16-byte aligned address.
__device__ __forceinline__ uint4 load16Aligned(const u8* p) {
    return __ldg(reinterpret_cast<const uint4*>(p));
}

// load16Words reads 16 bytes at a 4-byte aligned address.
__device__ __forceinline__ uint4 load16Words(const u8* p) {
    const u32* w = reinterpret_cast<const u32*>(p);
    return make_uint4(__ldg(w), __ldg(w + 1), __ldg(w + 2), __ldg(w + 3));
}

// load16 reads 16 bytes at any address as the aligned words covering them, shifted into
// place: 4 or 5 word loads instead of 16 byte loads. The fifth word is read only when p is
// not 4-byte aligned; it then holds p[15], so every word read holds a byte of the span and
// stays inside the allocation's 4-byte rounding. The word before p can belong to the
// previous block or row, never to memory before W (W is aligned).
__device__ __forceinline__ uint4 load16(const u8* p) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    const u32* w = reinterpret_cast<const u32*>(a & ~uintptr_t(3));
    const u32 shift = u32(a & 3) * 8;
    const u32 w0 = __ldg(w), w1 = __ldg(w + 1), w2 = __ldg(w + 2), w3 = __ldg(w + 3);
    const u32 w4 = shift ? __ldg(w + 4) : 0;
    return make_uint4(__funnelshift_r(w0, w1, shift), __funnelshift_r(w1, w2, shift),
                      __funnelshift_r(w2, w3, shift), __funnelshift_r(w3, w4, shift));
}

__device__ __forceinline__ u32 load32(const u8* p) { return __ldg(reinterpret_cast<const u32*>(p)); }

__device__ __forceinline__ u32 load16bits(const u8* p) {
    return __ldg(reinterpret_cast<const unsigned short*>(p));
}

// ---- conversions -----------------------------------------------------------------------

__device__ __forceinline__ float halfBits(u32 h) { return __half2float(__ushort_as_half((unsigned short)h)); }

// roundToBF16 rounds v to the nearest BF16, ties to even, as package tensor's F32ToBF16 (a
// NaN stays a NaN, made quiet).
__device__ __forceinline__ float roundToBF16(float v) {
    const u32 b = __float_as_uint(v);
    if ((b & 0x7FFFFFFFu) > 0x7F800000u) return __uint_as_float((b | 0x00400000u) & 0xFFFF0000u);
    return __uint_as_float((b + 0x7FFFu + ((b >> 16) & 1)) & 0xFFFF0000u);
}

// byteValue returns byte I of w minus bias, exactly, without the slow integer-to-float
// conversion: the byte becomes the low mantissa bits of 2^23 (0x4B0000bb), and one
// subtraction of 2^23 + bias leaves bb - bias. The bias is a small integer, so the constant
// is exact too.
template <int I>
__device__ __forceinline__ float byteValue(u32 w, float bias) {
    return __int_as_float(__byte_perm(w, 0x4B000000u, 0x7440 | I)) - (8388608.0f + bias);
}

// byteAt is byte i of w, i not known at compile time.
__device__ __forceinline__ u32 byteAt(u32 w, u32 i) { return (w >> (8 * i)) & 0xFF; }

// scaledValues writes the 16 codes of codes (one a byte, in byte order) as (code - bias)·d,
// plus m for the formats with a min (kMin), each operation rounded on its own as package
// tensor's decoders do. Every format without a table is this with its own bias, d and m:
// the K-quants' m is -(dmin·min), as x + -y is exactly x - y.
template <bool kMin>
__device__ __forceinline__ void scaledValues(const u32 (&codes)[4], float bias, float d, float m, float (&y)[16]) {
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float v[4] = {byteValue<0>(codes[i], bias), byteValue<1>(codes[i], bias), byteValue<2>(codes[i], bias),
                            byteValue<3>(codes[i], bias)};
#pragma unroll
        for (int j = 0; j < 4; j++) y[4 * i + j] = kMin ? __fadd_rn(__fmul_rn(v[j], d), m) : __fmul_rn(v[j], d);
    }
}

// Table16 holds a 16-entry table of signed bytes, stored plus 128 so byteValue can convert
// them (bias 128).
struct Table16 {
    u32 w[4];
};

__host__ __device__ constexpr u32 packBiased(int a, int b, int c, int d) {
    return u32(a + 128) | u32(b + 128) << 8 | u32(c + 128) << 16 | u32(d + 128) << 24;
}

// lookupValues maps four 4-bit codes (one in the low nibble of each byte of codes, high
// nibbles clear) through the table and writes the entries to y[0..3] in byte order. The
// codes are first packed as the 16-bit byte selector PRMT wants; that packing, codes |
// codes >> 12, leaves them in nibble order 0, 2, 1, 3. Two PRMTs look up the low (index
// 0-7) and high (8-15) halves of the table by the index's low 3 bits, a third picks per
// byte by bit 3: all in registers, where an indexed array would go to local memory and a
// __constant__ table would serialize lanes reading different entries.
__device__ __forceinline__ void lookupValues(u32 codes, const Table16& t, float* y) {
    const u32 sel = codes | (codes >> 12);
    const u32 lo = __byte_perm(t.w[0], t.w[1], sel & 0x7777);
    const u32 hi = __byte_perm(t.w[2], t.w[3], sel & 0x7777);
    const u32 v = __byte_perm(lo, hi, 0x3210 | ((sel & 0x8888) >> 1));
    y[0] = byteValue<0>(v, 128);
    y[2] = byteValue<1>(v, 128);
    y[1] = byteValue<2>(v, 128);
    y[3] = byteValue<3>(v, 128);
}

// loadFloats reads 16 floats: as four 16-byte loads where p is aligned, which kAligned
// promises, or else a test of p decides. (The kernels' callers pass pointers whose
// alignment is the same for every chunk of a row, so the warp never diverges on the test.)
template <bool kAligned>
__device__ __forceinline__ void loadFloats(const float* p, float (&y)[16]) {
    if (kAligned || (reinterpret_cast<uintptr_t>(p) & 15) == 0) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float4 v = __ldg(reinterpret_cast<const float4*>(p) + i);
            y[4 * i] = v.x, y[4 * i + 1] = v.y, y[4 * i + 2] = v.z, y[4 * i + 3] = v.w;
        }
    } else {
#pragma unroll
        for (int i = 0; i < 16; i++) y[i] = __ldg(p + i);
    }
}

// ---- float types -----------------------------------------------------------------------

// The float types' rows are only as aligned as their length makes them, so chunk tests the
// address: it is the same for every chunk of a row, so the warp never diverges on it.

struct TypeF32 {
    static constexpr int kBlockValues = 1, kBlockBytes = 4;
    __device__ static float value(const u8* row, long long i) {
        return __ldg(reinterpret_cast<const float*>(row) + i);
    }
    __device__ static void chunk(const u8* row, int c, float (&y)[16]) {
        loadFloats<false>(reinterpret_cast<const float*>(row) + 16 * c, y);
    }
};

// load32Bytes reads the 32 bytes of a 16-bit float chunk (rows are 2-byte aligned).
__device__ __forceinline__ void load32Bytes(const u8* p, uint4& a, uint4& b) {
    if ((reinterpret_cast<uintptr_t>(p) & 15) == 0) {
        a = load16Aligned(p), b = load16Aligned(p + 16);
    } else {
        a = load16(p), b = load16(p + 16);
    }
}

struct TypeF16 {
    static constexpr int kBlockValues = 1, kBlockBytes = 2;
    __device__ static float value(const u8* row, long long i) { return halfBits(load16bits(row + 2 * i)); }
    __device__ static void chunk(const u8* row, int c, float (&y)[16]) {
        uint4 a, b;
        load32Bytes(row + 32 * c, a, b);
        const u32 w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
        for (int i = 0; i < 8; i++) y[2 * i] = halfBits(w[i] & 0xFFFF), y[2 * i + 1] = halfBits(w[i] >> 16);
    }
};

// BF16 is the upper half of a float32.
struct TypeBF16 {
    static constexpr int kBlockValues = 1, kBlockBytes = 2;
    __device__ static float value(const u8* row, long long i) { return __uint_as_float(load16bits(row + 2 * i) << 16); }
    __device__ static void chunk(const u8* row, int c, float (&y)[16]) {
        uint4 a, b;
        load32Bytes(row + 32 * c, a, b);
        const u32 w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
        for (int i = 0; i < 8; i++) y[2 * i] = __uint_as_float(w[i] << 16), y[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
    }
};

// ---- 32-value formats ------------------------------------------------------------------

// In Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL and MXFP4, the 16 quant bytes hold value j in the low
// nibble of byte j and value j+16 in the high one: chunk h (0 or 1) of a block takes the
// low or high nibbles of all 16 bytes. nibbles returns them, one a byte.
__device__ __forceinline__ u32 nibbles(u32 w, int h) { return (w >> (4 * h)) & 0x0F0F0F0Fu; }

// spreadBits moves bits 0-3 of x to bit 0 of bytes 0-3 (the multiplier's terms land the
// bits 7 apart, with no carries between them).
__device__ __forceinline__ u32 spreadBits(u32 x) { return ((x & 15) * 0x00204081u) & 0x01010101u; }

// legacyCodes returns chunk h's codes from the 16 quant bytes q and, for Q5_0 and Q5_1, the
// 5th bits qh (bit j for value j of the block, 0 for the 4-bit formats) at bit 4.
__device__ __forceinline__ void legacyCodes(uint4 q, int h, u32 qh, u32 (&codes)[4]) {
    const u32 w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int i = 0; i < 4; i++) codes[i] = nibbles(w[i], h) | spreadBits(qh >> (16 * h + 4 * i)) << 4;
}

// The legacy formats' values are (q - 2^(bits-1))·d, or q·d + m for the _1 formats.

// Q4_0 (18 bytes): d f16, 16 bytes of nibbles.
struct TypeQ4_0 {
    static constexpr int kBlockValues = 32, kBlockBytes = 18;
    __device__ static void chunk(const u8* row, int c, float (&y)[16]) {
        const u8* b = row + (c >> 1) * kBlockBytes;
        u32 codes[4];
        legacyCodes(load16(b + 2), c & 1, 0, codes);
        scaledValues<false>(codes, 8, halfBits(load16bits(b)), 0, y);
    }
};

// Q4_1 (20 bytes): d f16, m f16, 16 bytes of nibbles. 4-byte aligned.
struct TypeQ4_1 {
    static constexpr int kBlockValues = 32, kBlockBytes = 20;
    __device__ static void chunk(const u8* row, int c, float (&y)[16]) {
        const u8* b = row + (c >> 1) * kBlockBytes;
        const u32 dm = load32(b);
        u32 codes[4];
        legacyCodes(load16Words(b + 4), c & 1, 0, codes);
        scaledValues<true>(codes, 0, halfBits(dm & 0xFFFF), halfBits(dm >> 16), y);
    }
};

// Q5_0 (22 bytes): d f16, qh u32 (2-byte aligned), 16 bytes of nibbles.
struct TypeQ5_0 {
    static constexpr int kBlockValues = 32, kBlockBytes = 22;
    __device__ static void chunk(const u8* row, int c, float (&y)[16]) {
        const u8* b = row + (c >> 1) * kBlockBytes;
        u32 codes[4];
        legacyCodes(load16(b + 6), c & 1, load16bits(b + 2) | load16bits(b + 4) << 16, codes);
        scaledValues<false>(codes, 16, halfBits(load16bits(b)), 0, y);
    }
};

// Q5_1 (24 bytes): d f16, m f16, qh u32, 16 bytes of nibbles. 8-byte aligned.
struct TypeQ5_1 {
    static constexpr int kBlockValues = 32, kBlockBytes = 24;
    __device__ static void chunk(const u8* row, int c, float (&y)[16]) {
        const u8* b = row + (c >> 1) * kBlockBytes;
        const u32 dm = load32(b);
        u32 codes[4];
        legacyCodes(load16Words(b + 8), c & 1, load32(b + 4), codes);
        scaledValues<true>(codes, 0, halfBits(dm & 0xFFFF), halfBits(dm >> 16), y);
    }
};

// Q8_0 (34 bytes): d f16, 32 signed bytes; value = q·d. Flipping each byte's top bit turns
// the signed byte into q + 128.
struct TypeQ8_0 {
    static constexpr int kBlockValues = 32, kBlockBytes = 34;
    __device__ static void chunk(const u8* row, int c, float (&y)[16]) {
        const u8* b = row + (c >> 1) * kBlockBytes;
        const uint4 q = load16(b + 2 + 16 * (c & 1));
        const u32 codes[4] = {q.x ^ 0x80808080u, q.y ^ 0x80808080u, q.z ^ 0x80808080u, q.w ^ 0x80808080u};
        scaledValues<false>(codes, 128, halfBits(load16bits(b)), 0, y);
    }
};

// The 16 levels of IQ4_NL and IQ4_XS.
__device__ __forceinline__ Table16 iq4Levels() {
    return Table16{{packBiased(-127, -104, -83, -65), packBiased(-49, -35, -22, -10), packBiased(1, 13, 25, 38),
                    packBiased(53, 69, 89, 113)}};
}

// levelChunk writes d·level for the 16 nibbles of q selected by h (low or high).
__device__ __forceinline__ void levelChunk(uint4 q, int h, const Table16& t, float d, float (&y)[16]) {
    const u32 w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        lookupValues(nibbles(w[i], h), t, y + 4 * i);
#pragma unroll
        for (int j = 0; j < 4; j++) y[4 * i + j] = d * y[4 * i + j];
    }
}

// IQ4_NL (18 bytes): d f16, 16 bytes of nibbles indexing the levels; value = d·level.
struct TypeIQ4_NL {
    static constexpr int kBlockValues = 32, kBlockBytes = 18;
    __device__ static void chunk(const u8* row, int c, float (&y)[16]) {
        const u8* b = row + (c >> 1) * kBlockBytes;
        levelChunk(load16(b + 2), c & 1, iq4Levels(), halfBits(load16bits(b)), y);
    }
};

// e8m0Half is 2^(e-128), half the E8M0 scale (the E2M1 values are stored doubled); e = 0
// and 1 give float32 subnormals.
__device__ __forceinline__ float e8m0Half(u32 e) {
    return __uint_as_float(e < 2 ? 0x00200000u << e : (e - 1) << 23);
}

// MXFP4 (17 bytes): E8M0 exponent e, 16 bytes of nibbles indexing the E2M1 values
// (doubled, so they are integers); value = level·2^(e-128).
struct TypeMXFP4 {
    static constexpr int kBlockValues = 32, kBlockBytes = 17;
    __device__ static void chunk(const u8* row, int c, float (&y)[16]) {
        const u8* b = row + (c >> 1) * kBlockBytes;
        const Table16 fp4{{packBiased(0, 1, 2, 3), packBiased(4, 6, 8, 12), packBiased(0, -1, -2, -3),
                           packBiased(-4, -6, -8, -12)}};
        levelChunk(load16(b + 1), c & 1, fp4, e8m0Half(__ldg(b)), y);
    }
};

// ---- 256-value formats -----------------------------------------------------------------

// In a K-quant block, chunk g (0..15) is the group of 16 values with its own scale. The
// value is (d·scale)·q - dmin·min, computed in that order (tensor.kFormat.decode):
// scaledValues with d = d·scale and m = -(dmin·min). Q3_K and Q6_K have no min: their
// decoder subtracts 0, which changes no value (x - 0 is x, -0 included).

// addField ORs the bit field (w >> shift) & mask of each word w of q, moved up by `to`,
// into codes: a chunk's codes are assembled field by field (low bits, then the extra high
// bits), all bytes of a word at once.
__device__ __forceinline__ void addField(uint4 q, int shift, u32 mask, int to, u32 (&codes)[4]) {
    codes[0] |= ((q.x >> shift) & mask) << to;
    codes[1] |= ((q.y >> shift) & mask) << to;
    codes[2] |= ((q.z >> shift) & mask) << to;
    codes[3] |= ((q.w >> shift) & mask) << to;
}

// Q2_K's and Q3_K's 64 bytes of 2-bit codes: byte l of half h (32 bytes) holds values
// 128h + 32s + l at bits 2s, so chunk g takes bit pair (g%8)/2 of the 16 bytes at
// twoBitsOffset(g).
__device__ __forceinline__ int twoBitsOffset(int g) { return 32 * (g >> 3) + 16 * (g & 1); }
__device__ __forceinline__ int twoBitsShift(int g) { return 2 * ((g & 7) >> 1); }

// Q3_K's hmask and Q5_K's qh hold value e's extra bit as bit e/32 of byte e%32, so chunk g
// takes bit g/2 of the 16 bytes at 16·(g%2).

// Q2_K (84 bytes): scales[16] (low nibble scale, high nibble min of group g), qs[64], d f16
// at 80, dmin f16 at 82. 4-byte aligned.
struct TypeQ2_K {
    static constexpr int kBlockValues = 256, kBlockBytes = 84;
    __device__ static void chunk(const u8* row, int c, float (&y)[16]) {
        const u8* b = row + (c >> 4) * kBlockBytes;
        const int g = c & 15;
        const u32 sm = __ldg(b + g), dd = load32(b + 80);
        u32 codes[4] = {};
        addField(load16Words(b + 16 + twoBitsOffset(g)), twoBitsShift(g), 0x03030303u, 0, codes);
        const float dl = halfBits(dd & 0xFFFF) * float(sm & 15);
        const float ml = halfBits(dd >> 16) * float(sm >> 4);
        scaledValues<true>(codes, 0, dl, -ml, y);
    }
};

// Q3_K (110 bytes): hmask[32] (3rd bit; clear means q - 4), qs[64] 2-bit codes, scales[12],
// d f16 at 108. The 6-bit scales are stored plus 32: group g's low 4 bits are nibble g/8 of
// scales[g%8], its top 2 bits are bit pair g/4 of scales[8 + g%4]. With the 3rd bit at bit
// 2, q = code - 4. 2-byte aligned.
struct TypeQ3_K {
    static constexpr int kBlockValues = 256, kBlockBytes = 110;
    __device__ static void chunk(const u8* row, int c, float (&y)[16]) {
        const u8* b = row + (c >> 4) * kBlockBytes;
        const int g = c & 15;
        u32 codes[4] = {};
        addField(load16(b + 32 + twoBitsOffset(g)), twoBitsShift(g), 0x03030303u, 0, codes);
        addField(load16(b + 16 * (g & 1)), g >> 1, 0x01010101u, 2, codes);
        const u32 low = (__ldg(b + 96 + (g & 7)) >> (4 * (g >> 3))) & 15;
        const u32 high = (__ldg(b + 104 + (g & 3)) >> (2 * (g >> 2))) & 3;
        const float dl = halfBits(load16bits(b + 108)) * float(int(low | high << 4) - 32);
        scaledValues<false>(codes, 4, dl, 0, y);
    }
};

// kScaleMin unpacks the 6-bit scale and min of sub-block j (0..7; chunk g is in j = g/2)
// from the 12 bytes s0|s1|s2 at offset 4 of Q4_K and Q5_K: for j < 4 the low 6 bits of
// s0[j] and s1[j]; for j ≥ 4 the nibbles of s2[j-4] with the top 2 bits of s0[j-4] and
// s1[j-4] above them. Both forms are computed and selected, so lanes never diverge.
__device__ __forceinline__ void kScaleMin(u32 s0, u32 s1, u32 s2, int j, u32& sc, u32& m) {
    const u32 i = j & 3;
    const u32 x0 = byteAt(s0, i), x1 = byteAt(s1, i), x2 = byteAt(s2, i);
    sc = j < 4 ? x0 & 63 : (x2 & 15) | (x0 >> 6) << 4;
    m = j < 4 ? x1 & 63 : (x2 >> 4) | (x1 >> 6) << 4;
}

// Q4_K (144 bytes) and Q5_K (176 bytes): d f16, dmin f16, 12 bytes of scales and mins,
// [Q5_K: qh[32], the 5th bits, see above], qs[128]: byte l of 32-byte piece p holds value
// 64p + l in its low nibble and 64p + 32 + l in its high one, so chunk g reads bytes
// 32·(g/4) + 16·(g%2) .. +15, high nibbles when g%4 ≥ 2. Both are 16-byte aligned.
template <bool kFifthBit>
struct TypeQ45_K {
    static constexpr int kBlockValues = 256, kBlockBytes = kFifthBit ? 176 : 144;
    __device__ static void chunk(const u8* row, int c, float (&y)[16]) {
        const u8* b = row + (c >> 4) * kBlockBytes;
        const int g = c & 15;
        const int qsOffset = kFifthBit ? 48 : 16;
        u32 codes[4] = {};
        addField(load16Aligned(b + qsOffset + 32 * (g >> 2) + 16 * (g & 1)), (g & 2) << 1, 0x0F0F0F0Fu, 0, codes);
        if (kFifthBit) addField(load16Aligned(b + 16 + 16 * (g & 1)), g >> 1, 0x01010101u, 4, codes);
        const uint4 head = load16Aligned(b);  // d, dmin and the scales: one load
        u32 sc, m;
        kScaleMin(head.y, head.z, head.w, g >> 1, sc, m);
        const float dl = halfBits(head.x & 0xFFFF) * float(sc);
        const float ml = halfBits(head.x >> 16) * float(m);
        scaledValues<true>(codes, 0, dl, -ml, y);
    }
};

typedef TypeQ45_K<false> TypeQ4_K;
typedef TypeQ45_K<true> TypeQ5_K;

// Q6_K (210 bytes): ql[128], qh[64], scales int8[16] at 192, d f16 at 208; q = 6-bit code
// - 32. In half h (128 values), value 32s + l takes its low 4 bits from ql[64h + 32·(s%2)
// + l] (low nibble for s < 2, high for s ≥ 2) and its top 2 bits from bit pair s of
// qh[32h + l]. Chunk g is h = g/8, s = (g%8)/2, l = 16·(g%2) .. +15. 2-byte aligned.
struct TypeQ6_K {
    static constexpr int kBlockValues = 256, kBlockBytes = 210;
    __device__ static void chunk(const u8* row, int c, float (&y)[16]) {
        const u8* b = row + (c >> 4) * kBlockBytes;
        const int g = c & 15, h = g >> 3, s = (g & 7) >> 1, l = 16 * (g & 1);
        u32 codes[4] = {};
        addField(load16(b + 64 * h + 32 * (s & 1) + l), 4 * (s >> 1), 0x0F0F0F0Fu, 0, codes);
        addField(load16(b + 128 + 32 * h + l), 2 * s, 0x03030303u, 4, codes);
        const float dl = halfBits(load16bits(b + 208)) * float((signed char)__ldg(b + 192 + g));
        scaledValues<false>(codes, 32, dl, 0, y);
    }
};

// IQ4_XS (136 bytes): d f16, scales_h u16, scales_l[4], qs[128]. Sub-block j (32 values,
// chunks 2j and 2j+1) has the 6-bit scale ls stored plus 32: low 4 bits are nibble j of
// scales_l (read as a little-endian u32), top 2 bits are bit pair j of scales_h; its nibbles
// are qs[16j .. 16j+15], low nibbles its first 16 values. value = (d·(ls - 32))·level.
// 8-byte aligned.
struct TypeIQ4_XS {
    static constexpr int kBlockValues = 256, kBlockBytes = 136;
    __device__ static void chunk(const u8* row, int c, float (&y)[16]) {
        const u8* b = row + (c >> 4) * kBlockBytes;
        const int g = c & 15, j = g >> 1;
        const uint2 head = __ldg(reinterpret_cast<const uint2*>(b));
        const u32 ls = ((head.y >> (4 * j)) & 15) | ((head.x >> (16 + 2 * j)) & 3) << 4;
        const float d = halfBits(head.x & 0xFFFF) * float(int(ls) - 32);
        const uint2 q0 = __ldg(reinterpret_cast<const uint2*>(b + 8 + 16 * j));
        const uint2 q1 = __ldg(reinterpret_cast<const uint2*>(b + 16 + 16 * j));
        levelChunk(make_uint4(q0.x, q0.y, q1.x, q1.y), g & 1, iq4Levels(), d, y);
    }
};
