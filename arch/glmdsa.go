package arch

// GLMDSA is GLM-5: DeepSeek-V3.2's attention, with layers that may share an indexer.
var GLMDSA = register(&Arch{
	Name:           "glm-dsa",
	Runs:           true,
	Indexer:        true,
	SharedIndexers: true,
	// 79: a file whose NextN blocks block_count does not count.
	SizeLabels: map[int]string{78: "744B.A40B", 79: "744B.A40B"},
})
