package arch

// Qwen35 is Qwen3.5's dense models, whose hybrid memory placement accounts for; moerun runs
// MoE models only.
var Qwen35 = register(&Arch{
	Name:      "qwen35",
	Recurrent: true,
	MRoPE:     true,
})
