package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/moe"
	"github.com/moerun/moerun/placement"
	"github.com/moerun/moerun/tensor"
	"github.com/moerun/moerun/tokenizer"
)

// runCmd is `moerun run`: generate text from a prompt, as llama-completion does, with
// llama.cpp's placement and sampling flags (a pasted command line means the same; options
// run does not use are reported as ignored).
type runCmd struct {
	Model     string `short:"m" name:"model" placeholder:"FILE" help:"GGUF model (any part of a split model)." group:"model"`
	Prompt    string `short:"p" name:"prompt" placeholder:"TEXT" help:"Prompt text (escapes such as \\n are processed unless --no-escape)." group:"generation"`
	File      string `short:"f" name:"file" placeholder:"FILE" type:"path" help:"Read the prompt from a file." group:"generation"`
	PromptIDs string `name:"prompt-ids" placeholder:"ID,..." help:"Token ids instead of a text prompt: 1,2,3 (no BOS is added)." group:"generation"`

	NPredict int `short:"n" name:"n-predict" default:"-1" env:"LLAMA_ARG_N_PREDICT" help:"-n: tokens to generate; -1 until an end-of-generation token or a full context." group:"generation"`
	Threads  int `short:"t" name:"threads" default:"-1" env:"LLAMA_ARG_THREADS" help:"-t: threads (default: the physical cores)." group:"generation"`
	samplingFlags
	IgnoreEOS bool   `name:"ignore-eos" help:"Do not stop at end-of-generation tokens." group:"generation"`
	SER       string `name:"smart-expert-reduction" placeholder:"KMIN,T" help:"-ser: smart expert reduction (ik_llama.cpp): beyond the KMIN best experts, drop those scored below T times the best." group:"generation"`
	Escape    bool   `name:"escape" negatable:"" default:"true" help:"-e: process escapes in the prompt (--no-escape: take it literally)." group:"generation"`
	Special   bool   `name:"special" help:"-sp: print special tokens." group:"generation"`

	Attention   string `name:"attention" enum:"ggml,precise" default:"ggml" help:"Attention arithmetic: ggml reproduces llama.cpp's CPU flash attention (F16 queries and accumulator); precise computes in float32 with float64 dot products: slower prompts, and decoding no faster." group:"generation"`
	ExpertStats string `name:"expert-stats" placeholder:"FILE" type:"path" help:"Write routing statistics (per layer and expert: selections and summed weight) as JSON." group:"output"`
	PrintIDs    bool   `name:"print-ids" help:"Print the generated token ids on one line, space-separated, instead of text." group:"output"`
	LogitsOut   string `name:"logits-out" placeholder:"FILE" type:"path" help:"Write the logits after the prompt as a JSON array." group:"output"`

	placementFlags `embed:""`
}

// Help is the command's detailed help: what to know first, and an example that docs/docs_test.go runs.
func (*runCmd) Help() string {
	return "Computes on this machine's CPU, with a CUDA build also on its GPUs (only the weights' products run there so far), or on simulated GPUs (--sim-gpu). Takes llama-cli's sampling flags and llama-server's placement flags. Guide: docs/guide.md.\n" +
		"\n" +
		"Example (the tiny test model, greedy):\n" +
		"\n" +
		"    moerun run -m testdata/models/tiny-qwen3moe.gguf -p \"Hello\" -n 8 --temp 0"
}

func (c *runCmd) Run(e *env) error {
	if c.GPU != "" || c.GPUs != "" || c.DeviceMem != "" {
		return badInput("--gpu, --gpus and --device-mem describe devices for a dry run (moerun place); run computes on the devices this machine has")
	}
	if c.Model == "" {
		return badInput("no model: give a GGUF file with -m")
	}
	ser, err := parseSER(c.SER)
	if err != nil {
		return err
	}
	sp, err := c.params()
	if err != nil {
		return err
	}
	rules, err := c.rules(os.LookupEnv)
	if err != nil {
		return err
	}
	rules.Parallel = 1 // one sequence, as llama-completion

	f, vocab, err := openRunnable(c.Model)
	if err != nil {
		return err
	}
	defer f.Close()
	prompt, err := c.promptTokens(vocab)
	if err != nil {
		return err
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
	ctx, _, err := c.newContext(m, f, rules, ser)
	if err != nil {
		return err
	}
	sampler, err := moe.NewSampler(sp, moe.SystemSeed)
	if err != nil {
		return badInput("%v", err)
	}
	if len(c.LlamaIgnored) > 0 {
		fmt.Fprintln(e.stderr, "moerun: note: accepted but ignored: "+strings.Join(c.LlamaIgnored, ", "))
	}
	st, err := c.generate(e, ctx, vocab, sampler, prompt)
	if err != nil {
		return err
	}
	if c.ExpertStats != "" {
		stats := ctx.Stats()
		if err := writeFile(c.ExpertStats, func(w io.Writer) error { return stats.WriteJSON(w, c.Model) }); err != nil {
			return err
		}
	}
	fmt.Fprintf(e.stderr, "moerun: prompt: %d tokens in %.2f ms (%.2f tokens/s); generation: %d tokens, %d decode steps in %.2f ms (%.2f tokens/s); %d threads\n",
		st.PromptTokens, ms(st.PromptTime.Seconds()), st.PromptSpeed(), st.Generated, st.DecodeSteps, ms(st.DecodeTime.Seconds()), st.DecodeSpeed(), threads)
	m.reportExpertCache(e.stderr)
	if m.mapsWeights {
		reportHugePages(e.stderr, f, false)
	}
	return nil
}

// newContext places the model on the machine with llama.cpp's rules, loads it and makes a
// context with the flags' cache, SER and statistics settings; it returns the plan too.
func (c *runCmd) newContext(m *machine, f *gguf.File, rules placement.Rules, ser moe.SER) (*moe.Context, *placement.Plan, error) {
	model, plan, err := m.load(c.Model, f, rules)
	if err != nil {
		return nil, nil, err
	}
	ctx, err := c.contextOn(model, plan, rules, ser)
	if err != nil {
		return nil, nil, err
	}
	reportCache(m.stderr, "KV cache", ctx.CacheBytes(), plan)
	return ctx, plan, nil
}

// contextOn makes a context on a loaded model with the flags' cache, attention, SER and
// statistics settings.
func (c *runCmd) contextOn(model *moe.Model, plan *placement.Plan, rules placement.Rules, ser moe.SER) (*moe.Context, error) {
	opts := moe.DefaultContextOptions()
	// The plan's context: -c as given (padded as llama.cpp pads it), or what --fit chose.
	opts.Size, opts.Batch, opts.UBatch = plan.Context.NCtx, plan.Context.NBatch, plan.Context.NUBatch
	opts.CacheK, opts.CacheV = plan.Settings.CacheK, plan.Settings.CacheV
	opts.SWAFull = rules.SWAFull
	opts.SER = ser
	if c.Attention == "precise" {
		opts.Attention = tensor.AttnPrecise
	}
	if c.ExpertStats != "" {
		opts.Stats = model.NewExpertStats()
	}
	ctx, err := model.NewContext(opts)
	if err != nil {
		return nil, badInput("%v", err)
	}
	return ctx, nil
}

// generate runs the generation, streaming text (or collecting ids for --print-ids) to
// stdout. An open-ended generation (-n -1) that fills the context stops with a note; a
// prompt or -n that does not fit -c is bad input.
func (c *runCmd) generate(e *env, ctx *moe.Context, vocab *tokenizer.Vocab, sampler *moe.Sampler, prompt []int32) (moe.GenerateStats, error) {
	out := bufio.NewWriter(e.stdout)
	defer out.Flush()
	stream := vocab.NewStreamDecoder(c.Special)
	var ids []int32
	gen := moe.GenerateOptions{MaxTokens: c.NPredict, Sampler: sampler, Token: func(id int32, _ []float32) error {
		if c.PrintIDs {
			ids = append(ids, id)
			return nil
		}
		out.WriteString(stream.Add(id))
		return out.Flush() // stream as tokens come
	}}
	if !c.IgnoreEOS {
		gen.IsEOG = vocab.IsEOG
	}
	if c.LogitsOut != "" {
		gen.PromptLogits = func(logits []float32) error { return writeLogits(c.LogitsOut, logits) }
	}
	st, err := ctx.Generate(prompt, gen)
	full := errors.Is(err, moe.ErrContextFull)
	switch {
	case full && c.NPredict < 0 && st.Generated > 0:
		defer fmt.Fprintf(e.stderr, "moerun: stopped: %v\n", err)
	case full:
		return st, usageError{err}
	case err != nil:
		return st, err
	}
	if c.PrintIDs {
		fmt.Fprintln(out, joinIDs(ids))
	} else {
		out.WriteString(stream.Flush())
		out.WriteString("\n")
	}
	return st, nil
}

func ms(s float64) float64 { return 1000 * s }

// promptTokens tokenizes the prompt as llama.cpp does (BOS as the model asks, special
// tokens parsed), or reads --prompt-ids.
func (c *runCmd) promptTokens(v *tokenizer.Vocab) ([]int32, error) {
	given := 0
	for _, s := range []string{c.Prompt, c.File, c.PromptIDs} {
		if s != "" {
			given++
		}
	}
	if given != 1 {
		return nil, badInput("give the prompt once: -p TEXT, -f FILE or --prompt-ids 1,2,3")
	}
	if c.PromptIDs != "" {
		var ids []int32
		for _, s := range strings.Split(c.PromptIDs, ",") {
			id, err := strconv.ParseInt(strings.TrimSpace(s), 10, 32)
			if err != nil || id < 0 || int(id) >= v.Len() {
				return nil, badInput("--prompt-ids: %q is not a token id of this model (0..%d)", s, v.Len()-1)
			}
			ids = append(ids, int32(id))
		}
		return ids, nil
	}
	text := c.Prompt
	if c.File != "" {
		b, err := os.ReadFile(c.File)
		if err != nil {
			return nil, err
		}
		text = string(b)
	}
	if c.Escape {
		text = processEscapes(text)
	}
	ids := v.Encode(text, true, true)
	if len(ids) == 0 {
		return nil, badInput("the prompt is empty")
	}
	return ids, nil
}

// parseSER reads -ser KMIN,T (ik_llama.cpp's one pair); "" is off.
func parseSER(s string) (moe.SER, error) {
	if s == "" {
		return moe.SER{}, nil
	}
	k, t, ok := strings.Cut(s, ",")
	kmin, err1 := strconv.Atoi(strings.TrimSpace(k))
	thresh, err2 := strconv.ParseFloat(strings.TrimSpace(t), 32)
	if !ok || err1 != nil || err2 != nil || kmin < 0 || thresh < 0 || math.IsNaN(thresh) || math.IsInf(thresh, 0) {
		return moe.SER{}, badInput("-ser %q: want KMIN,THRESHOLD such as 6,0.5 (both ≥ 0)", s)
	}
	return moe.SER{MinExperts: kmin, Threshold: float32(thresh)}, nil
}

// writeLogits writes logits as a JSON array of shortest float32 decimals.
func writeLogits(path string, logits []float32) error {
	return writeFile(path, func(w io.Writer) error {
		nums := make([]json.RawMessage, len(logits))
		for i, l := range logits {
			if math.IsNaN(float64(l)) || math.IsInf(float64(l), 0) {
				return fmt.Errorf("logit %d is %v, which JSON cannot hold", i, l)
			}
			nums[i] = json.RawMessage(strconv.FormatFloat(float64(l), 'g', -1, 32))
		}
		b, err := json.Marshal(nums)
		if err != nil {
			return err
		}
		_, err = w.Write(append(b, '\n'))
		return err
	})
}

func joinIDs(ids []int32) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.Itoa(int(id))
	}
	return strings.Join(parts, " ")
}
