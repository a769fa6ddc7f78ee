package moe

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/backend/sim"
	"github.com/moerun/moerun/placement"
)

// gpuPlacement is one of llama.cpp's placements of a model on a GPU and the CPU.
type gpuPlacement struct {
	name string
	ngl  int
	item func() (placement.Item, error)
	nkvo bool // -nkvo: the KV cache stays in RAM
	// --swa-full: sliding-window layers keep the whole context's cache, not a ring
	swaFull bool
}

// gpuPlacements are the placements the GPU tests run: everything on the CPU, everything
// on the GPU, the routed experts on the CPU (the hybrid setup this project is for), one
// layer's experts on the CPU, two layers on the GPU (the output layer and the last block),
// everything on the GPU but the KV cache, and everything on the GPU with full-size
// sliding-window caches.
var gpuPlacements = []gpuPlacement{
	{"-ngl 0", 0, nil, false, false},
	{"-ngl 99", 99, nil, false, false},
	{"-ngl 99 -ot exps=CPU", 99, func() (placement.Item, error) {
		items, err := placement.ParseOverrideTensor("-ot", "exps=CPU")
		return items[0], err
	}, false, false},
	{"-ngl 99 --n-cpu-moe 1", 99, func() (placement.Item, error) { return placement.NCPUMoEItem("--n-cpu-moe", "1") }, false, false},
	{"-ngl 2", 2, nil, false, false},
	{"-ngl 99 -nkvo", 99, nil, true, false},
	{"-ngl 99 --swa-full", 99, nil, false, true},
}

// rules are the placement's rules.
func (p gpuPlacement) rules(t *testing.T) placement.Rules {
	t.Helper()
	rules := placement.DefaultRules()
	rules.GPULayers = p.ngl
	rules.KVOffload = !p.nkvo
	rules.SWAFull = p.swaFull
	if p.item != nil {
		it, err := p.item()
		if err != nil {
			t.Fatal(err)
		}
		rules.Items = []placement.Item{it}
	}
	return rules
}

// TestSimulatedGPU runs every golden model under llama.cpp's GPU placements with a
// simulated GPU (device memory of its own, the CPU's kernels) and checks what the
// device-resident runtime promises:
//   - the logits of a prompt and of the decode steps after it are the CPU run's, bit for
//     bit: every value was on the device that computed it (an operand on another device is
//     an error), and nothing was lost or reordered on the way;
//   - the GPU holds the weight, op offload staging and KV cache bytes place's memory
//     report gives it;
//   - a decode step crosses between the devices only where the plan changes device: for
//     -ngl 99 the embedding in and the logits out, one wait; for -ngl 99 -ot exps=CPU two
//     copies more per MoE layer (the normed input, expert ids and weights out as one block,
//     one wait, the experts' sum in); none for -ngl 0.
func TestSimulatedGPU(t *testing.T) {
	for _, gm := range goldenModels {
		prompt, decode, want := cpuSteps(t, gm.golden, gm.path)
		for _, pl := range gpuPlacements {
			t.Run(gm.golden+"/"+pl.name, func(t *testing.T) {
				f, pool, host := openHost(t, gm.path, 2)
				gpu := sim.New(0, 1<<30, pool)
				t.Cleanup(func() { gpu.Close() })
				plan := placeModel(t, f, pl.rules(t), []backend.Device{host.Device(), gpu.Device()})
				m, err := Load(f, plan, []backend.Backend{host, gpu})
				if err != nil {
					t.Fatal(err)
				}
				use := deviceUse(t, plan, gpu.Device().Name)
				if gpu.Used() != use.Weights+stagingBytes(use) {
					t.Errorf("the GPU holds %d bytes of weights and op offload's staging memory, place's report says %d + %d", gpu.Used(), use.Weights, use.Staging)
				}
				tm := &testModel{Model: m, file: f, pool: pool}
				o := DefaultContextOptions()
				o.Size, o.SWAFull = plan.Context.NCtx, pl.swaFull
				c := tm.context(t, o)
				checkCacheBytes(t, c, plan)
				got, traffic := stepsOn(t, c, prompt, decode, gpu)
				if !slices.Equal(got, want) {
					t.Errorf("logits differ from the CPU run's: %+v", compareLogits(got, want))
				}
				if pl.ngl == 2 || pl.nkvo || pl.swaFull || pl.item != nil && pl.name != "-ngl 99 -ot exps=CPU" {
					return
				}
				moeLayers := 0
				for _, l := range m.layers {
					if _, ok := l.ffn.(*moeFFN); ok {
						moeLayers++
					}
				}
				var wantTraffic backend.Traffic
				switch pl.name {
				case "-ngl 99":
					wantTraffic = backend.Traffic{CopiesIn: 1, CopiesOut: 1, Syncs: 1}
				case "-ngl 99 -ot exps=CPU":
					wantTraffic = backend.Traffic{CopiesIn: 1 + moeLayers, CopiesOut: 1 + moeLayers, Syncs: 1 + moeLayers}
				}
				// A lightning indexer runs where its layer's cache is and adds no crossing:
				// its scores come to the host only once a sequence is longer than the
				// top-k, which this short prompt is not (TestDSAIndexerCrossings).
				traffic.BytesIn, traffic.BytesOut, traffic.Ops = 0, 0, 0
				if traffic != wantTraffic {
					t.Errorf("a decode step's crossings: %+v, want %+v (%d MoE layers)", traffic, wantTraffic, moeLayers)
				}
			})
		}
	}
}

// checkCacheBytes compares each layer's KV cache (or recurrent state) with place's layer
// map: on the device it names, of the size it gives (a sliding-window layer's: llama.cpp's
// ring of its window and a ubatch, or the whole context with --swa-full).
func checkCacheBytes(t *testing.T, c *Context, plan *placement.Plan) {
	t.Helper()
	for _, l := range plan.Layers {
		if l.Index < 0 || l.Index >= len(c.caches) {
			continue
		}
		kv := c.caches[l.Index]
		var bytes int64
		for _, b := range kv.bufs {
			bytes += b.Size()
		}
		if dev := c.m.names[kv.dev]; dev != l.KVDevice {
			t.Errorf("layer %d's cache is on %s, place says %s", l.Index, dev, l.KVDevice)
		}
		if bytes != l.KVBytes {
			t.Errorf("layer %d (%s): %d bytes of cache, place says %d", l.Index, l.Kind, bytes, l.KVBytes)
		}
	}
}

// cpuSteps is a golden model's first prompt, two decode tokens after it, and the CPU run's
// logits for them (runSteps): what the GPU placements are compared with.
func cpuSteps(t *testing.T, golden, path string) (prompt, decode []int32, logits []float32) {
	t.Helper()
	prompt = loadGolden(t, golden).Prompts[0].Tokens
	decode = []int32{prompt[0], prompt[len(prompt)-1]}
	return prompt, decode, runSteps(t, openModel(t, path, 2), prompt, decode)
}

// runSteps evaluates prompt and then each token of decode on its own, and returns the
// last logits of each evaluation, one after the other.
func runSteps(t *testing.T, m *testModel, prompt, decode []int32) []float32 {
	got, _ := stepsOn(t, m.context(t, DefaultContextOptions()), prompt, decode, nil)
	return got
}

// stepsOn is runSteps on a context, with the traffic of gpu (when not nil) during the
// last decode step.
func stepsOn(t *testing.T, c *Context, prompt, decode []int32, gpu backend.Counter) ([]float32, backend.Traffic) {
	t.Helper()
	logits, err := c.Eval(prompt, false)
	if err != nil {
		t.Fatal(err)
	}
	all := slices.Clone(logits)
	var before, after backend.Traffic
	for i, tok := range decode {
		if gpu != nil && i == len(decode)-1 {
			before = gpu.Traffic()
		}
		logits, err := c.Eval([]int32{tok}, false)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, logits...)
	}
	if gpu != nil {
		after = gpu.Traffic()
	}
	return all, after.Sub(before)
}

// deviceUse is the plan's memory account of a device.
func deviceUse(t *testing.T, plan *placement.Plan, name string) placement.DeviceUse {
	t.Helper()
	for _, d := range plan.Devices {
		if d.Device.Name == name {
			return d
		}
	}
	t.Fatal(fmt.Sprintf("no %s in the plan", name))
	return placement.DeviceUse{}
}

// TestSimulatedGPUWithoutKernels runs the models on a simulated GPU that lacks kernels for
// some operations, as a GPU backend being written does: the runtime runs those on the CPU
// (copying their operands over and the result back, as ggml's scheduler does) and the
// answers stay the CPU run's bit for bit, with more crossings. A GPU that holds the KV cache
// but cannot run attention on it is refused with advice; with -nkvo it works.
func TestSimulatedGPUWithoutKernels(t *testing.T) {
	elementwise := []backend.Op{backend.OpRMSNorm, backend.OpAdd, backend.OpMul, backend.OpUnary, backend.OpSwiGLU,
		backend.OpRoPE, backend.OpRoute, backend.OpWeightedSum, backend.OpAddID, backend.OpScale, backend.OpL2Norm}
	for _, gm := range goldenModels {
		prompt := loadGolden(t, gm.golden).Prompts[0].Tokens
		decode := []int32{prompt[0], prompt[len(prompt)-1]}
		want := runSteps(t, openModel(t, gm.path, 2), prompt, decode)
		for _, c := range []struct {
			name   string
			refuse []backend.Op
			nkvo   bool
			err    string
		}{
			{"element-wise on the CPU", elementwise, false, ""},
			{"no attention", []backend.Op{backend.OpAttention}, false, "does not run attention"},
			{"no attention, -nkvo", []backend.Op{backend.OpAttention}, true, ""},
		} {
			t.Run(gm.golden+"/"+c.name, func(t *testing.T) {
				f, pool, host := openHost(t, gm.path, 2)
				gpu := sim.New(0, 1<<30, pool, c.refuse...)
				t.Cleanup(func() { gpu.Close() })
				pl := gpuPlacement{ngl: 99, nkvo: c.nkvo}
				plan := placeModel(t, f, pl.rules(t), []backend.Device{host.Device(), gpu.Device()})
				m, err := Load(f, plan, []backend.Backend{host, gpu})
				if err != nil {
					t.Fatal(err)
				}
				o := DefaultContextOptions()
				o.Size = plan.Context.NCtx
				ctx, err := m.NewContext(o)
				if c.err != "" {
					if err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), "-nkvo") {
						t.Errorf("NewContext: %v, want an error about %q that suggests -nkvo", err, c.err)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { ctx.Close() })
				got, traffic := stepsOn(t, ctx, prompt, decode, gpu)
				if !slices.Equal(got, want) {
					t.Errorf("logits differ from the CPU run's: %+v", compareLogits(got, want))
				}
				if traffic.CopiesOut <= 1 || traffic.CopiesIn <= 1 {
					t.Errorf("a decode step's crossings %+v: the refused operations did not move to the CPU", traffic)
				}
			})
		}
	}
}

// TestDSAIndexerCrossings: DeepSeek-V3.2's lightning indexer runs on the simulated GPU
// that holds its layer's cache under -ngl 99 (the key's norm, RoPE, rotation and the
// scores) and sends the host only the scores of a sequence longer than its top-k: a decode
// step after the "long" prompt crosses with the embedding in, the logits out and each
// indexer layer's scores out, one wait each, and gives the CPU run's logits bit for bit.
func TestDSAIndexerCrossings(t *testing.T) {
	p := loadGolden(t, "synth-deepseek32").Prompts[2]
	path := synthModel("deepseek32")
	want := runSteps(t, openModel(t, path, 2), p.Tokens, p.Tokens[:1])
	f, pool, host := openHost(t, path, 2)
	gpu := sim.New(0, 1<<30, pool)
	t.Cleanup(func() { gpu.Close() })
	rules := placement.DefaultRules()
	rules.GPULayers = 99
	plan := placeModel(t, f, rules, []backend.Device{host.Device(), gpu.Device()})
	m, err := Load(f, plan, []backend.Backend{host, gpu})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	indexers, topK := 0, 0
	for _, l := range m.layers {
		if d, ok := l.attn.(*dsaAttention); ok && d.indexer != nil {
			indexers++
			topK = d.topK
		}
	}
	if indexers == 0 || len(p.Tokens) <= topK {
		t.Fatalf("%d indexer layers, a prompt of %d tokens for a top-k of %d: nothing to check", indexers, len(p.Tokens), topK)
	}
	got, traffic := stepsOn(t, (&testModel{Model: m, file: f, pool: pool}).context(t, DefaultContextOptions()), p.Tokens, p.Tokens[:1], gpu)
	if !slices.Equal(got, want) {
		t.Errorf("logits differ from the CPU run's: %+v", compareLogits(got, want))
	}
	traffic.BytesIn, traffic.BytesOut, traffic.Ops = 0, 0, 0
	if wantTraffic := (backend.Traffic{CopiesIn: 1, CopiesOut: 1 + indexers, Syncs: 1 + indexers}); traffic != wantTraffic {
		t.Errorf("a decode step's crossings: %+v, want %+v (%d indexer layers)", traffic, wantTraffic, indexers)
	}
}
