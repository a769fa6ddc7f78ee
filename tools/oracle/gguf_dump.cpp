// gguf_dump: prints what ggml's own GGUF reader sees in a file, as one JSON object, so
// moerun's reader can be compared with it. Built by tools/oracle/gguf-golden.sh against
// llama.cpp at the fixtures' commit; never built or run by CI.
#include "ggml.h"
#include "gguf.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>

// FNV-1a over the bytes that describe an array: raw little-endian elements for numbers,
// each string followed by a NUL byte for strings.
static uint64_t fnv(uint64_t h, const void * p, size_t n) {
    const unsigned char * b = (const unsigned char *) p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ull;
    }
    return h;
}

static void json_str(const char * s) {
    putchar('"');
    for (const unsigned char * p = (const unsigned char *) s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            printf("\\%c", *p);
        } else if (*p < 0x20) {
            printf("\\u%04x", *p);
        } else {
            putchar(*p);
        }
    }
    putchar('"');
}

static void scalar(enum gguf_type t, const void * p) {
    switch (t) {
        case GGUF_TYPE_UINT8:   printf("%u", *(const uint8_t *) p); break;
        case GGUF_TYPE_INT8:    printf("%d", *(const int8_t *) p); break;
        case GGUF_TYPE_UINT16:  printf("%u", *(const uint16_t *) p); break;
        case GGUF_TYPE_INT16:   printf("%d", *(const int16_t *) p); break;
        case GGUF_TYPE_UINT32:  printf("%u", *(const uint32_t *) p); break;
        case GGUF_TYPE_INT32:   printf("%d", *(const int32_t *) p); break;
        case GGUF_TYPE_UINT64:  printf("%" PRIu64, *(const uint64_t *) p); break;
        case GGUF_TYPE_INT64:   printf("%" PRId64, *(const int64_t *) p); break;
        case GGUF_TYPE_FLOAT32: printf("%.9g", *(const float *) p); break;
        case GGUF_TYPE_FLOAT64: printf("%.17g", *(const double *) p); break;
        case GGUF_TYPE_BOOL:    printf("%s", *(const bool *) p ? "true" : "false"); break;
        default:                printf("null"); break;
    }
}

static size_t scalar_size(enum gguf_type t) {
    switch (t) {
        case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: return 1;
        case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: return 2;
        case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_FLOAT32: return 4;
        default: return 8;
    }
}

int main(int argc, char ** argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s FILE.gguf\n", argv[0]);
        return 2;
    }
    struct ggml_context * meta = nullptr;
    struct gguf_init_params params = { /*no_alloc =*/ true, /*ctx =*/ &meta };
    struct gguf_context * ctx = gguf_init_from_file(argv[1], params);
    if (!ctx) {
        printf("{\"ok\": false}\n");
        return 1;
    }
    printf("{\"ok\": true, \"version\": %u, \"alignment\": %zu, \"data_offset\": %zu,\n \"kv\": [",
        gguf_get_version(ctx), gguf_get_alignment(ctx), gguf_get_data_offset(ctx));
    for (int64_t i = 0; i < gguf_get_n_kv(ctx); i++) {
        enum gguf_type t = gguf_get_kv_type(ctx, i);
        printf("%s\n  {\"key\": ", i ? "," : "");
        json_str(gguf_get_key(ctx, i));
        printf(", \"type\": \"%s\"", gguf_type_name(t));
        if (t == GGUF_TYPE_STRING) {
            printf(", \"value\": ");
            json_str(gguf_get_val_str(ctx, i));
        } else if (t != GGUF_TYPE_ARRAY) {
            printf(", \"value\": ");
            scalar(t, gguf_get_val_data(ctx, i));
        } else {
            enum gguf_type et = gguf_get_arr_type(ctx, i);
            size_t n = gguf_get_arr_n(ctx, i);
            uint64_t h = 14695981039346656037ull;
            printf(", \"elem_type\": \"%s\", \"len\": %zu, \"head\": [", gguf_type_name(et), n);
            for (size_t j = 0; j < n; j++) {
                if (et == GGUF_TYPE_STRING) {
                    const char * s = gguf_get_arr_str(ctx, i, j);
                    h = fnv(h, s, strlen(s) + 1);
                    if (j < 8) { printf("%s", j ? ", " : ""); json_str(s); }
                } else {
                    const char * p = (const char *) gguf_get_arr_data(ctx, i) + j * scalar_size(et);
                    h = fnv(h, p, scalar_size(et));
                    if (j < 8) { printf("%s", j ? ", " : ""); scalar(et, p); }
                }
            }
            printf("], \"fnv1a\": \"%016" PRIx64 "\"", h);
        }
        printf("}");
    }
    printf("],\n \"tensors\": [");
    for (int64_t i = 0; i < gguf_get_n_tensors(ctx); i++) {
        const int64_t * ne = gguf_get_tensor_ne(ctx, i);
        printf("%s\n  {\"name\": ", i ? "," : "");
        json_str(gguf_get_tensor_name(ctx, i));
        printf(", \"type\": \"%s\", \"ne\": [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "], \"offset\": %zu, \"size\": %zu}",
            ggml_type_name(gguf_get_tensor_type(ctx, i)), ne[0], ne[1], ne[2], ne[3],
            gguf_get_tensor_offset(ctx, i), gguf_get_tensor_size(ctx, i));
    }
    printf("]}\n");
    gguf_free(ctx);
    ggml_free(meta);
    return 0;
}
