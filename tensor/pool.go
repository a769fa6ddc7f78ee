package tensor

import (
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moerun/moerun/internal/mmap"
)

// Pool is a fixed team of worker goroutines that computes one operation at a time (ggml's
// threadpool, llama.cpp's -t). An operation is cut into work units (blocks of rows, say),
// dealt out as one contiguous range per worker; a worker takes the units of its own range
// in order, then helps with the others' until none are left, so a worker that was
// descheduled does not hold up the others. In order matters for decode: a worker's tiles of
// a mat-vec then follow each other in memory, one sequential stream whose prefetches run on
// from tile to tile, where handing units out from one shared counter made every worker's
// reads jump at every tile. The goroutine that calls an operation works too, as worker 0,
// so a pool of n threads starts n-1 goroutines, once.
//
// Operations on a Pool are serialized; a Pool is safe for use by several goroutines. In the
// steady state (the same shapes again, as in every decode step) operations do not allocate.
//
// Workers read weights that may be memory-mapped: each runs its share inside mmap.Guard, so
// a model file truncated under us turns into an error returned by the operation.
type Pool struct {
	mu      sync.Mutex // held for a whole operation, so scratch buffers can be shared
	threads int
	// call publishes each operation to the helpers in one word (callWord): one store the
	// spinning helpers all read, where a flag per helper cost the caller one cache-line
	// transfer per helper and operation.
	call     paddedWord
	sleepers atomic.Int32 // helpers asleep on their wake channel
	helpers  []*sleeper   // one per helper goroutine (workers 1..threads-1)
	done     parker       // the caller waits here for the helpers
	closed   bool

	// The running job, published to the helpers by their parker's signal.
	job     job
	ranges  []unitRange    // one per worker taking part
	pending atomic.Int32   // helpers still working
	errs    []error        // per worker
	panics  []*WorkerPanic // per worker

	scratch scratch
	jobs    jobs
	// packedOps numbers the operations that run packed kernels, so that a worker can tell
	// the rows it packed in this operation from those of an earlier one at the same address.
	packedOps uint64
	noRepack  bool // SetRepack(false)
}

// unitRange is a worker's share of a job's units, next..end-1, handed out from the front.
// Padded to a cache line: the workers update their own ranges' counters all the time.
type unitRange struct {
	next atomic.Int64
	end  int64
	_    [48]byte
}

// job is one operation's work, cut into units numbered 0..units-1.
type job interface {
	unit(worker, u int)
}

// NewPool starts a pool of the given number of threads; threads <= 0 means DefaultThreads.
// Close it when done.
func NewPool(threads int) *Pool {
	if threads <= 0 {
		threads = DefaultThreads()
	}
	p := &Pool{threads: threads, errs: make([]error, threads), panics: make([]*WorkerPanic, threads),
		ranges: make([]unitRange, threads)}
	p.done.init()
	for w := 1; w < threads; w++ {
		h := &sleeper{wake: make(chan struct{}, 1)}
		p.helpers = append(p.helpers, h)
		go p.helper(w, h)
	}
	return p
}

// DefaultThreads is the default -t: the number of physical cores this process may use
// (hyper-threads share a core's execution units and memory port, so they add little to
// memory-bound kernels), but no more than GOMAXPROCS.
func DefaultThreads() int {
	return max(1, min(physicalCores(), runtime.GOMAXPROCS(0)))
}

// Threads is the number of workers, the calling goroutine included.
func (p *Pool) Threads() int { return p.threads }

// Close stops the helper goroutines. Operations on a closed pool return an error.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	p.job = nil
	p.publish(len(p.helpers)) // with p.job nil the helpers return
}

var errPoolClosed = errors.New("tensor: operation on a closed Pool")

// lock starts an operation.
func (p *Pool) lock() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return errPoolClosed
	}
	return nil
}

// run computes units 0..units-1 of j on the workers and returns the first error a worker
// hit (a fault on mapped memory). A worker's panic stops the job and is raised again here,
// on the caller's goroutine, once every worker has stopped: a helper's panic would
// otherwise end the process, and the caller's would leave helpers running into the next
// operation. The caller holds p.mu.
func (p *Pool) run(j job, units int) error {
	if units <= 0 {
		return nil
	}
	helpers := min(len(p.helpers), units-1)
	p.job, p.ranges = j, p.ranges[:helpers+1]
	for w := range p.ranges {
		r := &p.ranges[w]
		r.next.Store(int64(units * w / len(p.ranges)))
		r.end = int64(units * (w + 1) / len(p.ranges))
	}
	p.pending.Store(int32(helpers))
	if helpers > 0 {
		p.publish(helpers)
	}
	p.work(0)
	if helpers > 0 {
		p.done.wait()
	}
	p.job = nil
	var err error
	var crash *WorkerPanic
	for w := range helpers + 1 {
		if err == nil {
			err = p.errs[w]
		}
		if crash == nil {
			crash = p.panics[w]
		}
		p.errs[w], p.panics[w] = nil, nil
	}
	if crash != nil {
		panic(crash)
	}
	return err
}

// WorkerPanic is what an operation panics with when one of its workers panicked (a bug in
// a kernel): the worker's panic value and its stack, which would be lost when the panic is
// raised again on the caller's goroutine.
type WorkerPanic struct {
	Worker int // 0 is the calling goroutine
	Value  any
	Stack  []byte
}

func (e *WorkerPanic) Error() string {
	return fmt.Sprintf("%v (in thread %d of the pool)", e.Value, e.Worker)
}

// A call word holds an operation's number (from 1) above callShift bits and the number of
// helpers taking part in it (workers 1..n) below.
const callShift = 16

// paddedWord is an atomic word alone on its cache line.
type paddedWord struct {
	_ [64]byte
	atomic.Uint64
	_ [56]byte
}

// sleeper is a helper's way to sleep when no operation came for spinTime.
type sleeper struct {
	asleep atomic.Bool
	wake   chan struct{}
	_      [48]byte
}

// publish starts the next operation for helpers 1..n and wakes those of them asleep.
func (p *Pool) publish(n int) {
	p.announce(n)
	p.wake(n)
}

// announce stores the next operation's call word, for helpers 1..n: the spinning ones
// start on it.
func (p *Pool) announce(n int) {
	next := (p.call.Load()>>callShift + 1) << callShift
	p.call.Store(next | uint64(n))
}

// wake wakes those of helpers 1..n that sleep. It may reach a helper late: one that has
// already served the new operation and gone back to sleep gets a wake-up with no new word
// behind it (awaitCall sleeps again).
func (p *Pool) wake(n int) {
	if p.sleepers.Load() == 0 {
		return
	}
	for _, h := range p.helpers[:n] {
		if h.asleep.Load() && h.asleep.CompareAndSwap(true, false) {
			p.sleepers.Add(-1)
			h.wake <- struct{}{}
		}
	}
}

// helper is the loop of worker w: it waits for each operation that includes it.
func (p *Pool) helper(w int, h *sleeper) {
	var seen uint64 // the last call word this helper acted on
	for {
		seen = p.awaitCall(h, seen)
		if int(seen&(1<<callShift-1)) < w {
			continue // an operation for fewer helpers: its state is not ours to read
		}
		if p.job == nil {
			return // closed
		}
		p.work(w)
		if p.pending.Add(-1) == 0 {
			p.done.signal()
		}
	}
}

// awaitCall waits for a call word other than seen: it polls for spinTime, then sleeps until
// publish wakes it. Polling only reads the word, so the caller's store reaches all the
// spinning helpers at once.
func (p *Pool) awaitCall(h *sleeper, seen uint64) uint64 {
	for {
		var c uint64
		if spinFor(func() bool { c = p.call.Load(); return c != seen }) {
			return c
		}
		h.asleep.Store(true)
		p.sleepers.Add(1)
		// publish reads sleepers after it stores the word, so either it sees this helper
		// asleep or this load sees its word.
		if c := p.call.Load(); c != seen && h.asleep.CompareAndSwap(true, false) {
			p.sleepers.Add(-1)
			return c
		}
		<-h.wake // publish took our flag and sends exactly one wake-up
		if c := p.call.Load(); c != seen {
			return c
		}
		// The wake-up of the operation this helper has already served: its caller was
		// descheduled between storing the word and waking the helpers, for longer than
		// this helper spun. Acting on the same word twice would count the helper out of
		// the operation twice, so the caller would go on while it still works, and later
		// operations would wait for a helper that is gone.
	}
}

// work takes the units of worker w's range, then those left in the others', until none
// are left. A fault or a panic stops the whole job: the other workers find every range
// exhausted.
func (p *Pool) work(w int) {
	defer func() {
		if r := recover(); r != nil {
			p.panics[w] = &WorkerPanic{Worker: w, Value: r, Stack: debug.Stack()}
			p.exhaust()
		}
	}()
	err := mmap.Guard(func() {
		for i := range p.ranges {
			r := &p.ranges[(w+i)%len(p.ranges)]
			if r.next.Load() >= r.end {
				continue // done: a read leaves its line shared, an Add would take it away
			}
			for {
				u := r.next.Add(1) - 1
				if u >= r.end {
					break
				}
				p.job.unit(w, int(u))
			}
		}
	})
	if err != nil {
		p.errs[w] = err
		p.exhaust()
	}
}

// exhaust hands out the rest of every range, so that the job stops at the workers' next
// unit.
func (p *Pool) exhaust() {
	for i := range p.ranges {
		p.ranges[i].next.Store(p.ranges[i].end)
	}
}

// spinTime is how long a worker polls for the next job before it sleeps. Operations in a
// decode step mostly come a few microseconds apart, but now and then a gap runs past 50 µs
// (the caller descheduled for a moment, the host busy), and waking a sleeping worker on
// this VM took 100-500 µs. Measured with a probe in the pool, the 8-layer Qwen3-30B-A3B
// model's tg128 on two threads, three alternating pairs: with 50 µs the helper slept 164-191
// times per 129 tokens and started late by 21-35 ms in all; with 500 µs, 2-73 times and
// 0.4-10 ms (about 0.7% of the run). An idle pool still sleeps after half a millisecond.
const spinTime = 500 * time.Microsecond

// spinFor polls done, yielding the processor now and then, until it holds (true) or
// spinTime has passed (false).
func spinFor(done func() bool) bool {
	var start time.Time
	for i := 0; ; i++ {
		if done() {
			return true
		}
		if i%64 == 63 {
			if start.IsZero() {
				start = time.Now()
			} else if time.Since(start) > spinTime {
				return false
			}
			runtime.Gosched()
		}
	}
}

// parker lets one goroutine (the caller, for its helpers) wait for one signal at a time: it polls for a while and then
// sleeps on a channel. signal never blocks. Its whole state is one word, so a signaler that
// is slow to finish cannot leave a stale wake-up behind for a later wait.
type parker struct {
	state atomic.Int32 // parkIdle, parkSignaled or parkSleeping
	wake  chan struct{}
}

const (
	parkIdle     = iota // no signal pending, nobody asleep
	parkSignaled        // a signal waits to be taken
	parkSleeping        // the waiter sleeps on wake
)

func (k *parker) init() { k.wake = make(chan struct{}, 1) }

func (k *parker) wait() {
	// Only read while polling: a write would pull the line away from the signaler.
	if spinFor(func() bool { return k.state.Load() == parkSignaled && k.state.CompareAndSwap(parkSignaled, parkIdle) }) {
		return
	}
	if k.state.CompareAndSwap(parkIdle, parkSleeping) {
		<-k.wake // the signaler saw us asleep and sends exactly one wake-up
		return
	}
	k.state.Store(parkIdle) // the signal came just now
}

func (k *parker) signal() {
	for {
		switch k.state.Load() {
		case parkIdle:
			if k.state.CompareAndSwap(parkIdle, parkSignaled) {
				return
			}
		case parkSleeping:
			if k.state.CompareAndSwap(parkSleeping, parkIdle) {
				k.wake <- struct{}{}
				return
			}
		default:
			return // already signaled
		}
	}
}

// jobs are the operations' job values, kept in the pool so that starting one does not
// allocate.
type jobs struct {
	convert   convertJob
	matmul    matmulJob
	matmuls   matmulsJob
	mulMatIDs mulMatIDsJob
	attn      attnJob
	stream    streamJob
	indexer   indexerJob
}

// scratch holds the buffers operations reuse from one call to the next.
type scratch struct {
	act    []byte   // activations converted to the weights' VecDotType
	counts []int32  // MulMatID: pairs per expert, then their offsets
	order  []int32  // MulMatID: (token, slot) pairs grouped by expert
	tiles  []idTile // MulMatID: the work units

	attn     []attnScratch // Attention: per worker
	partials []float32     // Attention: the chunks of a split query
	stream   []byte        // StreamRead: per worker
	wide     []wideScratch // MatMul of F16 weights and packed kernels: per worker
	keys     []float32     // IndexerScores: a chunk of keys per worker
	dots     []float32     // IndexerScores: the heads' products with a key, per worker
}

// grow returns b resized to n elements, reusing its storage when it is large enough.
func grow[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n)
	}
	return b[:n]
}
