package moe

import (
	"fmt"

	"github.com/moerun/moerun/tensor"
)

// cacheShape is what a layer keeps between forward passes. An attention layer keeps a KV
// cache, each position holding heads rows of kDim keys and vDim values; with vInK
// (DeepSeek's MLA) there is no V tensor: the values are the first vDim elements of each
// key row, as llama.cpp's K-only MLA cache stores them. A recurrent layer (Qwen3.5's Gated
// DeltaNet) keeps instead a fixed-size state of state float32 values, whatever the number
// of positions, and its other fields are 0.
type cacheShape struct {
	heads      int
	kDim, vDim int
	vInK       bool
	state      int
}

// kvCache is one layer's memory: for an attention layer, cells positions of keys and
// values in the cache types (F16 by default, as llama.cpp's -ctk/-ctv), written as tokens
// are evaluated; for a recurrent layer, its state in float32 (as llama.cpp keeps it).
type kvCache struct {
	shape      cacheShape
	k, v       tensor.KV
	kRow, vRow int       // bytes of one head's row
	state      []float32 // a recurrent layer's state, nil for an attention layer
}

// cacheBlock is the number of cells llama.cpp pads the cache size and the attended length
// to (llama_kv_cache::get_n_kv).
const cacheBlock = 256

func newKVCache(s cacheShape, kType, vType tensor.Type, cells int) (*kvCache, error) {
	if s.state > 0 {
		return &kvCache{shape: s, state: make([]float32, s.state)}, nil
	}
	if s.vInK && kType != vType {
		return nil, fmt.Errorf("this model's cache stores values inside the keys (MLA): the K and V cache types must be the same, not %s and %s", kType, vType)
	}
	kRow, err := cacheRowBytes("K", kType, s.kDim)
	if err != nil {
		return nil, err
	}
	vRow, err := cacheRowBytes("V", vType, s.vDim)
	if err != nil {
		return nil, err
	}
	c := &kvCache{shape: s, kRow: kRow, vRow: vRow}
	c.k = tensor.KV{Type: kType, Data: make([]byte, cells*s.heads*kRow), Dim: s.kDim, Heads: s.heads,
		PosStride: s.heads * kRow, HeadStride: kRow}
	if s.vInK {
		// Values are the leading vDim elements of each key row: a row's prefix of whole
		// blocks is itself a row of vDim elements.
		c.v = c.k
		c.v.Dim = s.vDim
		return c, nil
	}
	c.v = tensor.KV{Type: vType, Data: make([]byte, cells*s.heads*vRow), Dim: s.vDim, Heads: s.heads,
		PosStride: s.heads * vRow, HeadStride: vRow}
	return c, nil
}

func cacheRowBytes(which string, t tensor.Type, dim int) (int, error) {
	if _, err := tensor.TraitsOf(t); err != nil {
		return 0, fmt.Errorf("%s cache type %s: %w", which, t, err)
	}
	n, err := t.RowBytes(int64(dim))
	if err != nil {
		return 0, fmt.Errorf("%s cache type %s cannot hold this model's rows of %d values: %w", which, t, dim, err)
	}
	return int(n), nil
}

// store writes the keys and values of n tokens at positions pos0.. (k: [n][heads][kDim],
// v: [n][heads][vDim]; v is ignored when the values live in the keys), converted to the
// cache types as ggml_set_rows converts them.
func (c *kvCache) store(pos0, n int, k, v []float32) {
	// A position's heads are adjacent and positions follow each other (PosStride is heads
	// rows), so the batch's rows are one run of the cache, converted at once: each row is
	// whole blocks of its type, so that is the same as row by row (16 calls a decode step
	// of a Qwen3-30B-A3B layer become 2).
	s := c.shape
	convertRows(c.k.Type, k[:n*s.heads*s.kDim], c.k.Data[pos0*c.k.PosStride:(pos0+n)*c.k.PosStride])
	if !s.vInK {
		convertRows(c.v.Type, v[:n*s.heads*s.vDim], c.v.Data[pos0*c.v.PosStride:(pos0+n)*c.v.PosStride])
	}
}

// convertRows converts cache rows; the lengths were checked when the cache was made.
func convertRows(t tensor.Type, src []float32, dst []byte) {
	if err := tensor.QuantizeActivations(t, src, dst); err != nil {
		panic(fmt.Sprintf("moe: cache row of %d values as %s: %v", len(src), t, err))
	}
}
