package arch

// DeepSeek32 is DeepSeek-V3.2: DeepSeek-V3 with the lightning indexer in every layer.
var DeepSeek32 = register(&Arch{
	Name:       "deepseek32",
	Runs:       true,
	Indexer:    true,
	SizeLabels: map[int]string{61: "685B.A37B"},
})
