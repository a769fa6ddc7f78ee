package moe

import (
	"slices"
	"testing"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/backend/sim"
	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/placement"
	"github.com/moerun/moerun/tensor"
)

// TestOpOffload runs every golden model's prompt, stretched to 40 tokens, on a simulated
// GPU under placements that leave matmul weights on the host, and checks llama.cpp's op
// offload: the prompt's matmuls of host-held weights run on the GPU and give the CPU run's
// logits bit for bit (the simulated GPU computes with the CPU's kernels); under -ngl 99
// -ot exps=CPU, where the routed experts are the host's only matmul weights, the bytes
// uploaded are exactly those of the experts the prompt routed to, counted per layer from
// the CPU run's routing (with -no-ooae, the layers' whole stacks); a decode step, a
// 31-token prompt and --no-op-offload upload
// nothing, and --no-op-offload reserves no staging memory. With --no-host the stacks the
// CPU repacks stay on the CPU, as ggml offloads only weights in host buffers.
func TestOpOffload(t *testing.T) {
	partial := 0  // models whose prompt left some expert of an offloaded layer unused
	repacked := 0 // models with expert stacks the CPU repacks under --no-host
	for _, gm := range goldenModels {
		prompt, want, cpuRun, stats := routedPrompt(t, gm.golden, gm.path)
		routedBytes, stackBytes := usedExpertBytes(t, cpuRun, stats, nil)
		if routedBytes < stackBytes {
			partial++
		}
		for _, pl := range []gpuPlacement{gpuPlacements[0], gpuPlacements[2]} {
			t.Run(gm.golden+"/"+pl.name, func(t *testing.T) {
				f, pool, host := openHost(t, gm.path, 2)
				gpu := sim.New(0, 1<<30, pool)
				t.Cleanup(func() { gpu.Close() })
				// load places and loads the model with op offload on or off (and the rules
				// set changes), and returns a context and the GPU memory the model took
				// (before the context's).
				load := func(offload bool, set ...func(*placement.Rules)) (*Context, *placement.Plan, int64) {
					before := gpu.Used()
					rules := pl.rules(t)
					rules.OpOffload = offload
					for _, s := range set {
						s(&rules)
					}
					m, plan := loadPlaced(t, f, pool, host, gpu, rules)
					took := gpu.Used() - before
					return m.context(t, DefaultContextOptions()), plan, took
				}
				eval := func(c *Context, tokens []int32) ([]float32, backend.Traffic) {
					t.Helper()
					before := gpu.Traffic()
					logits, err := c.Eval(tokens, false)
					if err != nil {
						t.Fatal(err)
					}
					return slices.Clone(logits), gpu.Traffic().Sub(before)
				}

				c, plan, took := load(true)
				if use := deviceUse(t, plan, gpu.Device().Name); took != use.Weights+stagingBytes(use) || use.Staging == 0 {
					t.Errorf("the model took %d bytes of the GPU, place says %d of weights and %d of staging", took, use.Weights, use.Staging)
				}
				got, traffic := eval(c, prompt)
				if !slices.Equal(got, want) {
					t.Errorf("logits differ from the CPU run's: %+v", compareLogits(got, want))
				}
				switch {
				case traffic.Uploads == 0:
					t.Errorf("a 40-token prompt uploaded no weights: %+v", traffic)
				case pl.ngl > 0 && traffic.BytesUploaded != routedBytes:
					t.Errorf("a 40-token prompt uploaded %d bytes of experts, the experts it routed to hold %d", traffic.BytesUploaded, routedBytes)
				}
				if _, step := eval(c, prompt[:1]); step.Uploads != 0 {
					t.Errorf("a decode step uploaded %d weights", step.Uploads)
				}
				if pl.ngl > 0 {
					whole, _, _ := load(true, func(r *placement.Rules) { r.OffloadAllExperts = true })
					got, traffic := eval(whole, prompt)
					if !slices.Equal(got, want) {
						t.Errorf("with -no-ooae, logits differ from the CPU run's: %+v", compareLogits(got, want))
					}
					if traffic.BytesUploaded != stackBytes {
						t.Errorf("with -no-ooae a 40-token prompt uploaded %d bytes of experts, the whole stacks of its offloaded layers hold %d", traffic.BytesUploaded, stackBytes)
					}
				}
				short, _, _ := load(true)
				if _, traffic := eval(short, prompt[:placement.DefaultOffloadMinBatch-1]); traffic.Uploads != 0 {
					t.Errorf("a %d-token prompt uploaded %d weights", placement.DefaultOffloadMinBatch-1, traffic.Uploads)
				}

				off, plan, took := load(false)
				if use := deviceUse(t, plan, gpu.Device().Name); took != use.Weights || use.Staging != 0 {
					t.Errorf("with --no-op-offload the model took %d bytes of the GPU, place says %d of weights and %d of staging", took, use.Weights, use.Staging)
				}
				got, traffic = eval(off, prompt)
				if traffic.Uploads != 0 {
					t.Errorf("with --no-op-offload a 40-token prompt uploaded %d weights", traffic.Uploads)
				}
				if !slices.Equal(got, want) {
					t.Errorf("with --no-op-offload, logits differ from the CPU run's: %+v", compareLogits(got, want))
				}
			})
		}
		t.Run(gm.golden+"/-ngl 99 -ot exps=CPU --no-host", func(t *testing.T) {
			f, pool, host := openHost(t, gm.path, 2)
			gpu := sim.New(0, 1<<30, pool)
			t.Cleanup(func() { gpu.Close() })
			rules := gpuPlacements[2].rules(t)
			rules.NoHost = true
			m, plan := loadPlaced(t, f, pool, host, gpu, rules)
			kept := map[string]bool{}
			for _, u := range plan.Tensors {
				if u.Storage == placement.StorageRepacked {
					kept[u.Name] = true
				}
			}
			if len(kept) > 0 {
				repacked++
			}
			c := m.context(t, DefaultContextOptions())
			before := gpu.Traffic()
			got, err := c.Eval(prompt, false)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Errorf("logits differ from the CPU run's: %+v", compareLogits(got, want))
			}
			wantBytes, _ := usedExpertBytes(t, cpuRun, stats, kept)
			if deviceUse(t, plan, gpu.Device().Name).Staging == 0 {
				// Placement judges a layer's experts by their largest stack: repacked
				// there (synth-minimax-m2's down stacks), it reserves no staging memory,
				// and without it nothing is offloaded.
				wantBytes = 0
			}
			if uploaded := gpu.Traffic().Sub(before).BytesUploaded; uploaded != wantBytes {
				t.Errorf("uploaded %d bytes of experts, the routed experts of the stacks not repacked (%d of them repacked) hold %d", uploaded, len(kept), wantBytes)
			}
		})
	}
	if repacked == 0 {
		t.Log("this CPU repacks none of the golden models' expert stacks: --no-host changed nothing")
	}
	if partial == 0 {
		t.Error("every prompt routed to every expert: the test cannot tell the experts used from whole stacks")
	}
}

// routedPrompt is a golden model's first prompt stretched to 40 tokens, a batch op offload
// takes, and the CPU run's last logits for it, with the model and its routing statistics.
func routedPrompt(t *testing.T, golden, path string) (prompt []int32, logits []float32, m *testModel, stats *ExpertStats) {
	t.Helper()
	prompt = stretch(loadGolden(t, golden).Prompts[0].Tokens, 40)
	m = openModel(t, path, 2)
	o := DefaultContextOptions()
	o.Stats = NewExpertStats(len(m.layers), m.Config.Router.Experts, func(l int) bool {
		_, ok := m.layers[l].ffn.(*moeFFN)
		return ok
	})
	logits, err := m.context(t, o).Eval(prompt, false)
	if err != nil {
		t.Fatal(err)
	}
	return prompt, slices.Clone(logits), m, o.Stats
}

// loadPlaced places f's model by rules on host and gpu and loads it.
func loadPlaced(t testing.TB, f *gguf.File, pool *tensor.Pool, host, gpu backend.Backend, rules placement.Rules) (*testModel, *placement.Plan) {
	t.Helper()
	plan := placeModel(t, f, rules, []backend.Device{host.Device(), gpu.Device()})
	m, err := Load(f, plan, []backend.Backend{host, gpu})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return &testModel{Model: m, file: f, pool: pool}, plan
}

// stagingBytes is the staging memory the runtime allocates for op offload on a device
// whose plan is use: placement's reservation and the alignment of a second weight's start.
func stagingBytes(use placement.DeviceUse) int64 {
	if use.Staging == 0 {
		return 0
	}
	return use.Staging + stagingAlign
}

// stretch repeats tokens to n tokens.
func stretch(tokens []int32, n int) []int32 {
	out := make([]int32, 0, n)
	for len(out) < n {
		out = append(out, tokens[:min(len(tokens), n-len(out))]...)
	}
	return out
}

// usedExpertBytes is the size of the experts the routing stats recorded in layers that
// routed a batch large enough to offload, each layer's distinct experts once: their rows of
// the layer's gate, up and down stacks. The last layer routes only the tokens whose logits
// are wanted (one), as llama.cpp's graphs do, and so keeps its experts on the host. stacks
// is the size of those layers' whole stacks. Stacks named in kept stay on the host too.
func usedExpertBytes(t *testing.T, m *testModel, stats *ExpertStats, kept map[string]bool) (used, stacks int64) {
	t.Helper()
	for _, l := range stats.Snapshot("test").Layers {
		if l.Tokens < placement.DefaultOffloadMinBatch {
			continue
		}
		f := m.layers[l.Layer].ffn.(*moeFFN)
		var perExpert int64
		s := f.experts[0]
		for _, w := range []weight{s.gate, s.up, s.down} {
			if kept[w.w.Name()] {
				continue
			}
			ti, _ := m.file.Tensor(w.w.Name())
			perExpert += ti.Size / int64(w.w.Experts())
		}
		for _, e := range l.Experts {
			if e.Selected > 0 {
				used += perExpert
			}
			stacks += perExpert
		}
	}
	return used, stacks
}

// TestOpOffloadMinBatch: GGML_OP_OFFLOAD_MIN_BATCH (the plan's OpOffloadMinBatch) moves the
// threshold as in ggml's CUDA backend: at 8, an 8-token prompt's expert products run on the
// GPU (and give the CPU's logits); at 1000, a 40-token prompt's stay on the CPU.
func TestOpOffloadMinBatch(t *testing.T) {
	gm := goldenModels[0]
	prompt := stretch(loadGolden(t, gm.golden).Prompts[0].Tokens, 40)
	for _, tc := range []struct {
		minBatch, tokens int
		uploads          bool
	}{{8, 8, true}, {8, 7, false}, {1000, 40, false}} {
		f, pool, host := openHost(t, gm.path, 2)
		gpu := sim.New(0, 1<<30, pool)
		t.Cleanup(func() { gpu.Close() })
		rules := gpuPlacements[2].rules(t) // -ngl 99 -ot exps=CPU
		rules.OpOffloadMinBatch = tc.minBatch
		m, _ := loadPlaced(t, f, pool, host, gpu, rules)
		want := runSteps(t, openModel(t, gm.path, 2), prompt[:tc.tokens], nil)
		before := gpu.Traffic()
		got, err := m.context(t, DefaultContextOptions()).Eval(prompt[:tc.tokens], false)
		if err != nil {
			t.Fatal(err)
		}
		if uploads := gpu.Traffic().Sub(before).Uploads; (uploads > 0) != tc.uploads {
			t.Errorf("min batch %d, %d tokens: %d uploads, want uploads %t", tc.minBatch, tc.tokens, uploads, tc.uploads)
		}
		if !slices.Equal(got, want) {
			t.Errorf("min batch %d, %d tokens: logits differ from the CPU run's: %+v", tc.minBatch, tc.tokens, compareLogits(got, want))
		}
	}
}
