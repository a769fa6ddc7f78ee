// A fake libcuda for running package cuda's tests on a machine without a GPU: one device,
// "device" memory is host memory, and cuLaunchKernel runs moerun's kernels (matvec.cu) on
// the CPU with the emulator of kernels/testdata/emulate (warps as fibers). Loads outside
// live allocations abort.
#undef _FORTIFY_SOURCE
#include <setjmp.h>
#include <ucontext.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "matvec.cu"

dim3 threadIdx, blockIdx, blockDim, gridDim;

namespace {
constexpr int kLanes = 32;
constexpr size_t kStack = 256 * 1024;
ucontext_t starter, laneStarts[kLanes];
jmp_buf scheduler, lanes[kLanes];
int current, warpBase;
bool finished[kLanes];
float shuffled[kLanes];
std::string kernel;
void* const* params;
std::map<const char*, size_t> allocs;  // live device allocations

void fail(const char* what) {
    fprintf(stderr, "fake libcuda: %s: %s\n", kernel.c_str(), what);
    fflush(stderr);
    _exit(2);
}
void enter(int lane) {
    current = lane;
    const unsigned t = warpBase + lane;
    threadIdx = {t % blockDim.x, t / blockDim.x, 0};
}
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
    next();
    const float r = shuffled[current ^ laneMask];
    next();
    return r;
}

void checkLoad(const void* p, unsigned long size) {
    const char* c = static_cast<const char*>(p);
    auto it = allocs.upper_bound(c);
    if (it == allocs.begin()) fail("load outside the allocations");
    --it;
    if (c + size > it->first + (it->second + 3) / 4 * 4) fail("load outside the allocations");
    if (reinterpret_cast<uintptr_t>(p) % size != 0) fail("misaligned load");
}

namespace {
typedef void (*MatVecFn)(const u8*, const float*, float*, const int*, const int*, const int*, i64, i64, i64, i64,
                         i64, i64, i64);
typedef void (*GetRowsFn)(const u8*, const int*, float*, i64, i64, i64);
#define ENTRY(name, T) {"mmv_" #name, (void*)mmv_##name}, {"getrows_" #name, (void*)getrows_##name},
const std::map<std::string, void*> entries = {MOERUN_TYPES(ENTRY)};

template <class T>
T arg(int i) {
    T v;
    memcpy(&v, params[i], sizeof v);
    return v;
}

void runLane() {
    if (_setjmp(lanes[current]) == 0) swapcontext(&laneStarts[current], &starter);
    if (kernel.rfind("mmv_", 0) == 0) {
        ((MatVecFn)entries.at(kernel))(arg<const u8*>(0), arg<const float*>(1), arg<float*>(2), arg<const int*>(3),
                                       arg<const int*>(4), arg<const int*>(5), arg<i64>(6), arg<i64>(7), arg<i64>(8),
                                       arg<i64>(9), arg<i64>(10), arg<i64>(11), arg<i64>(12));
    } else {
        ((GetRowsFn)entries.at(kernel))(arg<const u8*>(0), arg<const int*>(1), arg<float*>(2), arg<i64>(3),
                                        arg<i64>(4), arg<i64>(5));
    }
    finished[current] = true;
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

struct Func {
    std::string name;
};
int dummyCtx, dummyModule;
}  // namespace

typedef unsigned long long DevPtr;

extern "C" {
int cuInit(unsigned) { return 0; }
int cuGetErrorName(int e, const char** p) {
    static char buf[64];
    snprintf(buf, sizeof buf, "FAKE_ERROR_%d", e);
    *p = buf;
    return 0;
}
int cuDeviceGetCount(int* n) { *n = 1; return 0; }
int cuDeviceGet(int* d, int i) { if (i != 0) return 101; *d = 0; return 0; }
int cuDeviceGetName(char* name, int len, int) { snprintf(name, len, "fake GPU (CPU emulation)"); return 0; }
int cuDevicePrimaryCtxRetain(void** ctx, int) { *ctx = &dummyCtx; return 0; }
int cuDevicePrimaryCtxRelease_v2(int) { return 0; }
int cuCtxSetCurrent(void*) { return 0; }
int cuCtxSynchronize() { return 0; }
int cuMemGetInfo_v2(size_t* free, size_t* total) { *free = 8ull << 30; *total = 16ull << 30; return 0; }
int cuMemAlloc_v2(DevPtr* p, size_t n) {
    char* m = static_cast<char*>(aligned_alloc(256, (n + 255) / 256 * 256));
    memset(m, 0xff, n);  // garbage, as fresh device memory may be
    allocs[m] = n;
    *p = (DevPtr)m;
    return 0;
}
int cuMemFree_v2(DevPtr p) {
    if (!allocs.erase((const char*)p)) return 1;
    free((void*)p);
    return 0;
}
int cuMemAllocHost_v2(void** p, size_t n) { *p = malloc(n); return 0; }
int cuMemFreeHost(void* p) { free(p); return 0; }
static bool inside(DevPtr p, size_t n) {
    const char* c = (const char*)p;
    auto it = allocs.upper_bound(c);
    if (it == allocs.begin()) return false;
    --it;
    return c + n <= it->first + it->second;
}
int cuMemcpyHtoD_v2(DevPtr dst, const void* src, size_t n) {
    if (!inside(dst, n)) return 1;
    memcpy((void*)dst, src, n);
    return 0;
}
int cuMemcpyDtoH_v2(void* dst, DevPtr src, size_t n) {
    if (!inside(src, n)) return 1;
    memcpy(dst, (const void*)src, n);
    return 0;
}
int cuModuleLoadData(void** m, const void*) { *m = &dummyModule; return 0; }
int cuModuleUnload(void*) { return 0; }
int cuModuleGetFunction(void** f, void*, const char* name) {
    if (!entries.count(name)) return 500;  // CUDA_ERROR_NOT_FOUND
    *f = new Func{name};
    return 0;
}
int cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shared, void* stream, void** kp, void** extra) {
    if (gx == 0 || gy == 0 || gz != 1 || bz != 1) return 1;  // CUDA_ERROR_INVALID_VALUE
    kernel = static_cast<Func*>(f)->name;
    params = kp;
    gridDim = {gx, gy, 1};
    blockDim = {bx, by, 1};
    for (unsigned y = 0; y < gy; y++)
        for (unsigned x = 0; x < gx; x++) {
            blockIdx = {x, y, 0};
            for (warpBase = 0; warpBase < int(bx * by); warpBase += kLanes) runWarp();
        }
    return 0;
}
}
