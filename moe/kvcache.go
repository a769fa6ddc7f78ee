package moe

import (
	"errors"
	"fmt"

	"github.com/moerun/moerun/backend"

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

// kvCache is one layer's memory, on the device the plan gives the layer's cache: for an
// attention layer, cells positions of keys and values in the cache types (F16 by default,
// as llama.cpp's -ctk/-ctv), one row of heads·dim values per position, written as tokens
// are evaluated; for a recurrent layer, its state in float32 (as llama.cpp keeps it).
type kvCache struct {
	shape cacheShape
	b     backend.Backend
	dev   int
	bufs  []backend.Buffer
	k, v  value
	state value // a recurrent layer's state, the zero value for an attention layer
}

// cacheBlock is the number of cells llama.cpp pads the cache size and the attended length
// to (llama_kv_cache::get_n_kv).
const cacheBlock = 256

func newKVCache(b backend.Backend, dev int, s cacheShape, kType, vType tensor.Type, cells int) (*kvCache, error) {
	c := &kvCache{shape: s, b: b, dev: dev}
	if s.state > 0 {
		var err error
		c.state, err = c.alloc(tensor.F32, s.state, 1)
		return c, err
	}
	if s.vInK && kType != vType {
		return nil, fmt.Errorf("this model's cache stores values inside the keys (MLA): the K and V cache types must be the same, not %s and %s", kType, vType)
	}
	if _, err := cacheRowBytes("K", kType, s.kDim); err != nil {
		return nil, err
	}
	if _, err := cacheRowBytes("V", vType, s.vDim); err != nil {
		return nil, err
	}
	var err error
	if c.k, err = c.alloc(kType, s.heads*s.kDim, cells); err != nil {
		return nil, errors.Join(err, c.free())
	}
	if s.vInK {
		// Values are the leading vDim elements of each key row: a row's prefix of whole
		// blocks is itself a row of vDim elements.
		c.v = c.k.Columns(0, s.vDim)
		return c, nil
	}
	if c.v, err = c.alloc(vType, s.heads*s.vDim, cells); err != nil {
		return nil, errors.Join(err, c.free())
	}
	return c, nil
}

// alloc allocates a tensor of the cache on its device.
func (c *kvCache) alloc(t tensor.Type, cols, rows int) (value, error) {
	rb, err := t.RowBytes(int64(cols))
	if err != nil {
		return value{}, err
	}
	buf, err := c.b.Alloc(rb * int64(rows))
	if err != nil {
		return value{}, fmt.Errorf("KV cache: %w", err)
	}
	c.bufs = append(c.bufs, buf)
	return backend.NewTensor(buf, 0, t, cols, rows)
}

// clearState zeroes a recurrent layer's state: a new sequence starts from nothing.
func (c *kvCache) clearState() {
	if c.state.Valid() {
		// The state is small (a few MiB for the largest Qwen3.5 layer) and reset once per
		// sequence.
		if err := c.b.Set(c.state, make([]byte, c.state.Bytes())); err != nil {
			panic(fmt.Sprintf("moe: clearing a recurrent state: %v", err))
		}
	}
}

// free releases the cache's memory.
func (c *kvCache) free() error {
	var errs []error
	for _, buf := range c.bufs {
		errs = append(errs, c.b.Free(buf))
	}
	c.bufs = nil
	return errors.Join(errs...)
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
