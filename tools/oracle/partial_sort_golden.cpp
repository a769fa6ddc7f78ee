// partial_sort_golden: which indices the C++ standard library's std::partial_sort puts
// first when it picks the k largest of scores with many ties, as ggml-cpu's top-k
// (GGML_OP_TOP_K: std::partial_sort of the indices by "greater score") picks the positions
// DeepSeek Sparse Attention keeps. Scores are small integers (ties everywhere) and some
// -inf (masked cells); moe's TestTopPositionsMatchPartialSort reads the output.
//
//   g++ -O2 -std=c++17 partial_sort_golden.cpp -o partial_sort_golden
//   ./partial_sort_golden > moe/testdata/partial-sort.txt
//
// Each line: n k, the n scores ("-inf" for masked), "|", the k chosen indices ascending.
// The committed file comes from GCC's libstdc++ (the library llama.cpp's builds use here).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

int main() {
    uint32_t s = 1;
    auto next = [&]() { s = s * 1103515245u + 12345u; return s >> 16; };
    for (int trial = 0; trial < 80; trial++) {
        const int n = 8 + next() % 90;
        const int k = 1 + next() % n;
        std::vector<float> score(n);
        for (int i = 0; i < n; i++) {
            const uint32_t r = next() % 7;
            score[i] = r == 6 ? -INFINITY : float(r % 4);
        }
        std::vector<int32_t> idx(n);
        for (int i = 0; i < n; i++) {
            idx[i] = i;
        }
        std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                          [&](int32_t a, int32_t b) { return score[a] > score[b]; });
        std::sort(idx.begin(), idx.begin() + k);
        printf("%d %d", n, k);
        for (float v : score) {
            printf(std::isinf(v) ? " -inf" : " %g", v);
        }
        printf(" |");
        for (int i = 0; i < k; i++) {
            printf(" %d", idx[i]);
        }
        printf("\n");
    }
}
