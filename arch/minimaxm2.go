package arch

// MiniMaxM2 is MiniMax-M2 and its point releases.
var MiniMaxM2 = register(&Arch{
	Name:       "minimax-m2",
	Runs:       true,
	SizeLabels: map[int]string{62: "230B.A10B"},
})
