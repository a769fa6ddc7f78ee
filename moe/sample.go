package moe

import (
	"cmp"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
)

// SamplerParams are llama.cpp's sampling parameters, with its defaults from DefaultSampler.
type SamplerParams struct {
	Temperature      float32 // <= 0: greedy
	TopK             int     // <= 0: off
	TopP             float32 // >= 1: off
	MinP             float32 // <= 0: off
	MinKeep          int     // top-p and min-p keep at least this many candidates
	RepeatPenalty    float32 // 1: off
	FrequencyPenalty float32 // 0: off
	PresencePenalty  float32 // 0: off
	PenaltyLastN     int     // how many recent tokens the penalties look at; 0: off
	Seed             uint32  // RandomSeed draws one from the system
}

// RandomSeed asks for a seed from the system, like llama.cpp's LLAMA_DEFAULT_SEED.
const RandomSeed = math.MaxUint32

// DefaultSampler returns llama.cpp's defaults (common_params_sampling): temp 0.8, top-k 40,
// top-p 0.95, min-p 0.05, penalties off over the last 64 tokens, random seed.
func DefaultSampler() SamplerParams {
	return SamplerParams{Temperature: 0.8, TopK: 40, TopP: 0.95, MinP: 0.05, RepeatPenalty: 1, PenaltyLastN: 64, Seed: RandomSeed}
}

// Validate rejects parameters llama.cpp would misbehave on.
func (p SamplerParams) Validate() error {
	switch {
	case math.IsNaN(float64(p.Temperature)) || math.IsNaN(float64(p.TopP)) || math.IsNaN(float64(p.MinP)):
		return fmt.Errorf("sampling parameters must be numbers")
	case p.TopP < 0:
		return fmt.Errorf("top-p %g is negative", p.TopP)
	case p.MinP > 1:
		return fmt.Errorf("min-p %g is above 1", p.MinP)
	case p.MinKeep < 0:
		return fmt.Errorf("min-keep %d is negative", p.MinKeep)
	case p.PenaltyLastN < -1:
		return fmt.Errorf("penalty window %d: use -1 for the whole context or a count >= 0", p.PenaltyLastN)
	case p.RepeatPenalty <= 0:
		return fmt.Errorf("repeat penalty %g must be positive", p.RepeatPenalty)
	}
	return nil
}

// candidate is one token under consideration (llama_token_data).
type candidate struct {
	id    int32
	logit float32
	p     float32
}

// Sampler picks the next token from logits with llama.cpp's chain and order: penalties →
// top-k → top-p → min-p → temperature → a draw from the distribution, using the same
// random number generator (mt19937 and libstdc++'s uniform_real_distribution<double>) so a
// seed reproduces llama.cpp's choices given the same logits. Not safe for concurrent use;
// each sequence has its own.
type Sampler struct {
	params SamplerParams
	rng    mt19937
	recent []int32         // ring of the last PenaltyLastN accepted tokens
	next   int             // write position in recent once it is full
	counts map[int32]int32 // occurrences of each token in recent
	cands  []candidate     // reused between calls

	constraint Constraint // nil: every token may come next
	// narrow says the last mask allowed less than 1/headWindow of the vocabulary: the
	// head of a refused draw would then rarely hold k allowed tokens, and looking there
	// first only adds work before the mask.
	narrow  bool
	allowed []bool      // the constraint's mask, reused between calls
	masked  []float32   // the logits with the disallowed tokens at -Inf
	head    []candidate // the best candidates of a constrained draw, kept sorted
}

// Constraint limits which tokens may come next, as llama.cpp's grammar sampler does (a GBNF
// grammar, a JSON schema). The sampler asks it in llama.cpp's order: it samples as if
// unconstrained, keeps the token if Allows says so, and otherwise samples again from the
// logits with every token Mask rules out at -Inf (so a seed makes llama.cpp's choices).
type Constraint interface {
	// Allows reports whether token may come next.
	Allows(token int32) bool
	// Mask sets allowed[t] for every token t of the vocabulary (len(allowed) is its size).
	Mask(allowed []bool) error
	// Accept advances past the token that came next; an error ends the generation.
	Accept(token int32) error
}

// A ForcingConstraint can also force the next token (llama.cpp's reasoning budget writing
// the closing tag): while Forcing holds, Next draws from the tokens Mask allows alone,
// without the unconstrained draw first, as llama.cpp masks the logits before its chain
// runs and so draws once.
type ForcingConstraint interface {
	Constraint
	Forcing() bool
}

// Constrain makes every later Next keep to c (nil: no constraint).
func (s *Sampler) Constrain(c Constraint) { s.constraint, s.narrow = c, false }

// Next chooses the next token from a row of logits as Sample does, within the sampler's
// constraint, and advances the constraint past it. It fails when the constraint allows no
// token at all or refuses the chosen one.
func (s *Sampler) Next(logits []float32) (int32, error) {
	c, k := s.constraint, s.params.TopK
	if f, ok := c.(ForcingConstraint); ok && f.Forcing() {
		return s.sampleMasked(logits)
	}
	if c == nil || k <= 0 || s.narrow {
		id := s.Sample(logits)
		if c == nil || c.Allows(id) {
			return id, s.accept(id)
		}
		return s.sampleMasked(logits)
	}
	// As Sample, but the first pass keeps the best headWindow·k candidates sorted (a copy:
	// the chain rewrites its candidates), so that a refused draw finds top-k of the masked
	// logits, the k best allowed tokens, there without another pass over the vocabulary.
	cands := s.candidates(logits)
	w := min(len(cands), headWindow*k)
	partialSort(cands, w)
	s.head = append(s.head[:0], cands[:w]...)
	id := s.truncateAndDraw(cands[:min(k, w)], true)
	if c.Allows(id) {
		return id, s.accept(id)
	}
	if head, ok := keepAllowed(s.head, k, c.Allows); ok {
		id = s.truncateAndDraw(head, true)
		return id, s.accept(id)
	}
	return s.sampleMasked(logits)
}

// headWindow is how many times top-k's candidates a constrained sampler keeps sorted: a
// grammar that allows a fair share of the vocabulary leaves k of them.
const headWindow = 2

// keepAllowed moves to the front of sorted (best first) the first k candidates that allows
// accepts, in order, and reports whether there were k.
func keepAllowed(sorted []candidate, k int, allows func(int32) bool) ([]candidate, bool) {
	kept := 0
	for i := 0; i < len(sorted) && kept < k; i++ {
		if allows(sorted[i].id) {
			sorted[kept] = sorted[i]
			kept++
		}
	}
	return sorted[:kept], kept == k
}

// sampleMasked samples again from the logits of the tokens the constraint allows: llama.cpp
// puts the others at -Inf and runs the chain over everything, where they can only sort
// last and draw a probability of 0, so leaving them out draws the same token.
func (s *Sampler) sampleMasked(logits []float32) (int32, error) {
	if cap(s.allowed) < len(logits) {
		s.allowed = make([]bool, len(logits))
	}
	allowed := s.allowed[:len(logits)]
	clear(allowed)
	if err := s.constraint.Mask(allowed); err != nil {
		return 0, err
	}
	c := s.cands[:0]
	for i, ok := range allowed {
		if ok {
			c = append(c, candidate{id: int32(i), logit: logits[i]})
		}
	}
	s.cands = c
	s.narrow = len(c)*headWindow < len(logits)
	if len(c) == 0 {
		return 0, fmt.Errorf("the constraint allows no token of the vocabulary here")
	}
	s.penalize(c)
	id := s.chain(c)
	return id, s.accept(id)
}

// accept advances the constraint past id.
func (s *Sampler) accept(id int32) error {
	if s.constraint == nil {
		return nil
	}
	return s.constraint.Accept(id)
}

// SystemSeed draws a seed from the operating system's random source, as llama.cpp does
// for seed -1: the entropy to give NewSampler outside tests.
func SystemSeed() uint32 {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint32(b[:])
}

// NewSampler makes a sampler. entropy supplies the seed when params.Seed is RandomSeed.
func NewSampler(params SamplerParams, entropy func() uint32) (*Sampler, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	seed := params.Seed
	if seed == RandomSeed {
		seed = entropy()
	}
	s := &Sampler{params: params, counts: map[int32]int32{}}
	s.rng.seed(seed)
	return s, nil
}

// Accept records a token (prompt or generated) for the repetition penalties.
func (s *Sampler) Accept(token int32) {
	n := s.params.PenaltyLastN
	if n == 0 {
		return
	}
	s.counts[token]++
	if n > 0 && len(s.recent) >= n {
		old := s.recent[s.next]
		if s.counts[old]--; s.counts[old] == 0 {
			delete(s.counts, old)
		}
		s.recent[s.next] = token
		s.next = (s.next + 1) % n
		return
	}
	s.recent = append(s.recent, token)
}

// Sample chooses a token from a row of logits.
func (s *Sampler) Sample(logits []float32) int32 {
	if id, ok := s.plainGreedy(logits); ok {
		return id
	}
	return s.chain(s.candidates(logits))
}

// plainGreedy is the chain's choice made without the chain where the chain can only make
// it: at temperature 0 with top-k on and the penalties off, top-k sorts the best logit
// first, top-p and min-p always keep it, the temperature step puts every other at -Inf, and
// the draw takes it whatever its random number. Sampling runs between forward passes, on
// every sequence's critical path: on Qwen3's vocabulary the chain took 0.14 ms a token at
// temperature 0 and this pass takes 0.05 (BenchmarkSampleQwenVocab), so four sequences
// decoding together save about 0.35 ms a step. Ties and NaNs, where the order of the
// chain's sort decides, are left to the chain (ok false). The draw's random number is not
// taken: at temperature 0 no later choice depends on it.
func (s *Sampler) plainGreedy(logits []float32) (id int32, ok bool) {
	if p := s.params; p.Temperature > 0 || p.TopK <= 0 || s.penalizes() || len(logits) == 0 {
		return 0, false
	}
	most, best, tied := logits[0], 0, false
	if most != most {
		return 0, false
	}
	for i := 1; i < len(logits); i++ {
		l := logits[i]
		if l < most {
			continue // nearly always: one predictable branch a logit
		}
		switch {
		case l > most:
			most, best, tied = l, i, false
		case l == most:
			tied = true
		default:
			return 0, false // NaN
		}
	}
	return int32(best), !tied
}

// chain runs the chain's truncations and draw on penalized candidates.
func (s *Sampler) chain(c []candidate) int32 {
	sorted := false
	if s.params.TopK > 0 {
		c, sorted = topK(c, s.params.TopK), true
	}
	return s.truncateAndDraw(c, sorted)
}

// candidates are the logits as candidates, penalized: what the chain's truncations take.
func (s *Sampler) candidates(logits []float32) []candidate {
	if cap(s.cands) < len(logits) {
		// At once: grown by appends, a new sampler's first token took 14-16 ms, now 1.0-1.2
		// (BenchmarkSampleQwenVocab/temp=0.8/new), and a server makes one a request.
		s.cands = make([]candidate, len(logits))
	}
	c := s.cands[:len(logits)]
	for i, l := range logits {
		c[i] = candidate{id: int32(i), logit: l}
	}
	s.penalize(c)
	return c
}

// truncateAndDraw runs the chain after top-k (sorted: c is sorted best first).
func (s *Sampler) truncateAndDraw(c []candidate, sorted bool) int32 {
	p := s.params
	if p.TopP < 1 {
		c, sorted = topP(c, p.TopP, p.MinKeep, sorted)
	}
	if p.MinP > 0 {
		c = minP(c, p.MinP, p.MinKeep, sorted)
	}
	temperature(c, p.Temperature)
	return s.draw(c)
}

// Greedy returns the index of the largest logit, the lowest index on ties (llama.cpp's
// greedy sampler).
func Greedy(logits []float32) int32 {
	best := 0
	for i, l := range logits {
		if l > logits[best] {
			best = i
		}
	}
	return int32(best)
}

// penalizes reports whether any penalty is on.
func (s *Sampler) penalizes() bool {
	p := s.params
	return p.PenaltyLastN != 0 && (p.RepeatPenalty != 1 || p.FrequencyPenalty != 0 || p.PresencePenalty != 0)
}

// penalize applies the repetition, frequency and presence penalties: a repeated token's
// logit is divided by the repeat penalty when positive and multiplied when not, then
// lowered by count·frequency + presence.
func (s *Sampler) penalize(c []candidate) {
	if !s.penalizes() {
		return
	}
	p := s.params
	for i := range c {
		n, ok := s.counts[c[i].id]
		if !ok {
			continue
		}
		if c[i].logit <= 0 {
			c[i].logit *= p.RepeatPenalty
		} else {
			c[i].logit /= p.RepeatPenalty
		}
		c[i].logit -= float32(n)*p.FrequencyPenalty + p.PresencePenalty
	}
}

// byLogitDesc orders candidates by logit, highest first; equal logits keep the lower id
// first (llama.cpp's sort leaves that order unspecified).
func byLogitDesc(a, b candidate) int {
	if c := cmp.Compare(b.logit, a.logit); c != 0 {
		return c
	}
	return cmp.Compare(a.id, b.id)
}

func topK(c []candidate, k int) []candidate {
	k = min(k, len(c))
	partialSort(c, k)
	return c[:k]
}

// partialSort moves the k best candidates (byLogitDesc) to c[:k], sorted, in O(n log k):
// a vocabulary has 150k entries and only the head matters.
func partialSort(c []candidate, k int) {
	if k <= 0 {
		return
	}
	// c[:k] is a heap whose root is the worst of the best k seen so far.
	worse := func(i, j int) bool { return byLogitDesc(c[i], c[j]) > 0 }
	down := func(i int) {
		for {
			w := i
			if l := 2*i + 1; l < k && worse(l, w) {
				w = l
			}
			if r := 2*i + 2; r < k && worse(r, w) {
				w = r
			}
			if w == i {
				return
			}
			c[i], c[w] = c[w], c[i]
			i = w
		}
	}
	for i := k/2 - 1; i >= 0; i-- {
		down(i)
	}
	for i := k; i < len(c); i++ {
		// Most candidates lose to the root outright; test that cheaply first.
		if c[i].logit < c[0].logit {
			continue
		}
		if byLogitDesc(c[i], c[0]) < 0 {
			c[0], c[i] = c[i], c[0]
			down(0)
		}
	}
	slices.SortFunc(c[:k], byLogitDesc)
}

// maxLogit is the largest logit among the candidates.
func maxLogit(c []candidate) float32 {
	m := c[0].logit
	for _, x := range c[1:] {
		m = max(m, x.logit)
	}
	return m
}

// softmaxProbs fills p with the softmax of the logits, summed in float32 as
// llama_sampler_softmax_impl does (not ggml's softmax op: the sampler has its own).
func softmaxProbs(c []candidate) {
	maxL := maxLogit(c)
	var sum float32
	for i := range c {
		c[i].p = float32(math.Exp(float64(c[i].logit - maxL)))
		sum += c[i].p
	}
	for i := range c {
		c[i].p /= sum
	}
}

// topP keeps the smallest prefix (by probability) whose cumulative probability reaches p,
// and at least minKeep candidates.
func topP(c []candidate, p float32, minKeep int, sorted bool) ([]candidate, bool) {
	softmaxProbs(c)
	// Like llama.cpp, try the best 256 first and sort everything only if they are not enough.
	head := len(c)
	if !sorted {
		head = min(256, len(c))
		partialSort(c, head)
	}
	var cum float32
	for i := range c {
		if i == head {
			slices.SortFunc(c[head:], byLogitDesc)
		}
		cum += c[i].p
		if cum >= p && i+1 >= minKeep {
			return c[:i+1], true
		}
	}
	return c, true
}

// minP keeps the candidates whose probability is at least p times the largest one (compared
// on logits: logit >= max + ln p), and at least minKeep. Unsorted candidates are filtered in
// place, keeping their order, as llama.cpp does; the order matters to the final draw.
func minP(c []candidate, p float32, minKeep int, sorted bool) []candidate {
	lnP := float32(math.Log(float64(p)))
	if !sorted {
		maxL := maxLogit(c)
		n := 0
		for _, x := range c {
			if x.logit >= maxL+lnP {
				n++
			}
		}
		if n >= minKeep { // n >= 1: the maximum always passes
			kept := c[:0]
			for _, x := range c {
				if x.logit >= maxL+lnP {
					kept = append(kept, x) // compacts in place: writes never pass reads
				}
			}
			return kept
		}
		slices.SortFunc(c, byLogitDesc)
	}
	minLogit := c[0].logit + lnP
	i := 1
	for ; i < len(c); i++ {
		if c[i].logit < minLogit && i >= minKeep {
			break
		}
	}
	return c[:i]
}

// temperature divides the logits, or for t <= 0 keeps only the first maximum.
func temperature(c []candidate, t float32) {
	if t > 0 {
		for i := range c {
			c[i].logit /= t
		}
		return
	}
	best := 0
	for i := 1; i < len(c); i++ {
		if c[i].logit > c[best].logit {
			c[best].logit = float32(math.Inf(-1))
			best = i
		} else {
			c[i].logit = float32(math.Inf(-1))
		}
	}
}

// draw samples from the softmax of the remaining logits exactly as llama.cpp's dist sampler:
// probabilities summed in float64, one uniform draw, first candidate whose running sum
// reaches draw·sum.
func (s *Sampler) draw(c []candidate) int32 {
	r := s.rng.uniform()
	if len(c) == 1 {
		return c[0].id
	}
	maxL := maxLogit(c)
	var sum float64
	for i := range c {
		c[i].p = float32(math.Exp(float64(c[i].logit - maxL)))
		sum += float64(c[i].p)
	}
	target := sum * r
	var run float64
	for i := range c {
		run += float64(c[i].p)
		if run >= target {
			return c[i].id
		}
	}
	return c[len(c)-1].id
}

// mt19937 is the 32-bit Mersenne Twister, as std::mt19937.
type mt19937 struct {
	state [624]uint32
	index int
}

func (m *mt19937) seed(s uint32) {
	m.state[0] = s
	for i := 1; i < len(m.state); i++ {
		prev := m.state[i-1]
		m.state[i] = 1812433253*(prev^(prev>>30)) + uint32(i)
	}
	m.index = len(m.state)
}

func (m *mt19937) next() uint32 {
	const n, mid = 624, 397
	if m.index >= n {
		for i := range n {
			y := m.state[i]&0x80000000 | m.state[(i+1)%n]&0x7FFFFFFF
			v := m.state[(i+mid)%n] ^ y>>1
			if y&1 != 0 {
				v ^= 0x9908B0DF
			}
			m.state[i] = v
		}
		m.index = 0
	}
	y := m.state[m.index]
	m.index++
	y ^= y >> 11
	y ^= y << 7 & 0x9D2C5680
	y ^= y << 15 & 0xEFC60000
	y ^= y >> 18
	return y
}

// uniform is libstdc++'s uniform_real_distribution<double>(0, 1) over mt19937: two 32-bit
// draws combined (generate_canonical with 53 bits), kept below 1.
func (m *mt19937) uniform() float64 {
	lo := float64(m.next())
	hi := float64(m.next())
	r := (lo + hi*4294967296.0) / 18446744073709551616.0
	if r >= 1 {
		r = math.Nextafter(1, 0)
	}
	return r
}
