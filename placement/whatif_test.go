package placement

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/gguf"
)

// routingDocument writes a moerun.expert-stats/v1 document (the layout moe.ExpertStats
// writes) with selected[layer][expert] counts over tokens tokens per layer.
func routingDocument(tokens uint64, selected map[int][]uint64) string {
	var b strings.Builder
	b.WriteString(`{"schema":"moerun.expert-stats/v1","model":"test","layers":[`)
	first := true
	for layer := range 4096 {
		sel, ok := selected[layer]
		if !ok {
			continue
		}
		if !first {
			b.WriteString(",")
		}
		first = false
		fmt.Fprintf(&b, `{"layer":%d,"tokens":%d,"dropped_slots":0,"experts":[`, layer, tokens)
		for e, n := range sel {
			if e > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, `{"expert":%d,"selected":%d,"weight_sum":%d.5}`, e, n, n)
		}
		b.WriteString("]}")
	}
	b.WriteString("]}")
	return b.String()
}

func readRouting(t *testing.T, doc string) *RoutingStats {
	t.Helper()
	s, err := ReadRoutingStats(strings.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// tinyExpertPlan places the tiny qwen3moe fixture (4 blocks of 16 Q4_0 experts, 4 used) with the
// first two blocks' experts in RAM.
func tinyExpertPlan(t *testing.T) *Plan {
	t.Helper()
	r := DefaultRules()
	r.Fit, r.GPULayers, r.CtxSize = false, NGLAll, 4096
	r.Items = []Item{{Kind: ItemNCPUMoE, Flag: "--n-cpu-moe", Text: "2", N: 2, Target: "CPU"}}
	plan, err := Place(openModel(t, tinyQwen), r, []backend.Device{backend.GPU(0, 4<<30), backend.CPU(0)})
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

// By hand: every token routes to experts 0-3 in every layer (k = 4 of 16). The VRAM of two
// whole layers holds all 16 hot experts, so every expert read comes from VRAM; the CPU's
// expert reads vanish, the GPU's double, and blocks 2 and 3 gain the two crossings of layers
// with experts on both sides. (A slow CPU, 50 MB/s, makes the tiny model's expert reads
// count next to the 1 ms per-token overhead.)
func TestWhatIfByHand(t *testing.T) {
	plan := tinyExpertPlan(t)
	hot := []uint64{100, 100, 100, 100, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	stats := readRouting(t, routingDocument(100, map[int][]uint64{0: hot, 1: hot, 2: hot, 3: hot}))
	hw := testHardware()
	hw.CPU.DecodeBandwidth = 0.05
	w, err := ExpertWhatIf(plan, hw, stats, PredictOptions{})
	if err != nil {
		t.Fatal(err)
	}
	base, err := Predict(plan, hw, PredictOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var layerBytes int64 // one block's routed experts
	for _, tu := range plan.Tensors {
		if tu.Class == gguf.ClassRoutedExpert && tu.Layer == 0 {
			layerBytes += tu.Bytes
		}
	}
	perToken := float64(layerBytes) * 4 / 16 // reads of one block, uniform or hot
	want := 1 / (1/base.TG - 2*perToken/(0.05e9) + 2*perToken/(0.7*1008e9) + 4*20e-6)
	if math.Abs(w.Equal.TG/want-1) > 1e-9 || w.Equal.Experts != 16 || w.Equal.Coverage != 1 || w.Equal.Budget != 2*layerBytes {
		t.Errorf("equal VRAM: tg %.3f (by hand %.3f), %d experts, coverage %.3f, budget %d (2 blocks: %d)", w.Equal.TG, want, w.Equal.Experts, w.Equal.Coverage, w.Equal.Budget, 2*layerBytes)
	}
	if math.Abs(w.LayerTG-base.TG) > 1e-9 || w.Recommend != "expert-granular" || w.Equal.Gain <= minGain {
		t.Errorf("layer tg %.3f (plan %.3f), recommend %s, gain %.3f", w.LayerTG, base.TG, w.Recommend, w.Equal.Gain)
	}
	// The rules name the hot experts per block on the GPU, then everything else to the CPU.
	rules := strings.Join(w.Equal.Rules, " ")
	for _, want := range []string{`blk\.0` + expsRegex + `@0-3=CUDA0`, `blk\.3` + expsRegex + `@0-3=CUDA0`, expsRegex + "=CPU"} {
		if !strings.Contains(rules, want) {
			t.Errorf("rules %q lack %q", rules, want)
		}
	}
	if len(w.Llama) != 1 || w.Llama[0] != "--n-cpu-moe 2" {
		t.Errorf("llama.cpp flags %q", w.Llama)
	}
}

// Uniform routing has no hot experts: splitting layers only adds crossings, so the advice
// stays whole layers.
func TestWhatIfUniform(t *testing.T) {
	plan := tinyExpertPlan(t)
	even := make([]uint64, 16)
	for i := range even {
		even[i] = 25
	}
	stats := readRouting(t, routingDocument(100, map[int][]uint64{0: even, 1: even, 2: even, 3: even}))
	w, err := ExpertWhatIf(plan, testHardware(), stats, PredictOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if w.Recommend != "layer" || w.Equal.Gain > 0.001 || math.Abs(w.Skew-0.25*1/4) > 1e-9 {
		t.Errorf("uniform routing: recommend %s, gain %+.4f, skew %.3f", w.Recommend, w.Equal.Gain, w.Skew)
	}
}

// Statistics that do not belong to the model are refused.
func TestWhatIfMismatch(t *testing.T) {
	plan := tinyExpertPlan(t)
	for doc, want := range map[string]string{
		routingDocument(10, map[int][]uint64{7: make([]uint64, 16)}): "no routed experts",
		routingDocument(10, map[int][]uint64{0: make([]uint64, 8)}):  "8 experts",
	} {
		if _, err := ExpertWhatIf(plan, testHardware(), readRouting(t, doc), PredictOptions{}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want %q", err, want)
		}
	}
}

// The what-if travels in the place report.
func TestWhatIfReports(t *testing.T) {
	plan := tinyExpertPlan(t)
	hot := []uint64{100, 100, 100, 100, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	stats := readRouting(t, routingDocument(100, map[int][]uint64{0: hot, 1: hot}))
	hw := testHardware()
	hw.CPU.DecodeBandwidth = 0.05
	p, err := Predict(plan, hw, PredictOptions{Routing: stats})
	if err != nil {
		t.Fatal(err)
	}
	if p.WhatIf, err = ExpertWhatIf(plan, hw, stats, PredictOptions{}); err != nil {
		t.Fatal(err)
	}
	plan.Prediction = p
	var text, js bytes.Buffer
	if err := plan.WriteText(&text, TextOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := plan.WriteJSON(&js, nil); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"EXPERT WHAT-IF", "not expressible in llama.cpp", "@0-3"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q", want)
		}
	}
	var doc struct {
		Prediction struct {
			WhatIf struct {
				Recommend string `json:"recommend"`
				Equal     struct {
					Rules []string `json:"rules"`
				} `json:"equal_vram"`
			} `json:"expert_what_if"`
		} `json:"prediction"`
	}
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil || doc.Prediction.WhatIf.Recommend == "" || len(doc.Prediction.WhatIf.Equal.Rules) == 0 {
		t.Errorf("JSON what-if: %+v (%v)", doc.Prediction.WhatIf, err)
	}
	// Measured routing also sets the share of experts a prompt ubatch hits: with only 4 hot
	// experts per layer, far fewer than uniform routing's.
	if uniform := hitProbability(4.0/16, 512); p.Prefill.ActiveShare >= uniform {
		t.Errorf("active share %.3f with hot experts, uniform %.3f", p.Prefill.ActiveShare, uniform)
	}
}

func TestExpertList(t *testing.T) {
	for in, want := range map[string]string{"3 17 40 41 42": "3+17+40-42", "1 2": "1+2", "5": "5", "0 1 2 3 9 10": "0-3+9+10"} {
		var ids []int
		for _, f := range strings.Fields(in) {
			var n int
			fmt.Sscan(f, &n)
			ids = append(ids, n)
		}
		if got := expertList(ids); got != want {
			t.Errorf("%s: %s, want %s", in, got, want)
		}
	}
}

func TestReadRoutingStatsErrors(t *testing.T) {
	for doc, want := range map[string]string{
		`{"schema":"moerun.expert-stats/v2","layers":[]}`:                                                             "schema",
		`{"schema":"moerun.expert-stats/v1","layers":[{"tokens":1,"experts":[{"expert":0,"selected":1}]}]}`:           "layer index",
		`{"schema":"moerun.expert-stats/v1","layers":[{"layer":1,"tokens":1,"experts":[{"expert":0,"selected":2}]}]}`: "selected 2 times",
		`{"schema":"moerun.expert-stats/v1","layers":[{"layer":1,"tokens":1,"experts":[{"expert":1,"selected":1}]}]}`: "expert ids",
		`{"schema":"moerun.expert-stats/v1","layers":[{"layer":1,"tokens":1,"experts":[{"expert":0},{"expert":0}]}]}`: "twice",
		`{"schema":"moerun.expert-stats/v1","layers":[{"layer":1,"tokens":1,"experts":[]}]}`:                          "0 experts",
		routingDocument(1, map[int][]uint64{1: {1}}) + "x":                                                            "expert statistics",
		strings.Replace(routingDocument(1, map[int][]uint64{1: {1}, 2: {1}}), `"layer":2`, `"layer":1`, 1):            "listed twice",
	} {
		if _, err := ReadRoutingStats(strings.NewReader(doc)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", doc, err, want)
		}
	}
}

// ReadRoutingStats never panics, and what it accepts is consistent: probabilities in [0, 1].
func FuzzReadRoutingStats(f *testing.F) {
	f.Add(routingDocument(100, map[int][]uint64{0: {100, 50, 0, 0}, 3: {1, 2, 3, 4}}))
	f.Add(`{"schema":"moerun.expert-stats/v1","model":"m","layers":[]}`)
	f.Fuzz(func(t *testing.T, doc string) {
		s, err := ReadRoutingStats(strings.NewReader(doc))
		if err != nil {
			return
		}
		for il := range s.Layers {
			for _, p := range s.probabilities(il) {
				if p < 0 || p > 1 || math.IsNaN(p) {
					t.Fatalf("layer %d: probability %v", il, p)
				}
			}
		}
	})
}
