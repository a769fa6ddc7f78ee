package moe

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestEngineMatchesGenerate: four greedy generations submitted to an engine at once, with a
// ubatch small enough that a prompt is evaluated in pieces beside the others' decode
// steps, produce each the tokens Generate produces for it alone, in fewer forward passes
// than the four alone take. As in TestBatchMatchesAlone, a batch may round differently
// from a lone token, so where the tokens part the choice must be a near tie.
func TestEngineMatchesGenerate(t *testing.T) {
	const maxTokens = 8
	for _, gm := range []struct{ golden, path string }{
		{"tiny-qwen3moe", qwenModel}, {"tiny-deepseek2", deepseekModel}, {"tiny-qwen35moe", archModel("qwen35moe")},
	} {
		t.Run(gm.golden, func(t *testing.T) {
			g := loadGolden(t, gm.golden)
			m := openModel(t, gm.path, 2)
			o := DefaultContextOptions()
			o.UBatch = 16
			want, wantLogits := make([][]int32, 4), make([][][]float32, 4)
			alonePasses := 0
			for i := range want {
				prompt := g.Prompts[i].Tokens
				st, err := m.context(t, o).Generate(prompt, GenerateOptions{MaxTokens: maxTokens, Token: func(id int32, logits []float32) error {
					want[i], wantLogits[i] = append(want[i], id), append(wantLogits[i], slices.Clone(logits))
					return nil
				}})
				if err != nil {
					t.Fatal(err)
				}
				alonePasses += (len(prompt)+o.UBatch-1)/o.UBatch + st.DecodeSteps
			}
			e, err := NewEngine(m.Model, o.UBatch)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			got, gotLogits := make([][]int32, 4), make([][][]float32, 4)
			var gens []*Generation
			for i := range got {
				gens = append(gens, e.Submit(context.Background(), m.context(t, o), g.Prompts[i].Tokens, GenerateOptions{MaxTokens: maxTokens,
					Token: func(id int32, logits []float32) error {
						got[i], gotLogits[i] = append(got[i], id), append(gotLogits[i], slices.Clone(logits))
						return nil
					}}))
			}
			var ties []divergence
			for i, gen := range gens {
				if st, err := gen.Wait(); err != nil || st.Generated != maxTokens || st.PromptTokens != len(g.Prompts[i].Tokens) {
					t.Errorf("generation %d: %+v, %v", i, st, err)
				}
				if k := firstDifference(got[i], want[i]); k < len(want[i]) {
					t.Logf("generation %d: %v through the engine, %v alone", i, got[i], want[i])
					ties = append(ties, divergence{fmt.Sprintf("generation %d", i), k, got[i][k], want[i][k], compareLogits(gotLogits[i][k], wantLogits[i][k])})
				}
			}
			checkTiesWith(t, ties, nearTie, "the lone run")
			passes, tokens := e.Batches()
			t.Logf("%d passes of %.1f tokens on average; %d alone", passes, float64(tokens)/float64(passes), alonePasses)
			if passes >= uint64(alonePasses) {
				t.Errorf("%d passes through the engine, %d alone: nothing was batched", passes, alonePasses)
			}
		})
	}
}

// firstDifference is the first index where a and b differ (len(b) if nowhere).
func firstDifference(a, b []int32) int {
	for k := range b {
		if k >= len(a) || a[k] != b[k] {
			return k
		}
	}
	return len(b)
}

// TestEngineStops: a generation ends at a Token callback's StopGeneration without an
// error, with its own error otherwise, and with its context's cause once that is
// cancelled; the engine's other generations go on.
func TestEngineStops(t *testing.T) {
	m, e := qwenEngine(t)
	prompt := []int32{1, 2, 3}
	left := errors.New("the client left")
	ctx, cancel := context.WithCancelCause(context.Background())
	failed := errors.New("write failed")
	var tokens [3]int
	gens := []*Generation{
		e.Submit(context.Background(), m.context(t, DefaultContextOptions()), prompt, GenerateOptions{MaxTokens: -1,
			Token: func(int32, []float32) error {
				if tokens[0]++; tokens[0] == 3 {
					return StopGeneration
				}
				return nil
			}}),
		e.Submit(context.Background(), m.context(t, DefaultContextOptions()), prompt, GenerateOptions{MaxTokens: -1,
			Token: func(int32, []float32) error { tokens[1]++; return failed }}),
		e.Submit(ctx, m.context(t, DefaultContextOptions()), prompt, GenerateOptions{MaxTokens: -1,
			Token: func(int32, []float32) error {
				if tokens[2]++; tokens[2] == 5 {
					cancel(left)
				}
				return nil
			}}),
		e.Submit(context.Background(), m.context(t, DefaultContextOptions()), nil, GenerateOptions{}),
	}
	for i, want := range []error{nil, failed, left} {
		if st, err := gens[i].Wait(); !errors.Is(err, want) || st.Generated != []int{3, 1, 5}[i] {
			t.Errorf("generation %d: %d tokens, %v; want %v", i, st.Generated, err, want)
		}
	}
	if _, err := gens[3].Wait(); err == nil {
		t.Error("an empty prompt was accepted")
	}
}

// TestEngineStepAllocatesNothing: a step of the engine's scheduler in the steady state -
// three sequences decoding, greedy - allocates no memory.
func TestEngineStepAllocatesNothing(t *testing.T) {
	m := openModel(t, qwenModel, 2)
	s := scheduler{batch: m.NewBatch(), ubatch: 512}
	defer s.batch.Close()
	for i := range 3 {
		s.add(context.Background(), m.context(t, DefaultContextOptions()), benchTokens(4+i, m.Config.Vocab), GenerateOptions{MaxTokens: -1})
	}
	s.step() // the prompts
	s.step()
	if n := testing.AllocsPerRun(20, s.step); n != 0 || len(s.active) != 3 {
		t.Errorf("%v allocations per step of %d sequences", n, len(s.active))
	}
}

// A panic in a generation's callback, or in a forward pass (here: a context whose caches
// were released), ends the generations concerned with an error and leaves the engine
// serving: passes and callbacks run on the engine's goroutine, where an unrecovered panic
// would end the process.
func TestEngineSurvivesPanics(t *testing.T) {
	m, e := qwenEngine(t)
	prompt := []int32{1, 2, 3}
	panicky := e.Submit(context.Background(), m.context(t, DefaultContextOptions()), prompt, GenerateOptions{MaxTokens: 4,
		Token: func(int32, []float32) error { panic("a bug in the caller") }})
	if _, err := panicky.Wait(); err == nil || !strings.Contains(err.Error(), "a bug in the caller") {
		t.Errorf("a panicking callback: %v", err)
	}
	closed := m.context(t, DefaultContextOptions())
	if err := closed.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Submit(context.Background(), closed, prompt, GenerateOptions{MaxTokens: 4}).Wait(); err == nil {
		t.Error("a pass over a released context succeeded")
	}
	st, err := e.Submit(context.Background(), m.context(t, DefaultContextOptions()), prompt, GenerateOptions{MaxTokens: 4}).Wait()
	if err != nil || st.Generated != 4 {
		t.Errorf("after the panics: %d tokens, %v", st.Generated, err)
	}
}

// qwenEngine is an engine over tiny-qwen3moe on two threads, closed when the test ends.
func qwenEngine(t *testing.T) (*testModel, *Engine) {
	t.Helper()
	m := openModel(t, qwenModel, 2)
	e, err := NewEngine(m.Model, 512)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return m, e
}
