package placement

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/tensor"
)

// rangeRegex matches exactly lo..hi, checked against every number up to 1100.
func TestRangeRegex(t *testing.T) {
	check := func(lo, hi int) {
		re := regexp.MustCompile("^(" + strings.Join(rangeRegex(lo, hi), "|") + ")$")
		for n := 0; n <= 1100; n++ {
			if got := re.MatchString(fmt.Sprint(n)); got != (lo <= n && n <= hi) {
				t.Fatalf("%d..%d: %s matches %d: %v", lo, hi, re, n, got)
			}
		}
		if strings.ContainsAny(re.String(), ",{}") {
			t.Fatalf("%d..%d: %s has a quantifier or comma, which -ot cannot carry", lo, hi, re)
		}
	}
	for lo := 0; lo <= 130; lo++ {
		for hi := lo; hi <= 130; hi += 1 + hi/20 {
			check(lo, hi)
		}
	}
	check(7, 1009)
	check(99, 1000)
}

// A blocks pattern moves exactly its blocks' routed experts, through Place's own regex.
func TestBlocksPatternPlace(t *testing.T) {
	blocks := []int{3, 5, 6, 7, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 47}
	r := DefaultRules()
	r.Fit, r.GPULayers, r.CtxSize = false, NGLAll, 4096
	items, err := ParseOverrideTensor("-ot", blocksPattern(blocks)+"=CPU")
	if err != nil {
		t.Fatal(err)
	}
	r.Items = items
	plan, err := Place(presetModel(t, "qwen3-30b-a3b:q4_k_m"), r, []backend.Device{backend.GPU(0, 1<<40), backend.CPU(0)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tu := range plan.Tensors {
		want := "CUDA0"
		if tu.Class == gguf.ClassRoutedExpert && slices.Contains(blocks, tu.Layer) || tu.Name == "token_embd.weight" {
			want = "CPU"
		}
		if tu.Device != want {
			t.Errorf("%s on %s, want %s", tu.Name, tu.Device, want)
		}
	}
	if len(plan.Rules[0].Warnings) > 0 {
		t.Errorf("lint: %q", plan.Rules[0].Warnings)
	}
}

func searchDevices(gpus ...int64) []backend.Device {
	var devs []backend.Device
	for i, g := range gpus {
		devs = append(devs, backend.GPU(i, g))
	}
	return append(devs, backend.CPU(512<<30))
}

func searchHardware(gpus int) Hardware {
	g, _ := LookupGPUModel("rtx3090")
	hw := Hardware{CPU: CPUSpec{Threads: 16, DecodeBandwidth: 50, DecodeSource: "flag"}}
	for range gpus {
		hw.GPUs = append(hw.GPUs, g.Spec())
	}
	return hw
}

func searchRules(ctx int) Rules {
	r := DefaultRules()
	r.CtxSize, r.KeepMargin = ctx, true
	return r
}

// The best placement is the fewest expert layers in RAM that fit: one fewer does not fit;
// its flags, applied to the rules, are the rules evaluated; more layers in RAM only slow it.
func TestSearchSingleGPU(t *testing.T) {
	m := presetModel(t, "qwen3-30b-a3b:q4_k_m")
	devs := searchDevices(8 << 30)
	res, err := Search(m, searchRules(4096), devs, searchHardware(1), SearchOptions{UBatches: []int{512}, CacheTypes: []tensor.Type{tensor.F16}})
	if err != nil {
		t.Fatal(err)
	}
	best := res.Best
	if best == nil || best.Direction == "" || best.CPUExperts <= 0 || best.CPUExperts >= 48 {
		t.Fatalf("best: %+v (%s)", best, res.Failure)
	}
	if !slices.Contains(flagNames(best.Flags), "--n-cpu-moe") {
		t.Errorf("the first blocks' experts in RAM should be written --n-cpu-moe: %v", best.Flags)
	}
	r := searchRules(4096)
	if err := applyFlags(&r, best.Flags); err != nil || !rulesEqual(r, best.Rules) {
		t.Errorf("flags %v give %+v, evaluated %+v (%v)", best.Flags, r, best.Rules, err)
	}
	fewer := searchRules(4096)
	fewer.Fit = false
	if err := applyFlags(&fewer, []Flag{{"-ngl", "999"}, {"--n-cpu-moe", fmt.Sprint(best.CPUExperts - 1)}}); err != nil {
		t.Fatal(err)
	}
	if plan, err := Place(m, fewer, devs); err != nil || plan.checkFits() {
		t.Errorf("%d expert layers in RAM fit too (%v): the search stopped short", best.CPUExperts-1, err)
	}
	if len(res.Sweep) != 49 {
		t.Fatalf("sweep of %d points", len(res.Sweep))
	}
	for n, pt := range res.Sweep {
		if pt.Fits != (n >= best.CPUExperts) {
			t.Errorf("sweep: %d layers in RAM fits=%v", n, pt.Fits)
		}
		if n > best.CPUExperts && pt.TG >= res.Sweep[n-1].TG {
			t.Errorf("sweep: %d layers in RAM %.2f t/s ≥ %d layers %.2f t/s", n, pt.TG, n-1, res.Sweep[n-1].TG)
		}
	}
	if res.Sweep[best.CPUExperts].TG != best.Prediction.TG {
		t.Errorf("sweep at the best point %.3f, best %.3f", res.Sweep[best.CPUExperts].TG, best.Prediction.TG)
	}
}

func flagNames(fs []Flag) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Name)
	}
	return out
}

func rulesEqual(a, b Rules) bool {
	return fmt.Sprintf("%+v", a) == fmt.Sprintf("%+v", b)
}

// What the objectives trade: a pp objective takes a larger ubatch (its compute buffer costs
// expert layers, so decode is slower), tg the smaller.
func TestSearchObjectives(t *testing.T) {
	m := presetModel(t, "qwen3-30b-a3b:q4_k_m")
	devs := searchDevices(12 << 30)
	run := func(o Objective) *Candidate {
		res, err := Search(m, searchRules(8192), devs, searchHardware(1), SearchOptions{Objective: o, CacheTypes: []tensor.Type{tensor.F16}})
		if err != nil || res.Best == nil {
			t.Fatalf("%v: %v %+v", o, err, res)
		}
		return res.Best
	}
	tg, pp, bal := run(ObjectiveTG), run(ObjectivePP), run(ObjectiveBalanced)
	if pp.UBatch <= tg.UBatch || pp.Prediction.PP <= tg.Prediction.PP || tg.Prediction.TG <= pp.Prediction.TG {
		t.Errorf("tg: ub %d %.1f/%.0f; pp: ub %d %.1f/%.0f", tg.UBatch, tg.Prediction.TG, tg.Prediction.PP, pp.UBatch, pp.Prediction.TG, pp.Prediction.PP)
	}
	req := func(c *Candidate) float64 { return 4096/c.Prediction.PP + 512/c.Prediction.TG }
	if req(bal) > req(tg) || req(bal) > req(pp) {
		t.Errorf("balanced: a request takes %.2f s, tg's choice %.2f s, pp's %.2f s", req(bal), req(tg), req(pp))
	}
}

// Property: whatever the machine, every placement fit returns fits as Place sees it, with
// the flags as printed; a machine too small gets no placement and a reason.
func TestSearchNeverReturnsOverflow(t *testing.T) {
	specs := []string{"qwen3-30b-a3b:q4_k_m", "deepseek-v2-lite:q4_k_m", "gpt-oss-20b:mxfp4", "mixtral-8x7b:q4_0", "qwen3.5-35b-a3b:q4_k_m", "glm-4.5-air:q4_k_m"}
	models := map[string]Model{}
	rng := rand.New(rand.NewPCG(8, 8))
	noFit, kinds := 0, map[string]int{}
	for i := range 40 {
		spec := specs[i%len(specs)]
		if _, ok := models[spec]; !ok {
			models[spec] = presetModel(t, spec)
		}
		var gpus []int64
		for range rng.IntN(4) {
			gpus = append(gpus, int64(2+rng.IntN(40))<<30)
		}
		devs := searchDevices(gpus...)
		devs[len(devs)-1] = backend.CPU(int64(16+rng.IntN(120)) << 30)
		r := searchRules(1024 << rng.IntN(6))
		if rng.IntN(3) == 0 {
			r.FitTarget = []int64{int64(rng.IntN(2048)) << 20}
		}
		opts := SearchOptions{Objective: Objective(rng.IntN(3)), UBatches: []int{256 << rng.IntN(4)}, CacheTypes: []tensor.Type{[]tensor.Type{tensor.F16, tensor.Q8_0}[rng.IntN(2)]}, RunnerUps: 2}
		name := fmt.Sprintf("%s/gpus=%v/ram=%d/ctx=%d", spec, gpus, devs[len(devs)-1].FreeBytes>>30, r.CtxSize)
		res, err := Search(models[spec], r, devs, searchHardware(len(gpus)), opts)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if res.Best == nil {
			if res.Failure == "" {
				t.Errorf("%s: nothing fits and no reason", name)
			}
			noFit++
			continue
		}
		switch b := res.Best; {
		case b.GPULayers != NGLAll:
			kinds["whole layers in RAM"]++
		case b.CPUExperts == 0:
			kinds["all in VRAM"]++
		default:
			kinds["experts in RAM"]++
		}
		for _, c := range append([]*Candidate{res.Best}, res.RunnerUps...) {
			rr := searchRules(r.CtxSize)
			rr.FitTarget = r.FitTarget
			if err := applyFlags(&rr, c.Flags); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			plan, err := Place(models[spec], rr, devs)
			if err != nil {
				t.Fatalf("%s: %v: %v", name, c.Flags, err)
			}
			if !plan.checkFits() {
				t.Errorf("%s: %v does not fit: %s", name, c.Flags, plan.Verdict())
			}
			if !c.Prediction.Fits || c.Prediction.TG <= 0 {
				t.Errorf("%s: returned a candidate without a speed: %+v", name, c.Prediction)
			}
		}
	}
	// The machines drawn must exercise every outcome, or the property says little.
	t.Logf("nothing fits: %d; best placements: %v", noFit, kinds)
	if noFit == 0 || len(kinds) < 3 {
		t.Errorf("the random machines cover too few outcomes: %d without a fit, best kinds %v", noFit, kinds)
	}
}

// Several GPUs: the layer split is pinned with -ts, each GPU sheds its own experts, and the
// result fits.
func TestSearchTwoGPUs(t *testing.T) {
	m := presetModel(t, "qwen3-235b-a22b:q4_k_m")
	devs := searchDevices(24<<30, 12<<30)
	res, err := Search(m, searchRules(4096), devs, searchHardware(2), SearchOptions{UBatches: []int{512}, CacheTypes: []tensor.Type{tensor.F16}})
	if err != nil || res.Best == nil {
		t.Fatalf("%v %+v", err, res)
	}
	b := res.Best
	if !slices.Contains(flagNames(b.Flags), "-ts") || !slices.Contains(flagNames(b.Flags), "-ot") {
		t.Errorf("flags %v: want -ts and an -ot list of blocks", b.Flags)
	}
	for _, d := range b.Plan.Devices {
		if d.Device.Kind == backend.KindGPU && d.Weights < 8<<30 {
			t.Errorf("%s holds only %s of weights: its experts were not filled in", d.Device.Name, humanBytes(d.Weights))
		}
	}
}

// Settings fit chooses itself are refused from the user; a context is required.
func TestSearchRefusesFixedPlacement(t *testing.T) {
	m := presetModel(t, "qwen3-30b-a3b:q4_k_m")
	r := searchRules(4096)
	r.GPULayers = 10
	if _, err := Search(m, r, searchDevices(8<<30), searchHardware(1), SearchOptions{}); err == nil {
		t.Error("-ngl accepted")
	}
	if _, err := Search(m, searchRules(0), searchDevices(8<<30), searchHardware(1), SearchOptions{}); err == nil {
		t.Error("no context accepted")
	}
	if _, err := Search(m, searchRules(4096), []backend.Device{backend.GPU(0, 0), backend.CPU(0)}, searchHardware(1), SearchOptions{}); err == nil {
		t.Error("a GPU of unknown size accepted")
	}
}

// The search's speed on the largest presets (docs/benchmarks.md).
func BenchmarkSearchDeepSeekV3(b *testing.B) {
	benchmarkSearch(b, "deepseek-v3:q4_k_m", 24<<30)
}

func BenchmarkSearchQwen3235B(b *testing.B) {
	benchmarkSearch(b, "qwen3-235b-a22b:q4_k_m", 24<<30)
}

func benchmarkSearch(b *testing.B, spec string, gpu int64) {
	m := presetModel(b, spec)
	devs := searchDevices(gpu)
	for b.Loop() {
		res, err := Search(m, searchRules(32768), devs, searchHardware(1), SearchOptions{})
		if err != nil || res.Best == nil {
			b.Fatal(err, res.Failure)
		}
		b.ReportMetric(float64(res.Evaluated), "placements/op")
	}
}
