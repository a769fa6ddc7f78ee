//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"os"
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
	// Host is the host's worker pool, shared with the CPU backend; it is required. It
	// computes the weights whose type has no CUDA kernel: their bytes stay in host memory
	// and each of their operations copies its operands out of device memory and its result
	// back.
	Host *tensor.Pool
	// NoGraphs launches every kernel directly instead of capturing the stream's work into
	// CUDA graphs (graph.go); so does MOERUN_CUDA_GRAPHS=0 in the environment.
	NoGraphs bool
	// NoTiled runs every product on the matrix-vector kernel (mmv), prompts included,
	// instead of the tiled one (mmq) from tiledMinTokens tokens; so does
	// MOERUN_CUDA_TILED=0 in the environment. It is for measuring one against the other.
	NoTiled bool
}

// tiledEnv is the environment variable that, set to 0, turns the tiled kernel off.
const tiledEnv = "MOERUN_CUDA_TILED"

// Backend is one CUDA device. It is not safe for concurrent use.
//
// Its buffers are device memory (Buffer.Host is nil, so every crossing to or from the
// host is a copy), and Set, Get and the operations are queued in order on the backend's
// stream; Get's bytes are valid after Synchronize. The operations that have kernels run on
// the GPU (Supports lists them); the runtime runs the others on a device that has them,
// copying their operands. The weight operations on types with no CUDA kernel run on the
// host pool, the weight in host memory, the operands copied out and the result back in.
type Backend struct {
	dev     backend.Device
	ordinal cu.Device
	ctx     cu.CUContext
	mod     cu.Module
	stream  cu.Stream
	// copyStream carries op offload's copies of host-held weights (Stage), so that the
	// GPU's copy engine moves the next weight while the stream computes with the last;
	// mark orders it after the stream's work where it must (copyAfterStream).
	copyStream cu.Stream
	mark       cu.Event
	// Each weight type's kernels (the PTX entries mmv_<type>, mmq_<type> and
	// getrows_<type>) and the operations between the products, by entry name.
	mmv, mmq, getrows map[tensor.Type]cu.Function
	op                map[string]cu.Function

	// host computes the weights of types without a CUDA kernel, and the operations that
	// run through the host, on host copies of their operands (onHost).
	host *cpu.Backend

	x        deviceBuffer // activations as mmv wants them: on a 16-byte boundary, quantized (activations)
	route    deviceBuffer // one operation's work list (groupPairs), row ids or positions
	groups   int          // the groups of the work list in route
	tiled    bool         // route's groups are cut for mmq (kernels.TileTokens pairs), not mmv
	noTiled  bool         // Options.NoTiled: mmv for every product
	stackDev deviceBuffer // MatMulStack's ids
	zeroIDs  []int32      // ids of the right count for MulMatID's shape check
	// routeScratch is the router kernel's per-token working memory.
	routeScratch deviceBuffer
	staging      pinned    // host memory weights are uploaded through
	stackIDs     []int32   // MatMulStack's matrix for each row of x
	words        []int32   // the values an operation sends its kernel in device memory
	buffers      []*buffer // live allocations, which Close frees
	angles       []ropeAngles
	nextRoPE     int

	// For op offload's double-buffered copies through staging's halves (stageSpan): the
	// half to fill next, which halves a queued copy may still be reading, and the events
	// recorded after each half's last copy.
	nextHalf   int
	halfQueued [2]bool
	halfCopied [2]cu.Event

	graph   graphState
	traffic backend.Traffic // the crossings of values (Counter): Set, Get, Synchronize, Stage

	weights  []cu.DevicePtr
	resident int64 // bytes of weights in device memory
	stats    Stats
	closed   bool

	args [20]uint64 // kernel parameters: cu copies 8 bytes from each
	argp [20]unsafe.Pointer
}

// Stats count what a backend did since it was made.
type Stats struct {
	Ops          int           // operations run on the GPU
	HostOps      int           // operations run on the host pool through copies (onHost)
	Time         time.Duration // wall time spent issuing GPU work and waiting for it
	CopyInBytes  int64         // bytes copied to the device: Set, row ids, positions, angles
	CopyOutBytes int64         // bytes copied back: Get
	StagedBytes  int64         // bytes of host-held weights copied in for op offload (Stage)
	// CUDA graphs (graph.go): graphs launched; of them, captured and instantiated anew,
	// captured into a kept graph (updated), and launched as kept (replayed).
	GraphLaunches, GraphsBuilt, GraphUpdates int
	GraphReplays                             int // launched as kept, with no capture
}

// New opens GPU ordinal (CUDA<ordinal>): retains its primary context, creates the stream
// its work is queued on and loads the kernels, which the driver compiles from PTX for this
// GPU (once; it caches the result).
func New(ordinal int, opts Options) (*Backend, error) {
	if opts.Host == nil {
		return nil, fmt.Errorf("CUDA%d: cuda.Options.Host is nil: the backend needs the host's pool, which computes the weights without a CUDA kernel", ordinal)
	}
	n, err := Count()
	if err != nil {
		return nil, err
	}
	if ordinal < 0 || ordinal >= n {
		return nil, fmt.Errorf("CUDA%d: no such device (the driver sees %d)", ordinal, n)
	}
	b := &Backend{ordinal: cu.Device(ordinal), mmv: map[tensor.Type]cu.Function{}, mmq: map[tensor.Type]cu.Function{},
		getrows: map[tensor.Type]cu.Function{}, op: map[string]cu.Function{}, graph: graphState{off: graphsOff(opts)},
		noTiled: opts.NoTiled || os.Getenv(tiledEnv) == "0"}
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
		function := func(name string) (cu.Function, error) {
			fn, err := b.mod.Function(name)
			if err != nil {
				return fn, fmt.Errorf("kernel %s: %w", name, err)
			}
			return fn, nil
		}
		for _, t := range kernels.Types() {
			if b.mmv[t], err = function(kernels.MatVec(t)); err != nil {
				return err
			}
			if b.mmq[t], err = function(kernels.MatMulTiled(t)); err != nil {
				return err
			}
			if b.getrows[t], err = function(kernels.GetRows(t)); err != nil {
				return err
			}
		}
		for _, name := range kernels.Ops() {
			if b.op[name], err = function(name); err != nil {
				return err
			}
		}
		// A stream of its own, which orders the backend's copies and launches with each
		// other only (the legacy default stream would also wait for other streams).
		if b.stream, err = cu.MakeStream(cu.NonBlocking); err != nil {
			return fmt.Errorf("creating a stream: %w", err)
		}
		if b.copyStream, err = cu.MakeStream(cu.NonBlocking); err != nil {
			return fmt.Errorf("creating a stream: %w", err)
		}
		for _, e := range b.events() {
			if *e, err = cu.MakeEvent(cu.DisableTiming); err != nil {
				return fmt.Errorf("creating an event: %w", err)
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
	b.host = cpu.New(cpu.Options{Device: backend.CPU(0), Pool: opts.Host})
	return b, nil
}

// events are the backend's own events, which New makes and Close destroys.
func (b *Backend) events() []*cu.Event {
	return []*cu.Event{&b.halfCopied[0], &b.halfCopied[1], &b.mark}
}

// Device describes the GPU.
func (b *Backend) Device() backend.Device { return b.dev }

// Resident is how many bytes of weights the backend holds in device memory.
func (b *Backend) Resident() int64 { return b.resident }

// Stats returns what the backend did so far.
func (b *Backend) Stats() Stats { return b.stats }

// Traffic is what crossed between the GPU and the host so far (backend.Counter): the
// runtime's Set and Get calls, its waits and op offload's weight copies, and the operations
// run. The backend's own small copies (ids, positions, angles) are in Stats.
func (b *Backend) Traffic() backend.Traffic {
	t := b.traffic
	t.Ops = b.stats.Ops
	return t
}

// do runs fn with the device's context current on this thread.
func (b *Backend) do(fn func() error) error { return onContext(b.ctx, fn) }

// weight is a tensor on the GPU, or on the host when its type has no kernel.
type weight struct {
	name        string
	m           *tensor.Matrix // shape and type
	ptr         cu.DevicePtr
	rowBytes    int64
	expertBytes int64
	host        backend.Weight // the host backend's, when the CPU computes this weight
	owner       *Backend
	// stagedIn is the buffer Stage copied the weight into, at bytes [off, end); nil for a
	// loaded weight. Its readers wait for the buffer's copies (readStaged).
	stagedIn *buffer
	off, end int64
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
	w, err := b.newWeight(name, t, shape, data)
	if err != nil {
		return nil, err
	}
	if w.host != nil {
		return w, nil
	}
	size := w.expertBytes * int64(w.m.Experts())
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

// newWeight describes a weight of this backend from its bytes in host memory: its shape and
// type and, for a type with a CUDA kernel, its row and expert strides, its device memory
// left to the caller. A type without a kernel is computed by the host pool on data itself
// (w.host).
func (b *Backend) newWeight(name string, t tensor.Type, shape []int64, data []byte) (*weight, error) {
	m, err := tensor.NewMatrix(t, shape, data)
	if err != nil {
		return nil, fmt.Errorf("tensor %s: %w", name, err)
	}
	w := &weight{name: name, m: m, owner: b}
	if !kernels.Supported(t) {
		if w.host, err = b.host.Load(name, t, shape, data); err != nil {
			return nil, err
		}
		return w, nil
	}
	if w.rowBytes, err = t.RowBytes(int64(m.Cols())); err != nil {
		return nil, fmt.Errorf("tensor %s: %w", name, err)
	}
	w.expertBytes = w.rowBytes * int64(m.Rows())
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

// When the tiled product (mmq) takes over from mmv. mmv reads and dequantizes every weight
// row once per kernels.GroupSize (8) activation rows, fetching each activation from memory
// for every multiply-add; mmq dequantizes a tile of rows once per kernels.TileTokens (32)
// activation rows and multiplies from shared memory, but its passes cost a fixed 32 tokens'
// work, padding included, and a block of one warp with 12 KiB of shared memory. At 16
// tokens mmv makes two passes over the weights to mmq's one, and a pass of mmq is half
// useful: about where the two should meet. llama.cpp's CUDA backend moves from its
// matrix-vector kernel to its tiled one above 8 activation rows; its tiles multiply 8-bit
// integers, ours dequantized floats, so ours gains later. These are estimates, not
// measurements: no GPU was at hand when they were chosen. Measure before moving them.
const (
	// tiledMinTokens is the batch from which a plain product (MatMul) runs mmq.
	tiledMinTokens = 16
	// tiledMinPairsPerExpert is the average number of (token, slot) pairs per expert of
	// the stack from which a grouped product (MulMatID, MatMulStack) runs mmq: the ids stay
	// on the device, so the host knows only their count, and an expert's pairs are served
	// by its own blocks, so what matters is how many each expert gets.
	tiledMinPairsPerExpert = 16
)

// matMul queues ggml_mul_mat on the GPU: below tiledMinTokens tokens mmv, each CUDA block
// computing kernels.MatVecBlockY rows of dst for up to kernels.GroupSize tokens per pass;
// from there mmq, each block kernels.TileRows rows for kernels.TileTokens tokens per pass.
// cw is a GPU-resident weight; x and dst are device addresses of tokens rows (x 16-byte
// aligned).
func (b *Backend) matMul(dst cu.DevicePtr, cw *weight, x cu.DevicePtr, tokens int) error {
	return b.readStaged(cw, func() error {
		args := []uint64{uint64(cw.ptr), uint64(x), uint64(dst), 0, 0, 0,
			uint64(cw.m.Cols()), uint64(cw.m.Rows()), uint64(tokens), 1, 1, uint64(cw.rowBytes), uint64(cw.expertBytes)}
		if tokens >= tiledMinTokens && !b.noTiled {
			return b.launch(b.mmq[cw.m.Type()], ceilDiv(cw.m.Rows(), kernels.TileRows), min(ceilDiv(tokens, kernels.TileTokens), kernels.MaxGridY),
				kernels.TileBlockX, 1, args...)
		}
		return b.launch(b.mmv[cw.m.Type()], ceilDiv(cw.m.Rows(), kernels.MatVecBlockY), min(ceilDiv(tokens, kernels.GroupSize), kernels.MaxGridY),
			kernels.MatVecBlockX, kernels.MatVecBlockY, args...)
	})
}

// groupPairs queues group_pairs over the n expert ids at ids (device memory), building
// the work list of mmv, or of mmq when the stack's experts get tiledMinPairsPerExpert pairs
// on average, in b.route: the pairs of each expert in groups of at most kernels.GroupSize
// (mmv) or kernels.TileTokens (mmq), padded with empty groups to b.groups, a bound the
// host knows without the ids.
func (b *Backend) groupPairs(ids cu.DevicePtr, n, experts int) error {
	b.tiled = !b.noTiled && n >= tiledMinPairsPerExpert*experts
	size := kernels.GroupSize
	if b.tiled {
		size = kernels.TileTokens
	}
	b.groups = ceilDiv(n, size) + min(experts, n)
	words := n + (b.groups + 1) + b.groups + experts // sel, gstart, gexpert, scratch
	if err := b.route.reserve(int64(words)*4, b.settle); err != nil {
		return err
	}
	sel, gstart, gexpert := b.workList(n)
	next := gexpert + 4*uint64(b.groups)
	return b.launch(b.op[kernels.GroupPairs], 1, 1, kernels.MatVecBlockX, 1,
		uint64(ids), sel, gstart, gexpert, next, uint64(n), uint64(experts), uint64(b.groups), uint64(size))
}

// workList is the device addresses of the work list groupPairs built for n pairs.
func (b *Backend) workList(n int) (sel, gstart, gexpert uint64) {
	sel = uint64(b.route.ptr)
	gstart = sel + 4*uint64(n)
	gexpert = gstart + 4*uint64(b.groups+1)
	return sel, gstart, gexpert
}

// mulMatID queues ggml_mul_mat_id on the GPU for the work list of n pairs groupPairs
// built, with the kernel it was built for (mmv or mmq): each group is one CUDA block
// column, so an expert's weights are read once per group of pairs routed to it. Outputs
// of pairs in no group are left as they are. k is the slots per token; shared says x has
// one row per token rather than one per slot.
func (b *Backend) mulMatID(dst cu.DevicePtr, cw *weight, x cu.DevicePtr, n, k int, shared bool) error {
	xPerSlot := uint64(1)
	if shared {
		xPerSlot = 0
	}
	sel, gstart, gexpert := b.workList(n)
	return b.readStaged(cw, func() error {
		args := []uint64{uint64(cw.ptr), uint64(x), uint64(dst), sel, gstart, gexpert,
			uint64(cw.m.Cols()), uint64(cw.m.Rows()), uint64(b.groups), uint64(k), xPerSlot,
			uint64(cw.rowBytes), uint64(cw.expertBytes)}
		if b.tiled {
			return b.launch(b.mmq[cw.m.Type()], ceilDiv(cw.m.Rows(), kernels.TileRows), min(b.groups, kernels.MaxGridY),
				kernels.TileBlockX, 1, args...)
		}
		return b.launch(b.mmv[cw.m.Type()], ceilDiv(cw.m.Rows(), kernels.MatVecBlockY), min(b.groups, kernels.MaxGridY),
			kernels.MatVecBlockX, kernels.MatVecBlockY, args...)
	})
}

// run runs one GPU operation with the context current, timing it and naming the device
// and what (an operation, or an operation and tensor) in its error.
func (b *Backend) run(what string, op func() error) error {
	if b.closed {
		return errClosed
	}
	start := time.Now()
	err := b.do(op)
	b.stats.Ops++
	b.stats.Time += time.Since(start)
	if err != nil {
		return fmt.Errorf("%s: %s: %w", b.dev.Name, what, err)
	}
	return nil
}

// Close waits for the queued work, frees the device memory, closes the host backend (the
// pool is the caller's) and releases the primary context.
func (b *Backend) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	err := b.do(func() error {
		errs := []error{b.launchGraph(), b.copyStream.Synchronize(), b.stream.Synchronize(), b.freeGraphs()}
		for _, p := range b.weights {
			errs = append(errs, cu.MemFree(p))
		}
		for _, u := range b.buffers {
			errs = append(errs, u.release())
		}
		for _, buf := range []*deviceBuffer{&b.x, &b.route, &b.stackDev, &b.routeScratch} {
			errs = append(errs, buf.free())
		}
		for i := range b.angles {
			errs = append(errs, b.angles[i].dev.free())
		}
		for _, e := range b.events() {
			errs = append(errs, cu.DestroyEvent(e))
		}
		errs = append(errs, b.staging.free(), b.mod.Unload(), b.copyStream.Destroy(), b.stream.Destroy())
		return errors.Join(errs...)
	})
	b.weights, b.buffers, b.resident = nil, nil, 0
	return errors.Join(err, b.host.Close(), b.ordinal.ReleasePrimaryCtx())
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

var _ backend.Backend = (*Backend)(nil)
