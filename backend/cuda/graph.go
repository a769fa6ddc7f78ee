//go:build cuda

package cuda

/*
#cgo linux CFLAGS: -I/usr/local/cuda/include
#include <cuda.h>

// moerun_graph_update makes exec run graph's work: it succeeds when graph has exec's nodes
// with other parameters (pointers, sizes, grids), and fails with
// CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE when its topology or kernels differ. CUDA 12 changed
// cuGraphExecUpdate's parameters.
static CUresult moerun_graph_update(CUgraphExec exec, CUgraph graph) {
#if CUDA_VERSION >= 12000
	CUgraphExecUpdateResultInfo info;
	return cuGraphExecUpdate(exec, graph, &info);
#else
	CUgraphNode node;
	CUgraphExecUpdateResult result;
	return cuGraphExecUpdate(exec, graph, &node, &result);
#endif
}
*/
import "C"

import (
	"errors"
	"fmt"
	"hash/maphash"
	"os"
	"unsafe"

	"gorgonia.org/cu"
)

// CUDA graphs. A decode step queues hundreds of small kernels, each launch costing the host
// a few microseconds and the GPU a gap between kernels; a graph of them is launched at once
// and runs back to back. The backend does not issue its stream's work as the operations
// come: it records it (kernels with their parameters, copies, memsets) until the host
// waits for the GPU (Synchronize, and the waits inside the backend: host-run operations,
// scratch that must grow, freeing), and there launches it as one graph, so the runtime's
// forward pass stays eager and unaware of graphs.
//
// Each executable graph is kept under a hash of its nodes and their parameters. Work that
// hashes to a kept graph is launched through it without a driver call per node: captured
// once, replayed. The values that change from one decode step to the next reach the
// kernels through device memory (positions, the cache's length, set_rows's row, the RoPE
// angles, all copied from one place of a pinned arena), so the steps of a decode under
// -ngl 99 replay one graph, and with the experts on the CPU each layer's segment between
// two crossings replays its own. Other work is captured (cuStreamBeginCapture, the nodes
// issued, cuStreamEndCapture) into a new graph, or into a kept one of the same nodes with
// other parameters (cuGraphExecUpdate) once graphsKept are kept, as llama.cpp's CUDA backend
// does with its graphs.
//
// A graph reads and writes host memory when it runs, so the host bytes of Set, Get and the
// backend's own small copies pass through the arena: values to the device are copied into
// it when recorded, values from the device copied out of it to their destinations at the
// next wait. Op offload's copies of host-held weights run on a second stream ordered by
// events, which a graph cannot hold: from a Stage, or a read of a staged weight, to the
// next Synchronize the backend issues its work directly. MOERUN_CUDA_GRAPHS=0 (or
// Options.NoGraphs) issues everything directly.

// graphState is a backend's recorded work and its executable graphs.
type graphState struct {
	off  bool // graphs disabled
	held bool // work issued directly until the next Synchronize (op offload's events)
	// nodes is the work recorded since the last launch, args their kernels' parameters;
	// kinds and params hash the nodes' kinds alone and with their parameters.
	nodes         []node
	args          []uint64
	kinds, params maphash.Hash
	execs         map[uint64]*execGraph // by params
	launches      int                   // graphs launched so far, for least-recent use
	arena         pinned                // host values of recorded copies
	used          int64                 // the arena's bytes taken since the last wait
	gets          []pendingGet          // recorded copies out of the arena, due at the next wait
}

// node is one piece of recorded stream work.
type node struct {
	kind        uint64 // nodeCopyIn … or kernelNode(fn)
	fn          cu.Function
	grid, block [2]int
	arg0, argN  int // the kernel's parameters: graphState.args[arg0:argN]
	dst, src    cu.DevicePtr
	off, n      int64 // arena offset (copies in and out) and bytes (words for memset32)
	value       uint32
}

// execGraph is a kept executable graph.
type execGraph struct {
	exec     C.CUgraphExec
	kinds    uint64
	lastUsed int
}

// pendingGet is a recorded copy from the device into the arena at off, for dst.
type pendingGet struct {
	dst []byte
	off int64
}

// graphsEnv is the environment variable that disables CUDA graphs when "0".
const graphsEnv = "MOERUN_CUDA_GRAPHS"

// graphsKept bounds the executable graphs a backend keeps: enough for a decode step's
// segments between crossings on the deepest models (DeepSeek-V3's 61 layers, with the
// experts on the CPU, one segment each, and the output's) and a few prompt shapes.
const graphsKept = 128

// The kinds of the nodes other than kernels, whose kind is the kernel.
const (
	nodeCopyIn uint64 = iota + 1
	nodeCopyOut
	nodeCopyOnDevice
	nodeMemset8
	nodeMemset32
)

// kernelNode is the kind of a node launching fn.
func kernelNode(fn cu.Function) uint64 { return maphash.Comparable(kernelSeed, fn) }

var kernelSeed = maphash.MakeSeed()

// graphsOff reports whether the options or the environment disable graphs.
func graphsOff(opts Options) bool { return opts.NoGraphs || os.Getenv(graphsEnv) == "0" }

// rawStream is s as this package's cgo type.
func rawStream(s cu.Stream) C.CUstream { return C.CUstream(unsafe.Pointer(s.C())) }

// recording reports whether stream work is recorded rather than issued.
func (b *Backend) recording() bool { return !b.graph.off && !b.graph.held }

// record adds a node to the recorded work.
func (b *Backend) record(n node) {
	g := &b.graph
	maphash.WriteComparable(&g.kinds, n.kind)
	maphash.WriteComparable(&g.params, n.kind)
	var arena uintptr // a copy's place in the arena is part of its parameters
	if n.kind == nodeCopyIn || n.kind == nodeCopyOut {
		arena = uintptr(unsafe.Pointer(&g.arena.mem[n.off]))
	}
	maphash.WriteComparable(&g.params, [5]int64{int64(n.dst), int64(n.src), int64(arena), n.n, int64(n.value)})
	maphash.WriteComparable(&g.params, [4]int{n.grid[0], n.grid[1], n.block[0], n.block[1]})
	for _, a := range g.args[n.arg0:n.argN] {
		maphash.WriteComparable(&g.params, a)
	}
	g.nodes = append(g.nodes, n)
}

// issue queues node n on the stream.
func (b *Backend) issue(n node) error {
	switch n.kind {
	case nodeCopyIn:
		return cu.MemcpyHtoDAsync(n.dst, unsafe.Pointer(&b.graph.arena.mem[n.off]), n.n, b.stream)
	case nodeCopyOut:
		return cu.MemcpyDtoHAsync(unsafe.Pointer(&b.graph.arena.mem[n.off]), n.src, n.n, b.stream)
	case nodeCopyOnDevice:
		return cu.MemcpyDtoDAsync(n.dst, n.src, n.n, b.stream)
	case nodeMemset8:
		return cu.MemsetD8Async(n.dst, byte(n.value), n.n, b.stream)
	case nodeMemset32:
		return cu.MemsetD32Async(n.dst, uint(n.value), n.n, b.stream)
	}
	k := copy(b.args[:], b.graph.args[n.arg0:n.argN])
	return n.fn.Launch(n.grid[0], n.grid[1], 1, n.block[0], n.block[1], 1, 0, b.stream, b.argp[:k])
}

// launch queues kernel fn with the given grid and block and 8-byte parameters (pointers,
// 64-bit integers and doubles, as the kernels declare them).
func (b *Backend) launch(fn cu.Function, gridX, gridY, blockX, blockY int, args ...uint64) error {
	if len(args) > len(b.args) {
		return fmt.Errorf("a kernel of %d parameters: the launcher passes at most %d", len(args), len(b.args))
	}
	g := &b.graph
	arg0 := len(g.args)
	g.args = append(g.args, args...)
	n := node{kind: kernelNode(fn), fn: fn, grid: [2]int{gridX, gridY}, block: [2]int{blockX, blockY}, arg0: arg0, argN: len(g.args)}
	if b.recording() {
		b.record(n)
		return nil
	}
	err := b.issue(n)
	g.args = g.args[:arg0]
	return err
}

// copyIn queues a copy of src (Go memory, reusable once it returns) to dst.
func (b *Backend) copyIn(dst cu.DevicePtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	if !b.recording() {
		return cu.MemcpyHtoDAsync(dst, unsafe.Pointer(&src[0]), int64(len(src)), b.stream)
	}
	off, err := b.hostSlot(int64(len(src)))
	if err != nil {
		return err
	}
	copy(b.graph.arena.mem[off:], src)
	b.record(node{kind: nodeCopyIn, dst: dst, off: off, n: int64(len(src))})
	return nil
}

// copyOut queues a copy of src's len(dst) bytes into dst (Go memory); dst holds them after
// the next settle.
func (b *Backend) copyOut(dst []byte, src cu.DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	if !b.recording() {
		return cu.MemcpyDtoHAsync(unsafe.Pointer(&dst[0]), src, int64(len(dst)), b.stream)
	}
	off, err := b.hostSlot(int64(len(dst)))
	if err != nil {
		return err
	}
	b.graph.gets = append(b.graph.gets, pendingGet{dst: dst, off: off})
	b.record(node{kind: nodeCopyOut, src: src, off: off, n: int64(len(dst))})
	return nil
}

// copyOnDevice queues a copy of n bytes from src to dst, both device memory.
func (b *Backend) copyOnDevice(dst, src cu.DevicePtr, n int64) error {
	return b.queueNode(node{kind: nodeCopyOnDevice, dst: dst, src: src, n: n})
}

// memset8 and memset32 queue fills of n bytes or 4-byte words at dst with v.
func (b *Backend) memset8(dst cu.DevicePtr, v byte, n int64) error {
	return b.queueNode(node{kind: nodeMemset8, dst: dst, value: uint32(v), n: n})
}

func (b *Backend) memset32(dst cu.DevicePtr, v uint32, n int64) error {
	return b.queueNode(node{kind: nodeMemset32, dst: dst, value: v, n: n})
}

// queueNode records n, or issues it when the backend is not recording.
func (b *Backend) queueNode(n node) error {
	if b.recording() {
		b.record(n)
		return nil
	}
	return b.issue(n)
}

// hostSlot is n bytes of the arena for a recorded copy, at a 16-byte boundary. Where the
// arena is too small the backend launches the work so far, waits for it and grows the
// arena.
func (b *Backend) hostSlot(n int64) (int64, error) {
	g := &b.graph
	off := (g.used + 15) &^ 15
	if off+n > int64(len(g.arena.mem)) {
		if err := b.settle(); err != nil {
			return 0, err
		}
		if err := g.arena.reserve(max(n, 2*int64(len(g.arena.mem)), 1<<20)); err != nil {
			return 0, err
		}
		off = 0
	}
	g.used = off + n
	return off, nil
}

// launchGraph launches the recorded work as a graph: a kept one of the same nodes and
// parameters as it is, else one captured from the work.
func (b *Backend) launchGraph() error {
	g := &b.graph
	if len(g.nodes) == 0 {
		return nil
	}
	key, kinds := g.params.Sum64(), g.kinds.Sum64()
	defer func() {
		g.nodes, g.args = g.nodes[:0], g.args[:0]
		g.params.Reset()
		g.kinds.Reset()
	}()
	g.launches++
	b.stats.GraphLaunches++
	if e, ok := g.execs[key]; ok {
		e.lastUsed = g.launches
		b.stats.GraphReplays++
		return cuErr("launching a CUDA graph", C.cuGraphLaunch(e.exec, rawStream(b.stream)))
	}
	graph, err := b.capture(g.nodes)
	if err != nil {
		return fmt.Errorf("%w (%s=0 runs without graphs)", err, graphsEnv)
	}
	defer C.cuGraphDestroy(graph)
	e, err := b.keep(key, kinds, graph)
	if err != nil {
		return err
	}
	return cuErr("launching a CUDA graph", C.cuGraphLaunch(e.exec, rawStream(b.stream)))
}

// capture issues nodes into a stream capture and returns its graph.
func (b *Backend) capture(nodes []node) (C.CUgraph, error) {
	// Relaxed: the nodes may be issued from any OS thread the goroutine runs on, and the
	// other modes tie the capture to the thread that began it.
	if err := cuErr("beginning a CUDA graph capture", C.cuStreamBeginCapture(rawStream(b.stream), C.CU_STREAM_CAPTURE_MODE_RELAXED)); err != nil {
		return nil, err
	}
	var errs []error
	for _, n := range nodes {
		if err := b.issue(n); err != nil {
			errs = append(errs, err)
			break
		}
	}
	var graph C.CUgraph
	if err := cuErr("ending a CUDA graph capture", C.cuStreamEndCapture(rawStream(b.stream), &graph)); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		if graph != nil {
			C.cuGraphDestroy(graph)
		}
		return nil, err
	}
	return graph, nil
}

// keep makes graph an executable graph kept under key: a new one while fewer than
// graphsKept are kept; then the least recently used one of the same kinds, updated, or
// else the least recently used one, replaced.
func (b *Backend) keep(key, kinds uint64, graph C.CUgraph) (*execGraph, error) {
	g := &b.graph
	if g.execs == nil {
		g.execs = map[uint64]*execGraph{}
	}
	if len(g.execs) >= graphsKept {
		var lru, lruSame uint64
		var oldest, oldestSame *execGraph
		for k, e := range g.execs {
			if oldest == nil || e.lastUsed < oldest.lastUsed {
				lru, oldest = k, e
			}
			if e.kinds == kinds && (oldestSame == nil || e.lastUsed < oldestSame.lastUsed) {
				lruSame, oldestSame = k, e
			}
		}
		if oldestSame != nil {
			switch r := C.moerun_graph_update(oldestSame.exec, graph); r {
			case C.CUDA_SUCCESS:
				delete(g.execs, lruSame)
				oldestSame.lastUsed = g.launches
				g.execs[key] = oldestSame
				b.stats.GraphUpdates++
				return oldestSame, nil
			case C.CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE:
				lru, oldest = lruSame, oldestSame // replace it below
			default:
				return nil, cuErr("updating a CUDA graph", r)
			}
		}
		delete(g.execs, lru)
		if err := cuErr("destroying a CUDA graph", C.cuGraphExecDestroy(oldest.exec)); err != nil {
			return nil, err
		}
	}
	e := &execGraph{kinds: kinds, lastUsed: g.launches}
	if err := cuErr("instantiating a CUDA graph", C.cuGraphInstantiateWithFlags(&e.exec, graph, 0)); err != nil {
		return nil, err
	}
	g.execs[key] = e
	b.stats.GraphsBuilt++
	return e, nil
}

// Submit launches the work recorded so far as a graph, without waiting for it
// (backend.Submitter): the GPU computes it while the host computes elsewhere.
func (b *Backend) Submit() error {
	if b.closed {
		return errClosed
	}
	return b.copying("submit", b.launchGraph)
}

// hold launches the recorded work and issues the backend's work directly until the next
// Synchronize.
func (b *Backend) hold() error {
	err := b.launchGraph()
	b.graph.held = true
	return err
}

// settle launches the recorded work, waits for the stream and delivers the values its
// graphs copied out. Every wait for the stream goes through it.
func (b *Backend) settle() error {
	err := b.launchGraph()
	if err = errors.Join(err, b.stream.Synchronize()); err != nil {
		return err
	}
	g := &b.graph
	for _, p := range g.gets {
		copy(p.dst, g.arena.mem[p.off:])
	}
	g.gets, g.used = g.gets[:0], 0
	return nil
}

// freeGraphs destroys the executable graphs and the arena; nothing may be recorded.
func (b *Backend) freeGraphs() error {
	var errs []error
	for _, e := range b.graph.execs {
		errs = append(errs, cuErr("destroying a CUDA graph", C.cuGraphExecDestroy(e.exec)))
	}
	b.graph.execs = nil
	return errors.Join(append(errs, b.graph.arena.free())...)
}
