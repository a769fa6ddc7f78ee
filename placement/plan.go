// Package placement decides, as llama.cpp would, which device holds every tensor of a
// Mixture-of-Experts model, where the KV cache and the compute buffers go and whether it all
// fits — from the model's header and the user's llama.cpp flags alone, in a fraction of a
// millisecond, without touching any weights. It also explains the decision: which rule
// placed each tensor, which rules do nothing, and where the memory goes layer by layer.
//
// The rules are those of llama.cpp at commit 3f545bec (see Rules and Semantics for
// ik_llama.cpp's differences). Place is pure: a model description, the rules and a device
// list in; a *Plan out.
package placement

import (
	"fmt"
	"slices"
	"strings"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/tensor"
)

// Model is what placement needs of a model: its metadata and its tensor list (names,
// types, shapes, sizes). Build it from an opened GGUF file or from an in-memory layout.
type Model struct {
	Name     string // shown in reports: a path or a preset name
	Metadata gguf.Metadata
	Tensors  []gguf.TensorInfo
}

// Storage says how a tensor's bytes get into the memory that holds them.
type Storage int

// The ways weights are stored.
const (
	StorageSkipped  Storage = iota // not loaded at all (NextN/MTP blocks without MTP)
	StorageMapped                  // used in place from the memory-mapped file (zero copy)
	StorageCopied                  // read or copied into a buffer of the device
	StoragePinned                  // copied into pinned host memory (CUDA_Host)
	StorageRepacked                // copied into the CPU's repacked matmul layout (CPU_REPACK)
)

var storageNames = [...]string{"skipped", "mapped", "copied", "pinned", "repacked"}

func (s Storage) String() string { return storageNames[s] }

// TensorUse is where one tensor goes and why.
type TensorUse struct {
	Name    string
	Class   gguf.Class
	Layer   int // block index, -1 for global tensors
	Type    tensor.Type
	Shape   []int64
	Bytes   int64
	Device  string // memory that holds it: "CPU", "CUDA0"; "" when skipped
	Buffer  string // llama.cpp's buffer type: CPU_Mapped, CPU, CPU_REPACK, CUDA_Host, CUDA0
	Storage Storage
	Rule    int    // index into Plan.Rules of the override that decided it, -1 for none
	Reason  string // the rule in words: "-ot exps=CPU", "-ngl layer map (layer 3 → CUDA0)"
	// Tied marks the output matrix llama.cpp makes from token_embd.weight when the model has
	// no output.weight. It costs memory only on a device other than the embedding's.
	Tied bool
	// Default is the device the layer map alone would have chosen.
	Default string
	// Experts is nil for a whole tensor. A routed-expert stack (ffn_*_exps) that an
	// override rule with an expert selector splits by expert has one entry per share
	// instead, consecutive in Plan.Tensors, each listing its experts (sorted ids; together
	// the shares hold every expert once). Shape stays the whole stack's; Bytes is the
	// share's.
	Experts []int
}

// Plan is the complete decision.
type Plan struct {
	Semantics Semantics
	Model     ModelSummary
	Context   Context
	Settings  Settings
	Devices   []DeviceUse
	Layers    []LayerUse // blocks 0..n-1, then the output layer, then the input layer
	Tensors   []TensorUse
	Rules     []RuleUse
	Fit       FitReport
	Notes     []string // what moerun assumed or llama.cpp would print
	Warnings  []string // things that are probably not what the user wants
	// gpuAdvice is the verdict's cure when a GPU is over, planned and verified (see
	// advise).
	gpuAdvice string
	// Prediction is the predicted speed, when the caller asked for one (see Predict); the
	// reports include it.
	Prediction *Prediction
}

// ModelSummary describes the model in a few numbers.
type ModelSummary struct {
	Name, Arch   string
	Layers       int // blocks the main graph runs
	NextN        int // NextN/MTP blocks (not loaded)
	Tensors      int
	Bytes        int64
	Experts      int
	ExpertsUsed  int
	ContextTrain int
	MLA          bool
	// IndexerTopK is how many positions DeepSeek Sparse Attention's lightning indexer
	// keeps per query (DeepSeek-V3.2, GLM-5); 0 for other models.
	IndexerTopK int
}

// Settings are the effective placement parameters after defaults and --fit.
type Settings struct {
	GPULayers     int // effective number of offloaded layers (output layer included)
	GPULayersFlag int // as given (NGLAuto, NGLAll or a count), after --fit
	SplitMode     SplitMode
	TensorSplit   []float32
	ModelDevices  []string // llama.cpp's device list for this model
	LoadMode      LoadMode
	Mmap          bool
	Locked        bool
	OpOffload     bool
	// OpOffloadMinBatch is the fewest tokens op offload moves to a GPU (Rules').
	OpOffloadMinBatch int
	// OffloadAllExperts: op offload copies whole expert stacks (Rules').
	OffloadAllExperts bool
	ExpertCache       ExpertCache
	CacheK            tensor.Type
	CacheV            tensor.Type
	KVOffload         bool
}

// DeviceUse is one device's memory budget.
type DeviceUse struct {
	Device        backend.Device
	InModel       bool  // in llama.cpp's device list (GPUs only; the CPU is always used)
	Weights       int64 // weight bytes held here
	WeightsMapped int64 // of which used in place from the file mapping
	KV            int64 // KV cache and recurrent state
	Compute       int64 // compute buffer (estimate)
	Staging       int64 // of which: CPU weights copied here for large batches (op offload)
	ExpertCache   int64 // of Weights: the expert cache's slots (--expert-cache)
	Total         int64
	Margin        int64 // free memory llama.cpp's fit keeps (1 GiB by default)
	Layers        int   // blocks whose layer map points here
}

// Capacity is the memory available to the plan: the free memory, 0 when unknown.
func (d *DeviceUse) Capacity() int64 { return d.Device.FreeBytes }

// Fits reports whether the total leaves the margin free; ok is false when the capacity is
// unknown.
func (d *DeviceUse) Fits() (fits, ok bool) {
	if d.Capacity() <= 0 {
		return false, false
	}
	return d.Total+d.Margin <= d.Capacity(), true
}

// LayerUse is one row of the layer map.
type LayerUse struct {
	Index    int    // block index; -1 for the output layer, -2 for the input layer
	Device   string // where the layer map puts it
	KVDevice string // where its KV cache (or recurrent state) lives, "" for none
	KVBytes  int64
	// IndexerBytes is the part of KVBytes that holds DeepSeek Sparse Attention's indexer
	// keys (llama_kv_cache_dsa's second cache).
	IndexerBytes int64
	Kind         string            // "attention", "swa", "recurrent", "nextn" or "" for input/output
	Classes      map[string]string // tensor class → device(s) holding it ("CPU+CUDA0" when split)
	Bytes        map[string]int64  // device → weight bytes of this layer held there
	// Experts, for a layer whose routed-expert stacks expert selectors split, is how many
	// of its experts each device holds (of its first split stack); nil otherwise.
	Experts map[string]int
}

// RoutedCell is the layer map's routed-expert cell: the devices, each with its count of
// experts where the layer is split by expert ("CUDA0 32+CPU 96").
func (l *LayerUse) RoutedCell() string {
	cell := l.Classes[gguf.ClassRoutedExpert.String()]
	if l.Experts == nil {
		return cell
	}
	devs := strings.Split(cell, "+")
	for i, d := range devs {
		if n, ok := l.Experts[d]; ok {
			devs[i] = fmt.Sprintf("%s %d", d, n)
		}
	}
	return strings.Join(devs, "+")
}

// Label names a layer row.
func (l *LayerUse) Label() string {
	switch l.Index {
	case -1:
		return "output"
	case -2:
		return "input"
	}
	return fmt.Sprint(l.Index)
}

// Place decides placement and memory for a model under the rules on the given devices. The
// device list must hold exactly one CPU.
func Place(m Model, r Rules, devs []backend.Device) (*Plan, error) {
	p, err := newPlanner(&m, &r, devs)
	if err != nil {
		return nil, err
	}
	cfg := config{ngl: r.GPULayers, split: r.TensorSplit, items: r.Items, nCtx: r.CtxSize}
	fit := FitReport{Enabled: r.Fit}
	if r.Fit {
		if cfg, fit, err = p.fit(cfg); err != nil {
			return nil, err
		}
	}
	var autoSlots string
	if r.ExpertCache.Slots == ExpertCacheAuto {
		slots, err := p.autoExpertCache(cfg)
		if err != nil {
			return nil, err
		}
		p.r.ExpertCache.Slots = slots
		autoSlots = fmt.Sprintf("--expert-cache auto: %d slots per layer, what the GPUs' free memory holds beside the plan (keeping -fitt's margin)", slots)
	}
	lay, err := p.layout(cfg)
	if err != nil {
		return nil, err
	}
	plan := p.report(lay)
	plan.Fit = fit
	plan.gpuAdvice = p.advise(cfg, plan)
	if autoSlots != "" {
		plan.Notes = append(plan.Notes, autoSlots)
	}
	return plan, nil
}

// advise is the verdict's advice for a plan whose GPUs are over: the smallest --n-cpu-moe
// that makes every GPU fit, found by planning it (each candidate is a real plan, so the
// advice is true), or the other cures when no count of CPU-held experts is enough. It is
// empty when every GPU fits.
func (p *planner) advise(cfg config, plan *Plan) string {
	if gpusFit(plan) {
		return ""
	}
	from, at := 0, -1 // the --n-cpu-moe the user gave, and where
	for i, it := range cfg.items {
		if it.Kind == ItemNCPUMoE {
			from, at = it.N, i
		}
	}
	layers := p.hp.nLayer
	try := func(n int) (*Plan, bool) {
		c := cfg
		c.items = slices.Clone(cfg.items)
		if at >= 0 {
			c.items[at].N = n
		} else {
			c.items = append(c.items, Item{Kind: ItemNCPUMoE, N: n})
		}
		lay, err := p.layout(c)
		if err != nil {
			return nil, false
		}
		q := p.report(lay)
		return q, gpusFit(q)
	}
	if !hasRoutedExperts(plan) || from >= layers {
		return "Offload fewer layers (-ngl), lower -c, or quantize the KV cache (-ctk/-ctv q8_0)."
	}
	if _, ok := try(layers); !ok {
		return fmt.Sprintf("Even with every block's routed experts on the CPU (--n-cpu-moe %d) the GPU is over: offload fewer layers (-ngl), lower -c, or quantize the KV cache (-ctk/-ctv q8_0).", layers)
	}
	// More experts on the CPU never take memory from a GPU: the smallest count that fits
	// is found by bisection.
	lo, hi := from, layers // lo does not fit, hi fits
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if _, ok := try(mid); ok {
			hi = mid
		} else {
			lo = mid
		}
	}
	fitted, _ := try(hi)
	var uses []string
	for _, d := range fitted.Devices {
		if d.Device.Kind == backend.KindGPU && d.InModel {
			uses = append(uses, fmt.Sprintf("%s %s of %s", d.Device.Name, humanBytes(d.Total), humanBytes(d.Capacity())))
		}
	}
	return fmt.Sprintf("--n-cpu-moe %d fits (planned: %s, the margin kept); or lower -c.", hi, strings.Join(uses, ", "))
}

// gpusFit reports whether every GPU of the plan whose memory is known fits with its margin.
func gpusFit(plan *Plan) bool {
	for _, d := range plan.Devices {
		if fits, known := d.Fits(); d.Device.Kind == backend.KindGPU && known && !fits {
			return false
		}
	}
	return true
}

// hasRoutedExperts reports whether some GPU of the plan holds routed experts that
// --n-cpu-moe could move.
func hasRoutedExperts(plan *Plan) bool {
	gpu := map[string]bool{}
	for _, d := range plan.Devices {
		gpu[d.Device.Name] = d.Device.Kind == backend.KindGPU
	}
	for _, t := range plan.Tensors {
		if t.Class == gguf.ClassRoutedExpert && gpu[t.Device] {
			return true
		}
	}
	return false
}

// config is what --fit may change; everything else comes from Rules.
type config struct {
	ngl   int
	split []float32
	items []Item
	nCtx  int
}

// tensorMeta is what the planner derives once per tensor.
type tensorMeta struct {
	info    *gguf.TensorInfo
	class   gguf.Class
	layer   int  // block, or -1
	input   bool // input layer (embeddings): always the CPU list
	skip    bool // NextN/MTP block tensor, not loaded
	matmul  bool // used as a matmul weight (repackable when 2-D, or 3-D experts)
	plain   bool // printable ASCII name (the fast regex path applies)
	partKey part // which compute part of its layer it feeds
}

// part is a piece of a layer's computation for the compute estimate.
type part int

const (
	partNone part = iota
	partAttn
	partFFN // dense FFN and shared experts
	partExperts
	partOutput
	numParts
)

type planner struct {
	m           *Model
	hp          *hparams
	r           *Rules
	devs        []backend.Device
	cpu         int   // index of the CPU in devs
	model       []int // llama.cpp's device list (indices into devs)
	tensors     []tensorMeta
	bufferTypes []string // valid -ot buffer types, sorted
	names       nameIndex
	memo        map[string]*patternHits
	moeLayer    map[int]bool // blocks with routed experts
	// tiedEmbd is the index of token_embd.weight when the model has no output.weight, so that
	// llama.cpp uses the embedding as the output matrix too; else -1.
	tiedEmbd int
}

type patternHits struct {
	m       *matcher
	hits    []bool // per tensor
	matches []int  // the tensors it matches, in order
}

// ModelError is a problem with the model itself (missing or inconsistent metadata), as
// opposed to the rules: the user's input is wrong, not moerun.
type ModelError struct {
	Model string
	Err   error
}

func (e *ModelError) Error() string {
	if e.Model == "" {
		return e.Err.Error()
	}
	return e.Model + ": " + e.Err.Error()
}

func (e *ModelError) Unwrap() error { return e.Err }

func newPlanner(m *Model, r *Rules, devs []backend.Device) (*planner, error) {
	if err := backend.Validate(devs); err != nil {
		return nil, err
	}
	hp, err := readHParams(m)
	if err != nil {
		return nil, &ModelError{Model: m.Name, Err: err}
	}
	p := &planner{m: m, hp: hp, r: r, devs: devs, memo: map[string]*patternHits{}}
	for i, d := range devs {
		if d.Kind == backend.KindCPU {
			p.cpu = i
		}
	}
	if err := p.checkRules(); err != nil {
		return nil, err
	}
	if p.model, err = p.modelDevices(); err != nil {
		return nil, err
	}
	p.bufferTypes = backend.Names(devs)
	p.names = newNameIndex(m.Tensors)
	p.tensors = make([]tensorMeta, len(m.Tensors))
	p.moeLayer = map[int]bool{}
	p.tiedEmbd = -1
	hasOutput := false
	for i := range m.Tensors {
		switch m.Tensors[i].Name {
		case "token_embd.weight":
			p.tiedEmbd = i
		case "output.weight":
			hasOutput = true
		}
		p.tensors[i] = p.describe(&m.Tensors[i])
		if il := p.tensors[i].layer; il >= hp.nLayerAll() {
			// llama.cpp creates tensors only for the blocks the metadata counts and then
			// refuses the file for the tensors it did not create.
			return nil, &ModelError{Model: m.Name, Err: fmt.Errorf("tensor %s is in block %d, but the metadata counts %d blocks (%s)",
				m.Tensors[i].Name, il, hp.nLayerAll(), m.Metadata.Key("{arch}.block_count"))}
		}
		if t := p.tensors[i]; t.class == gguf.ClassRoutedExpert && t.layer >= 0 {
			p.moeLayer[t.layer] = true
		}
	}
	if hasOutput {
		p.tiedEmbd = -1
	}
	if err := p.checkItems(r.Items); err != nil {
		return nil, err
	}
	return p, nil
}

// inputTensors are the input layer (llm_tensor_info LLM_TENSOR_LAYER_INPUT).
var inputTensors = map[string]bool{"token_embd": true, "position_embd": true, "token_types": true, "per_layer_token_embd": true}

func (p *planner) describe(t *gguf.TensorInfo) tensorMeta {
	tm := tensorMeta{info: t, class: gguf.ClassOf(t.Name), layer: -1, plain: isPlainASCII(t.Name)}
	base, suffix := t.Name, ""
	if i := strings.LastIndexByte(t.Name, '.'); i >= 0 {
		base, suffix = t.Name[:i], t.Name[i+1:]
	}
	if il, ok := gguf.LayerOf(t.Name); ok {
		tm.layer = il
		tm.skip = il >= p.hp.nLayer
	} else {
		tm.input = inputTensors[base]
	}
	weight := suffix == "weight"
	switch tm.class {
	case gguf.ClassRoutedExpert:
		tm.partKey = partExperts
		tm.matmul = weight && len(t.Shape) == 3
	case gguf.ClassAttention:
		tm.partKey = partAttn
		tm.matmul = weight && len(t.Shape) == 2 && !strings.Contains(base, "conv")
	case gguf.ClassDenseFFN, gguf.ClassSharedExpert, gguf.ClassRouter:
		tm.partKey = partFFN
		tm.matmul = weight && len(t.Shape) == 2
	case gguf.ClassOutput:
		tm.partKey = partOutput
		tm.matmul = weight && len(t.Shape) == 2
	case gguf.ClassOther:
		tm.matmul = weight && len(t.Shape) == 2
	}
	if tm.layer < 0 && !tm.input {
		tm.partKey = partOutput
	}
	return tm
}

// checkRules applies llama.cpp's refusals that do not depend on placement.
func (p *planner) checkRules() error {
	r, hp := p.r, p.hp
	if r.SplitMode == SplitTensor {
		return usagef("-sm tensor (llama.cpp's experimental meta device) is not modelled by moerun; use -sm layer or none")
	}
	if r.Semantics == IKLlama && r.Fit {
		return usagef("moerun does not model ik_llama.cpp's --fit (off by default there); drop --fit or use --semantics llama.cpp")
	}
	if r.Parallel == 0 || r.Parallel < -1 {
		return argError("-np", "error: invalid value for n_parallel")
	}
	// -ub 0 is llama.cpp's "the same as -b"; a ubatch larger than the batch is cut to it.
	if r.Batch <= 0 {
		return usagef("-b %d: the logical batch (tokens per step) must be at least 1 (default 2048)", r.Batch)
	}
	if r.UBatch < 0 {
		return usagef("-ub %d: the physical batch (tokens per forward pass) must be at least 1, or 0 for -b's size (default 512)", r.UBatch)
	}
	if r.CtxSize < 0 {
		return usagef("-c %d: the context size cannot be negative", r.CtxSize)
	}
	if r.CtxSize == 0 && hp.nCtx == 0 {
		return usagef("n_ctx and model->hparams.n_ctx_train cannot both be zero (give -c)")
	}
	if hp.mla && r.CacheK != r.CacheV {
		return usagef("model does not support different K (%s) and V (%s) cache types", r.CacheK, r.CacheV)
	}
	flash := r.FlashAttn
	if r.CacheV.BlockSize() > 1 && flash == FlashOff {
		return usagef("quantized V cache requires flash_attn to be enabled (-fa on)")
	}
	if flash == FlashOff {
		return nil
	}
	for il := 0; il < hp.nLayer; il++ {
		hk, hv := hp.headK, hp.headV
		if hp.swa[il] {
			hk, hv = hp.headKSWA, hp.headVSWA
		}
		if b := r.CacheK.BlockSize(); b > 1 && int64(hk)%b != 0 {
			return usagef("K cache type %s with block size %d does not divide n_embd_head_k=%d", r.CacheK, b, hk)
		}
		if b := r.CacheV.BlockSize(); b > 1 && !hp.mla && int64(hv)%b != 0 {
			return usagef("V cache type %s with block size %d does not divide n_embd_head_v=%d", r.CacheV, b, hv)
		}
	}
	return nil
}

// modelDevices builds llama.cpp's device list (llama_prepare_model_devices): -dev's list or
// every GPU, then -sm none keeps only the main GPU.
func (p *planner) modelDevices() ([]int, error) {
	var list []int
	if p.r.Devices == nil {
		for i, d := range p.devs {
			if d.Kind == backend.KindGPU {
				list = append(list, i)
			}
		}
	} else {
		for _, name := range p.r.Devices {
			i := slices.IndexFunc(p.devs, func(d backend.Device) bool { return d.Name == name })
			if i < 0 || p.devs[i].Kind != backend.KindGPU {
				return nil, argError("-dev", "invalid device: "+name)
			}
			list = append(list, i)
		}
	}
	switch p.r.SplitMode {
	case SplitNone:
		if len(list) == 0 {
			return list, nil
		}
		mg := p.r.MainGPU
		if mg < 0 {
			return nil, nil
		}
		if mg >= len(list) {
			return nil, usagef("invalid value for main_gpu: %d (available devices: %d)", mg, len(list))
		}
		return list[mg : mg+1], nil
	case SplitRow:
		if len(list) > 0 {
			return nil, usagef("device %s does not support split buffers (-sm row was removed from CUDA in 2026-07; use -sm layer)", p.devs[list[0]].Name)
		}
	}
	return list, nil
}

// UnknownBufferTypeError is an override naming a buffer type no device has.
type UnknownBufferTypeError struct {
	Flag      string
	Item      string
	Name      string
	Available []string
	IK        bool
}

func (e *UnknownBufferTypeError) Error() string {
	var b strings.Builder
	if e.IK { // ik_llama.cpp prints the list on stderr, then its own error line
		b.WriteString("Available buffer types:\n")
		for _, n := range e.Available {
			fmt.Fprintf(&b, "  %s\n", n)
		}
		fmt.Fprintf(&b, "error: Invalid tensor buffer type override: %s", e.Item)
		return b.String()
	}
	what := "argument"
	if strings.HasPrefix(e.Flag, "LLAMA_ARG_") {
		what = "environment variable"
	}
	fmt.Fprintf(&b, "error while handling %s %q: unknown buffer type\nAvailable buffer types:\n", what, e.Flag)
	for _, n := range e.Available {
		fmt.Fprintf(&b, "  %s\n", n)
	}
	fmt.Fprintf(&b, "(in '%s': no device is named %s)", e.Item, e.Name)
	return b.String()
}

// checkItems validates the override list: known buffer types and patterns that compile.
func (p *planner) checkItems(items []Item) error {
	for _, it := range items {
		if it.Kind != ItemPattern {
			continue
		}
		if !slices.Contains(p.bufferTypes, it.Target) {
			return &UnknownBufferTypeError{Flag: it.Flag, Item: it.Text, Name: it.Target, Available: p.bufferTypes, IK: p.r.Semantics == IKLlama}
		}
		if _, err := p.hits(it.Pattern); err != nil {
			return fmt.Errorf("%s %s: %w", it.Flag, it.Text, err)
		}
	}
	return nil
}

// hits returns, for every tensor, whether the pattern matches its name; computed once per
// distinct pattern.
func (p *planner) hits(pattern string) ([]bool, error) {
	h, err := p.patternHits(pattern)
	if err != nil {
		return nil, err
	}
	return h.hits, nil
}

// matches lists, in order, the tensors the pattern matches.
func (p *planner) matches(pattern string) ([]int, error) {
	h, err := p.patternHits(pattern)
	if err != nil {
		return nil, err
	}
	return h.matches, nil
}

func (p *planner) patternHits(pattern string) (*patternHits, error) {
	if h, ok := p.memo[pattern]; ok {
		return h, nil
	}
	m, err := compileMatcher(pattern)
	if err != nil {
		return nil, err
	}
	h := &patternHits{m: m, hits: make([]bool, len(p.tensors))}
	for _, i := range p.candidates(m) {
		ok, err := m.match(p.tensors[i].info.Name, p.tensors[i].plain)
		if err != nil {
			return nil, err
		}
		if ok {
			h.hits[i] = true
			h.matches = append(h.matches, i)
		}
	}
	p.memo[pattern] = h
	return h, nil
}

// candidates are the tensors whose names contain the pattern's longest required literal,
// found with one scan of all names; every tensor when the pattern requires none.
func (p *planner) candidates(m *matcher) []int {
	lit := ""
	for _, l := range m.literals {
		if len(l) > len(lit) {
			lit = l
		}
	}
	if m.plainLiteral && len(m.text) > len(lit) {
		lit = m.text
	}
	if lit != "" {
		if c, ok := p.names.containing(lit); ok {
			return c
		}
	}
	all := make([]int, len(p.tensors))
	for i := range all {
		all[i] = i
	}
	return all
}

// nameIndex holds every tensor name in one string, so that finding the names that contain
// a literal is one fast substring scan instead of a search per name.
type nameIndex struct {
	text   string // the names, each followed by '\n'
	starts []int  // where each name starts in text
}

func newNameIndex(tensors []gguf.TensorInfo) nameIndex {
	var b strings.Builder
	x := nameIndex{starts: make([]int, 0, len(tensors)+1)}
	for _, t := range tensors {
		if strings.IndexByte(t.Name, '\n') >= 0 {
			return nameIndex{} // a name holds the separator: no index
		}
		x.starts = append(x.starts, b.Len())
		b.WriteString(t.Name)
		b.WriteByte('\n')
	}
	x.starts = append(x.starts, b.Len())
	x.text = b.String()
	return x
}

// containing lists, in order, the names that contain lit; false when the index cannot tell.
func (x *nameIndex) containing(lit string) ([]int, bool) {
	if x.starts == nil || strings.IndexByte(lit, '\n') >= 0 {
		return nil, false
	}
	var out []int
	n := 0 // the name being searched; matches come in order, so it only moves forward
	for off := 0; off < len(x.text); {
		i := strings.Index(x.text[off:], lit)
		if i < 0 {
			break
		}
		for x.starts[n+1] <= off+i {
			n++
		}
		out = append(out, n) // the match lies inside name n: lit has no separator
		off = x.starts[n+1]
	}
	return out, true
}

// override is one expanded entry of the override list.
type override struct {
	pattern string
	target  int // device index
	item    int // index into the items, for reports
	host    bool
	experts *ExpertSelector // the item's expert selector, nil for whole tensors
}

// expand turns the items into llama.cpp's override list: --cpu-moe and --n-cpu-moe become
// their patterns in place (mainline); ik_llama.cpp drops everything at -ngl 0 and appends
// its -ncmoe patterns after the user's -ot entries.
func (p *planner) expand(items []Item, ngl int) []override {
	var out []override
	target := func(name string) int {
		return slices.IndexFunc(p.devs, func(d backend.Device) bool { return d.Name == name })
	}
	if p.r.Semantics == IKLlama {
		return p.expandIK(items, ngl, target)
	}
	for i, it := range items {
		switch it.Kind {
		case ItemPattern, ItemFit, ItemCPUMoE:
			out = append(out, override{pattern: it.Pattern, target: target(it.Target), item: i, experts: it.Experts})
		case ItemNCPUMoE:
			for il := 0; il < it.N; il++ {
				out = append(out, override{pattern: blockExpsPattern(il), target: p.cpu, item: i})
			}
		}
	}
	return out
}

// expandIK follows ik_llama.cpp: -cmoe means -ncmoe 999, the last of them wins, and the
// blocks are the last N blocks with experts (walking back from the last non-NextN block),
// appended after the user's overrides. Overrides to the CPU go to the host buffer type.
func (p *planner) expandIK(items []Item, ngl int, target func(string) int) []override {
	if ngl == 0 {
		return nil
	}
	var out []override
	ncmoe, ncmoeItem := 0, -1
	for i, it := range items {
		switch it.Kind {
		case ItemPattern:
			t := target(it.Target)
			out = append(out, override{pattern: it.Pattern, target: t, item: i, host: t == p.cpu, experts: it.Experts})
		case ItemCPUMoE:
			ncmoe, ncmoeItem = 999, i
		case ItemNCPUMoE:
			ncmoe, ncmoeItem = it.N, i
		}
	}
	if ncmoe == 0 {
		return out
	}
	hasExperts := map[int]bool{}
	for _, t := range p.tensors {
		if strings.HasSuffix(t.info.Name, ".ffn_down_exps.weight") && t.layer >= 0 {
			hasExperts[t.layer] = true
		}
	}
	for il := p.hp.nLayer - 1; il >= 0 && ncmoe > 0; il-- {
		if hasExperts[il] {
			out = append(out, override{pattern: fmt.Sprintf(`blk\.%d%s`, il, ikExpsRegex), target: p.cpu, item: ncmoeItem, host: true})
			ncmoe--
		}
	}
	return out
}
