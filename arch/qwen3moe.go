package arch

// Qwen3MoE is Qwen3's MoE models (Qwen3-30B-A3B, Qwen3-235B-A22B, Qwen3-Coder).
var Qwen3MoE = register(&Arch{
	Name:       "qwen3moe",
	Runs:       true,
	SizeLabels: map[int]string{48: "30B.A3B", 94: "235B.A22B"},
})
