//go:build cuda

package cuda

/*
#cgo linux CFLAGS: -I/usr/local/cuda/include
#include <cuda.h>
*/
import "C"

import (
	"fmt"
	"slices"
	"unsafe"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/backend/cuda/kernels"
	"github.com/moerun/moerun/internal/mmap"
	"github.com/moerun/moerun/tensor"
	"gorgonia.org/cu"
)

// The scratch memory of the GPU's operations, and the copies into it. Every function here
// needs the backend's context current. Weights go through page-locked ("pinned") host memory, which the GPU reads by
// DMA at full speed; cu has no wrapper for cuMemAllocHost, hence this file's cgo.

// pinned is a grow-only page-locked host buffer.
type pinned struct{ mem []byte }

// reserve makes the buffer hold at least n bytes, dropping its contents if it grows.
func (p *pinned) reserve(n int64) error {
	if n <= int64(len(p.mem)) {
		return nil
	}
	if err := p.free(); err != nil {
		return err
	}
	var ptr unsafe.Pointer
	if err := cuErr(fmt.Sprintf("allocating %d KiB of pinned host memory", n>>10), C.cuMemAllocHost(&ptr, C.size_t(n))); err != nil {
		return err
	}
	p.mem = unsafe.Slice((*byte)(ptr), n)
	return nil
}

func (p *pinned) free() error {
	if p.mem == nil {
		return nil
	}
	r := C.cuMemFreeHost(unsafe.Pointer(&p.mem[0]))
	p.mem = nil
	return cuErr("freeing pinned host memory", r)
}

// deviceBuffer is a grow-only device allocation.
type deviceBuffer struct {
	ptr  cu.DevicePtr
	size int64
}

// reserve makes the buffer hold at least n bytes (with headroom, so that growing token
// counts do not reallocate every time). Work queued may still read the old allocation,
// so it waits (wait: the backend's settle) before freeing it.
func (d *deviceBuffer) reserve(n int64, wait func() error) error {
	if n <= d.size {
		return nil
	}
	size := max(n, d.size+d.size/2, 1<<16)
	if d.ptr != 0 {
		if err := wait(); err != nil {
			return err
		}
	}
	if err := d.free(); err != nil {
		return err
	}
	ptr, err := cu.MemAlloc(size)
	if err != nil {
		return fmt.Errorf("allocating a %d KiB scratch buffer: %w", size>>10, err)
	}
	d.ptr, d.size = ptr, size
	return nil
}

func (d *deviceBuffer) free() error {
	if d.ptr == 0 {
		return nil
	}
	err := cu.MemFree(d.ptr)
	d.ptr, d.size = 0, 0
	return err
}

// send queues a copy of host ids into a device buffer, growing it first. The values
// are Go memory, which the driver copies into its own staging before the call returns, so
// the caller may reuse them at once.
func (b *Backend) send(buf *deviceBuffer, src []int32) error {
	n := int64(len(src)) * 4
	if err := buf.reserve(n, b.settle); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	b.stats.CopyInBytes += n
	return b.copyIn(buf.ptr, unsafe.Slice((*byte)(unsafe.Pointer(&src[0])), n))
}

// stagingBytes is the size of the pinned buffer weights pass through on their way to the
// device: big enough that the per-copy overhead vanishes, small next to any GPU's memory.
const stagingBytes = 64 << 20

// upload copies a weight's bytes into device memory at dst. The bytes are usually a view
// of the memory-mapped model file, and the driver cannot be handed them directly: a page
// that faults (the file shrank under its mapping) would kill the process inside C code,
// where Go cannot recover. So Go copies them, under mmap.Guard, into the pinned staging
// buffer, and the driver copies that to the device at full PCIe speed.
func (b *Backend) upload(dst cu.DevicePtr, data []byte) error {
	if err := b.staging.reserve(stagingBytes); err != nil {
		return err
	}
	for h := range b.halfQueued { // op offload's copies may still read the buffer
		if err := b.waitHalf(h); err != nil {
			return err
		}
	}
	for off := 0; off < len(data); off += stagingBytes {
		chunk := b.staging.mem[:min(stagingBytes, len(data)-off)]
		if err := mmap.Guard(func() { copy(chunk, data[off:]) }); err != nil {
			return err
		}
		if err := cu.MemcpyHtoD(dst+cu.DevicePtr(off), unsafe.Pointer(&chunk[0]), int64(len(chunk))); err != nil {
			return err
		}
	}
	return nil
}

// Stage makes a weight of the GPU over device memory of buf from byte off, standing for a
// host-held weight whose bytes are data, and queues copies of data's spans into it (op
// offload). A type without a CUDA kernel is computed by the host pool on data itself, as
// Load does.
func (b *Backend) Stage(buf backend.Buffer, off int64, name string, t tensor.Type, shape []int64, data []byte, spans [][2]int64) (backend.Weight, error) {
	if b.closed {
		return nil, errClosed
	}
	u, ok := buf.(*buffer)
	if !ok || u.owner != b {
		return nil, fmt.Errorf("%s: staging of %s into a buffer it did not allocate", b.dev.Name, name)
	}
	if off < 0 || off+int64(len(data)) > u.size {
		return nil, fmt.Errorf("%s: staging of %s (%d bytes) at byte %d of a %d-byte buffer", b.dev.Name, name, len(data), off, u.size)
	}
	if err := backend.CheckSpans(spans, int64(len(data))); err != nil {
		return nil, fmt.Errorf("%s: staging of %s: %w", b.dev.Name, name, err)
	}
	w, err := b.newWeight(name, t, shape, data)
	if err != nil {
		return nil, err
	}
	if w.host != nil {
		return w, nil
	}
	w.ptr = u.ptr + cu.DevicePtr(off)
	w.stagedIn, w.off, w.end = u, off, off+int64(len(data))
	b.traffic.CountStage(int64(len(data)), spans)
	if spans == nil {
		spans = [][2]int64{{0, int64(len(data))}}
	}
	err = b.copying("staging of "+name, func() error {
		if err := b.hold(); err != nil {
			return err
		}
		if err := b.beforeCopyInto(u, w.off, w.end); err != nil {
			return err
		}
		for _, s := range spans {
			if err := b.stageSpan(w.ptr, data, s[0], s[1]); err != nil {
				return err
			}
		}
		return u.copied.Record(b.copyStream)
	})
	return w, err
}

// Op offload's copies run on the copy stream, the operations on the stream; events keep
// each ordered after what it must follow. A copy into a buffer waits, on the copy stream,
// for the operations that read staged weights in the bytes it overwrites (their reads'
// events), and the first one for the stream's work so far (the buffer's zeroing memset);
// an operation on a staged weight waits, on the stream, for the copies into its buffer
// queued before it. Nothing else is ordered: the copy engine moves the next weight while
// the GPU computes with the last, where the runtime stages them in different bytes.

// beforeCopyInto orders the copy stream for a copy into bytes [off, end) of u.
func (b *Backend) beforeCopyInto(u *buffer, off, end int64) error {
	if !u.staged {
		var err error
		if u.copied, err = cu.MakeEvent(cu.DisableTiming); err != nil {
			return err
		}
		u.staged = true
		if err := b.mark.Record(b.stream); err != nil {
			return err
		}
		if err := b.copyStream.Wait(b.mark, 0); err != nil {
			return err
		}
	}
	for i := range u.reads {
		r := &u.reads[i]
		if r.queued && r.off < end && off < r.end {
			if err := b.copyStream.Wait(r.read, 0); err != nil {
				return err
			}
			r.queued = false
		}
	}
	return nil
}

// readStaged queues launch, an operation reading cw, after the copies into cw's buffer
// when Stage made cw, and records the read for later copies into its bytes.
func (b *Backend) readStaged(cw *weight, launch func() error) error {
	u := cw.stagedIn
	if u == nil {
		return launch()
	}
	if err := b.hold(); err != nil {
		return err
	}
	if err := b.stream.Wait(u.copied, 0); err != nil {
		return err
	}
	if err := launch(); err != nil {
		return err
	}
	i := slices.IndexFunc(u.reads, func(r stagedRead) bool { return r.off == cw.off && r.end == cw.end })
	if i < 0 {
		ev, err := cu.MakeEvent(cu.DisableTiming)
		if err != nil {
			return err
		}
		u.reads = append(u.reads, stagedRead{off: cw.off, end: cw.end, read: ev})
		i = len(u.reads) - 1
	}
	u.reads[i].queued = true
	return u.reads[i].read.Record(b.stream)
}

// StagesInto reports whether t has CUDA kernels: a weight of another type is computed by
// the host on the bytes Stage was given.
func (b *Backend) StagesInto(t tensor.Type) bool { return kernels.Supported(t) }

// stageSpan queues the copy of data[from:to] to dst+from on the copy stream through the
// pinned staging buffer's two halves, double-buffered: Go copies the next chunk into one
// half (under mmap.Guard, as upload does) while the GPU's DMA reads the other. A half is
// refilled once the event recorded after its last copy has completed: not the whole copy
// stream, so the host fills it while the GPU still copies the other half.
func (b *Backend) stageSpan(dst cu.DevicePtr, data []byte, from, to int64) error {
	if err := b.staging.reserve(stagingBytes); err != nil {
		return err
	}
	const half = stagingBytes / 2
	for off := from; off < to; off += half {
		if err := b.waitHalf(b.nextHalf); err != nil {
			return err
		}
		chunk := b.staging.mem[int64(b.nextHalf)*half:][:min(half, to-off)]
		if err := mmap.Guard(func() { copy(chunk, data[off:]) }); err != nil {
			return err
		}
		if err := cu.MemcpyHtoDAsync(dst+cu.DevicePtr(off), unsafe.Pointer(&chunk[0]), int64(len(chunk)), b.copyStream); err != nil {
			return err
		}
		if err := b.halfCopied[b.nextHalf].Record(b.copyStream); err != nil {
			return err
		}
		b.stats.StagedBytes += int64(len(chunk))
		b.halfQueued[b.nextHalf] = true
		b.nextHalf ^= 1
	}
	return nil
}

// waitHalf waits until the copies queued from staging half h have run.
func (b *Backend) waitHalf(h int) error {
	if !b.halfQueued[h] {
		return nil
	}
	if err := b.halfCopied[h].Synchronize(); err != nil {
		return err
	}
	b.halfQueued[h] = false
	return nil
}
