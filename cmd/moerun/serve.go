package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/moe"
	"github.com/moerun/moerun/placement"
	"github.com/moerun/moerun/server"
	"github.com/moerun/moerun/tensor"
	"github.com/moerun/moerun/tokenizer"
)

// serveCmd is `moerun serve`: an OpenAI-compatible HTTP server, started as llama-server is
// (a pasted llama-server command line means the same; options serve does not use are
// reported as ignored).
type serveCmd struct {
	Model            string        `short:"m" name:"model" placeholder:"FILE" help:"GGUF model (any part of a split model)." group:"model"`
	Alias            string        `name:"alias" placeholder:"NAME" env:"LLAMA_ARG_ALIAS" help:"-a: the model's id in the API (default: the file name without .gguf)." group:"server"`
	Host             string        `name:"host" default:"127.0.0.1" env:"LLAMA_ARG_HOST" help:"Address to listen on." group:"server"`
	Port             int           `name:"port" default:"8080" env:"LLAMA_ARG_PORT" help:"Port to listen on (0: any free port)." group:"server"`
	APIKey           string        `name:"api-key" placeholder:"KEY,..." env:"LLAMA_API_KEY" help:"Require Authorization: Bearer KEY on every route but /health; several keys separated by commas." group:"server"`
	APIKeyFile       string        `name:"api-key-file" placeholder:"FILE" type:"path" env:"LLAMA_ARG_API_KEY_FILE" help:"Read API keys from a file, one per line (lines starting with # are comments)." group:"server"`
	Threads          int           `short:"t" name:"threads" default:"-1" env:"LLAMA_ARG_THREADS" help:"-t: threads (default: the physical cores)." group:"generation"`
	QueueSize        int           `name:"queue-size" default:"64" help:"Requests that may wait for a busy slot; more are refused with 503." group:"server"`
	GatherWindow     time.Duration `name:"gather-window" placeholder:"DURATION" default:"2ms" help:"When idle, wait this long after a request for others arriving with it, so that their prompts share one forward pass (each arrival restarts the wait, at most four windows in all; it ends at once when every slot is taken); 0 starts each request at once, as llama-server." group:"server"`
	CachePrompt      bool          `name:"cache-prompt" negatable:"" default:"true" env:"LLAMA_ARG_CACHE_PROMPT" help:"A slot keeps its KV cache after a request and the next request evaluates only what its prompt does not share with it (default on; a request's \"cache_prompt\": false opts out)." group:"server"`
	ReasoningFormat  string        `name:"reasoning-format" enum:"auto,deepseek,deepseek-legacy,none" default:"auto" env:"LLAMA_ARG_THINK" help:"Where a model's reasoning (<think>…</think>) goes: auto or deepseek return it as reasoning_content, none leaves it in the content (default auto)." group:"server"`
	ChatTemplate     string        `name:"chat-template" placeholder:"JINJA_TEMPLATE" env:"LLAMA_ARG_CHAT_TEMPLATE" help:"Use this Jinja chat template (its text) instead of the model's; chatml names ChatML, which a model without a template gets." group:"server"`
	ChatTemplateFile string        `name:"chat-template-file" placeholder:"FILE" type:"existingfile" env:"LLAMA_ARG_CHAT_TEMPLATE_FILE" help:"Use the Jinja chat template in this file instead of the model's." group:"server"`
	Reasoning        string        `name:"reasoning" enum:"on,off,auto" default:"auto" env:"LLAMA_ARG_REASONING" help:"-rea: thinking in chat (the templates' enable_thinking): on, off, or auto (the template's default)." group:"server"`
	ReasoningEffort  string        `name:"reasoning-effort" placeholder:"LEVEL" default:"default" env:"LLAMA_ARG_REASONING_EFFORT" help:"The reasoning_effort chat templates get (gpt-oss's: low, medium, high); default keeps the template's." group:"server"`
	ReasoningBudget  int           `name:"reasoning-budget" placeholder:"N" default:"-1" env:"LLAMA_ARG_THINK_BUDGET" help:"Tokens a model may think: after N the closing tag (</think>, gpt-oss's <|end|>) is forced; 0 closes the reasoning as soon as it opens; -1 unlimited. A request's reasoning_budget_tokens goes over it." group:"server"`
	BudgetMessage    string        `name:"reasoning-budget-message" placeholder:"MESSAGE" env:"LLAMA_ARG_THINK_BUDGET_MESSAGE" help:"Text written before the closing tag a spent --reasoning-budget forces (default none)." group:"server"`
	TemplateKwargs   string        `name:"chat-template-kwargs" placeholder:"JSON" env:"LLAMA_ARG_CHAT_TEMPLATE_KWARGS" help:"Extra chat template variables for every request, a JSON object: '{\"enable_thinking\": false}'; a request's chat_template_kwargs go over them." group:"server"`
	Similarity       float32       `name:"slot-prompt-similarity" default:"0.1" help:"-sps: share of a prompt (0-1) a slot's cached tokens must match for the request to take that slot rather than the least recently used one; 0 always takes the least recently used." group:"server"`
	Slots            bool          `name:"slots" negatable:"" default:"true" env:"LLAMA_ARG_ENDPOINT_SLOTS" help:"GET /slots reports each slot's state (default on; --no-slots answers it with 501)." group:"server"`
	Checkpoints      int           `name:"ctx-checkpoints" placeholder:"N" default:"32" env:"LLAMA_ARG_CTX_CHECKPOINTS" help:"-ctxcp, --swa-checkpoints: copies of a recurrent model's state (Qwen3.5) or of its sliding-window caches (gpt-oss without --swa-full) a slot keeps, taken just before each prompt's end, so that the next turn of a chat whose template rewrites the last answer need not evaluate the whole conversation again; 0 keeps none." group:"server"`
	CheckpointStep   int           `name:"checkpoint-min-step" placeholder:"N" default:"8192" env:"LLAMA_ARG_CHECKPOINT_MIN_SPACING_NT" help:"-cms: an earlier request's checkpoint within N tokens after the one before it is dropped when a new one is taken; 0: no minimum." group:"server"`
	NPredict         int           `short:"n" name:"n-predict" default:"-1" env:"LLAMA_ARG_N_PREDICT" help:"-n: tokens a request generates when it does not say; -1 until an end-of-generation token or a full slot." group:"generation"`
	Attention        string        `name:"attention" enum:"ggml,precise" default:"ggml" help:"Attention arithmetic: ggml reproduces llama.cpp's CPU flash attention; precise computes in float32 with float64 dot products: slower prompts, and decoding no faster." group:"generation"`

	samplingFlags
	placementFlags `embed:""`
}

// Help is the command's detailed help, with an example docs/docs_test.go checks.
func (*serveCmd) Help() string {
	return "Example (the tiny test model; stop it with Ctrl-C; the HTTP API is in docs/api.md):\n" +
		"\n" +
		"    moerun serve -m testdata/models/tiny-qwen3moe.gguf --port 8080"
}

func init() {
	llamaPassthrough["serve"] = declaredOptions(serveCmd{})
}

// templateKwargs are the template variables every chat request starts from, as
// llama-server's default_template_kwargs: enable_thinking from --reasoning, reasoning_effort from --reasoning-effort, then
// --chat-template-kwargs over them. nil when there are none.
func (c *serveCmd) templateKwargs() (*tokenizer.Object, error) {
	kw := &tokenizer.Object{Values: map[string]any{}}
	set := func(k string, v any) {
		if _, has := kw.Values[k]; !has {
			kw.Keys = append(kw.Keys, k)
		}
		kw.Values[k] = v
	}
	if c.ReasoningBudget < -1 {
		return nil, badInput("--reasoning-budget %d: want -1 (unlimited) or a number of tokens (0 closes the reasoning at once)", c.ReasoningBudget)
	}
	switch {
	case c.Reasoning == "off":
		set("enable_thinking", false)
	case c.Reasoning == "on":
		set("enable_thinking", true)
	}
	if c.ReasoningEffort != "default" {
		set("reasoning_effort", c.ReasoningEffort)
	}
	if c.TemplateKwargs != "" {
		v, err := tokenizer.DecodeJSON([]byte(c.TemplateKwargs))
		o, ok := v.(*tokenizer.Object)
		if err != nil || !ok {
			return nil, badInput("--chat-template-kwargs %q: want a JSON object of template variables, such as '{\"enable_thinking\": false}'", c.TemplateKwargs)
		}
		for _, k := range o.Keys {
			set(k, o.Values[k])
		}
	}
	if len(kw.Keys) == 0 {
		return nil, nil
	}
	return kw, nil
}

// serveStarted, when set (by tests), is told the address served and how to stop serving.
var serveStarted func(addr net.Addr, stop context.CancelFunc)

func (c *serveCmd) Run(e *env) error {
	if c.GPU != "" || c.GPUs != "" || c.DeviceMem != "" {
		return badInput("--gpu, --gpus and --device-mem describe devices for a dry run (moerun place); serve computes on the devices this machine has")
	}
	if c.Model == "" {
		return badInput("no model: give a GGUF file with -m")
	}
	if c.Port < 0 || c.Port > 65535 {
		return badInput("--port %d: want 0..65535", c.Port)
	}
	if c.QueueSize < 0 {
		return badInput("--queue-size %d is negative", c.QueueSize)
	}
	if c.GatherWindow < 0 {
		return badInput("--gather-window %v is negative", c.GatherWindow)
	}
	template := c.ChatTemplate
	if c.ChatTemplateFile != "" {
		if template != "" {
			return badInput("--chat-template and --chat-template-file both give a chat template: keep one")
		}
		b, err := os.ReadFile(c.ChatTemplateFile)
		if err != nil {
			return usageError{fmt.Errorf("--chat-template-file: %w", err)}
		}
		template = string(b)
	}
	kwargs, err := c.templateKwargs()
	if err != nil {
		return err
	}
	if c.Checkpoints < 0 {
		return badInput("--ctx-checkpoints %d: want a count, 0 for none", c.Checkpoints)
	}
	if c.CheckpointStep < 0 {
		return badInput("--checkpoint-min-step %d must be non-negative (0: no minimum)", c.CheckpointStep)
	}
	if c.Similarity < 0 || c.Similarity > 1 || c.Similarity != c.Similarity {
		return badInput("-sps %g: want a share of the prompt from 0 to 1", c.Similarity)
	}
	if c.NPredict < -1 || c.NPredict == 0 {
		return badInput("-n %d: want a positive count, or -1 for no limit", c.NPredict)
	}
	sampling, err := c.params()
	if err != nil {
		return err
	}
	keys, err := c.apiKeys()
	if err != nil {
		return err
	}
	rules, err := c.rules(os.LookupEnv)
	if err != nil {
		return err
	}
	if len(c.LlamaIgnored) > 0 {
		fmt.Fprintln(e.stderr, "moerun: note: accepted but ignored: "+strings.Join(c.LlamaIgnored, ", "))
	}
	threads := c.Threads
	if threads <= 0 {
		threads = tensor.DefaultThreads()
	}
	sims, err := c.simGPUs()
	if err != nil {
		return err
	}
	m := openMachine(e.stderr, threads, rules, sims)
	defer m.Close()

	// Listen first, as llama-server does: a taken port fails at once, not after the load,
	// and clients polling /health get 503 "loading" until the model is ready.
	ln, err := net.Listen("tcp", net.JoinHostPort(c.Host, strconv.Itoa(c.Port)))
	if err != nil {
		return usageError{fmt.Errorf("listening: %w", err)}
	}
	var handler atomic.Pointer[http.Handler]
	loading := server.Loading()
	handler.Store(&loading)
	hs := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*handler.Load()).ServeHTTP(w, r) }),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	defer hs.Close()
	fmt.Fprintf(e.stderr, "moerun: listening on http://%s (loading the model)\n", ln.Addr())

	srv, f, err := c.load(e, rules, m, threads, server.Config{APIKeys: keys, Sampling: sampling, MaxTokens: c.NPredict, QueueSize: c.QueueSize, GatherWindow: c.GatherWindow,
		NoPromptCache: !c.CachePrompt, SlotPromptSimilarity: c.Similarity,
		ContextCheckpoints: orNone(c.Checkpoints), CheckpointMinStep: orNone(c.CheckpointStep), NoSlots: !c.Slots, ReasoningFormat: c.ReasoningFormat, ChatTemplate: template, ChatTemplateKwargs: kwargs,
		ReasoningBudget: &c.ReasoningBudget, ReasoningBudgetMessage: c.BudgetMessage})
	if err != nil {
		return err
	}
	defer f.Close() // after the server: CPU-held weights are views of the file
	var ready http.Handler = srv
	handler.Store(&ready)
	return c.serve(e, hs, srv, ln.Addr(), served)
}

// load opens, places and loads the model and makes the server's slots, reporting each
// step on stderr.
// cfg holds the request-level settings; load fills in the model and slots.
func (c *serveCmd) load(e *env, rules placement.Rules, m *machine, threads int, cfg server.Config) (_ *server.Server, _ *gguf.File, err error) {
	start := time.Now()
	fmt.Fprintf(e.stderr, "moerun: loading %s\n", c.Model)
	f, vocab, err := openRunnable(c.Model)
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	fmt.Fprintf(e.stderr, "moerun: %s: %d tensors, %.2f MiB; vocabulary of %d tokens\n", f.Metadata.Arch(), len(f.Tensors), float64(tensorBytes(f))/(1<<20), vocab.Len())
	// The chat template is checked before the weights load: a template that cannot be
	// used should not cost the user the load.
	tpl, err := tokenizer.ChooseChatTemplate(cfg.ChatTemplate, vocab.ChatTemplate, vocab.Piece(vocab.BOS, true), vocab.Piece(vocab.EOS, true))
	if err != nil {
		return nil, nil, badInput("%v", err)
	}
	if tpl.Warning != "" {
		fmt.Fprintln(e.stderr, "moerun: warning: "+tpl.Warning)
	}
	model, plan, err := m.load(c.Model, f, rules)
	if err != nil {
		return nil, nil, err
	}
	fmt.Fprintf(e.stderr, "moerun: weights bound in %.2f s\n", time.Since(start).Seconds())

	opts := moe.DefaultContextOptions()
	opts.Size, opts.Batch, opts.UBatch = slotContext(plan.Context), plan.Context.NBatch, plan.Context.NUBatch
	opts.CacheK, opts.CacheV = plan.Settings.CacheK, plan.Settings.CacheV
	opts.SWAFull = rules.SWAFull
	if c.Attention == "precise" {
		opts.Attention = tensor.AttnPrecise
	}
	name := c.Alias
	if name == "" {
		name = strings.TrimSuffix(filepath.Base(c.Model), ".gguf")
	}
	cfg.Model, cfg.Vocab, cfg.Name, cfg.Slots, cfg.Context, cfg.AccessLog = model, vocab, name, plan.Context.NSeq, opts, e.stderr
	srv, err := server.New(cfg)
	if err != nil {
		return nil, nil, badInput("%v", err)
	}
	reportCache(e.stderr, fmt.Sprintf("KV cache of %d slots", plan.Context.NSeq), srv.CacheBytes(), plan)
	fmt.Fprintf(e.stderr, "moerun: %d slots of %d tokens (-c %d split as llama-server splits it), queue of %d; steps of up to %d tokens in passes of %d (-b, -ub); %d threads; ready in %.2f s\n",
		plan.Context.NSeq, srv.SlotSize(), plan.Context.NCtx, c.QueueSize, plan.Context.NBatch, plan.Context.NUBatch, threads, time.Since(start).Seconds())
	return srv, f, nil
}

// apiKeys collects the keys of --api-key (comma-separated) and --api-key-file (one per
// line, # comments), as llama-server reads them.
func (c *serveCmd) apiKeys() ([]string, error) {
	var keys []string
	for _, k := range strings.Split(c.APIKey, ",") {
		if k = strings.TrimSpace(k); k != "" {
			keys = append(keys, k)
		}
	}
	if c.APIKey != "" && len(keys) == 0 {
		// Running without authentication when the user asked for it is the worst answer.
		return nil, badInput("--api-key %q holds no key: give one or more keys separated by commas", c.APIKey)
	}
	if c.APIKeyFile == "" {
		return keys, nil
	}
	b, err := os.ReadFile(c.APIKeyFile)
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" && line[0] != '#' {
			keys = append(keys, line)
		}
	}
	if len(keys) == 0 {
		return nil, badInput("--api-key-file %s holds no keys", c.APIKeyFile)
	}
	return keys, nil
}

func tensorBytes(f *gguf.File) int64 {
	var n int64
	for _, t := range f.Tensors {
		n += int64(t.Size)
	}
	return n
}

// slotContext is each slot's context: -c divided among the sequences, rounded up to 256
// cells, as llama.cpp sizes one stream of a split cache. moerun gives every slot its own
// cache, so with a unified cache (llama-server's default) a request is also limited to its
// share rather than to whatever the other slots leave free.
func slotContext(c placement.Context) int {
	if !c.Unified {
		return c.NCtxSeq
	}
	return (c.NCtx/c.NSeq + 255) / 256 * 256
}

// shutdownGrace is how long running requests may go on after SIGINT or SIGTERM.
var shutdownGrace = 10 * time.Second

// serve runs until SIGINT or SIGTERM, then stops accepting requests, lets running ones
// finish for shutdownGrace and ends the rest with an error (an error event and [DONE] on
// streams). It returns - and the caller unmaps the model - only once no forward pass runs.
func (c *serveCmd) serve(e *env, hs *http.Server, srv *server.Server, addr net.Addr, served <-chan error) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(e.stderr, "moerun: serving http://%s\n", addr)
	if serveStarted != nil {
		serveStarted(addr, stop)
	}
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	fmt.Fprintf(e.stderr, "moerun: shutting down: new requests get 503, running ones have %v to finish\n", shutdownGrace)
	grace, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(grace); err != nil {
		fmt.Fprintf(e.stderr, "moerun: requests still running after %v were ended with an error\n", shutdownGrace)
	}
	// Every generation has ended; the handlers only write their last bytes now.
	closing, cancelClose := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelClose()
	if err := hs.Shutdown(closing); err != nil {
		fmt.Fprintf(e.stderr, "moerun: closing connections: %v\n", err)
	}
	return nil
}

// orNone turns a flag's 0 ("none") into server.Config's negative, whose 0 means the default.
func orNone(n int) int {
	if n == 0 {
		return -1
	}
	return n
}
