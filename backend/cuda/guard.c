//go:build cuda

// gorgonia.org/cu calls cuInit from its package init and exits the process when it fails,
// which would make a CUDA build of moerun unusable on a machine without a GPU. This file
// defines cuInit in the executable itself: the linker binds cu's call to this definition
// rather than to libcuda's, so the real cuInit runs here, its result is kept for the
// backend to report, and cu is told it succeeded. The backend checks the kept result
// before it calls anything else in the driver.

#define _GNU_SOURCE
#include <dlfcn.h>

// CUDA_ERROR_NOT_INITIALIZED: what we report when libcuda has no cuInit at all.
#define MOERUN_NOT_INITIALIZED 3

static int moerun_init_result = MOERUN_NOT_INITIALIZED;
static int moerun_init_called = 0;

int cuInit(unsigned int flags) {
	int (*real)(unsigned int) = (int (*)(unsigned int))dlsym(RTLD_NEXT, "cuInit");
	moerun_init_called = 1;
	moerun_init_result = real ? real(flags) : MOERUN_NOT_INITIALIZED;
	return 0;
}

int moerun_cuinit_result(void) {
	if (!moerun_init_called) {
		cuInit(0);
	}
	return moerun_init_result;
}
