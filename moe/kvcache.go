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
// of positions, and its other fields are 0. A sliding-window layer (gpt-oss's) reads only
// the last window positions. A layer with a lightning indexer (DeepSeek Sparse Attention)
// also keeps one indexer key of indexDim values per position, in the K cache type, as
// llama.cpp's DSA cache keeps them in a second K-only cache.
type cacheShape struct {
	heads      int
	kDim, vDim int
	vInK       bool
	window     int
	state      int
	indexDim   int
}

// kvCache is one layer's memory, on the device the plan gives the layer's cache: for an
// attention layer, cells of keys and values in the cache types (F16 by default, as
// llama.cpp's -ctk/-ctv), one row of heads·dim values per position, written as tokens are
// evaluated; for a recurrent layer, its state in float32 (as llama.cpp keeps it).
//
// Position j is kept in cell j mod cells. A full layer's cache has a cell for every
// position of the context; a sliding-window layer's is a ring of its window and a ubatch
// (llama.cpp's SWA cache, which a sequence fills in the same order), whose new positions
// overwrite the oldest.
type kvCache struct {
	shape cacheShape
	b     backend.Backend
	dev   int
	bufs  []backend.Buffer
	k, v  value
	index value // the lightning indexer's keys, where the layer has one
	state value // a recurrent layer's state, the zero value for an attention layer
	ring  bool  // fewer cells than the context has positions
	// oldest is the first position of the sequence whose keys and values the cache still
	// holds: those below were overwritten by later positions of a ring.
	oldest int
}

// cacheCells is the number of cells llama.cpp gives a layer's cache in a context of size
// positions evaluated in ubatches of ubatch tokens (llama_kv_cache_iswa): the context's
// size, or for a sliding-window layer its window and a ubatch rounded up to cacheBlock,
// unless swaFull (--swa-full) asks for the whole context there too.
func cacheCells(s cacheShape, size, ubatch int, swaFull bool) int {
	if s.window <= 0 || swaFull {
		return size
	}
	return min(size, (s.window+ubatch+cacheBlock-1)/cacheBlock*cacheBlock)
}

// cacheBlock is the number of cells llama.cpp pads the cache size and the attended length
// to (llama_kv_cache::get_n_kv).
const cacheBlock = 256

// newKVCache allocates a layer's cache of cells positions in a context of size.
func newKVCache(b backend.Backend, dev int, s cacheShape, kType, vType tensor.Type, cells, size int) (*kvCache, error) {
	c := &kvCache{shape: s, b: b, dev: dev, ring: cells < size}
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
	if s.indexDim > 0 {
		if _, err := cacheRowBytes("indexer K", kType, s.indexDim); err != nil {
			return nil, errors.Join(err, c.free())
		}
		if c.index, err = c.alloc(kType, s.indexDim, cells); err != nil {
			return nil, errors.Join(err, c.free())
		}
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

// setRows writes src's rows, the keys or values of positions first on, into the cache
// tensor dst (kv.k or kv.v), each in its cell: around the ring of a sliding-window layer.
func (c *kvCache) setRows(dst value, first int, src value) error {
	cells := dst.Rows
	for done := 0; done < src.Rows; {
		cell := (first + done) % cells
		n := min(src.Rows-done, cells-cell)
		if err := c.b.SetRows(dst, cell, src.Slice(done, done+n)); err != nil {
			return err
		}
		done += n
	}
	c.oldest = max(c.oldest, first+src.Rows-cells)
	return nil
}

// holdsFrom reports whether the cache still holds what evaluating the sequence on from
// position n reads: every earlier position for a full layer, the window before n for a
// sliding-window one. (A recurrent layer's state, which has no positions, is the
// context's to check.)
func (c *kvCache) holdsFrom(n int) bool {
	first := 0
	if c.shape.window > 0 {
		first = max(0, n-c.shape.window+1)
	}
	return first >= c.oldest
}

// forgets reports whether the cache cannot go back to an earlier length by itself: a
// recurrent state exists only at the sequence's end, a ring overwrites old positions.
// A checkpoint keeps what it would need.
func (c *kvCache) forgets() bool { return c.state.Valid() || c.ring }

// saved are the tensors a checkpoint copies: a recurrent layer's state, a ring's keys and
// values.
func (c *kvCache) saved() []value {
	switch {
	case c.state.Valid():
		return []value{c.state}
	case !c.ring:
		return nil
	case c.shape.vInK:
		return []value{c.k}
	}
	return []value{c.k, c.v}
}

// reset empties the cache for a new sequence: its cells are overwritten as positions are
// evaluated again, and a recurrent state starts from zero.
func (c *kvCache) reset() {
	c.oldest = 0
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
