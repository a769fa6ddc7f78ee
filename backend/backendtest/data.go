package backendtest

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"

	"github.com/moerun/moerun/tensor"
)

// uniform is n values uniform in [lo, hi).
func (c *tcase) uniform(n int, lo, hi float32) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = lo + (hi-lo)*c.rng.Float32()
	}
	return x
}

// encoded is n values uniform in [-1, 1) encoded in typ (n a multiple of its block).
func (c *tcase) encoded(typ tensor.Type, n int) []byte {
	c.t.Helper()
	data, err := encode(typ, c.uniform(n, -1, 1))
	if err != nil {
		c.t.Fatal(err)
	}
	return data
}

// weightData is the bytes of a cols×rows×experts weight of typ: random values quantized
// with the type's reference quantizer, or, for the types that have none (the i-quants
// other than IQ4), random blocks whose values are finite and of moderate size. The bytes
// depend only on the arguments, and are made once (quantizing is most of the cost of
// the weight operations' cases); they must not be written.
func (c *tcase) weightData(typ tensor.Type, cols, rows, experts int) []byte {
	c.t.Helper()
	key := weightKey{typ, cols, rows, experts}
	if data, ok := weightCache.Load(key); ok {
		return data.([]byte)
	}
	data, err := makeWeight(key)
	if err != nil {
		c.t.Fatal(err)
	}
	weightCache.Store(key, data)
	return data
}

type weightKey struct {
	typ                 tensor.Type
	cols, rows, experts int
}

var weightCache sync.Map // weightKey → []byte

func makeWeight(key weightKey) ([]byte, error) {
	typ, n := key.typ, key.cols*key.rows*key.experts
	rng := rand.New(rand.NewPCG(uint64(typ), uint64(key.cols)<<40|uint64(key.rows)<<20|uint64(key.experts)))
	tr, err := tensor.TraitsOf(typ)
	if err != nil {
		return nil, err
	}
	if tr.FromFloat != nil {
		vals := make([]float32, n)
		for i := range vals {
			vals[i] = 2*rng.Float32() - 1
		}
		return encode(typ, vals)
	}
	bs, bb := int(typ.BlockSize()), int(typ.BlockBytes())
	data := make([]byte, n/bs*bb)
	vals := make([]float32, bs)
	for b := 0; b < len(data); b += bb {
		block := data[b : b+bb]
		for try := 0; ; try++ {
			if try == 10000 {
				return nil, fmt.Errorf("no random %s block decodes to moderate values", typ)
			}
			for i := range block {
				block[i] = byte(rng.Uint32())
			}
			if err := tensor.Dequantize(typ, block, vals); err != nil {
				return nil, err
			}
			if moderate(vals) {
				break
			}
		}
	}
	return data, nil
}

// moderate reports whether a block's values are finite, at most 8 in magnitude and not
// all tiny.
func moderate(vals []float32) bool {
	top := 0.0
	for _, v := range vals {
		a := math.Abs(float64(v))
		if math.IsNaN(a) || a > 8 {
			return false
		}
		top = max(top, a)
	}
	return top > 1e-3
}

// encode converts values to typ with the type's reference quantizer.
func encode(typ tensor.Type, vals []float32) ([]byte, error) {
	n, err := typ.RowBytes(int64(len(vals)))
	if err != nil {
		return nil, err
	}
	data := make([]byte, n)
	if err := tensor.Quantize(typ, vals, data); err != nil {
		return nil, fmt.Errorf("%s: %w", typ, err)
	}
	return data, nil
}

func f32Bytes(x []float32) []byte {
	b := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

func i32Bytes(x []int32) []byte {
	b := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
	}
	return b
}

// positions is n positions: consecutive from a random start below limit−n, as a batch of
// one sequence has them.
func (c *tcase) positions(n, limit int) []int32 {
	start := c.rng.IntN(max(limit-n, 1))
	pos := make([]int32, n)
	for i := range pos {
		pos[i] = int32(start + i)
	}
	return pos
}

// experts is k distinct experts of n for each of tokens tokens, each slot −1 (skipped)
// with probability skip.
func (c *tcase) experts(tokens, k, n int, skip float64) []int32 {
	ids := make([]int32, 0, tokens*k)
	for range tokens {
		perm := c.rng.Perm(n)
		for j := range k {
			id := int32(perm[j])
			if c.rng.Float64() < skip {
				id = -1
			}
			ids = append(ids, id)
		}
	}
	return ids
}

// weightTypes is every type of the tensor package: the weight operations are tried with
// each, the backend's Supports and the reference's deciding which run.
func weightTypes() []tensor.Type { return tensor.Types() }

// weightCols is the row lengths a weight of typ is tried with: odd numbers of blocks (one
// block for the 256-element formats), odd lengths for the float types.
func weightCols(typ tensor.Type) []int {
	switch bs := int(typ.BlockSize()); {
	case bs == 1:
		return []int{61, 259}
	case bs >= 256:
		return []int{bs, 3 * bs}
	default:
		return []int{3 * bs, 9 * bs}
	}
}
