// model_golden: asks llama.cpp (through llama.h only) what a model computes for a few
// prompts and prints it as moe's golden JSON (see moe/testdata/README.md): per prompt the
// token ids (llama_tokenize with the model's BOS rule, special tokens parsed), 32 greedy
// tokens (the largest logit, the lowest id on ties, never stopping at end-of-generation)
// and step_logits: 33 rows of every logit, row 0 after the prompt evaluated in one batch,
// row k after feeding greedy token k-1 alone. CPU, n_threads 2, context 4096, otherwise
// llama.cpp's default context parameters (flash attention on auto). Never built by CI.
//
//   model_golden MODEL.gguf NAME=TEXT [NAME=TEXT ...] > golden.json
//
// A TEXT of the form ids:1,2,3 gives the prompt as token ids (to replay another golden's
// prompts exactly). MODEL_GOLDEN_NGL=N sets n_gpu_layers (default 0: the CPU), so that a
// GPU build of llama.cpp gives the same outputs for comparison with its CPU build.
// MODEL_GOLDEN_SWA_FULL=0 gives sliding-window layers llama.cpp's small SWA cache (the
// window and a ubatch, as llama-cli and llama-server use by default) instead of the
// full-size one that llama_context_default_params asks for.
//
// Build line (LLAMA = a llama.cpp checkout with a CPU build in LLAMA/build):
//   g++ -O2 -std=c++17 model_golden.cpp -I$LLAMA/include -I$LLAMA/ggml/include \
//       -L$LLAMA/build/bin -lllama -Wl,-rpath,$LLAMA/build/bin -o model_golden
#include "llama.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

static const int n_greedy = 32;

// print_float writes the shortest decimal that reads back as the same float.
static void print_float(float v) {
    if (std::isnan(v) || std::isinf(v)) {
        fprintf(stderr, "model_golden: non-finite logit\n");
        exit(1);
    }
    char buf[32];
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (strtof(buf, nullptr) == v) {
            break;
        }
    }
    fputs(buf, stdout);
}

static void print_ids(const std::vector<llama_token> & ids) {
    putchar('[');
    for (size_t i = 0; i < ids.size(); i++) {
        printf(i ? ",%d" : "%d", ids[i]);
    }
    putchar(']');
}

static void print_json_string(const char * s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char) *s;
        if (c == '"' || c == '\\') {
            printf("\\%c", c);
        } else if (c < 0x20) {
            printf("\\u%04x", c);
        } else {
            putchar(c);
        }
    }
    putchar('"');
}

static llama_token argmax(const float * logits, int n) {
    llama_token best = 0;
    for (int i = 1; i < n; i++) {
        if (logits[i] > logits[best]) {
            best = i;
        }
    }
    return best;
}

static void decode_or_die(llama_context * ctx, llama_batch batch) {
    if (llama_decode(ctx, batch) != 0) {
        fprintf(stderr, "model_golden: llama_decode failed\n");
        exit(1);
    }
}

int main(int argc, char ** argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: model_golden MODEL.gguf NAME=TEXT [NAME=TEXT ...]\n");
        return 2;
    }
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    const char * ngl = getenv("MODEL_GOLDEN_NGL");
    mp.n_gpu_layers = ngl ? atoi(ngl) : 0;
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) {
        fprintf(stderr, "model_golden: llama.cpp refused to load %s\n", argv[1]);
        return 1;
    }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);

    printf("{\"model\":");
    print_json_string(argv[1]);
    printf(",\"llama_cpp_commit\":\"3f545beccee69d9975f466ec7e45fd9aacd8ba90\",\"prompts\":[");
    for (int a = 2; a < argc; a++) {
        const char * eq = strchr(argv[a], '=');
        if (!eq) {
            fprintf(stderr, "model_golden: %s is not NAME=TEXT\n", argv[a]);
            return 2;
        }
        std::string name(argv[a], eq - argv[a]);
        const char * text = eq + 1;

        // A fresh context per prompt: nothing of the previous one is left in the cache.
        llama_context_params cp = llama_context_default_params();
        cp.n_ctx = 4096;
        cp.n_batch = 4096;
        cp.n_threads = cp.n_threads_batch = 2;
        if (const char * swa_full = getenv("MODEL_GOLDEN_SWA_FULL")) {
            cp.swa_full = atoi(swa_full) != 0;
        }
        llama_context * ctx = llama_init_from_model(model, cp);
        if (!ctx) {
            fprintf(stderr, "model_golden: cannot create a context\n");
            return 1;
        }

        std::vector<llama_token> prompt;
        if (strncmp(text, "ids:", 4) == 0) {
            for (const char * p = text + 4; *p;) {
                char * end;
                prompt.push_back((llama_token) strtol(p, &end, 10));
                if (end == p) {
                    fprintf(stderr, "model_golden: bad token id list %s\n", text);
                    return 2;
                }
                p = *end == ',' ? end + 1 : end;
            }
        } else {
            int n = -llama_tokenize(vocab, text, strlen(text), nullptr, 0, true, true);
            prompt.resize(n);
            if (llama_tokenize(vocab, text, strlen(text), prompt.data(), n, true, true) != n) {
                fprintf(stderr, "model_golden: tokenize failed\n");
                return 1;
            }
        }

        std::vector<std::vector<float>> rows;
        std::vector<llama_token> greedy;
        decode_or_die(ctx, llama_batch_get_one(prompt.data(), prompt.size()));
        for (int k = 0;; k++) {
            const float * logits = llama_get_logits_ith(ctx, -1);
            rows.emplace_back(logits, logits + n_vocab);
            if (k == n_greedy) {
                break;
            }
            llama_token next = argmax(logits, n_vocab);
            greedy.push_back(next);
            decode_or_die(ctx, llama_batch_get_one(&greedy.back(), 1));
        }
        llama_free(ctx);

        printf(a > 2 ? ",\n{\"name\":" : "\n{\"name\":");
        print_json_string(name.c_str());
        printf(",\"token_ids\":");
        print_ids(prompt);
        printf(",\"greedy\":");
        print_ids(greedy);
        printf(",\"step_logits\":[");
        for (size_t r = 0; r < rows.size(); r++) {
            printf(r ? ",[" : "[");
            for (int i = 0; i < n_vocab; i++) {
                if (i) {
                    putchar(',');
                }
                print_float(rows[r][i]);
            }
            putchar(']');
        }
        printf("]}");
    }
    printf("\n]}\n");
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
