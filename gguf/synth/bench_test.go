package synth

import (
	"io"
	"math"
	"testing"
)

// benchWriteRandom writes the model that spec and opts make to io.Discard, with pools of
// poolSize blocks, and reports the file's bytes per second.
func benchWriteRandom(b *testing.B, spec string, opts Options, poolSize int) {
	m, err := Build(spec, opts)
	if err != nil {
		b.Fatal(err)
	}
	l, err := m.Layout()
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(l.FileSize)
	for b.Loop() {
		if err := m.writeRandom(io.Discard, RandomOptions{Seed: 1}, poolSize); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWriteRandom writes two blocks of Qwen3-30B-A3B (all 128 experts, the whole
// vocabulary: 1.19 GB) as random Q4_K_M weights, as moerun synth --random does: the rate
// at which benchmark models are made, pools included.
func BenchmarkWriteRandom(b *testing.B) {
	benchWriteRandom(b, "qwen3-30b-a3b:q4_k_m", Options{Layers: 2}, poolBlocks)
}

// BenchmarkWriteRandomDrawn writes one block of Qwen3-30B-A3B with 16 of its 128 experts
// with every value drawn and quantized (no pools): the cost of the quantizers, which
// pools pay once per class.
func BenchmarkWriteRandomDrawn(b *testing.B) {
	benchWriteRandom(b, "qwen3-30b-a3b:q4_k_m", Options{Layers: 1, Experts: 16, Vocab: 4096}, math.MaxInt)
}
