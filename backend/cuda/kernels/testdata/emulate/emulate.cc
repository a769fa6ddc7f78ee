// Runs moerun's CUDA kernels on the CPU for kernels_test.go (TestEmulated). It reads a script
// on stdin:
//
//	launch <kernel> <grid.x> <grid.y> <block.x> <block.y> <output file> <output floats>
//	buf <file> | i64 <value> | f64 <value> | null | out      (one line per kernel parameter)
//	end
//
// loads each buffer into a 16-byte aligned allocation, fills the output with NaN, runs
// every thread of the grid and writes the output. Every load must be aligned to its size
// and stay inside a buffer, rounded up to 4 bytes (the kernels' contract: they may read the
// rest of the last word), and no store may land in the guard after the output, or the run
// fails.
//
// A warp's 32 lanes are fibers run in turn (warp.h).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "../../matvec.cu"

dim3 threadIdx, blockIdx, blockDim, gridDim;

#include "warp.h"

namespace {

constexpr long long kGuard = 64;  // floats after the output that must stay NaN

// The launch's input buffers: start and size rounded up to 4 bytes.
std::vector<std::pair<const char*, size_t>> buffers;

// fail reports and exits at once: it may run on a lane's stack, where unwinding through
// exit's handlers is not safe.
void fail(const char* what) {
    fprintf(stderr, "%s: %s\n", warp::kernel.c_str(), what);
    fflush(stderr);
    _exit(1);
}

}  // namespace


void checkLoad(const void* p, unsigned long size) {
    const char* c = static_cast<const char*>(p);
    bool inside = false;
    for (const auto& b : buffers) inside = inside || (c >= b.first && c + size <= b.first + b.second);
    if (!inside) fail("load outside the buffers");
    if (reinterpret_cast<uintptr_t>(p) % size != 0) fail("misaligned load");
}

namespace {

// load reads a file into a new 16-byte aligned buffer.
void* load(const char* file) {
    FILE* f = fopen(file, "rb");
    if (!f) perror(file), exit(1);
    fseek(f, 0, SEEK_END);
    const long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char* p = static_cast<char*>(aligned_alloc(16, (size + 15) / 16 * 16 + 16));
    if (fread(p, 1, size, f) != size_t(size)) perror(file), exit(1);
    fclose(f);
    buffers.push_back({p, (size + 3) / 4 * 4});
    return p;
}

}  // namespace

int main() {
    char word[4096], outFile[4096];
    unsigned gx, gy, bx, by;
    long long outLen;
    while (scanf("%4095s", word) == 1) {
        if (std::string(word) != "launch" ||
            scanf("%4095s %u %u %u %u %4095s %lld", word, &gx, &gy, &bx, &by, outFile, &outLen) != 7)
            fail("bad script");
        warp::kernel = word;
        std::vector<float> out(outLen + kGuard, NAN);
        warp::args.clear();
        buffers.clear();
        while (scanf("%4095s", word) == 1 && std::string(word) != "end") {
            const std::string kind = word;
            long long v = 0;
            if (kind == "buf") {
                if (scanf("%4095s", word) != 1) fail("bad script");
                warp::args.push_back(load(word));
            } else if (kind == "i64") {
                if (scanf("%lld", &v) != 1) fail("bad script");
                warp::args.push_back((void*)v);
            } else if (kind == "f64") {
                double d;
                if (scanf("%lf", &d) != 1) fail("bad script");
                void* bits;
                memcpy(&bits, &d, sizeof d);
                warp::args.push_back(bits);
            } else if (kind == "null") {
                warp::args.push_back(nullptr);
            } else {
                warp::args.push_back(out.data());
            }
        }
        gridDim = {gx, gy, 1};
        blockDim = {bx, by, 1};
        for (unsigned y = 0; y < gy; y++) {
            for (unsigned x = 0; x < gx; x++) {
                blockIdx = {x, y, 0};
                for (int w = 0; w < int(bx * by); w += warp::kLanes) warp::run(w);
            }
        }
        for (long long i = outLen; i < outLen + kGuard; i++)
            if (out[i] == out[i]) fail("store past the output");
        FILE* f = fopen(outFile, "wb");
        if (!f || fwrite(out.data(), 4, outLen, f) != size_t(outLen)) perror(outFile), exit(1);
        fclose(f);
        for (const auto& b : buffers) free(const_cast<char*>(b.first));
    }
}
