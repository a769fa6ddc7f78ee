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
// and runs back to back. The backend captures its stream's work into a graph between two
// points where the host waits for the GPU (Synchronize, and the waits inside the backend:
// host-run operations, scratch that must grow, freeing), so that the runtime's forward pass
// stays eager and unaware of graphs: the first operation queued after a wait begins a
// capture, the next wait ends it and launches the graph. An executable graph is kept for
// each sequence of nodes (kernels, copies and memsets, in order) the backend has captured,
// and the next capture of the same sequence updates it in place (cuGraphExecUpdate: new
// pointers, positions, sizes and grids) instead of instantiating anew, as llama.cpp's CUDA
// backend does for its decode graphs. Under -ngl 99 a decode step is one graph; with the
// experts on the CPU, one per layer between the crossings, the layers' graphs alike but
// for the first and the last.
//
// A graph reads and writes host memory when it runs, not when it is captured, so during a
// capture the host bytes of Set, Get and the backend's own small copies (row ids,
// positions, RoPE angles) pass through a pinned arena: values to the device are copied into
// it at once, values from the device are copied out of it to their destinations at the
// next Synchronize. Op offload's copies of host-held weights run on a second stream ordered
// by events, which a capture cannot hold: from a Stage, or a read of a staged weight, to
// the next Synchronize the backend launches directly. MOERUN_CUDA_GRAPHS=0 (or
// Options.NoGraphs) launches everything directly.

// graphState is a backend's capture in progress and its executable graphs.
type graphState struct {
	off       bool // graphs disabled
	capturing bool // the stream is capturing
	held      bool // no capture until the next Synchronize (op offload's events)
	// nodes hashes the capture's sequence of nodes so far; execs are the executable graphs
	// by the hash of their sequence.
	nodes maphash.Hash
	execs map[uint64]C.CUgraphExec
	// arena carries host values of captured copies; used is its bytes taken since the last
	// wait, and gets the copies out of it due at the next one.
	arena pinned
	used  int64
	gets  []pendingGet
}

// pendingGet is a captured copy from the device into the arena at off, for dst.
type pendingGet struct {
	dst []byte
	off int64
}

// graphsEnv is the environment variable that disables CUDA graphs when "0".
const graphsEnv = "MOERUN_CUDA_GRAPHS"

// graphsKept bounds the executable graphs a backend keeps: a model's decode steps need a
// handful (the first, middle and last layers' segments), prompts of other lengths a few
// more.
const graphsKept = 32

// The kinds of the nodes a capture records other than kernels, whose kind is the kernel.
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

// cuErr is a driver result as an error, nil for success.
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

// queue readies the stream for a node of the given kind: it begins a capture unless one is
// running, graphs are off or held, and adds the node to the capture's sequence.
// Everything queued on the stream goes through it.
func (b *Backend) queue(kind uint64) error {
	g := &b.graph
	if g.off || g.held {
		return nil
	}
	if !g.capturing {
		// Relaxed: the operations of one capture run on whichever OS thread the goroutine
		// is on, and the other modes tie the capture to the thread that began it.
		if err := cuErr("beginning a CUDA graph capture", C.cuStreamBeginCapture(rawStream(b.stream), C.CU_STREAM_CAPTURE_MODE_RELAXED)); err != nil {
			return err
		}
		g.capturing = true
		g.nodes.Reset()
	}
	maphash.WriteComparable(&g.nodes, kind)
	return nil
}

// launchGraph ends the capture in progress, if any, and launches its graph: through the
// executable graph of the same nodes, updated, or a new one.
func (b *Backend) launchGraph() error {
	g := &b.graph
	if !g.capturing {
		return nil
	}
	g.capturing = false
	var graph C.CUgraph
	if err := cuErr("ending a CUDA graph capture", C.cuStreamEndCapture(rawStream(b.stream), &graph)); err != nil {
		return fmt.Errorf("%w (%s=0 runs without graphs)", err, graphsEnv)
	}
	defer C.cuGraphDestroy(graph)
	key := g.nodes.Sum64()
	exec, ok := g.execs[key]
	if ok {
		// The same nodes: the update fails only where the driver's rules for updates differ
		// from the hash's idea of sameness (then the graph is instantiated anew).
		switch r := C.moerun_graph_update(exec, graph); r {
		case C.CUDA_SUCCESS:
			b.stats.GraphUpdates++
		case C.CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE:
			ok = false
		default:
			return cuErr("updating a CUDA graph", r)
		}
	}
	if !ok {
		if exec != nil { // the update failed: this graph replaces it
			delete(g.execs, key)
		} else if len(g.execs) >= graphsKept {
			for k, e := range g.execs { // any one: the kept graphs are few
				exec = e
				delete(g.execs, k)
				break
			}
		}
		if exec != nil {
			if err := cuErr("destroying a CUDA graph", C.cuGraphExecDestroy(exec)); err != nil {
				return err
			}
		}
		if g.execs == nil {
			g.execs = map[uint64]C.CUgraphExec{}
		}
		if err := cuErr("instantiating a CUDA graph", C.cuGraphInstantiateWithFlags(&exec, graph, 0)); err != nil {
			return err
		}
		g.execs[key] = exec
		b.stats.GraphsBuilt++
	}
	b.stats.GraphLaunches++
	return cuErr("launching a CUDA graph", C.cuGraphLaunch(exec, rawStream(b.stream)))
}

// hold launches the capture in progress and captures nothing more until the next
// Synchronize.
func (b *Backend) hold() error {
	b.graph.held = true
	return b.launchGraph()
}

// settle launches the capture in progress, waits for the stream and delivers the values
// its graphs copied out. Every wait for the stream goes through it.
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

// hostSlot is n bytes of the arena for a captured copy, at a 16-byte boundary. Where the
// arena is too small the backend waits (launching the capture so far) and grows it.
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

// copyIn queues a copy of src (Go memory, reusable once it returns) to dst on the stream.
func (b *Backend) copyIn(dst cu.DevicePtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	if err := b.queue(nodeCopyIn); err != nil {
		return err
	}
	p := unsafe.Pointer(&src[0])
	if b.graph.capturing {
		off, err := b.hostSlot(int64(len(src)))
		if err != nil {
			return err
		}
		slot := b.graph.arena.mem[off:][:len(src)]
		copy(slot, src)
		p = unsafe.Pointer(&slot[0])
	}
	return cu.MemcpyHtoDAsync(dst, p, int64(len(src)), b.stream)
}

// copyOut queues a copy of src's len(dst) bytes into dst (Go memory) on the stream; dst
// holds them after the next settle.
func (b *Backend) copyOut(dst []byte, src cu.DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	if err := b.queue(nodeCopyOut); err != nil {
		return err
	}
	if !b.graph.capturing {
		return cu.MemcpyDtoHAsync(unsafe.Pointer(&dst[0]), src, int64(len(dst)), b.stream)
	}
	off, err := b.hostSlot(int64(len(dst)))
	if err != nil {
		return err
	}
	b.graph.gets = append(b.graph.gets, pendingGet{dst: dst, off: off})
	return cu.MemcpyDtoHAsync(unsafe.Pointer(&b.graph.arena.mem[off]), src, int64(len(dst)), b.stream)
}

// freeGraphs destroys the executable graphs and the arena; nothing may be capturing.
func (b *Backend) freeGraphs() error {
	var errs []error
	for _, e := range b.graph.execs {
		errs = append(errs, cuErr("destroying a CUDA graph", C.cuGraphExecDestroy(e)))
	}
	b.graph.execs = nil
	return errors.Join(append(errs, b.graph.arena.free())...)
}
