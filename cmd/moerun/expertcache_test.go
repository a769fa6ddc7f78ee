package main

import (
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
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
