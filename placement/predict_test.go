package placement

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/tensor"
)

// useMoreBits is llama-quantize's use_more_bits (src/llama-quant.cpp): the Q4_K_M layers
// whose ffn_down gets Q6_K. For MoE models the layer is the block index parsed from the
// tensor's name and n is every block (n_layer_all).
func useMoreBits(i, n int) bool { return i < n/8 || i >= 7*n/8 || (i-n/8)%3 == 2 }

// Bytes per block of 256 weights (ggml's block_q4_K and block_q6_K).
const q4KBlock, q6KBlock = 144, 210

// expertBytesQ4KM is the routed-expert bytes of a Q4_K_M model, by hand: per MoE block,
// gate and up of embd × ff × experts in Q4_K, down in Q6_K where use_more_bits says so.
func expertBytesQ4KM(blocks []int, nBlocks int, embd, ff, experts int64) int64 {
	per := embd * ff * experts / 256
	var total int64
	for _, b := range blocks {
		down := int64(q4KBlock)
		if useMoreBits(b, nBlocks) {
			down = q6KBlock
		}
		total += 2*per*q4KBlock + per*down
	}
	return total
}

func seq(from, to int) []int {
	var out []int
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

// predictPlan places a preset on one GPU with flags and predicts it on a plain machine.
func predictPlan(t *testing.T, spec string, gpu int64, flags ...Flag) (*Plan, *Prediction) {
	t.Helper()
	r := DefaultRules()
	r.Fit = false
	if err := applyFlags(&r, flags); err != nil {
		t.Fatal(err)
	}
	devs := []backend.Device{backend.CPU(0)}
	if gpu > 0 {
		devs = []backend.Device{backend.GPU(0, gpu), backend.CPU(0)}
	}
	plan, err := Place(presetModel(t, spec), r, devs)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Predict(plan, testHardware(), PredictOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return plan, p
}

func testHardware() Hardware {
	g, _ := LookupGPUModel("rtx4090")
	return Hardware{CPU: CPUSpec{Threads: 16, DecodeBandwidth: 50, DecodeSource: "flag"}, GPUs: []GPUSpec{g.Spec()}}
}

func deviceDecode(t *testing.T, p *Prediction, name string) DeviceDecode {
	t.Helper()
	for _, d := range p.Decode.Devices {
		if d.Device == name {
			return d
		}
	}
	t.Fatalf("no device %s in the prediction", name)
	return DeviceDecode{}
}

// Bytes read per token with every routed expert in RAM, computed by hand from the published
// shapes and llama-quantize's Q4_K_M rule, match the prediction exactly, and the reference's
// per-model constants (performance-model.md) within their rounding.
func TestPredictBytesPerToken(t *testing.T) {
	for _, c := range []struct {
		spec           string
		experts        int64   // routed-expert bytes of every MoE block, by hand
		used, total    int64   // k of E
		cpuRef, gpuRef float64 // reference: CPU bytes/token with all experts in RAM, GPU bytes/token
		layerRef       float64 // reference: VRAM per MoE layer moved
		gpuTol         float64
	}{
		// Qwen3-30B-A3B: 48 blocks, all MoE; experts 2048 × 768 × 128.
		{"qwen3-30b-a3b:q4_k_m", expertBytesQ4KM(seq(0, 47), 48, 2048, 768, 128), 8, 128, 1.10e9, 0.85e9, 0.37e9, 0.04},
		// DeepSeek-V3: 61 blocks, MoE from block 3; experts 7168 × 2048 × 256.
		{"deepseek-v3:q4_k_m", expertBytesQ4KM(seq(3, 60), 61, 7168, 2048, 256), 8, 256, 12.3e9, 9.7e9, 6.8e9, 0.04},
	} {
		plan, p := predictPlan(t, c.spec, 1<<40, Flag{"-ngl", "999"}, Flag{"--cpu-moe", ""}, Flag{"-c", "4096"})
		cpu, gpu := deviceDecode(t, p, "CPU"), deviceDecode(t, p, "CUDA0")
		want := c.experts * c.used / c.total
		if cpu.ExpertBytes != want {
			t.Errorf("%s: CPU expert bytes per token %d, by hand %d", c.spec, cpu.ExpertBytes, want)
		}
		if e := float64(cpu.ExpertBytes)/c.cpuRef - 1; math.Abs(e) > 0.01 {
			t.Errorf("%s: %.3f GB per token in RAM, the reference says %.2f GB", c.spec, float64(cpu.ExpertBytes)/1e9, c.cpuRef/1e9)
		}
		if e := float64(gpu.OtherBytes)/c.gpuRef - 1; math.Abs(e) > c.gpuTol {
			t.Errorf("%s: %.3f GB per token in VRAM, the reference says %.2f GB (%+.1f%%)", c.spec, float64(gpu.OtherBytes)/1e9, c.gpuRef/1e9, 100*e)
		}
		if gpu.ExpertBytes != 0 || gpu.KVBytes != 0 {
			t.Errorf("%s: GPU reads %d expert and %d KV bytes at depth 0", c.spec, gpu.ExpertBytes, gpu.KVBytes)
		}
		// The embedding costs one row: the CPU's other bytes are one row of token_embd.
		for _, tu := range plan.Tensors {
			if tu.Name == "token_embd.weight" && cpu.OtherBytes != tu.Bytes/tu.Shape[1] {
				t.Errorf("%s: CPU other bytes %d, one embedding row is %d", c.spec, cpu.OtherBytes, tu.Bytes/tu.Shape[1])
			}
		}
		layers := map[int]bool{}
		for _, tu := range plan.Tensors {
			if tu.Class.String() == "routed_expert" {
				layers[tu.Layer] = true
			}
		}
		if perLayer := float64(c.experts) / float64(len(layers)); math.Abs(perLayer/c.layerRef-1) > 0.02 {
			t.Errorf("%s: %.2f GB per MoE layer, the reference says %.2f", c.spec, perLayer/1e9, c.layerRef/1e9)
		}
	}
}

// The decode time is the sum the model states, term by term: for Qwen3-30B-A3B with every
// expert in RAM on an RTX 4090 and a 50 GB/s CPU: B_gpu/(0.7·1008 GB/s) + B_cpu/50 GB/s +
// (2·48+1) crossings × 20 µs + 1 ms.
func TestPredictDecodeSum(t *testing.T) {
	_, p := predictPlan(t, "qwen3-30b-a3b:q4_k_m", 24<<30, Flag{"-ngl", "999"}, Flag{"--cpu-moe", ""}, Flag{"-c", "4096"})
	cpu, gpu := deviceDecode(t, p, "CPU"), deviceDecode(t, p, "CUDA0")
	if p.Decode.Crossings != 2*48+1 {
		t.Errorf("%d crossings, want 2 per MoE layer plus the embedding's", p.Decode.Crossings)
	}
	want := float64(gpu.Bytes())/(0.7*1008e9) + float64(cpu.Bytes())/50e9 + 97*20e-6 + 1e-3
	if math.Abs(p.Decode.Seconds/want-1) > 1e-9 || math.Abs(p.TG*want-1) > 1e-9 {
		t.Errorf("t_tok %.6f s (tg %.2f), by the formula %.6f s", p.Decode.Seconds, p.TG, want)
	}
	if cpu.Bound() != "memory" || cpu.ComputeSeconds <= 0 || cpu.ComputeSeconds >= cpu.MemorySeconds {
		t.Errorf("CPU compute floor %.4f s vs memory %.4f s: 16 threads should not be compute-bound", cpu.ComputeSeconds, cpu.MemorySeconds)
	}
}

// With uniform routing, decode speed depends on how many expert layers are in RAM, not which:
// the first 20 blocks' experts or the last 20 give the same speed within the small size
// differences of their ffn_down types; more layers in RAM is slower.
func TestPredictCountNotWhich(t *testing.T) {
	_, first := predictPlan(t, "qwen3-30b-a3b:q4_k_m", 24<<30, Flag{"-ngl", "999"}, Flag{"--n-cpu-moe", "20"}, Flag{"-c", "4096"})
	_, last := predictPlan(t, "qwen3-30b-a3b:q4_k_m", 24<<30, Flag{"-ngl", "999"}, Flag{"-ot", blocksPattern(seq(28, 47)) + "=CPU"}, Flag{"-c", "4096"})
	_, more := predictPlan(t, "qwen3-30b-a3b:q4_k_m", 24<<30, Flag{"-ngl", "999"}, Flag{"--n-cpu-moe", "21"}, Flag{"-c", "4096"})
	if math.Abs(first.TG/last.TG-1) > 0.02 {
		t.Errorf("first 20: %.2f t/s, last 20: %.2f t/s", first.TG, last.TG)
	}
	if first.Decode.Crossings != last.Decode.Crossings {
		t.Errorf("crossings %d vs %d", first.Decode.Crossings, last.Decode.Crossings)
	}
	if more.TG >= first.TG {
		t.Errorf("21 layers in RAM %.2f t/s ≥ 20 layers %.2f t/s", more.TG, first.TG)
	}
}

// Contiguous CPU layers cost one crossing at each end of the block, not two per layer: with
// -ngl 25 the first 24 blocks run on the CPU entirely.
func TestPredictCrossingsLayerSplit(t *testing.T) {
	_, p := predictPlan(t, "qwen3-30b-a3b:q4_k_m", 24<<30, Flag{"-ngl", "25"}, Flag{"-c", "4096"})
	if p.Decode.Crossings != 1 {
		t.Errorf("-ngl 25: %d crossings, want 1 (CPU blocks 0-23, then the GPU)", p.Decode.Crossings)
	}
	_, cpu := predictPlan(t, "qwen3-30b-a3b:q4_k_m", 0, Flag{"-c", "4096"})
	if cpu.Decode.Crossings != 0 || len(cpu.Decode.Devices) != 1 {
		t.Errorf("CPU only: %d crossings over %d devices", cpu.Decode.Crossings, len(cpu.Decode.Devices))
	}
}

// KV reads grow with the depth: DeepSeek's MLA cache holds 576 f16 values per layer and
// token, so 32768 tokens of context read 576 × 2 B × 61 × 32768 bytes per new token.
func TestPredictKVDepth(t *testing.T) {
	r := DefaultRules()
	r.Fit, r.CtxSize, r.GPULayers = false, 32768, NGLAll
	r.Items = []Item{CPUMoEItem("--cpu-moe")}
	plan, err := Place(presetModel(t, "deepseek-v3:q4_k_m"), r, []backend.Device{backend.GPU(0, 1<<40), backend.CPU(0)})
	if err != nil {
		t.Fatal(err)
	}
	for _, depth := range []int{0, 1000, 32768, 40000} {
		p, err := Predict(plan, testHardware(), PredictOptions{Depth: depth})
		if err != nil {
			t.Fatal(err)
		}
		want := int64(576 * 2 * 61 * min(depth, 32768))
		if got := deviceDecode(t, p, "CUDA0").KVBytes; got != want {
			t.Errorf("depth %d: KV read %d bytes per token, want %d", depth, got, want)
		}
	}
	if _, err := Predict(plan, testHardware(), PredictOptions{Depth: -1}); err == nil {
		t.Error("a negative depth was accepted")
	}
}

// A plan that does not fit gets no speed: it is flagged with what overflows.
func TestPredictDoesNotFit(t *testing.T) {
	_, p := predictPlan(t, "qwen3-30b-a3b:q4_k_m", 8<<30, Flag{"-ngl", "999"}, Flag{"-c", "4096"})
	if p.Fits || p.TG != 0 || p.PP != 0 || p.Decode != nil || len(p.Problems) != 1 || !strings.Contains(p.Problems[0], "CUDA0 needs") {
		t.Fatalf("fits %v, tg %v, problems %q", p.Fits, p.TG, p.Problems)
	}
	plan, _ := predictPlan(t, "qwen3-30b-a3b:q4_k_m", 8<<30, Flag{"-ngl", "999"}, Flag{"-c", "4096"})
	plan.Prediction = p
	var b bytes.Buffer
	if err := plan.WriteJSON(&b, nil); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Prediction map[string]any `json:"prediction"`
	}
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Prediction["tg_tps"] != nil || doc.Prediction["fits"] != false {
		t.Errorf("JSON of a plan that does not fit: tg_tps %v, fits %v", doc.Prediction["tg_tps"], doc.Prediction["fits"])
	}
}

// The JSON prediction carries the fields scripts rely on, consistent with the text report.
func TestPredictReports(t *testing.T) {
	plan, p := predictPlan(t, "qwen3-30b-a3b:q4_k_m", 24<<30, Flag{"-ngl", "999"}, Flag{"--n-cpu-moe", "30"}, Flag{"-c", "4096"})
	plan.Prediction = p
	var b bytes.Buffer
	if err := plan.WriteJSON(&b, nil); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Prediction struct {
			Fits   bool     `json:"fits"`
			TG     *float64 `json:"tg_tps"`
			PP     *float64 `json:"pp_tps"`
			UBatch int      `json:"ubatch"`
			Decode struct {
				Seconds float64 `json:"seconds"`
				Devices []struct {
					Device  string  `json:"device"`
					Seconds float64 `json:"seconds"`
				} `json:"devices"`
			} `json:"decode"`
		} `json:"prediction"`
	}
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	pr := doc.Prediction
	if !pr.Fits || pr.TG == nil || *pr.TG != p.TG || pr.PP == nil || *pr.PP != p.PP || pr.UBatch != 512 || len(pr.Decode.Devices) != 2 {
		t.Fatalf("prediction JSON: %+v", pr)
	}
	var text bytes.Buffer
	if err := plan.WriteText(&text, TextOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"PREDICTION", "tg ≈", "per token", "CUDA0", "crossings", "machine: CPU 50.0 GB/s effective (--cpu-bw-eff)"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text report lacks %q", want)
		}
	}
}

// Where each figure comes from: a calibrated bandwidth wins over a theoretical one, which is
// scaled by the uncalibrated share for its channel count; nothing known is an error that
// says what to give.
func TestResolveCPUBandwidth(t *testing.T) {
	plan, _ := predictPlan(t, "qwen3-30b-a3b:q4_k_m", 0, Flag{"-c", "4096"})
	for _, c := range []struct {
		cpu  CPUSpec
		want float64
	}{
		{CPUSpec{DecodeBandwidth: 40, RAMBandwidth: 200}, 40},
		{CPUSpec{RAMChannels: 2, RAMSpeed: 5600}, 0.55 * 89.6},
		{CPUSpec{RAMChannels: 12, RAMSpeed: 4800}, 0.35 * 460.8},
		{CPUSpec{RAMBandwidth: 102, RAMChannels: 4, RAMSpeed: 3200}, 0.35 * 102},
		{CPUSpec{RAMBandwidth: 100}, 0.55 * 100},
		{CPUSpec{RAMBandwidth: 300}, 0.35 * 300},
	} {
		m, err := resolve(Hardware{CPU: c.cpu}, plan)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(m.CPUBandwidth-c.want) > 1e-9 {
			t.Errorf("%+v: %.2f GB/s (%s), want %.2f", c.cpu, m.CPUBandwidth, m.CPUBandwidthBy, c.want)
		}
	}
	if _, err := resolve(Hardware{}, plan); err == nil || !strings.Contains(err.Error(), "moerun calibrate") {
		t.Errorf("no CPU figure: %v", err)
	}
	gpuPlan, _ := predictPlan(t, "qwen3-30b-a3b:q4_k_m", 24<<30, Flag{"-ngl", "999"}, Flag{"--cpu-moe", ""}, Flag{"-c", "4096"})
	if _, err := Predict(gpuPlan, Hardware{CPU: CPUSpec{DecodeBandwidth: 40}}, PredictOptions{}); err == nil || !strings.Contains(err.Error(), "--gpu-model") {
		t.Errorf("GPU without a bandwidth: %v", err)
	}
}

// gpt-oss's ubatches hit fewer experts than uniform routing: 1 − (1 + U·(k/E)/0.2)^−0.2,
// worked by hand for gpt-oss-20b (4 of 32 experts) at -ub 512: 1 − 321^−0.2 = 0.68467.
// One token still hits its k experts, other architectures keep uniform routing, and
// -no-ooae copies every expert.
func TestPredictConcentratedRouting(t *testing.T) {
	_, p := predictPlan(t, "gpt-oss-20b:mxfp4", 24<<30, Flag{"-ngl", "999"}, Flag{"--cpu-moe", ""}, Flag{"-c", "4096"}, Flag{"-ub", "512"})
	if f := p.Prefill; f.OffloadTo != "CUDA0" || math.Abs(f.ActiveShare-0.68467) > 5e-5 {
		t.Errorf("offload to %q, active share %.5f, want CUDA0 and 0.68467", f.OffloadTo, f.ActiveShare)
	}
	if !slices.ContainsFunc(p.Notes, func(n string) bool { return strings.Contains(n, "hits about 68% of a layer's experts, not the 100%") }) {
		t.Errorf("no note of the concentrated routing: %q", p.Notes)
	}
	if got := concentratedShare(4.0/32, 1, 0.2); got != 4.0/32 {
		t.Errorf("one token hits %.4f of the experts, want its 4 of 32", got)
	}
	// -no-ooae copies whole stacks: every CPU expert byte, and no routing note.
	plan, _ := predictPlan(t, "gpt-oss-20b:mxfp4", 24<<30, Flag{"-ngl", "999"}, Flag{"--cpu-moe", ""}, Flag{"-c", "4096"}, Flag{"-ub", "512"})
	plan.Settings.OffloadAllExperts = true
	whole, err := Predict(plan, testHardware(), PredictOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var cpuExperts int64
	for _, tu := range plan.Tensors {
		if tu.Device == "CPU" && tu.Class == gguf.ClassRoutedExpert {
			cpuExperts += tu.Bytes
		}
	}
	if f := whole.Prefill; f.ActiveShare != 1 || f.CopyBytes < cpuExperts || f.CopyBytes > cpuExperts+1<<20 || slices.ContainsFunc(whole.Notes, func(n string) bool { return strings.Contains(n, "routing concentrates") }) {
		t.Errorf("-no-ooae: active share %.3f, %d bytes copied of %d in CPU experts, notes %q", f.ActiveShare, f.CopyBytes, cpuExperts, whole.Notes)
	}
	if whole.PP >= p.PP {
		t.Errorf("-no-ooae prompts at %.0f t/s, copying only the hit experts at %.0f", whole.PP, p.PP)
	}
	_, q := predictPlan(t, "qwen3-30b-a3b:q4_k_m", 24<<30, Flag{"-ngl", "999"}, Flag{"--cpu-moe", ""}, Flag{"-c", "4096"}, Flag{"-ub", "64"})
	if slices.ContainsFunc(q.Notes, func(n string) bool { return strings.Contains(n, "routing concentrates") }) {
		t.Errorf("qwen3moe's routing taken as concentrated: %q", q.Notes)
	}
}

// Prompt speed: every CPU expert byte a ubatch hits crosses PCIe once; the share hit is
// 1 − (1 − k/E)^U with uniform routing.
func TestPredictPrefillCopies(t *testing.T) {
	plan, p := predictPlan(t, "qwen3-30b-a3b:q4_k_m", 24<<30, Flag{"-ngl", "999"}, Flag{"--cpu-moe", ""}, Flag{"-c", "4096"}, Flag{"-ub", "64"})
	f := p.Prefill
	share := 1 - math.Pow(1-8.0/128, 64)
	if f.OffloadTo != "CUDA0" || math.Abs(f.ActiveShare-share) > 1e-12 {
		t.Fatalf("offload to %q, active share %.6f, want CUDA0 and %.6f", f.OffloadTo, f.ActiveShare, share)
	}
	var cpuBytes int64
	for _, tu := range plan.Tensors {
		if tu.Device == "CPU" && tu.Class.String() == "routed_expert" {
			cpuBytes += int64(float64(tu.Bytes) * share)
		}
	}
	if f.CopyBytes < cpuBytes || f.CopyBytes > cpuBytes+1<<20 {
		t.Errorf("copied %d bytes, the hit experts are %d (+ the small CPU tensors)", f.CopyBytes, cpuBytes)
	}
	// Below 32 tokens the CPU computes its own weights.
	_, small := predictPlan(t, "qwen3-30b-a3b:q4_k_m", 24<<30, Flag{"-ngl", "999"}, Flag{"--cpu-moe", ""}, Flag{"-c", "4096"}, Flag{"-ub", "16"})
	if small.Prefill.OffloadTo != "" || small.Prefill.CopyBytes != 0 {
		t.Errorf("ubatch 16 offloads to %q", small.Prefill.OffloadTo)
	}
	if hitProbability(0, 512) != 0 || hitProbability(1, 1) != 1 || math.Abs(hitProbability(1e-9, 1000)-1e-6) > 1e-12 {
		t.Error("hitProbability at its edges")
	}
}

// A GPU that holds no weights reads nothing and reports no bandwidth; the JSON stays valid.
func TestPredictIdleGPU(t *testing.T) {
	r := DefaultRules()
	r.Fit, r.CtxSize, r.GPULayers, r.Devices = false, 4096, NGLAll, []string{"CUDA0"}
	r.Items = []Item{CPUMoEItem("--cpu-moe")}
	plan, err := Place(presetModel(t, "qwen3-30b-a3b:q4_k_m"), r, []backend.Device{backend.GPU(0, 24<<30), backend.GPU(1, 24<<30), backend.CPU(0)})
	if err != nil {
		t.Fatal(err)
	}
	hw := testHardware()
	p, err := Predict(plan, hw, PredictOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range p.Decode.Devices {
		if d.Device == "CUDA1" {
			t.Errorf("an idle GPU in the decode breakdown: %+v", d)
		}
	}
	// -ngl 0: the GPU is in the model's list (it computes prompt batches) but holds no
	// weights, and nothing tells its bandwidth; decode does not need it.
	_, cpuOnly := predictPlan(t, "qwen3-30b-a3b:q4_k_m", 24<<30, Flag{"-ngl", "0"}, Flag{"-c", "4096"})
	hw.GPUs = nil
	r.Devices, r.GPULayers, r.Items = nil, 0, nil
	plan0, err := Place(presetModel(t, "qwen3-30b-a3b:q4_k_m"), r, []backend.Device{backend.GPU(0, 24<<30), backend.CPU(0)})
	if err != nil {
		t.Fatal(err)
	}
	if plan0.Prediction, err = Predict(plan0, hw, PredictOptions{}); err != nil {
		t.Fatal(err)
	}
	if d := deviceDecode(t, plan0.Prediction, "CUDA0"); d.Bandwidth != 0 || d.Seconds != 0 || plan0.Prediction.TG != cpuOnly.TG {
		t.Errorf("-ngl 0 without GPU figures: %+v, tg %.3f vs %.3f", d, plan0.Prediction.TG, cpuOnly.TG)
	}
	for _, pl := range []*Plan{plan, plan0} {
		if pl.Prediction == nil {
			pl.Prediction = p
		}
		var b bytes.Buffer
		if err := pl.WriteJSON(&b, nil); err != nil {
			t.Fatal(err)
		}
	}
}

// Calibrating from a run and predicting that run give its speed back; the reference's
// 7950X anchor (Qwen3-30B-A3B Q4_K_M, 27.2 t/s on the CPU alone, 1.95 GB read per token)
// is about 53 GB/s effective.
func TestDecodeBandwidthFromRun(t *testing.T) {
	plan, _ := predictPlan(t, "qwen3-30b-a3b:q4_k_m", 0, Flag{"-c", "4096"})
	hw := Hardware{CPU: CPUSpec{Threads: 16}}
	bw, err := DecodeBandwidthFromRun(plan, hw, 27.2, PredictOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(bw-53) > 1.5 {
		t.Errorf("%.2f GB/s, the measurements note says about 53", bw)
	}
	hw.CPU.DecodeBandwidth = bw
	p, err := Predict(plan, hw, PredictOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(p.TG-27.2) > 1e-9 {
		t.Errorf("predicted %.6f t/s from the bandwidth of a 27.2 t/s run", p.TG)
	}
	for _, bad := range []float64{0, -1, math.Inf(1), math.NaN(), 1001} {
		if _, err := DecodeBandwidthFromRun(plan, hw, bad, PredictOptions{}); err == nil {
			t.Errorf("%v tokens/s accepted", bad)
		}
	}
}

// A prompt's attention grows with the tokens before it. Qwen3-30B-A3B has 48 full-attention
// layers with 32 query heads of 128 (its model card), so a token that sees n keys costs
// 2·(4096 + 4096)·n FLOPs per layer: a ubatch of 512 after 8192 cached tokens does
// 48·16384·(512·8192 + 512·513/2) more than the weights, at the CPU's rate here. A prompt
// of 4 ubatches is slower per token than its first alone, by exactly its later ubatches'
// extra attention.
func TestPredictPromptAttention(t *testing.T) {
	r := DefaultRules()
	r.Fit, r.CtxSize, r.UBatch = false, 16384, 512
	plan, err := Place(presetModel(t, "qwen3-30b-a3b:q4_k_m"), r, []backend.Device{backend.CPU(0)})
	if err != nil {
		t.Fatal(err)
	}
	hw := Hardware{CPU: CPUSpec{Threads: 8, DecodeBandwidth: 50, TFLOPS: 1}}
	predict := func(o PredictOptions) *Prediction {
		p, err := Predict(plan, hw, o)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	pairs := func(u, depth float64) float64 { return u*depth + u*(u+1)/2 }
	const perPair = 48 * 2 * (4096 + 4096) / 1e12 // seconds at 1 TFLOP/s
	shallow, deep := predict(PredictOptions{}), predict(PredictOptions{Depth: 8192})
	if got, want := deep.Prefill.AttentionSeconds, perPair*pairs(512, 8192); math.Abs(got/want-1) > 1e-9 {
		t.Errorf("attention of a ubatch after 8192 tokens: %.4f s, want %.4f", got, want)
	}
	if got, want := deep.Prefill.Seconds-shallow.Prefill.Seconds, perPair*(pairs(512, 8192)-pairs(512, 0)); math.Abs(got/want-1) > 1e-9 {
		t.Errorf("depth 8192 adds %.4f s per ubatch, want %.4f", got, want)
	}
	long := predict(PredictOptions{Prompt: 2048})
	want := 4*shallow.Prefill.Seconds + perPair*(pairs(512, 512)+pairs(512, 1024)+pairs(512, 1536)-3*pairs(512, 0))
	if got := 2048 / long.PP; long.Prompt != 2048 || math.Abs(got/want-1) > 1e-9 {
		t.Errorf("a prompt of 2048: %.4f s for %d tokens, want %.4f s", got, long.Prompt, want)
	}
	if _, err := Predict(plan, hw, PredictOptions{Prompt: -1}); err == nil {
		t.Error("a negative prompt length was accepted")
	}
}

// With --no-host the CPU's weights are either repacked (not a host buffer: ggml's scheduler
// computes them on the CPU) or plain CPU buffers (host memory: copied to the GPU for large
// ubatches), so a prompt copies exactly the hit share of the plain ones.
func TestPredictPrefillRepackedStay(t *testing.T) {
	r := DefaultRules()
	r.Fit, r.CtxSize, r.GPULayers, r.NoHost = false, 4096, NGLAll, true
	r.Items = []Item{CPUMoEItem("--cpu-moe")}
	plan, err := Place(presetModel(t, "qwen3-30b-a3b:q4_k_m"), r, []backend.Device{backend.GPU(0, 24<<30), backend.CPU(0)})
	if err != nil {
		t.Fatal(err)
	}
	p, err := Predict(plan, testHardware(), PredictOptions{})
	if err != nil {
		t.Fatal(err)
	}
	share := hitProbability(8.0/128, plan.Context.NUBatch)
	var plain, repacked float64
	for _, tu := range plan.Tensors {
		if tu.Device != "CPU" || len(tu.Shape) < 2 || tu.Class.String() == "embedding" {
			continue
		}
		b := float64(tu.Bytes)
		if tu.Class.String() == "routed_expert" {
			b *= share
		}
		if tu.Storage == StorageRepacked {
			repacked += b
		} else {
			plain += b
		}
	}
	if repacked == 0 || plain == 0 {
		t.Fatalf("plain %.0f and repacked %.0f bytes on the CPU: the case needs both", plain, repacked)
	}
	if got := float64(p.Prefill.CopyBytes); p.Prefill.OffloadTo != "CUDA0" || math.Abs(got-plain) > 1<<20 {
		t.Errorf("copied %.0f bytes to %q, want the %.0f of the plain CPU weights (%.0f repacked stay)", got, p.Prefill.OffloadTo, plain, repacked)
	}
}

// DeepSeek's MLA layers attend in their compressed space: DeepSeek-V2-Lite's 16 heads score
// against 576-wide cache rows and sum 512-wide values per pair, so a CPU-only ubatch after
// 8192 tokens spends 2·16·(576 + 512) FLOPs per pair on each of its 27 layers.
func TestPredictPromptAttentionMLA(t *testing.T) {
	r := DefaultRules()
	r.Fit, r.CtxSize, r.UBatch = false, 16384, 512
	plan, err := Place(presetModel(t, "deepseek-v2-lite:q4_0"), r, []backend.Device{backend.CPU(0)})
	if err != nil {
		t.Fatal(err)
	}
	if !plan.Model.MLA {
		t.Fatal("the preset is not MLA")
	}
	hw := Hardware{CPU: CPUSpec{Threads: 8, DecodeBandwidth: 50, TFLOPS: 1}}
	p, err := Predict(plan, hw, PredictOptions{Depth: 8192})
	if err != nil {
		t.Fatal(err)
	}
	pairs := 512.0*8192 + 512.0*513/2
	if got, want := p.Prefill.AttentionSeconds, 27*2*16*(576+512)*pairs/1e12; math.Abs(got/want-1) > 1e-9 {
		t.Errorf("MLA attention of a ubatch after 8192 tokens: %.4f s, want %.4f", got, want)
	}
}

// Every weight matmul a GPU computes for a ubatch costs its kernels' launches, whatever the
// ubatch size: the model in VRAM pays them per ubatch, the CPU alone none.
func TestPredictPromptLaunches(t *testing.T) {
	matmuls := func(plan *Plan) (n int) {
		for _, tu := range plan.Tensors {
			if len(tu.Shape) >= 2 && tu.Class != gguf.ClassEmbedding && tu.Device != "CPU" {
				n++
			}
		}
		return n
	}
	for _, ub := range []int{256, 4096} {
		plan, p := predictPlan(t, "deepseek-v2-lite:q4_0", 64<<30, Flag{"-ngl", "99"}, Flag{"-ub", fmt.Sprint(ub)}, Flag{"-b", fmt.Sprint(ub)})
		n := matmuls(plan)
		if n < 27*5 {
			t.Fatalf("only %d weight matmuls on the GPU", n)
		}
		if got, want := p.Prefill.OverheadSeconds, tokenOverhead+float64(kernelsPerMatmul*n)*launchLatency; math.Abs(got/want-1) > 1e-9 {
			t.Errorf("-ub %d: overhead %.2f ms per ubatch, want %.2f", ub, 1e3*got, 1e3*want)
		}
	}
	if _, p := predictPlan(t, "deepseek-v2-lite:q4_0", 0); p.Prefill.OverheadSeconds != tokenOverhead {
		t.Errorf("CPU alone: overhead %.2f ms per ubatch, want t0 alone", 1e3*p.Prefill.OverheadSeconds)
	}
}

// Sparse attention's work, by hand: on DeepSeek-V3.2 a token at depth 32767 scores all
// 32768 positions with its indexer (64 heads × 128: 2 × 8192 FLOPs a position) and attends
// the 2048 it keeps with MLA's absorbed heads (128 × (576 + 512) wide), in each of the 61
// layers; a model without an indexer attends every position.
func TestPredictSparseAttention(t *testing.T) {
	r := DefaultRules()
	r.Fit, r.CtxSize, r.GPULayers, r.Parallel = false, 32768, NGLAll, 1
	r.Items = []Item{CPUMoEItem("--cpu-moe")}
	devs := []backend.Device{backend.GPU(0, 1<<40), backend.CPU(0)}
	plan, err := Place(presetModel(t, "deepseek-v3.2:q4_k_m"), r, devs)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Model.IndexerTopK != 2048 {
		t.Fatalf("indexer top-k %d, want DeepSeek-V3.2's 2048", plan.Model.IndexerTopK)
	}
	e := &estimator{plan: plan}
	want := 61 * (2*8192*32768.0 + 2*128*(576+512)*2048.0)
	if got := e.attentionFLOPs(1, 32767)["CUDA0"]; got != want {
		t.Errorf("DeepSeek-V3.2 at depth 32767: %.4g attention FLOPs a token, want %.4g", got, want)
	}
	dense, err := Place(presetModel(t, "deepseek-v3:q4_k_m"), r, devs)
	if err != nil {
		t.Fatal(err)
	}
	want = 61 * 2 * 128 * (576 + 512) * 32768.0
	if got := (&estimator{plan: dense}).attentionFLOPs(1, 32767)["CUDA0"]; got != want {
		t.Errorf("DeepSeek-V3 at depth 32767: %.4g attention FLOPs a token, want %.4g", got, want)
	}
	for _, c := range []struct {
		u, depth, topK int
		want           float64
	}{{4, 1, 3, 2 + 3 + 3 + 3}, {3, 0, 10, 1 + 2 + 3}, {2, 10, 5, 10}, {512, 0, 2048, 512 * 513 / 2}} {
		if got := keptPairs(c.u, c.depth, c.topK); got != c.want {
			t.Errorf("keptPairs(%d, %d, %d) = %v, want %v", c.u, c.depth, c.topK, got, c.want)
		}
	}
}

// A CPU prompt's matmuls run at the default rate times their weight type's share: the
// same shapes in Q8_0 (share 0.77) take (1/0.77 − 1) × their FLOPs / rate longer than in
// Q4_K_M's K-quants (share 1); the router (F32) and attention are the same in both.
func TestPredictCPUTypeShare(t *testing.T) {
	const ub = 512
	prefill := func(spec string) (*Plan, *PrefillTime) {
		plan, p := predictPlan(t, spec, 0, Flag{"-c", "4096"}, Flag{"-ub", "512"})
		return plan, p.Prefill
	}
	_, k := prefill("qwen3-30b-a3b:q4_k_m")
	plan, q8 := prefill("qwen3-30b-a3b:q8_0")
	var q8FLOPs float64 // the Q8_0 weight matmuls of a ubatch, worked out here
	for _, tu := range plan.Tensors {
		if tu.Type != tensor.Q8_0 || tu.Class == gguf.ClassEmbedding || len(tu.Shape) < 2 {
			continue
		}
		f := 2 * float64(elements(tu.Shape)) * ub
		switch tu.Class {
		case gguf.ClassOutput:
			f /= ub // the last token's logits only
		case gguf.ClassRoutedExpert:
			f *= 8.0 / 128
		}
		q8FLOPs += f
	}
	rate := 16 * 80e9 // testHardware's 16 threads at the default rate
	want := q8FLOPs / rate * (1/0.77 - 1)
	if got := q8.Devices[0].ComputeSeconds - k.Devices[0].ComputeSeconds; q8FLOPs == 0 || math.Abs(got-want) > 1e-9*want {
		t.Errorf("Q8_0 prompt compute %.6f s over Q4_K_M's, want %.6f (%.3g FLOPs of Q8_0 matmuls)", got, want, q8FLOPs)
	}
}

// A stated clock scales the default matmul rate per thread from the 7950X's 80 GFLOP/s at
// 5.7 GHz (3.7 GHz: 51.93 GFLOP/s, worked by hand) and says so; a given rate wins over it.
func TestResolveCPUClock(t *testing.T) {
	plan, _ := predictPlan(t, "qwen3-30b-a3b:q4_k_m", 0, Flag{"-c", "4096"})
	for _, c := range []struct {
		cpu    CPUSpec
		tflops float64
		by     string
	}{
		{CPUSpec{Threads: 44, DecodeBandwidth: 100}, 44 * 0.080, "default"},
		{CPUSpec{Threads: 44, DecodeBandwidth: 100, GHz: 3.7}, 44 * 0.080 * 3.7 / 5.7, "scaled to 3.7 GHz"},
		{CPUSpec{Threads: 44, DecodeBandwidth: 100, GHz: 3.7, TFLOPS: 2}, 2, "given"},
	} {
		m, err := resolve(Hardware{CPU: c.cpu}, plan)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(m.CPUTFLOPS-c.tflops) > 1e-12 || !strings.Contains(m.CPUTFLOPSBy, c.by) {
			t.Errorf("%+v: %.4f TFLOP/s (%s), want %.4f (%s)", c.cpu, m.CPUTFLOPS, m.CPUTFLOPSBy, c.tflops, c.by)
		}
	}
	fast := Hardware{CPU: CPUSpec{GHz: 150}}
	if got := fast.Validate(); got == nil || !strings.Contains(got.Error(), "cpu.ghz") {
		t.Errorf("a 150 GHz CPU: %v", got)
	}
}
