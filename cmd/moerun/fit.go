package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/moerun/moerun/placement"
	"github.com/moerun/moerun/tensor"
)

// fitCmd is `moerun fit`: the fastest placement of a model that fits a machine, among those a
// llama.cpp user can write (-ngl, --n-cpu-moe, -ot expert moves, -ts, KV cache type,
// ubatch), by the predictor; printed as flags ready to paste. The llama.cpp flags it takes
// (-c, -np, -fa, -ctk/-ctv, -ub, -fitt, …) are the user's fixed settings; -ctk/-ctv and -ub
// fix what fit would otherwise try.
type fitCmd struct {
	Gguf   string `arg:"" optional:"" name:"model-file" help:"GGUF model (any part of a split model); or give it with -m."`
	Model  string `short:"m" name:"model" placeholder:"FILE" help:"GGUF model, as llama-server takes it (-m)." group:"model"`
	Preset string `name:"preset" placeholder:"NAME[:MIX]" help:"Fit a built-in model layout instead of a file (list: moerun synth --list)." group:"model"`

	placementFlags `embed:""`
	Hardware       hardwareFlags `embed:"" group:"prediction"`

	Objective string `name:"objective" default:"tg" enum:"tg,pp,balanced" help:"What to maximise: tg (decode tokens/s), pp (prompt tokens/s) or balanced (requests/s, see --request)." group:"search"`
	Request   string `name:"request" default:"4096:512" placeholder:"PROMPT:GENERATED" help:"The request the balanced objective times: prompt and generated tokens." group:"search"`
	KVTypes   string `name:"kv-types" default:"f16,q8_0" placeholder:"TYPE,..." help:"KV cache types to try (-ctk/-ctv fix one instead)." group:"search"`
	UBatches  string `name:"ubatches" default:"512,1024,2048,4096" placeholder:"N,..." help:"ubatch sizes to try (-ub fixes one instead)." group:"search"`
	RunnerUps int    `name:"runner-ups" default:"4" help:"Alternatives to show besides the best." group:"search"`
	JSON      bool   `name:"json" help:"Write JSON (schema moerun.fit/v1, see docs/schemas.md) instead of text." group:"output"`
	SVG       string `name:"svg" placeholder:"FILE" type:"path" help:"Also plot predicted tg and pp against the number of expert layers in RAM as SVG." group:"output"`
}

// Help is the command's detailed help: what to know first, and an example that docs/docs_test.go runs.
func (*fitCmd) Help() string {
	return "Searches -ngl, --n-cpu-moe/-ot, the KV cache type and the ubatch for the fastest placement that fits, and prints it as llama-server and moerun command lines. Describe the machine with a profile (moerun calibrate) or flags. Guide: docs/guide.md, docs/predict.md.\n" +
		"\n" +
		"Example (a laptop RTX 4060 with dual-channel DDR5-5600):\n" +
		"\n" +
		"    moerun fit --preset qwen3-30b-a3b --gpu-model rtx4060-laptop --ram 64GiB --ram-channels 2 --ram-speed 5600 -c 32768"
}

// defaultFitCtx is the context fit plans for when -c is not given: llama.cpp's --fit-ctx.
const defaultFitCtx = 4096

func (c *fitCmd) Run(e *env) error {
	if c.Hardware.GPUModel == "list" {
		return listGPUModels(e.stdout)
	}
	rules, err := c.rules(os.LookupEnv)
	if err != nil {
		return err
	}
	if rules.Semantics != placement.Mainline {
		return badInput("fit writes llama.cpp's flags: --semantics ik_llama.cpp is not supported")
	}
	var notes []string
	if len(c.LlamaIgnored) > 0 {
		notes = append(notes, "accepted but ignored (they do not affect placement; -t sets the threads predicted): "+strings.Join(c.LlamaIgnored, ", "))
	}
	// A pasted command line brings its own placement; fit chooses it, so those flags are
	// set aside (and named) rather than refused.
	var chosen []string
	for _, it := range rules.Items {
		chosen = append(chosen, it.Origin())
	}
	if rules.GPULayers != placement.NGLAuto {
		ngl := c.GPULayers
		if ngl == "" {
			ngl = "(LLAMA_ARG_N_GPU_LAYERS)"
		}
		chosen = append(chosen, "-ngl "+ngl)
	}
	if len(rules.TensorSplit) > 0 {
		chosen = append(chosen, "-ts "+c.TensorSplit)
	}
	if len(chosen) > 0 {
		notes = append(notes, "fit chooses -ngl, -ot, --cpu-moe, --n-cpu-moe and -ts itself; set aside: "+strings.Join(chosen, ", "))
		rules.Items, rules.GPULayers, rules.TensorSplit = nil, placement.NGLAuto, nil
	}
	if rules.CtxSize == 0 {
		rules.CtxSize = defaultFitCtx
		notes = append(notes, fmt.Sprintf("context: -c not given, so %d tokens", defaultFitCtx))
	}
	opts, err := c.searchOptions(rules)
	if err != nil {
		return err
	}
	devs, err := c.devices()
	if err != nil {
		return err
	}
	hw, err := c.Hardware.hardware(llamaThreads(c.LlamaIgnored))
	if err != nil {
		return err
	}
	if devs, err = hardwareDevices(devs, hw, c.GPU != "" || c.GPUs != "" || c.DeviceMem != "", c.RAM != ""); err != nil {
		return err
	}
	stats, err := c.Hardware.routingStats()
	if err != nil {
		return err
	}
	opts.Predict = placement.PredictOptions{Depth: c.Hardware.Depth, Prompt: c.Hardware.Prompt, Routing: stats}
	source := &placeCmd{Gguf: c.Gguf, Model: c.Model, Preset: c.Preset} // the same model flags as place
	model, closeModel, err := source.model()
	if err != nil {
		return err
	}
	defer closeModel()
	res, err := placement.Search(model, rules, devs, hw, opts)
	if err != nil {
		return fitError(err)
	}
	res.Notes = append(notes, res.Notes...)
	fr := &placement.FitResult{SearchResult: res, Model: model.Name, Objective: opts.Objective, Prompt: opts.Prompt,
		Generate: opts.Generate, Context: rules.CtxSize}
	fr.LlamaArg, fr.MoerunArgs = c.commandArgs()
	fr.UserFlags = strings.Join(c.userFlags(), " ")
	if stats != nil && res.Best != nil {
		if fr.WhatIf, err = placement.ExpertWhatIf(res.Best.Plan, hw, stats, opts.Predict); err != nil {
			return badInput("--expert-stats: %v", err)
		}
	}
	if c.SVG != "" {
		if err := writeFile(c.SVG, fr.WriteSVG); err != nil {
			return err
		}
	}
	if c.JSON {
		err = fr.WriteJSON(e.stdout)
	} else {
		err = fr.WriteText(e.stdout)
	}
	if err == nil && res.Best == nil {
		err = errors.New("nothing fits: " + res.Failure)
	}
	return err
}

// fitError marks the search's complaints about the user's flags or model as usage errors;
// a machine described too little (no CPU bandwidth, no GPU size) is one too.
func fitError(err error) error {
	if e := placeError(err); e != err {
		return e
	}
	return badInput("%v", err)
}

// searchOptions reads the objective and what to try, fixing what the user's flags fix.
func (c *fitCmd) searchOptions(rules placement.Rules) (placement.SearchOptions, error) {
	var opts placement.SearchOptions
	var err error
	if opts.Objective, err = placement.ParseObjective(c.Objective); err != nil {
		return opts, badInput("--objective: %v", err)
	}
	p, g, ok := strings.Cut(c.Request, ":")
	opts.Prompt, err = strconv.Atoi(p)
	if gen, err2 := strconv.Atoi(g); !ok || err != nil || err2 != nil || opts.Prompt <= 0 || gen <= 0 {
		return opts, badInput("--request %q: want PROMPT:GENERATED token counts, e.g. 4096:512", c.Request)
	} else {
		opts.Generate = gen
	}
	def := placement.DefaultRules()
	switch {
	case c.CacheTypeK != "" || c.CacheTypeV != "" || rules.CacheK != def.CacheK || rules.CacheV != def.CacheV:
		if rules.CacheK != rules.CacheV {
			return opts, badInput("fit sets -ctk and -ctv alike: give both the same type")
		}
		opts.CacheTypes = []tensor.Type{rules.CacheK}
	default:
		for _, name := range splitList(c.KVTypes) {
			t, err := placement.ParseCacheType("--kv-types", strings.TrimSpace(name))
			if err != nil {
				return opts, badInput("%v", err)
			}
			opts.CacheTypes = append(opts.CacheTypes, t)
		}
	}
	if c.UBatchSize != "" || rules.UBatch != def.UBatch {
		opts.UBatches = []int{rules.UBatch}
	} else {
		for _, s := range splitList(c.UBatches) {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || n <= 0 {
				return opts, badInput("--ubatches %q: want positive sizes such as 512,2048", c.UBatches)
			}
			opts.UBatches = append(opts.UBatches, n)
		}
	}
	if len(opts.CacheTypes) == 0 || len(opts.UBatches) == 0 {
		return opts, badInput("--kv-types and --ubatches need at least one value each")
	}
	switch {
	case c.RunnerUps < 0:
		return opts, badInput("--runner-ups must not be negative")
	case c.RunnerUps == 0:
		opts.RunnerUps = -1 // none (the zero value asks for the default)
	default:
		opts.RunnerUps = c.RunnerUps
	}
	return opts, nil
}

// commandArgs are the model in the printed commands: the file for llama-server and moerun,
// or for a preset a placeholder file name and --preset; then, for moerun, the machine as
// this run described it, so that its prediction is the one fit made.
func (c *fitCmd) commandArgs() (llama, moerun string) {
	var parts []string
	switch {
	case c.Preset != "":
		llama = strings.ReplaceAll(c.Preset, ":", "-") + ".gguf"
		parts = append(parts, "--preset", placement.ShellQuote(c.Preset))
	case c.Model != "":
		llama = c.Model
		parts = append(parts, placement.ShellQuote(c.Model))
	default:
		llama = c.Gguf
		parts = append(parts, placement.ShellQuote(c.Gguf))
	}
	h := c.Hardware
	add := func(flag, value string) {
		if value != "" && value != "0" {
			parts = append(parts, flag, placement.ShellQuote(value))
		}
	}
	num := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	add("--gpu", c.GPU)
	add("--gpus", c.GPUs)
	add("--device-mem", c.DeviceMem)
	add("--ram", c.RAM)
	add("--profile", h.Profile)
	if h.NoProfile {
		parts = append(parts, "--no-profile")
	}
	add("--gpu-model", h.GPUModel)
	add("--gpu-bw", h.GPUBW)
	add("--gpu-tflops", h.GPUTFLOPS)
	add("--ram-bw", num(h.RAMBW))
	add("--ram-channels", strconv.Itoa(h.RAMChannels))
	add("--ram-speed", num(h.RAMSpeed))
	add("--cpu-bw-eff", num(h.CPUBWEff))
	add("--cpu-tflops", num(h.CPUTFLOPS))
	add("--cpu-ghz", num(h.CPUGHz))
	add("--cpu-threads", strconv.Itoa(h.CPUThreads))
	add("--pcie", h.PCIe)
	add("--depth", strconv.Itoa(h.Depth))
	add("--prompt-tokens", strconv.Itoa(h.Prompt))
	add("--expert-stats", h.ExpertStats)
	return llama, strings.Join(parts, " ")
}

// fitWrites are the options fit's own flags set; the user's other placement options are
// repeated in the printed commands.
var fitWrites = map[string]bool{"ctx-size": true, "batch-size": true, "ubatch-size": true, "cache-type-k": true, "cache-type-v": true, "flash-attn": true,
	// The placement fit chooses: the user's is set aside (a note names it), never repeated
	// beside fit's own, where -ot exps=CPU before fit's --n-cpu-moe would move every expert.
	"override-tensor": true, "cpu-moe": true, "n-cpu-moe": true, "n-gpu-layers": true, "tensor-split": true}

// userFlags are the llama.cpp options the user gave that fit keeps as they are (-np,
// --no-mmap, -fitt, …), in their long spelling, which llama-server and moerun both read.
func (c *fitCmd) userFlags() []string {
	fields := c.fields()
	seen := map[string]int{}
	var out []string
	for _, name := range c.flagOrder {
		field, ok := fields[name]
		if !ok || fitWrites[name] {
			continue
		}
		n := seen[name]
		seen[name]++
		switch v := field.(type) {
		case *string:
			if n == 0 { // the last value is the one in the field
				out = append(out, "--"+name, placement.ShellQuote(*v))
			}
		case *[]string:
			out = append(out, "--"+name, placement.ShellQuote((*v)[n]))
		case *bool:
			if n > 0 {
				continue
			}
			if *v {
				out = append(out, "--"+name)
			} else {
				out = append(out, "--no-"+name)
			}
		}
	}
	return out
}
