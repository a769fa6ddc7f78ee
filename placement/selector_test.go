package placement

import (
	"slices"
	"strings"
	"testing"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/gguf"
)

func TestParseExpertSelector(t *testing.T) {
	for in, want := range map[string]string{"0-3+8": "0-3+8", "8+0-3+2": "0-3+8", "5": "5", "1+2": "1+2", "hot:16": "hot:16", "7-7": "7"} {
		s, err := ParseExpertSelector(in)
		if err != nil || s.String() != want {
			t.Errorf("ParseExpertSelector(%q) = %v, %v; want %s", in, s, err, want)
		}
	}
	for in, why := range map[string]string{"": "not an expert id", "3-1": "backwards", "1++2": "not an expert id", "hot:0": "hot:K", "hot:x": "hot:K",
		"-1": "not an expert id", "99999": "below", "0-70000": "below"} {
		if _, err := ParseExpertSelector(in); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("ParseExpertSelector(%q): %v, want an error saying %q", in, err, why)
		}
	}
	// Only a tail that reads as a selector is one: a regex may hold '@' elsewhere.
	for in, want := range map[string]string{"exps@0-3": "exps|0-3", "a@b": "a@b|", "x[@]12": "x[@]12|", "a@1@hot:2": "a@1|hot:2", "a@": "a@|"} {
		regex, sel, err := splitSelector(in)
		got := regex + "|"
		if sel != nil {
			got += sel.String()
		}
		if err != nil || got != want {
			t.Errorf("splitSelector(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// shares lists a plan's shares of tensor name as "DEVICE:experts" in plan order ("DEVICE"
// for a whole tensor), and checks they are consecutive and sum to its bytes.
func shares(t *testing.T, plan *Plan, m Model, name string) []string {
	t.Helper()
	var out []string
	var bytes, size int64
	for _, ti := range m.Tensors {
		if ti.Name == name {
			size = ti.Size
		}
	}
	last := -2
	for i, u := range plan.Tensors {
		if u.Name != name || u.Tied {
			continue
		}
		if last >= 0 && last != i-1 {
			t.Errorf("%s: its shares are not consecutive", name)
		}
		last = i
		bytes += u.Bytes
		if u.Experts == nil {
			out = append(out, u.Device)
			continue
		}
		out = append(out, u.Device+":"+expertList(u.Experts))
	}
	if bytes != size {
		t.Errorf("%s: shares of %d bytes, the tensor has %d", name, bytes, size)
	}
	return out
}

// By hand, on the tiny qwen3moe fixture (4 blocks of 16 experts) with -ngl 99: each expert
// takes the first rule that matches its stack and selects it, a rule without selector
// takes the rest, and what no rule takes follows the layer map; experts that land in the
// same buffer form one share.
func TestExpertSelectorsByHand(t *testing.T) {
	m := openModel(t, tinyQwen)
	r := DefaultRules()
	r.Fit, r.GPULayers, r.CtxSize = false, NGLAll, 4096
	items, err := ParseOverrideTensor("-ot", `blk\.0\.ffn_.*_exps@0-3+8=CPU,blk\.0\.ffn_up_exps@2-5=CUDA0,blk\.1\.ffn_.*_exps@15=CPU,blk\.(0|1)\.ffn_down_exps=CUDA0,blk\.2\.ffn_gate_exps@0-15=CPU`)
	if err != nil {
		t.Fatal(err)
	}
	r.Items = items
	plan, err := Place(m, r, []backend.Device{backend.GPU(0, 4<<30), backend.CPU(0)})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][]string{
		// Rule 1 takes 0-3 and 8 to the CPU; rule 2 gets 4 and 5 (2 and 3 were taken); the
		// rest follows the layer map to CUDA0, the same buffer as rule 2's: one share.
		"blk.0.ffn_up_exps.weight": {"CPU:0-3+8", "CUDA0:4-7+9-15"},
		// Rule 1, then rule 4 (no selector) takes the rest, to CUDA0.
		"blk.0.ffn_down_exps.weight": {"CPU:0-3+8", "CUDA0:4-7+9-15"},
		"blk.0.ffn_gate_exps.weight": {"CPU:0-3+8", "CUDA0:4-7+9-15"},
		"blk.1.ffn_up_exps.weight":   {"CUDA0:0-14", "CPU:15"},
		// A selector holding every expert leaves nothing to split.
		"blk.2.ffn_gate_exps.weight": {"CPU"},
		"blk.2.ffn_up_exps.weight":   {"CUDA0"},
		"blk.0.ffn_gate_inp.weight":  {"CUDA0"}, // not a stack: rule 1's selector leaves it alone
	} {
		if got := shares(t, plan, m, name); !slices.Equal(got, want) {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
	var held, total int64
	for _, d := range plan.Devices {
		held += d.Weights
	}
	for _, tu := range plan.Tensors {
		total += tu.Bytes
	}
	if held != total {
		t.Errorf("devices hold %d bytes, the tensors' shares sum to %d", held, total)
	}
	l0 := plan.Layers[0]
	if l0.Experts["CPU"] != 5 || l0.Experts["CUDA0"] != 11 || l0.RoutedCell() != "CPU 5+CUDA0 11" {
		t.Errorf("layer 0's experts per device %v, cell %q", l0.Experts, l0.RoutedCell())
	}
	if r := plan.Rules[0]; r.Decided != 3 || len(r.Warnings) == 0 || !strings.Contains(r.Warnings[0], "moerun's own") {
		t.Errorf("rule 1: decided %d, warnings %q", r.Decided, r.Warnings)
	}
}

// hot:K takes each layer's K most selected experts in --hot-stats, ties to the lower id; an
// expert the model does not have, or hot:K without statistics, is refused.
func TestExpertSelectorsHot(t *testing.T) {
	m := openModel(t, tinyQwen)
	r := DefaultRules()
	r.Fit, r.GPULayers, r.CtxSize = false, NGLAll, 4096
	r.Items, _ = ParseOverrideTensor("-ot", "exps@hot:3=CUDA0,exps=CPU")
	devs := []backend.Device{backend.GPU(0, 4<<30), backend.CPU(0)}
	if _, err := Place(m, r, devs); err == nil || !strings.Contains(err.Error(), "--hot-stats") {
		t.Errorf("hot:3 without statistics: %v", err)
	}
	counts := func(hot ...int) []uint64 {
		c := make([]uint64, 16)
		for i, e := range hot {
			c[e] = uint64(50 - i)
		}
		return c
	}
	layer1 := counts(9, 4)
	layer1[12], layer1[6] = 48, 48 // a tie for third: the lower id wins
	r.HotStats = readRouting(t, routingDocument(100, map[int][]uint64{0: counts(7, 2, 11), 1: layer1, 2: counts(0, 1, 2), 3: counts(13, 14, 15)}))
	plan, err := Place(m, r, devs)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][]string{
		"blk.0.ffn_up_exps.weight": {"CPU:0+1+3-6+8-10+12-15", "CUDA0:2+7+11"},
		"blk.1.ffn_up_exps.weight": {"CPU:0-3+5+7+8+10-15", "CUDA0:4+6+9"},
		"blk.3.ffn_up_exps.weight": {"CPU:0-12", "CUDA0:13-15"},
	} {
		if got := shares(t, plan, m, name); !slices.Equal(got, want) {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
	r.Items, _ = ParseOverrideTensor("-ot", "exps@3+16=CUDA0")
	if _, err := Place(m, r, devs); err == nil || !strings.Contains(err.Error(), "expert 16") || !strings.Contains(err.Error(), "16 experts") {
		t.Errorf("expert 16 of 16: %v", err)
	}
}

// The what-if's expert rules are accepted by place and give what it promised: with every
// token routed to experts 0-3 and two blocks' worth of VRAM, those experts of every block go
// to the GPU and the rest to the CPU.
func TestWhatIfRulesPlace(t *testing.T) {
	plan := tinyExpertPlan(t)
	hot := []uint64{100, 100, 100, 100, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	stats := readRouting(t, routingDocument(100, map[int][]uint64{0: hot, 1: hot, 2: hot, 3: hot}))
	w, err := ExpertWhatIf(plan, testHardware(), stats, PredictOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := DefaultRules()
	r.Fit, r.GPULayers, r.CtxSize = false, NGLAll, 4096
	for _, rule := range w.Equal.Rules {
		items, err := ParseOverrideTensor("-ot", rule)
		if err != nil {
			t.Fatalf("%s: %v", rule, err)
		}
		r.Items = append(r.Items, items...)
	}
	placed, err := Place(openModel(t, tinyQwen), r, []backend.Device{backend.GPU(0, 4<<30), backend.CPU(0)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tu := range placed.Tensors {
		if tu.Class != gguf.ClassRoutedExpert {
			continue
		}
		if got := tu.Device + ":" + expertList(tu.Experts); got != "CUDA0:0-3" && got != "CPU:4-15" {
			t.Errorf("%s: share %s", tu.Name, got)
		}
	}
	p, err := Predict(placed, testHardware(), PredictOptions{Routing: stats})
	if err != nil {
		t.Fatal(err)
	}
	if cpu := deviceDecode(t, p, "CPU"); cpu.ExpertBytes != 0 {
		t.Errorf("the CPU reads %d expert bytes a token, but no token routes to its experts", cpu.ExpertBytes)
	}
}

// The what-if's one-selector placement, by hand on the tiny fixture: the VRAM of two whole
// expert layers (32 expert slices) spread over four layers is 8 experts a layer, the hot
// ones first; placed back with the statistics (hot:8), experts 0-7 of every layer go to the
// GPU, and the CPU reads nothing a token routes to.
func TestWhatIfHotSelector(t *testing.T) {
	plan := tinyExpertPlan(t)
	hot := []uint64{100, 100, 100, 100, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	stats := readRouting(t, routingDocument(100, map[int][]uint64{0: hot, 1: hot, 2: hot, 3: hot}))
	hw := testHardware()
	hw.CPU.DecodeBandwidth = 0.05 // slow enough that the tiny model's expert reads count
	w, err := ExpertWhatIf(plan, hw, stats, PredictOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{expsRegex + "@hot:8=CUDA0", expsRegex + "=CPU"}
	if w.HotK != 8 || !slices.Equal(w.Hot.Rules, want) || w.Hot.Coverage != 1 || w.Hot.Gain <= 0 {
		t.Fatalf("hot: K %d, rules %q, coverage %.2f, gain %.3f; want K 8, %q, coverage 1", w.HotK, w.Hot.Rules, w.Hot.Coverage, w.Hot.Gain, want)
	}
	r := DefaultRules()
	r.Fit, r.GPULayers, r.CtxSize, r.HotStats = false, NGLAll, 4096, stats
	for _, rule := range w.Hot.Rules {
		items, err := ParseOverrideTensor("-ot", rule)
		if err != nil {
			t.Fatal(err)
		}
		r.Items = append(r.Items, items...)
	}
	m := openModel(t, tinyQwen)
	placed, err := Place(m, r, []backend.Device{backend.GPU(0, 4<<30), backend.CPU(0)})
	if err != nil {
		t.Fatal(err)
	}
	if got := shares(t, placed, m, "blk.3.ffn_down_exps.weight"); !slices.Equal(got, []string{"CUDA0:0-7", "CPU:8-15"}) {
		t.Errorf("blk.3.ffn_down_exps.weight: %q", got)
	}
	p, err := Predict(placed, hw, PredictOptions{Routing: stats})
	if err != nil {
		t.Fatal(err)
	}
	if cpu := deviceDecode(t, p, "CPU"); cpu.ExpertBytes != 0 {
		t.Errorf("the CPU reads %d expert bytes a token", cpu.ExpertBytes)
	}
}
