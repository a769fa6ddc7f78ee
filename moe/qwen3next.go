package moe

// qwen3next is Qwen3-Next (Qwen3-Next-80B-A3B, Qwen3-Coder-Next; llama.cpp's
// src/models/qwen3next.cpp), the model Qwen3.5-MoE (qwen35moe.go) grew from: the same
// hybrid of Gated DeltaNet layers and, every full_attention_interval-th layer, gated full
// attention with partial NeoX RoPE (no M-RoPE sections), the same softmax router with a
// gated shared expert. Its Gated DeltaNet layers keep the checkpoint's layout
// (DeltaNetConfig.Grouped): value heads grouped by key head and one ssm_ba projection for
// beta and alpha; files converted before llama.cpp split in_proj_qkvz have one ssm_in
// matrix instead of attn_qkv and attn_gate, which the layer takes apart as llama.cpp does.
var qwen3next = architecture{
	ffnNorm: "post_attention_norm.weight",
	config: func(c *Config, r *metaReader) error {
		c.DeltaNet.Grouped = true
		return readHybridConfig(c, r)
	},
	attention:   hybridAttention,
	feedForward: qwen2moe.feedForward,
}
