package main

import (
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestExpertCacheHitRate: on synthetic models whose routers spread the load as measured
// on real ones (synth --expert-load) and uniformly, a run with --expert-cache on a
// simulated GPU hits as often as the routing it recorded (--expert-stats) says the
// most-used experts would be: the share of routed slots that went to each layer's SLOTS
// most-selected experts, within 8 points (the cache starts empty and learns).
func TestExpertCacheHitRate(t *testing.T) {
	dir := t.TempDir()
	const slots, experts = 16, 64
	hitRate := regexp.MustCompile(`expert cache: 2 layers × 16 slots \([^)]*\): hit rate ([0-9.]+)%`)
	for _, load := range []string{"gamma:0.3", "uniform"} {
		model, stats := filepath.Join(dir, load+".gguf"), filepath.Join(dir, load+".json")
		if code, out, errOut := moerun(t, "synth", "qwen3-30b-a3b:q8_0", "--random", "--expert-load", load, "--layers", "2",
			"--n-embd", "256", "--heads", "2", "--heads-kv", "1", "--head-dim", "64", "--experts", strconv.Itoa(experts), "--experts-used", "4",
			"--expert-ff", "64", "-o", model); code != 0 {
			t.Fatalf("%s: exit %d: %s%s", load, code, out, errOut)
		}
		code, out, errOut := moerun(t, "run", "-m", model, "-p", "a", "-n", "400", "--ignore-eos", "-t", "1", "--seed", "3",
			"--sim-gpu", "1GiB", "-ngl", "99", "-ot", "exps=CPU", "--expert-cache", strconv.Itoa(slots), "--expert-stats", stats)
		if code != 0 {
			t.Fatalf("%s: run: exit %d: %s%s", load, code, out, errOut)
		}
		m := hitRate.FindStringSubmatch(errOut)
		if m == nil {
			t.Fatalf("%s: no expert cache report in %s", load, errOut)
		}
		measured, _ := strconv.ParseFloat(m[1], 64)
		var top, all float64
		for _, l := range readExpertStats(t, stats).Layers {
			counts := make([]float64, len(l.Experts))
			for i, e := range l.Experts {
				counts[i] = float64(e.Selected)
				all += counts[i]
			}
			slices.Sort(counts)
			for _, c := range counts[len(counts)-slots:] {
				top += c
			}
		}
		predicted := 100 * top / all
		t.Logf("%s: hit rate %.1f%%, the recorded routing's %d most-used experts per layer got %.1f%%", load, measured, slots, predicted)
		if measured < predicted-8 || measured > predicted+8 {
			t.Errorf("%s: hit rate %.1f%%, the statistics predict %.1f%%", load, measured, predicted)
		}
	}
}

// TestServeExpertCacheMetrics: serve with --expert-cache on a simulated GPU exports the
// cache's counters on /metrics once a completion ran, and its hits and misses add up to
// the routed slots of the cached layers.
func TestServeExpertCacheMetrics(t *testing.T) {
	url, stop, stderr := startServe(t, "-m", tinyQwen, "--host", "127.0.0.1", "--port", "0", "-np", "1", "-t", "1",
		"--sim-gpu", "1GiB", "-ngl", "99", "-ot", "exps=CPU", "--expert-cache", "2")
	defer func() {
		if code := stop(); code != 0 {
			t.Errorf("exit %d: %s", code, stderr)
		}
	}()
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"Hello","max_tokens":16,"temperature":0}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/v1/completions: %d %s", resp.StatusCode, body)
	}
	resp, err = http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	value := func(name string) float64 {
		m := regexp.MustCompile(`(?m)^moerun_` + name + ` (\S+)$`).FindSubmatch(metrics)
		if m == nil {
			t.Fatalf("no moerun_%s in /metrics:\n%s", name, metrics)
		}
		v, _ := strconv.ParseFloat(string(m[1]), 64)
		return v
	}
	hits, misses, layers := value("expert_cache_hits_total"), value("expert_cache_misses_total"), value("expert_cache_layers")
	if value("expert_cache_slots") != 2 || layers != 4 || value("expert_cache_bytes") <= 0 {
		t.Errorf("slots %g, layers %g, bytes %g", value("expert_cache_slots"), layers, value("expert_cache_bytes"))
	}
	// tiny-qwen3moe routes 2 experts a token; "Hello" and 16 tokens are at least 17 evaluated.
	if routed := hits + misses; routed < 2*4*17 || hits == 0 || value("expert_cache_moved_bytes_total") <= 0 {
		t.Errorf("%g hits and %g misses, %g bytes moved", hits, misses, value("expert_cache_moved_bytes_total"))
	}
}

// TestBenchExpertCache: bench's JSON rows carry the cache's account (--expert-cache).
func TestBenchExpertCache(t *testing.T) {
	code, out, errOut := moerun(t, "bench", "-m", tinyQwen, "--sim-gpu", "1GiB", "-ngl", "99", "-ot", "exps=CPU", "--expert-cache", "2",
		"-p", "0", "-n", "16", "-r", "1", "-t", "1", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rows []benchResult
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 1 {
		t.Fatalf("%v: %s", err, out)
	}
	c := rows[0].ExpertCache
	if c == nil || c.Layers != 4 || c.Slots != 2 || c.HitRate <= 0 || c.HitRate >= 1 || c.Swaps == 0 || c.MovedBytes <= 0 || c.SlotBytes <= 0 {
		t.Errorf("expert cache account %+v", c)
	}
}
