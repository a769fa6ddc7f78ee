//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"time"
	"unsafe"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/backend/cpu"
	"github.com/moerun/moerun/backend/cuda/kernels"
	"github.com/moerun/moerun/tensor"
	"gorgonia.org/cu"
)

// Options configure a CUDA backend.
type Options struct {
	// Host is the host's worker pool, shared with the CPU backend; it is required. The
	// backend's buffers are host memory and it runs every operation without a weight, and
	// the weight operations on types with no CUDA kernel (whose bytes stay in host memory,
	// as llama.cpp's scheduler runs an op its GPU backend does not support on the CPU), on
	// this pool with the CPU's kernels.
	Host *tensor.Pool
}

// Backend is one CUDA device. It is not safe for concurrent use.
//
// For now only the weight operations run on the GPU: the embedded CPU backend, made with
// this device's description, holds the backend's buffers in host memory (Buffer.Host is
// not nil, so crossings to and from the host are plain copies) and runs the other
// operations with the CPU's kernels; each weight operation copies its input in, launches a
// kernel and copies the result back into the host tensor. Weights of types with no CUDA
// kernel are the CPU backend's, and their operations run there too.
type Backend struct {
	*cpu.Backend

	dev     backend.Device
	ordinal cu.Device
	ctx     cu.CUContext
	mod     cu.Module
	// Each type's kernels: the PTX entries mmv_<type> and getrows_<type>.
	mmv, getrows map[tensor.Type]cu.Function

	// Device buffers of one operation's activations, outputs and expert routing, grown
	// as needed and reused.
	x, y, route deviceBuffer
	routing     routing
	staging     pinned    // host memory weights are uploaded through
	roundedX    []float32 // activations rounded for F16 and BF16 weights
	stackIDs    []int32   // MatMulStack's matrix for each row of x

	weights  []cu.DevicePtr
	resident int64 // bytes of weights in device memory
	stats    Stats
	closed   bool

	args [16]uint64 // kernel parameters: cu copies 8 bytes from each
	argp [16]unsafe.Pointer
}

// Stats count what a backend did since it was made.
type Stats struct {
	Ops          int           // matmuls, expert matmuls and row lookups run on the GPU
	HostOps      int           // operations on weights the GPU has no kernel for, run on the CPU
	Time         time.Duration // wall time of the GPU operations, copies and waits included
	CopyInBytes  int64         // activation and routing bytes copied to the device
	CopyOutBytes int64         // result bytes copied back
}

// New opens GPU ordinal (CUDA<ordinal>): retains its primary context and loads the kernels,
// which the driver compiles from PTX for this GPU (once; it caches the result).
func New(ordinal int, opts Options) (*Backend, error) {
	if opts.Host == nil {
		return nil, fmt.Errorf("CUDA%d: cuda.Options.Host is nil: the backend needs the host's pool, which runs its operations without a weight", ordinal)
	}
	n, err := Count()
	if err != nil {
		return nil, err
	}
	if ordinal < 0 || ordinal >= n {
		return nil, fmt.Errorf("CUDA%d: no such device (the driver sees %d)", ordinal, n)
	}
	b := &Backend{ordinal: cu.Device(ordinal), mmv: map[tensor.Type]cu.Function{},
		getrows: map[tensor.Type]cu.Function{}}
	// The context first: describe's own retain then finds it alive instead of creating
	// and destroying one (a context costs tens to hundreds of milliseconds).
	if b.ctx, err = b.ordinal.RetainPrimaryCtx(); err != nil {
		return nil, fmt.Errorf("CUDA%d: primary context: %w", ordinal, err)
	}
	if b.dev, err = describe(ordinal); err != nil {
		b.ordinal.ReleasePrimaryCtx()
		return nil, err
	}
	desc := b.dev
	err = b.do(func() error {
		if b.mod, err = cu.LoadData(kernels.PTX); err != nil {
			return fmt.Errorf("loading the kernels: %w", err)
		}
		for _, t := range kernels.Types() {
			if b.mmv[t], err = b.mod.Function(kernels.MatVec(t)); err != nil {
				return fmt.Errorf("kernel %s: %w", kernels.MatVec(t), err)
			}
			if b.getrows[t], err = b.mod.Function(kernels.GetRows(t)); err != nil {
				return fmt.Errorf("kernel %s: %w", kernels.GetRows(t), err)
			}
		}
		return nil
	})
	if err != nil {
		b.ordinal.ReleasePrimaryCtx()
		return nil, fmt.Errorf("%s: %w", desc.Name, err)
	}
	for i := range b.argp {
		b.argp[i] = unsafe.Pointer(&b.args[i])
	}
	b.Backend = cpu.New(cpu.Options{Device: desc, Pool: opts.Host})
	return b, nil
}

// Device describes the GPU.
func (b *Backend) Device() backend.Device { return b.dev }

// Resident is how many bytes of weights the backend holds in device memory.
func (b *Backend) Resident() int64 { return b.resident }

// Stats returns what the backend did so far.
func (b *Backend) Stats() Stats { return b.stats }

// do runs fn with the device's context current on this thread.
func (b *Backend) do(fn func() error) error { return onContext(b.ctx, fn) }

// weight is a tensor on the GPU, or on the host when its type has no kernel.
type weight struct {
	name        string
	m           *tensor.Matrix // shape and type; the host's copy computes host-run weights
	ptr         cu.DevicePtr
	rowBytes    int64
	expertBytes int64
	host        backend.Weight // the CPU backend's, when the CPU computes this weight
	owner       *Backend
	// round is how ggml rounds the activations before a dot product with this weight:
	// to F16 or BF16 for weights of those types (vec_dot_f16, and the cuBLAS path of
	// ggml-cuda), nil for the rest, whose kernels take float32 activations as they are.
	round func(float32) float32
}

func (w *weight) Name() string      { return w.name }
func (w *weight) Type() tensor.Type { return w.m.Type() }
func (w *weight) Cols() int         { return w.m.Cols() }
func (w *weight) Rows() int         { return w.m.Rows() }
func (w *weight) Experts() int      { return w.m.Experts() }

var errClosed = errors.New("cuda backend: used after Close")

// Load copies a weight into device memory. A type without a CUDA kernel stays in host
// memory and is computed by the host pool.
func (b *Backend) Load(name string, t tensor.Type, shape []int64, data []byte) (backend.Weight, error) {
	if b.closed {
		return nil, errClosed
	}
	m, err := tensor.NewMatrix(t, shape, data)
	if err != nil {
		return nil, fmt.Errorf("tensor %s: %w", name, err)
	}
	w := &weight{name: name, m: m, owner: b}
	if !kernels.Supported(t) {
		if w.host, err = b.Backend.Load(name, t, shape, data); err != nil {
			return nil, err
		}
		return w, nil
	}
	w.round = activationRounding(t)
	if w.rowBytes, err = t.RowBytes(int64(m.Cols())); err != nil {
		return nil, fmt.Errorf("tensor %s: %w", name, err)
	}
	w.expertBytes = w.rowBytes * int64(m.Rows())
	size := w.expertBytes * int64(m.Experts())
	err = b.do(func() error {
		free, _, _ := cu.MemInfo()
		if w.ptr, err = cu.MemAlloc(size); err != nil {
			return fmt.Errorf("allocating %d MiB (%d MiB free): %w", size>>20, free>>20, err)
		}
		b.weights = append(b.weights, w.ptr)
		return b.upload(w.ptr, data[:size])
	})
	if err != nil {
		return nil, fmt.Errorf("%s: tensor %s: %w", b.dev.Name, name, err)
	}
	b.resident += size
	return w, nil
}

// weightOf returns the weight behind w if this backend loaded it.
func (b *Backend) weightOf(w backend.Weight) (*weight, error) {
	if b.closed {
		return nil, errClosed
	}
	cw, ok := w.(*weight)
	if !ok || cw.owner != b {
		return nil, fmt.Errorf("tensor %s is not held by backend %s", w.Name(), b.dev.Name)
	}
	return cw, nil
}

// matMul is ggml_mul_mat on the GPU: x is copied in, each CUDA block computes
// kernels.MatVecBlockY rows for up to kernels.GroupSize tokens, and the outputs are copied
// back. cw is a GPU-resident weight.
func (b *Backend) matMul(dst []float32, cw *weight, x []float32) error {
	tokens, err := cw.m.CheckMatMul(len(dst), len(x))
	if err != nil {
		return fmt.Errorf("tensor %s: %w", cw.name, err)
	}
	if tokens == 0 {
		return nil // a launch needs a grid of at least one block
	}
	x = b.rounded(cw, x)
	return b.run(cw, func() error {
		if err := copyIn(b, &b.x, x); err != nil {
			return err
		}
		if err := b.y.reserve(int64(len(dst)) * 4); err != nil {
			return err
		}
		err := b.launch(b.mmv[cw.m.Type()], ceilDiv(cw.m.Rows(), kernels.MatVecBlockY), min(ceilDiv(tokens, kernels.GroupSize), kernels.MaxGridY), kernels.MatVecBlockX, kernels.MatVecBlockY,
			uint64(cw.ptr), uint64(b.x.ptr), uint64(b.y.ptr), 0, 0, 0,
			uint64(cw.m.Cols()), uint64(cw.m.Rows()), uint64(tokens), 1, 1, uint64(cw.rowBytes), uint64(cw.expertBytes))
		if err != nil {
			return err
		}
		return b.copyOut(dst, &b.y)
	})
}

// mulMatID is ggml_mul_mat_id on the GPU. The (token, slot) pairs are grouped by expert on
// the host (a counting sort) into groups of at most kernels.GroupSize that share an expert;
// each group is one CUDA block column, so an expert's weights are read once per group of
// pairs routed to it. Unused slots (id -1) get zero outputs. cw is a GPU-resident weight.
func (b *Backend) mulMatID(dst []float32, cw *weight, x []float32, ids []int32, k int) error {
	shared, err := cw.m.CheckMulMatID(len(dst), len(x), ids, k)
	if err != nil {
		return fmt.Errorf("tensor %s: %w", cw.name, err)
	}
	x = b.rounded(cw, x)
	r := &b.routing
	r.group(ids, cw.m.Experts())
	xPerSlot := uint64(1)
	if shared {
		xPerSlot = 0
	}
	err = b.run(cw, func() error {
		if len(r.groupExpert) == 0 { // every slot unused
			return nil
		}
		if err := copyIn(b, &b.x, x); err != nil {
			return err
		}
		if err := copyIn(b, &b.route, r.packed); err != nil {
			return err
		}
		if err := b.y.reserve(int64(len(dst)) * 4); err != nil {
			return err
		}
		sel, gstart, gexpert := r.offsets(b.route.ptr)
		err := b.launch(b.mmv[cw.m.Type()], ceilDiv(cw.m.Rows(), kernels.MatVecBlockY), min(len(r.groupExpert), kernels.MaxGridY), kernels.MatVecBlockX, kernels.MatVecBlockY,
			uint64(cw.ptr), uint64(b.x.ptr), uint64(b.y.ptr), sel, gstart, gexpert,
			uint64(cw.m.Cols()), uint64(cw.m.Rows()), uint64(len(r.groupExpert)), uint64(k), xPerSlot,
			uint64(cw.rowBytes), uint64(cw.expertBytes))
		if err != nil {
			return err
		}
		return b.copyOut(dst, &b.y)
	})
	if err != nil {
		return err
	}
	rows := cw.m.Rows()
	for i, e := range ids {
		if e < 0 {
			clear(dst[i*rows : (i+1)*rows])
		}
	}
	return nil
}

// getRows decodes rows of a weight on the GPU. cw is a GPU-resident weight.
func (b *Backend) getRows(dst []float32, cw *weight, ids []int32) error {
	if err := cw.m.CheckGetRows(len(dst), ids); err != nil {
		return fmt.Errorf("tensor %s: %w", cw.name, err)
	}
	if len(ids) == 0 {
		return nil
	}
	return b.run(cw, func() error {
		if err := copyIn(b, &b.route, ids); err != nil {
			return err
		}
		if err := b.y.reserve(int64(len(dst)) * 4); err != nil {
			return err
		}
		err := b.launch(b.getrows[cw.m.Type()], min(len(ids), 1<<31-1), 1, kernels.GetRowsBlockX, 1,
			uint64(cw.ptr), uint64(b.route.ptr), uint64(b.y.ptr), uint64(cw.m.Cols()), uint64(len(ids)), uint64(cw.rowBytes))
		if err != nil {
			return err
		}
		return b.copyOut(dst, &b.y)
	})
}

// activationRounding is ggml's activation format for a weight type, as a rounding of
// float32 values, or nil when the activations stay float32 (quantized weights: ggml
// quantizes them to 8 bits, the kernels here multiply them exactly instead).
func activationRounding(t tensor.Type) func(float32) float32 {
	switch t {
	case tensor.F16:
		return func(v float32) float32 { return tensor.F16ToF32(tensor.F32ToF16(v)) }
	case tensor.BF16:
		return func(v float32) float32 { return tensor.BF16ToF32(tensor.F32ToBF16(v)) }
	}
	return nil
}

// rounded returns x as the weight's dot product sees it: x itself, or a rounded copy in
// the backend's host scratch.
func (b *Backend) rounded(w *weight, x []float32) []float32 {
	if w.round == nil {
		return x
	}
	b.roundedX = append(b.roundedX[:0], x...)
	for i, v := range b.roundedX {
		b.roundedX[i] = w.round(v)
	}
	return b.roundedX
}

// run runs one GPU operation on weight w with the context current, timing it and naming
// the device and tensor in its error.
func (b *Backend) run(w *weight, op func() error) error {
	start := time.Now()
	err := b.do(op)
	b.stats.Ops++
	b.stats.Time += time.Since(start)
	if err != nil {
		return fmt.Errorf("%s: tensor %s: %w", b.dev.Name, w.name, err)
	}
	return nil
}

// launch starts kernel fn on the default stream with the given grid and block and 8-byte
// parameters (pointers and 64-bit integers, as the kernels declare them).
func (b *Backend) launch(fn cu.Function, gridX, gridY, blockX, blockY int, args ...uint64) error {
	n := copy(b.args[:], args)
	return fn.Launch(gridX, gridY, 1, blockX, blockY, 1, 0, cu.NoStream, b.argp[:n])
}

// Close frees the device memory, closes the CPU backend (the host buffers are the
// garbage collector's to free; the pool is the caller's) and releases the primary context.
func (b *Backend) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	err := b.do(func() error {
		var errs []error
		for _, p := range b.weights {
			errs = append(errs, cu.MemFree(p))
		}
		for _, buf := range []*deviceBuffer{&b.x, &b.y, &b.route} {
			errs = append(errs, buf.free())
		}
		errs = append(errs, b.staging.free(), b.mod.Unload())
		return errors.Join(errs...)
	})
	b.weights, b.resident = nil, 0
	return errors.Join(err, b.Backend.Close(), b.ordinal.ReleasePrimaryCtx())
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

var _ backend.Backend = (*Backend)(nil)
