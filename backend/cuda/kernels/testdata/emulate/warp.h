// A CUDA warp's 32 lanes as fibers on the CPU, and a launch of moerun's kernels on them:
// shared by the emulator (emulate.cc, TestEmulated) and the fake libcuda
// (backend/cuda/testdata/fakecuda). Include it after the kernels (matvec.cu); the includer
// sets warp::kernel and warp::args (each argument's value: a pointer, or an integer or a
// double in a pointer's bytes) and calls warp::run for every warp of every block.
//
// A shuffle switches to the next lane twice (once all lanes have written their value, once
// all have read it), so the lanes of a warp advance together as on the GPU. The 32 fibers
// are made once, on stacks of their own through ucontext, and serve every warp after: a
// lane that has finished its warp parks until the next one begins. They switch with GCC's
// __builtin_setjmp/__builtin_longjmp, which save and restore only the frame, stack and
// resume address (the compiler keeps nothing else in registers across them) and, unlike
// swapcontext or glibc's longjmp, make no system call and walk no cleanup handlers.
#pragma once

#include <ucontext.h>

#include <cstring>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace warp {

constexpr int kLanes = 32;
constexpr size_t kStack = 256 * 1024;

inline ucontext_t starter, laneStarts[kLanes];
inline void *scheduler[5], *lanes[kLanes][5];  // __builtin_setjmp's buffers
inline int current;           // the running lane
inline dim3 laneThread[kLanes];  // each lane's threadIdx in the running warp
inline bool finished[kLanes];
inline double shuffled[kLanes];
inline bool made;                   // the fibers exist
inline volatile unsigned warpsRun;  // warps begun: a parked lane leaves when it changes

inline std::string kernel;
inline std::vector<void*> args;

// enter makes lane the running one, with its thread coordinates.
inline void enter(int lane) {
    current = lane;
    threadIdx = laneThread[lane];
}

// resume continues the fiber that saved buf. GCC does not allow __builtin_longjmp in the
// function that calls __builtin_setjmp, hence a function of its own.
[[gnu::noinline]] inline void resume(void** buf) { __builtin_longjmp(buf, 1); }

// next switches to the following lane, or back to the scheduler after the last.
inline void next() {
    const int from = current;
    if (__builtin_setjmp(lanes[from]) == 0) {
        if (from + 1 == kLanes) resume(scheduler);
        enter(from + 1);
        resume(lanes[from + 1]);
    }
    enter(from);
}

// An entry point: its parameter count and a call that unpacks the launch's arguments (each
// 8 bytes: a pointer, a 64-bit integer or a double, as the kernels declare them) into it.
struct Entry {
    size_t params;
    void (*call)(void* const* args);
};

template <class T>
inline T param(void* a) {
    if constexpr (std::is_same_v<T, double>) {
        double d;
        memcpy(&d, &a, sizeof d);
        return d;
    } else {
        return (T)(a);
    }
}

template <auto F, class... A, size_t... I>
inline void callWith(void* const* a, std::index_sequence<I...>) {
    F(param<A>(a[I])...);
}

template <auto F, class... A>
inline Entry entryOf(void (*)(A...)) {
    return {sizeof...(A), [](void* const* a) { callWith<F, A...>(a, std::index_sequence_for<A...>{}); }};
}

#define MOERUN_WARP_ENTRY(name) {#name, entryOf<name>(name)},
#define MOERUN_WARP_TYPE_ENTRIES(name, T) \
    MOERUN_WARP_ENTRY(mmv_##name) MOERUN_WARP_ENTRY(mmq_##name) MOERUN_WARP_ENTRY(getrows_##name)
inline const std::map<std::string, Entry> entries = {MOERUN_TYPES(MOERUN_WARP_TYPE_ENTRIES) MOERUN_OPS(MOERUN_WARP_ENTRY)};
inline const Entry* entry;    // kernel's, looked up once per warp
inline std::string entryName;  // the kernel entry is of

// runLane is a lane's fiber: it records where to resume it and returns to run, which makes
// all lanes before running any; then it runs its lane of every warp.
inline void runLane() {
    if (__builtin_setjmp(lanes[current]) == 0) swapcontext(&laneStarts[current], &starter);
    for (;;) {
        entry->call(args.data());
        finished[current] = true;
        // Park: a finished lane still takes its turn, so the others' shuffles keep their
        // count (the kernels retire whole warps, so no lane shuffles after another has
        // finished), until run begins the next warp.
        const volatile unsigned warp = warpsRun;
        while (warpsRun == warp) next();
    }
}

// run runs the warp whose lane 0 is the block's thread warpBase to the end.
inline void run(int warpBase) {
    static std::vector<char> stacks(kLanes * kStack);
    for (int l = 0; l < kLanes; l++) {
        const unsigned t = warpBase + l;
        laneThread[l] = {t % blockDim.x, t / blockDim.x, 0};
    }
    for (int l = 0; l < kLanes && !made; l++) {
        getcontext(&laneStarts[l]);
        // The stacks' tops are staggered: 256 KiB apart, they would all fall in the same
        // sets of the CPU's caches, and every switch would evict the next lane's frame.
        laneStarts[l].uc_stack.ss_sp = &stacks[l * kStack];
        laneStarts[l].uc_stack.ss_size = kStack - l * 320;
        laneStarts[l].uc_link = nullptr;
        makecontext(&laneStarts[l], runLane, 0);
        enter(l);
        swapcontext(&starter, &laneStarts[l]);
    }
    made = true;
    if (kernel != entryName) {
        entry = &entries.at(kernel);
        entryName = kernel;
    }
    warpsRun = warpsRun + 1;
    for (bool& f : finished) f = false;
    for (bool done = false; !done;) {
        enter(0);
        if (__builtin_setjmp(scheduler) == 0) resume(lanes[0]);
        done = true;
        for (bool f : finished) done = done && f;
    }
}

}  // namespace warp

// __syncwarp is a barrier: every lane takes its turn once before any continues.
inline void __syncwarp(unsigned int) { warp::next(); }

// A float widens to double exactly and back, so one exchange serves both types.
inline double __shfl_xor_sync(unsigned int, double v, int laneMask) {
    warp::shuffled[warp::current] = v;
    warp::next();  // every lane has written
    const double r = warp::shuffled[warp::current ^ laneMask];
    warp::next();  // every lane has read
    return r;
}

inline float __shfl_xor_sync(unsigned int mask, float v, int laneMask) {
    return float(__shfl_xor_sync(mask, double(v), laneMask));
}
