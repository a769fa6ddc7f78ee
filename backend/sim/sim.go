// Package sim is a simulated GPU: a device with memory of its own, which the host cannot
// address, a capacity that allocations run out of, and copies to and from the host that it
// counts. It computes with the CPU's kernels, so a model run on it gives the CPU's answers
// bit for bit; what it checks is the runtime's side of a GPU — that every value is on the
// device that computes it and that crossings happen only where the plan changes device —
// on machines without one (moerun's --sim-gpu, CI).
package sim

import (
	"fmt"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/backend/cpu"
	"github.com/moerun/moerun/tensor"
)

// Backend is one simulated GPU.
type Backend struct {
	*cpu.Backend
	used    int64
	traffic backend.Traffic
}

// New makes simulated GPU i (named CUDA<i>, as llama.cpp names CUDA devices) with memory
// bytes of memory, computing on pool. It runs every operation but those refuse lists, as a
// GPU backend without kernels for them: the runtime must run them elsewhere.
func New(i int, memory int64, pool *tensor.Pool, refuse ...backend.Op) *Backend {
	return &Backend{Backend: cpu.New(cpu.Options{Device: Device(i, memory), Pool: pool, Copy: true, Private: true, Refuse: refuse})}
}

// Device describes simulated GPU i to placement: a CUDA device (its weights copied into
// its memory, a pinned host buffer type, large batches offloaded) with memory bytes free.
func Device(i int, memory int64) backend.Device {
	dev := backend.GPU(i, memory)
	dev.Description = fmt.Sprintf("simulated GPU, %.3g GiB", float64(memory)/(1<<30))
	return dev
}

// reserve takes n bytes of the device's memory, as cudaMalloc would, or fails as it would.
func (b *Backend) reserve(n int64, what string) error {
	total := b.Device().TotalBytes
	if b.used+n > total {
		return fmt.Errorf("%s: out of memory: %s needs %.2f MiB, %.2f MiB of %.2f MiB are free", b.Device().Name, what,
			float64(n)/(1<<20), float64(total-b.used)/(1<<20), float64(total)/(1<<20))
	}
	b.used += n
	return nil
}

// Load copies a weight into the device's memory.
func (b *Backend) Load(name string, t tensor.Type, shape []int64, data []byte) (backend.Weight, error) {
	if err := b.reserve(int64(len(data)), "tensor "+name); err != nil {
		return nil, err
	}
	return b.Backend.Load(name, t, shape, data)
}

// Alloc allocates device memory.
func (b *Backend) Alloc(size int64) (backend.Buffer, error) {
	if err := b.reserve(size, "a buffer"); err != nil {
		return nil, err
	}
	return b.Backend.Alloc(size)
}

// Free releases device memory.
func (b *Backend) Free(buf backend.Buffer) error {
	size := buf.Size()
	if err := b.Backend.Free(buf); err != nil {
		return err
	}
	b.used -= size
	return nil
}

// Set copies host bytes into the device, and counts them.
func (b *Backend) Set(dst backend.Tensor, src []byte) error {
	b.traffic.CopiesIn++
	b.traffic.BytesIn += int64(len(src))
	return b.Backend.Set(dst, src)
}

// Get copies device bytes to the host, and counts them.
func (b *Backend) Get(dst []byte, src backend.Tensor) error {
	b.traffic.CopiesOut++
	b.traffic.BytesOut += int64(len(dst))
	return b.Backend.Get(dst, src)
}

// Stage copies a host-held weight's bytes into the device for op offload, and counts them.
func (b *Backend) Stage(buf backend.Buffer, off int64, name string, t tensor.Type, shape []int64, data []byte, spans [][2]int64) (backend.Weight, error) {
	b.traffic.CountStage(int64(len(data)), spans)
	return b.Backend.Stage(buf, off, name, t, shape, data, spans)
}

// Synchronize counts a wait for the device.
func (b *Backend) Synchronize() error {
	b.traffic.Syncs++
	return b.Backend.Synchronize()
}

// Traffic is what crossed between the device and the host so far, and the operations run.
func (b *Backend) Traffic() backend.Traffic {
	t := b.traffic
	t.Ops = b.Operations()
	return t
}

// Used is the device memory allocated so far: weights and buffers.
func (b *Backend) Used() int64 { return b.used }

// Summary is a one-line account of the work done so far.
func (b *Backend) Summary() string {
	t := b.Traffic()
	return fmt.Sprintf("%d operations, %d copies in (%.1f MiB), %d out (%.1f MiB), %d waits, %d weight uploads for op offload (%.1f MiB); %.1f MiB of device memory used",
		t.Ops, t.CopiesIn, float64(t.BytesIn)/(1<<20), t.CopiesOut, float64(t.BytesOut)/(1<<20), t.Syncs, t.Uploads, float64(t.BytesUploaded)/(1<<20), float64(b.used)/(1<<20))
}

var (
	_ backend.Backend = (*Backend)(nil)
	_ backend.Counter = (*Backend)(nil)
	_ backend.Stager  = (*Backend)(nil)
)
