// Package backend holds the devices moerun computes on. This file is only their description:
// what the placement planner needs to know about a device (its name as llama.cpp prints buffer
// types, its kind, its memory and the few capabilities that change where and how weights are
// stored). Where the description came from — a dry run's flags or a real inventory — does
// not matter to the planner.
package backend

import (
	"fmt"
	"slices"

	"github.com/moerun/moerun/tensor"
	"golang.org/x/sys/cpu"
)

// Kind says what sort of device a Device is.
type Kind int

// The device kinds placement distinguishes.
const (
	KindCPU Kind = iota // the host: system RAM, always present, never in llama.cpp's device list
	KindGPU             // an accelerator with its own memory (CUDA, ROCm, Vulkan, Metal, RPC)
)

func (k Kind) String() string {
	switch k {
	case KindCPU:
		return "cpu"
	case KindGPU:
		return "gpu"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Device describes one device. Names follow llama.cpp's buffer-type names ("CPU", "CUDA0",
// "CUDA1", …) because that is what users write after "=" in -ot.
type Device struct {
	Name        string // buffer-type name: "CPU", "CUDA0"
	Description string // human description ("NVIDIA GeForce RTX 4090", "dry run")
	Kind        Kind

	// TotalBytes and FreeBytes are the device's memory; zero means unknown. llama.cpp splits
	// layers by free memory when -ts is not given and fits against free memory.
	TotalBytes int64
	FreeBytes  int64

	// HostBuffer names the device's pinned host-memory buffer type ("CUDA_Host"), or "" when
	// it has none (RPC, CPU). llama.cpp stores CPU weights there when mmap is off, so that
	// copies to the device for large batches are fast.
	HostBuffer string

	// MapsHostMemory is ggml's buffer_from_host_ptr capability: the device can use memory-
	// mapped file pages as a weight buffer without copying them (the CPU, Apple Metal). CUDA
	// cannot, so its weights are always copied into VRAM.
	MapsHostMemory bool

	// OffloadsOps is ggml's offload_op: for batches of 32 tokens or more the device runs
	// matmuls whose weights sit in host memory, copying the weights over each time (CUDA,
	// Vulkan, SYCL do; RPC does not).
	OffloadsOps bool

	// Repack (CPU only) lists the weight types the CPU's repacked matmul layouts accept
	// (ggml's CPU_REPACK buffer type) and, for each, the multiple of rows (ne[1]) a tensor
	// must have. It depends on the instruction set; empty means no repacking.
	Repack map[tensor.Type]int
}

// GPU describes a CUDA-like device for a dry run: index i is named CUDA<i>, has the given
// memory free, a pinned host buffer type and no zero-copy mapping of file pages.
func GPU(i int, memory int64) Device {
	return Device{
		Name:        fmt.Sprintf("CUDA%d", i),
		Description: "dry-run GPU",
		Kind:        KindGPU,
		TotalBytes:  memory,
		FreeBytes:   memory,
		HostBuffer:  "CUDA_Host",
		OffloadsOps: true,
	}
}

// CPU describes the host with the given RAM (0 = unknown) and the repack layouts of the
// machine moerun runs on.
func CPU(ram int64) Device {
	return Device{
		Name:           "CPU",
		Description:    "host",
		Kind:           KindCPU,
		TotalBytes:     ram,
		FreeBytes:      ram,
		MapsHostMemory: true,
		Repack:         hostRepack(),
	}
}

// hostRepack mirrors ggml-cpu's choice of repacked layouts (repack.cpp,
// ggml_repack_get_optimal_repack_type) for the instruction sets this machine has.
func hostRepack() map[tensor.Type]int {
	r := map[tensor.Type]int{}
	switch {
	case cpu.X86.HasAVX2:
		for _, t := range []tensor.Type{tensor.Q4_0, tensor.Q4_K, tensor.IQ4_NL, tensor.MXFP4} {
			r[t] = 8
		}
		if cpu.X86.HasAVX512F {
			r[tensor.Q2_K] = 8
		}
	case cpu.ARM64.HasI8MM:
		for _, t := range []tensor.Type{tensor.Q4_0, tensor.Q8_0} {
			r[t] = 4
		}
		for _, t := range []tensor.Type{tensor.Q4_K, tensor.Q5_K, tensor.Q6_K} {
			r[t] = 8
		}
		if cpu.ARM64.HasASIMDDP {
			r[tensor.IQ4_NL], r[tensor.MXFP4] = 4, 4
		}
	case cpu.ARM64.HasASIMDDP:
		for _, t := range []tensor.Type{tensor.Q4_0, tensor.Q8_0, tensor.IQ4_NL, tensor.MXFP4} {
			r[t] = 4
		}
		for _, t := range []tensor.Type{tensor.Q4_K, tensor.Q5_K, tensor.Q6_K} {
			r[t] = 8
		}
	}
	return r
}

// CanRepack reports whether a matmul weight of this type with this many rows (ne[1]) fits
// one of the CPU's repacked layouts.
func (d *Device) CanRepack(t tensor.Type, rows int64) bool {
	need, ok := d.Repack[t]
	return ok && need > 0 && rows%int64(need) == 0
}

// Validate checks a device list as an inventory: exactly one CPU, unique names, no negative
// memory, free memory not above total.
func Validate(devs []Device) error {
	var cpus int
	seen := map[string]bool{}
	for _, d := range devs {
		switch {
		case d.Name == "":
			return fmt.Errorf("a device has no name")
		case seen[d.Name]:
			return fmt.Errorf("device %s is listed twice", d.Name)
		case d.TotalBytes < 0 || d.FreeBytes < 0:
			return fmt.Errorf("device %s: negative memory size", d.Name)
		case d.TotalBytes > 0 && d.FreeBytes > d.TotalBytes:
			return fmt.Errorf("device %s: %d bytes free of %d total", d.Name, d.FreeBytes, d.TotalBytes)
		}
		seen[d.Name] = true
		if d.Kind == KindCPU {
			cpus++
		}
	}
	if cpus != 1 {
		return fmt.Errorf("the device list must hold exactly one CPU, it holds %d", cpus)
	}
	return nil
}

// Names lists the devices' names, sorted as llama.cpp's buffer-type table is (std::map order).
func Names(devs []Device) []string {
	names := make([]string, len(devs))
	for i, d := range devs {
		names[i] = d.Name
	}
	slices.Sort(names)
	return names
}
