// A fake libcuda for running package cuda's tests on a machine without a GPU: one device,
// "device" memory is host memory, and cuLaunchKernel runs moerun's kernels (matvec.cu) on
// the CPU with the emulator's warps (kernels/testdata/emulate/warp.h: lanes as fibers;
// glibc's fortified longjmp refuses to jump between their stacks, hence the #undef). Loads
// outside live allocations abort.
#undef _FORTIFY_SOURCE
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

#include "warp.h"

namespace {
std::map<const char*, size_t> allocs;  // live device allocations

void fail(const char* what) {
    fprintf(stderr, "fake libcuda: %s: %s\n", warp::kernel.c_str(), what);
    fflush(stderr);
    _exit(2);
}
}  // namespace

void checkLoad(const void* p, unsigned long size) {
    const char* c = static_cast<const char*>(p);
    auto it = allocs.upper_bound(c);
    if (it == allocs.begin()) fail("load outside the allocations");
    --it;
    if (c + size > it->first + (it->second + 3) / 4 * 4) fail("load outside the allocations");
    if (reinterpret_cast<uintptr_t>(p) % size != 0) fail("misaligned load");
}

namespace {
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
// One stream, the default one: every copy and launch runs at once, in order, so a stream
// has nothing to wait for.
int dummyStream;
int cuStreamCreate(void** s, unsigned) { *s = &dummyStream; return 0; }
int cuStreamDestroy_v2(void*) { return 0; }
int cuStreamSynchronize(void*) { return 0; }
int cuMemcpyHtoDAsync_v2(DevPtr dst, const void* src, size_t n, void*) { return cuMemcpyHtoD_v2(dst, src, n); }
int cuMemcpyDtoHAsync_v2(void* dst, DevPtr src, size_t n, void*) { return cuMemcpyDtoH_v2(dst, src, n); }
int cuMemcpyDtoDAsync_v2(DevPtr dst, DevPtr src, size_t n, void*) {
    if (!inside(dst, n) || !inside(src, n)) return 1;
    memmove((void*)dst, (const void*)src, n);
    return 0;
}
int cuMemsetD32Async(DevPtr dst, unsigned v, size_t n, void*) {
    if (!inside(dst, 4 * n)) return 1;
    for (size_t i = 0; i < n; i++) memcpy((char*)dst + 4 * i, &v, 4);
    return 0;
}
int cuMemsetD8Async(DevPtr dst, unsigned char v, size_t n, void*) {
    if (!inside(dst, n)) return 1;
    memset((void*)dst, v, n);
    return 0;
}
int cuModuleLoadData(void** m, const void*) { *m = &dummyModule; return 0; }
int cuModuleUnload(void*) { return 0; }
int cuModuleGetFunction(void** f, void*, const char* name) {
    if (!warp::entries.count(name)) return 500;  // CUDA_ERROR_NOT_FOUND
    *f = new Func{name};
    return 0;
}
int cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shared, void* stream, void** kp, void** extra) {
    if (gx == 0 || gy == 0 || gz != 1 || bz != 1) return 1;  // CUDA_ERROR_INVALID_VALUE
    warp::kernel = static_cast<Func*>(f)->name;
    // The kernels' parameters are 8 bytes each (pointers, 64-bit integers and doubles).
    const size_t n = warp::entries.at(warp::kernel).params;
    warp::args.assign(n, nullptr);
    for (size_t i = 0; i < n; i++) memcpy(&warp::args[i], kp[i], sizeof(void*));
    gridDim = {gx, gy, 1};
    blockDim = {bx, by, 1};
    for (unsigned y = 0; y < gy; y++)
        for (unsigned x = 0; x < gx; x++) {
            blockIdx = {x, y, 0};
            for (int w = 0; w < int(bx * by); w += warp::kLanes) warp::run(w);
        }
    return 0;
}
}
