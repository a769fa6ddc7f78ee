//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/tensor"
	"gorgonia.org/cu"
)

// The backend's buffers: device memory, which the host reaches only through copies queued
// on the backend's stream.

// buffer is an allocation of device memory.
type buffer struct {
	owner *Backend
	ptr   cu.DevicePtr // 0 for an empty buffer
	size  int64
	// For weights Stage copies in on the copy stream: the event recorded after the latest
	// of those copies (valid once staged is true), which the weights' readers wait for;
	// and the ranges the stream has read staged weights from, each with the event recorded
	// after its latest reader, which a copy into the range waits for.
	staged bool
	copied cu.Event
	reads  []stagedRead
}

// stagedRead is a range of a buffer the stream reads a staged weight from, and the event
// after its latest reader; queued until a copy has waited for it.
type stagedRead struct {
	off, end int64
	read     cu.Event
	queued   bool
}

func (u *buffer) Device() string { return u.owner.dev.Name }
func (u *buffer) Size() int64    { return u.size }
func (u *buffer) Host() []byte   { return nil }

// release frees the memory and the buffer's events; the context must be current.
func (u *buffer) release() error {
	var errs []error
	if u.staged {
		errs = append(errs, cu.DestroyEvent(&u.copied))
		u.staged = false
	}
	for i := range u.reads {
		errs = append(errs, cu.DestroyEvent(&u.reads[i].read))
	}
	u.reads = nil
	if u.ptr != 0 {
		errs = append(errs, cu.MemFree(u.ptr))
		u.ptr = 0
	}
	return errors.Join(errs...)
}

// Alloc allocates size bytes of device memory, zeroed by a memset queued on the stream.
func (b *Backend) Alloc(size int64) (backend.Buffer, error) {
	if b.closed {
		return nil, errClosed
	}
	if size < 0 {
		return nil, fmt.Errorf("%s: a buffer of %d bytes", b.dev.Name, size)
	}
	u := &buffer{owner: b, size: size}
	if size == 0 {
		return u, nil
	}
	err := b.do(func() error {
		var err error
		if u.ptr, err = cu.MemAlloc(size); err != nil {
			free, _, _ := cu.MemInfo()
			return fmt.Errorf("allocating %d KiB (%d MiB free): %w", size>>10, free>>20, err)
		}
		return b.memset8(u.ptr, 0, size)
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", b.dev.Name, errors.Join(err, b.do(u.release)))
	}
	b.buffers = append(b.buffers, u)
	return u, nil
}

// Free waits for the queued work (which may still use the buffer) and releases it.
func (b *Backend) Free(buf backend.Buffer) error {
	if b.closed {
		return errClosed
	}
	u, ok := buf.(*buffer)
	i := slices.Index(b.buffers, u)
	if !ok || i < 0 {
		return fmt.Errorf("%s: free of a buffer it did not allocate, or freed already", b.dev.Name)
	}
	b.buffers = slices.Delete(b.buffers, i, i+1)
	return b.do(func() error {
		return errors.Join(b.settle(), b.copyStream.Synchronize(), u.release())
	})
}

// address is the device address of x's first row, after checking that x is a tensor of
// this backend that lies inside its buffer, its rows aligned to its elements.
func (b *Backend) address(x backend.Tensor, op string) (cu.DevicePtr, error) {
	if b.closed {
		return 0, errClosed
	}
	u, ok := x.Buf.(*buffer)
	if !ok || u.owner != b {
		where := "no device"
		if x.Buf != nil {
			where = x.Buf.Device()
		}
		return 0, fmt.Errorf("%s: %s of a tensor on %s: copy it to %s first", b.dev.Name, op, where, b.dev.Name)
	}
	if x.Off < 0 || x.Rows < 0 || x.Cols < 0 || x.Off+x.Bytes() > u.size || x.Rows > 1 && x.Stride < x.RowBytes() {
		return 0, fmt.Errorf("%s: %s of %s outside its buffer", b.dev.Name, op, x)
	}
	if a := alignment(x.Type); x.Off%a != 0 || x.Rows > 1 && x.Stride%a != 0 {
		return 0, fmt.Errorf("%s: %s of %s at byte %d (rows %d bytes apart), not aligned to its elements", b.dev.Name, op, x, x.Off, x.Stride)
	}
	return u.ptr + cu.DevicePtr(x.Off), nil
}

// alignment is how aligned t's values or blocks are in memory where the rows are (the
// kernels' loads rely on it): the largest power of two up to 16 dividing its block size.
func alignment(t tensor.Type) int64 {
	n := t.BlockBytes()
	a := int64(1)
	for a < 16 && n%(2*a) == 0 {
		a *= 2
	}
	return a
}

// contiguous is the device address of x, a contiguous tensor of type t of this backend.
func (b *Backend) contiguous(x backend.Tensor, t tensor.Type, op string) (cu.DevicePtr, error) {
	p, err := b.address(x, op)
	if err != nil {
		return 0, err
	}
	if x.Type != t || !x.Contiguous() {
		return 0, fmt.Errorf("%s: %s of %s, want contiguous %s", b.dev.Name, op, x, t)
	}
	return p, nil
}

// Set queues a copy of src into dst, a contiguous tensor of this backend. src is Go
// memory, which the driver copies into its own staging before the call returns, so the
// caller may reuse it at once.
func (b *Backend) Set(dst backend.Tensor, src []byte) error {
	p, err := b.whole(dst, "set")
	if err != nil {
		return err
	}
	if int64(len(src)) != dst.Bytes() {
		return fmt.Errorf("%s: set of %d bytes into %s (%d bytes)", b.dev.Name, len(src), dst, dst.Bytes())
	}
	b.stats.CopyInBytes += int64(len(src))
	b.traffic.CopiesIn++
	b.traffic.BytesIn += int64(len(src))
	return b.copying("set", func() error { return b.copyIn(p, src) })
}

// Get queues a copy of src, a contiguous tensor of this backend, into dst; dst holds it
// after Synchronize.
func (b *Backend) Get(dst []byte, src backend.Tensor) error {
	p, err := b.whole(src, "get")
	if err != nil {
		return err
	}
	if int64(len(dst)) != src.Bytes() {
		return fmt.Errorf("%s: get of %s (%d bytes) into %d bytes", b.dev.Name, src, src.Bytes(), len(dst))
	}
	b.stats.CopyOutBytes += int64(len(dst))
	b.traffic.CopiesOut++
	b.traffic.BytesOut += int64(len(dst))
	return b.copying("get", func() error { return b.copyOut(dst, p) })
}

// whole is the device address of a contiguous tensor of this backend, of any type.
func (b *Backend) whole(x backend.Tensor, op string) (cu.DevicePtr, error) {
	p, err := b.address(x, op)
	if err == nil && !x.Contiguous() {
		err = fmt.Errorf("%s: %s of a strided %s", b.dev.Name, op, x)
	}
	return p, err
}

// copying runs a copy with the context current, timing it and naming the device in its
// error.
func (b *Backend) copying(what string, copy func() error) error {
	start := time.Now()
	err := b.do(copy)
	b.stats.Time += time.Since(start)
	if err != nil {
		return fmt.Errorf("%s: %s: %w", b.dev.Name, what, err)
	}
	return nil
}

// Synchronize waits for every copy and operation queued so far, op offload's copies too.
// CUDA graphs held since op offload's last copies (graph.go) resume.
func (b *Backend) Synchronize() error {
	if b.closed {
		return errClosed
	}
	b.traffic.Syncs++
	err := b.copying("synchronize", func() error { return errors.Join(b.settle(), b.copyStream.Synchronize()) })
	b.graph.held = false
	return err
}
