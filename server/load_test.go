package server

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

var loadDuration = flag.Duration("load", 0, "run TestServeLoad for this long (docs/benchmarks.md uses -load 60s)")

// TestServeLoad runs 32 streaming clients against 4 slots over loopback for -load (it is
// skipped without it); one request in five hangs up after a few chunks.
// Nothing but those hang-ups may fail, and afterwards the server must be idle with no more
// goroutines and no more heap than before. It logs the time to first token and the
// aggregate generation speed.
func TestServeLoad(t *testing.T) {
	if *loadDuration <= 0 {
		t.Skip("a load test: run with -load 60s")
	}
	const clients = 32
	c := testConfig()
	c.Slots, c.QueueSize, c.Context.Size = 4, clients, 1024
	c.GatherWindow = 2 * time.Millisecond // serve's default
	s, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	defer ts.Close()
	client := ts.Client()
	for range c.Slots { // slots are handed out in turn: each grows its working memory once
		call(t, ts, "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"warm up"}],"max_tokens":4}`)
	}
	client.CloseIdleConnections()
	goroutines, heap := settle(s)

	var mu sync.Mutex
	var outcomes []streamResult
	deadline := time.Now().Add(*loadDuration)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 1))
			for time.Now().Before(deadline) {
				o := streamOnce(client, ts.URL, rng, rng.IntN(5) == 0)
				mu.Lock()
				outcomes = append(outcomes, o)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(deadline.Add(-*loadDuration))

	var ttfts []time.Duration
	requests, hangUps, tokens := 0, 0, 0
	for _, o := range outcomes {
		requests++
		if o.err != nil {
			t.Errorf("request failed: %v", o.err)
		}
		if o.hungUp {
			hangUps++
		}
		if o.ttft > 0 {
			ttfts = append(ttfts, o.ttft)
		}
		tokens += o.completed
	}
	client.CloseIdleConnections()
	goroutinesAfter, heapAfter := settle(s)
	if goroutinesAfter > goroutines {
		t.Errorf("%d goroutines after the load, %d before", goroutinesAfter, goroutines)
	}
	if heapAfter > heap+4<<20 {
		t.Errorf("heap in use grew from %d to %d bytes", heap, heapAfter)
	}
	if s.pool.idleSlots() != c.Slots || s.queued.Load() != 0 {
		t.Errorf("after the load: %d of %d slots free, %d queued", s.pool.idleSlots(), c.Slots, s.queued.Load())
	}
	if len(ttfts) == 0 {
		t.Fatal("no request produced a token")
	}
	slices.Sort(ttfts)
	generated := float64(s.metrics.completionTokens.Load())
	t.Logf("%d clients, %d slots, %v: %d requests (%d hung up on purpose), TTFT p50 %v p99 %v, %.0f tokens/s generated in all (%d in completed streams); goroutines %d→%d, heap %.1f→%.1f MiB",
		clients, c.Slots, elapsed.Round(time.Millisecond), requests, hangUps,
		ttfts[len(ttfts)/2].Round(time.Millisecond), ttfts[len(ttfts)*99/100].Round(time.Millisecond),
		generated/elapsed.Seconds(), tokens, goroutines, goroutinesAfter, float64(heap)/(1<<20), float64(heapAfter)/(1<<20))
}

// streamResult is one load-test request's outcome.
type streamResult struct {
	ttft      time.Duration // 0 when nothing came
	hungUp    bool
	err       error
	completed int // completion tokens of a finished stream
}

// streamOnce sends one streaming chat request of 16 to 64 tokens; with hangUp it closes
// the connection after the third chunk.
func streamOnce(client *http.Client, url string, rng *rand.Rand, hangUp bool) streamResult {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	body := fmt.Sprintf(`{"messages":[{"role":"user","content":"request %d"}],"max_tokens":%d,"seed":%d,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`,
		rng.IntN(1000), 16+rng.IntN(49), rng.IntN(1<<20))
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/v1/chat/completions", strings.NewReader(body))
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return streamResult{err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return streamResult{err: fmt.Errorf("status %d: %s", resp.StatusCode, b)}
	}
	var r streamResult
	buf := make([]byte, 64<<10)
	var text strings.Builder
	for chunks := 0; ; {
		n, err := resp.Body.Read(buf)
		if n > 0 && r.ttft == 0 {
			r.ttft = time.Since(start)
		}
		text.Write(buf[:n])
		chunks += strings.Count(string(buf[:n]), "\n\n")
		if hangUp && chunks >= 3 {
			r.hungUp = true
			return r
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			r.err = err
			return r
		}
	}
	events := text.String()
	if !strings.HasSuffix(events, "data: [DONE]\n\n") {
		r.err = fmt.Errorf("the stream did not end with [DONE]: %q", events[max(0, len(events)-200):])
		return r
	}
	i := strings.LastIndex(events, `"completion_tokens":`)
	if i < 0 {
		r.err = fmt.Errorf("no usage in the stream")
		return r
	}
	fmt.Sscanf(events[i+len(`"completion_tokens":`):], "%d", &r.completed)
	return r
}

// settle waits until the server is idle and its handlers have returned, then reports the
// goroutine count and the heap in use after a collection.
func settle(s *Server) (goroutines int, heap uint64) {
	for range 200 {
		if s.pool.idleSlots() == s.slots && s.queued.Load() == 0 && s.metrics.processing.Load() == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Handlers of hung-up requests and closed connections end shortly after; take the
	// smallest count over a short while.
	goroutines = runtime.NumGoroutine()
	for range 50 {
		time.Sleep(10 * time.Millisecond)
		goroutines = min(goroutines, runtime.NumGoroutine())
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return goroutines, ms.HeapInuse
}
