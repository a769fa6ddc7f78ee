package tensor

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// blockTypes lists the registered block formats in id order.
func blockTypes() []Type {
	var out []Type
	for t := range traits {
		if t.Info().Quantized {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return out
}

// FuzzBlockKernels feeds arbitrary bytes to every block format's kernels: the decoder and
// the dot product (against activations cut from the same bytes) must not panic, whatever
// the scales (NaN, infinities, subnormals) and whatever the table indices in the data; and
// the quantizer must not panic on the floats the bytes decode to, nor on the bytes read as
// raw float32 bits.
func FuzzBlockKernels(f *testing.F) {
	types := blockTypes()
	rng := rand.New(rand.NewPCG(1, 2))
	for i, typ := range types {
		size := int(typ.BlockBytes()) * 2
		random := make([]byte, size)
		for j := range random {
			random[j] = byte(rng.Uint32())
		}
		f.Add(uint8(i), random)
		f.Add(uint8(i), slices.Repeat([]byte{0xFF}, size))
		f.Add(uint8(i), make([]byte, size))
	}
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		typ := types[int(which)%len(types)]
		tr := active.traits[typ]
		blocks := min(len(data)/int(typ.BlockBytes()), 8)
		if blocks == 0 {
			return
		}
		w := data[:blocks*int(typ.BlockBytes())]
		n := blocks * int(typ.BlockSize())
		values := make([]float32, n)
		tr.ToFloat(w, values)
		if tr.VecDot != nil {
			size, err := tr.VecDotType.RowBytes(int64(n))
			if err != nil {
				t.Fatal(err)
			}
			a := make([]byte, size)
			for i := range a {
				a[i] = data[(7*i+3)%len(data)]
			}
			tr.VecDot(n, w, a)
		}
		if tr.FromFloat != nil {
			out := make([]byte, len(w))
			tr.FromFloat(values, out)
			for i := range values {
				values[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[(4*i)%(len(data)-3):]))
			}
			tr.FromFloat(values, out)
		}
	})
}
