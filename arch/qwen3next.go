package arch

// Qwen3Next is Qwen3-Next and Qwen3-Coder-Next: Qwen3.5-MoE's layer pattern before it.
var Qwen3Next = register(&Arch{
	Name:       "qwen3next",
	Runs:       true,
	Recurrent:  true,
	SizeLabels: map[int]string{48: "80B.A3B"},
})
