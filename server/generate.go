package server

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/moerun/moerun/moe"
)

// errQueueFull is returned by acquire when every slot is busy and the queue is full.
var errQueueFull = errors.New("server busy")

// errShuttingDown ends the generations Shutdown could not wait for, and refuses new ones.
var errShuttingDown = errors.New("the server is shutting down")

// slot is one sequence the server can decode: a context of the slot size, and the tokens
// whose keys and values it holds (the previous request's prompt and the tokens generated
// and evaluated after it), which the next request may reuse.
type slot struct {
	ctx      *moe.Context
	tokens   []int32 // len(tokens) == ctx.Len()
	lastUsed int64   // when the slot was last released, by the pool's clock
}

// slotPool holds the idle slots. A request takes the one whose cached tokens share the
// longest prefix with its prompt, if that prefix is more than the similarity threshold's
// share of the prompt (llama-server's --slot-prompt-similarity), else the least recently
// used one.
type slotPool struct {
	mu         sync.Mutex
	idle       []*slot
	clock      int64
	ready      chan struct{} // one token per idle slot
	similarity float32
}

func newSlotPool(slots int, similarity float32) *slotPool {
	return &slotPool{ready: make(chan struct{}, slots), similarity: similarity}
}

// idleSlots is the number of idle slots.
func (p *slotPool) idleSlots() int { return len(p.ready) }

// put makes a slot available.
func (p *slotPool) put(sl *slot) {
	p.mu.Lock()
	p.clock++
	sl.lastUsed = p.clock
	p.idle = append(p.idle, sl)
	p.mu.Unlock()
	p.ready <- struct{}{}
}

// take removes the best idle slot for prompt; the caller holds a token from ready.
func (p *slotPool) take(prompt []int32) *slot {
	p.mu.Lock()
	defer p.mu.Unlock()
	best, bestSim := -1, float32(0)
	if p.similarity > 0 && len(prompt) > 0 {
		for i, sl := range p.idle {
			if len(sl.tokens) == 0 {
				continue
			}
			sim := float32(commonPrefix(sl.tokens, prompt)) / float32(len(prompt))
			if sim > bestSim && sim > p.similarity {
				best, bestSim = i, sim
			}
		}
	}
	if best < 0 {
		for i, sl := range p.idle {
			if best < 0 || sl.lastUsed < p.idle[best].lastUsed {
				best = i
			}
		}
	}
	sl := p.idle[best]
	p.idle = slices.Delete(p.idle, best, best+1)
	return sl
}

// commonPrefix is the length of the longest common prefix of a and b.
func commonPrefix(a, b []int32) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// acquire takes the best free slot for prompt, waiting in the bounded queue if none is
// free; it gives up when ctx ends (the client left) or at once when the queue is full.
func (s *Server) acquire(ctx context.Context, prompt []int32) (*slot, error) {
	select {
	case <-s.pool.ready:
		return s.pool.take(prompt), nil
	default:
	}
	if s.queued.Add(1) > int64(s.queueSize) {
		s.queued.Add(-1)
		return nil, errQueueFull
	}
	defer s.queued.Add(-1)
	select {
	case <-s.pool.ready:
		return s.pool.take(prompt), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.abort:
		return nil, errShuttingDown
	}
}

func (s *Server) release(sl *slot) { s.pool.put(sl) }

// reuse prepares a slot for prompt: it keeps the cached tokens the prompt starts with
// (all but the prompt's last token, whose logits the generation needs) where the context
// can keep them, and forgets the rest. It returns how many prompt tokens need no
// evaluation.
func (sl *slot) reuse(prompt []int32, cache bool) int {
	n := 0
	if cache {
		n = min(commonPrefix(sl.tokens, prompt), len(prompt)-1)
	}
	if n <= 0 || !sl.ctx.Truncate(n) {
		// A model with recurrent layers keeps its state only where the cache ends.
		n = 0
		sl.ctx.Reset()
	}
	sl.tokens = sl.tokens[:n]
	return n
}

// eval runs one forward pass. Forward passes of all slots are serialized: the model's
// backends and the routing statistics the slots share are not safe for concurrent use,
// and on the CPU one pass already uses every thread of the pool. Slots interleave token by
// token (and ubatch by ubatch while evaluating prompts).
// The slot's cached tokens follow: after a failure its context is reset, as the layers a
// failed pass reached may hold part of it.
func (s *Server) eval(sl *slot, tokens []int32) ([]float32, error) {
	s.forward.Lock()
	defer s.forward.Unlock()
	logits, err := sl.ctx.Eval(tokens, false)
	if err != nil {
		sl.ctx.Reset()
		sl.tokens = sl.tokens[:0]
		return nil, err
	}
	sl.tokens = append(sl.tokens, tokens...)
	return logits, nil
}

// tokenLogprob is one generated token's log-probability and the most likely alternatives,
// from the model's raw distribution (before the sampler's penalties and truncation), as
// llama-server reports them.
type tokenLogprob struct {
	id      int32
	logprob float32
	top     []candidateLogprob
}

type candidateLogprob struct {
	id      int32
	logprob float32
}

// result is what a generation produced.
type result struct {
	text             string
	finishReason     string // "stop" (end of text or a stop sequence) or "length"
	promptTokens     int
	cachedTokens     int // of the prompt's, those the slot's cache already held
	completionTokens int
	logprobs         []tokenLogprob
	promptTime       time.Duration
	firstToken       time.Duration // from the start of the request's evaluation
	genTime          time.Duration
}

// emitFunc receives generated text as soon as it is final (stop sequences can no longer
// remove it), with the log-probabilities of the tokens that produced it.
type emitFunc func(text string, logprobs []tokenLogprob) error

// stopped is why a generation must stop now: its client left (ctx's error) or Shutdown
// ends it (errShuttingDown); nil to go on.
func (s *Server) stopped(ctx context.Context) error {
	select {
	case <-s.abort:
		return errShuttingDown
	default:
	}
	return ctx.Err()
}

// generate runs a job on a slot: evaluates the prompt and samples until max_tokens, an
// end-of-generation token, a stop sequence or a full slot. It stops as soon as ctx ends or
// Shutdown ends it, checked between tokens and between prompt ubatches.
func (s *Server) generate(ctx context.Context, sl *slot, j *job, emit emitFunc) (res result, err error) {
	res = result{promptTokens: len(j.prompt), finishReason: "length"}
	sampler, err := moe.NewSampler(j.sampler, s.entropy)
	if err != nil {
		return res, err
	}
	res.cachedTokens = sl.reuse(j.prompt, j.cachePrompt)
	start := time.Now()
	var logits []float32
	for chunk := range slices.Chunk(j.prompt[res.cachedTokens:], s.ubatch) {
		if err := s.stopped(ctx); err != nil {
			return res, err
		}
		if logits, err = s.eval(sl, chunk); err != nil {
			return res, err
		}
	}
	res.promptTime = time.Since(start)
	for _, t := range j.prompt {
		sampler.Accept(t)
	}

	genStart := time.Now()
	defer func() { res.genTime = time.Since(genStart) }()
	stream := s.vocab.NewStreamDecoder(false)
	stream.Preserve(j.preserved...)
	var text strings.Builder
	sent := 0 // bytes of text already emitted
	var pending []tokenLogprob
	stopped := false
	for j.maxTokens < 0 || res.completionTokens < j.maxTokens {
		if err := s.stopped(ctx); err != nil {
			return res, err
		}
		id := sampler.Sample(logits)
		sampler.Accept(id)
		if !j.ignoreEOS && s.vocab.IsEOG(id) {
			res.finishReason = "stop"
			break
		}
		res.completionTokens++
		if res.completionTokens == 1 {
			res.firstToken = time.Since(start)
		}
		if j.logprobs {
			lp := logprobOf(logits, id, j.topLogprobs)
			pending = append(pending, lp)
			res.logprobs = append(res.logprobs, lp)
		}
		searchFrom := max(0, text.Len()-maxStopLen(j.stops))
		text.WriteString(stream.Add(id))
		if cut := findStop(text.String(), j.stops, searchFrom); cut >= 0 {
			res.text, res.finishReason, stopped = text.String()[:cut], "stop", true
			break
		}
		if safe := text.Len() - partialStop(text.String(), j.stops); safe > sent {
			if err := emit(text.String()[sent:safe], pending); err != nil {
				return res, err
			}
			sent, pending = safe, nil
		}
		if res.completionTokens == j.maxTokens || sl.ctx.Len() == sl.ctx.Size() {
			break // "length": the last token needs no evaluation
		}
		if logits, err = s.eval(sl, []int32{id}); err != nil {
			return res, err
		}
	}
	if !stopped {
		text.WriteString(stream.Flush())
		res.text = text.String()
	}
	if len(res.text) > sent || len(pending) > 0 {
		if err := emit(res.text[sent:], pending); err != nil {
			return res, err
		}
	}
	return res, nil
}

func maxStopLen(stops []string) int {
	n := 0
	for _, st := range stops {
		n = max(n, len(st))
	}
	return n
}

// findStop is the index in text of the earliest stop sequence found at or after from, or -1.
func findStop(text string, stops []string, from int) int {
	cut := -1
	for _, st := range stops {
		if i := strings.Index(text[from:], st); i >= 0 && (cut < 0 || from+i < cut) {
			cut = from + i
		}
	}
	return cut
}

// partialStop is the length of the longest end of text that begins a stop sequence: text
// that must be held back because the next tokens may complete the sequence.
func partialStop(text string, stops []string) int {
	held := 0
	for _, st := range stops {
		for n := min(len(st)-1, len(text)); n > held; n-- {
			if strings.HasSuffix(text, st[:n]) {
				held = n
				break
			}
		}
	}
	return held
}

// logprobOf computes the log-softmax of the raw logits for the chosen token and the top
// alternatives (the chosen one's rank among them as the model sees it).
func logprobOf(logits []float32, id int32, top int) tokenLogprob {
	maxL := float32(math.Inf(-1))
	for _, l := range logits {
		maxL = max(maxL, l)
	}
	var sum float64
	for _, l := range logits {
		sum += math.Exp(float64(l - maxL))
	}
	logZ := float64(maxL) + math.Log(sum)
	lp := func(i int32) float32 { return float32(float64(logits[i]) - logZ) }
	out := tokenLogprob{id: id, logprob: lp(id)}
	if top == 0 {
		return out
	}
	// A partial selection of the top few: vocabularies are large and top is at most 20.
	best := make([]candidateLogprob, 0, top+1)
	for i, l := range logits {
		if len(best) == top && l <= logits[best[top-1].id] {
			continue
		}
		at, _ := slices.BinarySearchFunc(best, l, func(c candidateLogprob, l float32) int {
			if logits[c.id] >= l { // equal logits keep the lower id first
				return -1
			}
			return 1
		})
		best = slices.Insert(best, at, candidateLogprob{id: int32(i)})
		if len(best) > top {
			best = best[:top]
		}
	}
	for k := range best {
		best[k].logprob = lp(best[k].id)
	}
	out.top = best
	return out
}
