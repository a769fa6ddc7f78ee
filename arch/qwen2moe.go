package arch

// Qwen2MoE is Qwen1.5-MoE and Qwen2-57B-A14B.
var Qwen2MoE = register(&Arch{
	Name:       "qwen2moe",
	Runs:       true,
	SizeLabels: map[int]string{24: "A2.7B", 28: "57B.A14B"},
})
