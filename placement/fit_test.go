package placement

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/placement/placetest"
)

func checkWithinTargets(t *testing.T, plan *Plan) {
	t.Helper()
	for _, d := range plan.Devices {
		if d.Device.Kind == backend.KindGPU && d.Total > d.Capacity()-d.Margin {
			t.Errorf("%s: %d MiB used of %d MiB free with a %d MiB margin", d.Device.Name, d.Total>>20, d.Capacity()>>20, d.Margin>>20)
		}
	}
}

// llama.cpp's fit-params README: Qwen3-30B-A3B f16 on a 24,077 MiB RTX 4090, one sequence.
// llama.cpp projected 61,807 MiB for the full 40,960-token context, reduced the context to
// the 4,096 minimum and kept the experts of most layers on the CPU. (That README predates
// the output-layer-first -ngl, so only the shape of the answer is compared.)
func TestFitQwen3_30B(t *testing.T) {
	m := qwen30B(t, placetest.F16)
	r := DefaultRules()
	r.Parallel = 1
	plan := place(t, m, r, []backend.Device{backend.GPU(0, 24077<<20), backend.CPU(128 << 30)})
	fit := plan.Fit
	if fit.Status != "fitted" || plan.Context.NCtx != 4096 {
		t.Fatalf("fit %q, context %d\n%s", fit.Status, plan.Context.NCtx, strings.Join(fit.Log, "\n"))
	}
	if first := fit.Log[0]; !strings.HasPrefix(first, "projected to use 61") { // 61,807 MiB in the README
		t.Errorf("first projection: %s", first)
	}
	if !strings.HasPrefix(fit.Args, `-c 4096 -ngl 49 -ot "blk\.16\.ffn_down.*=CPU,blk\.17\.ffn_(up|down|gate_up|gate)_(ch|)exps=CPU,`) {
		t.Errorf("args: %s", fit.Args)
	}
	checkWithinTargets(t, plan)
	if plan.Settings.GPULayers != 49 {
		t.Errorf("%d layers offloaded", plan.Settings.GPULayers)
	}
	// llama.cpp's fit writes an override for index 48, the output layer, which matches
	// nothing: the lint says so.
	last := plan.Rules[len(plan.Rules)-1]
	if last.Item.Kind != ItemFit || !strings.Contains(last.Item.Pattern, `blk\.48\.`) || !hasWarning(last, "matches no tensor") {
		t.Errorf("last fit rule: %+v", last)
	}
}

// Fit gives up on the layers when the user set -ngl, but keeps the smaller context.
func TestFitRespectsUserSettings(t *testing.T) {
	m := qwen30B(t, placetest.F16)
	r := DefaultRules()
	r.Parallel, r.GPULayers = 1, 99
	plan := place(t, m, r, []backend.Device{backend.GPU(0, 24077<<20), backend.CPU(128 << 30)})
	if plan.Fit.Status != "gave up: n_gpu_layers already set by user to 99, abort" || plan.Context.NCtx != 4096 {
		t.Errorf("fit %q, context %d", plan.Fit.Status, plan.Context.NCtx)
	}
	// -c given: no context change either.
	r.CtxSize = 8192
	if plan := place(t, m, r, []backend.Device{backend.GPU(0, 24077<<20), backend.CPU(128 << 30)}); plan.Context.NCtx != 8192 {
		t.Errorf("context %d, want the user's 8192", plan.Context.NCtx)
	}
	// -c 0 asks for the full context: fit must not reduce it.
	r.CtxSize, r.FitMinCtx = 0, 1<<32-1
	if plan := place(t, m, r, []backend.Device{backend.GPU(0, 24077<<20), backend.CPU(128 << 30)}); plan.Context.NCtx != 40960 {
		t.Errorf("-c 0: context %d, want 40960", plan.Context.NCtx)
	}
	// --fit off: the full context and everything on the GPU, over capacity.
	r = DefaultRules()
	r.Fit = false
	plan = place(t, m, r, []backend.Device{backend.GPU(0, 24077<<20), backend.CPU(128 << 30)})
	if fits, _ := plan.Devices[0].Fits(); fits || !strings.HasPrefix(plan.Verdict(), "does NOT fit") {
		t.Errorf("fit off: %s", plan.Verdict())
	}
}

// Without a GPU, fit checks the host's memory and can only shorten the context.
func TestFitHostOnly(t *testing.T) {
	m := qwen30B(t, placetest.F16)
	r := DefaultRules()
	r.Parallel = 1
	plan := place(t, m, r, []backend.Device{backend.CPU(128 << 30)})
	if plan.Fit.Status != "no changes needed" || plan.Context.NCtx != 40960 {
		t.Errorf("128 GiB: %q, context %d", plan.Fit.Status, plan.Context.NCtx)
	}
	plan = place(t, m, r, []backend.Device{backend.CPU(60 << 30)})
	if plan.Fit.Status != "fitted by reducing the context" || plan.Context.NCtx >= 40960 || plan.Context.NCtx%256 != 0 {
		t.Errorf("60 GiB: %q, context %d", plan.Fit.Status, plan.Context.NCtx)
	}
	if cpu := plan.Devices[len(plan.Devices)-1]; cpu.Total > cpu.Capacity()-cpu.Margin {
		t.Errorf("60 GiB: %d MiB used", cpu.Total>>20)
	}
	plan = place(t, m, r, []backend.Device{backend.CPU(40 << 30)})
	if !strings.HasPrefix(plan.Fit.Status, "gave up: was unable to fit model into system memory") || plan.Context.NCtx != 4096 {
		t.Errorf("40 GiB: %q, context %d", plan.Fit.Status, plan.Context.NCtx)
	}
}

// Two GPUs: fit distributes the layers (-ts) and keeps each within its target.
func TestFitTwoGPUs(t *testing.T) {
	m := qwen235B(t)
	r := DefaultRules()
	r.CtxSize = 16384
	devs := []backend.Device{backend.GPU(0, 24<<30), backend.GPU(1, 24<<30), backend.CPU(256 << 30)}
	plan := place(t, m, r, devs)
	if plan.Fit.Status != "fitted" || len(plan.Settings.TensorSplit) != 2 || !strings.Contains(plan.Fit.Args, " -ts ") {
		t.Fatalf("fit %q, args %s", plan.Fit.Status, plan.Fit.Args)
	}
	checkWithinTargets(t, plan)
	for _, d := range plan.Devices[:2] {
		if d.Layers == 0 || d.Total < 16<<30 {
			t.Errorf("%s holds %d layers, %d MiB: fit left it mostly empty", d.Device.Name, d.Layers, d.Total>>20)
		}
	}
}

// TestAdviceIsPlanned: the verdict of a plan whose GPU is over suggests the smallest
// --n-cpu-moe that fits, and the test plans it: it fits, one block fewer does not. (Before,
// the count was estimated from an average block: DeepSeek-V3 on 24 GiB got 56, still
// 24.77 GiB over, where 60 fits.)
func TestAdviceIsPlanned(t *testing.T) {
	for _, c := range []struct {
		name string
		m    Model
		devs []backend.Device
		ngl  int
		from int // the user's own --n-cpu-moe, 0 for none
	}{
		{"DeepSeek-V3, 24 GiB", deepSeekModel(t), []backend.Device{backend.GPU(0, 24<<30), backend.CPU(512 << 30)}, 99, 0},
		{"DeepSeek-V3, 24 GiB, --n-cpu-moe 20", deepSeekModel(t), []backend.Device{backend.GPU(0, 24<<30), backend.CPU(512 << 30)}, 99, 20},
		{"Qwen3-30B-A3B, 8 GiB", qwen30B(t, placetest.Q4_K_M), []backend.Device{backend.GPU(0, 8<<30), backend.CPU(64 << 30)}, 99, 0},
		{"Qwen3-235B-A22B, two 24 GiB", qwen235B(t), []backend.Device{backend.GPU(0, 24<<30), backend.GPU(1, 24<<30), backend.CPU(192 << 30)}, 99, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := DefaultRules()
			r.GPULayers, r.CtxSize = c.ngl, 32768
			withN := func(n int) Rules {
				q := r
				q.Items = nil
				if n > 0 {
					it, err := NCPUMoEItem("--n-cpu-moe", strconv.Itoa(n))
					if err != nil {
						t.Fatal(err)
					}
					q.Items = []Item{it}
				}
				return q
			}
			plan := place(t, c.m, withN(c.from), c.devs)
			m := regexp.MustCompile(`--n-cpu-moe (\d+) fits`).FindStringSubmatch(plan.Verdict())
			if m == nil {
				t.Fatalf("no planned advice: %s", plan.Verdict())
			}
			n, _ := strconv.Atoi(m[1])
			if fitted := place(t, c.m, withN(n), c.devs); !gpusFit(fitted) {
				t.Errorf("--n-cpu-moe %d does not fit: %s", n, fitted.Verdict())
			}
			if n-1 > c.from && gpusFit(place(t, c.m, withN(n-1), c.devs)) {
				t.Errorf("--n-cpu-moe %d fits too: %d is not the smallest", n-1, n)
			}
			t.Logf("%s", plan.Verdict())
		})
	}
}

// TestVerdictNamesIdleRules: a rule that matches nothing is named in the verdict before the
// advice: a misspelt -ot is the likeliest reason a plan meant to fit does not.
func TestVerdictNamesIdleRules(t *testing.T) {
	r := DefaultRules()
	r.GPULayers, r.CtxSize = 99, 32768
	items, err := ParseOverrideTensor("-ot", "ffn_(up|gate)_experts=CPU")
	if err != nil {
		t.Fatal(err)
	}
	r.Items = items
	v := place(t, qwen30B(t, placetest.Q4_K_M), r, []backend.Device{backend.GPU(0, 8<<30), backend.CPU(64 << 30)}).Verdict()
	if !strings.Contains(v, "(counting the margin). -ot ffn_(up|gate)_experts=CPU matched no tensor. --n-cpu-moe") {
		t.Errorf("verdict: %s", v)
	}
}

// TestFitOffKeepsNoMargin: llama.cpp keeps no free memory unless --fit does, so a command
// line with --fit off that leaves 512 MiB free fits (it runs), where --fit on would aim to
// keep 1 GiB free; fit's own search keeps the margin (KeepMargin).
func TestFitOffKeepsNoMargin(t *testing.T) {
	m := qwen30B(t, placetest.Q4_K_M)
	r := DefaultRules()
	r.Fit, r.GPULayers, r.CtxSize = false, 99, 8192
	items, err := ParseOverrideTensor("-ot", "exps=CPU")
	if err != nil {
		t.Fatal(err)
	}
	r.Items = items
	probe := place(t, m, r, []backend.Device{backend.GPU(0, 64<<30), backend.CPU(64 << 30)})
	need := deviceUse(t, probe, "CUDA0").Total
	devs := []backend.Device{backend.GPU(0, need+512<<20), backend.CPU(64 << 30)}
	plan := place(t, m, r, devs)
	if d := deviceUse(t, plan, "CUDA0"); d.Margin != 0 || !strings.HasPrefix(plan.Verdict(), "fits: CUDA0") {
		t.Errorf("--fit off: margin %d, verdict %s", d.Margin, plan.Verdict())
	}
	r.KeepMargin = true
	if plan := place(t, m, r, devs); deviceUse(t, plan, "CUDA0").Margin != 1<<30 || !strings.Contains(plan.Verdict(), "margin") {
		t.Errorf("KeepMargin: verdict %s", plan.Verdict())
	}
}
