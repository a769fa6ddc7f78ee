package moe

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/backend/sim"
	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/placement"
)

// splitByExpert rewrites a plan's routed-expert stacks (weights and biases) as split by
// expert, as an -ot rule with an expert selector makes them: expert e of each MoE layer
// goes to devices[pick(layer, e)], the same for every stack of the layer. A share of
// one device holds all its experts; a layer whose experts all go to one device stays
// whole there.
func splitByExpert(plan *placement.Plan, experts int, devices []string, pick func(layer, expert int) int) *placement.Plan {
	out := *plan
	out.Tensors = nil
	byLayer := map[int][][]int{} // each layer's experts, per device, picked once
	for _, u := range plan.Tensors {
		if u.Class != gguf.ClassRoutedExpert || u.Layer < 0 {
			out.Tensors = append(out.Tensors, u)
			continue
		}
		lists, ok := byLayer[u.Layer]
		if !ok {
			lists = make([][]int, len(devices))
			for e := range experts {
				d := pick(u.Layer, e)
				lists[d] = append(lists[d], e)
			}
			byLayer[u.Layer] = lists
		}
		if whole := slices.IndexFunc(lists, func(l []int) bool { return len(l) == experts }); whole >= 0 {
			u.Device = devices[whole]
			out.Tensors = append(out.Tensors, u)
			continue
		}
		for d, list := range lists {
			if len(list) == 0 {
				continue
			}
			share := u
			share.Device, share.Experts, share.Bytes = devices[d], list, u.Bytes/int64(experts)*int64(len(list))
			out.Tensors = append(out.Tensors, share)
		}
	}
	return &out
}

// TestExpertSplit: a model whose expert stacks a plan splits by expert between simulated
// GPUs and the CPU — each expert's whole network on one device, any split — gives the CPU
// run's logits bit for bit (every share multiplies only the slots routed to its experts,
// the others' rows are zero, and the shares' outputs add up before the weighted sum), on
// models with shared experts (deepseek2, qwen2moe), expert biases (gpt-oss) and a shared
// expert gate (qwen35moe), with the host's share viewed in the mapping or read into memory
// (--no-mmap). Each GPU holds exactly its shares' bytes besides its other weights; and a
// decode step with the attention on the GPU and the experts split between it and the CPU
// crosses no more than -ot exps=CPU does: the block of input and routing out, the CPU
// experts' rows back, one wait, per MoE layer.
func TestExpertSplit(t *testing.T) {
	models := []struct{ golden, path string }{
		{"tiny-qwen3moe-q4_k", quantModel("q4_k")},
		{"tiny-deepseek2", deepseekModel},
		{"tiny-qwen2moe", archModel("qwen2moe")},
		{"tiny-gpt-oss", archModel("gpt-oss")},
		{"tiny-qwen35moe", archModel("qwen35moe")},
	}
	splits := []struct {
		name  string
		ngl   int
		gpus  int
		exps  string // an -ot rule for the stacks before they are split, or ""
		mmap  bool
		split func(rng *rand.Rand) func(layer, expert int) int
	}{
		{"experts on CPU, random quarter on GPU", 99, 1, "exps=CPU", true, func(rng *rand.Rand) func(int, int) int {
			return func(int, int) int { return boolRank(rng.IntN(4) != 0) } // devices: GPU0, CPU
		}},
		{"--no-mmap, even experts on GPU", 99, 1, "exps=CPU", false, func(*rand.Rand) func(int, int) int {
			return func(_, e int) int { return e % 2 }
		}},
		{"two GPUs and the CPU", 99, 2, "", true, func(rng *rand.Rand) func(int, int) int {
			return func(int, int) int { return rng.IntN(3) }
		}},
		{"attention on the CPU, experts shared with a GPU", 0, 1, "", true, func(rng *rand.Rand) func(int, int) int {
			return func(int, int) int { return rng.IntN(2) }
		}},
	}
	for _, gm := range models {
		prompt, decode, want := cpuSteps(t, gm.golden, gm.path)
		for _, sp := range splits {
			t.Run(gm.golden+"/"+sp.name, func(t *testing.T) {
				f, pool, host := openHost(t, gm.path, 2)
				backends := []backend.Backend{host}
				devs := []backend.Device{host.Device()}
				var gpus []*sim.Backend
				for i := range sp.gpus {
					g := sim.New(i, 1<<30, pool)
					t.Cleanup(func() { g.Close() })
					gpus = append(gpus, g)
					backends = append(backends, g)
					devs = append(devs, g.Device())
				}
				rules := placement.DefaultRules()
				rules.GPULayers = sp.ngl
				if sp.exps != "" {
					items, err := placement.ParseOverrideTensor("-ot", sp.exps)
					if err != nil {
						t.Fatal(err)
					}
					rules.Items = items
				}
				if !sp.mmap {
					rules.LoadMode = placement.LoadNone
				}
				plan := placeModel(t, f, rules, devs)
				experts := plan.Model.Experts
				names := []string{}
				for _, g := range gpus {
					names = append(names, g.Device().Name)
				}
				names = append(names, host.Device().Name)
				split := splitByExpert(plan, experts, names, sp.split(rand.New(rand.NewPCG(7, uint64(len(sp.name))))))
				m, err := Load(f, split, backends)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { m.Close() })
				splitLayers := 0
				for _, l := range m.layers {
					if ffn, ok := l.ffn.(*moeFFN); ok && len(ffn.experts) > 1 {
						splitLayers++
					}
				}
				if splitLayers == 0 {
					t.Fatal("no layer is split: the case tests nothing")
				}
				for _, g := range gpus {
					var weights int64
					for _, u := range split.Tensors {
						if u.Device == g.Device().Name {
							weights += u.Bytes
						}
					}
					tables := int64(0)
					for _, l := range m.layers {
						if ffn, ok := l.ffn.(*moeFFN); ok {
							for _, s := range ffn.experts {
								if s.table.Valid() && s.table.Device() == g.Device().Name {
									tables += s.table.Bytes()
								}
							}
						}
					}
					staging := stagingBytes(deviceUse(t, plan, g.Device().Name))
					if got := g.Used(); got != weights+tables+staging {
						t.Errorf("%s holds %d bytes of weights, the split plan gives it %d (+%d of expert tables, %d of op offload staging)",
							g.Device().Name, got, weights, tables, staging)
					}
				}
				tm := &testModel{Model: m, file: f, pool: pool}
				o := DefaultContextOptions()
				o.Size = plan.Context.NCtx
				var gpu backend.Counter
				if sp.exps != "" {
					gpu = gpus[0]
				}
				got, traffic := stepsOn(t, tm.context(t, o), prompt, decode, gpu)
				if !slices.Equal(got, want) {
					t.Errorf("logits differ from the CPU run's: %+v", compareLogits(got, want))
				}
				if gpu == nil {
					return
				}
				moeLayers := 0
				for _, l := range m.layers {
					if _, ok := l.ffn.(*moeFFN); ok {
						moeLayers++
					}
				}
				want := backend.Traffic{CopiesIn: 1 + moeLayers, CopiesOut: 1 + moeLayers, Syncs: 1 + moeLayers}
				traffic.BytesIn, traffic.BytesOut, traffic.Ops = 0, 0, 0
				if traffic != want {
					t.Errorf("a decode step's crossings: %+v, want %+v (%d MoE layers)", traffic, want, moeLayers)
				}
			})
		}
	}
}

// TestExpertSplitMismatch: a plan that splits a layer's stacks differently (an expert's
// gate on one device and its up projection on another) is refused at load with the
// advice to give the stacks the same selectors.
func TestExpertSplitMismatch(t *testing.T) {
	f, pool, host := openHost(t, qwenModel, 2)
	gpu := sim.New(0, 1<<30, pool)
	t.Cleanup(func() { gpu.Close() })
	plan := placeModel(t, f, placement.DefaultRules(), []backend.Device{host.Device(), gpu.Device()})
	experts := plan.Model.Experts
	split := splitByExpert(plan, experts, []string{gpu.Device().Name, host.Device().Name}, func(_, e int) int { return e % 2 })
	for i := range split.Tensors {
		u := &split.Tensors[i]
		if u.Experts != nil && strings.Contains(u.Name, "ffn_up_exps") {
			u.Device = map[string]string{"CPU": gpu.Device().Name}[u.Device] + map[string]string{gpu.Device().Name: "CPU"}[u.Device]
		}
	}
	_, err := Load(f, split, []backend.Backend{host, gpu})
	if err == nil || !strings.Contains(err.Error(), "same expert selectors") {
		t.Fatalf("Load of mismatched splits: %v, want the advice to give the stacks the same selectors", err)
	}
}

// TestExpertSelectorRun: an -ot expert selector, placed by package placement (no plan
// edited by hand), runs on a simulated GPU with the CPU run's logits; the GPU holds the
// weights place reports.
func TestExpertSelectorRun(t *testing.T) {
	gm := goldenModels[0]
	prompt, decode, want := cpuSteps(t, gm.golden, gm.path)
	f, pool, host := openHost(t, gm.path, 2)
	gpu := sim.New(0, 1<<30, pool)
	t.Cleanup(func() { gpu.Close() })
	rules := placement.DefaultRules()
	rules.GPULayers = 99
	items, err := placement.ParseOverrideTensor("-ot", `blk\.(0|2)\.ffn_.*_exps@1+3-5=CUDA0,exps=CPU`)
	if err != nil {
		t.Fatal(err)
	}
	rules.Items = items
	m, plan := loadPlaced(t, f, pool, host, gpu, rules)
	split := 0
	for _, l := range m.layers {
		if ffn, ok := l.ffn.(*moeFFN); ok && len(ffn.experts) == 2 {
			split++
		}
	}
	if split != 2 {
		t.Fatalf("%d layers split, want 2", split)
	}
	// Beside place's weights, each split layer's GPU share has its table, an int32 per expert.
	tables := int64(split * 4 * m.Config.Router.Experts)
	if use := deviceUse(t, plan, gpu.Device().Name); gpu.Used() != use.Weights+stagingBytes(use)+tables {
		t.Errorf("the GPU holds %d bytes, place says %d of weights and %d of staging, + %d of tables", gpu.Used(), use.Weights, use.Staging, tables)
	}
	o := DefaultContextOptions()
	o.Size = plan.Context.NCtx
	if got, _ := stepsOn(t, m.context(t, o), prompt, decode, nil); !slices.Equal(got, want) {
		t.Errorf("logits differ from the CPU run's: %+v", compareLogits(got, want))
	}
}
