package main

import (
	"errors"
	"github.com/moerun/moerun/backend/sim"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/alecthomas/kong"
	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/gguf/synth"
	"github.com/moerun/moerun/placement"
	"github.com/moerun/moerun/tensor"
)

// placeCmd is `moerun place`: llama.cpp's placement decision for a model, flags and devices,
// without loading any weights. Its llama.cpp flags are kong fields named by their canonical
// long spelling (see llamaargs.go); their values are read with llama.cpp's own rules, in
// llama.cpp's order (environment first, then the command line left to right).
type placeCmd struct {
	Gguf   string `arg:"" optional:"" name:"model-file" help:"GGUF model (any part of a split model); or give it with -m."`
	Model  string `short:"m" name:"model" placeholder:"FILE" help:"GGUF model, as llama-server takes it (-m)." group:"model"`
	Preset string `name:"preset" placeholder:"NAME[:MIX]" help:"Plan a built-in model layout instead of a file, e.g. deepseek-v3:q4_k_m (list: moerun synth --list)." group:"model"`

	placementFlags `embed:""`

	JSON    bool   `name:"json" help:"Write JSON (schema moerun.place/v1, see docs/schemas.md) instead of text." group:"output"`
	Tensors bool   `name:"tensors" help:"List every tensor with its device and the rule that placed it." group:"output"`
	HTML    string `name:"html" placeholder:"FILE" type:"path" help:"Also write a self-contained HTML report with the coloured layer map." group:"output"`
	SVG     string `name:"svg" placeholder:"FILE" type:"path" help:"Also write the coloured layer map as SVG." group:"output"`

	// Prediction (hardware.go).
	Predict  bool          `name:"predict" help:"Predict decode and prompt speed on the machine the hardware profile and flags describe." group:"output"`
	Hardware hardwareFlags `embed:"" group:"prediction"`
}

// Help is the command's detailed help: what to know first, and an example that docs/docs_test.go runs.
func (*placeCmd) Help() string {
	return "Give llama-server's flags, or paste a whole llama-server command line; describe the devices with --gpu, --gpus or --device-mem and --ram. Guide: docs/guide.md; flags: docs/flags.md.\n" +
		"\n" +
		"Example (an 8 GB GPU, 64 GB of RAM, the experts of the first 37 blocks in RAM):\n" +
		"\n" +
		"    moerun place --preset qwen3-30b-a3b --gpu 8GiB --ram 64GiB -ngl 99 --n-cpu-moe 37 -ctk q8_0 -ctv q8_0 -c 32768"
}

// placeLlamaOptions are the llama.cpp options place reads (by key, see llamaargs.go); the
// others in a pasted command line are accepted and reported as ignored.
var placeLlamaOptions = map[string]bool{"model": true}

func init() {
	for key := range placeHandlers {
		placeLlamaOptions[key] = true
	}
}

// AfterApply records the order of the flags, which llama.cpp's semantics depend on: -ot,
// --cpu-moe and --n-cpu-moe append to one list, and the load-mode flags override each other.
func (c *placementFlags) AfterApply(kctx *kong.Context) error {
	for _, p := range kctx.Path {
		if p.Flag != nil {
			c.flagOrder = append(c.flagOrder, p.Flag.Name)
		}
	}
	return nil
}

func (c *placeCmd) Run(e *env) error {
	if c.Hardware.GPUModel == "list" {
		return listGPUModels(e.stdout)
	}
	rules, err := c.rules(os.LookupEnv)
	if err != nil {
		return err
	}
	devs, err := c.devices()
	if err != nil {
		return err
	}
	hw, devs, err := c.hardware(devs)
	if err != nil {
		return err
	}
	model, closeModel, err := c.model()
	if err != nil {
		return err
	}
	defer closeModel()
	plan, err := placement.Place(model, rules, devs)
	if err != nil {
		return placeError(err)
	}
	ignored := c.LlamaIgnored
	if len(ignored) > 0 {
		plan.Notes = append(plan.Notes, "accepted but ignored (they do not affect placement): "+strings.Join(ignored, ", "))
	}
	if c.Predict {
		if err := c.Hardware.predict(plan, hw); err != nil {
			return err
		}
	}
	if c.HTML != "" {
		if err := writeFile(c.HTML, plan.WriteHTML); err != nil {
			return err
		}
	}
	if c.SVG != "" {
		if err := writeFile(c.SVG, plan.WriteSVG); err != nil {
			return err
		}
	}
	if c.JSON {
		return plan.WriteJSON(e.stdout, ignored)
	}
	return plan.WriteText(e.stdout, placement.TextOptions{Tensors: c.Tensors})
}

func writeFile(path string, write func(w io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// placeError marks the planner's complaints about the user's rules or model as usage errors
// (exit 2).
func placeError(err error) error {
	var ue *placement.UsageError
	var be *placement.UnknownBufferTypeError
	var pe *placement.PatternError
	var me *placement.ModelError
	if errors.As(err, &ue) || errors.As(err, &be) || errors.As(err, &pe) || errors.As(err, &me) {
		return usageError{err}
	}
	return err
}

// model opens the GGUF file, reading only its header, or builds a preset's layout.
func (c *placeCmd) model() (placement.Model, func(), error) {
	path := c.Model
	if env, ok := os.LookupEnv("LLAMA_ARG_MODEL"); ok && path == "" && c.Gguf == "" && c.Preset == "" {
		path = env // llama-server takes the model from the environment too
	}
	switch {
	case c.Preset != "" && (path != "" || c.Gguf != ""):
		return placement.Model{}, nil, badInput("give a model file or --preset, not both")
	case c.Preset != "":
		return presetModel(c.Preset)
	case path == "" && c.Gguf == "":
		return placement.Model{}, nil, badInput("no model: give a GGUF file (moerun place MODEL.gguf, or -m MODEL.gguf) or a built-in --preset (moerun synth --list)")
	case path != "" && c.Gguf != "" && path != c.Gguf:
		return placement.Model{}, nil, badInput("two models given: %s and -m %s", c.Gguf, path)
	case path == "":
		path = c.Gguf
	}
	// Placement needs per-layer arrays (a few hundred entries at most) but not the
	// vocabulary: skipping its 150k strings makes the header read several times faster.
	f, err := gguf.OpenWith(path, gguf.Options{ArrayLimit: 4096})
	if err != nil {
		return placement.Model{}, nil, err
	}
	return placement.Model{Name: path, Metadata: f.Metadata, Tensors: f.Tensors}, func() { f.Close() }, nil
}

// presetModel lays out a built-in preset in memory: nothing is read or written.
func presetModel(spec string) (placement.Model, func(), error) {
	m, err := synth.Build(spec, synth.Options{})
	if err != nil {
		return placement.Model{}, nil, badInput("--preset: %v", err)
	}
	layout, err := m.Layout()
	if err != nil {
		return placement.Model{}, nil, err
	}
	return placement.Model{Name: "preset " + spec, Metadata: m.Metadata, Tensors: layout.Tensors}, func() {}, nil
}

// devices builds the dry run's inventory from --gpu, --gpus, --device-mem and --ram; without
// GPU flags it takes the GPUs this machine has.
func (c *placementFlags) devices() ([]backend.Device, error) {
	ram := int64(0)
	if c.RAM != "" {
		var err error
		if ram, err = parseSize("--ram", c.RAM); err != nil {
			return nil, err
		}
	}
	var devs []backend.Device
	given := 0
	if c.GPU != "" {
		given++
		size, err := parseSize("--gpu", c.GPU)
		if err != nil {
			return nil, err
		}
		devs = append(devs, backend.GPU(0, size))
	}
	if c.GPUs != "" {
		given++
		for i, s := range strings.Split(c.GPUs, ",") {
			size, err := parseSize("--gpus", s)
			if err != nil {
				return nil, err
			}
			devs = append(devs, backend.GPU(i, size))
		}
	}
	if c.SimGPU != "" {
		given++
		sims, err := c.simGPUs()
		if err != nil {
			return nil, err
		}
		for i, size := range sims {
			devs = append(devs, sim.Device(i, size))
		}
	}
	if c.DeviceMem != "" {
		given++
		for _, item := range strings.Split(c.DeviceMem, ",") {
			name, s, ok := strings.Cut(item, "=")
			if !ok || name == "" {
				return nil, badInput("--device-mem %q: want NAME=SIZE items such as CUDA0=8GiB", item)
			}
			if name == "CPU" {
				return nil, badInput("--device-mem: give the host's memory with --ram, not CPU=")
			}
			size, err := parseSize("--device-mem "+name, s)
			if err != nil {
				return nil, err
			}
			devs = append(devs, namedGPU(name, size))
		}
	}
	if given > 1 {
		return nil, badInput("give the GPUs once: --gpu, --gpus, --sim-gpu or --device-mem")
	}
	if given == 0 {
		// No GPU flags: the GPUs this machine has, with their free memory, as a CUDA
		// build finds them (a build or machine without one has none).
		gpus, _ := gpuInventory()
		devs = append(devs, gpus...)
	}
	devs = append(devs, backend.CPU(ram))
	if err := backend.Validate(devs); err != nil {
		return nil, badInput("devices: %v", err)
	}
	return devs, nil
}

// simGPUs are the memory sizes --sim-gpu gives, one per simulated GPU (none without it).
func (c *placementFlags) simGPUs() ([]int64, error) {
	if c.SimGPU == "" {
		return nil, nil
	}
	var sizes []int64
	for _, s := range strings.Split(c.SimGPU, ",") {
		size, err := parseSize("--sim-gpu", s)
		if err != nil {
			return nil, err
		}
		if size <= 0 {
			return nil, badInput("--sim-gpu %q: a simulated GPU needs some memory", s)
		}
		sizes = append(sizes, size)
	}
	return sizes, nil
}

// namedGPU describes a device named like a llama.cpp buffer type: CUDA, ROCm, MUSA, SYCL and
// Vulkan devices have a pinned host buffer and offload large batches; RPC devices have
// neither; Metal maps file pages directly.
func namedGPU(name string, size int64) backend.Device {
	d := backend.GPU(0, size)
	d.Name = name
	prefix := strings.TrimRight(name, "0123456789")
	switch prefix {
	case "CUDA", "ROCm", "MUSA", "SYCL", "Vulkan":
		d.HostBuffer = prefix + "_Host"
	case "Metal", "MTL":
		d.HostBuffer, d.MapsHostMemory = "", true
	default:
		d.HostBuffer, d.OffloadsOps = "", false
	}
	return d
}

// parseSize reads a memory size: a number and a unit; KiB/MiB/GiB/TiB and K/M/G/T are
// binary, KB/MB/GB/TB decimal.
func parseSize(flag, s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i <= 0 {
		return 0, badInput("%s %q: want a number and a unit, such as 8GiB, 8G or 8192MiB", flag, s)
	}
	num, err := strconv.ParseFloat(t[:i], 64)
	if err != nil {
		return 0, badInput("%s %q: %q is not a number", flag, s, t[:i])
	}
	units := map[string]float64{"B": 1, "K": 1 << 10, "KiB": 1 << 10, "M": 1 << 20, "MiB": 1 << 20, "G": 1 << 30, "GiB": 1 << 30,
		"T": 1 << 40, "TiB": 1 << 40, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}
	mul, ok := units[strings.TrimSpace(t[i:])]
	if !ok {
		return 0, badInput("%s %q: unknown unit %q (use B, KiB, MiB, GiB, TiB, or K, M, G, T)", flag, s, strings.TrimSpace(t[i:]))
	}
	bytes := num * mul
	if bytes < 1 || bytes > math.MaxInt64/2 {
		// Below one byte the size would round to nothing: a 0-byte device.
		return 0, badInput("%s %q: the size must be at least one byte and below 4 EiB", flag, s)
	}
	return int64(bytes), nil
}

// placeHandler applies one llama.cpp option to the rules as llama.cpp's handler does; value
// is "" for options without one, negated marks a negating spelling (--no-mmap).
type placeHandler func(r *placement.Rules, flag, value string, negated bool) error

// placeHandlers are the llama.cpp options place reads, by key.
var placeHandlers = map[string]placeHandler{
	"n-gpu-layers": parsed(placement.ParseGPULayers, func(r *placement.Rules, n int) { r.GPULayers = n }),
	"override-tensor": func(r *placement.Rules, flag, v string, _ bool) error {
		items, err := placement.ParseOverrideTensor(flag, v)
		r.Items = append(r.Items, items...)
		return err
	},
	"cpu-moe": func(r *placement.Rules, flag, _ string, _ bool) error {
		r.Items = append(r.Items, placement.CPUMoEItem(flag))
		return nil
	},
	"n-cpu-moe": func(r *placement.Rules, flag, v string, _ bool) error {
		item, err := placement.NCPUMoEItem(flag, v)
		if err == nil {
			r.Items = append(r.Items, item)
		}
		return err
	},
	"tensor-split": parsed(placement.ParseTensorSplit, func(r *placement.Rules, ts []float32) { r.TensorSplit = ts }),
	"split-mode":   parsed(placement.ParseSplitMode, func(r *placement.Rules, m placement.SplitMode) { r.SplitMode = m }),
	"main-gpu":     intHandler(func(r *placement.Rules, n int) { r.MainGPU = n }),
	"batch-size":   intHandler(func(r *placement.Rules, n int) { r.Batch = n }),
	"ubatch-size":  intHandler(func(r *placement.Rules, n int) { r.UBatch = n }),
	"fit-ctx":      intHandler(func(r *placement.Rules, n int) { r.FitMinCtx = int64(n) }),
	"ctx-size": intHandler(func(r *placement.Rules, n int) {
		r.CtxSize = n
		if n == 0 { // an explicit full context: --fit must not reduce it
			r.FitMinCtx = math.MaxUint32
		}
	}),
	"parallel": func(r *placement.Rules, flag, v string, _ bool) error {
		n, err := placement.Stoi(v)
		if err != nil {
			return argError(flag, err)
		}
		if n == 0 {
			return argError(flag, errors.New("error: invalid value for n_parallel"))
		}
		r.Parallel = n
		return nil
	},
	"device": func(r *placement.Rules, flag, v string, _ bool) error {
		if v == "none" {
			r.Devices = []string{}
			return nil
		}
		r.Devices = strings.Split(v, ",")
		if v == "" {
			return argError(flag, errors.New("no devices specified"))
		}
		return nil
	},
	"cache-type-k": parsed(placement.ParseCacheType, func(r *placement.Rules, t tensor.Type) { r.CacheK = t }),
	"cache-type-v": parsed(placement.ParseCacheType, func(r *placement.Rules, t tensor.Type) { r.CacheV = t }),
	"flash-attn":   parsed(placement.ParseFlashAttn, func(r *placement.Rules, f placement.FlashAttn) { r.FlashAttn = f }),
	"kv-offload":   boolHandler(func(r *placement.Rules, on bool) { r.KVOffload = on }),
	"kv-unified": boolHandler(func(r *placement.Rules, on bool) {
		r.KVUnified = placement.False
		if on {
			r.KVUnified = placement.True
		}
	}),
	"repack":                      boolHandler(func(r *placement.Rules, on bool) { r.Repack = on }),
	"op-offload":                  boolHandler(func(r *placement.Rules, on bool) { r.OpOffload = on }),
	"offload-only-active-experts": boolHandler(func(r *placement.Rules, on bool) { r.OffloadAllExperts = !on }),
	"swa-full":                    boolHandler(func(r *placement.Rules, _ bool) { r.SWAFull = true }),
	"no-host":                     boolHandler(func(r *placement.Rules, _ bool) { r.NoHost = true }),
	"mlock":                       boolHandler(func(r *placement.Rules, _ bool) { r.LoadMode = placement.LoadMlock }),
	"mmap": boolHandler(func(r *placement.Rules, on bool) {
		r.LoadMode = placement.LoadNone
		if on {
			r.LoadMode = placement.LoadMmap
		}
	}),
	"direct-io": boolHandler(func(r *placement.Rules, on bool) {
		r.LoadMode = placement.LoadNone
		if on {
			r.LoadMode = placement.LoadDirectIO
		}
	}),
	"load-mode": func(r *placement.Rules, flag, v string, _ bool) error {
		m, err := placement.ParseLoadMode(v)
		if err != nil {
			return argError(flag, err)
		}
		r.LoadMode = m
		return nil
	},
	"fit":        parsed(placement.ParseOnOff, func(r *placement.Rules, on bool) { r.Fit = on }),
	"fit-target": parsed(placement.ParseFitTarget, func(r *placement.Rules, t []int64) { r.FitTarget = t }),
}

// parsed makes a handler from one of placement's value parsers.
func parsed[T any](parse func(flag, value string) (T, error), set func(*placement.Rules, T)) placeHandler {
	return func(r *placement.Rules, flag, v string, _ bool) error {
		x, err := parse(flag, v)
		if err != nil {
			return err
		}
		set(r, x)
		return nil
	}
}

// intHandler reads an integer as std::stoi does.
func intHandler(set func(*placement.Rules, int)) placeHandler {
	return parsed(func(flag, v string) (int, error) {
		n, err := placement.Stoi(v)
		if err != nil {
			return 0, argError(flag, err)
		}
		return n, nil
	}, set)
}

func boolHandler(set func(*placement.Rules, bool)) placeHandler {
	return func(r *placement.Rules, _, _ string, negated bool) error {
		set(r, !negated)
		return nil
	}
}

// argError words a bad value as llama.cpp does.
func argError(flag string, err error) error {
	what := "argument"
	if strings.HasPrefix(flag, "LLAMA_ARG_") {
		what = "environment variable"
	}
	return badInput("error while handling %s %q: %v", what, flag, err)
}

// rules reads the llama.cpp options into placement rules in llama.cpp's order: the
// LLAMA_ARG_* environment variables in the order llama.cpp defines its options, then the
// command line from left to right. Scalars take the last value; -ot, --cpu-moe and
// --n-cpu-moe append to one list.
func (c *placementFlags) rules(lookupEnv func(string) (string, bool)) (placement.Rules, error) {
	r := placement.DefaultRules()
	sem, err := placement.ParseSemantics(c.Semantics)
	if err != nil {
		return r, badInput("%v", err)
	}
	r.Semantics = sem
	if sem == placement.IKLlama {
		r.Fit = false // off by default in ik_llama.cpp
	}
	for i := range llamaServerOptions {
		o := &llamaServerOptions[i]
		h := placeHandlers[o.key()]
		if h == nil || o.env == "" {
			continue
		}
		value, ok := envValue(o, lookupEnv)
		if !ok {
			continue
		}
		if err := applyEnv(&r, o, h, value); err != nil {
			return r, placeError(err)
		}
	}
	fields := c.fields()
	seen := map[string]int{}
	last := map[string]int{}
	for i, name := range c.flagOrder {
		last[name] = i
	}
	for i, name := range c.flagOrder {
		h := placeHandlers[name]
		if h == nil {
			continue
		}
		flag := "-" + strings.TrimLeft(llamaSpellingOf(name), "-")
		n := seen[name]
		seen[name]++
		var err error
		switch f := fields[name].(type) {
		case *[]string: // repeatable: every occurrence appends
			err = h(&r, flag, (*f)[n], false)
		case *bool:
			if name == "cpu-moe" || i == last[name] {
				err = h(&r, flag, "", !*f)
			}
		case *string:
			if i == last[name] {
				err = h(&r, flag, *f, false)
			}
		}
		if err != nil {
			return r, placeError(err)
		}
	}
	if v, ok := lookupEnv("GGML_OP_OFFLOAD_MIN_BATCH"); ok { // ggml's, read by its GPU backends
		r.OpOffloadMinBatch = placement.ParseOffloadMinBatch(v)
	}
	if r.HotStats, err = readRoutingStats(c.HotStats); err != nil {
		return r, err
	}
	if c.ExpertCache != "" { // moerun's own: llama.cpp has no such option
		if r.ExpertCache, err = placement.ParseExpertCache("--expert-cache", c.ExpertCache); err != nil {
			return r, placeError(err)
		}
	}
	return r, nil
}

// llamaSpellingOf is the spelling llama.cpp's error messages would most likely show: the
// option's first spelling (-ngl, -ot, -c).
func llamaSpellingOf(key string) string {
	for i := range llamaServerOptions {
		if llamaServerOptions[i].key() == key {
			return llamaServerOptions[i].names[0]
		}
	}
	return "--" + key
}

// envValue reads an option's environment variable; for a negatable option a set
// LLAMA_ARG_NO_… variable means off, as in llama.cpp.
func envValue(o *llamaOption, lookupEnv func(string) (string, bool)) (string, bool) {
	if len(o.negs) > 0 {
		if _, set := lookupEnv(strings.Replace(o.env, "LLAMA_ARG_", "LLAMA_ARG_NO_", 1)); set {
			return "0", true
		}
	}
	return lookupEnv(o.env)
}

// applyEnv applies an environment value: flags without a value need a truthy one, boolean
// ones a truthy or falsey one.
func applyEnv(r *placement.Rules, o *llamaOption, h placeHandler, value string) error {
	switch {
	case o.values > 0:
		return h(r, o.env, value, false)
	case len(o.negs) == 0:
		if placement.IsTruthy(value) {
			return h(r, o.env, "", false)
		}
		return nil
	case placement.IsTruthy(value):
		return h(r, o.env, "", false)
	case placement.IsFalsey(value):
		return h(r, o.env, "", true)
	}
	return argError(o.env, errors.New("invalid boolean value"))
}

// fields maps option keys to the kong fields holding their command-line values.
func (c *placementFlags) fields() map[string]any {
	return map[string]any{
		"n-gpu-layers": &c.GPULayers, "override-tensor": &c.Override, "cpu-moe": &c.CPUMoE, "n-cpu-moe": &c.NCPUMoE,
		"tensor-split": &c.TensorSplit, "split-mode": &c.SplitMode, "main-gpu": &c.MainGPU, "device": &c.Device,
		"ctx-size": &c.CtxSize, "batch-size": &c.BatchSize, "ubatch-size": &c.UBatchSize, "parallel": &c.Parallel,
		"cache-type-k": &c.CacheTypeK, "cache-type-v": &c.CacheTypeV, "flash-attn": &c.FlashAttn,
		"kv-offload": &c.KVOffload, "kv-unified": &c.KVUnified, "swa-full": &c.SWAFull, "mmap": &c.Mmap, "mlock": &c.Mlock,
		"direct-io": &c.DirectIO, "load-mode": &c.LoadMode, "no-host": &c.NoHost, "repack": &c.Repack,
		"op-offload": &c.OpOffload, "offload-only-active-experts": &c.ActiveOnly, "fit": &c.Fit, "fit-target": &c.FitTarget, "fit-ctx": &c.FitCtx,
	}
}
