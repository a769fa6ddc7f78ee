package placement

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/moerun/moerun/backend"
)

func TestParseExpertCache(t *testing.T) {
	for in, want := range map[string]ExpertCache{"0": {}, "auto": {Slots: ExpertCacheAuto}, "auto:4": {Slots: ExpertCacheAuto, Swaps: 4}, "16": {Slots: 16}, "16:4": {Slots: 16, Swaps: 4}, "1:1": {Slots: 1, Swaps: 1}} {
		got, err := ParseExpertCache("--expert-cache", in)
		if err != nil || got != want {
			t.Errorf("ParseExpertCache(%q) = %+v, %v; want %+v", in, got, err, want)
		}
		if got.String() != in {
			t.Errorf("%+v prints as %q, parsed from %q", got, got.String(), in)
		}
	}
	for in, why := range map[string]string{"": "SLOTS", "-1": "SLOTS", "Auto": "SLOTS", "16:0": "SWAPS", "16:": "SWAPS", "x": "SLOTS", "16:2:3": "SWAPS", "70000": "65536"} {
		if _, err := ParseExpertCache("--expert-cache", in); err == nil || !strings.Contains(err.Error(), why) || !strings.Contains(err.Error(), "--expert-cache") {
			t.Errorf("ParseExpertCache(%q): %v, want an error naming the flag and %s", in, err, why)
		}
	}
}

func FuzzParseExpertCache(f *testing.F) {
	for _, s := range []string{"16", "16:4", "0", ":", "1:99999999999999999999", "-3:-3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseExpertCache("--expert-cache", s)
		if err != nil {
			return
		}
		if c.Slots < ExpertCacheAuto || c.Slots > maxCacheSlots || c.Swaps < 0 || c.Swaps > maxCacheSlots {
			t.Fatalf("%q gave %+v", s, c)
		}
		if again, err := ParseExpertCache("--expert-cache", c.String()); err != nil || again != c {
			t.Fatalf("%q gave %+v, which prints as %q and reads back as %+v, %v", s, c, c.String(), again, err)
		}
	})
}

// TestParseOffloadMinBatch: GGML_OP_OFFLOAD_MIN_BATCH reads as C's atoi does.
func TestParseOffloadMinBatch(t *testing.T) {
	for in, want := range map[string]int{"32": 32, " 8": 8, "+16x": 16, "-4": -4, "": 0, "abc": 0, "12 34": 12, "99999999999999999999": 2147483647} {
		if got := ParseOffloadMinBatch(in); got != want {
			t.Errorf("ParseOffloadMinBatch(%q) = %d, want %d", in, got, want)
		}
	}
}

// TestExpertCacheAuto: --expert-cache auto takes the most slots that leave -fitt's margin
// free on the GPU: one more would not fit; the context --fit chose is kept; a GPU of
// unknown size is refused; a placement without experts in RAM gets none.
func TestExpertCacheAuto(t *testing.T) {
	m := presetModel(t, "qwen3-30b-a3b:q4_k_m")
	items, err := ParseOverrideTensor("-ot", "exps=CPU")
	if err != nil {
		t.Fatal(err)
	}
	devs := []backend.Device{backend.GPU(0, 8<<30), backend.CPU(64 << 30)}
	r := DefaultRules()
	r.GPULayers, r.Items, r.CtxSize = 99, items, 8192
	r.ExpertCache = ExpertCache{Slots: ExpertCacheAuto, Swaps: 3}
	plan, err := Place(m, r, devs)
	if err != nil {
		t.Fatal(err)
	}
	slots := plan.Settings.ExpertCache.Slots
	gpu := plan.Devices[0]
	if slots <= 0 || plan.Settings.ExpertCache.Swaps != 3 || gpu.ExpertCache == 0 {
		t.Fatalf("auto gave %+v, %d bytes of cache", plan.Settings.ExpertCache, gpu.ExpertCache)
	}
	if fits, _ := gpu.Fits(); !fits {
		t.Errorf("auto's %d slots do not fit: %d + %d of %d", slots, gpu.Total, gpu.Margin, gpu.Capacity())
	}
	r.ExpertCache.Slots = slots + 1
	more, err := Place(m, r, devs)
	if err != nil {
		t.Fatal(err)
	}
	if fits, _ := more.Devices[0].Fits(); fits {
		t.Errorf("%d slots fit too: auto's %d is not the most", slots+1, slots)
	}
	if !strings.Contains(strings.Join(plan.Notes, "\n"), fmt.Sprintf("--expert-cache auto: %d slots", slots)) {
		t.Errorf("no note says what auto chose: %q", plan.Notes)
	}

	r.ExpertCache.Slots, r.Items = ExpertCacheAuto, nil // every expert on the GPU: nothing to cache
	if plan, err := Place(m, r, devs); err != nil || plan.Settings.ExpertCache.Slots != 0 {
		t.Errorf("all experts on the GPU: %v, %+v", err, plan.Settings.ExpertCache)
	}
	r.Items = items
	if _, err := Place(m, r, []backend.Device{backend.GPU(0, 0), backend.CPU(64 << 30)}); err == nil || !strings.Contains(err.Error(), "free memory is unknown") {
		t.Errorf("a GPU of unknown size: %v", err)
	}
}

// TestExpertCachePrediction, by hand on the tiny qwen3moe fixture (4 blocks of 16 experts, 4
// used) with the experts of blocks 0 and 1 in RAM and 4 slots: without statistics the slots
// serve 4/16 of those blocks' expert reads, which move from the CPU to the GPU; with
// statistics in which experts 0-3 take every token, they serve all of them.
func TestExpertCachePrediction(t *testing.T) {
	plan := tinyExpertPlan(t)
	hw := testHardware()
	base, err := Predict(plan, hw, PredictOptions{})
	if err != nil {
		t.Fatal(err)
	}
	plan.Settings.ExpertCache = ExpertCache{Slots: 4}
	hot := []uint64{100, 100, 100, 100, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	stats := readRouting(t, routingDocument(100, map[int][]uint64{0: hot, 1: hot, 2: hot, 3: hot}))
	for _, tc := range []struct {
		name  string
		stats *RoutingStats
		hits  float64
	}{{"uniform", nil, 0.25}, {"experts 0-3 hot", stats, 1}} {
		p, err := Predict(plan, hw, PredictOptions{Routing: tc.stats})
		if err != nil {
			t.Fatal(err)
		}
		cpu, cpu0 := deviceDecode(t, p, "CPU"), deviceDecode(t, base, "CPU")
		gpu, gpu0 := deviceDecode(t, p, "CUDA0"), deviceDecode(t, base, "CUDA0")
		moved := float64(cpu0.ExpertBytes) * tc.hits
		if math.Abs(p.Decode.CacheHits-tc.hits) > 1e-9 || math.Abs(float64(cpu0.ExpertBytes-cpu.ExpertBytes)-moved) > 1 ||
			math.Abs(float64(gpu.ExpertBytes-gpu0.ExpertBytes)-moved) > 1 {
			t.Errorf("%s: hits %.3f (want %.3f); CPU expert reads %d → %d, GPU %d → %d (want %.0f moved)",
				tc.name, p.Decode.CacheHits, tc.hits, cpu0.ExpertBytes, cpu.ExpertBytes, gpu0.ExpertBytes, gpu.ExpertBytes, moved)
		}
		if p.TG <= base.TG {
			t.Errorf("%s: the cache predicts %.1f tokens/s, no cache %.1f", tc.name, p.TG, base.TG)
		}
	}
}
