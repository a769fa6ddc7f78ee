package moe

import (
	"slices"
	"strings"
	"testing"

	"github.com/moerun/moerun/backend/sim"
	"github.com/moerun/moerun/placement"
)

// TestExpertCache: with -ngl 99 -ot exps=CPU on a simulated GPU and the expert cache on,
// a prompt and decode steps give the CPU run's logits bit for bit while the slots fill and
// swap (models with shared experts, expert biases, a shared-expert gate); the GPU holds
// the slots' bytes the stats report; the bytes moved are those the GPU saw staged, all
// between passes; and the hits and misses add up to the routed slots.
func TestExpertCache(t *testing.T) {
	models := []struct{ golden, path string }{
		{"tiny-qwen3moe-q4_k", quantModel("q4_k")},
		{"tiny-deepseek2", deepseekModel},
		{"tiny-gpt-oss", archModel("gpt-oss")},
		{"tiny-qwen35moe", archModel("qwen35moe")},
	}
	for _, gm := range models {
		t.Run(gm.golden, func(t *testing.T) {
			prompt := loadGolden(t, gm.golden).Prompts[0].Tokens
			decode := stretch(prompt, 12)
			want := runSteps(t, openModel(t, gm.path, 2), prompt, decode)
			f, pool, host := openHost(t, gm.path, 2)
			gpu := sim.New(0, 1<<30, pool)
			t.Cleanup(func() { gpu.Close() })
			rules := placement.DefaultRules()
			rules.GPULayers = 99
			items, err := placement.ParseOverrideTensor("-ot", "exps=CPU")
			if err != nil {
				t.Fatal(err)
			}
			rules.Items = items
			experts, err := f.Metadata.Uint(f.Metadata.Arch() + ".expert_count")
			if err != nil {
				t.Fatal(err)
			}
			slots := int(experts) / 4
			rules.ExpertCache = placement.ExpertCache{Slots: slots, Swaps: 1}
			m, plan := loadPlaced(t, f, pool, host, gpu, rules)
			use := deviceUse(t, plan, gpu.Device().Name)
			if got := gpu.Used(); got != use.Weights+stagingBytes(use) || use.ExpertCache == 0 {
				t.Errorf("the GPU holds %d bytes of weights and staging, place's report says %d + %d (%d of them the expert cache's)",
					got, use.Weights, use.Staging, use.ExpertCache)
			}
			cached := 0
			for _, l := range m.layers {
				if f, ok := l.ffn.(*moeFFN); ok && f.cache != nil {
					cached++
				}
			}
			st := m.ExpertCacheStats()
			if st.Layers != cached || cached == 0 || st.Slots != slots {
				t.Fatalf("stats say %d layers of %d slots, %d layers hold slots", st.Layers, st.Slots, cached)
			}
			if st.SlotBytes > use.ExpertCache {
				t.Errorf("the slots take %d bytes, place counts %d for the cache", st.SlotBytes, use.ExpertCache)
			}
			o := DefaultContextOptions()
			o.Size = plan.Context.NCtx
			uploaded := gpu.Traffic().BytesUploaded
			got, _ := stepsOn(t, m.context(t, o), prompt, decode, nil)
			if !slices.Equal(got, want) {
				t.Errorf("logits differ from the CPU run's: %+v", compareLogits(got, want))
			}
			st = m.ExpertCacheStats()
			k := int(m.Config.Router.Used)
			if routed := uint64((len(prompt) + len(decode)) * k * cached); st.Hits+st.Misses > routed || st.Hits+st.Misses < routed/2 {
				t.Errorf("%d hits and %d misses for %d routed slots", st.Hits, st.Misses, routed)
			}
			if st.Hits == 0 || st.Swaps == 0 {
				t.Errorf("the cache never hit (%d) or never swapped (%d)", st.Hits, st.Swaps)
			}
			if staged := gpu.Traffic().BytesUploaded - uploaded; staged < st.BytesMoved*9/10 || staged > st.BytesMoved {
				t.Errorf("the GPU saw %d bytes staged, the cache says it moved %d (the bias rows count too)", staged, st.BytesMoved)
			}
			t.Logf("%d layers × %d slots: hit rate %.2f, %d swaps, %d bytes moved", st.Layers, st.Slots, st.HitRate(), st.Swaps, st.BytesMoved)
		})
	}
}

// TestExpertCacheRefused: a cache where no layer has its experts in RAM under a GPU
// attention, of a size the model cannot hold, or enabled twice, is refused with the reason.
func TestExpertCacheRefused(t *testing.T) {
	f, pool, host := openHost(t, qwenModel, 2)
	gpu := sim.New(0, 1<<30, pool)
	t.Cleanup(func() { gpu.Close() })
	rules := placement.DefaultRules()
	rules.GPULayers = 99
	m, _ := loadPlaced(t, f, pool, host, gpu, rules)
	if err := m.EnableExpertCache(ExpertCacheOptions{Slots: 2}); err == nil || !strings.Contains(err.Error(), "-ot exps=CPU") {
		t.Errorf("all experts on the GPU: %v", err)
	}
	items, _ := placement.ParseOverrideTensor("-ot", "exps=CPU")
	rules.Items = items
	m, _ = loadPlaced(t, f, pool, host, gpu, rules)
	e := m.Config.Router.Experts
	for _, slots := range []int{0, e} {
		if err := m.EnableExpertCache(ExpertCacheOptions{Slots: slots}); err == nil || !strings.Contains(err.Error(), "want 1 to") {
			t.Errorf("%d slots: %v", slots, err)
		}
	}
	if err := m.EnableExpertCache(ExpertCacheOptions{Slots: 2}); err != nil {
		t.Fatal(err)
	}
	if err := m.EnableExpertCache(ExpertCacheOptions{Slots: 2}); err == nil {
		t.Error("enabled twice without an error")
	}
}
