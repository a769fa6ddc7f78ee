// expf_golden: glibc's expf (the libm llama.cpp's scalar code calls on x86-64 Linux) at
// inputs where it is hardest to match: every 101st float32 from -104 to 89 whose expf
// differs from exp in double precision rounded to float32 (expf is not correctly rounded),
// up to 1500 of them, then a stride of ordinary inputs and the edges of its special cases.
// Prints JSON pairs of bit patterns. Never built by CI; glibc 2.36, x86-64 with FMA:
//
//   gcc -O1 -fno-builtin expf_golden.c -o expf_golden -lm
//   ./expf_golden > ../../tensor/testdata/expf-glibc.json
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static int first = 1;

static void emit(uint32_t u) {
    float x, y;
    uint32_t v;
    memcpy(&x, &u, 4);
    y = expf(x);
    memcpy(&v, &y, 4);
    printf("%s\n  [\"%08x\", \"%08x\"]", first ? "" : ",", u, v);
    first = 0;
}

static float from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

int main(void) {
    printf("{\"pairs\": [");
    int hard = 0;
    for (uint64_t b = 0; b < (1ull << 32) && hard < 1500; b += 101) {
        float x = from_bits((uint32_t) b);
        if (!(x >= -104.0f && x <= 89.0f)) continue;
        if ((float) exp((double) x) != expf(x)) {
            emit((uint32_t) b);
            hard++;
        }
    }
    for (uint64_t b = 0; b < (1ull << 32); b += 9999991) emit((uint32_t) b);
    const float edges[] = {0.0f, -0.0f, 1.0f, -1.0f, 88.0f, -88.0f, 0x1.62e42ep6f, 0x1.62e430p6f, -0x1.9fe368p6f,
                           -0x1.9fe36ap6f, -0x1.9d1d9ep6f, -0x1.9d1da0p6f, -0x1.9d1d9cp6f, INFINITY, -INFINITY, 1e-30f, -1e-30f};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) {
        uint32_t u;
        memcpy(&u, &edges[i], 4);
        emit(u);
    }
    printf("\n]}\n");
    return 0;
}
