package moe

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestEngineMatchesGenerate: four greedy generations submitted to an engine at once, with a
// ubatch small enough that a prompt is evaluated in pieces beside the others' decode
// steps, produce each the tokens Generate produces for it alone, in fewer forward passes
// than the four alone take. With -b 6 -ub 3 a step's four decode tokens take two passes
// and prompts go two tokens a step. As in TestBatchMatchesAlone, a batch may round
// differently from a lone token, so where the tokens part the choice must be a near tie.
func TestEngineMatchesGenerate(t *testing.T) {
	const maxTokens = 8
	for _, gm := range []struct {
		golden, path  string
		batch, ubatch int
	}{
		{"tiny-qwen3moe", qwenModel, 2048, 16}, {"tiny-deepseek2", deepseekModel, 2048, 16}, {"tiny-qwen35moe", archModel("qwen35moe"), 2048, 16},
		{"tiny-qwen3moe", qwenModel, 6, 3},
	} {
		t.Run(fmt.Sprintf("%s/b%d/ub%d", gm.golden, gm.batch, gm.ubatch), func(t *testing.T) {
			g := loadGolden(t, gm.golden)
			m := openModel(t, gm.path, 2)
			o := DefaultContextOptions()
			o.Batch, o.UBatch = gm.batch, gm.ubatch
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
				// Steps of -b tokens, each in passes of -ub.
				for left := len(prompt); left > 0; left -= o.Batch {
					alonePasses += (min(left, o.Batch) + o.UBatch - 1) / o.UBatch
				}
				alonePasses += st.DecodeSteps
			}
			e, err := NewEngine(m.Model, o.Batch, o.UBatch)
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
	s := scheduler{eval: m.NewBatch(), batch: 2048, ubatch: 512}
	defer s.eval.Close()
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
	e, err := NewEngine(m.Model, 2048, 512)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return m, e
}

// TestEngineBatchSizes: with -b 8 -ub 3, as in llama-server, a step holds every decode
// token and prompt tokens up to the batch, run in passes of at most the ubatch, a prompt
// cut wherever a pass is full. A generation with a 3-token prompt beside one with 40
// gets a token every step: the first step is its prompt and 5 of the other's (passes of
// 3, 3 and 2 tokens; its first token comes after the first pass, which ends its
// prompt), the next five are 7 tokens of the long prompt and its decode token (3, 3,
// and 1+1), and once the long prompt is done a step is the two decode tokens in one
// pass.
func TestEngineBatchSizes(t *testing.T) {
	m := openModel(t, qwenModel, 2)
	e, err := NewEngine(m.Model, 8, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	var passes, tokens []uint64 // since the short one's token before
	var lastPasses, lastTokens uint64
	resume := e.Pause() // both join the first step
	short := e.Submit(context.Background(), m.context(t, DefaultContextOptions()), []int32{1, 2, 3}, GenerateOptions{MaxTokens: 10,
		Token: func(int32, []float32) error {
			p, n := e.Batches()
			passes, tokens = append(passes, p-lastPasses), append(tokens, n-lastTokens)
			lastPasses, lastTokens = p, n
			return nil
		}})
	long := e.Submit(context.Background(), m.context(t, DefaultContextOptions()), benchTokens(40, m.Config.Vocab), GenerateOptions{MaxTokens: 20})
	resume()
	for _, g := range []*Generation{short, long} {
		if _, err := g.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	wantPasses := []uint64{1, 2 + 3, 3, 3, 3, 3, 1, 1, 1, 1}
	wantTokens := []uint64{3, 5 + 8, 8, 8, 8, 8, 2, 2, 2, 2}
	if !slices.Equal(passes, wantPasses) || !slices.Equal(tokens, wantTokens) {
		t.Errorf("steps before each token: %v passes of %v tokens; want %v of %v", passes, tokens, wantPasses, wantTokens)
	}
}

// TestEngineSizes: -b caps -ub and a zero -b is the ubatch, as in llama.cpp; sizes that
// cannot work are refused, naming the flag.
func TestEngineSizes(t *testing.T) {
	m := openModel(t, qwenModel, 1)
	for _, c := range []struct{ batch, ubatch, wantBatch, wantUBatch int }{
		{2048, 512, 2048, 512}, {256, 512, 256, 256}, {0, 64, 64, 64},
	} {
		e, err := NewEngine(m.Model, c.batch, c.ubatch)
		if err != nil {
			t.Fatal(err)
		}
		if b, ub := e.Sizes(); b != c.wantBatch || ub != c.wantUBatch {
			t.Errorf("-b %d -ub %d: %d and %d; want %d and %d", c.batch, c.ubatch, b, ub, c.wantBatch, c.wantUBatch)
		}
		e.Close()
	}
	for _, c := range []struct {
		batch, ubatch int
		flag          string
	}{{-1, 512, "(-b)"}, {2048, 0, "(-ub)"}} {
		if _, err := NewEngine(m.Model, c.batch, c.ubatch); err == nil || !strings.Contains(err.Error(), c.flag) {
			t.Errorf("-b %d -ub %d: %v", c.batch, c.ubatch, err)
		}
		o := DefaultContextOptions()
		o.Batch, o.UBatch = c.batch, c.ubatch
		if _, err := m.NewContext(o); err == nil || !strings.Contains(err.Error(), c.flag) {
			t.Errorf("a context with -b %d -ub %d: %v", c.batch, c.ubatch, err)
		}
	}
}

// TestEngineGathering: an idle engine with a Gathering waits for the generations submitted
// after the first, and evaluates all their prompts in its first forward pass, until one
// of the four ends of the wait: a quiet spell (restarted by each submission), the
// longest wait, as many generations as Sequences, or prompts that fill the step. Each
// generation takes one token, which needs no pass of its own, so the passes are the
// prompts' passes; the engine's step (-b) is 8 tokens, which two 4-token prompts fill. A busy engine does not wait: a generation submitted while another
// decodes joins at once, although the quiet spell is an hour.
func TestEngineGathering(t *testing.T) {
	const ms = time.Millisecond
	m := openModel(t, qwenModel, 2)
	for _, c := range []struct {
		name         string
		gathering    Gathering
		after        []time.Duration // when each generation is submitted, from the first
		promptTokens int
		passes       uint64
		least        time.Duration // the first pass starts no sooner
	}{
		{"quiet", Gathering{Quiet: time.Second, Max: time.Minute}, []time.Duration{0, 300 * ms, 600 * ms}, 2, 1, 1600 * ms},
		{"quiet-over", Gathering{Quiet: 50 * ms, Max: time.Minute}, []time.Duration{0, time.Second}, 2, 2, 50 * ms},
		{"sequences", Gathering{Quiet: time.Hour, Max: time.Minute, Sequences: 3}, []time.Duration{0, 20 * ms, 40 * ms}, 2, 1, 40 * ms},
		{"max", Gathering{Quiet: time.Hour, Max: 200 * ms}, []time.Duration{0}, 2, 1, 200 * ms},
		{"batch", Gathering{Quiet: time.Hour, Max: time.Minute}, []time.Duration{0, 30 * ms}, 4, 1, 30 * ms},
		{"off", Gathering{}, []time.Duration{0}, 2, 1, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, err := NewEngine(m.Model, 8, 8)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			e.SetGathering(c.gathering)
			start := time.Now()
			var first time.Duration // when the first generation's token came
			gens := make([]*Generation, len(c.after))
			for i, at := range c.after {
				time.Sleep(time.Until(start.Add(at)))
				gens[i] = e.Submit(context.Background(), m.context(t, DefaultContextOptions()), benchTokens(c.promptTokens, m.Config.Vocab), GenerateOptions{MaxTokens: 1,
					Token: func(int32, []float32) error {
						if first == 0 {
							first = time.Since(start)
						}
						return nil
					}})
			}
			for _, g := range gens {
				if _, err := g.Wait(); err != nil {
					t.Fatal(err)
				}
			}
			if passes, tokens := e.Batches(); passes != c.passes || tokens != uint64(len(c.after)*c.promptTokens) {
				t.Errorf("%d passes of %d tokens; want %d of %d", passes, tokens, c.passes, len(c.after)*c.promptTokens)
			}
			if first < c.least || first > 30*time.Second {
				t.Errorf("the first token came after %v; want at least %v, and no wait near the minute", first, c.least)
			}
		})
	}

	t.Run("busy", func(t *testing.T) {
		e, err := NewEngine(m.Model, 2048, 512)
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		e.SetGathering(Gathering{Quiet: time.Hour, Max: time.Hour, Sequences: 1})
		started, submitted := make(chan struct{}), make(chan struct{})
		first := true // read and written on the engine's goroutine only
		long := e.Submit(context.Background(), m.context(t, DefaultContextOptions()), []int32{1, 2, 3}, GenerateOptions{MaxTokens: 40,
			Token: func(int32, []float32) error {
				if first {
					first = false
					close(started)
					<-submitted // the long generation is still decoding
				}
				return nil
			}})
		<-started
		e.SetGathering(Gathering{Quiet: time.Hour, Max: time.Hour, Sequences: 2})
		joined := e.Submit(context.Background(), m.context(t, DefaultContextOptions()), []int32{4, 5}, GenerateOptions{MaxTokens: 4})
		close(submitted)
		select {
		case <-joined.Done():
		case <-time.After(30 * time.Second):
			t.Fatal("a generation submitted to a busy engine waited for others")
		}
		for _, g := range []*Generation{joined, long} {
			if st, err := g.Wait(); err != nil || st.Generated == 0 {
				t.Errorf("%d tokens, %v", st.Generated, err)
			}
		}
	})
}
