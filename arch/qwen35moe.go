package arch

// Qwen35MoE is Qwen3.5's and Qwen3.6's MoE models: Gated DeltaNet in three of every four
// layers.
var Qwen35MoE = register(&Arch{
	Name:       "qwen35moe",
	Runs:       true,
	Recurrent:  true,
	MRoPE:      true,
	SizeLabels: map[int]string{40: "35B.A3B", 48: "122B.A10B", 60: "397B.A17B"},
})
