// A fake libcuda for running package cuda's tests on a machine without a GPU: one device,
// "device" memory is host memory, and cuLaunchKernel runs moerun's kernels (matvec.cu) on
// the CPU with the emulator's warps (kernels/testdata/emulate/warp.h: lanes as fibers;
// glibc's fortified longjmp refuses to jump between their stacks, hence the #undef). Loads
// outside live allocations abort.
//
// Streams are asynchronous, as a GPU's are, and as late as the driver's rules allow, so that
// code which forgets to wait shows it: work queued on a stream (launches, asynchronous
// copies and memsets) runs only when something waits for it — cuStreamSynchronize,
// cuCtxSynchronize, cuEventSynchronize of an event recorded after it, cuStreamWaitEvent
// from another stream, cuMemFree (which synchronizes the device), or a copy that the
// driver makes synchronous. An asynchronous copy from page-locked host memory
// (cuMemAllocHost) reads it when it runs, so refilling a buffer a queued copy still
// reads changes what it copies; from pageable memory the driver stages the bytes before
// returning, and into pageable memory it copies before returning, after the stream's
// earlier work. The synchronous cuMemcpyHtoD/DtoH do not wait for the (non-blocking)
// streams. Errors of queued work are returned by the next wait on its stream.
#undef _FORTIFY_SOURCE
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
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
int cuMemGetInfo_v2(size_t* free, size_t* total) { *free = 8ull << 30; *total = 16ull << 30; return 0; }
int cuMemAlloc_v2(DevPtr* p, size_t n) {
    char* m = static_cast<char*>(aligned_alloc(256, (n + 255) / 256 * 256));
    memset(m, 0xff, n);  // garbage, as fresh device memory may be
    allocs[m] = n;
    *p = (DevPtr)m;
    return 0;
}
static std::map<const char*, size_t> pinnedAllocs;  // cuMemAllocHost's
int cuMemAllocHost_v2(void** p, size_t n) {
    *p = malloc(n);
    pinnedAllocs[static_cast<const char*>(*p)] = n;
    return 0;
}
// within reports whether the n bytes at p lie inside one of the allocations of m.
static bool within(const std::map<const char*, size_t>& m, const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    auto it = m.upper_bound(c);
    if (it == m.begin()) return false;
    --it;
    return c + n <= it->first + it->second;
}
static bool pinned(const void* p, size_t n) { return within(pinnedAllocs, p, n); }
static bool inside(DevPtr p, size_t n) { return within(allocs, (const void*)p, n); }

// A stream's queue: its work runs in order, when waited for. ran counts the work run since
// the stream was made, queued the work ever queued; an event is a position in that count.
struct Stream {
    std::deque<std::function<int()>> work;
    unsigned long long ran = 0, queued = 0;
    int err = 0;  // the first error of work run, returned by the next wait
};
struct Event {
    Stream* stream = nullptr;
    unsigned long long at = 0;  // the stream's work before the event
};
static Stream defaultStream;
static std::vector<Stream*> streams{&defaultStream};
static Stream* streamOf(void* s) { return s ? static_cast<Stream*>(s) : &defaultStream; }
static void enqueue(void* s, std::function<int()> op) {
    Stream* st = streamOf(s);
    st->work.push_back(std::move(op));
    st->queued++;
}
// runUntil runs the stream's work up to position at, keeping the first error.
static void runUntil(Stream* st, unsigned long long at) {
    while (st->ran < at && !st->work.empty()) {
        int e = st->work.front()();
        st->work.pop_front();
        st->ran++;
        if (e != 0 && st->err == 0) st->err = e;
    }
}
// waitFor runs the stream's work up to position at and returns (and clears) its first
// error.
static int waitFor(Stream* st, unsigned long long at) {
    runUntil(st, at);
    int e = st->err;
    st->err = 0;
    return e;
}
static int drain(Stream* st) { return waitFor(st, st->queued); }
static int drainAll() {
    int err = 0;
    for (Stream* st : streams) {
        int e = drain(st);
        if (err == 0) err = e;
    }
    return err;
}

int cuMemFree_v2(DevPtr p) {
    int err = drainAll();  // freeing synchronizes the device: queued work may use p
    if (!allocs.erase((const char*)p)) return 1;
    free((void*)p);
    return err;
}
int cuMemFreeHost(void* p) {
    int err = drainAll();  // a queued copy may still read it
    pinnedAllocs.erase(static_cast<const char*>(p));
    free(p);
    return err;
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
int cuStreamCreate(void** s, unsigned) {
    Stream* st = new Stream;
    streams.push_back(st);
    *s = st;
    return 0;
}
int cuStreamDestroy_v2(void* s) {
    Stream* st = streamOf(s);
    int err = drain(st);
    for (size_t i = 0; i < streams.size(); i++)
        if (streams[i] == st && st != &defaultStream) {
            streams.erase(streams.begin() + i);
            delete st;
            break;
        }
    return err;
}
int cuStreamSynchronize(void* s) { return drain(streamOf(s)); }
int cuStreamQuery(void* s) { return streamOf(s)->work.empty() ? 0 : 600; }  // CUDA_ERROR_NOT_READY
int cuCtxSynchronize() { return drainAll(); }
int cuMemcpyHtoDAsync_v2(DevPtr dst, const void* src, size_t n, void* s) {
    if (!inside(dst, n)) return 1;
    if (pinned(src, n)) {
        enqueue(s, [=] { return cuMemcpyHtoD_v2(dst, src, n); });
        return 0;
    }
    std::vector<char> staged(static_cast<const char*>(src), static_cast<const char*>(src) + n);
    enqueue(s, [=, staged = std::move(staged)] { return cuMemcpyHtoD_v2(dst, staged.data(), n); });
    return 0;
}
int cuMemcpyDtoHAsync_v2(void* dst, DevPtr src, size_t n, void* s) {
    if (!inside(src, n)) return 1;
    enqueue(s, [=] { return cuMemcpyDtoH_v2(dst, src, n); });
    if (pinned(dst, n)) return 0;
    return drain(streamOf(s));  // into pageable memory: done before the call returns
}
int cuMemcpyDtoDAsync_v2(DevPtr dst, DevPtr src, size_t n, void* s) {
    if (!inside(dst, n) || !inside(src, n)) return 1;
    enqueue(s, [=] {
        memmove((void*)dst, (const void*)src, n);
        return 0;
    });
    return 0;
}
int cuMemsetD32Async(DevPtr dst, unsigned v, size_t n, void* s) {
    if (!inside(dst, 4 * n)) return 1;
    enqueue(s, [=] {
        for (size_t i = 0; i < n; i++) memcpy((char*)dst + 4 * i, &v, 4);
        return 0;
    });
    return 0;
}
int cuMemsetD8Async(DevPtr dst, unsigned char v, size_t n, void* s) {
    if (!inside(dst, n)) return 1;
    enqueue(s, [=] {
        memset((void*)dst, v, n);
        return 0;
    });
    return 0;
}
int cuEventCreate(void** e, unsigned) {
    *e = new Event;
    return 0;
}
int cuEventDestroy_v2(void* e) {
    delete static_cast<Event*>(e);
    return 0;
}
int cuEventRecord(void* e, void* s) {
    Stream* st = streamOf(s);
    *static_cast<Event*>(e) = Event{st, st->queued};
    return 0;
}
int cuEventSynchronize(void* e) {
    Event* ev = static_cast<Event*>(e);
    if (ev->stream == nullptr) return 0;  // never recorded: complete
    return waitFor(ev->stream, ev->at);
}
int cuEventQuery(void* e) {
    Event* ev = static_cast<Event*>(e);
    return ev->stream == nullptr || ev->stream->ran >= ev->at ? 0 : 600;  // CUDA_ERROR_NOT_READY
}
// A stream that waits for an event runs after the work before it: running that work now,
// earlier than a GPU might, is an order the GPU could also have chosen.
int cuStreamWaitEvent(void*, void* e, unsigned) {
    Event* ev = static_cast<Event*>(e);
    if (ev->stream != nullptr) runUntil(ev->stream, ev->at);
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
    std::string name = static_cast<Func*>(f)->name;
    // The kernels' parameters are 8 bytes each (pointers, 64-bit integers and doubles),
    // copied now as the driver does.
    const size_t n = warp::entries.at(name).params;
    std::vector<void*> args(n, nullptr);
    for (size_t i = 0; i < n; i++) memcpy(&args[i], kp[i], sizeof(void*));
    enqueue(stream, [=] {
        warp::kernel = name;
        warp::args = args;
        gridDim = {gx, gy, 1};
        blockDim = {bx, by, 1};
        for (unsigned y = 0; y < gy; y++)
            for (unsigned x = 0; x < gx; x++) {
                blockIdx = {x, y, 0};
                for (int w = 0; w < int(bx * by); w += warp::kLanes) warp::run(w);
            }
        return 0;
    });
    return 0;
}
}
