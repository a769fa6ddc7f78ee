package moe

import (
	"errors"
	"fmt"
)

// Checkpoint is a copy, kept in host memory, of what a context cannot go back to by
// Truncate alone (llama-server's context checkpoints): a recurrent layer's state, which
// exists only where the context ends, and a sliding-window layer's ring, which overwrites
// positions older than its window. Restore brings the context back to it, so that a
// prompt which shares only part of what the context holds re-evaluates from the
// checkpoint rather than from the start.
type Checkpoint struct {
	c      *Context
	n      int
	saved  [][]byte // each forgetful layer's tensors (kvCache.saved), in layer order
	oldest []int    // and each such layer's first position held
}

// Len is the context length the checkpoint was taken at.
func (cp *Checkpoint) Len() int { return cp.n }

// Bytes is the host memory the checkpoint holds.
func (cp *Checkpoint) Bytes() int64 {
	var n int64
	for _, s := range cp.saved {
		n += int64(len(s))
	}
	return n
}

// NeedsCheckpoints reports whether the context can go back to a shorter prefix only
// through a checkpoint rather than by Truncate alone: it has a recurrent layer (Qwen3.5's),
// or a sliding-window layer's ring (gpt-oss without --swa-full), as llama-server decides
// whether to keep checkpoints.
func (c *Context) NeedsCheckpoints() bool {
	for _, kv := range c.caches {
		if kv.forgets() {
			return true
		}
	}
	return false
}

// Checkpoint copies the recurrent layers' state and the sliding-window layers' rings at
// the context's length. A context without either needs none (Truncate keeps any prefix)
// and gets an empty checkpoint.
func (c *Context) Checkpoint() (*Checkpoint, error) {
	cp := &Checkpoint{c: c, n: c.n}
	for _, kv := range c.caches {
		if !kv.forgets() {
			continue
		}
		for _, x := range kv.saved() {
			buf := make([]byte, x.Bytes())
			if err := kv.b.Get(buf, x); err != nil {
				return nil, fmt.Errorf("checkpoint: %w", err)
			}
			cp.saved = append(cp.saved, buf)
		}
		if err := kv.b.Synchronize(); err != nil {
			return nil, fmt.Errorf("checkpoint: %w", err)
		}
		cp.oldest = append(cp.oldest, kv.oldest)
	}
	return cp, nil
}

// Restore makes the context hold its first cp.Len() positions with the recurrent state and
// the sliding-window rings it had there. The checkpoint must be this context's, taken
// while it held the positions it still holds up to cp.Len() (the caller, who knows the
// tokens, sees to that); a checkpoint past the context's length is refused, as it would
// bring back positions the full attention caches no longer hold.
func (c *Context) Restore(cp *Checkpoint) error {
	switch {
	case cp == nil || cp.c != c:
		return errors.New("restore: the checkpoint is another context's")
	case cp.n > c.n:
		return fmt.Errorf("restore: the checkpoint is at position %d, past the context's %d", cp.n, c.n)
	}
	saved, layer := cp.saved, 0
	for _, kv := range c.caches {
		if !kv.forgets() {
			continue
		}
		for _, x := range kv.saved() {
			if err := kv.b.Set(x, saved[0]); err != nil {
				c.Reset() // some layers may hold the checkpoint's values already
				return fmt.Errorf("restore: %w", err)
			}
			saved = saved[1:]
		}
		kv.oldest = cp.oldest[layer]
		layer++
	}
	c.n = cp.n
	return nil
}
