package main

import (
	"encoding/json"
	"fmt"
	"github.com/moerun/moerun/backend"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/moerun/moerun/arch"
	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/moe"
	"github.com/moerun/moerun/placement"
	"github.com/moerun/moerun/tensor"
	"github.com/moerun/moerun/tokenizer"
)

// benchCmd is `moerun bench`: prompt-processing (pp) and text-generation (tg) speed as
// llama-bench measures it (tools/llama-bench/llama-bench.cpp): every test runs once to warm
// up, then -r times from an empty cache; each repetition's tokens/s is one sample, and the
// table shows their mean ± sample standard deviation. Lists (-p 128,512, -t 1,2,4) run every
// combination, one row each, in llama-bench's order.
type benchCmd struct {
	Model       string   `short:"m" name:"model" placeholder:"FILE" help:"GGUF model (any part of a split model)." group:"model"`
	NPrompt     []string `short:"p" name:"n-prompt" sep:"none" default:"512" placeholder:"N,..." help:"Prompt lengths to test (pp); llama-bench's lists and ranges: 128,512 or 128-512*2; 0 skips." group:"bench"`
	NGen        []string `short:"n" name:"n-gen" sep:"none" default:"128" placeholder:"N,..." help:"Generation lengths to test (tg); 0 skips." group:"bench"`
	NDepth      []string `short:"d" name:"n-depth" sep:"none" default:"0" placeholder:"N,..." help:"Context depths to test at: before each timed run, N untimed prompt tokens fill the cache (the test column says tg128 @ d4096)." group:"bench"`
	Threads     []string `short:"t" name:"threads" sep:"none" placeholder:"N,..." help:"Thread counts to test: 1,2,4 (default: the physical cores)." group:"bench"`
	Repetitions int      `short:"r" name:"repetitions" default:"5" help:"Timed runs of each test." group:"bench"`
	Output      string   `short:"o" name:"output" enum:"md,json,jsonl,csv" default:"md" help:"Output format: md (llama-bench's markdown table), json (an array of its fields), jsonl (one object a line) or csv (its fields, quoted)." group:"bench"`
	Warmup      bool     `name:"warmup" negatable:"" default:"true" help:"--no-warmup: skip the untimed run before each test." group:"bench"`
	Attention   string   `name:"attention" enum:"ggml,precise" default:"ggml" help:"Attention arithmetic, as moerun run's: ggml (llama.cpp's CPU flash attention) or precise (float32 with float64 dot products; slower prompts, decoding no faster)." group:"bench"`
	CPUProfile  string   `name:"cpuprofile" placeholder:"FILE" help:"Write a Go CPU profile of the whole run to FILE, for go tool pprof." group:"bench"`
	SER         []string `name:"smart-expert-reduction" sep:"none" placeholder:"KMIN,T,..." help:"-ser: smart expert reduction settings to test, as ik_llama.cpp's llama-bench: pairs KMIN,T (6,0.5,4,1 is two; -1,0 is off). Each row then also shows what its setting costs on a fixed English text against no SER: perplexity, mean KL divergence of the next-token distributions and how often the top token stays the same." group:"bench"`
	NKVO        []string `name:"nkvo" sep:"none" placeholder:"0|1,..." help:"-nkvo: llama-bench's list of KV-cache-in-RAM settings to test (1: every layer's cache on the CPU, as -nkvo; default 0)." group:"bench"`
	MMap        []string `name:"mmp" sep:"none" placeholder:"0|1,..." help:"-mmp: llama-bench's list of mmap settings to test (0: read the weights into memory, as --no-mmap; default 1)." group:"bench"`
	NOPO        []string `name:"nopo" sep:"none" placeholder:"0|1,..." help:"-nopo, --no-op-offload: llama-bench's list of op offload settings to test (1: CPU-held weights never run on the GPU, as run's --no-op-offload; default 0)." group:"bench"`
	Progress    bool     `name:"progress" help:"Say on stderr which test of how many starts, as llama-bench's --progress." group:"bench"`
	Roofline    bool     `name:"roofline" help:"For each tg test on the CPU, measure the stream-read bandwidth before and after every repetition and report on stderr the memory-bandwidth roofline (bandwidth / bytes read per token) and the share of it reached." group:"bench"`

	placementFlags `embed:""`
}

// Help is the command's detailed help, with an example docs/docs_test.go runs.
func (*benchCmd) Help() string {
	return "Example (the tiny test model, one repetition):\n" +
		"\n" +
		"    moerun bench -m testdata/models/tiny-qwen3moe.gguf -p 16 -n 8 -r 1"
}

// benchConfig is one combination of the listed settings; each runs every pp and tg test.
type benchConfig struct {
	flags   placementFlags // with single -b, -ub, -ctk, -ctv values
	rules   placement.Rules
	threads int
	ser     *benchSER // nil: no -ser given (off, no quality columns)
}

func (c *benchCmd) Run(e *env) error {
	if c.GPU != "" || c.GPUs != "" || c.DeviceMem != "" {
		return badInput("--gpu, --gpus and --device-mem describe devices for a dry run (moerun place); bench computes on the devices this machine has")
	}
	if c.CtxSize != "" {
		return badInput("-c: bench sizes each test's context to its tokens, as llama-bench does")
	}
	if c.Model == "" {
		return badInput("no model: give a GGUF file with -m")
	}
	if c.Repetitions < 1 {
		return badInput("-r %d: give at least one repetition", c.Repetitions)
	}
	prompts, err := intList("-p", c.NPrompt, 0)
	if err != nil {
		return err
	}
	gens, err := intList("-n", c.NGen, 0)
	if err != nil {
		return err
	}
	depths, err := intList("-d", c.NDepth, 0)
	if err != nil {
		return err
	}
	tests := benchTests(prompts, gens, depths)
	if len(tests) == 0 {
		return badInput("nothing to run: every -p and -n length is 0")
	}
	configs, err := c.configs()
	if err != nil {
		return err
	}

	f, vocab, err := openRunnable(c.Model)
	if err != nil {
		return err
	}
	defer f.Close()
	if c.CPUProfile != "" {
		stop, err := startCPUProfile(c.CPUProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	r := benchRunner{cmd: c, f: f, vocab: vocab, info: describeModel(c.Model, f), stderr: e.stderr,
		rng: rand.New(rand.NewPCG(1, 1))} // a fixed sequence, as llama-bench's unseeded std::rand
	gpus, _ := gpuInventory()
	p := newBenchPrinter(c.Output, e.stdout, configs, c.SimGPU != "" || len(gpus) > 0)
	p.header()
	total, done := len(configs)*len(tests), 0
	for _, cfg := range configs {
		var quality *serQuality
		if cfg.ser != nil {
			if quality, err = r.serQuality(cfg); err != nil {
				return err
			}
		}
		for _, t := range tests {
			done++
			if c.Progress {
				fmt.Fprintf(e.stderr, "moerun bench: test %d/%d: starting\n", done, total)
			}
			res, err := r.run(cfg, t)
			if err != nil {
				return err
			}
			if cfg.ser != nil {
				res.SER, res.SERQuality = cfg.ser.label, quality
			}
			if err := p.row(res); err != nil {
				return err
			}
		}
	}
	if r.mapsWeights {
		reportHugePages(e.stderr, f, true)
	}
	return p.footer()
}

// benchTest is a pp test (nPrompt tokens in batches) or a tg test (nGen single tokens),
// timed after nDepth tokens already in the cache.
type benchTest struct{ nPrompt, nGen, nDepth int }

// benchTests lists, for each depth, the pp tests, then the tg tests, skipping lengths of
// 0, as llama-bench (whose depth loop is inside its thread loop, as here inside configs).
func benchTests(prompts, gens, depths []int) []benchTest {
	var tests []benchTest
	for _, d := range depths {
		for _, n := range prompts {
			if n > 0 {
				tests = append(tests, benchTest{nPrompt: n, nDepth: d})
			}
		}
		for _, n := range gens {
			if n > 0 {
				tests = append(tests, benchTest{nGen: n, nDepth: d})
			}
		}
	}
	return tests
}

// configs expands the lists of -ngl, -ncmoe, -b, -ub, -ctk, -ctv, -nkvo, -fa, -mmp, -ser
// and -t in llama-bench's nesting order (threads innermost) and reads each combination's
// placement rules, so that a bad value is reported before anything runs.
func (c *benchCmd) configs() ([]benchConfig, error) {
	batches, err := rangeValues("-b", c.BatchSize)
	if err != nil {
		return nil, err
	}
	ubatches, err := rangeValues("-ub", c.UBatchSize)
	if err != nil {
		return nil, err
	}
	threads, err := intList("-t", c.Threads, 1)
	if err != nil {
		return nil, err
	}
	if len(threads) == 0 {
		threads = []int{tensor.DefaultThreads()}
	}
	sers, err := parseSERList(c.SER)
	if err != nil {
		return nil, err
	}
	serOptions := []*benchSER{nil} // no -ser: SER off, and no quality columns
	if len(sers) > 0 {
		serOptions = nil
		for i := range sers {
			serOptions = append(serOptions, &sers[i])
		}
	}
	nkvo, err := switchList("-nkvo", c.NKVO)
	if err != nil {
		return nil, err
	}
	mmap, err := switchList("-mmp", c.MMap)
	if err != nil {
		return nil, err
	}
	nopo, err := switchList("-nopo", c.NOPO)
	if err != nil {
		return nil, err
	}
	// Every combination, in llama-bench's nesting: -ngl outermost, then -ncmoe, -nopo, -b,
	// -ub, -ctk, -ctv, -nkvo, -fa, -mmp, then moerun's -ser, and threads innermost.
	axes := []struct {
		values []string
		set    func(f *placementFlags, v string)
	}{
		{listValues(c.GPULayers), func(f *placementFlags, v string) { f.GPULayers = v }},
		{listValues(strings.Join(c.NCPUMoE, ",")), func(f *placementFlags, v string) {
			if v != "" {
				f.NCPUMoE = []string{v}
				f.given("n-cpu-moe")
			}
		}},
		{nopo, func(f *placementFlags, v string) {
			if v != "" {
				f.OpOffload = v == "0"
				f.given("op-offload")
			}
		}},
		{batches, func(f *placementFlags, v string) { f.BatchSize = v }},
		{ubatches, func(f *placementFlags, v string) { f.UBatchSize = v }},
		{listValues(c.CacheTypeK), func(f *placementFlags, v string) { f.CacheTypeK = v }},
		{listValues(c.CacheTypeV), func(f *placementFlags, v string) { f.CacheTypeV = v }},
		{nkvo, func(f *placementFlags, v string) {
			if v != "" {
				f.KVOffload = v == "0"
				f.given("kv-offload")
			}
		}},
		{listValues(c.FlashAttn), func(f *placementFlags, v string) { f.FlashAttn = v }},
		{mmap, func(f *placementFlags, v string) {
			if v != "" {
				f.Mmap = v == "1"
				f.given("mmap")
			}
		}},
	}
	combos := []placementFlags{c.placementFlags}
	for _, a := range axes {
		var next []placementFlags
		for _, f := range combos {
			for _, v := range a.values {
				g := f
				g.flagOrder = slices.Clone(f.flagOrder)
				a.set(&g, v)
				next = append(next, g)
			}
		}
		combos = next
	}
	var configs []benchConfig
	for _, flags := range combos {
		rules, err := flags.rules(os.LookupEnv)
		if err != nil {
			return nil, err
		}
		rules.Parallel = 1 // one sequence, as llama-bench
		for _, ser := range serOptions {
			for _, t := range threads {
				configs = append(configs, benchConfig{flags: flags, rules: rules, threads: t, ser: ser})
			}
		}
	}
	return configs, nil
}

// nCPUMoE is the --n-cpu-moe of rules (0 without it).
func nCPUMoE(r placement.Rules) int {
	n := 0
	for _, it := range r.Items {
		if it.Kind == placement.ItemNCPUMoE {
			n = it.N
		}
	}
	return n
}

// flashAttnValue is llama-bench's flash_attn field: -1 auto, 0 off, 1 on.
func flashAttnValue(f placement.FlashAttn) int {
	switch f {
	case placement.FlashOn:
		return 1
	case placement.FlashOff:
		return 0
	}
	return -1
}

// switchList checks llama-bench's 0/1 lists (-nkvo, -mmp); none given is one empty value,
// which leaves the setting as the other flags give it.
func switchList(flag string, values []string) ([]string, error) {
	out := listValues(strings.Join(values, ","))
	for _, v := range out {
		if v != "0" && v != "1" && (v != "" || len(values) > 0) {
			return nil, badInput("%s %q: want 0 or 1 (a list such as 0,1 tests both)", flag, v)
		}
	}
	return out, nil
}

// listValues splits a comma list; an unset flag is one empty value, which rules() ignores.
func listValues(s string) []string { return strings.Split(s, ",") }

// rangeValues expands a flag's llama-bench integer list back into single values for rules().
func rangeValues(flag, s string) ([]string, error) {
	if s == "" {
		return []string{""}, nil
	}
	ns, err := intList(flag, []string{s}, 1)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = strconv.Itoa(n)
	}
	return out, nil
}

// intRange is one item of llama-bench's integer lists: FIRST[-LAST[(+|*)STEP]].
var intRange = regexp.MustCompile(`^(\d+)(?:-(\d+)(?:([+*])(\d+))?)?$`)

// maxListLen bounds an expanded list, so that a range such as 1-1000000000 is refused
// rather than run.
const maxListLen = 4096

// intList reads every occurrence of a list flag (repeats append, as in llama-bench) into
// integers, expanding ranges: 1-4 is 1,2,3,4; 1-16*2 is 1,2,4,8,16; 0-512+128 steps by 128.
// Values below least, and lists that expand to nothing (8-2), are refused.
func intList(flag string, occurrences []string, least int) ([]int, error) {
	var out []int
	for _, occ := range occurrences {
		for item := range strings.SplitSeq(occ, ",") {
			m := intRange.FindStringSubmatch(strings.TrimSpace(item))
			if m == nil {
				return nil, badInput("%s %q: want numbers or ranges FIRST-LAST[+STEP|*STEP], comma-separated (such as 128,512 or 1-8*2)", flag, occ)
			}
			first, err1 := strconv.Atoi(m[1])
			last, err2 := first, error(nil)
			if m[2] != "" {
				last, err2 = strconv.Atoi(m[2])
			}
			op, step, err3 := "+", 1, error(nil)
			if m[3] != "" {
				op = m[3]
				step, err3 = strconv.Atoi(m[4])
			}
			if err1 != nil || err2 != nil || err3 != nil || max(first, last, step) > math.MaxInt32 {
				return nil, badInput("%s %q: a number is too large", flag, item)
			}
			if first < least {
				return nil, badInput("%s %q: values start at %d", flag, item, least)
			}
			for i := first; i <= last; {
				if len(out) == maxListLen {
					return nil, badInput("%s %q: more than %d values", flag, occ, maxListLen)
				}
				out = append(out, i)
				next := i + step
				if op == "*" {
					next = i * step
				}
				if next <= i {
					return nil, badInput("%s %q: the range does not advance", flag, item)
				}
				i = next
			}
		}
	}
	if len(occurrences) > 0 && len(out) == 0 {
		return nil, badInput("%s %q: the ranges are empty (LAST is below FIRST)", flag, strings.Join(occurrences, ","))
	}
	return out, nil
}

// benchRunner runs tests on an open model.
type benchRunner struct {
	cmd    *benchCmd
	f      *gguf.File
	vocab  *tokenizer.Vocab
	rng    *rand.Rand
	info   benchModelInfo
	stderr io.Writer // where each test's per-device account goes
	// mapsWeights is whether a test computed on views of the file's mapping.
	mapsWeights bool
	// serBase holds the quality text's logits without SER, per placement and threads.
	serBase map[string][]float32
}

// addTraffic adds each device's traffic between before and now to sum (nil at first).
func addTraffic(sum, now, before []backend.Traffic) []backend.Traffic {
	if sum == nil {
		sum = make([]backend.Traffic, len(now))
	}
	for i := range now {
		sum[i] = sum[i].Add(now[i].Sub(before[i]))
	}
	return sum
}

// run runs one test with a configuration as llama-bench does: the model placed with the
// configuration's rules and threads, a context sized to the test's tokens and depth, a
// warm-up (the whole prompt for pp, one token for tg), then the timed repetitions, each
// from an empty cache that the depth's tokens fill first, untimed (llama-bench saves the
// filled cache once and restores it; moerun evaluates the depth again, which gives the
// same cache and costs only wall time).
func (r *benchRunner) run(cfg benchConfig, t benchTest) (benchResult, error) {
	rules := cfg.rules
	rules.CtxSize = t.nDepth + t.nPrompt + t.nGen
	sims, err := cfg.flags.simGPUs()
	if err != nil {
		return benchResult{}, err
	}
	m := openMachine(r.stderr, cfg.threads, rules, sims)
	defer m.Close()
	place := runCmd{Model: r.cmd.Model, Attention: r.cmd.Attention, placementFlags: cfg.flags}
	var ser moe.SER
	if cfg.ser != nil {
		ser = cfg.ser.ser
	}
	ctx, plan, err := place.newContext(m, r.f, rules, ser)
	if err != nil {
		return benchResult{}, err
	}
	var roof *roofline
	var probe *streamProbe
	if r.cmd.Roofline && t.nPrompt == 0 && t.nGen > 0 {
		if roof, err = newRoofline(plan, t); err != nil {
			return benchResult{}, err
		}
		if probe, err = newStreamProbe(m.pool); err != nil {
			return benchResult{}, err
		}
		defer probe.free()
	}
	r.mapsWeights = r.mapsWeights || m.mapsWeights
	started := time.Now() // the warm-up and the repetitions, for the per-device account
	w := benchWorkload{ctx: ctx, vocab: r.vocab, rng: r.rng, batch: max(1, min(rules.Batch, ctx.Size()))}
	res := benchResult{
		BuildCommit: version(), CPUInfo: cpuName(), Kernels: tensor.KernelLevel(), Backends: m.names(),
		ModelFilename: r.cmd.Model, ModelType: r.info.desc, ModelSize: r.info.size, ModelNParams: r.info.params,
		NBatch: rules.Batch, NUBatch: rules.UBatch, NThreads: cfg.threads,
		TypeK: rules.CacheK.Info().Name, TypeV: rules.CacheV.Info().Name,
		NGPULayers: plan.Settings.GPULayers, NCPUMoE: nCPUMoE(rules), NoKVOffload: !rules.KVOffload,
		FlashAttn: flashAttnValue(rules.FlashAttn), LoadMode: plan.Settings.LoadMode.String(), NoOpOffload: boolInt(!rules.OpOffload),
		NPrompt: t.nPrompt, NGen: t.nGen, NDepth: t.nDepth, TestTime: time.Now().UTC().Format("2006-01-02T15:04:05Z"),
	}
	if r.cmd.Warmup {
		if err := w.run(benchTest{nPrompt: t.nPrompt, nGen: min(t.nGen, 1)}); err != nil {
			return res, fmt.Errorf("warm-up: %w", err)
		}
	}
	var crossed []backend.Traffic // the GPUs' traffic during the timed runs
	for range r.cmd.Repetitions {
		ctx.Reset()
		if t.nDepth > 0 {
			if err := w.prompt(t.nDepth); err != nil {
				return res, fmt.Errorf("filling the context to depth %d: %w", t.nDepth, err)
			}
		}
		var before float64
		if probe != nil {
			if before, err = probe.measure(); err != nil {
				return res, err
			}
		}
		traffic := m.traffic()
		start := time.Now()
		if err := w.run(t); err != nil {
			return res, err
		}
		took := max(1, time.Since(start).Nanoseconds())
		crossed = addTraffic(crossed, m.traffic(), traffic)
		res.SamplesNS = append(res.SamplesNS, uint64(took))
		if probe != nil {
			after, err := probe.measure()
			if err != nil {
				return res, err
			}
			roof.add(float64(t.nGen)*1e9/float64(took), before, after)
		}
	}
	res.summarize()
	for _, model := range m.models {
		if st := model.ExpertCacheStats(); st.Layers > 0 {
			res.ExpertCache = &benchExpertCache{Layers: st.Layers, Slots: st.Slots, SlotBytes: st.SlotBytes, HitRate: st.HitRate(),
				Swaps: st.Swaps, MovedBytes: st.BytesMoved}
		}
	}
	m.report(r.stderr, time.Since(started))
	if t.nPrompt == 0 && t.nGen > 0 {
		m.reportSteps(r.stderr, res.testName(), crossed, t.nGen*r.cmd.Repetitions)
	}
	if roof != nil {
		roof.report(r.stderr, res.testName(), cfg.threads, res.AvgTS)
	}
	return res, nil
}

// benchWorkload feeds a context llama-bench's tokens: random ones, after the BOS token
// where the model adds one.
type benchWorkload struct {
	ctx   *moe.Context
	vocab *tokenizer.Vocab
	rng   *rand.Rand
	batch int // -b: tokens per Eval call, which splits them into ubatches
}

func (w *benchWorkload) randomToken() int32 { return int32(w.rng.IntN(w.vocab.Len())) }

func (w *benchWorkload) firstToken() int32 {
	if w.vocab.AddBOS && w.vocab.BOS >= 0 {
		return w.vocab.BOS
	}
	return w.randomToken()
}

// run evaluates a test's prompt, then its generated tokens.
func (w *benchWorkload) run(t benchTest) error {
	if t.nPrompt > 0 {
		if err := w.prompt(t.nPrompt); err != nil {
			return err
		}
	}
	if t.nGen > 0 {
		return w.generate(t.nGen)
	}
	return nil
}

// prompt evaluates n tokens in batches of w.batch, as llama-bench's test_prompt.
func (w *benchWorkload) prompt(n int) error {
	tokens := make([]int32, 0, w.batch)
	for done := 0; done < n; {
		tokens = tokens[:min(n-done, w.batch)]
		for i := range tokens {
			tokens[i] = w.randomToken()
		}
		if done == 0 {
			tokens[0] = w.firstToken()
		}
		if _, err := w.ctx.Eval(tokens, false); err != nil {
			return err
		}
		done += len(tokens)
	}
	return nil
}

// generate evaluates n single tokens, as llama-bench's test_gen (which ignores the logits).
func (w *benchWorkload) generate(n int) error {
	token := []int32{w.firstToken()}
	for range n {
		if _, err := w.ctx.Eval(token, false); err != nil {
			return err
		}
		token[0] = w.randomToken()
	}
	return nil
}

// benchResult is one test's row, with llama-bench's JSON field names for the fields moerun
// has (see docs/benchmarks.md).
type benchResult struct {
	BuildCommit   string    `json:"build_commit"`
	CPUInfo       string    `json:"cpu_info"`
	Kernels       string    `json:"kernels"`
	Backends      string    `json:"backends"`
	ModelFilename string    `json:"model_filename"`
	ModelType     string    `json:"model_type"`
	ModelSize     uint64    `json:"model_size"`
	ModelNParams  uint64    `json:"model_n_params"`
	NBatch        int       `json:"n_batch"`
	NUBatch       int       `json:"n_ubatch"`
	NThreads      int       `json:"n_threads"`
	TypeK         string    `json:"type_k"`
	TypeV         string    `json:"type_v"`
	NGPULayers    int       `json:"n_gpu_layers"`  // the layers the plan offloads
	NCPUMoE       int       `json:"n_cpu_moe"`     // -ncmoe, 0 without it
	NoKVOffload   bool      `json:"no_kv_offload"` // -nkvo
	FlashAttn     int       `json:"flash_attn"`    // -1 auto, 0 off, 1 on
	LoadMode      string    `json:"load_mode"`     // mmap, none, …
	NoOpOffload   int       `json:"no_op_offload"` // -nopo: 1 with op offload off
	NPrompt       int       `json:"n_prompt"`
	NGen          int       `json:"n_gen"`
	NDepth        int       `json:"n_depth"`
	TestTime      string    `json:"test_time"`
	AvgNS         uint64    `json:"avg_ns"`
	StddevNS      uint64    `json:"stddev_ns"`
	AvgTS         float64   `json:"avg_ts"`
	StddevTS      float64   `json:"stddev_ts"`
	SamplesNS     []uint64  `json:"samples_ns"`
	SamplesTS     []float64 `json:"samples_ts"`
	// With -ser: the setting (ik_llama.cpp's field) and what it costs (bench_ser.go).
	SER        string      `json:"ser,omitempty"`
	SERQuality *serQuality `json:"ser_quality,omitempty"`
	// With --expert-cache: what the cache did over the warm-up and the repetitions.
	ExpertCache *benchExpertCache `json:"expert_cache,omitempty"`
}

// benchExpertCache is a test's expert cache account (moe.ExpertCacheStats).
type benchExpertCache struct {
	Layers     int     `json:"layers"`
	Slots      int     `json:"slots"`
	SlotBytes  int64   `json:"slot_bytes"`
	HitRate    float64 `json:"hit_rate"`
	Swaps      uint64  `json:"swaps"`
	MovedBytes int64   `json:"moved_bytes"`
}

// summarize computes the samples' tokens/s and the means and standard deviations, as
// llama-bench: each repetition's speed is a sample, and t/s is the mean of those speeds
// (not the tokens over the summed time).
func (r *benchResult) summarize() {
	tokens := float64(r.NPrompt + r.NGen)
	ns := make([]float64, len(r.SamplesNS))
	r.SamplesTS = make([]float64, len(r.SamplesNS))
	for i, t := range r.SamplesNS {
		ns[i] = float64(t)
		r.SamplesTS[i] = 1e9 * tokens / float64(t)
	}
	avgNS, sdNS := meanStddev(ns)
	r.AvgNS, r.StddevNS = uint64(avgNS), uint64(sdNS)
	r.AvgTS, r.StddevTS = meanStddev(r.SamplesTS)
}

// meanStddev is the mean and the sample standard deviation (n−1 in the denominator, as
// llama-bench); the deviation of fewer than two samples is 0.
func meanStddev(xs []float64) (mean, stddev float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	if len(xs) < 2 {
		return mean, 0
	}
	var sq float64
	for _, x := range xs {
		sq += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(sq / float64(len(xs)-1))
}

// testName is llama-bench's test column: pp512, tg128, tg128 @ d4096.
func (r *benchResult) testName() string {
	name := fmt.Sprintf("tg%d", r.NGen)
	if r.NGen == 0 {
		name = fmt.Sprintf("pp%d", r.NPrompt)
	}
	if r.NDepth > 0 {
		name += fmt.Sprintf(" @ d%d", r.NDepth)
	}
	return name
}

// benchModelInfo is what llama-bench shows of a model: its description, and the bytes and
// elements of all its tensors.
type benchModelInfo struct {
	desc         string
	size, params uint64
}

// describeModel builds llama.cpp's model description "ARCH TYPE FTYPE" (llama_model_desc).
func describeModel(path string, f *gguf.File) benchModelInfo {
	var info benchModelInfo
	counts := map[tensor.Type]int{}
	for i := range f.Tensors {
		t := &f.Tensors[i]
		info.size += uint64(t.Size)
		info.params += uint64(t.Elements())
		counts[t.Type]++
	}
	arch := f.Metadata.Arch()
	if arch == "" {
		arch = filepath.Base(path)
	}
	info.desc = arch + " " + llamaSizeType(placement.Model{Name: path, Metadata: f.Metadata, Tensors: f.Tensors}) + " " + fileTypeName(f.Metadata, counts)
	return info
}

// llamaSizeType is llama.cpp's TYPE of a model (llm_type_name): not the file's
// general.size_label but its architecture's label of its count of blocks the main graph
// runs (NextN blocks aside), "?B" for any other count or architecture.
func llamaSizeType(m placement.Model) string {
	hp, err := placement.ReadHParams(m)
	if err != nil {
		return "?B"
	}
	return arch.Of(hp.Arch).SizeLabel(hp.Layers)
}

// ftypeNames are llama.cpp's names of its file types (llama_ftype_name), by llama_ftype.
var ftypeNames = map[uint32]string{
	0: "all F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1",
	10: "Q2_K - Medium", 11: "Q3_K - Small", 12: "Q3_K - Medium", 13: "Q3_K - Large",
	14: "Q4_K - Small", 15: "Q4_K - Medium", 16: "Q5_K - Small", 17: "Q5_K - Medium", 18: "Q6_K",
	19: "IQ2_XXS - 2.0625 bpw", 20: "IQ2_XS - 2.3125 bpw", 21: "Q2_K - Small", 22: "IQ3_XS - 3.3 bpw",
	23: "IQ3_XXS - 3.0625 bpw", 24: "IQ1_S - 1.5625 bpw", 25: "IQ4_NL - 4.5 bpw", 26: "IQ3_S - 3.4375 bpw",
	27: "IQ3_S mix - 3.66 bpw", 28: "IQ2_S - 2.5 bpw", 29: "IQ2_M - 2.7 bpw", 30: "IQ4_XS - 4.25 bpw",
	31: "IQ1_M - 1.75 bpw", 32: "BF16", 36: "TQ1_0 - 1.69 bpw ternary", 37: "TQ2_0 - 2.06 bpw ternary",
	38: "MXFP4 MoE", 39: "NVFP4", 40: "Q1_0", 41: "Q2_0",
}

// guessedFileTypes is the file type llama.cpp guesses from a file's most common tensor type
// when general.file_type is missing.
var guessedFileTypes = map[tensor.Type]uint32{
	tensor.F32: 0, tensor.F16: 1, tensor.BF16: 32, tensor.Q4_0: 2, tensor.Q4_1: 3, tensor.Q5_0: 8,
	tensor.Q5_1: 9, tensor.Q8_0: 7, tensor.Q2_K: 10, tensor.Q3_K: 12, tensor.Q4_K: 15, tensor.Q5_K: 17,
	tensor.Q6_K: 18, tensor.TQ1_0: 36, tensor.TQ2_0: 37, tensor.IQ2_XXS: 19, tensor.IQ2_XS: 20,
	tensor.IQ2_S: 28, tensor.IQ3_XXS: 23, tensor.IQ1_S: 24, tensor.IQ1_M: 31, tensor.IQ4_NL: 25,
	tensor.IQ4_XS: 30, tensor.IQ3_S: 26, tensor.NVFP4: 39, tensor.Q1_0: 40, tensor.Q2_0: 41,
}

func fileTypeName(md gguf.Metadata, counts map[tensor.Type]int) string {
	if ft, err := md.Uint("general.file_type"); err == nil {
		if name, ok := ftypeNames[uint32(ft)]; ok && ft <= math.MaxUint32 {
			return name
		}
		return "unknown, may not work"
	}
	best, bestCount := tensor.F32, -1
	for t, n := range counts {
		if n > bestCount || n == bestCount && t < best { // lowest id on ties, for a stable answer
			best, bestCount = t, n
		}
	}
	name := "unknown, may not work"
	if ft, known := guessedFileTypes[best]; known {
		name = ftypeNames[ft]
	}
	return "(guessed) " + name
}

// benchPrinter writes results as they come.
type benchPrinter interface {
	header()
	row(r benchResult) error
	footer() error
}

func newBenchPrinter(format string, w io.Writer, configs []benchConfig, gpu bool) benchPrinter {
	switch format {
	case "json":
		return &jsonBenchPrinter{w: w}
	case "jsonl":
		return &jsonBenchPrinter{w: w, lines: true}
	case "csv":
		return &csvBenchPrinter{w: w}
	}
	return &markdownBenchPrinter{w: w, columns: markdownColumns(configs, gpu)}
}

// csvBenchPrinter writes llama-bench's -o csv: a header of the fields, then one line per
// test, every value quoted.
type csvBenchPrinter struct{ w io.Writer }

// csvFields are benchResult's fields that llama-bench's CSV has: the scalar ones, by their
// JSON names.
func csvFields() []reflect.StructField {
	var out []reflect.StructField
	t := reflect.TypeFor[benchResult]()
	for i := range t.NumField() {
		f := t.Field(i)
		if k := f.Type.Kind(); k == reflect.Slice || k == reflect.Pointer || strings.Contains(f.Tag.Get("json"), "omitempty") {
			continue
		}
		out = append(out, f)
	}
	return out
}

func (p *csvBenchPrinter) header() {
	var names []string
	for _, f := range csvFields() {
		names = append(names, strings.Split(f.Tag.Get("json"), ",")[0])
	}
	fmt.Fprintln(p.w, strings.Join(names, ","))
}

func (p *csvBenchPrinter) row(r benchResult) error {
	v := reflect.ValueOf(r)
	var cells []string
	for _, f := range csvFields() {
		x := v.FieldByIndex(f.Index).Interface()
		if b, ok := x.(bool); ok {
			x = boolDigit(b)
		}
		cells = append(cells, `"`+strings.ReplaceAll(fmt.Sprint(x), `"`, `""`)+`"`)
	}
	_, err := fmt.Fprintln(p.w, strings.Join(cells, ","))
	return err
}

func (p *csvBenchPrinter) footer() error { return nil }

// jsonBenchPrinter writes one object per test: an indented JSON array, as llama-bench -o
// json, or with lines one compact object a line, as -o jsonl.
type jsonBenchPrinter struct {
	w     io.Writer
	lines bool
	count int
}

func (p *jsonBenchPrinter) header() {
	if !p.lines {
		fmt.Fprint(p.w, "[\n")
	}
}

func (p *jsonBenchPrinter) row(r benchResult) error {
	if p.lines {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(p.w, "%s\n", b)
		return err
	}
	b, err := json.MarshalIndent(r, "  ", "  ")
	if err != nil {
		return err
	}
	sep := ""
	if p.count > 0 {
		sep = ",\n"
	}
	p.count++
	_, err = fmt.Fprintf(p.w, "%s  %s", sep, b)
	return err
}

func (p *jsonBenchPrinter) footer() error {
	if p.lines {
		return nil
	}
	_, err := fmt.Fprint(p.w, "\n]\n")
	return err
}

// markdownColumn is one column of llama-bench's markdown table: its title, its width
// (negative: left-aligned) and its value.
type markdownColumn struct {
	title string
	width int
	value func(r *benchResult) string
}

// markdownColumns are llama-bench's columns for a CPU backend: model, size, params,
// backend, threads, then each setting given other than its default or with several values,
// then test and t/s.
func markdownColumns(configs []benchConfig, gpu bool) []markdownColumn {
	cols := []markdownColumn{
		{"model", -30, func(r *benchResult) string { return r.ModelType }},
		{"size", 10, func(r *benchResult) string { return formatSize(r.ModelSize) }},
		{"params", 10, func(r *benchResult) string { return formatParams(r.ModelNParams) }},
		{"backend", -10, func(r *benchResult) string { return r.Backends }},
		{"threads", 7, func(r *benchResult) string { return strconv.Itoa(r.NThreads) }},
	}
	def := placement.DefaultRules()
	varies := func(value func(placement.Rules) string) bool {
		for _, c := range configs {
			if value(c.rules) != value(def) || value(c.rules) != value(configs[0].rules) {
				return true
			}
		}
		return false
	}
	// A GPU's rows show the layers offloaded, as llama-bench's do for a GPU backend.
	if gpu || varies(func(r placement.Rules) string { return strconv.Itoa(r.GPULayers) }) {
		cols = append(cols, markdownColumn{"ngl", 3, func(r *benchResult) string { return strconv.Itoa(r.NGPULayers) }})
	}
	if varies(func(r placement.Rules) string { return strconv.Itoa(nCPUMoE(r)) }) {
		cols = append(cols, markdownColumn{"n_cpu_moe", 9, func(r *benchResult) string { return strconv.Itoa(r.NCPUMoE) }})
	}
	if varies(func(r placement.Rules) string { return strconv.Itoa(r.Batch) }) {
		cols = append(cols, markdownColumn{"n_batch", 7, func(r *benchResult) string { return strconv.Itoa(r.NBatch) }})
	}
	if varies(func(r placement.Rules) string { return strconv.Itoa(r.UBatch) }) {
		cols = append(cols, markdownColumn{"n_ubatch", 8, func(r *benchResult) string { return strconv.Itoa(r.NUBatch) }})
	}
	if varies(func(r placement.Rules) string { return r.CacheK.Info().Name }) {
		cols = append(cols, markdownColumn{"type_k", 6, func(r *benchResult) string { return r.TypeK }})
	}
	if varies(func(r placement.Rules) string { return r.CacheV.Info().Name }) {
		cols = append(cols, markdownColumn{"type_v", 6, func(r *benchResult) string { return r.TypeV }})
	}
	if varies(func(r placement.Rules) string { return strconv.FormatBool(r.KVOffload) }) {
		cols = append(cols, markdownColumn{"nkvo", 4, func(r *benchResult) string { return boolDigit(r.NoKVOffload) }})
	}
	if varies(func(r placement.Rules) string { return r.FlashAttn.String() }) {
		cols = append(cols, markdownColumn{"fa", 3, func(r *benchResult) string { return strconv.Itoa(r.FlashAttn) }})
	}
	if varies(func(r placement.Rules) string { return r.LoadMode.String() }) {
		cols = append(cols, markdownColumn{"lm", -10, func(r *benchResult) string { return r.LoadMode }})
	}
	if varies(func(r placement.Rules) string { return strconv.FormatBool(r.OpOffload) }) {
		cols = append(cols, markdownColumn{"nopo", 4, func(r *benchResult) string { return strconv.Itoa(r.NoOpOffload) }})
	}
	withSER := len(configs) > 0 && configs[0].ser != nil
	if withSER {
		cols = append(cols, markdownColumn{"ser", 8, func(r *benchResult) string { return r.SER }})
	}
	cols = append(cols,
		markdownColumn{"test", 15, func(r *benchResult) string { return r.testName() }},
		markdownColumn{"t/s", 20, func(r *benchResult) string { return fmt.Sprintf("%.2f ± %.2f", r.AvgTS, r.StddevTS) }},
	)
	if withSER {
		cols = append(cols,
			markdownColumn{"PPL", 10, func(r *benchResult) string { return fmt.Sprintf("%.4g", r.SERQuality.PPL) }},
			markdownColumn{"KLD", 8, func(r *benchResult) string { return fmt.Sprintf("%.4f", r.SERQuality.MeanKLD) }},
			markdownColumn{"same top", 8, func(r *benchResult) string { return fmt.Sprintf("%.1f%%", r.SERQuality.SameTop) }},
		)
	}
	return cols
}

func boolDigit(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// boolInt is 1 for true, as llama-bench's integer fields hold switches (no_op_offload).
func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// formatSize and formatParams are llama-bench's: MiB below 1 GiB, M below a billion.
func formatSize(b uint64) string {
	if b < 1<<30 {
		return fmt.Sprintf("%.2f MiB", float64(b)/(1<<20))
	}
	return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30))
}

func formatParams(n uint64) string {
	if n < 1e9 {
		return fmt.Sprintf("%.2f M", float64(n)/1e6)
	}
	return fmt.Sprintf("%.2f B", float64(n)/1e9)
}

type markdownBenchPrinter struct {
	w       io.Writer
	columns []markdownColumn
}

// header writes the titles and the alignment row (":" marks right-aligned columns). Go's
// widths count characters, so "±" needs none of llama-bench's byte-width adjustment.
func (p *markdownBenchPrinter) header() {
	var titles, rule strings.Builder
	for _, c := range p.columns {
		fmt.Fprintf(&titles, "| %*s ", c.width, c.title)
		end := "-"
		if c.width > 0 {
			end = ":"
		}
		fmt.Fprintf(&rule, "| %s%s ", strings.Repeat("-", abs(c.width)-1), end)
	}
	fmt.Fprintf(p.w, "%s|\n%s|\n", titles.String(), rule.String())
}

func (p *markdownBenchPrinter) row(r benchResult) error {
	var line strings.Builder
	for _, c := range p.columns {
		fmt.Fprintf(&line, "| %*s ", c.width, c.value(&r))
	}
	_, err := fmt.Fprintf(p.w, "%s|\n", line.String())
	return err
}

func (p *markdownBenchPrinter) footer() error {
	_, err := fmt.Fprintf(p.w, "\nbuild: moerun %s, CPU kernels %s\n", version(), tensor.KernelLevel())
	return err
}

func abs(n int) int { return max(n, -n) }

// startCPUProfile starts Go's CPU profiler writing to path; the returned function stops it.
func startCPUProfile(path string) (stop func(), err error) {
	out, err := os.Create(path)
	if err != nil {
		return nil, usageError{fmt.Errorf("--cpuprofile: %w", err)}
	}
	if err := pprof.StartCPUProfile(out); err != nil {
		out.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		out.Close()
	}, nil
}
