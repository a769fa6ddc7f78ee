package server

import (
	"bytes"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// metrics are the counters /metrics reports.
type metrics struct {
	mu       sync.Mutex
	requests map[requestKey]uint64 // by route and status

	promptTokens, completionTokens atomic.Uint64
	cachedTokens                   atomic.Uint64
	promptNanos, generationNanos   atomic.Int64
	ttftNanos, ttftCount           atomic.Int64
	processing                     atomic.Int64
}

type requestKey struct {
	path   string
	status int
}

func (m *metrics) request(path string, status int, res *result) {
	m.mu.Lock()
	if m.requests == nil {
		m.requests = map[requestKey]uint64{}
	}
	m.requests[requestKey{path, status}]++
	m.mu.Unlock()
	if res == nil {
		return
	}
	m.promptTokens.Add(uint64(res.promptTokens - res.cachedTokens))
	m.cachedTokens.Add(uint64(res.cachedTokens))
	m.completionTokens.Add(uint64(res.completionTokens))
	m.promptNanos.Add(int64(res.promptTime))
	m.generationNanos.Add(int64(res.genTime))
	if res.completionTokens > 0 {
		m.ttftNanos.Add(int64(res.firstToken))
		m.ttftCount.Add(1)
	}
}

// serveMetrics writes the Prometheus text exposition format (version 0.0.4).
func (s *Server) serveMetrics(w http.ResponseWriter, _ *http.Request, _ *requestLog) *apiError {
	var b bytes.Buffer
	m := &s.metrics
	metric := func(name, kind, help string) {
		fmt.Fprintf(&b, "# HELP moerun_%s %s\n# TYPE moerun_%s %s\n", name, help, name, kind)
	}

	metric("requests_total", "counter", "HTTP requests answered, by route and status.")
	m.mu.Lock()
	keys := make([]requestKey, 0, len(m.requests))
	for k := range m.requests {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b requestKey) int {
		if a.path != b.path {
			return strings.Compare(a.path, b.path)
		}
		return a.status - b.status
	})
	for _, k := range keys {
		fmt.Fprintf(&b, "moerun_requests_total{route=%q,status=\"%d\"} %d\n", k.path, k.status, m.requests[k])
	}
	m.mu.Unlock()

	passes, batched := s.engine.Batches()
	promptSeconds := time.Duration(m.promptNanos.Load()).Seconds()
	genSeconds := time.Duration(m.generationNanos.Load()).Seconds()
	values := func(vs []sample) {
		for _, v := range vs {
			metric(v.name, v.kind, v.help)
			fmt.Fprintf(&b, "moerun_%s %g\n", v.name, v.value)
		}
	}
	values([]sample{
		{"prompt_tokens_total", "counter", "Prompt tokens evaluated.", float64(m.promptTokens.Load())},
		{"prompt_tokens_cached_total", "counter", "Prompt tokens a slot's KV cache already held (not evaluated).", float64(m.cachedTokens.Load())},
		{"generated_tokens_total", "counter", "Tokens generated.", float64(m.completionTokens.Load())},
		{"prompt_seconds_total", "counter", "Time spent evaluating prompts.", promptSeconds},
		{"generation_seconds_total", "counter", "Time spent generating.", genSeconds},
		{"prompt_tokens_per_second", "gauge", "Average prompt throughput per request so far.", rate(float64(m.promptTokens.Load()), promptSeconds)},
		{"generation_tokens_per_second", "gauge", "Average generation throughput per request so far.", rate(float64(m.completionTokens.Load()), genSeconds)},
		{"time_to_first_token_seconds_average", "gauge", "Average time from a request's slot start to its first token.", rate(time.Duration(m.ttftNanos.Load()).Seconds(), float64(m.ttftCount.Load()))},
		{"requests_processing", "gauge", "Requests holding a slot.", float64(m.processing.Load())},
		{"requests_queued", "gauge", "Requests waiting for a slot.", float64(s.queued.Load())},
		{"batches_total", "counter", "Forward passes run, each over up to -ub tokens of the active slots' step (continuous batching).", float64(passes)},
		{"batch_tokens_total", "counter", "Tokens those forward passes held: divided by batches_total, the mean batch size.", float64(batched)},
		{"slots", "gauge", "Slots (-np).", float64(s.slots)},
		{"queue_capacity", "gauge", "Requests that may wait for a slot before new ones are refused.", float64(s.queueSize)},
		{"slot_context_tokens", "gauge", "Context size of each slot.", float64(s.slotSize)},
	})

	doc := s.stats.Snapshot(s.name)
	metric("expert_layer_tokens_total", "counter", "Tokens routed through each MoE layer.")
	for _, l := range doc.Layers {
		fmt.Fprintf(&b, "moerun_expert_layer_tokens_total{layer=\"%d\"} %d\n", l.Layer, l.Tokens)
	}
	metric("expert_dropped_slots_total", "counter", "Expert slots removed by smart expert reduction, per layer.")
	for _, l := range doc.Layers {
		fmt.Fprintf(&b, "moerun_expert_dropped_slots_total{layer=\"%d\"} %d\n", l.Layer, l.DroppedSlots)
	}
	metric("expert_selected_total", "counter", "Tokens the router sent to each expert.")
	for _, l := range doc.Layers {
		for _, e := range l.Experts {
			fmt.Fprintf(&b, "moerun_expert_selected_total{layer=\"%d\",expert=\"%d\"} %d\n", l.Layer, e.Expert, e.Selected)
		}
	}
	metric("expert_weight_total", "counter", "Sum of the gating weights each expert received.")
	for _, l := range doc.Layers {
		for _, e := range l.Experts {
			fmt.Fprintf(&b, "moerun_expert_weight_total{layer=\"%d\",expert=\"%d\"} %g\n", l.Layer, e.Expert, e.WeightSum)
		}
	}
	if st := s.cacheStats(); st.Layers > 0 {
		values([]sample{
			{"expert_cache_slots", "gauge", "Experts the expert cache holds on the GPU per layer (--expert-cache).", float64(st.Slots)},
			{"expert_cache_layers", "gauge", "MoE layers the expert cache serves.", float64(st.Layers)},
			{"expert_cache_bytes", "gauge", "GPU memory the expert cache's slots take.", float64(st.SlotBytes)},
			{"expert_cache_hits_total", "counter", "Routed expert slots computed on the GPU from the cache.", float64(st.Hits)},
			{"expert_cache_misses_total", "counter", "Routed expert slots of cached layers computed by the CPU.", float64(st.Misses)},
			{"expert_cache_swaps_total", "counter", "Experts copied into a slot in place of another.", float64(st.Swaps)},
			{"expert_cache_moved_bytes_total", "counter", "Bytes copied into the slots.", float64(st.BytesMoved)},
		})
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	w.Write(b.Bytes())
	return nil
}

// sample is one unlabelled metric value, with its kind and help.
type sample struct {
	name, kind, help string
	value            float64
}

func rate(n, d float64) float64 {
	if d <= 0 {
		return 0
	}
	return n / d
}
