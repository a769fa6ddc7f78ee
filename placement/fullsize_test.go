package placement

import (
	"fmt"
	"strings"
	"testing"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/placement/placetest"
	"github.com/moerun/moerun/tensor"
)

func layoutModel(tb testing.TB, name string, l placetest.Layout, err error) Model {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
	infos, err := l.Infos()
	if err != nil {
		tb.Fatal(err)
	}
	return Model{Name: name, Metadata: l.Metadata, Tensors: infos}
}

func qwen30B(tb testing.TB, q placetest.Quant) Model {
	l, err := placetest.Qwen3_30B_A3B(q, false)
	return layoutModel(tb, "Qwen3-30B-A3B", l, err)
}

func qwen235B(tb testing.TB) Model {
	l, err := placetest.Qwen3_235B_A22B(placetest.Q4_K_M, false)
	return layoutModel(tb, "Qwen3-235B-A22B", l, err)
}

func deviceUse(t *testing.T, plan *Plan, name string) DeviceUse {
	t.Helper()
	for _, d := range plan.Devices {
		if d.Device.Name == name {
			return d
		}
	}
	t.Fatalf("no device %s", name)
	return DeviceUse{}
}

// The reference's worked example: DeepSeek-V3's MLA cache stores K only, 576 elements per
// token and layer: 576 × 2 B × 61 layers × 32768 = 2,302,672,896 B.
func TestDeepSeekV3MLACache(t *testing.T) {
	m := deepSeekModel(t)
	r := DefaultRules()
	r.GPULayers, r.CtxSize = 99, 32768
	r.Items, _ = ParseOverrideTensor("-ot", "exps=CPU")
	plan := place(t, m, r, devicesFor(24))
	if kv := deviceUse(t, plan, "CUDA0").KV; kv != 2_302_672_896 {
		t.Errorf("KV %d B, want 2,302,672,896", kv)
	}
	// q8_0: 576 elements are 18 blocks of 34 bytes.
	r.CacheK, r.CacheV = tensor.Q8_0, tensor.Q8_0
	if kv := deviceUse(t, place(t, m, r, devicesFor(24)), "CUDA0").KV; kv != 18*34*61*32768 {
		t.Errorf("q8_0 KV %d B, want %d", kv, 18*34*61*32768)
	}
	// The experts (174 tensors, 58 MoE layers × 3) stay mapped in RAM, nothing else does.
	cpu := deviceUse(t, plan, "CPU")
	var experts, embd int64
	for _, tu := range plan.Tensors {
		switch {
		case strings.Contains(tu.Name, "_exps."):
			experts += tu.Bytes
			if tu.Device != "CPU" || tu.Storage != StorageMapped || tu.Reason != "-ot exps=CPU" {
				t.Errorf("%s: %s %s by %q", tu.Name, tu.Device, tu.Storage, tu.Reason)
			}
		case tu.Name == "token_embd.weight":
			embd = tu.Bytes
		}
	}
	if cpu.Weights != experts+embd || cpu.WeightsMapped != cpu.Weights {
		t.Errorf("CPU weights %d (mapped %d), want experts %d + embedding %d", cpu.Weights, cpu.WeightsMapped, experts, embd)
	}
	if plan.Rules[0].Decided != 174 || plan.Rules[0].Moved != 174 {
		t.Errorf("rule: %+v", plan.Rules[0])
	}
}

// Qwen3-30B-A3B (48 layers, 4 KV heads of 128): an f16 KV cache of 40,960 cells is
// 48 × 2 × 512 × 2 B × 40960 = 4,026,531,840 B, whatever the slots when the cache is one;
// three separate slots round each to 13,824 cells (40960/3 padded to 256).
func TestQwen3KVAndStreams(t *testing.T) {
	m := qwen30B(t, placetest.Q4_K_M)
	r := DefaultRules()
	r.GPULayers, r.Fit = 99, false
	if kv := deviceUse(t, place(t, m, r, devicesFor(80)), "CUDA0").KV; kv != 4_026_531_840 {
		t.Errorf("KV %d B, want 4,026,531,840", kv)
	}
	r.Parallel, r.CtxSize = 3, 40960
	plan := place(t, m, r, devicesFor(80))
	if plan.Context.NCtxSeq != 13824 || plan.Context.NCtx != 41472 || plan.Context.NStream != 3 {
		t.Errorf("context %+v", plan.Context)
	}
	if kv := deviceUse(t, plan, "CUDA0").KV; kv != 48*2*1024*13824*3 {
		t.Errorf("3 streams: KV %d B, want %d", kv, 48*2*1024*13824*3)
	}
	// -nkvo: all of it in RAM, the layers stay on the GPU.
	r.KVOffload = false
	plan = place(t, m, r, devicesFor(80))
	if deviceUse(t, plan, "CUDA0").KV != 0 || deviceUse(t, plan, "CPU").KV != 48*2*1024*13824*3 || plan.Layers[0].Device != "CUDA0" {
		t.Error("-nkvo did not move the cache to the CPU")
	}
}

// -ngl counts the output layer first: -ngl 50 on Qwen3-235B-A22B (94 blocks) offloads the
// output layer and blocks 45..93; --n-cpu-moe 60 then keeps the experts of blocks 0..59 on
// the CPU, and the KV cache of blocks 45..93 stays on the GPU.
func TestQwen235NGLAndNCPUMoE(t *testing.T) {
	m := qwen235B(t)
	r := DefaultRules()
	r.GPULayers, r.CtxSize = 50, 8192
	item, err := NCPUMoEItem("-ncmoe", "60")
	if err != nil {
		t.Fatal(err)
	}
	r.Items = []Item{item}
	plan := place(t, m, r, []backend.Device{backend.GPU(0, 80<<30), backend.CPU(256 << 30)})
	for _, l := range plan.Layers[:94] {
		want := "CPU"
		if l.Index >= 45 {
			want = "CUDA0"
		}
		if l.Device != want || l.KVDevice != want {
			t.Errorf("layer %d on %s (KV %s), want %s", l.Index, l.Device, l.KVDevice, want)
		}
		wantExp := want
		if l.Index < 60 {
			wantExp = "CPU"
		}
		if got := l.Classes["routed_expert"]; got != wantExp {
			t.Errorf("layer %d experts on %s, want %s", l.Index, got, wantExp)
		}
	}
	if out := plan.Layers[94]; out.Label() != "output" || out.Device != "CUDA0" {
		t.Errorf("output layer %+v", out)
	}
	r0 := plan.Rules[0]
	if len(r0.Patterns) != 60 || r0.Patterns[7] != `blk\.7\.ffn_(up|down|gate|gate_up)_(ch|)exps` || r0.Decided != 180 || r0.Moved != 45 {
		t.Errorf("--n-cpu-moe 60: %d patterns, places %d, moves %d", len(r0.Patterns), r0.Decided, r0.Moved)
	}
}

// A 32-block model on two GPUs with -ts 1,1 and -ngl 33: GPU 0 gets blocks 0–16, GPU 1
// blocks 17–31 and the output layer (the reference's example of upper_bound over the
// cumulative split).
func TestTensorSplitTwoGPUs(t *testing.T) {
	l, err := placetest.Qwen3MoE(placetest.F16, false, 32, 256, 4, 64)
	m := layoutModel(t, "qwen3moe-32", l, err)
	r := DefaultRules()
	r.GPULayers, r.CtxSize, r.TensorSplit = 33, 4096, []float32{1, 1}
	devs := []backend.Device{backend.GPU(0, 24<<30), backend.GPU(1, 24<<30), backend.CPU(64 << 30)}
	plan := place(t, m, r, devs)
	for _, l := range plan.Layers[:33] {
		want := "CUDA0"
		if l.Index < 0 || l.Index >= 17 {
			want = "CUDA1"
		}
		if l.Device != want {
			t.Errorf("layer %s on %s, want %s", l.Label(), l.Device, want)
		}
	}
	// Without -ts the split follows free memory: 8 and 24 GiB give a quarter to GPU 0.
	r.TensorSplit = nil
	devs[0] = backend.GPU(0, 8<<30)
	plan = place(t, m, r, devs)
	if d := deviceUse(t, plan, "CUDA0"); d.Layers != 9 {
		t.Errorf("CUDA0 holds %d layers, want 9 (blocks 0-8: il/33 < 0.25)", d.Layers)
	}
	// -sm none keeps only the main GPU.
	r.SplitMode, r.MainGPU = SplitNone, 1
	plan = place(t, m, r, devs)
	if d := deviceUse(t, plan, "CUDA1"); d.Layers != 32 || deviceUse(t, plan, "CUDA0").InModel {
		t.Errorf("-sm none -mg 1: CUDA1 holds %d layers", d.Layers)
	}
	r.MainGPU = 2
	if _, err := Place(m, r, devs); err == nil || !strings.Contains(err.Error(), "invalid value for main_gpu: 2") {
		t.Errorf("-mg 2 of 2 GPUs: %v", err)
	}
}

// The whole-model numbers of the benchmark's layout: DeepSeek-V3 Q4_K_M is about 404 GB.
func TestDeepSeekV3Size(t *testing.T) {
	m := deepSeekModel(t)
	var total int64
	for _, ti := range m.Tensors {
		total += ti.Size
	}
	if total < 400e9 || total > 410e9 || len(m.Tensors) != 1086 {
		t.Errorf("%d tensors, %s", len(m.Tensors), fmt.Sprint(total))
	}
}
