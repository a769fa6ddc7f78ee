// Runs moerun's CUDA kernels on the CPU for kernels_test.go (TestEmulated). It reads a script
// on stdin:
//
//	launch <kernel> <grid.x> <grid.y> <block.x> <block.y> <output file> <output floats>
//	buf <file> | i64 <value> | null | out      (one line per kernel parameter)
//	end
//
// loads each buffer into a 16-byte aligned allocation, fills the output with NaN, runs
// every thread of the grid and writes the output. Every load must be aligned to its size
// and stay inside a buffer, rounded up to 4 bytes (the kernels' contract: they may read the
// rest of the last word), and no store may land in the guard after the output, or the run
// fails.
//
// A warp's 32 lanes are fibers run in turn; a shuffle switches to the next lane twice (once
// all lanes have written their value, once all have read it), so the lanes of a warp
// advance together as on the GPU. A fiber starts on its own stack through ucontext and then
// switches with _setjmp/_longjmp, which unlike swapcontext make no system call. (glibc's
// fortified longjmp refuses to jump between stacks, hence the #undef.)
#undef _FORTIFY_SOURCE
#include <setjmp.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "../../matvec.cu"

dim3 threadIdx, blockIdx, blockDim, gridDim;

namespace {

constexpr int kLanes = 32;
constexpr size_t kStack = 256 * 1024;
constexpr long long kGuard = 64;  // floats after the output that must stay NaN

ucontext_t starter, laneStarts[kLanes];
jmp_buf scheduler, lanes[kLanes];
int current, warpBase;
bool finished[kLanes];
float shuffled[kLanes];

std::string kernel;
std::vector<void*> args;
// The launch's input buffers: start and size rounded up to 4 bytes.
std::vector<std::pair<const char*, size_t>> buffers;

// fail reports and exits at once: it may run on a lane's stack, where unwinding through
// exit's handlers is not safe.
void fail(const char* what) {
    fprintf(stderr, "%s: %s\n", kernel.c_str(), what);
    fflush(stderr);
    _exit(1);
}

// enter makes lane the running one, with its thread coordinates.
void enter(int lane) {
    current = lane;
    const unsigned t = warpBase + lane;
    threadIdx = {t % blockDim.x, t / blockDim.x, 0};
}

// next switches to the following lane, or back to the scheduler after the last.
void next() {
    const int from = current;
    if (_setjmp(lanes[from]) == 0) {
        if (from + 1 == kLanes) _longjmp(scheduler, 1);
        enter(from + 1);
        _longjmp(lanes[from + 1], 1);
    }
    enter(from);
}

}  // namespace

float __shfl_xor_sync(unsigned int, float v, int laneMask) {
    shuffled[current] = v;
    next();  // every lane has written
    const float r = shuffled[current ^ laneMask];
    next();  // every lane has read
    return r;
}

void checkLoad(const void* p, unsigned long size) {
    const char* c = static_cast<const char*>(p);
    bool inside = false;
    for (const auto& b : buffers) inside = inside || (c >= b.first && c + size <= b.first + b.second);
    if (!inside) fail("load outside the buffers");
    if (reinterpret_cast<uintptr_t>(p) % size != 0) fail("misaligned load");
}

namespace {

typedef void (*MatVecFn)(const u8*, const float*, float*, const int*, const int*, const int*, i64, i64, i64, i64,
                         i64, i64, i64);
typedef void (*GetRowsFn)(const u8*, const int*, float*, i64, i64, i64);

#define ENTRY(name, T) {"mmv_" #name, (void*)mmv_##name}, {"getrows_" #name, (void*)getrows_##name},
const std::map<std::string, void*> entries = {MOERUN_TYPES(ENTRY)};

// runLane is a lane's fiber: it records where to resume it and returns to runWarp, which
// starts all lanes before running any.
void runLane() {
    if (_setjmp(lanes[current]) == 0) swapcontext(&laneStarts[current], &starter);
    void* const* a = args.data();
    if (kernel.rfind("mmv_", 0) == 0) {
        ((MatVecFn)entries.at(kernel))((const u8*)a[0], (const float*)a[1], (float*)a[2], (const int*)a[3],
                                       (const int*)a[4], (const int*)a[5], (i64)a[6], (i64)a[7], (i64)a[8],
                                       (i64)a[9], (i64)a[10], (i64)a[11], (i64)a[12]);
    } else {
        ((GetRowsFn)entries.at(kernel))((const u8*)a[0], (const int*)a[1], (float*)a[2], (i64)a[3], (i64)a[4],
                                        (i64)a[5]);
    }
    finished[current] = true;
    // Park: a finished lane still takes its turn, so the others' shuffles keep their count
    // (the kernels retire whole warps, so no lane shuffles after another has finished).
    for (;;) next();
}

void runWarp() {
    static std::vector<char> stacks(kLanes * kStack);
    for (int l = 0; l < kLanes; l++) {
        getcontext(&laneStarts[l]);
        laneStarts[l].uc_stack.ss_sp = &stacks[l * kStack];
        laneStarts[l].uc_stack.ss_size = kStack;
        laneStarts[l].uc_link = nullptr;
        makecontext(&laneStarts[l], runLane, 0);
        finished[l] = false;
        enter(l);
        swapcontext(&starter, &laneStarts[l]);
    }
    for (bool done = false; !done;) {
        enter(0);
        if (_setjmp(scheduler) == 0) _longjmp(lanes[0], 1);
        done = true;
        for (bool f : finished) done = done && f;
    }
}

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
        kernel = word;
        std::vector<float> out(outLen + kGuard, NAN);
        args.clear();
        buffers.clear();
        while (scanf("%4095s", word) == 1 && std::string(word) != "end") {
            const std::string kind = word;
            long long v = 0;
            if (kind == "buf") {
                if (scanf("%4095s", word) != 1) fail("bad script");
                args.push_back(load(word));
            } else if (kind == "i64") {
                if (scanf("%lld", &v) != 1) fail("bad script");
                args.push_back((void*)v);
            } else if (kind == "null") {
                args.push_back(nullptr);
            } else {
                args.push_back(out.data());
            }
        }
        gridDim = {gx, gy, 1};
        blockDim = {bx, by, 1};
        for (unsigned y = 0; y < gy; y++) {
            for (unsigned x = 0; x < gx; x++) {
                blockIdx = {x, y, 0};
                for (warpBase = 0; warpBase < int(bx * by); warpBase += kLanes) runWarp();
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
