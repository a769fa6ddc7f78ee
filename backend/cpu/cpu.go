// Package cpu is the host backend: weights are tensor.Matrix views (of the memory-mapped
// model file, so loading copies nothing) and the operations are the tensor package's
// kernels on a worker pool.
package cpu

import (
	"errors"
	"fmt"
	"strings"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/internal/mmap"
	"github.com/moerun/moerun/tensor"
)

// Options configure a CPU backend.
type Options struct {
	// Device describes the backend to the runtime and to placement; the zero value means
	// backend.CPU(0), the host named "CPU". A second instance with another name (say
	// "CUDA0") stands in for another device in tests.
	Device backend.Device
	// Pool runs the operations. It is shared, not owned: the runtime uses the same pool
	// for the host work between weight operations. Nil starts a pool of Threads workers
	// (tensor.DefaultThreads when 0), which Close stops.
	Pool    *tensor.Pool
	Threads int
	// Copy makes Load copy every weight into a buffer of the backend instead of keeping a
	// view of the caller's bytes: what a device with its own memory does.
	Copy bool
}

// Backend is the CPU backend. It is not safe for concurrent use (tensor.Pool serializes the
// operations of one pool anyway).
type Backend struct {
	dev      backend.Device
	pool     *tensor.Pool
	ownsPool bool
	copy     bool
	buffers  int64 // bytes of copied weights
	closed   bool
	fused    []*tensor.Matrix // the matrices of a MatMuls or MulMatIDs call
}

// New makes a CPU backend.
func New(opts Options) *Backend {
	b := &Backend{dev: opts.Device, pool: opts.Pool, copy: opts.Copy}
	if b.dev.Name == "" {
		b.dev = backend.CPU(0)
	}
	if b.pool == nil {
		b.pool, b.ownsPool = tensor.NewPool(opts.Threads), true
	}
	return b
}

// Device describes the backend.
func (b *Backend) Device() backend.Device { return b.dev }

// Pool is the worker pool the backend computes on.
func (b *Backend) Pool() *tensor.Pool { return b.pool }

// CopiedBytes is how much memory the backend's own weight buffers take (0 without Copy).
func (b *Backend) CopiedBytes() int64 { return b.buffers }

// weight is a CPU-resident tensor.
type weight struct {
	name  string
	m     *tensor.Matrix
	owner *Backend
}

func (w *weight) Name() string      { return w.name }
func (w *weight) Type() tensor.Type { return w.m.Type() }
func (w *weight) Cols() int         { return w.m.Cols() }
func (w *weight) Rows() int         { return w.m.Rows() }
func (w *weight) Experts() int      { return w.m.Experts() }

var errClosed = errors.New("cpu backend: used after Close")

// Load wraps data as a matrix, copying it first if the backend was made with Copy. data may
// be mapped memory: a fault while copying it is returned as an error.
func (b *Backend) Load(name string, t tensor.Type, shape []int64, data []byte) (backend.Weight, error) {
	if b.closed {
		return nil, errClosed
	}
	if b.copy {
		own := make([]byte, len(data))
		if err := mmap.Guard(func() { copy(own, data) }); err != nil {
			return nil, fmt.Errorf("tensor %s: %w", name, err)
		}
		data = own
	}
	m, err := tensor.NewMatrix(t, shape, data)
	if err != nil {
		return nil, fmt.Errorf("tensor %s: %w", name, err)
	}
	if b.copy {
		b.buffers += int64(len(data))
	}
	return &weight{name: name, m: m, owner: b}, nil
}

// matrix returns the matrix of a weight this backend loaded.
func (b *Backend) matrix(w backend.Weight) (*tensor.Matrix, error) {
	if b.closed {
		return nil, errClosed
	}
	cw, ok := w.(*weight)
	if !ok || cw.owner != b {
		return nil, fmt.Errorf("tensor %s is not held by backend %s", w.Name(), b.dev.Name)
	}
	return cw.m, nil
}

// MatMul is tensor.Pool.MatMul.
func (b *Backend) MatMul(dst []float32, w backend.Weight, x []float32) error {
	m, err := b.matrix(w)
	if err != nil {
		return err
	}
	if err := b.pool.MatMul(dst, m, x); err != nil {
		return fmt.Errorf("tensor %s: %w", w.Name(), err)
	}
	return nil
}

// MatMuls is tensor.Pool.MatMuls (backend.Fuser).
func (b *Backend) MatMuls(dsts [][]float32, ws []backend.Weight, x []float32) error {
	ms, err := b.matrices(ws)
	if err != nil {
		return err
	}
	if err := b.pool.MatMuls(dsts, ms, x); err != nil {
		return fmt.Errorf("tensors %s: %w", names(ws), err)
	}
	return nil
}

// MulMatIDs is tensor.Pool.MulMatIDs (backend.Fuser).
func (b *Backend) MulMatIDs(dsts [][]float32, ws []backend.Weight, x []float32, ids []int32, k int) error {
	ms, err := b.matrices(ws)
	if err != nil {
		return err
	}
	if err := b.pool.MulMatIDs(dsts, ms, x, ids, k); err != nil {
		return fmt.Errorf("tensors %s: %w", names(ws), err)
	}
	return nil
}

// matrices returns the matrices of weights this backend loaded, in a slice it reuses.
func (b *Backend) matrices(ws []backend.Weight) ([]*tensor.Matrix, error) {
	b.fused = b.fused[:0]
	for _, w := range ws {
		m, err := b.matrix(w)
		if err != nil {
			return nil, err
		}
		b.fused = append(b.fused, m)
	}
	return b.fused, nil
}

func names(ws []backend.Weight) string {
	s := make([]string, len(ws))
	for i, w := range ws {
		s[i] = w.Name()
	}
	return strings.Join(s, ", ")
}

// MulMatID is tensor.Pool.MulMatID.
func (b *Backend) MulMatID(dst []float32, w backend.Weight, x []float32, ids []int32, k int) error {
	m, err := b.matrix(w)
	if err != nil {
		return err
	}
	if err := b.pool.MulMatID(dst, m, x, ids, k); err != nil {
		return fmt.Errorf("tensor %s: %w", w.Name(), err)
	}
	return nil
}

// MatMulStack is tensor.Pool.MatMulStack (backend.Stacker).
func (b *Backend) MatMulStack(dst []float32, w backend.Weight, x []float32, ids []int32, k int) error {
	m, err := b.matrix(w)
	if err != nil {
		return err
	}
	if err := b.pool.MatMulStack(dst, m, x, ids, k); err != nil {
		return fmt.Errorf("tensor %s: %w", w.Name(), err)
	}
	return nil
}

// GetRows is tensor.GetRows.
func (b *Backend) GetRows(dst []float32, w backend.Weight, ids []int32) error {
	m, err := b.matrix(w)
	if err != nil {
		return err
	}
	if err := tensor.GetRows(dst, m, ids); err != nil {
		return fmt.Errorf("tensor %s: %w", w.Name(), err)
	}
	return nil
}

// Close stops the pool if the backend started it and drops the copied weights.
func (b *Backend) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	if b.ownsPool {
		b.pool.Close()
	}
	b.buffers = 0
	return nil
}

var _ backend.Backend = (*Backend)(nil)
