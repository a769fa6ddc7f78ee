package placement

import (
	"strings"
	"testing"
)

// ik_llama.cpp's differences on the same flags (reference §7).
func TestIKLlamaSemantics(t *testing.T) {
	m := openModel(t, tinyQwen)
	devs := devicesFor(8)
	ik := func(ngl int, items ...Item) *Plan {
		r := DefaultRules()
		r.Semantics, r.Fit, r.GPULayers, r.CtxSize, r.Items = IKLlama, false, ngl, 4096, items
		return place(t, m, r, devs)
	}
	layers := func(p *Plan) string {
		var s []string
		for _, l := range p.Layers[:5] {
			s = append(s, l.Label()+"="+l.Device)
		}
		return strings.Join(s, " ")
	}
	// The old -ngl rule: the last N blocks, the output layer only when N exceeds the blocks.
	if got := layers(ik(2)); got != "0=CPU 1=CPU 2=CUDA0 3=CUDA0 output=CPU" {
		t.Errorf("ik -ngl 2: %s", got)
	}
	if got := layers(ik(5)); got != "0=CUDA0 1=CUDA0 2=CUDA0 3=CUDA0 output=CUDA0" {
		t.Errorf("ik -ngl 5: %s", got)
	}
	// Mainline for comparison: the output layer first.
	r := DefaultRules()
	r.GPULayers, r.CtxSize = 2, 4096
	if got := layers(place(t, m, r, devs)); got != "0=CPU 1=CPU 2=CPU 3=CUDA0 output=CUDA0" {
		t.Errorf("mainline -ngl 2: %s", got)
	}
	// -ngl 0 discards every override.
	ot, _ := ParseOverrideTensor("-ot", "exps=CUDA0")
	p := ik(0, ot...)
	for _, tu := range p.Tensors {
		if tu.Device != "CPU" {
			t.Errorf("ik -ngl 0: %s on %s", tu.Name, tu.Device)
		}
	}
	if p.Rules[0].IgnoredReason == "" {
		t.Error("ik -ngl 0: the rule is not marked ignored")
	}
	// -ncmoe N takes the last N blocks with experts, after the user's -ot entries, and
	// overrides to the CPU go to the pinned host buffer (and turn mmap off).
	n1, _ := NCPUMoEItem("-ncmoe", "1")
	p = ik(99, n1)
	for _, tu := range p.Tensors {
		exps := strings.Contains(tu.Name, "_exps")
		if exps && tu.Layer == 3 && (tu.Device != "CPU" || tu.Buffer != "CUDA_Host" || tu.Storage != StoragePinned) {
			t.Errorf("ik -ncmoe 1: %s on %s/%s/%s", tu.Name, tu.Device, tu.Buffer, tu.Storage)
		}
		if exps && tu.Layer < 3 && tu.Device != "CUDA0" {
			t.Errorf("ik -ncmoe 1: %s on %s", tu.Name, tu.Device)
		}
	}
	if p.Settings.Mmap {
		t.Error("ik: mmap still on with tensors overridden to the CPU")
	}
	if got := p.Rules[0].Patterns; len(got) != 1 || got[0] != `blk\.3\.ffn_(up|down|gate|gate_up)_exps\.(weight|scale)` {
		t.Errorf("ik -ncmoe 1 patterns %q", got)
	}
	// --cpu-moe is -ncmoe 999: every MoE block.
	if p := ik(99, CPUMoEItem("-cmoe")); len(p.Rules[0].Patterns) != 4 {
		t.Errorf("ik -cmoe: %d patterns", len(p.Rules[0].Patterns))
	}
	// ik_llama.cpp's unknown-buffer-type message.
	r = DefaultRules()
	r.Semantics, r.Fit = IKLlama, false
	r.Items, _ = ParseOverrideTensor("-ot", "exps=Metal")
	if _, err := Place(m, r, devs); err == nil || !strings.Contains(err.Error(), "error: Invalid tensor buffer type override: exps=Metal") {
		t.Errorf("ik unknown buffer type: %v", err)
	}
	r.Items, r.Fit = nil, true
	if _, err := Place(m, r, devs); err == nil {
		t.Error("ik --fit accepted")
	}
}
