package arch

// GPTOSS is OpenAI's gpt-oss: sliding-window attention in every other layer.
var GPTOSS = register(&Arch{
	Name:          "gpt-oss",
	Runs:          true,
	SlidingWindow: true,
	SizeLabels:    map[int]string{24: "20B", 36: "120B"},
})
