package arch

// Llama is Llama's layout, which Mixtral shares; synth writes it to compare quantization
// mixes with llama-quantize's, and moerun does not run it.
var Llama = register(&Arch{Name: "llama"})
