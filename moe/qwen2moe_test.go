package moe

import (
	"testing"

	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/placement"
	"github.com/moerun/moerun/tensor"
)

// readFixtureConfig reads the configuration of a fixture as Load does.
func readFixtureConfig(t *testing.T, path string) *Config {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, _, err := readConfig(placement.Model{Name: path, Metadata: f.Metadata, Tensors: f.Tensors})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestQwen2MoEConfig checks what llama.cpp derives from the fixture's metadata
// (tiny-qwen2moe: 3 layers, 4 heads of 32 over 2 KV heads, 12 experts of width 64, top-4,
// a shared expert of width 256): qwen2moe.cpp's fixed softmax router that neither
// renormalises nor scales, NeoX RoPE over the whole head.
func TestQwen2MoEConfig(t *testing.T) {
	c := readFixtureConfig(t, archModel("qwen2moe"))
	want := RouterConfig{Experts: 12, Used: 4, Gating: GatingSoftmax}
	if c.Router != want {
		t.Errorf("router %+v, want %+v", c.Router, want)
	}
	if c.Layers != 3 || c.Heads != 4 || c.HeadsKV != 2 || c.HeadK != 32 || c.FFExp != 64 || c.FFShexp != 256 || c.DenseLead != 0 {
		t.Errorf("config %+v", c)
	}
	if c.RoPE.Mode != tensor.RoPENeoX || c.RoPE.Dims != 32 || c.RoPE.Base != 1e6 {
		t.Errorf("rope %+v", c.RoPE)
	}
	// Without the expert widths llama.cpp falls back to feed_forward_length (352): split
	// over the used experts for the routed ones, whole for the shared expert.
	noWidths := rewriteModel(t, archModel("qwen2moe"), modelEdit{delete: []string{
		"{arch}.expert_feed_forward_length", "{arch}.expert_shared_feed_forward_length"}})
	if c := readFixtureConfig(t, noWidths); c.FFExp != 352/4 || c.FFShexp != 352 {
		t.Errorf("fallback widths: expert %d, shared %d; want %d and %d", c.FFExp, c.FFShexp, 352/4, 352)
	}
}
