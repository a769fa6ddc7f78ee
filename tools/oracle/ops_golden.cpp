// ops_golden: runs ggml-cpu's own operators (ggml.h / ggml-cpu.h API) on deterministic inputs
// and prints their outputs as JSON, so moerun's tensor package can be compared with them bit
// for bit: rms_norm, soft_max_ext, silu, swiglu, swiglu_oai, sigmoid, rope_ext (normal and
// NeoX, YaRN, partial, offset, frequency factors), argsort (ties) and flash_attn_ext (the
// per-row, split-KV and tiled kernels, GQA, MLA-style V views, sinks, sliding window, F16 and
// Q8_0 caches). Inputs come from a splitmix64 stream per case that the Go test regenerates;
// outputs are base64 little-endian float32/int32. Run with 2 threads on an AVX-512 build,
// like the fixtures. Never built by CI.
//
//   g++ -O2 -std=c++17 -I$LLAMA/ggml/include ops_golden.cpp -L$LLAMA/build/bin \
//       -lggml -lggml-base -lggml-cpu -Wl,-rpath,$LLAMA/build/bin -o ops_golden
//   ./ops_golden > ../../tensor/testdata/ggml-ops.json
#include "ggml.h"
#include "ggml-cpu.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

static const int n_threads = 2;

// The input stream: splitmix64, each draw mapped to a multiple of 2^-13 in [-4, 4), which
// float32 holds exactly in any language.
struct stream {
    uint64_t s;
    explicit stream(uint64_t seed) : s(seed) {}
    uint64_t next() {
        uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        return z ^ (z >> 31);
    }
    float uniform() { return (float) ((int) (next() >> 48) - 32768) / 8192.0f; }
    void fill(float * x, int64_t n, float scale) {
        for (int64_t i = 0; i < n; i++) x[i] = uniform() * scale;
    }
};

static std::string base64(const void * data, size_t n) {
    static const char * tab = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const uint8_t * p = (const uint8_t *) data;
    std::string out;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = p[i] << 16 | (i + 1 < n ? p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        out += tab[v >> 18 & 63];
        out += tab[v >> 12 & 63];
        out += i + 1 < n ? tab[v >> 6 & 63] : '=';
        out += i + 2 < n ? tab[v & 63] : '=';
    }
    return out;
}

static bool first_case = true;

// begin_case prints the common fields; the caller adds its own and ends with end_case.
static void begin_case(const char * op, const char * name, uint64_t seed) {
    printf("%s\n  {\"op\": \"%s\", \"name\": \"%s\", \"seed\": %llu", first_case ? "" : ",", op, name, (unsigned long long) seed);
    first_case = false;
}

static void end_case(const ggml_tensor * out) {
    printf(", \"out\": \"%s\"}", base64(out->data, ggml_nbytes(out)).c_str());
}

static void print_ints(const char * key, const std::vector<int> & v) {
    printf(", \"%s\": [", key);
    for (size_t i = 0; i < v.size(); i++) printf("%s%d", i ? ", " : "", v[i]);
    printf("]");
}

struct graph {
    ggml_context * ctx;
    graph() {
        ggml_init_params params = {256u << 20, nullptr, false};
        ctx = ggml_init(params);
    }
    ~graph() { ggml_free(ctx); }
    void compute(ggml_tensor * out) {
        ggml_cgraph * gf = ggml_new_graph(ctx);
        ggml_build_forward_expand(gf, out);
        if (ggml_graph_compute_with_ctx(ctx, gf, n_threads) != GGML_STATUS_SUCCESS) {
            fprintf(stderr, "compute failed\n");
            exit(1);
        }
    }
    ggml_tensor * f32(int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1) {
        return ggml_new_tensor_3d(ctx, GGML_TYPE_F32, ne0, ne1, ne2);
    }
};

static void rms_norm_case(const char * name, uint64_t seed, int cols, int rows, float eps, float scale) {
    graph g;
    stream s(seed);
    ggml_tensor * x = g.f32(cols, rows);
    s.fill((float *) x->data, cols * rows, scale);
    ggml_tensor * out = ggml_rms_norm(g.ctx, x, eps);
    g.compute(out);
    begin_case("rms_norm", name, seed);
    printf(", \"cols\": %d, \"rows\": %d, \"eps\": %.9g, \"scale\": %.9g", cols, rows, eps, scale);
    end_case(out);
}

// The mask draws one value per element: below -3 it is -inf, otherwise the value itself.
static void soft_max_case(const char * name, uint64_t seed, int cols, int rows, float scale, bool mask) {
    graph g;
    stream s(seed);
    ggml_tensor * x = g.f32(cols, rows);
    s.fill((float *) x->data, cols * rows, 2.0f);
    ggml_tensor * m = nullptr;
    if (mask) {
        m = g.f32(cols, rows);
        float * md = (float *) m->data;
        for (int i = 0; i < cols * rows; i++) {
            float v = s.uniform();
            md[i] = v < -3 ? -INFINITY : v;
        }
    }
    ggml_tensor * out = ggml_soft_max_ext(g.ctx, x, m, scale, 0.0f);
    g.compute(out);
    begin_case("soft_max", name, seed);
    printf(", \"cols\": %d, \"rows\": %d, \"scale\": %.9g, \"mask\": %s", cols, rows, scale, mask ? "true" : "false");
    end_case(out);
}

// Unary and gated activations: x (and then g) drawn with the given scale.
static void act_case(const char * op, const char * name, uint64_t seed, int cols, int rows, float scale) {
    graph g;
    stream s(seed);
    ggml_tensor * a = g.f32(cols, rows);
    ggml_tensor * b = g.f32(cols, rows);
    s.fill((float *) a->data, cols * rows, scale);
    s.fill((float *) b->data, cols * rows, scale);
    ggml_tensor * out;
    const float alpha = 1.702f, limit = 7.0f;
    if (!strcmp(op, "silu")) {
        out = ggml_silu(g.ctx, a);
    } else if (!strcmp(op, "sigmoid")) {
        out = ggml_sigmoid(g.ctx, a);
    } else if (!strcmp(op, "swiglu")) {
        out = ggml_swiglu_split(g.ctx, a, b);
    } else {
        out = ggml_swiglu_oai(g.ctx, a, b, alpha, limit);
    }
    g.compute(out);
    begin_case(op, name, seed);
    printf(", \"cols\": %d, \"rows\": %d, \"scale\": %.9g, \"alpha\": %.9g, \"limit\": %.9g", cols, rows, scale, alpha, limit);
    end_case(out);
}

struct rope_params {
    int mode, n_dims, offset, n_ctx_orig;
    float base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow;
    bool freq_factors;
};

// x is [ne0, heads, tokens]; freq factors (if any) are 1 + |draw| after x.
static void rope_case(const char * name, uint64_t seed, int ne0, int heads, const std::vector<int> & pos, const rope_params & p) {
    graph g;
    stream s(seed);
    const int tokens = (int) pos.size();
    ggml_tensor * x = g.f32(ne0, heads, tokens);
    s.fill((float *) x->data, (int64_t) ne0 * heads * tokens, 1.0f);
    ggml_tensor * b = ggml_new_tensor_1d(g.ctx, GGML_TYPE_I32, tokens);
    memcpy(b->data, pos.data(), tokens * sizeof(int));
    ggml_tensor * ff = nullptr;
    if (p.freq_factors) {
        ff = g.f32(p.n_dims / 2);
        for (int i = 0; i < p.n_dims / 2; i++) ((float *) ff->data)[i] = 1.0f + fabsf(s.uniform());
    }
    ggml_tensor * out = ggml_rope_ext(g.ctx, x, b, ff, p.n_dims, p.mode, p.n_ctx_orig, p.base, p.freq_scale,
                                      p.ext_factor, p.attn_factor, p.beta_fast, p.beta_slow);
    if (p.offset) {
        out = ggml_rope_set_offset(out, p.offset);
    }
    g.compute(out);
    begin_case("rope", name, seed);
    printf(", \"ne0\": %d, \"heads\": %d", ne0, heads);
    print_ints("pos", pos);
    printf(", \"mode\": %d, \"n_dims\": %d, \"offset\": %d, \"n_ctx_orig\": %d, \"base\": %.9g, \"freq_scale\": %.9g, "
           "\"ext_factor\": %.9g, \"attn_factor\": %.9g, \"beta_fast\": %.9g, \"beta_slow\": %.9g, \"freq_factors\": %s",
           p.mode, p.n_dims, p.offset, p.n_ctx_orig, p.base, p.freq_scale, p.ext_factor, p.attn_factor, p.beta_fast,
           p.beta_slow, p.freq_factors ? "true" : "false");
    end_case(out);
}

// Values are floor(draw · spread) (many ties), or explicit.
static void argsort_case(const char * name, uint64_t seed, const std::vector<float> & values) {
    graph g;
    ggml_tensor * x = g.f32((int64_t) values.size());
    memcpy(x->data, values.data(), values.size() * sizeof(float));
    ggml_tensor * out = ggml_argsort(g.ctx, x, GGML_SORT_ORDER_DESC);
    g.compute(out);
    begin_case("argsort", name, seed);
    printf(", \"n\": %zu, \"in\": \"%s\"", values.size(), base64(values.data(), values.size() * sizeof(float)).c_str());
    end_case(out);
}

static std::vector<float> tied_values(uint64_t seed, int n, float spread) {
    stream s(seed);
    std::vector<float> v(n);
    for (int i = 0; i < n; i++) v[i] = floorf(s.uniform() * spread);
    return v;
}

struct attn_params {
    ggml_type type;
    int dk, dv, heads, kv_heads, n_kv;
    std::vector<int> pos; // per query token
    float scale;
    int window;
    bool sinks;
    bool mla; // V is the first dv elements of each K row
};

// Draw order: q [dk][heads][tokens], k [dk][kv_heads][n_kv], v likewise (unless mla), then
// the sinks. K and V are converted to the cache type (f16 rounding, q8_0 reference quantizer).
static void attn_case(const char * name, uint64_t seed, const attn_params & p) {
    graph g;
    stream s(seed);
    const int tokens = (int) p.pos.size();
    ggml_tensor * q = g.f32(p.dk, p.heads, tokens);
    s.fill((float *) q->data, (int64_t) p.dk * p.heads * tokens, 0.5f);
    std::vector<float> kf((size_t) p.dk * p.kv_heads * p.n_kv), vf((size_t) p.dv * p.kv_heads * p.n_kv);
    s.fill(kf.data(), (int64_t) kf.size(), 0.5f);
    if (!p.mla) {
        s.fill(vf.data(), (int64_t) vf.size(), 1.0f);
    }
    ggml_tensor * k = ggml_new_tensor_3d(g.ctx, p.type, p.dk, p.kv_heads, p.n_kv);
    ggml_quantize_chunk(p.type, kf.data(), k->data, 0, (int64_t) p.kv_heads * p.n_kv, p.dk, nullptr);
    ggml_tensor * v;
    if (p.mla) {
        v = ggml_view_3d(g.ctx, k, p.dv, p.kv_heads, p.n_kv, k->nb[1], k->nb[2], 0);
    } else {
        v = ggml_new_tensor_3d(g.ctx, p.type, p.dv, p.kv_heads, p.n_kv);
        ggml_quantize_chunk(p.type, vf.data(), v->data, 0, (int64_t) p.kv_heads * p.n_kv, p.dv, nullptr);
    }
    ggml_tensor * mask = ggml_new_tensor_2d(g.ctx, GGML_TYPE_F16, p.n_kv, tokens);
    for (int t = 0; t < tokens; t++) {
        for (int j = 0; j < p.n_kv; j++) {
            bool visible = j <= p.pos[t] && (p.window == 0 || p.pos[t] - j < p.window);
            ((ggml_fp16_t *) mask->data)[t * p.n_kv + j] = ggml_fp32_to_fp16(visible ? 0.0f : -INFINITY);
        }
    }
    ggml_tensor * out = ggml_flash_attn_ext(g.ctx, ggml_permute(g.ctx, q, 0, 2, 1, 3), ggml_permute(g.ctx, k, 0, 2, 1, 3),
                                            ggml_permute(g.ctx, v, 0, 2, 1, 3), mask, p.scale, 0.0f, 0.0f);
    ggml_flash_attn_ext_set_prec(out, GGML_PREC_F32);
    if (p.sinks) {
        ggml_tensor * sinks = g.f32(p.heads);
        s.fill((float *) sinks->data, p.heads, 2.0f);
        ggml_flash_attn_ext_add_sinks(out, sinks);
    }
    g.compute(out);
    begin_case("flash_attn_ext", name, seed);
    printf(", \"type\": \"%s\", \"dk\": %d, \"dv\": %d, \"heads\": %d, \"kv_heads\": %d, \"n_kv\": %d",
           ggml_type_name(p.type), p.dk, p.dv, p.heads, p.kv_heads, p.n_kv);
    print_ints("pos", p.pos);
    printf(", \"scale\": %.9g, \"window\": %d, \"sinks\": %s, \"mla\": %s", p.scale, p.window, p.sinks ? "true" : "false",
           p.mla ? "true" : "false");
    end_case(out);
}

// Weights [cols][rows] (or [cols][rows][experts]) drawn ×0.5 and quantized with ggml's
// reference quantizer, then activations drawn ×1: [cols][tokens] for mul_mat,
// [cols][1 or k][tokens] for mul_mat_id, whose expert ids are listed in the case.
static void mul_mat_case(const char * name, uint64_t seed, ggml_type type, int cols, int rows, int tokens) {
    graph g;
    stream s(seed);
    std::vector<float> wf((size_t) cols * rows);
    s.fill(wf.data(), (int64_t) wf.size(), 0.5f);
    ggml_tensor * w = ggml_new_tensor_2d(g.ctx, type, cols, rows);
    ggml_quantize_chunk(type, wf.data(), w->data, 0, rows, cols, nullptr);
    ggml_tensor * x = g.f32(cols, tokens);
    s.fill((float *) x->data, (int64_t) cols * tokens, 1.0f);
    ggml_tensor * out = ggml_mul_mat(g.ctx, w, x);
    g.compute(out);
    begin_case("mul_mat", name, seed);
    printf(", \"type\": \"%s\", \"cols\": %d, \"rows\": %d, \"n\": %d", ggml_type_name(type), cols, rows, tokens);
    end_case(out);
}

static void mul_mat_id_case(const char * name, uint64_t seed, ggml_type type, int cols, int rows, int experts,
                            const std::vector<int> & ids, int k, bool per_slot) {
    graph g;
    stream s(seed);
    const int tokens = (int) ids.size() / k;
    std::vector<float> wf((size_t) cols * rows * experts);
    s.fill(wf.data(), (int64_t) wf.size(), 0.5f);
    ggml_tensor * w = ggml_new_tensor_3d(g.ctx, type, cols, rows, experts);
    ggml_quantize_chunk(type, wf.data(), w->data, 0, (int64_t) rows * experts, cols, nullptr);
    const int slots = per_slot ? k : 1;
    ggml_tensor * x = g.f32(cols, slots, tokens);
    s.fill((float *) x->data, (int64_t) cols * slots * tokens, 1.0f);
    ggml_tensor * idt = ggml_new_tensor_2d(g.ctx, GGML_TYPE_I32, k, tokens);
    memcpy(idt->data, ids.data(), ids.size() * sizeof(int));
    ggml_tensor * out = ggml_mul_mat_id(g.ctx, w, x, idt);
    g.compute(out);
    begin_case("mul_mat_id", name, seed);
    printf(", \"type\": \"%s\", \"cols\": %d, \"rows\": %d, \"experts\": %d, \"k\": %d, \"per_slot\": %s",
           ggml_type_name(type), cols, rows, experts, k, per_slot ? "true" : "false");
    print_ints("ids", ids);
    end_case(out);
}

static std::vector<int> range_of(int first, int n) {
    std::vector<int> v(n);
    for (int i = 0; i < n; i++) v[i] = first + i;
    return v;
}

// Head sizes of 128 and more, for a build without AVX512-FP16 (see main).
static void wide_attn_cases() {
    attn_case("wide_decode", 100, {GGML_TYPE_F16, 128, 128, 8, 2, 100, {80}, 0.088388f, 0, false, false});
    attn_case("wide_split", 101, {GGML_TYPE_F16, 128, 128, 4, 1, 700, {690}, 0.088388f, 0, false, false});
    attn_case("wide_rows_leftover", 102, {GGML_TYPE_F16, 160, 96, 4, 2, 48, range_of(40, 6), 0.08f, 0, false, false});
    attn_case("wide_mla", 103, {GGML_TYPE_F16, 576, 512, 4, 1, 40, range_of(35, 5), 0.0723f, 0, false, true});
    attn_case("wide_sinks_window", 104, {GGML_TYPE_F16, 192, 128, 4, 2, 60, range_of(55, 3), 0.07f, 24, true, false});
}

// With the argument "wide", only wide_attn_cases: run that on a build without AVX512-FP16
// (-DGGML_NATIVE=OFF -DGGML_AVX512=ON and the AVX2/FMA/F16C options), whose F16 dot
// products of 64 values and more sum 16-lane float32 vectors; an AVX512-FP16 build computes
// those of 128 and more in half precision instead.
//   ./ops_golden wide > ../../tensor/testdata/ggml-ops-avx512f.json
int main(int argc, char ** argv) {
    printf("{\"llama_cpp_commit\": \"3f545beccee69d9975f466ec7e45fd9aacd8ba90\", \"threads\": %d, \"cases\": [", n_threads);
    if (argc > 1 && strcmp(argv[1], "wide") == 0) {
        wide_attn_cases();
        printf("\n]}\n");
        return 0;
    }

    rms_norm_case("rows_of_80", 1, 80, 3, 1e-6f, 1.0f);
    rms_norm_case("tiny_values_eps", 2, 64, 2, 1e-5f, 1e-3f);

    soft_max_case("router_16", 10, 16, 6, 1.0f, false);
    soft_max_case("leftovers_37_scaled_masked", 11, 37, 5, 0.125f, true);
    soft_max_case("wide_128_masked", 12, 128, 3, 0.5f, true);

    act_case("silu", "silu_40", 20, 40, 3, 3.0f);
    act_case("silu", "silu_extreme", 21, 35, 2, 40.0f);
    act_case("swiglu", "swiglu_40", 22, 40, 3, 3.0f);
    act_case("swiglu", "swiglu_extreme", 23, 21, 2, 40.0f);
    act_case("swiglu_oai", "swiglu_oai", 24, 24, 2, 3.0f);
    act_case("sigmoid", "sigmoid", 25, 20, 2, 5.0f);

    const std::vector<int> pos = {0, 1, 5, 17, 1000, 4095, 100000};
    // qwen3moe: NeoX, base 1e6, no scaling.
    rope_case("neox_qwen3", 30, 64, 4, pos, {2, 64, 0, 4096, 1e6f, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f, false});
    // deepseek2 q_pe/k_pe: normal, YaRN factor 40 with llama.cpp's attn_factor 1/(1+0.1 ln 40).
    rope_case("normal_yarn_deepseek", 31, 16, 4, pos,
              {0, 16, 0, 4096, 10000.0f, 1.0f / 40.0f, 1.0f, 1.0f / (1.0f + 0.1f * logf(40.0f)), 32.0f, 1.0f, false});
    // Qwen-style YaRN factor 4, partial rotation (64 of 128), NeoX.
    rope_case("neox_yarn_partial", 32, 128, 2, pos, {2, 64, 0, 32768, 1e6f, 0.25f, 1.0f, 1.0f, 32.0f, 1.0f, false});
    // Frequency factors (rope_freqs) and a rotated window at offset 32 of 48 (deepseek's q_pe in q).
    rope_case("normal_offset_freq_factors", 33, 48, 3, pos, {0, 16, 32, 8192, 50000.0f, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f, true});

    argsort_case("ties_8", 40, tied_values(40, 8, 1.0f));
    argsort_case("ties_16", 41, tied_values(41, 16, 0.5f));
    argsort_case("ties_17", 42, tied_values(42, 17, 0.5f));
    argsort_case("ties_64", 43, tied_values(43, 64, 1.0f));
    argsort_case("ties_128", 44, tied_values(44, 128, 2.0f));
    argsort_case("ties_256", 45, tied_values(45, 256, 0.5f));
    {
        std::vector<float> v = tied_values(46, 256, 8.0f);
        for (size_t i = 0; i < v.size(); i += 3) v[i] = -INFINITY; // group-limited routing masks
        argsort_case("masked_256", 46, v);
    }
    argsort_case("all_equal_40", 47, std::vector<float>(40, 1.0f));
    // Inputs built with McIlroy's antiqsort adversary against median-of-three quicksort: they
    // exhaust introsort's depth limit, so std::sort finishes with its heap sort.
    argsort_case("heap_fallback_37", 48, {-28, -1, -19, -3, -35, -5, -33, -7, -31, -9, -32, -11, -34, -13, -30, -15, -36, -17, 0,
                                          -2, -4, -6, -8, -10, -12, -14, -16, -18, -29, -26, -27, -24, -25, -22, -23, -20, -21});
    argsort_case("heap_fallback_ties_37", 49, {-14, 0, -9, -1, -17, -2, -16, -3, -15, -4, -16, -5, -17, -6, -15, -7, -18, -8, 0,
                                               -1, -2, -3, -4, -5, -6, -7, -8, -9, -14, -13, -13, -12, -12, -11, -11, -10, -10});

    attn_case("row_f16_gqa", 50, {GGML_TYPE_F16, 64, 64, 4, 2, 48, range_of(43, 5), 0.125f, 0, false, false});
    attn_case("decode_f16", 51, {GGML_TYPE_F16, 64, 64, 4, 2, 100, {80}, 0.125f, 0, false, false});
    attn_case("split_f16", 52, {GGML_TYPE_F16, 64, 64, 4, 2, 600, {590}, 0.125f, 0, false, false});
    attn_case("tiled_f16", 53, {GGML_TYPE_F16, 32, 32, 2, 1, 150, range_of(80, 70), 0.17f, 0, false, false});
    attn_case("mla_view", 54, {GGML_TYPE_F16, 80, 64, 4, 1, 40, range_of(35, 5), 0.27f, 0, false, true});
    attn_case("sinks_window", 55, {GGML_TYPE_F16, 64, 64, 4, 2, 40, range_of(37, 3), 0.125f, 16, true, false});
    attn_case("tiled_sinks_window", 56, {GGML_TYPE_F16, 32, 32, 2, 1, 140, range_of(74, 66), 0.2f, 20, true, false});
    attn_case("row_q8_0", 57, {GGML_TYPE_Q8_0, 64, 64, 2, 1, 40, range_of(37, 3), 0.125f, 0, false, false});
    attn_case("row_f32", 58, {GGML_TYPE_F32, 64, 64, 2, 2, 30, range_of(27, 3), 0.125f, 0, false, false});

    const ggml_type mm_types[] = {GGML_TYPE_F32,  GGML_TYPE_F16,  GGML_TYPE_BF16,   GGML_TYPE_Q4_0,  GGML_TYPE_Q4_1,
                                  GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q8_0,   GGML_TYPE_Q2_K,  GGML_TYPE_Q3_K,
                                  GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K,   GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS,
                                  GGML_TYPE_MXFP4, GGML_TYPE_TQ1_0, GGML_TYPE_TQ2_0};
    uint64_t seed = 60;
    for (ggml_type type : mm_types) {
        std::string base = ggml_type_name(type);
        mul_mat_case((base + "_vec").c_str(), seed++, type, 512, 33, 1);
        mul_mat_case((base + "_batch").c_str(), seed++, type, 256, 19, 7);
    }
    const std::vector<int> ids = {3, 0, 5, 3, 1, 2, 0, 1, 4, 5, 2, 3, 3, 4, 1};
    mul_mat_id_case("q8_0_shared", 90, GGML_TYPE_Q8_0, 256, 21, 6, ids, 3, false);
    mul_mat_id_case("q4_K_per_slot", 91, GGML_TYPE_Q4_K, 256, 21, 6, ids, 3, true);
    mul_mat_id_case("f16_shared", 92, GGML_TYPE_F16, 64, 21, 6, ids, 3, false);
    printf("\n]}\n");
    return 0;
}
