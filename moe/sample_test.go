package moe

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
)

// TestMT19937 checks the generator against the C++ standard library: the standard's required
// 10,000th output for the default seed, and uniform_real_distribution<double>(0, 1) draws
// printed by a libstdc++ program.
func TestMT19937(t *testing.T) {
	var m mt19937
	m.seed(5489)
	for range 9999 {
		m.next()
	}
	if got := m.next(); got != 4123659995 {
		t.Fatalf("10000th output %d, want 4123659995", got)
	}
	for _, c := range []struct {
		seed uint32
		want []float64
	}{
		{0, []float64{0.59284461651668263, 0.84426574425659828, 0.85794561998982988, 0.84725173738433124, 0.62356369649610832}},
		{42, []float64{0.79654298428784598, 0.18343478789336848, 0.77969099761266125, 0.59685016158005655, 0.44583275754843343}},
		{4294967294, []float64{0.10184899170898529, 0.94789751258733013, 0.82893340139475558, 0.37232930669741121, 0.5176980985702806}},
	} {
		m.seed(c.seed)
		for i, w := range c.want {
			if got := m.uniform(); got != w {
				t.Errorf("seed %d draw %d: %.17g, want %.17g", c.seed, i, got, w)
			}
		}
	}
}

// TestSamplerMatchesLlamaCpp replays the token choices llama.cpp's own sampler chain made
// (tools/oracle/sampler_golden.cpp) for seven parameter sets over 48 steps each.
func TestSamplerMatchesLlamaCpp(t *testing.T) {
	raw, err := os.ReadFile("testdata/sampler-golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var golden struct {
		NVocab int `json:"n_vocab"`
		NSteps int `json:"n_steps"`
		Cases  []struct {
			Name                  string
			Temp                  float32
			TopK                  int     `json:"top_k"`
			TopP                  float32 `json:"top_p"`
			MinP                  float32 `json:"min_p"`
			MinKeep               int     `json:"min_keep"`
			LastN                 int     `json:"last_n"`
			Repeat, Freq, Present float32
			Seed                  uint32
			Tokens                []int32
		}
	}
	if err := json.Unmarshal(raw, &golden); err != nil {
		t.Fatal(err)
	}
	if len(golden.Cases) != 7 {
		t.Fatalf("%d cases", len(golden.Cases))
	}
	logits := make([]float32, golden.NVocab)
	for _, c := range golden.Cases {
		s, err := NewSampler(SamplerParams{Temperature: c.Temp, TopK: c.TopK, TopP: c.TopP, MinP: c.MinP, MinKeep: c.MinKeep,
			PenaltyLastN: c.LastN, RepeatPenalty: c.Repeat, FrequencyPenalty: c.Freq, PresencePenalty: c.Present, Seed: c.Seed}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for step := range golden.NSteps {
			var gen mt19937
			gen.seed(uint32(1000 + step))
			for i := range logits {
				logits[i] = float32(gen.next()>>8)/float32(1<<20) - 8
			}
			got := s.Sample(logits)
			s.Accept(got)
			if want := c.Tokens[step]; got != want {
				t.Errorf("%s step %d: sampled %d, llama.cpp %d", c.Name, step, got, want)
				break
			}
		}
	}
}

func TestSamplerHandComputed(t *testing.T) {
	// Greedy picks the first maximum.
	if got := Greedy([]float32{1, 3, 3, -1}); got != 1 {
		t.Errorf("greedy %d", got)
	}
	// Penalties: token 2 seen twice. Positive logit 2 → 2/2 - (2·0.5 + 1) = -1;
	// negative logit of token 0 seen once → -1·2 - (0.5 + 1) = -3.5.
	s, _ := NewSampler(SamplerParams{Temperature: 0, RepeatPenalty: 2, FrequencyPenalty: 0.5, PresencePenalty: 1, PenaltyLastN: 3, TopP: 1}, nil)
	for _, tok := range []int32{2, 0, 2} {
		s.Accept(tok)
	}
	c := []candidate{{id: 0, logit: -1}, {id: 1, logit: 0.5}, {id: 2, logit: 2}}
	s.penalize(c)
	if c[0].logit != -3.5 || c[1].logit != 0.5 || c[2].logit != -1 {
		t.Errorf("penalties: %+v", c)
	}
	// The window slides: after a 4th token, the first 2 drops out (counts 2→1).
	s.Accept(1)
	if s.counts[2] != 1 || s.counts[1] != 1 || s.counts[0] != 1 {
		t.Errorf("window counts %v", s.counts)
	}
	// min-p 0.5 keeps logits within ln 2 of the top: 1.0 and 0.4 (1 - 0.693 = 0.307), not 0.
	kept := minP([]candidate{{id: 0, logit: 1}, {id: 1, logit: 0.4}, {id: 2, logit: 0}}, 0.5, 0, true)
	if len(kept) != 2 {
		t.Errorf("min-p kept %d", len(kept))
	}
	// top-p 0.6 over probabilities ~(0.665, 0.245, 0.090) keeps two.
	kept, _ = topP([]candidate{{id: 0, logit: 2}, {id: 1, logit: 1}, {id: 2, logit: 0}}, 0.7, 0, true)
	if len(kept) != 2 || math.Abs(float64(kept[0].p)-0.66524) > 1e-4 {
		t.Errorf("top-p kept %+v", kept)
	}
}

func TestSamplerValidation(t *testing.T) {
	for _, p := range []SamplerParams{
		{TopP: -1, RepeatPenalty: 1}, {MinP: 2, RepeatPenalty: 1}, {RepeatPenalty: 0},
		{Temperature: float32(math.NaN()), RepeatPenalty: 1}, {PenaltyLastN: -2, RepeatPenalty: 1},
	} {
		if _, err := NewSampler(p, nil); err == nil {
			t.Errorf("%+v accepted", p)
		}
	}
	called := false
	if _, err := NewSampler(DefaultSampler(), func() uint32 { called = true; return 1 }); err != nil || !called {
		t.Errorf("random seed: %v, entropy used %v", err, called)
	}
}

func TestSamplerSteadyStateAllocs(t *testing.T) {
	s, _ := NewSampler(SamplerParams{Temperature: 0.8, TopK: 40, TopP: 0.95, MinP: 0.05, RepeatPenalty: 1.1, PenaltyLastN: 64, Seed: 1}, nil)
	logits := make([]float32, 4096)
	for i := range logits {
		logits[i] = float32(i%97) / 10
	}
	s.Sample(logits) // warm up the candidate buffer
	allocs := testing.AllocsPerRun(20, func() { s.Accept(s.Sample(logits)) })
	if allocs > 0 {
		t.Errorf("%.0f allocations per sampled token", allocs)
	}
}

// BenchmarkSampleQwenVocab samples from Qwen3's vocabulary with llama.cpp's defaults, at
// their temperature and at 0 (the plain greedy choice), by a sampler in use (a token of a
// running request) and by a new one (a request's first token).
func BenchmarkSampleQwenVocab(b *testing.B) {
	logits := make([]float32, 151936)
	var gen mt19937
	gen.seed(1)
	for i := range logits {
		logits[i] = float32(gen.next()>>8)/float32(1<<20) - 8
	}
	for _, temp := range []float32{0.8, 0} {
		p := DefaultSampler()
		p.Temperature = temp
		b.Run(fmt.Sprintf("temp=%g", temp), func(b *testing.B) {
			s, _ := NewSampler(p, func() uint32 { return 1 })
			for b.Loop() {
				s.Sample(logits)
			}
		})
		b.Run(fmt.Sprintf("temp=%g/new", temp), func(b *testing.B) {
			for b.Loop() {
				s, _ := NewSampler(p, func() uint32 { return 1 })
				s.Sample(logits)
			}
		})
	}
}

// allowSet is a constraint of a fixed set of tokens; it records what it accepted and can
// be told to refuse.
type allowSet struct {
	allowed  map[int32]bool
	accepted []int32
	refuse   error
}

func (a *allowSet) Allows(t int32) bool { return a.allowed[t] }

func (a *allowSet) Mask(allowed []bool) error {
	for t := range allowed {
		allowed[t] = a.allowed[int32(t)]
	}
	return nil
}

func (a *allowSet) Accept(t int32) error {
	if a.refuse != nil {
		return a.refuse
	}
	a.accepted = append(a.accepted, t)
	return nil
}

// TestSamplerConstraint: Next keeps an allowed first choice, and otherwise samples again
// from the masked logits, drawing a second random number as llama.cpp's rejection
// sampling does.
func TestSamplerConstraint(t *testing.T) {
	greedy, _ := NewSampler(SamplerParams{Temperature: 0, TopP: 1, RepeatPenalty: 1}, nil)
	set := &allowSet{allowed: map[int32]bool{1: true, 2: true}}
	greedy.Constrain(set)
	logits := []float32{5, 1, 3, 4}
	if id, err := greedy.Next(logits); err != nil || id != 2 {
		t.Fatalf("greedy with 0 ruled out: %d, %v; want 2 (the best allowed)", id, err)
	}
	if id, err := greedy.Next([]float32{0, 7, 3, 4}); err != nil || id != 1 {
		t.Fatalf("greedy with the best allowed: %d, %v; want 1", id, err)
	}
	if !slices.Equal(set.accepted, []int32{2, 1}) {
		t.Fatalf("accepted %v, want [2 1]", set.accepted)
	}

	// Seeded: after a rejection the sampler has drawn twice, as a sampler that sampled the
	// raw and then the masked logits.
	params := SamplerParams{Temperature: 1, TopP: 1, RepeatPenalty: 1, Seed: 42}
	wide := make([]float32, 64)
	for i := range wide {
		wide[i] = float32(i%7) * 0.5
	}
	only := &allowSet{allowed: map[int32]bool{3: true, 10: true, 17: true}}
	masked := slices.Clone(wide)
	for i := range masked {
		if !only.allowed[int32(i)] {
			masked[i] = float32(math.Inf(-1))
		}
	}
	constrained, _ := NewSampler(params, nil)
	constrained.Constrain(only)
	reference, _ := NewSampler(params, nil)
	for step := range 50 {
		got, err := constrained.Next(wide)
		if err != nil {
			t.Fatal(err)
		}
		want := reference.Sample(wide)
		if !only.allowed[want] {
			want = reference.Sample(masked)
		}
		if got != want || !only.allowed[got] {
			t.Fatalf("step %d: %d, want %d (allowed: 3, 10, 17)", step, got, want)
		}
	}

	// With top-k the sampler looks for the best allowed tokens from the top down instead
	// of masking everything: the same choices as the mask, whether many tokens are allowed
	// (found near the top), few (found deep) or almost none (the mask after all).
	rng := rand.New(rand.NewPCG(7, 7))
	vocab := make([]float32, 50000)
	for i := range vocab {
		vocab[i] = float32(rng.NormFloat64() * 3)
	}
	for _, share := range []float64{0.5, 0.01, 0.00005} {
		set := &allowSet{allowed: map[int32]bool{}}
		for i := range vocab {
			if rng.Float64() < share {
				set.allowed[int32(i)] = true
			}
		}
		masked := slices.Clone(vocab)
		for i := range masked {
			if !set.allowed[int32(i)] {
				masked[i] = float32(math.Inf(-1))
			}
		}
		params := SamplerParams{Temperature: 0.8, TopK: 40, TopP: 0.95, MinP: 0.05, RepeatPenalty: 1.1, PenaltyLastN: 8, Seed: 3}
		constrained, _ := NewSampler(params, nil)
		constrained.Constrain(set)
		reference, _ := NewSampler(params, nil)
		for step := range 100 {
			got, err := constrained.Next(vocab)
			if err != nil {
				t.Fatal(err)
			}
			want := reference.Sample(vocab)
			if !set.allowed[want] {
				want = reference.Sample(masked)
			}
			if got != want {
				t.Fatalf("allowed share %g, step %d: %d, want %d", share, step, got, want)
			}
			constrained.Accept(got)
			reference.Accept(want)
		}
	}

	none := &allowSet{allowed: map[int32]bool{}}
	greedy.Constrain(none)
	if _, err := greedy.Next(logits); err == nil || !strings.Contains(err.Error(), "allows no token") {
		t.Fatalf("nothing allowed: %v", err)
	}
	refusing := &allowSet{allowed: map[int32]bool{0: true}, refuse: errors.New("refused")}
	greedy.Constrain(refusing)
	if _, err := greedy.Next(logits); err == nil || err.Error() != "refused" {
		t.Fatalf("a refused accept: %v", err)
	}
}

// forceSet forces its only token on even steps and allows everything on odd ones.
type forceSet struct {
	token int32
	step  int
}

func (f *forceSet) Forcing() bool       { return f.step%2 == 0 }
func (f *forceSet) Allows(t int32) bool { return !f.Forcing() || t == f.token }
func (f *forceSet) Accept(int32) error  { f.step++; return nil }
func (f *forceSet) Mask(allowed []bool) error {
	for t := range allowed {
		allowed[t] = f.Allows(int32(t))
	}
	return nil
}

// A forcing constraint's token is drawn once, from it alone, as llama.cpp's reasoning
// budget masks the logits before the chain: the random numbers stay those of a sampler
// given the masked logits, so that the free steps after it make llama.cpp's choices.
func TestSamplerForcing(t *testing.T) {
	params := SamplerParams{Temperature: 1, TopK: 40, TopP: 0.95, RepeatPenalty: 1, Seed: 9}
	logits := make([]float32, 64)
	for i := range logits {
		logits[i] = float32(i%9) * 0.4
	}
	force := &forceSet{token: 5}
	masked := slices.Clone(logits)
	for i := range masked {
		if i != 5 {
			masked[i] = float32(math.Inf(-1))
		}
	}
	constrained, _ := NewSampler(params, nil)
	constrained.Constrain(force)
	reference, _ := NewSampler(params, nil)
	for step := range 40 {
		got, err := constrained.Next(logits)
		if err != nil {
			t.Fatal(err)
		}
		row := logits
		if step%2 == 0 {
			row = masked
		}
		if want := reference.Sample(row); got != want {
			t.Fatalf("step %d: %d, want %d", step, got, want)
		}
	}
}

// TestSamplerPlainGreedy: at temperature 0 the shortcut past the chain chooses what the
// chain chooses, for each truncation setting, on logits with a single best and with ties
// (which it leaves to the chain), and leaves NaNs and penalties to the chain.
func TestSamplerPlainGreedy(t *testing.T) {
	var gen mt19937
	gen.seed(7)
	logits := make([]float32, 5000)
	for _, p := range []SamplerParams{
		{TopK: 40, TopP: 0.95, MinP: 0.05, RepeatPenalty: 1, PenaltyLastN: 64},
		{TopK: 1, TopP: 1, RepeatPenalty: 1},
		{TopK: 5000, TopP: 0.5, MinKeep: 3, RepeatPenalty: 1},
	} {
		for round := range 40 {
			for i := range logits {
				logits[i] = float32(gen.next()>>20) / 64 // coarse: ties below the best too
			}
			logits[gen.next()%uint32(len(logits))] = 100 // a single best,
			if round%2 == 0 {
				logits[gen.next()%uint32(len(logits))] = 100 // or tied (at worst with itself)
			}
			s, err := NewSampler(p, nil)
			if err != nil {
				t.Fatal(err)
			}
			want := s.chain(s.candidates(logits))
			got, ok := s.plainGreedy(logits)
			if round%2 == 1 && !ok {
				t.Fatalf("%+v round %d: a single best left to the chain", p, round)
			}
			if ok && got != want {
				t.Fatalf("%+v round %d: shortcut %d, chain %d", p, round, got, want)
			}
			if round%2 == 0 && ok && logits[got] == 100 && countOf(logits, 100) > 1 {
				t.Fatalf("%+v round %d: tied best %d taken by the shortcut", p, round, got)
			}
			if s.Sample(logits) != want {
				t.Fatalf("%+v round %d: Sample differs from the chain", p, round)
			}
		}
	}
	logits[3] = float32(math.NaN())
	s, _ := NewSampler(SamplerParams{TopK: 40, TopP: 1, RepeatPenalty: 1}, nil)
	if _, ok := s.plainGreedy(logits); ok {
		t.Error("NaN logits taken by the shortcut")
	}
	for _, p := range []SamplerParams{
		{TopK: 40, TopP: 1, RepeatPenalty: 1.1, PenaltyLastN: 64},
		{TopK: 0, TopP: 1, RepeatPenalty: 1},
		{Temperature: 0.5, TopK: 40, TopP: 1, RepeatPenalty: 1},
	} {
		s, _ := NewSampler(p, nil)
		if _, ok := s.plainGreedy([]float32{1, 2, 3}); ok {
			t.Errorf("%+v taken by the shortcut", p)
		}
	}
}

func countOf(values []float32, v float32) int {
	n := 0
	for _, x := range values {
		if x == v {
			n++
		}
	}
	return n
}
