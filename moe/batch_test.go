package moe

import (
	"fmt"
	"testing"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/backend/sim"
	"github.com/moerun/moerun/placement"
	"github.com/moerun/moerun/tensor"
)

// batchPlacements are the placements the batch tests run: the CPU alone, everything on a
// simulated GPU, and the routed experts on the CPU beside it.
var batchPlacements = []gpuPlacement{gpuPlacements[0], gpuPlacements[1], gpuPlacements[2]}

// TestBatchMatchesAlone evaluates three sequences of every golden model in shared batches
// - two prompts in one pass, a prompt split in two pieces around other sequences' decode
// steps (the piece in the middle wants no logits), then decode steps of all three - and
// checks that each sequence gets the greedy tokens and, within the testdata README's
// acceptance bar, the logits of the same sequence evaluated alone on the CPU. A batch
// changes the order of some products (a float matrix times one row uses ggml_vec_dot's
// order, times several tinyBLAS's), so the logits are not bit for bit the same; a
// sequence reading another's cache or state would be far off. Where the greedy token
// differs, the choice must be a near tie, as TestTeacherForced allows against llama.cpp
// (a rounding can flip a router's choice of an expert, which moves that token's logits
// well beyond a rounding: tiny-glm4moe shows one).
func TestBatchMatchesAlone(t *testing.T) {
	const decodeSteps = 6
	for _, gm := range goldenModels {
		g := loadGolden(t, gm.golden)
		prompts := [][]int32{g.Prompts[1].Tokens, g.Prompts[0].Tokens, g.Prompts[2].Tokens}
		ref := openModel(t, gm.path, 2)
		want := make([][][]float32, len(prompts)) // by sequence: the logits after the prompt and each step
		for i, p := range prompts {
			c := ref.context(t, DefaultContextOptions())
			logits, err := c.Eval(p, false)
			for k := 0; err == nil; k++ {
				want[i] = append(want[i], append([]float32(nil), logits...))
				if k == decodeSteps {
					break
				}
				logits, err = c.Eval([]int32{Greedy(logits)}, false)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		for _, pl := range batchPlacements {
			t.Run(gm.golden+"/"+pl.name, func(t *testing.T) {
				m, plan := placedModel(t, gm.path, pl)
				o := DefaultContextOptions()
				o.Size = min(plan.Context.NCtx, 1024)
				got := evalInterleaved(t, m, o, prompts, want)
				var b bar
				var ties []divergence
				for i := range prompts {
					for k, w := range want[i] {
						a := compareLogits(got[i][k], w)
						b.add(a)
						if !a.top1 {
							ties = append(ties, divergence{fmt.Sprintf("sequence %d", i), k, Greedy(got[i][k]), Greedy(w), a})
						}
					}
				}
				b.check(t, "batched against alone")
				checkTiesWith(t, ties, nearTie, "the lone run")
			})
		}
	}
}

// evalInterleaved runs the batch schedule of TestBatchMatchesAlone: sequence 0's prompt
// joins in two pieces while sequences 1 and 2 decode, and every sequence is fed the greedy
// tokens of want (its logits alone). It returns each sequence's logits after its prompt
// and after each decode step.
func evalInterleaved(t *testing.T, m *Model, o ContextOptions, prompts [][]int32, want [][][]float32) [][][]float32 {
	t.Helper()
	type sequence struct {
		c      *Context
		inputs [][]int32 // prompt pieces, then decode tokens
		wants  []bool    // whether an input's logits are wanted
		fed    int
	}
	seqs := make([]*sequence, len(prompts))
	for i, p := range prompts {
		c, err := m.NewContext(o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		s := &sequence{c: c}
		if i == 0 {
			h := len(p) / 2
			s.inputs, s.wants = [][]int32{p[:h], p[h:]}, []bool{false, true}
		} else {
			s.inputs, s.wants = [][]int32{p}, []bool{true}
		}
		for _, w := range want[i][:len(want[i])-1] {
			s.inputs, s.wants = append(s.inputs, []int32{Greedy(w)}), append(s.wants, true)
		}
		seqs[i] = s
	}
	b := m.NewBatch()
	t.Cleanup(func() { b.Close() })
	got := make([][][]float32, len(seqs))
	for round := 0; ; round++ {
		// Sequence 0 joins in the second round, between the others.
		order := []int{1, 2}
		if round > 0 {
			order = []int{1, 0, 2}
		}
		var batch []BatchSeq
		var in []int
		for _, i := range order {
			s := seqs[i]
			if s.fed < len(s.inputs) {
				batch = append(batch, BatchSeq{Context: s.c, Tokens: s.inputs[s.fed], Logits: s.wants[s.fed]})
				in = append(in, i)
			}
		}
		if len(batch) == 0 {
			return got
		}
		if err := b.Eval(batch); err != nil {
			t.Fatal(err)
		}
		for k, i := range in {
			s := seqs[i]
			if l := b.Logits(k); s.wants[s.fed] {
				got[i] = append(got[i], append([]float32(nil), l...))
			} else if l != nil {
				t.Errorf("round %d: logits for sequence %d, which wanted none", round, i)
			}
			s.fed++
		}
	}
}

// TestBatchRefusesBadInput: a batch Eval cannot run is refused before anything is
// computed, and names the sequence at fault.
func TestBatchRefusesBadInput(t *testing.T) {
	m := openModel(t, qwenModel, 1)
	a, c := m.context(t, DefaultContextOptions()), m.context(t, DefaultContextOptions())
	other := openModel(t, qwenModel, 1).context(t, DefaultContextOptions())
	o := DefaultContextOptions()
	o.Attention = tensor.AttnPrecise
	precise := m.context(t, o)
	b := m.NewBatch()
	defer b.Close()
	for _, bad := range [][]BatchSeq{
		nil,
		{{Context: a, Tokens: []int32{1}}, {Context: a, Tokens: []int32{2}}},
		{{Context: a, Tokens: []int32{1}}, {Context: c}},
		{{Context: a, Tokens: []int32{1}}, {Context: other, Tokens: []int32{2}}},
		{{Context: a, Tokens: []int32{1}}, {Context: precise, Tokens: []int32{2}}},
		{{Context: a, Tokens: []int32{int32(m.Config.Vocab)}}},
		{{Tokens: []int32{1}}},
	} {
		if err := b.Eval(bad); err == nil {
			t.Errorf("batch %+v accepted", bad)
		}
	}
	if a.Len() != 0 || c.Len() != 0 {
		t.Errorf("a refused batch moved the contexts to %d and %d", a.Len(), c.Len())
	}
}

// placedModel loads a model under a placement: on the CPU alone for -ngl 0, else on the
// CPU and a simulated GPU.
func placedModel(t *testing.T, path string, pl gpuPlacement) (*Model, *placement.Plan) {
	t.Helper()
	f, pool, host := openHost(t, path, 2)
	devs := []backend.Backend{host}
	if pl.ngl > 0 {
		gpu := sim.New(0, 1<<30, pool)
		t.Cleanup(func() { gpu.Close() })
		devs = append(devs, gpu)
	}
	var ds []backend.Device
	for _, d := range devs {
		ds = append(ds, d.Device())
	}
	plan := placeModel(t, f, pl.rules(t), ds)
	m, err := Load(f, plan, devs)
	if err != nil {
		t.Fatal(err)
	}
	return m, plan
}
