// Package server is moerun's OpenAI-compatible HTTP API: chat and text completions with
// server-sent-event streaming, models, health, Prometheus metrics, and llama-server's
// tokenize/detokenize, over a fixed set of slots (one sequence each) and a bounded queue.
package server

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/moerun/moerun/internal/mmap"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/moerun/moerun/moe"
	"github.com/moerun/moerun/tokenizer"
)

// Config is what New needs.
type Config struct {
	Model *moe.Model
	Vocab *tokenizer.Vocab
	// Name is the model's id in /v1/models and in responses.
	Name string
	// Slots is how many requests are decoded at once (-np), each in its own context.
	Slots int
	// Context sizes each slot's context: Size is the slot's share of -c. Stats is set by
	// New (one recorder shared by the slots, read by /metrics).
	Context moe.ContextOptions
	// Sampling are the sampling parameters where a request gives none (llama-server's
	// --temp, --top-k, … ); the zero value means moe.DefaultSampler.
	Sampling moe.SamplerParams
	// MaxTokens is how many tokens a request generates when it does not say (-n); 0 means
	// -1, until an end-of-generation token or a full slot.
	MaxTokens int
	// QueueSize is how many requests may wait for a slot; more are refused with 503.
	QueueSize int
	// NoPromptCache makes every request evaluate its whole prompt (--no-cache-prompt);
	// by default a slot keeps its KV cache and a request reuses the prefix it shares with
	// it, unless the request says "cache_prompt": false.
	NoPromptCache bool
	// ChatTemplate, when set, replaces the model's chat template (llama-server's
	// --chat-template and --chat-template-file; "chatml" names ChatML). It must render a
	// one-message conversation, or New fails; see tokenizer.ChooseChatTemplate for what
	// happens when the model's own template does not.
	ChatTemplate string
	// ChatTemplateKwargs are extra template variables for every chat request (llama-server's
	// --chat-template-kwargs): a JSON object as tokenizer.DecodeJSON returns it, or nil.
	ChatTemplateKwargs *tokenizer.Object
	// ReasoningFormat is llama-server's --reasoning-format: "none" leaves a model's
	// reasoning in the content; anything else ("auto", the default, "deepseek") returns it
	// as reasoning_content.
	ReasoningFormat string
	// ReasoningBudget is llama-server's --reasoning-budget: how many tokens a model's
	// reasoning may take before its closing tag is forced (0 closes it at once); nil is
	// llama-server's -1, no limit. A chat request's reasoning_budget_tokens (or
	// thinking_budget_tokens, or Anthropic's thinking.budget_tokens) goes over it.
	ReasoningBudget *int
	// ReasoningBudgetMessage is written before the forced closing tag
	// (--reasoning-budget-message); a request's reasoning_budget_message goes over it.
	ReasoningBudgetMessage string
	// SlotPromptSimilarity is how much of a prompt (0-1) a slot's cached tokens must
	// share for the request to take that slot rather than the least recently used one
	// (llama-server's -sps, whose default is 0.1); 0 always takes the least recently used.
	SlotPromptSimilarity float32
	// NoSlots turns GET /slots off (llama-server's --no-slots); by default it reports each
	// slot's state.
	NoSlots bool
	// ContextCheckpoints is how many copies of what a slot's context cannot go back to by
	// itself (a recurrent model's state, Qwen3.5's; the sliding-window rings of gpt-oss
	// without --swa-full) a slot keeps, taken a few tokens before each prompt's end as
	// llama-server's --ctx-checkpoints: a later prompt that shares only part of the slot's
	// tokens (a chat whose template rewrites the last answer) restarts from the latest one
	// within the shared prefix rather than from the start. 0 means llama-server's 32;
	// negative, none. Other models need none: their caches keep any prefix.
	ContextCheckpoints int
	// CheckpointMinStep is llama-server's --checkpoint-min-step: an older request's
	// checkpoint within this many tokens after an earlier one is dropped when a new one is
	// taken. 0 means llama-server's 8192; negative, no minimum.
	CheckpointMinStep int
	// APIKeys, when any are set, protect every route but /health: a request must send
	// one as "Authorization: Bearer KEY" (or, as llama-server also accepts, "X-Api-Key: KEY").
	APIKeys []string
	// MaxBodyBytes limits request bodies (413 beyond); 0 means 16 MiB.
	MaxBodyBytes int64
	// AccessLog receives one line per request; nil discards them.
	AccessLog io.Writer
	// Entropy draws seeds for requests without one; nil means moe.SystemSeed.
	Entropy func() uint32
	// GatherWindow makes an idle server wait, when a request reaches the engine, for the
	// requests that arrive with it, so that their prompts are evaluated in one forward
	// pass (moe.Gathering): each arrival restarts the window, and the wait ends after
	// four windows in all, or at once when every slot is taken. 0 starts each request at
	// once, as llama-server does.
	GatherWindow time.Duration
}

// Server serves the API. It is an http.Handler.
type Server struct {
	vocab *tokenizer.Vocab
	// cacheStats reads the model's expert cache's counters (--expert-cache) for /metrics.
	cacheStats func() moe.ExpertCacheStats
	template   *tokenizer.ChosenTemplate
	// harmony marks gpt-oss's template, which reads an assistant turn's reasoning from
	// "thinking" (see harmonyMessage).
	harmony bool
	// tokenTexts are the vocabulary's texts for grammar constraints, built at the first
	// constrained request (about 150 ms for 150,000 tokens).
	tokenTexts func() *tokenTexts
	allSlots   []*slot      // every slot, idle or not, for GET /slots
	noSlots    bool         // --no-slots: GET /slots is refused
	tasks      atomic.Int64 // numbers the requests that took a slot
	// syntax is how the model writes reasoning and tool calls (chatparse.go); reasoning
	// says whether reasoning is split from the content (--reasoning-format).
	syntax    chatSyntax
	reasoning bool
	// objectArgs says the template needs a call's arguments as an object, not the JSON
	// text clients send (see needsObjectArguments).
	objectArgs bool
	kwargs     *tokenizer.Object // --chat-template-kwargs
	name       string
	created    int64
	apiKeys    [][]byte
	maxBody    int64
	ubatch     int
	slotSize   int
	entropy    func() uint32
	sampling   moe.SamplerParams
	maxTokens  int
	budget     int // --reasoning-budget; -1: none
	budgetMsg  string
	grammars   grammarCache
	live       liveCompletions // the chat completions running, for the control route

	slots       int
	pool        *slotPool
	inFlight    chan struct{} // one token per request being prepared or generated (POST routes)
	queueSize   int
	promptCache bool
	checkpoints int // per slot; 0: none
	minStep     int
	requests    atomic.Int64 // numbers the requests, for the checkpoints' owners
	queued      atomic.Int64

	// engine runs the slots' generations, all of them in each forward pass.
	engine *moe.Engine
	stats  *moe.ExpertStats

	// Shutdown's state: generations running (holding or waiting for a slot), whether
	// Shutdown began, drained (closed when it began and none runs) and abort (closed when
	// the running ones must end).
	genMu    sync.Mutex
	broken   error // why the model can no longer serve (its file changed), nil while it can
	running  int
	closing  bool
	drained  chan struct{}
	abort    context.Context // cancelled when the running ones must end
	abortNow context.CancelFunc

	logMu     sync.Mutex
	accessLog io.Writer
	metrics   metrics
	routes    map[string]route
}

type route struct {
	method string
	handle func(w http.ResponseWriter, r *http.Request, log *requestLog) *apiError
	// anthropic routes answer errors in Anthropic's shape, and stream named events.
	anthropic bool
	// beside routes act on requests already running and answer at once: they take no
	// place among the slots and the queue, which may all be taken by the requests they
	// act on.
	beside bool
}

// outputParser splits a chat request's generated text, as it arrives, into reasoning,
// content and tool calls.
type outputParser interface {
	add(text string) parsed
	flush() parsed // the end of the text
}

// outputParser is the parser a chat request's output goes through, nil when none applies
// (the text is all content, as before): gpt-oss's harmony parser, or the family's reasoning
// tags unless --reasoning-format none and its tool-call syntax when the request gave tools.
// It sets j.preserved to the vocabulary's tokens for the tags it reads, which the
// detokenizer must then write out though they are control tokens (DeepSeek's call markers,
// harmony's), as llama-server preserves a format's tokens.
func (s *Server) outputParser(j *job) outputParser {
	if s.harmony {
		j.preserved = s.tokensOf(harmonyTags)
		p := newHarmonyParser(s.reasoning)
		// A call's arguments are its message as written, so a stream hands them over as
		// they come, grammar or not.
		p.stream = j.stream && j.tools
		return p
	}
	var syn chatSyntax
	if s.reasoning {
		syn.thinkOpen, syn.thinkClose = s.syntax.thinkOpen, s.syntax.thinkClose
	}
	if j.tools {
		syn.callOpen, syn.callClose = s.syntax.callOpen, s.syntax.callClose
		syn.sectionOpen, syn.sectionClose, syn.form = s.syntax.sectionOpen, s.syntax.sectionClose, s.syntax.form
	}
	if syn == (chatSyntax{}) {
		return nil
	}
	j.preserved = s.tokensOf(syn.tags())
	p := newChatParser(syn, j.thinking, j.argTypes)
	// A stream hands calls over as they are written where their grammar makes each call
	// begun a well-formed one.
	if j.stream && j.tools && j.grammar != nil && (j.forcedCall || j.trigger != "") {
		p.streaming = &streamedCall{}
	}
	return p
}

// tokensOf is the tokens whose text is one of texts (a text that is not one token is left
// out: it is written out anyway).
func (s *Server) tokensOf(texts []string) []int32 {
	var ids []int32
	for _, t := range texts {
		if id, ok := s.vocab.ID(t); ok {
			ids = append(ids, id)
		}
	}
	return ids
}

// useTemplate chooses the chat template (see Config.ChatTemplate) and the syntax its
// model writes reasoning and tool calls in.
func (s *Server) useTemplate(explicit string) error {
	v := s.vocab
	t, err := tokenizer.ChooseChatTemplate(explicit, v.ChatTemplate, v.Piece(v.BOS, true), v.Piece(v.EOS, true))
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	s.template = &t
	s.objectArgs = needsObjectArguments(&t)
	// gpt-oss's harmony format, recognised by its channel marker as llama.cpp does.
	s.harmony = strings.Contains(t.Source, harmonyChannelTag)
	if !s.harmony {
		s.syntax = syntaxOf(t.Source)
	}
	return nil
}

// New allocates the slots' contexts and returns the server.
func New(c Config) (*Server, error) {
	if c.Model == nil || c.Vocab == nil {
		return nil, errors.New("server: a model and its vocabulary are required")
	}
	if c.Slots < 1 {
		return nil, fmt.Errorf("server: %d slots: need at least one", c.Slots)
	}
	if c.QueueSize < 0 {
		return nil, fmt.Errorf("server: queue size %d is negative", c.QueueSize)
	}
	if sim := c.SlotPromptSimilarity; sim < 0 || sim > 1 || sim != sim {
		return nil, fmt.Errorf("server: slot prompt similarity %g: want 0 to 1", sim)
	}
	switch {
	case c.ContextCheckpoints == 0:
		c.ContextCheckpoints = 32
	case c.ContextCheckpoints < 0:
		c.ContextCheckpoints = 0
	}
	switch {
	case c.CheckpointMinStep == 0:
		c.CheckpointMinStep = 8192
	case c.CheckpointMinStep < 0:
		c.CheckpointMinStep = 0
	}
	s := &Server{
		vocab: c.Vocab, name: c.Name, created: time.Now().Unix(),
		maxBody: c.MaxBodyBytes, ubatch: c.Context.UBatch, entropy: c.Entropy,
		slots: c.Slots, queueSize: c.QueueSize, promptCache: !c.NoPromptCache,
		checkpoints: c.ContextCheckpoints, minStep: c.CheckpointMinStep, noSlots: c.NoSlots,
		drained: make(chan struct{}), inFlight: make(chan struct{}, c.Slots+c.QueueSize),
		reasoning: c.ReasoningFormat != "none", kwargs: c.ChatTemplateKwargs,
		stats: c.Model.NewExpertStats(), cacheStats: c.Model.ExpertCacheStats, accessLog: c.AccessLog, sampling: c.Sampling, maxTokens: c.MaxTokens,
	}
	s.abort, s.abortNow = context.WithCancel(context.Background())
	s.tokenTexts = sync.OnceValue(func() *tokenTexts { return newTokenTexts(c.Vocab) })
	if s.sampling == (moe.SamplerParams{}) {
		s.sampling = moe.DefaultSampler()
	}
	if err := s.sampling.Validate(); err != nil {
		return nil, fmt.Errorf("server: default sampling: %w", err)
	}
	if s.maxTokens == 0 {
		s.maxTokens = -1
	}
	s.budget, s.budgetMsg = -1, c.ReasoningBudgetMessage
	if b := c.ReasoningBudget; b != nil {
		if *b < -1 {
			return nil, fmt.Errorf("server: reasoning budget %d: want -1 (no limit) or a number of tokens", *b)
		}
		s.budget = *b
	}
	for _, k := range c.APIKeys {
		if strings.TrimSpace(k) == "" {
			return nil, errors.New("server: an empty API key would let anyone in")
		}
		s.apiKeys = append(s.apiKeys, []byte(k))
	}
	if s.maxBody <= 0 {
		s.maxBody = 16 << 20
	}
	if s.ubatch <= 0 {
		s.ubatch = 512
	}
	if s.entropy == nil {
		s.entropy = moe.SystemSeed
	}
	if s.accessLog == nil {
		s.accessLog = io.Discard
	}
	if c.GatherWindow < 0 {
		return nil, fmt.Errorf("server: gather window %v is negative", c.GatherWindow)
	}
	var err error
	if s.engine, err = moe.NewEngine(c.Model, c.Context.Batch, s.ubatch); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	_, s.ubatch = s.engine.Sizes() // -b caps -ub, and the checkpoints follow the passes
	s.engine.SetGathering(moe.Gathering{Quiet: c.GatherWindow, Max: 4 * c.GatherWindow, Sequences: c.Slots})
	s.pool = newSlotPool(c.Slots, c.SlotPromptSimilarity)
	if err := s.useTemplate(c.ChatTemplate); err != nil {
		return nil, err
	}
	opts := c.Context
	opts.Stats = s.stats
	for id := range c.Slots {
		ctx, err := c.Model.NewContext(opts)
		if err != nil {
			return nil, err
		}
		s.slotSize = ctx.Size()
		sl := &slot{id: id, ctx: ctx}
		s.allSlots = append(s.allSlots, sl)
		s.pool.put(sl)
	}
	s.routes = map[string]route{
		"/health":                      {method: http.MethodGet, handle: s.health},
		"/v1/health":                   {method: http.MethodGet, handle: s.health},
		"/v1/models":                   {method: http.MethodGet, handle: s.models},
		"/v1/chat/completions":         {method: http.MethodPost, handle: s.chat},
		"/v1/chat/completions/control": {method: http.MethodPost, handle: s.control, beside: true},
		"/v1/completions":              {method: http.MethodPost, handle: s.completions},
		"/tokenize":                    {method: http.MethodPost, handle: s.tokenize},
		"/apply-template":              {method: http.MethodPost, handle: s.applyTemplate},
		"/detokenize":                  {method: http.MethodPost, handle: s.detokenize},
		"/metrics":                     {method: http.MethodGet, handle: s.serveMetrics},
		"/props":                       {method: http.MethodGet, handle: s.props},
		"/slots":                       {method: http.MethodGet, handle: s.listSlots},
		"/v1/responses":                {method: http.MethodPost, handle: s.responses},
		"/v1/responses/input_tokens":   {method: http.MethodPost, handle: s.inputTokens},
		// Anthropic's Messages API.
		"/v1/messages":              {method: http.MethodPost, handle: s.messages, anthropic: true},
		"/v1/messages/count_tokens": {method: http.MethodPost, handle: s.countTokens, anthropic: true},
	}
	// llama-server's spellings without the version prefix.
	for _, p := range []string{"/models", "/chat/completions", "/chat/completions/control", "/completions"} {
		s.routes[p] = s.routes["/v1"+p]
	}
	return s, nil
}

// CacheBytes is the memory the slots' KV caches take on each device, by device name.
func (s *Server) CacheBytes() map[string]int64 {
	out := map[string]int64{}
	for _, sl := range s.allSlots {
		for dev, n := range sl.ctx.CacheBytes() {
			out[dev] += n
		}
	}
	return out
}

// SlotSize is the context each slot holds, in tokens.
func (s *Server) SlotSize() int { return s.slotSize }

// requestLog collects what the access log line and the metrics report about a request.
type requestLog struct {
	res      *result
	bodyRead bool // the handler ran and may have read the body
}

// statusWriter remembers the status and passes Flush through for streaming.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// enter admits a POST request while fewer than the slots and the queue's size are being
// served: decoding, rendering and tokenizing happen before a slot is taken, and must be
// bounded too. leave lets the next one in.
func (s *Server) enter() bool {
	select {
	case s.inFlight <- struct{}{}:
		return true
	default:
		return false
	}
}

func (s *Server) leave() { <-s.inFlight }

// bodyTimeout is how long a client may take to send a request's body.
const bodyTimeout = 30 * time.Second

// ServeHTTP checks the API key, routes a request, and logs and counts it. The key is
// checked first, from the headers alone: every route but /health needs it, unknown ones
// too (they would tell which routes exist). A request refused before its body is read
// closes the connection rather than wait for a body the client may withhold.
func (s *Server) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	start := time.Now()
	w := &statusWriter{ResponseWriter: rw}
	log := &requestLog{}
	path := r.URL.Path
	rt, found := s.routes[path]
	if !found {
		path = "other" // keep the metrics' label set bounded
	}
	var aerr *apiError
	switch {
	case path != "/health" && path != "/v1/health" && !s.authorized(r):
		aerr = &apiError{Status: http.StatusUnauthorized, Type: typeAuthentication, Message: "invalid or missing API key: send Authorization: Bearer KEY"}
	case !found:
		aerr = &apiError{Status: http.StatusNotFound, Type: typeNotFound, Message: fmt.Sprintf("no route %s %s", r.Method, r.URL.Path)}
	case r.Method != rt.method:
		w.Header().Set("Allow", rt.method)
		aerr = &apiError{Status: http.StatusMethodNotAllowed, Type: typeInvalidRequest, Message: fmt.Sprintf("%s wants %s, not %s", r.URL.Path, rt.method, r.Method)}
	case rt.method == http.MethodPost && !rt.beside && !s.enter():
		aerr = &apiError{Status: http.StatusServiceUnavailable, Type: typeUnavailable,
			Message: fmt.Sprintf("%d requests are already being served or queued (the slots and --queue-size); retry later", cap(s.inFlight))}
	default:
		if rt.method == http.MethodPost && !rt.beside {
			defer s.leave()
		}
		log.bodyRead = true
		// The body must arrive in time; a stream's writes are not limited.
		_ = http.NewResponseController(rw).SetReadDeadline(time.Now().Add(bodyTimeout))
		r.Body = http.MaxBytesReader(w, r.Body, s.maxBody)
		aerr = rt.handle(w, r, log)
	}
	if aerr != nil && !log.bodyRead {
		// Answered from the headers: do not read (or wait for) the body.
		w.Header().Set("Connection", "close")
	}
	switch {
	case aerr == nil:
	case rt.anthropic && w.status == 0:
		writeJSON(w, aerr.Status, anthropicError(aerr))
	case rt.anthropic: // the stream is under way: say so in it
		writeEvent(w, sseEvent{"error", anthropicError(aerr)})
	case w.status == 0:
		writeError(w, aerr)
	default: // the stream is under way: say so in it, and end it
		writeEvent(w, aerr.body())
		endStream(w)
	}
	s.logRequest(r, path, w.status, time.Since(start), log)
}

// authorized reports whether a request carries one of the API keys, as "Authorization:
// Bearer KEY" (the scheme is case-insensitive, RFC 7235) or "X-Api-Key: KEY"; a bare key in
// Authorization, without the scheme, is not accepted.
func (s *Server) authorized(r *http.Request) bool {
	if len(s.apiKeys) == 0 {
		return true
	}
	key := r.Header.Get("X-Api-Key")
	if auth := r.Header.Get("Authorization"); auth != "" {
		scheme, token, ok := strings.Cut(auth, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			return false
		}
		key = strings.TrimLeft(token, " ")
	}
	if key == "" {
		return false
	}
	ok := false
	for _, k := range s.apiKeys { // compare with every key, in constant time
		ok = subtle.ConstantTimeCompare([]byte(key), k) == 1 || ok
	}
	return ok
}

// logRequest writes the access-log line and counts the request.
func (s *Server) logRequest(r *http.Request, path string, status int, d time.Duration, log *requestLog) {
	if status == 0 { // the handler wrote nothing: the client went away first
		status = 499
	}
	s.metrics.request(path, status, log.res)
	line := fmt.Sprintf("%s %s %s %s %d %.1fms", time.Now().UTC().Format(time.RFC3339), r.RemoteAddr, r.Method, r.URL.Path, status, ms(d.Seconds()))
	if res := log.res; res != nil {
		t := timingsOf(*res)
		line += fmt.Sprintf(" prompt=%d cached=%d (%.1fms, %.1f t/s) completion=%d (%.1fms, %.1f t/s) ttft=%.1fms finish=%s",
			res.promptTokens, res.cachedTokens, t.PromptMS, t.PromptPerSecond, res.completionTokens, t.PredictedMS, t.PredictedPerSecond, ms(res.firstToken.Seconds()), res.finishReason)
	}
	s.logMu.Lock()
	fmt.Fprintln(s.accessLog, line)
	s.logMu.Unlock()
}

func (s *Server) health(w http.ResponseWriter, _ *http.Request, _ *requestLog) *apiError {
	s.genMu.Lock()
	broken := s.broken
	s.genMu.Unlock()
	if broken != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "error", "error": broken.Error()})
		return nil
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "slots_idle": s.pool.idleSlots(), "slots_processing": s.slots - s.pool.idleSlots()})
	return nil
}

func (s *Server) models(w http.ResponseWriter, _ *http.Request, _ *requestLog) *apiError {
	type model struct {
		ID      string         `json:"id"`
		Object  string         `json:"object"`
		Created int64          `json:"created"`
		OwnedBy string         `json:"owned_by"`
		Meta    map[string]any `json:"meta"`
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []model{{
		ID: s.name, Object: "model", Created: s.created, OwnedBy: "moerun",
		Meta: map[string]any{"n_vocab": s.vocab.Len(), "n_ctx_slot": s.slotSize, "n_slots": s.slots},
	}}})
	return nil
}

// props is llama-server's GET /props, which web UIs and clients read to learn the server's
// defaults and the chat template: the default generation settings, the slots, the model's
// name, its chat template and special tokens.
func (s *Server) props(w http.ResponseWriter, _ *http.Request, _ *requestLog) *apiError {
	p := s.sampling
	seed := int64(p.Seed)
	if p.Seed == moe.RandomSeed {
		seed = -1
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"default_generation_settings": map[string]any{"n_ctx": s.slotSize, "params": map[string]any{
			"n_predict": s.maxTokens, "temperature": p.Temperature, "top_k": p.TopK, "top_p": p.TopP, "min_p": p.MinP,
			"repeat_penalty": p.RepeatPenalty, "repeat_last_n": p.PenaltyLastN, "presence_penalty": p.PresencePenalty,
			"frequency_penalty": p.FrequencyPenalty, "seed": seed}},
		"total_slots":   s.slots,
		"model_alias":   s.name,
		"modalities":    map[string]bool{"vision": false, "audio": false},
		"chat_template": s.template.Source,
		"bos_token":     s.vocab.Piece(s.vocab.BOS, true),
		"eos_token":     s.vocab.Piece(s.vocab.EOS, true),
		"build_info":    "moerun",
	})
	return nil
}

// listSlots is llama-server's GET /slots: each slot's state. With ?fail_on_no_slot=1 it
// answers 503 when no slot is idle.
func (s *Server) listSlots(w http.ResponseWriter, r *http.Request, _ *requestLog) *apiError {
	if s.noSlots {
		return &apiError{Status: http.StatusNotImplemented, Type: typeNotSupported, Message: "this server does not report its slots (--no-slots)"}
	}
	if r.URL.Query().Get("fail_on_no_slot") != "" && s.pool.idleSlots() == 0 {
		return &apiError{Status: http.StatusServiceUnavailable, Type: typeUnavailable, Message: "no slot available"}
	}
	out := make([]any, len(s.allSlots))
	for i, sl := range s.allSlots {
		out[i] = sl.report(s.slotSize)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// Shutdown stops the server's generations so that the process can exit and release the
// model: requests that arrive from now on get 503, those running may finish until ctx ends
// and are then ended with an error (on a stream: an error event and [DONE]). It returns
// once no generation runs - only then may the model's memory be released - with ctx's
// error if it had to end some.
func (s *Server) Shutdown(ctx context.Context) error {
	s.genMu.Lock()
	if !s.closing {
		s.closing = true
		if s.running == 0 {
			close(s.drained)
		}
	}
	s.genMu.Unlock()
	select {
	case <-s.drained:
		return nil
	case <-ctx.Done():
	}
	s.abortNow()
	<-s.drained
	return ctx.Err()
}

// begin counts a generation in, unless Shutdown began (shuttingDown) or the model can no
// longer serve; end counts it out.
func (s *Server) begin() *apiError {
	s.genMu.Lock()
	defer s.genMu.Unlock()
	if s.closing {
		return shuttingDown
	}
	if s.broken != nil {
		return s.brokenError()
	}
	s.running++
	return nil
}

// markBroken records that the model can no longer serve - its file was truncated or
// replaced under the mapping, so every forward pass would fail - and logs it once.
func (s *Server) markBroken(err error) {
	s.genMu.Lock()
	defer s.genMu.Unlock()
	if s.broken == nil {
		s.broken = err
		s.logMu.Lock()
		fmt.Fprintf(s.accessLog, "%s the model can no longer serve: %v; restart the server\n", time.Now().UTC().Format(time.RFC3339), err)
		s.logMu.Unlock()
	}
}

// brokenError answers requests once the model can no longer serve (genMu held).
func (s *Server) brokenError() *apiError {
	return &apiError{Status: http.StatusServiceUnavailable, Type: typeUnavailable,
		Message: fmt.Sprintf("the model can no longer serve (%v); the server must be restarted", s.broken)}
}

func (s *Server) end() {
	s.genMu.Lock()
	defer s.genMu.Unlock()
	s.running--
	if s.closing && s.running == 0 {
		close(s.drained)
	}
}

// shuttingDown is the answer to a request that arrives or is ended during Shutdown.
var shuttingDown = &apiError{Status: http.StatusServiceUnavailable, Type: typeUnavailable, Message: "the server is shutting down"}

// run acquires a slot for a job and generates; emit may be nil (no streaming).
func (s *Server) run(ctx context.Context, j *job, log *requestLog, emit emitFunc) (result, *apiError) {
	if aerr := s.begin(); aerr != nil {
		return result{}, aerr
	}
	defer s.end()
	sl, err := s.acquire(ctx, j.prompt)
	if errors.Is(err, errShuttingDown) {
		return result{}, shuttingDown
	}
	if errors.Is(err, errQueueFull) {
		return result{}, &apiError{Status: http.StatusServiceUnavailable, Type: typeUnavailable,
			Message: fmt.Sprintf("all %d slots are busy and %d requests are already queued; retry later", s.slots, s.queueSize)}
	}
	if err != nil {
		return result{}, nil // the client left while queued: nobody to answer
	}
	defer s.release(sl)
	task := s.tasks.Add(1)
	sl.setState(func(st *slotState) {
		*st = slotState{processing: true, task: task, promptN: len(j.prompt), checkpoints: st.checkpoints}
	})
	s.metrics.processing.Add(1)
	defer s.metrics.processing.Add(-1)
	clientGone := false // writing to the client failed: it left
	res, err := s.generate(ctx, sl, j, func(text string, lps []tokenLogprob) error {
		if emit == nil {
			return nil
		}
		err := emit(text, lps)
		clientGone = err != nil
		return err
	})
	log.res = &res
	sl.setState(func(st *slotState) {
		st.processing, st.cached, st.generated = false, res.cachedTokens, res.completionTokens
		st.processed, st.checkpoints = res.promptTokens-res.cachedTokens, len(sl.checkpoints)
	})
	switch {
	case err == nil:
		return res, nil
	case ctx.Err() != nil || clientGone:
		res.finishReason = "cancelled" // for the access log
		return res, nil                // the slot is free again, and there is nobody to answer
	case errors.Is(err, errShuttingDown):
		res.finishReason = "shutdown"
		return res, shuttingDown
	case errors.Is(err, mmap.ErrFileChanged):
		s.markBroken(err)
	}
	res.finishReason = "error"
	return res, internalError(err)
}

// newID is a response id: a prefix and 24 random hex digits.
func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request, log *requestLog) *apiError {
	j, aerr := s.decodeChat(r.Body)
	if aerr != nil {
		return aerr
	}
	j.id = newID("chatcmpl-")
	return s.respond(w, r, log, j, &chatFormat{s: s, j: j, base: chatResponse{ID: j.id, Created: time.Now().Unix(), Model: s.name}, first: true,
		parser: s.outputParser(j)})
}

// applyTemplate is llama-server's POST /apply-template: a chat request's messages (with its
// tools and template variables) rendered by the chat template, {"prompt": text}, without
// generating.
func (s *Server) applyTemplate(w http.ResponseWriter, r *http.Request, _ *requestLog) *apiError {
	j, aerr := s.decodeChat(r.Body)
	if aerr != nil {
		return aerr
	}
	writeJSON(w, http.StatusOK, map[string]string{"prompt": j.promptText})
	return nil
}

func (s *Server) completions(w http.ResponseWriter, r *http.Request, log *requestLog) *apiError {
	j, aerr := s.decodeCompletion(r.Body)
	if aerr != nil {
		return aerr
	}
	return s.respond(w, r, log, j, &completionFormat{s: s, j: j, base: completionResponse{ID: newID("cmpl-"), Object: "text_completion", Created: time.Now().Unix(), Model: s.name}})
}

// format shapes a generation's results as one API's responses.
type format interface {
	whole(res result) any                      // the non-streamed response
	delta(text string, lps []tokenLogprob) any // a streamed chunk of text
	finish(res result) any                     // the streamed chunk with the finish reason
	usage(res result) any                      // the streamed usage chunk
}

// respond runs a job and answers with one response or, for stream, server-sent events.
// The stream starts with the first chunk, so errors before it (a full queue) get their
// status code.
func (s *Server) respond(w http.ResponseWriter, r *http.Request, log *requestLog, j *job, f format) *apiError {
	if !j.stream {
		res, aerr := s.run(r.Context(), j, log, nil)
		if aerr != nil || r.Context().Err() != nil {
			return aerr
		}
		writeJSON(w, http.StatusOK, f.whole(res))
		return nil
	}
	started := false
	send := func(v any) error {
		if !started {
			startStream(w)
			started = true
		}
		return writeEvent(w, v)
	}
	res, aerr := s.run(r.Context(), j, log, func(text string, lps []tokenLogprob) error {
		if c := f.delta(text, lps); c != nil {
			return send(c)
		}
		return nil // held back until the text decides what it is
	})
	if aerr != nil || r.Context().Err() != nil {
		return aerr
	}
	last := f.finish(res)
	send(last)
	if _, named := last.([]sseEvent); named {
		return nil // streams of named events end with their own last event, not [DONE]
	}
	if j.includeUsage {
		send(f.usage(res))
	}
	endStream(w)
	return nil
}

func startStream(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // proxies must not hold events back
	w.WriteHeader(http.StatusOK)
}

// writeEvent sends server-sent events with JSON payloads and flushes them: v is one
// payload, a named event, or several named events.
func writeEvent(w http.ResponseWriter, v any) error {
	var events []sseEvent
	switch e := v.(type) {
	case sseEvent:
		events = []sseEvent{e}
	case []sseEvent:
		events = e
	default:
		events = []sseEvent{{data: v}}
	}
	for _, e := range events {
		b, err := json.Marshal(e.data)
		if err != nil {
			return err
		}
		if e.name != "" {
			if _, err := fmt.Fprintf(w, "event: %s\n", e.name); err != nil {
				return err
			}
		}
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return err
		}
	}
	return http.NewResponseController(w).Flush()
}

func endStream(w http.ResponseWriter) {
	io.WriteString(w, "data: [DONE]\n\n")
	http.NewResponseController(w).Flush()
}

// tokenize is llama-server's POST /tokenize: {"content", "add_special", "parse_special",
// "with_pieces"} → {"tokens": [id, …]} or, with pieces, [{"id", "piece"}, …] where a piece
// that is not valid UTF-8 is given as its bytes.
func (s *Server) tokenize(w http.ResponseWriter, r *http.Request, _ *requestLog) *apiError {
	var req struct {
		Content      *string `json:"content"`
		AddSpecial   bool    `json:"add_special"`
		ParseSpecial *bool   `json:"parse_special"`
		WithPieces   bool    `json:"with_pieces"`
	}
	if err := decodeBody(r.Body, &req); err != nil {
		return err
	}
	if req.Content == nil {
		return badRequest("content", `"content" (a string) is required`)
	}
	parse := req.ParseSpecial == nil || *req.ParseSpecial
	ids := s.vocab.Encode(*req.Content, req.AddSpecial, parse)
	if !req.WithPieces {
		writeJSON(w, http.StatusOK, map[string]any{"tokens": ids})
		return nil
	}
	type piece struct {
		ID    int32 `json:"id"`
		Piece any   `json:"piece"`
	}
	pieces := make([]piece, len(ids))
	for i, id := range ids {
		p := s.vocab.Piece(id, true)
		pieces[i] = piece{ID: id, Piece: p}
		if !utf8.ValidString(p) {
			pieces[i].Piece = pieceBytes(p)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"tokens": pieces})
	return nil
}

// detokenize is llama-server's POST /detokenize: {"tokens": [id, …]} → {"content"}.
func (s *Server) detokenize(w http.ResponseWriter, r *http.Request, _ *requestLog) *apiError {
	var req struct {
		Tokens []int32 `json:"tokens"`
	}
	if err := decodeBody(r.Body, &req); err != nil {
		return err
	}
	if err := s.checkTokens("tokens", req.Tokens); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"content": s.vocab.Decode(req.Tokens, false, true)})
	return nil
}

// Loading answers every request with 503 "loading model", as llama-server does while its
// model loads; serve switches to the Server when it is ready.
func Loading() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, &apiError{Status: http.StatusServiceUnavailable, Type: typeUnavailable, Message: "loading model"})
	})
}
