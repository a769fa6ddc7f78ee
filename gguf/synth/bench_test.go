package synth

import (
	"io"
	"testing"
)

// BenchmarkWriteRandom writes one block of Qwen3-30B-A3B with 16 of its 128 experts (the
// experts are most of the bytes) as random Q4_K_M weights: the per-byte cost of making
// benchmark models.
func BenchmarkWriteRandom(b *testing.B) {
	m, err := Build("qwen3-30b-a3b:q4_k_m", Options{Layers: 1, Experts: 16, Vocab: 4096})
	if err != nil {
		b.Fatal(err)
	}
	l, err := m.Layout()
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(l.FileSize)
	for b.Loop() {
		if err := m.WriteRandom(io.Discard, RandomOptions{Seed: 1}); err != nil {
			b.Fatal(err)
		}
	}
}
