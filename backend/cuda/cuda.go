//go:build cuda

// Package cuda is the NVIDIA GPU backend, built only with the build tag cuda (it needs the
// CUDA driver headers and libcuda to build, and the NVIDIA driver to run). Execution is
// device-resident: weights, the backend's buffers and so the activations of the layers it
// holds live in device memory, and copies and kernels (package kernels, embedded PTX) are
// queued in order on the backend's stream; op offload's copies of host-held weights go on
// a second stream, ordered against the first by events (staging.go), so that the copy
// engine moves the next weight while the GPU computes with the last. The stream's work
// between two waits for the GPU is recorded and launched at once as a CUDA graph, which
// the next decode step replays (graph.go). On the GPU run the weight operations (matmuls,
// expert matmuls, row lookups; the kernels dequantize on the fly) and the operations
// between them: strided copies, add, mul, scale, the unary functions, SwiGLU, RMS and L2
// norms, RoPE, set-rows into and attention over F32, F16 and Q8_0 KV caches, the MoE
// router, add-id, the experts' weighted sum, the lightning indexer's scores, and Gated
// DeltaNet's causal convolution and delta rule. Attention over heads larger than its
// kernel takes (and a delta rule's) must run where the cache or state is, so the backend
// runs it on the host pool through copies of its operands; so are the weights of types
// with no kernel computed, which stay in host memory. Expert matmuls group their (token, slot) pairs by expert on
// the device, so nothing in a forward pass waits for the GPU but the crossings to the host.
//
// gorgonia.org/cu is the driver binding. Two of its traps are handled here: its package
// init exits the process when cuInit fails (guard.c intercepts cuInit, so a CUDA build
// runs on a machine without a GPU and reports it through Available), and its managed
// context runs every call through a channel to a locked goroutine (the backend instead
// makes the device's primary context current on the calling thread, once per operation).
package cuda

/*
#cgo LDFLAGS: -ldl
#cgo linux CFLAGS: -I/usr/local/cuda/include
#include <cuda.h>
int moerun_cuinit_result(void);
*/
import "C"

import (
	"fmt"
	"runtime"

	"github.com/moerun/moerun/backend"
	"gorgonia.org/cu"
)

// Available reports whether the CUDA driver initialised: nil when it did, else the
// driver's error (no GPU, no kernel module, driver too old).
func Available() error {
	return cuErr("CUDA driver: cuInit", C.CUresult(C.moerun_cuinit_result()))
}

// cuErr is a driver result as an error naming what failed, nil for success. (cuGetErrorName
// needs no initialised driver, so it serves cuInit's failure too.)
func cuErr(what string, r C.CUresult) error {
	if r == C.CUDA_SUCCESS {
		return nil
	}
	var p *C.char
	if C.cuGetErrorName(r, &p) == C.CUDA_SUCCESS {
		return fmt.Errorf("%s: %s (%d)", what, C.GoString(p), int(r))
	}
	return fmt.Errorf("%s: CUDA error %d", what, int(r))
}

// Devices lists the GPUs the driver sees, named as llama.cpp names them (CUDA0, CUDA1, …)
// with their memory. Free memory is read through each device's primary context.
func Devices() ([]backend.Device, error) {
	n, err := Count()
	if err != nil {
		return nil, err
	}
	devs := make([]backend.Device, 0, n)
	for i := range n {
		d, err := describe(i)
		if err != nil {
			return nil, err
		}
		devs = append(devs, d)
	}
	return devs, nil
}

// Count is the number of GPUs the driver sees.
func Count() (int, error) {
	if err := Available(); err != nil {
		return 0, err
	}
	n, err := cu.NumDevices()
	if err != nil {
		return 0, fmt.Errorf("CUDA driver: counting devices: %w", err)
	}
	return n, nil
}

// describe reads device i's name and memory.
func describe(i int) (backend.Device, error) {
	dev, err := cu.GetDevice(i)
	if err != nil {
		return backend.Device{}, fmt.Errorf("CUDA%d: %w", i, err)
	}
	name, err := dev.Name()
	if err != nil {
		return backend.Device{}, fmt.Errorf("CUDA%d: name: %w", i, err)
	}
	ctx, err := dev.RetainPrimaryCtx()
	if err != nil {
		return backend.Device{}, fmt.Errorf("CUDA%d (%s): primary context: %w", i, name, err)
	}
	// Released again at once: a backend retains the context for as long as it lives, and
	// a dry run's inventory should not keep one alive.
	defer dev.ReleasePrimaryCtx()
	var free, total int64
	err = onContext(ctx, func() error {
		var err error
		free, total, err = cu.MemInfo()
		return err
	})
	if err != nil {
		return backend.Device{}, fmt.Errorf("CUDA%d (%s): memory info: %w", i, name, err)
	}
	d := backend.GPU(i, total)
	d.Description, d.FreeBytes = name, free
	return d, nil
}

// onContext runs fn on this goroutine's OS thread with ctx current. The driver keeps the
// current context per thread, so the goroutine must not move while fn runs.
func onContext(ctx cu.CUContext, fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cu.SetCurrentContext(ctx); err != nil {
		return err
	}
	return fn()
}
