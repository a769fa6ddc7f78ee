package arch

// Qwen2 is Qwen2's dense layout; synth writes it to compare quantization mixes with
// llama-quantize's, and moerun does not run it.
var Qwen2 = register(&Arch{Name: "qwen2"})
