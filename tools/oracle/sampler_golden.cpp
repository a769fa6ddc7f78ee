// sampler_golden: runs llama.cpp's own sampler chain (llama.h API: penalties → top-k → top-p
// → min-p → temperature → dist, the order common_sampler_init builds) over deterministic
// pseudo-random logits and prints the chosen tokens as JSON, so moerun's sampler can be
// compared with it. Logits for step s of a case come from std::mt19937(1000 + s): 24-bit
// draws scaled to [-8, 8), which a Go test regenerates exactly. Never built by CI.
#include "llama.h"

#include <cstdio>
#include <random>
#include <vector>

struct sampling_case {
    const char * name;
    float temp; int top_k; float top_p; float min_p; size_t min_keep;
    int last_n; float repeat, freq, present;
    uint32_t seed;
};

static const int n_vocab = 256;
static const int n_steps = 48;

int main() {
    const sampling_case cases[] = {
        {"defaults",       0.8f, 40, 0.95f, 0.05f, 0, 64, 1.0f, 0.0f, 0.0f, 42},
        {"pure_dist",      1.5f,  0, 1.00f, 0.00f, 0, 64, 1.0f, 0.0f, 0.0f, 7},
        {"greedy_by_temp", 0.0f, 40, 0.95f, 0.05f, 0, 64, 1.0f, 0.0f, 0.0f, 1},
        {"penalties",      0.7f, 20, 1.00f, 0.00f, 0,  8, 1.3f, 0.5f, 0.7f, 3},
        {"top_p_only",     1.0f,  0, 0.50f, 0.00f, 3, 64, 1.0f, 0.0f, 0.0f, 11},
        {"min_p_only",     1.0f,  0, 1.00f, 0.20f, 0, 64, 1.0f, 0.0f, 0.0f, 12},
        {"hot_top_k",      2.0f,  5, 0.99f, 0.00f, 0, 64, 1.0f, 0.0f, 0.0f, 4294967294u},
    };
    printf("{\"n_vocab\": %d, \"n_steps\": %d, \"cases\": [\n", n_vocab, n_steps);
    bool first_case = true;
    for (const auto & c : cases) {
        llama_sampler * chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
        llama_sampler_chain_add(chain, llama_sampler_init_penalties(n_vocab, c.last_n, c.repeat, c.freq, c.present));
        llama_sampler_chain_add(chain, llama_sampler_init_top_k(c.top_k));
        llama_sampler_chain_add(chain, llama_sampler_init_top_p(c.top_p, c.min_keep));
        llama_sampler_chain_add(chain, llama_sampler_init_min_p(c.min_p, c.min_keep));
        llama_sampler_chain_add(chain, llama_sampler_init_temp_ext(c.temp, 0.0f, 1.0f));
        llama_sampler_chain_add(chain, llama_sampler_init_dist(c.seed));
        printf("%s  {\"name\": \"%s\", \"temp\": %g, \"top_k\": %d, \"top_p\": %g, \"min_p\": %g, \"min_keep\": %zu, "
               "\"last_n\": %d, \"repeat\": %g, \"freq\": %g, \"present\": %g, \"seed\": %u, \"tokens\": [",
               first_case ? "" : ",\n", c.name, c.temp, c.top_k, c.top_p, c.min_p, c.min_keep,
               c.last_n, c.repeat, c.freq, c.present, c.seed);
        first_case = false;
        std::vector<llama_token_data> data(n_vocab);
        for (int s = 0; s < n_steps; s++) {
            std::mt19937 gen(1000 + s);
            for (int i = 0; i < n_vocab; i++) {
                data[i] = {i, float(gen() >> 8) / float(1 << 20) - 8.0f, 0.0f};
            }
            llama_token_data_array arr = {data.data(), data.size(), -1, false};
            llama_sampler_apply(chain, &arr);
            const llama_token tok = arr.data[arr.selected].id;
            llama_sampler_accept(chain, tok);
            printf("%s%d", s ? ", " : "", tok);
        }
        printf("]}");
        llama_sampler_free(chain);
    }
    printf("\n]}\n");
}
