package tensor

import (
	"math/rand/v2"
	"testing"
)

// The scalar baseline of the block formats: one 4096-element row, throughput in bytes of
// weights per second (b.SetBytes), for dequantization and for the dot product with
// activations already in the partner format.

const benchRow = 4096

// benchOperands returns one quantized row of typ (quantized from Gaussian values, or random
// bytes for the formats without a quantizer) and activations in its VecDotType.
func benchOperands(b *testing.B, typ Type) (w, a []byte) {
	rng := rand.New(rand.NewPCG(3, 4))
	x := make([]float32, benchRow)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	tr := active.traits[typ]
	size, _ := typ.RowBytes(benchRow)
	w = make([]byte, size)
	if tr.FromFloat != nil {
		tr.FromFloat(x, w)
	} else {
		for i := range w {
			w[i] = byte(rng.Uint32())
		}
	}
	if tr.VecDot != nil {
		size, _ = tr.VecDotType.RowBytes(benchRow)
		a = make([]byte, size)
		if err := QuantizeActivations(tr.VecDotType, x, a); err != nil {
			b.Fatal(err)
		}
	}
	return w, a
}

func BenchmarkDequantizeRow(b *testing.B) {
	for _, typ := range blockTypes() {
		b.Run(typ.String(), func(b *testing.B) {
			w, _ := benchOperands(b, typ)
			dst := make([]float32, benchRow)
			decode := active.traits[typ].ToFloat
			b.SetBytes(int64(len(w)))
			for b.Loop() {
				decode(w, dst)
			}
		})
	}
}

func BenchmarkVecDotRow(b *testing.B) {
	for _, typ := range blockTypes() {
		dot := active.traits[typ].VecDot
		if dot == nil {
			continue
		}
		b.Run(typ.String(), func(b *testing.B) {
			w, a := benchOperands(b, typ)
			b.SetBytes(int64(len(w)))
			var sink float32
			for b.Loop() {
				sink += dot(benchRow, w, a)
			}
			_ = sink
		})
	}
}
