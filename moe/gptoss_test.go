package moe

import (
	"testing"

	"github.com/moerun/moerun/gguf"
)

// TestGPTOSSLayers checks what each gpt-oss layer was bound with, against llama.cpp's
// set_swa_pattern worked by hand: the window (and rope.freq_base_swa, when present) on
// the even layers only for the default period 2, on layers 0-2 for period 4; sinks,
// biases and the clamped SwiGLU everywhere.
func TestGPTOSSLayers(t *testing.T) {
	check := func(t *testing.T, m *testModel, swa []bool, swaBase float32) {
		t.Helper()
		for il, l := range m.layers {
			a := l.attn.(*gqa)
			wantWindow, wantBase := 0, m.Config.RoPE.Base
			if swa[il] {
				wantWindow, wantBase = 128, swaBase
			}
			if a.window != wantWindow || a.rope.Base != wantBase || a.sinks.t.Elements() != 4 || !a.oBias.valid() || !a.qBias.valid() {
				t.Errorf("layer %d: window %d, RoPE base %g, %d sinks, output bias %t; want window %d, base %g",
					il, a.window, a.rope.Base, a.sinks.t.Elements(), a.oBias.valid(), wantWindow, wantBase)
			}
			f := l.ffn.(*moeFFN)
			if !f.clampedGLU || f.routerBias.t.Elements() != 16 || f.experts[0].gateBias.t.Elements() != 128*16 || f.experts[0].downBias.t.Elements() != 192*16 {
				t.Errorf("layer %d: expert biases or activation not bound", il)
			}
		}
	}
	t.Run("fixture", func(t *testing.T) {
		m := openModel(t, archModel("gpt-oss"), 1)
		if m.Config.Router.Gating != GatingSoftmaxWeight || m.Config.Router.NormWeights {
			t.Errorf("router %+v, want softmax over the selected without renormalisation", m.Config.Router)
		}
		check(t, m, []bool{true, false, true, false}, 150000)
	})
	t.Run("freq_base_swa and pattern 4", func(t *testing.T) {
		m := openModel(t, rewriteModel(t, archModel("gpt-oss"), modelEdit{set: map[string]gguf.Value{
			"{arch}.rope.freq_base_swa":               gguf.NewValue(float32(10000)),
			"{arch}.attention.sliding_window_pattern": gguf.NewValue(uint32(4)),
		}}), 1)
		check(t, m, []bool{true, true, true, false}, 10000)
	})
}
