package arch

// GLM4MoE is GLM-4.5, 4.6 and 4.7.
var GLM4MoE = register(&Arch{
	Name:       "glm4moe",
	Runs:       true,
	SizeLabels: map[int]string{46: "106B.A12B", 48: "102B.A12B", 92: "355B.A32B"},
})
