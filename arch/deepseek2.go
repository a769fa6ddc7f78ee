package arch

// DeepSeek2 is DeepSeek-V2, V3 and R1 and the models that took their layout (Kimi K2,
// GLM-4.7-Flash): multi-head latent attention.
var DeepSeek2 = register(&Arch{
	Name:       "deepseek2",
	Runs:       true,
	SizeLabels: map[int]string{27: "16B", 47: "30B.A3B", 60: "236B", 61: "671B"},
})
