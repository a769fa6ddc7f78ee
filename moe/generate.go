package moe

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// GenerateOptions steer a generation.
type GenerateOptions struct {
	// MaxTokens is how many tokens to generate (-n); a negative value means until an
	// end-of-generation token or until the context is full.
	MaxTokens int
	// Sampler picks each token; nil means greedy (the largest logit, the lowest id on
	// ties). The generation feeds it the prompt and every token for its penalties.
	Sampler *Sampler
	// IsEOG reports end-of-generation tokens, which stop generation without being
	// emitted; nil means none do (llama.cpp's --ignore-eos).
	IsEOG func(id int32) bool
	// PromptLogits, if set, receives the logits after the prompt (valid during the call).
	PromptLogits func(logits []float32) error
	// Token receives each generated token as soon as it is sampled, with the logits it
	// was sampled from (valid during the call). Returning StopGeneration ends the
	// generation without an error (a stop sequence); another error ends it with that
	// error.
	Token func(id int32, logits []float32) error
	// CheckpointAt lists context lengths inside the prompt at which Checkpoint is called,
	// between passes, with the context holding exactly that many positions (the prompt's
	// pieces are cut there): the server keeps a recurrent state there (Context.Checkpoint).
	// An error from Checkpoint ends the generation.
	CheckpointAt []int
	Checkpoint   func(c *Context) error
}

// StopGeneration is returned by a Token callback to end its generation normally.
var StopGeneration = errors.New("stop generation")

// GenerateStats are the counts and times of a generation, for the speeds llama.cpp prints.
type GenerateStats struct {
	PromptTokens int
	PromptTime   time.Duration // from the start to the prompt's logits
	Generated    int           // tokens emitted
	DecodeSteps  int           // single-token evaluations (Generated minus the last)
	DecodeTime   time.Duration // those evaluations and the sampling between them
}

// PromptSpeed and DecodeSpeed are in tokens per second (0 when nothing was timed).
func (s GenerateStats) PromptSpeed() float64 { return speed(s.PromptTokens, s.PromptTime) }
func (s GenerateStats) DecodeSpeed() float64 { return speed(s.DecodeSteps, s.DecodeTime) }

func speed(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// Generate evaluates the prompt at the context's next positions and then generates tokens
// one at a time, each sampled from the logits of the one before, until MaxTokens, an
// end-of-generation token, StopGeneration or another error from a callback, or a full
// context (an error wrapping ErrContextFull, returned with the statistics so far). It is
// the engine's loop with this one sequence, run in the caller's goroutine.
func (c *Context) Generate(prompt []int32, o GenerateOptions) (GenerateStats, error) {
	s := scheduler{eval: &c.own, batch: c.batch, ubatch: c.ubatch}
	g := s.add(context.Background(), c, prompt, o)
	for len(s.active) > 0 {
		s.step()
	}
	return g.Wait()
}

// Engine generates for several sequences at once, as llama-server's continuous batching
// does: each step takes one decode token of every sequence that is generating and, up to
// the batch (-b), prompt tokens of those still evaluating their prompts, and evaluates
// them in forward passes of at most a ubatch (-ub) each; then each sequence samples its
// next token with its own sampler and stop conditions. A sequence joins at the next step after Submit and leaves at the step it
// ends. The engine's goroutine runs while there is a sequence; the callbacks of
// GenerateOptions run on it, between forward passes, so they must be quick (a slow one
// delays every sequence) and must not call the engine.
type Engine struct {
	mu        sync.Mutex
	waiting   []*Generation // submitted, not yet in a step
	running   bool          // the goroutine stepping the scheduler is running
	gathering Gathering
	arrived   chan struct{} // a Submit's signal to a gathering engine
	s         scheduler     // owned by that goroutine
	stepMu    sync.Mutex    // held during each step; see Pause
}

// Gathering makes an idle engine wait, when a generation is submitted, for others
// submitted with it, so that their prompts are evaluated in one forward pass rather than
// the first alone and the rest a pass later, after the first's: clients that start
// together (a coding agent's parallel calls, a benchmark's streams) reach the engine a
// millisecond or two apart, and the prompts of a pass share its reading of the weights.
// The wait ends once Quiet has passed without a submission, at Max after it began (0:
// at Quiet, which submissions then do not extend), once Sequences generations wait (0:
// no such limit), or once their prompts fill a step (-b). The zero value does not wait,
// as llama-server does not. An engine that is running sequences never waits: a
// generation submitted then joins at the next step.
type Gathering struct {
	Quiet, Max time.Duration
	Sequences  int
}

// NewEngine makes an engine for contexts of m whose steps take at most batch tokens
// (-b; 0 means ubatch) and whose forward passes hold at most ubatch tokens (-ub), as
// ContextOptions' Batch and UBatch.
func NewEngine(m *Model, batch, ubatch int) (*Engine, error) {
	// The contexts check their sizes against theirs; no context is larger than this.
	batch, ubatch, err := batchSizes(batch, ubatch, 1<<31-1)
	if err != nil {
		return nil, err
	}
	return &Engine{arrived: make(chan struct{}, 1), s: scheduler{eval: m.NewBatch(), batch: batch, ubatch: ubatch}}, nil
}

// SetGathering sets how the engine, when idle, gathers generations submitted together;
// it holds from the next time the engine starts from idle.
func (e *Engine) SetGathering(g Gathering) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.gathering = g
}

// Submit starts generating for c from prompt, as Generate does: the prompt is evaluated
// at c's next positions. The generation ends as Generate's does, or when ctx ends (with
// context.Cause(ctx)). c must not be used elsewhere until the generation is done; after
// an error in a forward pass c is reset (a failed pass may leave a recurrent state
// half-updated).
func (e *Engine) Submit(ctx context.Context, c *Context, prompt []int32, o GenerateOptions) *Generation {
	g := newGeneration(ctx, c, prompt, o)
	if g.err != nil {
		return g
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.waiting = append(e.waiting, g)
	select {
	case e.arrived <- struct{}{}:
	default: // a signal is pending already
	}
	if !e.running {
		e.running = true
		go e.run()
	}
	return g
}

// run steps while there are sequences, taking in those submitted since the last step
// (having gathered them first if none was running).
func (e *Engine) run() {
	for {
		e.stepMu.Lock()
		if len(e.s.active) == 0 {
			e.gather()
		}
		e.mu.Lock()
		e.s.active = append(e.s.active, e.waiting...)
		clear(e.waiting)
		e.waiting = e.waiting[:0]
		if len(e.s.active) == 0 {
			e.running = false
			e.mu.Unlock()
			e.stepMu.Unlock()
			return
		}
		e.mu.Unlock()
		e.s.step()
		e.stepMu.Unlock()
	}
}

// gather waits for the generations submitted together with the first that is waiting, as
// e.gathering says.
func (e *Engine) gather() {
	e.mu.Lock()
	g := e.gathering
	e.mu.Unlock()
	if g.Quiet <= 0 {
		return
	}
	select {
	case <-e.arrived: // the submissions so far are counted below
	default:
	}
	longest := g.Max
	if longest <= 0 {
		longest = g.Quiet
	}
	end := time.Now().Add(longest)
	quiet := time.NewTimer(min(g.Quiet, longest))
	defer quiet.Stop()
	for !e.gathered(g.Sequences) {
		select {
		case <-e.arrived:
			quiet.Reset(min(g.Quiet, time.Until(end)))
		case <-quiet.C:
			return
		}
	}
}

// gathered reports whether the waiting generations end a gathering: none (the last
// sequences just ended, and the engine stops), sequences of them (where sequences > 0),
// or prompts that fill a step.
func (e *Engine) gathered(sequences int) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	tokens := 0
	for _, g := range e.waiting {
		tokens += len(g.pending)
	}
	n := len(e.waiting)
	return n == 0 || sequences > 0 && n >= sequences || tokens >= e.s.batch
}

// Pause waits until the engine is between steps and keeps it there until resume is
// called: while paused no forward pass runs, no generation joins, advances or ends.
func (e *Engine) Pause() (resume func()) {
	e.stepMu.Lock()
	return e.stepMu.Unlock
}

// Sizes are the most tokens of a step (-b) and of a forward pass (-ub), after -b capped
// -ub as in llama.cpp.
func (e *Engine) Sizes() (batch, ubatch int) { return e.s.batch, e.s.ubatch }

// Batches is how many forward passes the engine has run and how many tokens they held,
// from which the mean batch size follows.
func (e *Engine) Batches() (passes, tokens uint64) {
	return e.s.passes.Load(), e.s.tokens.Load()
}

// Close releases the engine's working memory. No generation may be running.
func (e *Engine) Close() error { return e.s.eval.Close() }

// Generation is one sequence of an engine.
type Generation struct {
	ctx     context.Context
	c       *Context
	prompt  []int32
	pending []int32 // prompt tokens not evaluated yet
	next    [1]int32
	o       GenerateOptions
	st      GenerateStats
	start   time.Time // of the prompt, then of the decoding
	started bool      // the decoding started
	err     error
	done    chan struct{}
}

func newGeneration(ctx context.Context, c *Context, prompt []int32, o GenerateOptions) *Generation {
	g := &Generation{ctx: ctx, c: c, prompt: prompt, pending: prompt, o: o, done: make(chan struct{}), start: time.Now()}
	g.st.PromptTokens = len(prompt)
	switch {
	case len(prompt) == 0:
		g.finish(errors.New("no tokens to evaluate"))
	default:
		if err := c.checkTokens(prompt); err != nil {
			g.finish(err)
		}
	}
	return g
}

// Done is closed when the generation has ended.
func (g *Generation) Done() <-chan struct{} { return g.done }

// Wait waits for the generation to end and returns its statistics and why it ended: nil
// for MaxTokens, an end-of-generation token or StopGeneration.
func (g *Generation) Wait() (GenerateStats, error) {
	<-g.done
	return g.st, g.err
}

// pieceLimit is how many prompt tokens g's next piece may take: up to the next checkpoint
// length, else the rest of the prompt.
func (g *Generation) pieceLimit() int {
	n := len(g.pending)
	for _, at := range g.o.CheckpointAt {
		if ahead := at - g.c.Len(); ahead > 0 && ahead < n {
			n = ahead
		}
	}
	return n
}

// checkpoint calls the Checkpoint callback where a piece ended at one of CheckpointAt; it
// reports whether g goes on.
func (g *Generation) checkpoint() bool {
	if g.o.Checkpoint == nil || !slices.Contains(g.o.CheckpointAt, g.c.Len()) {
		return true
	}
	if err := g.o.Checkpoint(g.c); err != nil {
		g.finish(err)
		return false
	}
	return true
}

// decoding reports whether the prompt has been evaluated: the next input is g.next.
func (g *Generation) decoding() bool { return len(g.pending) == 0 }

func (g *Generation) finish(err error) {
	select {
	case <-g.done:
		return // ended already (a callback panicked after ending it)
	default:
	}
	if g.started {
		g.st.DecodeTime = time.Since(g.start)
	}
	if errors.Is(err, StopGeneration) {
		err = nil
	}
	g.err = err
	close(g.done)
}

// promptDone is the end of g's prompt, whose logits are these: the sampler takes in the
// prompt and the decoding starts. It reports whether g goes on.
func (g *Generation) promptDone(logits []float32) bool {
	g.st.PromptTime = time.Since(g.start)
	if g.o.Sampler != nil {
		for _, t := range g.prompt {
			g.o.Sampler.Accept(t)
		}
	}
	if g.o.PromptLogits != nil {
		if err := g.o.PromptLogits(logits); err != nil {
			g.finish(err)
			return false
		}
	}
	g.start, g.started = time.Now(), true
	return true
}

// sample picks the token after logits and emits it; it reports whether g goes on, with
// that token to evaluate next.
func (g *Generation) sample(logits []float32) bool {
	o := &g.o
	if o.MaxTokens >= 0 && g.st.Generated >= o.MaxTokens {
		g.finish(nil)
		return false
	}
	var id int32
	if o.Sampler == nil {
		id = Greedy(logits)
	} else {
		var err error
		if id, err = o.Sampler.Next(logits); err != nil {
			g.finish(err)
			return false
		}
		o.Sampler.Accept(id)
	}
	if o.IsEOG != nil && o.IsEOG(id) {
		g.finish(nil)
		return false
	}
	g.st.Generated++
	if o.Token != nil {
		if err := o.Token(id, logits); err != nil {
			g.finish(err)
			return false
		}
	}
	switch {
	case g.st.Generated == o.MaxTokens:
		g.finish(nil) // the last token needs no evaluation
		return false
	case g.c.Len() == g.c.Size():
		g.finish(fmt.Errorf("%w after %d generated tokens (%d positions; raise -c)", ErrContextFull, g.st.Generated, g.c.Size()))
		return false
	}
	g.next[0] = id
	return true
}

// scheduler builds each step's batch from the active generations and runs it, as
// llama-server's update_slots builds its batch and llama_decode splits it into ubatches.
type scheduler struct {
	eval   *Batch
	batch  int // the most tokens of a step (-b), bar one decode token per sequence
	ubatch int // the most tokens of a forward pass (-ub)
	active []*Generation

	seqs   []BatchSeq    // this step's pieces
	inStep []*Generation // whose piece each of seqs is
	pass   []BatchSeq    // the forward pass being run, a ubatch of the step
	inPass []*Generation
	passes atomic.Uint64
	tokens atomic.Uint64
}

// add makes a generation active (Generate's own, without the engine).
func (s *scheduler) add(ctx context.Context, c *Context, prompt []int32, o GenerateOptions) *Generation {
	g := newGeneration(ctx, c, prompt, o)
	if g.err == nil {
		s.active = append(s.active, g)
	}
	return g
}

// step ends the generations whose context ended, evaluates the others' next tokens and
// samples, and keeps the generations that go on. As in llama-server, every generating
// sequence's token is in the step, and prompt pieces fill what is left of the batch:
// with fewer decode tokens than -b, a long prompt no longer holds back the streams beside
// it for more than a batch. Prompt pieces come first, decode tokens after them, so that
// the rows whose logits are wanted are mostly one run at the end of the last pass.
func (s *scheduler) step() {
	s.seqs, s.inStep = s.seqs[:0], s.inStep[:0]
	decoders := 0
	for _, g := range s.active {
		if g.ctx.Err() != nil {
			g.finish(context.Cause(g.ctx))
		} else if g.decoding() {
			decoders++
		}
	}
	budget := s.batch - decoders
	for _, g := range s.active {
		if g.ctx.Err() == nil && !g.decoding() && budget > 0 {
			n := min(budget, g.pieceLimit())
			s.seqs = append(s.seqs, BatchSeq{Context: g.c, Tokens: g.pending[:n], Logits: n == len(g.pending)})
			s.inStep = append(s.inStep, g)
			budget -= n
		}
	}
	for _, g := range s.active {
		if g.ctx.Err() == nil && g.decoding() {
			s.seqs = append(s.seqs, BatchSeq{Context: g.c, Tokens: g.next[:], Logits: true})
			s.inStep = append(s.inStep, g)
		}
	}
	s.run()
	kept := s.active[:0]
	for _, g := range s.active {
		select {
		case <-g.done:
		default:
			kept = append(kept, g)
		}
	}
	clear(s.active[len(kept):])
	s.active = kept
}

// run evaluates the step's pieces in forward passes of at most a ubatch, cutting a piece
// where a pass is full. Each generation advances right after the pass that holds the end
// of its piece (the part before only moves its prompt on), so its token is sampled as
// soon as its logits exist. After a failed pass the rest of the step is left to the next.
func (s *scheduler) run() {
	k, done := 0, 0 // s.seqs[k].Tokens[done:] is what is left to evaluate
	for k < len(s.seqs) {
		s.pass, s.inPass = s.pass[:0], s.inPass[:0]
		for room := s.ubatch; k < len(s.seqs) && room > 0; {
			q := s.seqs[k]
			n := min(room, len(q.Tokens)-done)
			end := done+n == len(q.Tokens)
			s.pass = append(s.pass, BatchSeq{Context: q.Context, Tokens: q.Tokens[done : done+n], Logits: q.Logits && end})
			s.inPass = append(s.inPass, s.inStep[k])
			room -= n
			if done += n; end {
				k, done = k+1, 0
			}
		}
		if !s.runPass() {
			return
		}
	}
}

// runPass evaluates s.pass and advances its generations. It reports whether the pass
// succeeded; if not, the pass's generations end with its error.
func (s *scheduler) runPass() bool {
	tokens := 0
	for _, q := range s.pass {
		tokens += len(q.Tokens)
	}
	s.passes.Add(1)
	s.tokens.Add(uint64(tokens))
	if err := s.evalPass(); err != nil {
		for _, g := range s.inPass {
			g.c.Reset()
			g.finish(err)
		}
		return false
	}
	for k, g := range s.inPass {
		s.advance(k, g)
	}
	return true
}

// advance takes the kth piece of the pass, g's: more of its prompt, the end of its
// prompt (with its logits), or the next token to sample. A panic here (in a callback of
// g's) ends g with an error rather than the process.
func (s *scheduler) advance(k int, g *Generation) {
	defer func() {
		if r := recover(); r != nil {
			g.finish(fmt.Errorf("generation: internal error: %v", r))
		}
	}()
	if !g.decoding() {
		g.pending = g.pending[len(s.pass[k].Tokens):]
		if !g.checkpoint() || !g.decoding() || !g.promptDone(s.eval.Logits(k)) {
			return
		}
	} else {
		g.st.DecodeSteps++
	}
	g.sample(s.eval.Logits(k))
}

// evalPass runs the pass. A panic in it (a kernel's bug, or a mapping that went away
// under it) becomes the error of the pass's generations: passes run on the engine's
// goroutine, where nothing else would recover it, and one bad pass must not end a server
// that has other work.
func (s *scheduler) evalPass() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("forward pass: internal error: %v", r)
		}
	}()
	return s.eval.Eval(s.pass)
}
