// Package cpu is the host backend: weights are tensor.Matrix views (of the memory-mapped
// model file, so loading copies nothing) or, where the load mode says so, copies in the
// backend's store (store.go: read, direct I/O, locked in RAM); buffers are host memory and
// the operations are the tensor package's kernels on a worker pool. The same code, with memory the host may not
// address directly, is the simulated GPU (backend/sim).
package cpu

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unsafe"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/internal/mmap"
	"github.com/moerun/moerun/tensor"
)

// Options configure a CPU backend.
type Options struct {
	// Device describes the backend to the runtime and to placement; the zero value means
	// backend.CPU(0), the host named "CPU". Another name (say "CUDA0") makes the backend
	// stand in for another device.
	Device backend.Device
	// Pool runs the operations. It is shared, not owned: every device that computes on
	// the host uses the same pool. Nil starts a pool of Threads workers
	// (tensor.DefaultThreads when 0), which Close stops.
	Pool    *tensor.Pool
	Threads int
	// Copy makes Load copy every weight into a buffer of the backend instead of keeping a
	// view of the caller's bytes: what a device with its own memory does.
	Copy bool
	// Private makes the backend's buffers memory the host does not address directly
	// (Buffer.Host is nil), so that every crossing to or from it must be a copy, as with a
	// GPU's memory.
	Private bool
	// Refuse lists operations the backend declines, as a device without kernels for them:
	// Supports answers false and running one is an error. It lets tests check that the
	// runtime honours Supports.
	Refuse []backend.Op
}

// Backend is the CPU backend. It is not safe for concurrent use (tensor.Pool serializes the
// operations of one pool anyway).
type Backend struct {
	dev      backend.Device
	pool     *tensor.Pool
	ownsPool bool
	copy     bool
	private  bool
	refuse   [backend.NumOps]bool
	buffers  int64 // bytes of copied weights
	closed   bool
	ops      int

	// Reused between operations so that a decode step allocates nothing.
	fused    []*tensor.Matrix // the matrices of a MatMuls or MulMatIDs call
	fusedOut [][]float32
	stackIDs []int32 // 0, 1, …, experts-1 repeated: MatMulStack's matrix per row
	router   *tensor.Router
	angles   []ropeAngles
	nextRoPE int
}

// ropeAngles are the cosines and sines of one RoPE at the positions pos: computed by the
// first layer that asks, reused by the others (they cost more than a decode step's
// rotation).
type ropeAngles struct {
	rope  tensor.RoPE
	pos   []int32
	table []float32
}

// ropeTables is how many sets of angles the backend keeps: every layer of a model shares
// one, or two where sliding-window layers have their own base; MLA adds offsets, which do
// not change the angles.
const ropeTables = 4

// New makes a CPU backend.
func New(opts Options) *Backend {
	b := &Backend{dev: opts.Device, pool: opts.Pool, copy: opts.Copy, private: opts.Private}
	for _, op := range opts.Refuse {
		if op >= 0 && op < backend.NumOps {
			b.refuse[op] = true
		}
	}
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

// Operations is the number of operations run so far.
func (b *Backend) Operations() int { return b.ops }

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

// buffer is host memory of a backend.
type buffer struct {
	owner *Backend
	data  []byte
}

func (u *buffer) Device() string { return u.owner.dev.Name }
func (u *buffer) Size() int64    { return int64(len(u.data)) }
func (u *buffer) Host() []byte {
	if u.owner.private {
		return nil
	}
	return u.data
}

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

// Stage views bytes of a buffer of the backend as a weight (op offload's staging memory on
// the simulated GPU) and copies spans of data into them. The Matrix is made for each
// staging: it keeps nothing derived from the bytes, which the next staging replaces. data
// may be mapped memory: a fault while copying it is returned as an error.
func (b *Backend) Stage(buf backend.Buffer, off int64, name string, t tensor.Type, shape []int64, data []byte, spans [][2]int64) (backend.Weight, error) {
	u, err := b.region(buf, off, int64(len(data)), "staging of "+name)
	if err != nil {
		return nil, err
	}
	if err := backend.CheckSpans(spans, int64(len(data))); err != nil {
		return nil, fmt.Errorf("%s: staging of %s: %w", b.dev.Name, name, err)
	}
	dst := u.data[off : off+int64(len(data)) : off+int64(len(data))]
	m, err := tensor.NewMatrix(t, shape, dst)
	if err != nil {
		return nil, fmt.Errorf("tensor %s: %w", name, err)
	}
	err = mmap.Guard(func() {
		if spans == nil {
			copy(dst, data)
		}
		for _, s := range spans {
			copy(dst[s[0]:s[1]], data[s[0]:s[1]])
		}
	})
	if err != nil {
		return nil, fmt.Errorf("tensor %s: %w", name, err)
	}
	return &weight{name: name, m: m, owner: b}, nil
}

// StagesInto is true: Stage's weights are views of the buffer, whatever the type.
func (b *Backend) StagesInto(tensor.Type) bool { return true }

// region checks that n bytes from off lie in buf, a buffer of the backend.
func (b *Backend) region(buf backend.Buffer, off, n int64, what string) (*buffer, error) {
	if b.closed {
		return nil, errClosed
	}
	u, ok := buf.(*buffer)
	if !ok || u.owner != b {
		return nil, fmt.Errorf("%s: %s into a buffer it did not allocate", b.dev.Name, what)
	}
	if off < 0 || n < 0 || off+n > int64(len(u.data)) {
		return nil, fmt.Errorf("%s: %s of %d bytes at byte %d of a %d-byte buffer", b.dev.Name, what, n, off, len(u.data))
	}
	return u, nil
}

// Alloc allocates zeroed host memory, aligned for any element type.
func (b *Backend) Alloc(size int64) (backend.Buffer, error) {
	if b.closed {
		return nil, errClosed
	}
	if size < 0 {
		return nil, fmt.Errorf("%s: a buffer of %d bytes", b.dev.Name, size)
	}
	// float64 storage keeps every element type aligned, whatever the allocator does for
	// byte slices.
	words := make([]float64, (size+7)/8)
	var data []byte
	if len(words) > 0 {
		data = unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), size)
	}
	return &buffer{owner: b, data: data}, nil
}

// Free releases a buffer: the memory goes back to the Go heap once nothing refers to it.
func (b *Backend) Free(buf backend.Buffer) error {
	u, ok := buf.(*buffer)
	if !ok || u.owner != b {
		return fmt.Errorf("%s: free of a buffer it did not allocate", b.dev.Name)
	}
	u.data = nil
	return nil
}

// Set copies src into dst.
func (b *Backend) Set(dst backend.Tensor, src []byte) error {
	d, err := b.whole(dst, "set")
	if err != nil {
		return err
	}
	if len(src) != len(d) {
		return fmt.Errorf("%s: set of %d bytes into %s (%d bytes)", b.dev.Name, len(src), dst, len(d))
	}
	copy(d, src)
	return nil
}

// Get copies src into dst. The CPU computes synchronously: dst is ready on return.
func (b *Backend) Get(dst []byte, src backend.Tensor) error {
	s, err := b.whole(src, "get")
	if err != nil {
		return err
	}
	if len(dst) != len(s) {
		return fmt.Errorf("%s: get of %s (%d bytes) into %d bytes", b.dev.Name, src, len(s), len(dst))
	}
	copy(dst, s)
	return nil
}

// Synchronize has nothing to wait for: every operation has finished when it returns.
func (b *Backend) Synchronize() error {
	if b.closed {
		return errClosed
	}
	return nil
}

// Supports: every operation on every type the tensor package computes, but those Refuse
// lists.
func (b *Backend) Supports(op backend.Op, t tensor.Type) bool {
	if op < 0 || op >= backend.NumOps || b.refuse[op] {
		return false
	}
	switch op {
	case backend.OpGetRows:
		_, err := tensor.TraitsOf(t)
		return err == nil
	case backend.OpMatMul, backend.OpMulMatID, backend.OpMatMulStack:
		// Activation-only formats (Q8_1, Q8_K) have no dot product of their own.
		tr, err := tensor.TraitsOf(t)
		return err == nil && tr.VecDot != nil
	case backend.OpSetRows, backend.OpAttention, backend.OpIndexerScores:
		return t == tensor.F32 || t == tensor.F16 || t == tensor.Q8_0
	case backend.OpCopy:
		// Rows are copied as bytes, but the runtime only copies activations.
		return t == tensor.F32
	case backend.OpMapIDs:
		return t == tensor.I32
	}
	return t == tensor.F32
}

// allow fails an operation the backend refuses (Options.Refuse).
func (b *Backend) allow(op backend.Op) error {
	if b.refuse[op] {
		return fmt.Errorf("%s does not run %s", b.dev.Name, op)
	}
	return nil
}

// whole is the bytes of a contiguous tensor of this backend.
func (b *Backend) whole(x backend.Tensor, op string) ([]byte, error) {
	if err := b.own(x, op); err != nil {
		return nil, err
	}
	if !x.Contiguous() {
		return nil, fmt.Errorf("%s: %s of a strided %s", b.dev.Name, op, x)
	}
	u := x.Buf.(*buffer)
	return u.data[x.Off : x.Off+x.Bytes()], nil
}

// own checks that x is a tensor of this backend that lies within its buffer.
func (b *Backend) own(x backend.Tensor, op string) error {
	if b.closed {
		return errClosed
	}
	u, ok := x.Buf.(*buffer)
	if !ok || u.owner != b {
		where := "no device"
		if x.Buf != nil {
			where = x.Buf.Device()
		}
		return fmt.Errorf("%s: %s of a tensor on %s: copy it to %s first", b.dev.Name, op, where, b.dev.Name)
	}
	if x.Off < 0 || x.Off+x.Bytes() > int64(len(u.data)) || x.Rows > 1 && x.Stride < x.RowBytes() {
		return fmt.Errorf("%s: %s of %s outside its buffer", b.dev.Name, op, x)
	}
	return nil
}

// rows is an F32 tensor's elements as one slice from its first row's start, and the
// distance between rows in elements: a contiguous tensor's rows are back to back.
func (b *Backend) rows(x backend.Tensor, op string) ([]float32, int, error) {
	if err := b.own(x, op); err != nil {
		return nil, 0, err
	}
	if x.Type != tensor.F32 {
		return nil, 0, fmt.Errorf("%s: %s of a %s tensor, want f32", b.dev.Name, op, x.Type)
	}
	if x.Rows == 0 || x.Cols == 0 {
		return nil, x.Cols, nil
	}
	u := x.Buf.(*buffer)
	n := x.Bytes() / 4
	return unsafe.Slice((*float32)(unsafe.Pointer(&u.data[x.Off])), n), int(x.Stride / 4), nil
}

// f32 is a contiguous F32 tensor's elements.
func (b *Backend) f32(x backend.Tensor, op string) ([]float32, error) {
	s, _, err := b.rows(x, op)
	if err == nil && !x.Contiguous() {
		err = fmt.Errorf("%s: %s of a strided %s", b.dev.Name, op, x)
	}
	return s, err
}

// i32 is a contiguous I32 tensor's elements.
func (b *Backend) i32(x backend.Tensor, op string) ([]int32, error) {
	if err := b.own(x, op); err != nil {
		return nil, err
	}
	if x.Type != tensor.I32 || !x.Contiguous() {
		return nil, fmt.Errorf("%s: %s of %s, want contiguous i32", b.dev.Name, op, x)
	}
	if x.Elements() == 0 {
		return nil, nil
	}
	u := x.Buf.(*buffer)
	return unsafe.Slice((*int32)(unsafe.Pointer(&u.data[x.Off])), x.Elements()), nil
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

// outputs returns the elements of dsts, in a slice it reuses.
func (b *Backend) outputs(dsts []backend.Tensor, op string) ([][]float32, error) {
	b.fusedOut = b.fusedOut[:0]
	for _, d := range dsts {
		s, err := b.f32(d, op)
		if err != nil {
			return nil, err
		}
		b.fusedOut = append(b.fusedOut, s)
	}
	return b.fusedOut, nil
}

func names(ws []backend.Weight) string {
	s := make([]string, len(ws))
	for i, w := range ws {
		s[i] = w.Name()
	}
	return strings.Join(s, ", ")
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

// stack returns ids 0, 1, …, experts-1 repeated over rows rows.
func (b *Backend) stack(rows, experts int) []int32 {
	b.stackIDs = slices.Grow(b.stackIDs[:0], rows)[:rows]
	for i := range b.stackIDs {
		b.stackIDs[i] = int32(i % experts)
	}
	return b.stackIDs
}

var _ backend.Backend = (*Backend)(nil)
