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
	id          int
	ctx         *moe.Context
	tokens      []int32 // len(tokens) == ctx.Len()
	lastUsed    int64   // when the slot was last released, by the pool's clock
	checkpoints []slotCheckpoint

	mu    sync.Mutex // guards state, which GET /slots reads while requests run
	state slotState
}

// slotState is what GET /slots reports of a slot, updated as a request takes it and as its
// generation ends.
type slotState struct {
	processing  bool
	task        int64 // the last request's number; 0 before the first
	promptN     int   // its prompt tokens
	processed   int   // of them, those evaluated
	cached      int   // of them, those the slot's cache held
	generated   int   // tokens it generated
	checkpoints int   // checkpoints the slot keeps after it
}

// setState updates what GET /slots reports.
func (sl *slot) setState(update func(*slotState)) {
	sl.mu.Lock()
	update(&sl.state)
	sl.mu.Unlock()
}

// report is the slot as llama-server's GET /slots writes one (its fields that moerun has).
func (sl *slot) report(nCtx int) map[string]any {
	sl.mu.Lock()
	st := sl.state
	sl.mu.Unlock()
	r := map[string]any{"id": sl.id, "n_ctx": nCtx, "speculative": false, "is_processing": st.processing}
	if st.task > 0 {
		r["id_task"] = st.task
		r["n_prompt_tokens"] = st.promptN
		r["n_prompt_tokens_processed"] = st.processed
		r["n_prompt_tokens_cache"] = st.cached
		r["next_token"] = []any{map[string]any{"has_next_token": st.processing, "n_decoded": st.generated}}
		r["checkpoints"] = st.checkpoints
	}
	return r
}

// slotCheckpoint is a checkpoint the slot keeps (Server.checkpoints): the state its
// context cannot go back to by itself (a recurrent state, a sliding-window ring), with the
// request that took it.
type slotCheckpoint struct {
	*moe.Checkpoint
	request int64
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
	case <-s.abort.Done():
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
	if n > 0 && !sl.ctx.Truncate(n) {
		// A model with recurrent layers keeps its state only where the cache ends, a
		// sliding-window layer's ring only the last positions, and either where the slot
		// kept a checkpoint: the latest within the shared prefix. Without one the whole
		// prompt is evaluated again, as llama-server does.
		n = sl.restore(n)
	}
	if n <= 0 {
		n = 0
		sl.ctx.Reset()
	}
	sl.tokens = sl.tokens[:n]
	// A checkpoint past the kept prefix holds a state of tokens about to be replaced.
	sl.checkpoints = slices.DeleteFunc(sl.checkpoints, func(cp slotCheckpoint) bool { return cp.Len() > n })
	return n
}

// restore brings the slot's context back to its latest checkpoint at most n positions
// long and returns that length, or 0 when there is none (or it fails).
func (sl *slot) restore(n int) int {
	for i := len(sl.checkpoints) - 1; i >= 0; i-- {
		if cp := sl.checkpoints[i]; cp.Len() <= n && cp.Len() > 0 {
			if sl.ctx.Restore(cp.Checkpoint) != nil {
				return 0
			}
			return cp.Len()
		}
	}
	return 0
}

// checkpointsFor are the context lengths at which a request's prompt evaluation keeps
// checkpoints (llama-server's: 4 + -ub and 4 tokens before the prompt's end, so that the
// next turn of a conversation, whose template may write the end of this prompt otherwise,
// finds one), where the context needs them (a recurrent state, a sliding-window ring) and
// the slot keeps any.
func (s *Server) checkpointsFor(sl *slot, cached, promptLen int) []int {
	if s.checkpoints == 0 || !sl.ctx.NeedsCheckpoints() {
		return nil
	}
	var at []int
	for _, before := range []int{4 + s.ubatch, 4} {
		if n := promptLen - before; n > cached && n > 0 {
			at = append(at, n)
		}
	}
	return at
}

// keepCheckpoint takes a checkpoint of the slot's context for request, dropping as
// llama-server does first earlier requests' checkpoints that lie within the minimum step
// after the one before them, then the oldest beyond the slot's count.
func (s *Server) keepCheckpoint(sl *slot, request int64) error {
	cp, err := sl.ctx.Checkpoint()
	if err != nil {
		return err
	}
	last := -1
	sl.checkpoints = slices.DeleteFunc(sl.checkpoints, func(c slotCheckpoint) bool {
		if c.request != request && last >= 0 && c.Len() <= last+s.minStep {
			return true
		}
		last = c.Len()
		return false
	})
	if over := len(sl.checkpoints) + 1 - s.checkpoints; over > 0 {
		sl.checkpoints = slices.Delete(sl.checkpoints, 0, over)
	}
	sl.checkpoints = append(sl.checkpoints, slotCheckpoint{Checkpoint: cp, request: request})
	return nil
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

// generate runs a job on a slot through the engine: its prompt (past the prefix the slot
// already holds) is evaluated and its tokens decoded in the engine's shared batches, until
// max_tokens, an end-of-generation token, a stop sequence or a full slot. It ends as soon
// as ctx ends or Shutdown ends it, at the engine's next step. The text is cut and checked
// for stop sequences on the engine's goroutine, as each token comes; emit sends it to the
// client from this one, so that a slow client delays nobody else.
func (s *Server) generate(ctx context.Context, sl *slot, j *job, emit emitFunc) (res result, err error) {
	res = result{promptTokens: len(j.prompt), finishReason: "length"}
	sampler, err := moe.NewSampler(j.sampler, s.entropy)
	if err != nil {
		return res, err
	}
	var constraint moe.Constraint
	if j.grammar != nil {
		open, close, inReasoning := s.reasoningTags(j)
		gc := newGrammarConstraint(j.grammar, s.tokenTexts(), open, close, inReasoning, j.trigger)
		// Every way out below waits for the engine to be done with the generation.
		defer gc.m.Release()
		constraint = gc
	}
	b := s.budgetOf(j)
	if b != nil {
		if constraint != nil {
			constraint = bothConstraints{budget: b, then: constraint}
		} else {
			constraint = b
		}
	}
	if j.id != "" {
		defer s.live.add(j.id, liveCompletion{control: j.control, budget: b})()
	}
	if constraint != nil {
		sampler.Constrain(constraint)
	}
	res.cachedTokens = sl.reuse(j.prompt, j.cachePrompt)
	for _, t := range j.prompt[:res.cachedTokens] {
		sampler.Accept(t) // the engine feeds it the rest of the prompt
	}
	gctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer context.AfterFunc(s.abort, func() { cancel(errShuttingDown) })()

	start := time.Now()
	stream := s.vocab.NewStreamDecoder(false)
	stream.Preserve(j.preserved...)
	var (
		text      strings.Builder
		sent      int // bytes of text already handed to out
		pending   []tokenLogprob
		stopped   bool
		generated []int32
		out       outbox
	)
	out.ready = make(chan struct{}, 1)
	o := moe.GenerateOptions{MaxTokens: j.maxTokens, Sampler: sampler, Token: func(id int32, logits []float32) error {
		generated = append(generated, id)
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
			return moe.StopGeneration
		}
		if safe := text.Len() - partialStop(text.String(), j.stops); safe > sent {
			out.put(text.String()[sent:safe], pending)
			sent, pending = safe, nil
		}
		return nil
	}}
	if !j.ignoreEOS {
		o.IsEOG = s.vocab.IsEOG
	}
	if at := s.checkpointsFor(sl, res.cachedTokens, len(j.prompt)); len(at) > 0 {
		request := s.requests.Add(1)
		o.CheckpointAt = at
		o.Checkpoint = func(*moe.Context) error { return s.keepCheckpoint(sl, request) }
	}
	gen := s.engine.Submit(gctx, sl.ctx, j.prompt[res.cachedTokens:], o)
	var emitErr error // the client could not be written to: it left
	for done := false; !done; {
		select {
		case <-out.ready:
		case <-gen.Done():
			done = true
		}
		for _, p := range out.take() {
			if emitErr == nil {
				if emitErr = emit(p.text, p.logprobs); emitErr != nil {
					cancel(emitErr)
				}
			}
		}
	}
	st, err := gen.Wait()
	// The slot holds what was evaluated: the prompt, then the generated tokens but the
	// last (nothing after a failed pass, which resets the context).
	sl.tokens = append(append(sl.tokens, j.prompt[res.cachedTokens:]...), generated...)[:sl.ctx.Len()]
	res.promptTime, res.genTime = st.PromptTime, st.DecodeTime
	switch {
	case emitErr != nil:
		return res, emitErr
	case errors.Is(err, moe.ErrContextFull) && res.completionTokens > 0:
		// "length": the slot is full
	case err != nil:
		return res, err
	case !stopped && res.completionTokens != j.maxTokens:
		res.finishReason = "stop" // an end-of-generation token
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

// outbox carries text from the engine's goroutine, where tokens are cut into text, to the
// request's, which sends it: put never waits, and ready (capacity one) says there is some.
type outbox struct {
	mu     sync.Mutex
	pieces []piece
	ready  chan struct{}
}

type piece struct {
	text     string
	logprobs []tokenLogprob
}

func (o *outbox) put(text string, lps []tokenLogprob) {
	o.mu.Lock()
	o.pieces = append(o.pieces, piece{text, lps})
	o.mu.Unlock()
	select {
	case o.ready <- struct{}{}:
	default:
	}
}

// take removes and returns the pieces put so far.
func (o *outbox) take() []piece {
	o.mu.Lock()
	defer o.mu.Unlock()
	p := o.pieces
	o.pieces = nil
	return p
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

// budgetOf is a chat job's reasoning budget, nil when it has none (no limit and no
// reasoning_control) or the model writes no reasoning: the family's reasoning tags as
// llama.cpp's chat formats give them (gpt-oss's analysis channel; <think> and </think>, and
// also <tool_call> for Qwen3-Coder's XML calls, which may follow the reasoning without
// closing it).
func (s *Server) budgetOf(j *job) *reasoningBudget {
	if (j.budget < 0 && !j.control) || j.promptText == "" {
		return nil
	}
	var start string
	var ends []string
	switch {
	case s.harmony:
		start, ends = harmonyAnalysis, []string{harmonyEndTag}
	case s.syntax.thinkOpen != "":
		start, ends = s.syntax.thinkOpen, []string{s.syntax.thinkClose}
		if s.syntax.form == xmlForm {
			ends = append(ends, s.syntax.callOpen)
		}
	default:
		return nil
	}
	tokens := func(text string) []int32 { return s.vocab.Encode(text, false, true) }
	endTokens := make([][]int32, len(ends))
	for i, e := range ends {
		endTokens[i] = tokens(e)
	}
	forced := append(tokens(j.budgetMsg), endTokens[0]...)
	piece := func(t int32) string { return s.vocab.Piece(t, false) }
	return newReasoningBudget(j.budget, tokens(start), endTokens, forced, piece, !s.harmony && j.thinking)
}

// reasoningTags are what a grammar-constrained chat answer may be preceded by: the family's
// reasoning block (open and close tags; inReasoning when the prompt opened it), or for
// gpt-oss every channel before the final one (a forced call's grammar has them itself). A
// completion has none: the grammar applies from the first token, as on llama-server's
// /completion.
func (s *Server) reasoningTags(j *job) (open, close string, inReasoning bool) {
	switch {
	case j.promptText == "":
		return "", "", false
	case s.harmony && j.forcedCall:
		return "", "", false // the call's grammar has the analysis message in it
	case s.harmony:
		return "", harmonyFinal, true
	}
	return s.syntax.thinkOpen, s.syntax.thinkClose, j.thinking
}
