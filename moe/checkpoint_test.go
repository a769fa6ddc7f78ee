package moe

import (
	"slices"
	"testing"
)

// TestCheckpoint: a context brought back to a checkpoint taken inside a prompt (by the
// engine, at a CheckpointAt length) continues exactly as a fresh context that evaluated the
// same pieces, for Qwen3.5's recurrent layers and for attention-only models; a checkpoint
// of another context or past the context's length is refused.
func TestCheckpoint(t *testing.T) {
	for _, path := range []string{qwen35Model, qwenModel} {
		m := openModel(t, path, 2)
		long := promptOf(t, "tiny-qwen3moe", "long")[:30]
		at, rest := 12, []int32{5, 9, 2, 11, 3}

		want := m.piecewiseLogits(t, long[:at], rest)

		c := m.context(t, DefaultContextOptions())
		var cp *Checkpoint
		var lengths []int
		o := GenerateOptions{MaxTokens: 3, CheckpointAt: []int{at, 1000}, Checkpoint: func(c *Context) error {
			lengths = append(lengths, c.Len())
			var err error
			cp, err = c.Checkpoint()
			return err
		}}
		if _, err := c.Generate(long, o); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(lengths, []int{at}) || cp.Len() != at {
			t.Fatalf("%s: checkpoints at %v, want [%d]", baseName(path), lengths, at)
		}
		if c.NeedsCheckpoints() != (cp.Bytes() > 0) {
			t.Errorf("%s: needs checkpoints %v but the checkpoint holds %d bytes", baseName(path), c.NeedsCheckpoints(), cp.Bytes())
		}
		if err := c.Restore(cp); err != nil {
			t.Fatal(err)
		}
		got, err := c.Eval(rest, true)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: after Restore: %+v", baseName(path), compareLogits(got, want))
		}

		// The checkpoint can be restored again (it is a copy), but not past the length.
		c.Truncate(at) // refused on the recurrent model, whose Len stays at+len(rest)
		if err := c.Restore(cp); err != nil {
			t.Errorf("%s: a second Restore: %v", baseName(path), err)
		}
		c.Reset()
		if err := c.Restore(cp); err == nil {
			t.Errorf("%s: a checkpoint past the context's length was restored", baseName(path))
		}
		other := m.context(t, DefaultContextOptions())
		if _, err := other.Eval(long, false); err != nil {
			t.Fatal(err)
		}
		if err := other.Restore(cp); err == nil {
			t.Errorf("%s: another context's checkpoint was restored", baseName(path))
		}
	}
}

// piecewiseLogits are the logits of every token of rest, evaluated by a fresh context
// after prefix: what a context cut back to prefix must give for rest.
func (m *testModel) piecewiseLogits(t *testing.T, prefix, rest []int32) []float32 {
	t.Helper()
	fresh := m.context(t, DefaultContextOptions())
	if _, err := fresh.Eval(prefix, false); err != nil {
		t.Fatal(err)
	}
	logits, err := fresh.Eval(rest, true)
	if err != nil {
		t.Fatal(err)
	}
	return slices.Clone(logits)
}
