// A fake libcuda for running package cuda's tests on a machine without a GPU: one device,
// "device" memory is host memory, and cuLaunchKernel runs moerun's kernels (matvec.cu) on
// the CPU with the emulator's warps (kernels/testdata/emulate/warp.h: lanes as fibers).
// Loads outside live allocations abort.
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
//
// Stream capture builds CUDA graphs as the driver does, and as strictly: while a stream
// captures, its launches, copies and memsets are recorded, not run; cuGraphLaunch queues a
// graph's recorded work on a stream, in order. What the driver forbids during a capture
// fails the same way here and spoils the capture (its cuStreamEndCapture then fails):
// waiting for the capturing stream or the whole device (synchronizing, cuMemFree), copies
// between the capturing stream and pageable host memory (a graph would read or write it
// when it runs, not now), waits for events from outside the capture, and waits on events
// recorded inside one; and in the modes other than relaxed, freeing memory or synchronizing
// the context from any thread. cuGraphExecUpdate takes a graph of the same work, node by node
// (kinds and kernels), and refuses any other.
#include <pthread.h>
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

// The live allocation checkLoad found last, which it tries first (loads come in runs from
// one allocation); freeing forgets it.
static const char *lastStart, *lastEnd;

// checkLoad fails a load that is misaligned or leaves the live allocations (each rounded up
// to 4 bytes).
void checkLoad(const void* p, unsigned long size) {
    const char* c = static_cast<const char*>(p);
    if (reinterpret_cast<uintptr_t>(p) % size != 0) fail("misaligned load");
    if (c >= lastStart && c + size <= lastEnd) return;
    auto it = allocs.upper_bound(c);
    if (it == allocs.begin()) fail("load outside the allocations");
    --it;
    const char* end = it->first + (it->second + 3) / 4 * 4;
    if (c + size > end) fail("load outside the allocations");
    lastStart = it->first;
    lastEnd = end;
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

// The driver's error codes the fake returns.
enum {
    errInvalidValue = 1,
    errNotReady = 600,
    errIllegalState = 401,
    errCaptureUnsupported = 900,
    errCaptureInvalidated = 901,
    errCaptureIsolation = 905,
    errCapturedEvent = 907,
    errCaptureWrongThread = 908,
    errGraphExecUpdateFailure = 910,
};
const int captureModeRelaxed = 2;  // CU_STREAM_CAPTURE_MODE_RELAXED

// A graph's work in order; kinds names each node (its kind, and a kernel's name), which
// cuGraphExecUpdate compares.
struct Graph {
    std::vector<std::function<int()>> work;
    std::vector<std::string> kinds;
};
// A capture in progress: the graph so far, the thread and mode that began it, and whether
// something forbidden spoiled it.
struct Capture {
    Graph graph;
    unsigned long long id;  // captures are numbered from 1
    pthread_t thread;
    int mode;
    bool spoiled = false;
};
static unsigned long long captures;

// A stream's queue: its work runs in order, when waited for. ran counts the work run since
// the stream was made, queued the work ever queued; an event is a position in that count.
struct Stream {
    std::deque<std::function<int()>> work;
    unsigned long long ran = 0, queued = 0;
    int err = 0;  // the first error of work run, returned by the next wait
    Capture* capture = nullptr;
};
struct Event {
    Stream* stream = nullptr;
    unsigned long long at = 0;   // the stream's work before the event
    unsigned long long capture = 0;  // the capture it was recorded in, if any
};
static Stream defaultStream;
static std::vector<Stream*> streams{&defaultStream};
static Stream* streamOf(void* s) { return s ? static_cast<Stream*>(s) : &defaultStream; }
static bool capturing(void* s) { return streamOf(s)->capture != nullptr; }
// spoil marks stream s's capture as broken by a forbidden call, returning that call's error.
static int spoil(void* s, int err) {
    if (Capture* c = streamOf(s)->capture) c->spoiled = true;
    return err;
}
// guardedCapture reports whether a stream captures in a mode other than relaxed, spoiling
// those captures when one does: such a capture forbids the device-wide waits (freeing
// memory, synchronizing the context) in any thread. A relaxed capture allows them, and
// they wait for every stream but the captured work, which has not been queued.
static bool guardedCapture() {
    bool any = false;
    for (Stream* st : streams)
        if (st->capture && st->capture->mode != captureModeRelaxed) {
            st->capture->spoiled = true;
            any = true;
        }
    return any;
}
static void enqueue(void* s, std::string kind, std::function<int()> op) {
    Stream* st = streamOf(s);
    if (st->capture) {
        st->capture->graph.work.push_back(std::move(op));
        st->capture->graph.kinds.push_back(std::move(kind));
        return;
    }
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
    if (guardedCapture()) return errCaptureUnsupported;
    int err = drainAll();  // freeing synchronizes the device: queued work may use p
    if (!allocs.erase((const char*)p)) return 1;
    lastStart = lastEnd = nullptr;
    free((void*)p);
    return err;
}
int cuMemFreeHost(void* p) {
    if (guardedCapture()) return errCaptureUnsupported;
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
    if (st->capture) return errIllegalState;
    int err = drain(st);
    for (size_t i = 0; i < streams.size(); i++)
        if (streams[i] == st && st != &defaultStream) {
            streams.erase(streams.begin() + i);
            delete st;
            break;
        }
    return err;
}
int cuStreamSynchronize(void* s) {
    if (capturing(s)) return spoil(s, errCaptureUnsupported);
    return drain(streamOf(s));
}
int cuStreamQuery(void* s) {
    if (capturing(s)) return spoil(s, errCaptureUnsupported);
    return streamOf(s)->work.empty() ? 0 : errNotReady;
}
int cuCtxSynchronize() {
    if (guardedCapture()) return errCaptureUnsupported;
    return drainAll();
}
int cuMemcpyHtoDAsync_v2(DevPtr dst, const void* src, size_t n, void* s) {
    if (!inside(dst, n)) return errInvalidValue;
    if (pinned(src, n)) {
        enqueue(s, "memcpy HtoD", [=] { return cuMemcpyHtoD_v2(dst, src, n); });
        return 0;
    }
    if (capturing(s)) return spoil(s, errCaptureUnsupported);
    std::vector<char> staged(static_cast<const char*>(src), static_cast<const char*>(src) + n);
    enqueue(s, "memcpy HtoD", [=, staged = std::move(staged)] { return cuMemcpyHtoD_v2(dst, staged.data(), n); });
    return 0;
}
int cuMemcpyDtoHAsync_v2(void* dst, DevPtr src, size_t n, void* s) {
    if (!inside(src, n)) return errInvalidValue;
    if (pinned(dst, n)) {
        enqueue(s, "memcpy DtoH", [=] { return cuMemcpyDtoH_v2(dst, src, n); });
        return 0;
    }
    if (capturing(s)) return spoil(s, errCaptureUnsupported);
    enqueue(s, "memcpy DtoH", [=] { return cuMemcpyDtoH_v2(dst, src, n); });
    return drain(streamOf(s));  // into pageable memory: done before the call returns
}
int cuMemcpyDtoDAsync_v2(DevPtr dst, DevPtr src, size_t n, void* s) {
    if (!inside(dst, n) || !inside(src, n)) return errInvalidValue;
    enqueue(s, "memcpy DtoD", [=] {
        memmove((void*)dst, (const void*)src, n);
        return 0;
    });
    return 0;
}
int cuMemsetD32Async(DevPtr dst, unsigned v, size_t n, void* s) {
    if (!inside(dst, 4 * n)) return errInvalidValue;
    enqueue(s, "memset 4", [=] {
        for (size_t i = 0; i < n; i++) memcpy((char*)dst + 4 * i, &v, 4);
        return 0;
    });
    return 0;
}
int cuMemsetD8Async(DevPtr dst, unsigned char v, size_t n, void* s) {
    if (!inside(dst, n)) return errInvalidValue;
    enqueue(s, "memset 1", [=] {
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
// An event recorded in a capture marks a node of the graph, not a point of a stream: the
// fake lets the capture's own stream wait on it (a no-op, the graph being in order) and
// nothing else.
int cuEventRecord(void* e, void* s) {
    Stream* st = streamOf(s);
    *static_cast<Event*>(e) = Event{st, st->queued, st->capture ? st->capture->id : 0};
    return 0;
}
int cuEventSynchronize(void* e) {
    Event* ev = static_cast<Event*>(e);
    if (ev->capture) return errCapturedEvent;
    if (ev->stream == nullptr) return 0;  // never recorded: complete
    return waitFor(ev->stream, ev->at);
}
int cuEventQuery(void* e) {
    Event* ev = static_cast<Event*>(e);
    if (ev->capture) return errCapturedEvent;
    return ev->stream == nullptr || ev->stream->ran >= ev->at ? 0 : errNotReady;
}
// A stream that waits for an event runs after the work before it: running that work now,
// earlier than a GPU might, is an order the GPU could also have chosen.
int cuStreamWaitEvent(void* s, void* e, unsigned) {
    Event* ev = static_cast<Event*>(e);
    Stream* st = streamOf(s);
    if (ev->capture) return st->capture && ev->capture == st->capture->id ? 0 : spoil(s, errCapturedEvent);
    if (st->capture) return spoil(s, errCaptureIsolation);
    if (ev->stream != nullptr) runUntil(ev->stream, ev->at);
    return 0;
}

int cuStreamBeginCapture_v2(void* s, int mode) {
    Stream* st = streamOf(s);
    if (st == &defaultStream) return errCaptureUnsupported;  // the legacy stream cannot capture
    if (st->capture) return errIllegalState;
    st->capture = new Capture{{}, ++captures, pthread_self(), mode};
    return 0;
}
int cuStreamEndCapture(void* s, void** graph) {
    Stream* st = streamOf(s);
    Capture* c = st->capture;
    if (c == nullptr) return errIllegalState;
    if (c->mode != captureModeRelaxed && !pthread_equal(c->thread, pthread_self())) return errCaptureWrongThread;
    st->capture = nullptr;
    *graph = nullptr;
    if (c->spoiled) {
        delete c;
        return errCaptureInvalidated;
    }
    *graph = new Graph(std::move(c->graph));
    delete c;
    return 0;
}
int cuStreamIsCapturing(void* s, int* status) {
    *status = capturing(s) ? 1 : 0;  // CU_STREAM_CAPTURE_STATUS_ACTIVE, _NONE
    return 0;
}
int cuGraphDestroy(void* g) {
    delete static_cast<Graph*>(g);
    return 0;
}
int cuGraphInstantiateWithFlags(void** exec, void* g, unsigned long long) {
    if (g == nullptr) return errInvalidValue;
    *exec = new Graph(*static_cast<Graph*>(g));
    return 0;
}
int cuGraphExecDestroy(void* exec) {
    delete static_cast<Graph*>(exec);
    return 0;
}
// graphUpdate is cuGraphExecUpdate's work under both of its signatures (CUDA 11's and
// CUDA 12's _v2).
static int graphUpdate(void* exec, void* g) {
    Graph* e = static_cast<Graph*>(exec);
    Graph* from = static_cast<Graph*>(g);
    if (e == nullptr || from == nullptr) return errInvalidValue;
    if (e->kinds != from->kinds) return errGraphExecUpdateFailure;
    e->work = from->work;
    return 0;
}
int cuGraphExecUpdate(void* exec, void* g, void** errNode, int* result) {
    *errNode = nullptr;
    int err = graphUpdate(exec, g);
    *result = err == 0 ? 0 : 2;  // CU_GRAPH_EXEC_UPDATE_SUCCESS, _ERROR_TOPOLOGY_CHANGED
    return err;
}
int cuGraphExecUpdate_v2(void* exec, void* g, void* info) {
    memset(info, 0, 24);  // CUgraphExecUpdateResultInfo: result, errorNode, errorFromNode
    return graphUpdate(exec, g);
}
int cuGraphLaunch(void* exec, void* s) {
    if (exec == nullptr) return errInvalidValue;
    if (capturing(s)) return spoil(s, errCaptureUnsupported);  // graphs in graphs: not needed here
    for (auto& op : static_cast<Graph*>(exec)->work) enqueue(s, "graph", op);
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
    // The limits of every GPU since Volta: grid.y, threads per block, and dynamic shared
    // memory without an opt-in. (No kernel asks for dynamic shared memory; mmq's static
    // __shared__ tiles are static variables here, see cuda_fp16.h.)
    if (gy > 65535 || bx * by > 1024 || shared > 48 * 1024) return 1;
    std::string name = static_cast<Func*>(f)->name;
    // The kernels' parameters are 8 bytes each (pointers, 64-bit integers and doubles),
    // copied now as the driver does.
    const size_t n = warp::entries.at(name).params;
    std::vector<void*> args(n, nullptr);
    for (size_t i = 0; i < n; i++) memcpy(&args[i], kp[i], sizeof(void*));
    enqueue(stream, "kernel " + name, [=] {
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
