package moe

import (
	"strings"
	"testing"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/gguf/synth"
	"github.com/moerun/moerun/placement"
)

// GLM-4.7-Flash's layout (deepseek2 with a NextN/MTP block) loads with its NextN block
// checked as llama.cpp's loader checks it and not loaded: a missing or misshapen tensor of
// the block is a clear error, and a file converted without the block's tensors loads.
func TestDeepSeek2NextN(t *testing.T) {
	sm, err := synth.Build("glm-4.7-flash:q8_0", synth.Options{Layers: 2, LeadingDense: 1, Embd: 64, FF: 96, Heads: 2,
		QLoraRank: 32, KVLoraRank: 32, Experts: 4, ExpertsUsed: 2, ExpertFF: 32, Vocab: 512})
	if err != nil {
		t.Fatal(err)
	}
	path := t.TempDir() + "/flash.gguf"
	if _, err := sm.WriteSparse(path); err != nil {
		t.Fatal(err)
	}
	if m := openModel(t, path, 1); m.Config.NextN != 1 || m.Config.Layers != 2 {
		t.Fatalf("layers %d, NextN %d; want 2 and 1", m.Config.Layers, m.Config.NextN)
	}
	reshape := func(name string, shape ...int64) modelEdit {
		return modelEdit{tensors: func(_ *testing.T, _ *gguf.File, specs []gguf.TensorSpec, data map[string][]byte) []gguf.TensorSpec {
			for i := range specs {
				if specs[i].Name == name {
					specs[i].Shape = shape
					n, _ := specs[i].Type.Bytes(shape)
					data[name] = make([]byte, n)
				}
			}
			return specs
		}}
	}
	for _, c := range []struct {
		name string
		edit modelEdit
		want string // "" loads
	}{
		{"missing norm", modelEdit{tensors: dropTensor("blk.2.nextn.enorm.weight")}, "NextN block 2: tensor blk.2.nextn.enorm.weight is missing"},
		{"missing expert", modelEdit{tensors: dropTensor("blk.2.ffn_up_exps.weight")}, "NextN block 2: tensor blk.2.ffn_up_exps.weight is missing"},
		{"misshapen latent norm", reshape("blk.2.attn_kv_a_norm.weight", 16), "blk.2.attn_kv_a_norm.weight"},
		{"no head copy (optional)", modelEdit{tensors: dropTensor("blk.2.nextn.shared_head_head.weight")}, ""},
		{"converted without the block", modelEdit{tensors: func(_ *testing.T, _ *gguf.File, specs []gguf.TensorSpec, _ map[string][]byte) []gguf.TensorSpec {
			var kept []gguf.TensorSpec
			for _, s := range specs {
				if !strings.HasPrefix(s.Name, "blk.2.") {
					kept = append(kept, s)
				}
			}
			return kept
		}}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, _, host := openHost(t, rewriteModel(t, path, c.edit), 1)
			plan := placeModel(t, f, placement.DefaultRules(), []backend.Device{host.Device()})
			_, err := Load(f, plan, []backend.Backend{host})
			if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
				t.Errorf("got %v, want %q", err, c.want)
			}
		})
	}
}
