package placement

import (
	"testing"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/placement/placetest"
)

// twentyRules is a realistic override list for DeepSeek-V3 on two GPUs: a few layers'
// experts pinned to each GPU, the rest to the CPU, written the ways users write them.
var twentyRules = []string{
	`blk\.3\.ffn_.*_exps=CUDA0`, `blk\.4\.ffn_.*_exps=CUDA0`, `blk\.5\.ffn_.*_exps=CUDA0`, `blk\.6\.ffn_.*_exps=CUDA0`,
	`blk\.(7|8|9)\.ffn_(up|gate)_exps=CUDA1`, `blk\.1[0-2]\.ffn_.*_exps=CUDA1`, `blk\.13\.ffn_down_exps=CUDA1`,
	`blk\.14\.ffn_up_exps\.weight=CUDA1`, `^blk\.15\.ffn_gate_exps=CUDA1`, `blk\.16\.=CUDA1`, `blk.17.ffn=CUDA1`,
	`ffn_up_shexp=CUDA0`, `ffn_gate_shexp=CUDA0`, `ffn_down_shexp=CUDA0`, `attn_.*=CUDA0`, `token_embd=CPU`,
	`blk\.[2-5][0-9]\.ffn_down_exps=CPU`, `\.ffn_(up|down|gate)_exps=CPU`, `exps=CPU`, `output=CUDA1`,
}

func deepSeekModel(tb testing.TB) Model {
	tb.Helper()
	l, err := placetest.DeepSeekV3(placetest.Q4_K_M, false)
	if err != nil {
		tb.Fatal(err)
	}
	infos, err := l.Infos()
	if err != nil {
		tb.Fatal(err)
	}
	return Model{Name: "DeepSeek-V3 Q4_K_M", Metadata: l.Metadata, Tensors: infos}
}

func BenchmarkPlaceDeepSeekV3TwentyRules(b *testing.B) {
	m := deepSeekModel(b)
	r := DefaultRules()
	r.GPULayers, r.CtxSize = 99, 32768
	for _, v := range twentyRules {
		items, err := ParseOverrideTensor("-ot", v)
		if err != nil {
			b.Fatal(err)
		}
		r.Items = append(r.Items, items...)
	}
	devs := []backend.Device{backend.GPU(0, 24<<30), backend.GPU(1, 24<<30), backend.CPU(512 << 30)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Place(m, r, devs); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPlaceDeepSeekV3Fit(b *testing.B) {
	m := deepSeekModel(b)
	devs := []backend.Device{backend.GPU(0, 24<<30), backend.CPU(512 << 30)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Place(m, DefaultRules(), devs); err != nil {
			b.Fatal(err)
		}
	}
}
