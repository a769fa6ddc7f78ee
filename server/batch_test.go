package server

import (
	"bytes"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestConcurrentStreamsMatchAlone: four streamed completions decoded together, in the
// engine's shared batches, each get the text the same request gets on its own, and the
// server's metrics show the batches (fewer forward passes than tokens evaluated). With -b
// 8 -ub 3, more slots than a pass holds, as llama-server allows: each step's four decode
// tokens take two passes, and no pass holds more than 3 tokens.
func TestConcurrentStreamsMatchAlone(t *testing.T) {
	for _, sizes := range []struct{ batch, ubatch int }{{2048, 512}, {8, 3}} {
		t.Run(fmt.Sprintf("b%d/ub%d", sizes.batch, sizes.ubatch), func(t *testing.T) {
			concurrentStreams(t, sizes.batch, sizes.ubatch)
		})
	}
}

func concurrentStreams(t *testing.T, batch, ubatch int) {
	prompts := []string{"The quick brown fox", "Hello", "Once upon a time there was", "1, 2, 3,"}
	body := func(p string, stream bool) string {
		return fmt.Sprintf(`{"prompt": %q, "max_tokens": 12, "temperature": 0, "ignore_eos": true, "stream": %v}`, p, stream)
	}
	alone := newTestServer(t, func(c *Config) { c.Slots = 1 })
	want := make([]string, len(prompts))
	for i, p := range prompts {
		status, b := call(t, alone, http.MethodPost, "/v1/completions", body(p, false))
		if status != http.StatusOK {
			t.Fatalf("%d %s", status, b)
		}
		want[i] = decode[struct {
			Choices []struct{ Text string } `json:"choices"`
		}](t, b).Choices[0].Text
	}

	s, ts := testServer(t, func(c *Config) {
		c.Slots, c.QueueSize = 4, 0
		c.Context.Batch, c.Context.UBatch = batch, ubatch
	})
	resume := s.engine.Pause() // the four start in the same step
	got := make([]string, len(prompts))
	var wg sync.WaitGroup
	for i, p := range prompts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := ts.Client().Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(body(p, true)))
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			var text strings.Builder
			for _, e := range sseEvents(t, resp.Body) {
				for _, c := range decode[struct {
					Choices []struct{ Text string } `json:"choices"`
				}](t, e).Choices {
					text.WriteString(c.Text)
				}
			}
			got[i] = text.String()
		}()
	}
	for s.metrics.processing.Load() < int64(len(prompts)) {
		time.Sleep(time.Millisecond)
	}
	resume()
	wg.Wait()
	for i := range prompts {
		if got[i] != want[i] {
			t.Errorf("stream %d: %q beside the others, %q alone", i, got[i], want[i])
		}
	}
	_, metrics := call(t, ts, http.MethodGet, "/metrics", "")
	passes, tokens := metricValue(t, metrics, "moerun_batches_total"), metricValue(t, metrics, "moerun_batch_tokens_total")
	// Alone, each request would take one pass for its prompt and 11 decode steps; with
	// -ub 3 the four decode tokens of a step take two passes.
	most := 12.0
	if ubatch < len(prompts) {
		most = 4 * 12
	}
	if passes > most || tokens < 4*11 || tokens > passes*float64(ubatch) {
		t.Errorf("%v passes of %v tokens: the streams were not batched, or a pass held more than -ub %d", passes, tokens, ubatch)
	}
}

// metricValue is the value of an unlabelled metric in a /metrics answer.
func metricValue(t *testing.T, metrics []byte, name string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindSubmatch(metrics)
	if m == nil {
		t.Fatalf("no %s in %s", name, bytes.TrimSpace(metrics))
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
