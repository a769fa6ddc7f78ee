package moe

import (
	"errors"
	"fmt"
)

// Checkpoint is a copy of a context's recurrent state at one length, kept in host memory:
// what Truncate cannot recover, since a recurrent layer's state exists only where the
// context ends (llama-server's context checkpoints). Restore brings the context back to
// it, so that a prompt which shares only part of what the context holds re-evaluates from
// the checkpoint rather than from the start.
type Checkpoint struct {
	c      *Context
	n      int
	states [][]byte // each recurrent layer's state, in layer order
}

// Len is the context length the checkpoint was taken at.
func (cp *Checkpoint) Len() int { return cp.n }

// Bytes is the host memory the checkpoint holds.
func (cp *Checkpoint) Bytes() int64 {
	var n int64
	for _, s := range cp.states {
		n += int64(len(s))
	}
	return n
}

// Recurrent reports whether the model keeps a recurrent state: only then can a shorter
// prefix be kept through a checkpoint rather than by Truncate alone.
func (c *Context) Recurrent() bool {
	for _, kv := range c.caches {
		if kv.state.Valid() {
			return true
		}
	}
	return false
}

// Checkpoint copies the recurrent layers' state at the context's length. A context without
// recurrent layers needs none (Truncate keeps any prefix) and gets an empty checkpoint.
func (c *Context) Checkpoint() (*Checkpoint, error) {
	cp := &Checkpoint{c: c, n: c.n}
	for _, kv := range c.caches {
		if !kv.state.Valid() {
			continue
		}
		buf := make([]byte, kv.state.Bytes())
		if err := kv.b.Get(buf, kv.state); err != nil {
			return nil, fmt.Errorf("checkpoint: %w", err)
		}
		if err := kv.b.Synchronize(); err != nil {
			return nil, fmt.Errorf("checkpoint: %w", err)
		}
		cp.states = append(cp.states, buf)
	}
	return cp, nil
}

// Restore makes the context hold its first cp.Len() positions with the recurrent state it
// had there. The checkpoint must be this context's, taken while it held the positions it
// still holds up to cp.Len() (the caller, who knows the tokens, sees to that); a
// checkpoint past the context's length is refused, as it would bring back positions the
// attention caches no longer hold.
func (c *Context) Restore(cp *Checkpoint) error {
	switch {
	case cp == nil || cp.c != c:
		return errors.New("restore: the checkpoint is another context's")
	case cp.n > c.n:
		return fmt.Errorf("restore: the checkpoint is at position %d, past the context's %d", cp.n, c.n)
	}
	i := 0
	for _, kv := range c.caches {
		if !kv.state.Valid() {
			continue
		}
		if err := kv.b.Set(kv.state, cp.states[i]); err != nil {
			c.Reset() // some layers' states may be the checkpoint's already
			return fmt.Errorf("restore: %w", err)
		}
		i++
	}
	c.n = cp.n
	return nil
}
