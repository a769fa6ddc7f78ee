package tensor

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moerun/moerun/internal/mmap"
)

// countJob counts how often each unit runs and which workers ran any.
type countJob struct {
	runs    []atomic.Int32
	workers [8]atomic.Bool
}

func (j *countJob) unit(w, u int) {
	j.runs[u].Add(1)
	j.workers[w].Store(true)
}

// runCounted runs a countJob of units units on p and checks that each ran once.
func runCounted(t *testing.T, p *Pool, units int) *countJob {
	t.Helper()
	j := &countJob{runs: make([]atomic.Int32, units)}
	p.mu.Lock()
	err := p.run(j, units)
	p.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	for u := range units {
		if n := j.runs[u].Load(); n != 1 {
			t.Fatalf("%d threads, %d units: unit %d ran %d times", p.threads, units, u, n)
		}
	}
	return j
}

func TestPoolRunsEveryUnitOnce(t *testing.T) {
	for _, threads := range []int{1, 2, 5} {
		p := NewPool(threads)
		if p.Threads() != threads {
			t.Errorf("Threads() = %d, want %d", p.Threads(), threads)
		}
		for _, units := range []int{0, 1, 3, 1000} {
			for range 20 { // back to back, as in a decode step
				j := runCounted(t, p, units)
				for w := threads; w < len(j.workers); w++ {
					if j.workers[w].Load() {
						t.Fatalf("%d threads: worker %d ran", threads, w)
					}
				}
			}
		}
		p.Close()
		p.Close() // closing twice is harmless
	}
}

// TestPoolWakesSleepingHelpers spaces operations past spinTime, so that the helpers fall
// asleep between them, and alternates operations for all helpers with ones for a few: each
// operation must still run every unit once (a helper left asleep would hang it, one woken
// for an operation it is not part of would run units twice or read a finished job).
func TestPoolWakesSleepingHelpers(t *testing.T) {
	p := NewPool(4)
	defer p.Close()
	for i, units := range []int{1000, 2, 3, 1, 1000, 3, 1000} {
		time.Sleep(2 * spinTime)
		runCounted(t, p, units)
		if asleep := p.sleepers.Load(); asleep < 0 || asleep > 3 {
			t.Fatalf("after operation %d: %d sleepers among 3 helpers", i, asleep)
		}
	}
}

func TestPoolClosed(t *testing.T) {
	p := NewPool(2)
	p.Close()
	w, _ := NewMatrix(F32, []int64{4, 1}, make([]byte, 16))
	if err := p.MatMul(make([]float32, 1), w, make([]float32, 4)); !errors.Is(err, errPoolClosed) {
		t.Errorf("matmul on a closed pool: %v", err)
	}
}

func TestDefaultThreads(t *testing.T) {
	n := DefaultThreads()
	if n < 1 || n > runtime.NumCPU() || n > runtime.GOMAXPROCS(0) {
		t.Errorf("DefaultThreads() = %d with %d CPUs, GOMAXPROCS %d", n, runtime.NumCPU(), runtime.GOMAXPROCS(0))
	}
	p := NewPool(0)
	defer p.Close()
	if p.Threads() != n {
		t.Errorf("NewPool(0) has %d threads, want %d", p.Threads(), n)
	}
}

// TestPoolConcurrentCallers runs operations on one pool from several goroutines: they are
// serialized and each gets its own answer.
func TestPoolConcurrentCallers(t *testing.T) {
	p := NewPool(2)
	defer p.Close()
	const cols, rows = 32, 50
	data := make([]byte, cols*rows*4)
	for i := range cols * rows {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(1))
	}
	w, err := NewMatrix(F32, []int64{cols, rows}, data)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			x, dst := make([]float32, cols), make([]float32, rows)
			for i := range x {
				x[i] = float32(g)
			}
			for range 50 {
				if err := p.MatMul(dst, w, x); err != nil {
					t.Error(err)
					return
				}
				for _, v := range dst {
					if v != float32(g*cols) {
						t.Errorf("goroutine %d: got %g, want %d", g, v, g*cols)
						return
					}
				}
			}
		})
	}
	wg.Wait()
}

// TestMatMulFaultBecomesError maps a weight file, truncates it, and multiplies: the workers
// fault on the vanished pages and the matmul returns mmap.ErrFileChanged instead of crashing.
func TestMatMulFaultBecomesError(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no mmap faults without mmap")
	}
	const cols, rows = 1024, 256 // 1 MiB of F32
	path := filepath.Join(t.TempDir(), "weights.bin")
	if err := os.WriteFile(path, make([]byte, cols*rows*4), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := mmap.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	w, err := NewMatrix(F32, []int64{cols, rows}, m.Bytes(0, m.Size()))
	if err != nil {
		t.Fatal(err)
	}
	for _, threads := range []int{1, 2} {
		p := NewPool(threads)
		defer p.Close()
		x, dst := make([]float32, cols), make([]float32, rows)
		if err := p.MatMul(dst, w, x); err != nil {
			t.Fatalf("before truncation: %v", err)
		}
	}
	if err := os.Truncate(path, 4096); err != nil {
		t.Fatal(err)
	}
	for _, threads := range []int{1, 2} {
		p := NewPool(threads)
		defer p.Close()
		x, dst := make([]float32, 4*cols), make([]float32, 4*rows)
		if err := p.MatMul(dst, w, x); !errors.Is(err, mmap.ErrFileChanged) {
			t.Errorf("%d threads, after truncation: %v", threads, err)
		}
		// The pool still works afterwards.
		small, _ := NewMatrix(F32, []int64{4, 1}, make([]byte, 16))
		if err := p.MatMul(make([]float32, 1), small, make([]float32, 4)); err != nil {
			t.Errorf("%d threads, after a fault: %v", threads, err)
		}
	}
}

// TestDecodeStepDoesNotAllocate runs the operations of a decode step (one token) again and
// again: after the first call sized the scratch buffers, nothing is allocated.
func TestDecodeStepDoesNotAllocate(t *testing.T) {
	p := NewPool(2)
	defer p.Close()
	rng := newTestRand()
	w, _ := randomMatrix(t, rng, F16, 64, 40)
	experts, _ := randomMatrix(t, rng, F16, 64, 24, 8)
	x := randomFloats(rng, 64)
	dst, moeDst := make([]float32, 40), make([]float32, 3*24)
	ids := []int32{5, 1, 6}
	// Attention over 600 positions: long enough to split across the workers.
	cache := denseKV(t, F16, randomFloats(rng, 600*64), 64, 1)
	q, attn, pos := randomFloats(rng, 2*64), make([]float32, 2*64), []int32{599}
	allocs := testing.AllocsPerRun(50, func() {
		if err := p.MatMul(dst, w, x); err != nil {
			t.Fatal(err)
		}
		if err := p.MulMatID(moeDst, experts, x, ids, 3); err != nil {
			t.Fatal(err)
		}
		for _, numerics := range []AttnNumerics{AttnPrecise, AttnGGML} {
			a := AttnParams{Scale: 0.125, Numerics: numerics}
			if err := p.Attention(attn, q, 2, pos, cache, cache, 600, a); err != nil {
				t.Fatal(err)
			}
		}
		RMSNorm(dst, dst, 40, 1e-6)
		SwiGLU(moeDst, moeDst, moeDst, 24)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per decode step", allocs)
	}
}

// nopJob does nothing: BenchmarkPoolDispatch measures what an operation costs on top of
// its work (waking the workers, handing out units, waiting for the last one).
type nopJob struct{}

func (nopJob) unit(int, int) {}

// BenchmarkPoolDispatch measures an operation's overhead at every thread count up to the
// machine's CPUs (1, 2, 4, … and NumCPU): an empty one (16 units that do nothing) and a
// small real one (a 256×64 F32 mat-vec, in L1, as a router or a norm-sized product), the
// cost that grows with -t when it grows with the thread count.
func BenchmarkPoolDispatch(b *testing.B) {
	const cols, rows = 256, 64
	w, err := NewMatrix(F32, []int64{cols, rows}, make([]byte, cols*rows*4))
	if err != nil {
		b.Fatal(err)
	}
	x, dst := make([]float32, cols), make([]float32, rows)
	for _, threads := range benchThreads() {
		p := NewPool(threads)
		b.Run(fmt.Sprintf("op=empty/threads=%d", threads), func(b *testing.B) {
			for b.Loop() {
				p.mu.Lock()
				p.run(nopJob{}, 16)
				p.mu.Unlock()
			}
		})
		b.Run(fmt.Sprintf("op=small/threads=%d", threads), func(b *testing.B) {
			for b.Loop() {
				if err := p.MatMul(dst, w, x); err != nil {
					b.Fatal(err)
				}
			}
		})
		p.Close()
	}
}

// benchThreads is 1, 2, 4, … up to the CPUs this process may use, and that count itself.
func benchThreads() []int {
	var ts []int
	n := runtime.GOMAXPROCS(0)
	for t := 1; t < n; t *= 2 {
		ts = append(ts, t)
	}
	return append(ts, n)
}

// once says which unit of the last operation did not run exactly once, and clears the
// counts for the next.
func (j *countJob) once() error {
	var err error
	for u := range j.runs {
		if n := j.runs[u].Swap(0); n != 1 && err == nil {
			err = fmt.Errorf("unit %d ran %d times", u, n)
		}
	}
	return err
}

// runOps runs ops operations of 1..len(j.runs) units on p and checks each (it may run on
// another goroutine than the test's).
func runOps(p *Pool, j *countJob, ops int) error {
	all := j.runs
	defer func() { j.runs = all }()
	for op := range ops {
		j.runs = all[:1+op%len(all)]
		p.mu.Lock()
		err := p.run(j, len(j.runs))
		p.mu.Unlock()
		if err == nil {
			err = j.once()
		}
		if err != nil {
			return fmt.Errorf("operation %d of %d units on %d threads: %w", op, len(j.runs), p.threads, err)
		}
	}
	return nil
}

// waitFor polls cond for up to five seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(100 * time.Microsecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 5 s for %s", what)
		}
	}
}

// A caller descheduled between storing an operation's word and waking the sleeping
// helpers can reach a helper that already served the operation and went back to sleep.
// That wake-up must not make the helper serve the operation again: it would count itself
// out twice (the next operation's caller then goes on while a unit still runs) or find
// no job and end, and every later operation waits for it forever. The case is produced
// step by step here: the word stored, the helper serving it alone and going to sleep,
// then the late wake-up.
func TestPoolLateWakeUp(t *testing.T) {
	p := NewPool(2)
	defer p.Close()
	j := &countJob{runs: make([]atomic.Int32, 2)}
	if err := runOps(p, j, 1); err != nil { // the helper is spinning now
		t.Fatal(err)
	}

	p.mu.Lock()
	p.job, p.ranges = j, p.ranges[:2]
	p.ranges[0].next.Store(0)
	p.ranges[0].end = 1
	p.ranges[1].next.Store(1)
	p.ranges[1].end = 2
	p.pending.Store(1)
	p.announce(1) // the caller is descheduled here, before wake
	p.done.wait() // the helper takes both units and counts itself out
	if err := j.once(); err != nil {
		t.Fatalf("the operation served by the helper: %v", err)
	}
	waitFor(t, "the helper to sleep", func() bool { return p.sleepers.Load() == 1 })
	p.wake(1) // the caller is back
	time.Sleep(10 * time.Millisecond)
	if n, s := p.pending.Load(), p.done.state.Load(); n != 0 || s != parkIdle {
		t.Errorf("after the late wake-up: %d helpers pending, parker state %d: the helper served the operation again", n, s)
	}
	p.job = nil
	p.mu.Unlock()

	if err := runOps(p, j, 20); err != nil {
		t.Fatal(err)
	}
}

// TestPoolStress runs small operations of 1-4 units on pools of 2-4 threads side by side,
// with gaps now and then longer than the helpers spin, so that they are woken from sleep
// in every order the scheduler makes: each unit runs exactly once, and nothing hangs.
func TestPoolStress(t *testing.T) {
	var wg sync.WaitGroup
	stop := time.Now().Add(time.Second)
	for threads := 2; threads <= 4; threads++ {
		p := NewPool(threads)
		defer p.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			j := &countJob{runs: make([]atomic.Int32, 4)}
			for op := 0; time.Now().Before(stop); op++ {
				if err := runOps(p, j, 7); err != nil {
					t.Error(err)
					return
				}
				time.Sleep(time.Duration(op*37%1100) * time.Microsecond)
			}
		}()
	}
	wg.Wait()
}

// panicJob panics in the unit that worker target runs once every worker has started one,
// so that the panic comes from that worker.
type panicJob struct {
	target, threads int
	started         atomic.Int32
}

func (j *panicJob) unit(worker, _ int) {
	j.started.Add(1)
	for deadline := time.Now().Add(5 * time.Second); int(j.started.Load()) < j.threads && time.Now().Before(deadline); {
		runtime.Gosched()
	}
	if worker == j.target {
		panic(fmt.Sprintf("unit of worker %d", worker))
	}
}

// A kernel's panic on any worker reaches the operation's caller as a *WorkerPanic, after
// every worker stopped, and the pool goes on working: on a helper it used to end the
// process, on the caller it left the helpers running into the next operation.
func TestPoolWorkerPanic(t *testing.T) {
	for threads := 1; threads <= 3; threads++ {
		for target := range threads {
			p := NewPool(threads)
			func() {
				defer func() {
					wp, ok := recover().(*WorkerPanic)
					if !ok || wp.Worker != target || wp.Value != fmt.Sprintf("unit of worker %d", target) || len(wp.Stack) == 0 {
						t.Errorf("%d threads, panic on worker %d: recovered %#v", threads, target, wp)
					}
					p.mu.Unlock()
				}()
				p.mu.Lock()
				_ = p.run(&panicJob{target: target, threads: threads}, 4*threads)
				t.Errorf("%d threads: the operation returned", threads)
			}()
			if err := runOps(p, &countJob{runs: make([]atomic.Int32, 4)}, 20); err != nil {
				t.Errorf("after the panic: %v", err)
			}
			p.Close()
		}
	}
}
