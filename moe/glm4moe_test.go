package moe

import (
	"slices"
	"strings"
	"testing"

	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/tensor"
)

// TestGLM4MoEConfig checks what llama.cpp derives from the fixture's metadata
// (tiny-glm4moe: 4 blocks of which the last is a NextN block, 6 heads of 64 over 2 KV
// heads, 32 rotary dims, one leading dense layer, 16 experts of width 128, top-4, one
// shared expert, sigmoid gating, weights normalised and scaled by 2.5).
func TestGLM4MoEConfig(t *testing.T) {
	c := readFixtureConfig(t, archModel("glm4moe"))
	want := RouterConfig{Experts: 16, Used: 4, Gating: GatingSigmoid, NormWeights: true, Scale: 2.5, Groups: 1, GroupsUsed: 1}
	if c.Router != want {
		t.Errorf("router %+v, want %+v", c.Router, want)
	}
	if c.Layers != 3 || c.Heads != 6 || c.HeadsKV != 2 || c.HeadK != 64 || c.FF != 384 || c.FFExp != 128 || c.FFShexp != 128 || c.DenseLead != 1 {
		t.Errorf("config %+v", c)
	}
	if c.RoPE.Mode != tensor.RoPENeoX || c.RoPE.Dims != 32 || c.Rot != 32 {
		t.Errorf("rope %+v", c.RoPE)
	}
	// Without expert_gating_func GLM-4.5 gates with sigmoids.
	noGating := rewriteModel(t, archModel("glm4moe"), modelEdit{delete: []string{"{arch}.expert_gating_func"}})
	if c := readFixtureConfig(t, noGating); c.Router.Gating != GatingSigmoid {
		t.Errorf("default gating %v, want sigmoid", c.Router.Gating)
	}
}

// TestGLM4MoENextNOptional checks that the NextN block's tensors llama.cpp makes optional
// may be absent (its q/k/v projections and biases, embed_tokens, shared_head_*), and that
// the block, which is not run, does not change the logits.
func TestGLM4MoENextNOptional(t *testing.T) {
	optional := func(name string) bool {
		rest, ok := strings.CutPrefix(name, "blk.3.")
		return ok && (strings.HasPrefix(rest, "attn_q.") || strings.HasPrefix(rest, "attn_k.") ||
			strings.HasPrefix(rest, "attn_v.") || strings.HasPrefix(rest, "nextn.embed_tokens") ||
			strings.HasPrefix(rest, "nextn.shared_head"))
	}
	path := rewriteModel(t, archModel("glm4moe"), modelEdit{tensors: func(t *testing.T, _ *gguf.File, specs []gguf.TensorSpec, _ map[string][]byte) []gguf.TensorSpec {
		n := len(specs)
		specs = slices.DeleteFunc(specs, func(s gguf.TensorSpec) bool { return optional(s.Name) })
		if n-len(specs) != 9 {
			t.Fatalf("dropped %d tensors, want 9", n-len(specs))
		}
		return specs
	}})
	tokens := promptOf(t, "tiny-glm4moe", "fox")
	full := evalAll(t, openModel(t, archModel("glm4moe"), 1), DefaultContextOptions(), tokens)
	trimmed := evalAll(t, openModel(t, path, 1), DefaultContextOptions(), tokens)
	if !slices.Equal(full, trimmed) {
		t.Error("the logits depend on the NextN block")
	}
}

// FuzzGLM4MoEMetadata gives the GLM fixture arbitrary values for the keys its layout
// depends on (NextN and leading dense blocks, partial rotary, shared experts, gating):
// every inconsistency must be an error, never a panic.
func FuzzGLM4MoEMetadata(f *testing.F) {
	f.Add(uint32(4), uint32(1), uint32(1), uint32(32), uint32(64), uint32(1), uint32(2), uint32(16), uint32(4))
	f.Add(uint32(4), uint32(0), uint32(4), uint32(64), uint32(64), uint32(0), uint32(0), uint32(16), uint32(16))
	f.Add(uint32(3), uint32(3), uint32(0), uint32(31), uint32(32), uint32(2), uint32(5), uint32(8), uint32(0))
	f.Add(uint32(5), uint32(2), uint32(2), uint32(96), uint32(64), uint32(1<<30), uint32(3), uint32(16), uint32(4))
	orig := readFuzzSource(f, archModel("glm4moe"))
	keys := []string{"block_count", "nextn_predict_layers", "leading_dense_block_count", "rope.dimension_count",
		"attention.key_length", "expert_shared_count", "expert_gating_func", "expert_count", "expert_used_count"}
	f.Fuzz(func(t *testing.T, blocks, nextN, dense, rot, keyLen, shared, gating, experts, used uint32) {
		set := map[string]uint32{}
		for i, v := range []uint32{blocks, nextN, dense, rot, keyLen, shared, gating, experts, used} {
			set[keys[i]] = v
		}
		loadAndRun(t, orig, set)
	})
}
