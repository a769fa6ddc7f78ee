package placement

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/tensor"
)

// The performance model (shared/reference/performance-model.md). Decode runs each layer's
// pieces one after the other on the device that holds them, so per-device times add up:
//
//	t_tok = Σ_gpu B_gpu/(η_g·BW_gpu) + max(B_cpu/BW_cpu_eff, 2·P_cpu/F_cpu) + crossings·τ + t0
//
// Prefill computes a ubatch of U tokens per pass; with op offload the GPU fetches the
// CPU-held weights over PCIe (only the experts the ubatch hits) and computes them itself.
const (
	gpuEfficiency = 0.7   // η_g: share of the GPU's bandwidth a decode step reaches
	crossingTime  = 20e-6 // τ: one hand-over between devices (copy, stream sync, thread wake-up)
	tokenOverhead = 1e-3  // t0: sampling, logits, launches: per token and per ubatch
	gpuComputeEff = 0.5   // share of the tensor-core peak llama.cpp's prompt matmuls reach
	cpuGFLOPS     = 80.0  // per thread: the build machine decodes at ~75, a 7950X prompts at ~87
	// cpuGFLOPSClock is the clock cpuGFLOPS is taken at: the Ryzen 9 7950X's maximum boost
	// (5.7 GHz), whose public rows set it. A CPU whose clock is stated (--cpu-ghz, the
	// profile's cpu.ghz) gets cpuGFLOPS scaled by its maximum boost over this one: a
	// server's many slower cores do less per thread (44 threads of an EPYC 9B14, 3.7 GHz,
	// prompt at about 0.6 of the 7950X's rate per thread, docs/predict.md rows 33-35).
	cpuGFLOPSClock = 5.7
	// A prompt ubatch's GPU kernels are launched one by one: the llama.cpp versions of
	// the public rows captured no CUDA graph for batches of several tokens or with
	// MUL_MAT_ID, and the reference commit executes directly whenever the graph's node
	// properties changed, as the KV view grows by every prompt ubatch. Each weight
	// matmul comes with about 4 kernels (llama.cpp's graphs of the
	// tiny qwen3moe and deepseek2 in shared/testdata: 142 and 123 compute nodes for 33
	// and 31 weight matmuls; norms, rope, activation quantization, glu, adds), each
	// costing the CUDA launch latency, about 5 µs.
	kernelsPerMatmul = 4
	launchLatency    = 5e-6
	uncalDesktop     = 0.55    // uncalibrated share of theoretical RAM bandwidth, 1-2 channels
	uncalServer      = 0.35    // and with 3 or more
	desktopMaxBW     = 110.0   // GB/s: above this, an unknown channel count is taken as many
	gbps             = 1e9     // GB/s → B/s
	tflops           = 1e12    // TFLOP/s → FLOP/s
	gflops           = 1e9     // GFLOP/s → FLOP/s
	maxDepth         = 1 << 30 // bounds Depth: no context is larger
)

// PredictOptions are the workload a prediction is for.
type PredictOptions struct {
	// Depth is the number of tokens already in the context (llama-bench's -d): each new
	// token reads their KV cache, and a prompt's tokens attend to them. 0 (the default) is
	// llama-bench's tg and pp from an empty context.
	Depth int
	// Prompt is the length of the prompt PP is the mean speed of (llama-bench's ppN): ubatches
	// of the plan's -ub run one after another, each attending to everything before it, so
	// a long prompt is slower per token than its first ubatch. 0: one full ubatch.
	Prompt int
	// Routing, when set, holds measured per-expert routing frequencies: prefill then copies
	// the share of each layer's experts a ubatch really hits instead of assuming uniform
	// routing. Decode with whole-layer placement does not depend on it.
	Routing *RoutingStats
}

// Prediction is the predicted speed of a plan on a machine, with its breakdown. A plan that
// does not fit is flagged and gets no speed.
type Prediction struct {
	Fits     bool
	Problems []string // why it does not fit (a device over its capacity with the margin)
	TG       float64  // decode tokens/s; 0 when it does not fit
	PP       float64  // mean prompt tokens/s over Prompt tokens; 0 when it does not fit or is unknown
	UBatch   int
	Depth    int
	Prompt   int          // tokens of the prompt PP is for
	Decode   *DecodeTime  // nil when it does not fit
	Prefill  *PrefillTime // nil when it does not fit
	Machine  Machine
	Notes    []string
	// OffloadMinBatch is the op offload threshold the prediction used (the plan's).
	OffloadMinBatch int
	// WhatIf is the expert-granular what-if, when the caller ran one (ExpertWhatIf); the
	// reports include it.
	WhatIf *WhatIf
}

// DecodeTime is the time of one generated token and where it goes.
type DecodeTime struct {
	Seconds         float64
	Devices         []DeviceDecode
	Crossings       int // hand-overs between devices per token
	CrossingSeconds float64
	OverheadSeconds float64 // t0
	// CacheHits is the share of the cached layers' routed-expert reads the expert cache's
	// slots are predicted to serve (--expert-cache; 0 without).
	CacheHits float64
}

// DeviceDecode is one device's share of a token.
type DeviceDecode struct {
	Device        string
	Kind          backend.Kind
	ExpertBytes   int64   // routed-expert bytes read per token (k/E of each layer's experts)
	OtherBytes    int64   // every other weight read per token
	KVBytes       int64   // KV cache (or recurrent state) read per token at the depth
	FLOPs         float64 // multiply-adds ×2 of the weights read
	Bandwidth     float64 // GB/s used for this device (η_g·BW for GPUs, effective for the CPU)
	MemorySeconds float64
	// ComputeSeconds is the compute floor: 2·P/F. It only counts when above the memory time.
	ComputeSeconds float64
	Seconds        float64 // max of the two
}

// Bytes is everything the device reads per token.
func (d *DeviceDecode) Bytes() int64 { return d.ExpertBytes + d.OtherBytes + d.KVBytes }

// Bound says what limits the device: "memory" or "compute".
func (d *DeviceDecode) Bound() string {
	if d.ComputeSeconds > d.MemorySeconds {
		return "compute"
	}
	return "memory"
}

// PrefillTime is the time of one ubatch of prompt processing: the prompt's first, at the
// prediction's depth.
type PrefillTime struct {
	UBatch  int
	Seconds float64
	// AttentionSeconds is the part of Seconds spent in attention itself (scores and
	// weighted sums over the cached and the ubatch's own tokens), on the devices holding
	// the KV cache.
	AttentionSeconds float64
	// OffloadTo is the GPU that computes the CPU-held weights for this ubatch size (ggml's op
	// offload), "" when the CPU computes them.
	OffloadTo   string
	CopyBytes   int64   // CPU-held weights copied to OffloadTo per ubatch
	CopySeconds float64 // at the PCIe rate
	// ActiveShare is, over the CPU-held expert bytes, the share a ubatch hits (and copies).
	ActiveShare     float64
	Devices         []DevicePrefill
	CrossingSeconds float64
	OverheadSeconds float64
	Unknown         string // non-empty when prompt speed cannot be predicted, and why
}

// DevicePrefill is one device's share of a ubatch (the offload target's includes the CPU
// weights it computes; the copies are PrefillTime.CopySeconds).
type DevicePrefill struct {
	Device         string
	FLOPs          float64
	ComputeSeconds float64
	MemorySeconds  float64
	Seconds        float64 // Σ over its matmuls of max(compute, memory)
}

// Machine is the figures a prediction used and where they came from.
type Machine struct {
	CPUBandwidth   float64 // effective, GB/s
	CPUBandwidthBy string  // "calibrated (matvec)", "--cpu-bw-eff", "0.55 × theoretical 89.6 GB/s …"
	CPUThreads     int
	CPUThreadsBy   string // "--cpu-threads", "-t", "profile" or this machine's cores
	CPUTFLOPS      float64
	CPUTFLOPSBy    string
	GPUs           []MachineGPU
	PCIe           string
	PCIeBy         string
	PCIeGBs        float64 // effective rate used for weight copies
}

// MachineGPU is one GPU's figures.
type MachineGPU struct {
	Device    string
	Model     string
	Bandwidth float64 // GB/s, before η_g
	TFLOPS    float64 // 0: unknown
}

// machine resolves hardware into the figures of one prediction.
type machine struct {
	Machine
	cpuBW    float64 // B/s
	cpuFLOPS float64 // FLOP/s
	gpu      map[string]MachineGPU
	pcie     float64 // B/s
}

// resolve picks each figure by precedence: a calibrated CPU bandwidth over a theoretical one
// (scaled by the uncalibrated share), the table's figures per GPU, the PCIe link given or
// 4.0 x16. GPUs are matched to the plan's devices by name, else by position.
func resolve(hw Hardware, plan *Plan) (*machine, error) {
	m := &machine{gpu: map[string]MachineGPU{}}
	c := hw.CPU
	switch theo := c.RAMBandwidth; {
	case c.DecodeBandwidth > 0:
		m.CPUBandwidth = c.DecodeBandwidth
		m.CPUBandwidthBy = "calibrated"
		switch c.DecodeSource {
		case "flag":
			m.CPUBandwidthBy = "--cpu-bw-eff"
		case "":
		default:
			m.CPUBandwidthBy += " (" + c.DecodeSource + ")"
		}
	case theo > 0 || c.RAMChannels > 0:
		if theo == 0 {
			theo = RAMBandwidth(c.RAMChannels, c.RAMSpeed)
		}
		share, kind := uncalibratedShare(c.RAMChannels, theo)
		m.CPUBandwidth = share * theo
		m.CPUBandwidthBy = fmt.Sprintf("uncalibrated: %.2f × theoretical %.1f GB/s (%s); run moerun calibrate or give --cpu-bw-eff", share, theo, kind)
	default:
		return nil, fmt.Errorf("the CPU's memory bandwidth is unknown: run 'moerun calibrate' once on this machine, " +
			"or give --cpu-bw-eff GB/s (measured), --ram-bw GB/s or --ram-channels N --ram-speed MT/s")
	}
	m.cpuBW = m.CPUBandwidth * gbps
	m.CPUThreads, m.CPUThreadsBy = c.Threads, c.ThreadsSource
	if m.CPUThreadsBy == "" {
		m.CPUThreadsBy = "given"
	}
	if m.CPUThreads <= 0 {
		// Said in the report: a prediction for described hardware should get its threads.
		m.CPUThreads, m.CPUThreadsBy = runtime.NumCPU(), "this machine's cores; --cpu-threads or -t for another"
	}
	m.CPUTFLOPS, m.CPUTFLOPSBy = c.TFLOPS, "given"
	switch {
	case m.CPUTFLOPS > 0:
	case c.GHz > 0:
		perThread := cpuGFLOPS * c.GHz / cpuGFLOPSClock
		m.CPUTFLOPS = float64(m.CPUThreads) * perThread * gflops / tflops
		m.CPUTFLOPSBy = fmt.Sprintf("%d threads × %.0f GFLOP/s (%.0f at %.1f GHz, scaled to %.2g GHz)", m.CPUThreads, perThread, cpuGFLOPS, cpuGFLOPSClock, c.GHz)
	default:
		m.CPUTFLOPS = float64(m.CPUThreads) * cpuGFLOPS * gflops / tflops
		m.CPUTFLOPSBy = fmt.Sprintf("%d threads × %.0f GFLOP/s (default)", m.CPUThreads, cpuGFLOPS)
	}
	m.cpuFLOPS = m.CPUTFLOPS * tflops
	link, by := defaultPCIe, "assumed"
	if hw.PCIe != "" {
		var err error
		if link, err = ParsePCIe(hw.PCIe); err != nil {
			return nil, err
		}
		by = "given"
	}
	m.PCIe, m.PCIeBy = link.String(), by
	m.PCIeGBs = link.Effective()
	m.pcie = m.PCIeGBs * gbps
	pos := 0
	for _, d := range plan.Devices {
		if d.Device.Kind != backend.KindGPU {
			continue
		}
		spec, ok := gpuSpecFor(hw.GPUs, d.Device.Name, pos)
		pos++
		if !ok {
			continue
		}
		g := MachineGPU{Device: d.Device.Name, Model: spec.Model, Bandwidth: spec.Bandwidth, TFLOPS: spec.TFLOPS}
		m.gpu[g.Device] = g
		m.GPUs = append(m.GPUs, g)
	}
	return m, nil
}

// gpuSpecFor finds the spec naming the device, else the one at its position among the GPUs
// when no spec names a device.
func gpuSpecFor(specs []GPUSpec, name string, pos int) (GPUSpec, bool) {
	named := false
	for _, s := range specs {
		if s.Device == name {
			return s, true
		}
		named = named || s.Device != ""
	}
	if !named && pos < len(specs) {
		return specs[pos], true
	}
	return GPUSpec{}, false
}

// uncalibratedShare is the share of theoretical RAM bandwidth llama.cpp's decode reaches
// (performance-model.md): 0.55 on desktop dual channel, 0.35 on servers; an unknown channel
// count is guessed from the bandwidth.
func uncalibratedShare(channels int, theoretical float64) (float64, string) {
	switch {
	case channels >= 3:
		return uncalServer, fmt.Sprintf("%d channels", channels)
	case channels > 0:
		return uncalDesktop, fmt.Sprintf("%d channel(s)", channels)
	case theoretical > desktopMaxBW:
		return uncalServer, fmt.Sprintf("channels unknown, taken as a server above %.0f GB/s", desktopMaxBW)
	}
	return uncalDesktop, fmt.Sprintf("channels unknown, taken as desktop dual channel up to %.0f GB/s", desktopMaxBW)
}

// Predict predicts decode and prompt speed of a plan on hw. A plan that does not fit (a
// device with a known capacity would keep less than its margin free) is flagged and gets
// no speed. It fails only when a figure it needs is unknown (the CPU's bandwidth, or the
// bandwidth of a GPU that holds weights).
func Predict(plan *Plan, hw Hardware, opts PredictOptions) (*Prediction, error) {
	e, err := newEstimator(plan, hw, opts)
	if err != nil {
		return nil, err
	}
	pred := &Prediction{UBatch: plan.Context.NUBatch, Depth: e.depth, Machine: e.m.Machine, Fits: true, OffloadMinBatch: plan.Settings.OpOffloadMinBatch}
	for _, d := range plan.Devices {
		fits, known := d.Fits()
		switch {
		case !known && (d.InModel || d.Total > 0):
			pred.Notes = append(pred.Notes, fmt.Sprintf("%s: capacity unknown, not checked (give %s)", d.Device.Name, capacityFlag(d.Device.Kind)))
		case known && !fits:
			pred.Fits = false
			pred.Problems = append(pred.Problems, fmt.Sprintf("%s needs %s more (%s used of %s, keeping %s free)", d.Device.Name,
				humanBytes(d.Total+d.Margin-d.Capacity()), humanBytes(d.Total), humanBytes(d.Capacity()), humanBytes(d.Margin)))
		}
	}
	if !pred.Fits {
		pred.Notes = append(pred.Notes, "no speed is predicted for a placement that does not fit: overflowing VRAM makes the driver fall back to system memory, overflowing RAM pages, both several times slower")
		return pred, nil
	}
	pred.Decode = e.decode()
	pred.TG = 1 / pred.Decode.Seconds
	if h := pred.Decode.CacheHits; h > 0 {
		from := "uniform routing: slots/experts"
		if e.stats != nil {
			from = "the statistics' most used experts per layer"
		}
		pred.Notes = append(pred.Notes, fmt.Sprintf("decode: the expert cache's %d slots a layer serve %.0f%% of the cached layers' routed-expert reads (%s); "+
			"the cache follows the routing as it changes, and its copies between steps are not counted", plan.Settings.ExpertCache.Slots, 100*h, from))
	}
	var promptSeconds float64
	pred.Prefill, pred.Prompt, promptSeconds = e.prefill()
	if pred.Prefill.Unknown == "" {
		pred.PP = float64(pred.Prompt) / promptSeconds
		if a := routingConcentration[plan.Model.Arch]; a > 0 && e.stats == nil && pred.Prefill.ActiveShare > 0 && !plan.Settings.OffloadAllExperts {
			u := pred.Prefill.UBatch
			pred.Notes = append(pred.Notes, fmt.Sprintf("prompt: %s's routing concentrates: a ubatch of %d tokens hits about %.0f%% of a layer's experts, not the %.0f%% of uniform routing "+
				"(llama.cpp's measurements of the model); --expert-stats puts measured routing in its place", plan.Model.Arch, u,
				100*concentratedShare(e.expertShare(), u, a), 100*hitProbability(e.expertShare(), u)))
		}
	} else {
		pred.Notes = append(pred.Notes, "prompt speed not predicted: "+pred.Prefill.Unknown)
	}
	return pred, nil
}

func capacityFlag(k backend.Kind) string {
	if k == backend.KindCPU {
		return "--ram"
	}
	return "--gpu, --gpus or --gpu-model"
}

// estimator computes the times of one plan.
type estimator struct {
	plan   *Plan
	m      *machine
	depth  int
	prompt int
	k, e   float64 // experts used, experts per layer
	stats  *RoutingStats
	kind   map[string]backend.Kind // by device name
}

func newEstimator(plan *Plan, hw Hardware, opts PredictOptions) (*estimator, error) {
	if opts.Depth < 0 || opts.Depth > maxDepth {
		return nil, fmt.Errorf("decode depth %d: want 0 to %d tokens", opts.Depth, maxDepth)
	}
	if opts.Prompt < 0 || opts.Prompt > maxDepth {
		return nil, fmt.Errorf("prompt length %d: want 0 to %d tokens", opts.Prompt, maxDepth)
	}
	m, err := resolve(hw, plan)
	if err != nil {
		return nil, err
	}
	e := &estimator{plan: plan, m: m, depth: opts.Depth, prompt: opts.Prompt, k: float64(plan.Model.ExpertsUsed), e: float64(plan.Model.Experts), stats: opts.Routing}
	if e.stats != nil {
		if err := e.stats.check(plan); err != nil {
			return nil, err
		}
	}
	e.kind = map[string]backend.Kind{}
	var missing []string
	for _, d := range plan.Devices {
		e.kind[d.Device.Name] = d.Device.Kind
		if d.Device.Kind == backend.KindGPU && d.Weights > 0 && m.gpu[d.Device.Name].Bandwidth <= 0 {
			missing = append(missing, d.Device.Name)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("the memory bandwidth of %s is unknown: give --gpu-model NAME (see --gpu-model list) or --gpu-bw GB/s", strings.Join(missing, ", "))
	}
	return e, nil
}

// expertShare is the share of a routed-expert tensor a decoded token reads: k of E experts.
func (e *estimator) expertShare() float64 {
	if e.e <= 0 || e.k <= 0 {
		return 1
	}
	return min(e.k/e.e, 1)
}

// shareOfExperts is the share of a split stack's bytes (the experts t lists) that a token
// reads: the routing probabilities of its experts in the statistics, each expert's slice
// being 1/len(t.Experts) of the share, or k/E each without statistics.
func (e *estimator) shareOfExperts(t *TensorUse) float64 {
	ps := e.stats.probabilities(t.Layer)
	if ps == nil {
		return e.expertShare()
	}
	var p float64
	for _, ex := range t.Experts {
		if ex < len(ps) {
			p += ps[ex]
		}
	}
	return p / float64(len(t.Experts))
}

// tensorRead is what decoding one token reads of a tensor and computes with it.
func (e *estimator) tensorRead(t *TensorUse) (bytes, flops float64) {
	share := 1.0
	switch {
	case t.Class == gguf.ClassRoutedExpert && t.Experts != nil:
		share = e.shareOfExperts(t)
	case t.Class == gguf.ClassRoutedExpert:
		share = e.expertShare()
	case t.Class == gguf.ClassEmbedding && len(t.Shape) >= 2 && t.Shape[1] > 0:
		return float64(t.Bytes) / float64(t.Shape[1]), 0 // one row, looked up, not multiplied
	}
	bytes = float64(t.Bytes) * share
	if len(t.Shape) >= 2 {
		flops = 2 * float64(elements(t.Shape)) * share
	}
	return bytes, flops
}

func elements(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	return n
}

// devices lists the plan's devices that hold anything, in report order.
func (e *estimator) devices() []DeviceUse {
	var out []DeviceUse
	for _, d := range e.plan.Devices {
		if d.InModel || d.Total > 0 {
			out = append(out, d)
		}
	}
	return out
}

// decode is the time of one token.
func (e *estimator) decode() *DecodeTime {
	devs := e.devices()
	byName := map[string]*DeviceDecode{}
	out := &DecodeTime{Devices: make([]DeviceDecode, len(devs))}
	expert := map[string]float64{}
	other := map[string]float64{}
	for i, d := range devs {
		out.Devices[i] = DeviceDecode{Device: d.Device.Name, Kind: d.Device.Kind}
		byName[d.Device.Name] = &out.Devices[i]
	}
	cached := e.cachedLayers()
	for _, c := range cached {
		out.CacheHits += c.hits / float64(len(cached))
	}
	for i := range e.plan.Tensors {
		t := &e.plan.Tensors[i]
		dd := byName[t.Device]
		if dd == nil {
			continue // not loaded
		}
		b, f := e.tensorRead(t)
		if c, ok := cached[t.Layer]; ok && t.Class == gguf.ClassRoutedExpert && byName[c.gpu] != nil {
			// The slots' share of the layer's reads moves to the GPU holding them.
			expert[c.gpu] += b * c.hits
			byName[c.gpu].FLOPs += f * c.hits
			b, f = b*(1-c.hits), f*(1-c.hits)
		}
		if t.Class == gguf.ClassRoutedExpert {
			expert[t.Device] += b
		} else {
			other[t.Device] += b
		}
		dd.FLOPs += f
	}
	for dev, b := range e.kvRead() {
		if dd := byName[dev]; dd != nil {
			dd.KVBytes = int64(math.Round(b))
		}
	}
	for i := range out.Devices {
		dd := &out.Devices[i]
		dd.ExpertBytes, dd.OtherBytes = int64(math.Round(expert[dd.Device])), int64(math.Round(other[dd.Device]))
		bw, flops := e.rates(dd.Device, dd.Kind)
		if !math.IsInf(bw, 1) { // a GPU without weights has no bandwidth to report
			dd.Bandwidth = bw / gbps
		}
		dd.MemorySeconds = float64(dd.Bytes()) / bw
		if flops > 0 {
			dd.ComputeSeconds = dd.FLOPs / flops
		}
		dd.Seconds = max(dd.MemorySeconds, dd.ComputeSeconds)
		out.Seconds += dd.Seconds
	}
	out.Crossings = crossings(e.plan)
	out.CrossingSeconds = float64(out.Crossings) * crossingTime
	out.OverheadSeconds = tokenOverhead
	out.Seconds += out.CrossingSeconds + out.OverheadSeconds
	return out
}

// cacheLayer is a layer the expert cache serves: the GPU holding its slots and the share of
// its routed-expert reads they are predicted to serve.
type cacheLayer struct {
	gpu  string
	hits float64
}

// cachedLayers are the layers --expert-cache gives slots (those whose router is on a GPU
// and whose routed experts are all on the host, as placement counts the slots' memory),
// with their predicted hit share: the routing probability of the layer's SLOTS most used
// experts in the statistics, or SLOTS/experts without them. The cache follows the routing
// as it changes, which a static record cannot show; the swaps' copies are left out (about
// 0.1 a layer and token on skewed synthetic models, docs/benchmarks.md).
func (e *estimator) cachedLayers() map[int]cacheLayer {
	slots := e.plan.Settings.ExpertCache.Slots
	if slots <= 0 || e.e <= 0 {
		return nil
	}
	router, onHost := map[int]string{}, map[int]bool{}
	for i := range e.plan.Tensors {
		t := &e.plan.Tensors[i]
		switch {
		case t.Layer < 0 || t.Device == "":
		case strings.HasSuffix(t.Name, ".ffn_gate_inp.weight"):
			router[t.Layer] = t.Device
		case t.Class == gguf.ClassRoutedExpert:
			host, seen := onHost[t.Layer]
			onHost[t.Layer] = (host || !seen) && e.kind[t.Device] == backend.KindCPU && t.Storage != StorageRepacked && t.Experts == nil
		}
	}
	out := map[int]cacheLayer{}
	for l, host := range onHost {
		gpu := router[l]
		if !host || e.kind[gpu] != backend.KindGPU {
			continue
		}
		hits := min(float64(slots)/e.e, 1)
		if ps := e.stats.probabilities(l); ps != nil {
			hits = topShare(ps, slots)
		}
		out[l] = cacheLayer{gpu: gpu, hits: hits}
	}
	return out
}

// rates are a device's bandwidth (B/s, η_g applied for GPUs) and compute (FLOP/s, the
// prompt-matmul share of the peak for GPUs; 0 when unknown).
func (e *estimator) rates(dev string, kind backend.Kind) (bw, flops float64) {
	if kind == backend.KindCPU {
		return e.m.cpuBW, e.m.cpuFLOPS
	}
	g := e.m.gpu[dev]
	bw = gpuEfficiency * g.Bandwidth * gbps
	if bw <= 0 { // a GPU holding no weights: only its KV cache or compute buffer
		bw = math.Inf(1)
	}
	return bw, gpuComputeEff * g.TFLOPS * tflops
}

// cpuTypeShare is the share of the CPU's matmul rate (cpuGFLOPS, or --cpu-tflops) that
// llama.cpp's CPU prompt path reaches on weights of type t. The default rate was set on
// Q4_K_M models (Q4_K, Q6_K: 1). Measured with llama-bench at the reference commit, pp512
// on the 2-thread AVX-512 build machine, over 6-block synthesized models with random
// weights: Qwen3-30B-A3B Q4_K_M 236 t/s and Q8_0 181 t/s, the same FLOPs, so Q8_0 runs at
// 0.77 of Q4_K_M's rate (no x86 repacked kernel for Q8_0); gpt-oss-20b at 0.71 of the rate
// its Q4_K_M equal would reach, of which the Q8_0 attention is 21% of the FLOPs, leaving
// 0.69 for its MXFP4 experts. test-backend-ops' MUL_MAT_ID at 512 tokens agrees on the
// order (Q4_K 129-131 GFLOP/s, Q6_K 117-134, Q8_0 99-104, MXFP4 86). Other types: 1, not
// measured.
func cpuTypeShare(t tensor.Type) float64 {
	switch t {
	case tensor.Q8_0:
		return 0.77
	case tensor.MXFP4:
		return 0.69
	}
	return 1
}

// kvRead is, per device, the KV cache a token reads at the prediction's depth: each layer's
// bytes per cell times the cells in use (the sliding window at most); a recurrent layer's
// state for one sequence.
func (e *estimator) kvRead() map[string]float64 {
	c := e.plan.Context
	out := map[string]float64{}
	for _, l := range e.plan.Layers {
		if l.KVDevice == "" || l.KVBytes <= 0 {
			continue
		}
		switch l.Kind {
		case "recurrent":
			out[l.KVDevice] += float64(l.KVBytes) / float64(max(1, c.NSeq))
		case "attention", "swa":
			cells := c.NCtxSeq
			if l.Kind == "swa" {
				cells = c.SWACells
			}
			if cells <= 0 {
				continue
			}
			perCell := float64(l.KVBytes) / float64(cells*max(1, c.NStream))
			out[l.KVDevice] += perCell * float64(min(e.depth, cells))
		}
	}
	return out
}

// layerParts is the order llama.cpp's graph runs a block's pieces in: attention, the
// router, the routed experts, then the shared expert or the dense FFN.
var layerParts = []gguf.Class{gguf.ClassAttention, gguf.ClassRouter, gguf.ClassRoutedExpert, gguf.ClassSharedExpert, gguf.ClassDenseFFN}

// crossings counts the hand-overs between devices in one token's pass: from the embedding
// (on the CPU) through every block's pieces to the output head.
func crossings(plan *Plan) int {
	var prev string
	n := 0
	visit := func(cell string) {
		if cell == "" || cell == "-" {
			return
		}
		for _, dev := range strings.Split(cell, "+") {
			if prev != "" && dev != prev {
				n++
			}
			prev = dev
		}
	}
	var output *LayerUse
	for i := range plan.Layers {
		l := &plan.Layers[i]
		switch {
		case l.Index == -2:
			visit(l.Classes[gguf.ClassEmbedding.String()])
		case l.Index == -1:
			output = l
		}
	}
	for i := range plan.Layers {
		l := &plan.Layers[i]
		if l.Index < 0 || l.Kind == "nextn" {
			continue
		}
		for _, c := range layerParts {
			visit(l.Classes[c.String()])
		}
	}
	if output != nil {
		visit(output.Classes[gguf.ClassOutput.String()])
	}
	return n
}

// prefill is the time of the prompt: its first ubatch in detail, the prompt's length and
// the time of all its ubatches, each at the depth the ones before it leave. Ubatches past
// the first differ only in attention, but each is computed in full: a short loop.
func (e *estimator) prefill() (first *PrefillTime, prompt int, seconds float64) {
	u := max(e.plan.Context.NUBatch, 1)
	prompt = e.prompt
	if prompt <= 0 {
		prompt = u
	}
	for done := 0; done < prompt; done += u {
		t := e.ubatch(min(u, prompt-done), e.depth+done)
		if first == nil {
			first = t
		}
		if t.Unknown != "" {
			return t, prompt, 0
		}
		seconds += t.Seconds
	}
	return first, prompt, seconds
}

// ubatch is the time of one ubatch of u tokens after depth tokens.
func (e *estimator) ubatch(u, depth int) *PrefillTime {
	out := &PrefillTime{UBatch: u}
	for _, d := range e.plan.Devices {
		if d.Staging > 0 && u >= e.plan.Settings.OpOffloadMinBatch && out.OffloadTo == "" {
			out.OffloadTo = d.Device.Name
		}
	}
	devs := e.devices()
	byName := map[string]*DevicePrefill{}
	out.Devices = make([]DevicePrefill, len(devs))
	for i, d := range devs {
		out.Devices[i] = DevicePrefill{Device: d.Device.Name}
		byName[d.Device.Name] = &out.Devices[i]
	}
	var cpuExpert, cpuExpertActive float64
	gpuMatmuls := 0 // weight matmuls computed on a GPU, for their kernel launches
	for i := range e.plan.Tensors {
		t := &e.plan.Tensors[i]
		if byName[t.Device] == nil || len(t.Shape) < 2 || t.Class == gguf.ClassEmbedding {
			continue // not loaded, not a matmul, or a lookup
		}
		tokens := float64(u)
		if t.Class == gguf.ClassOutput {
			tokens = 1 // logits are computed for the last prompt token only
		}
		readShare, flopShare := 1.0, 1.0
		if t.Class == gguf.ClassRoutedExpert {
			readShare, flopShare = e.activeShare(t.Layer, u), e.expertShare()
		}
		bytes := float64(t.Bytes) * readShare
		flops := 2 * float64(elements(t.Shape)) * flopShare * tokens
		where := t.Device
		// ggml's scheduler offloads only weights in host buffers: the CPU's repack buffer
		// type is not one, so repacked weights are computed where they are.
		if e.kind[t.Device] == backend.KindCPU && out.OffloadTo != "" && t.Storage != StorageRepacked {
			where = out.OffloadTo
			if e.plan.Settings.OffloadAllExperts {
				bytes, readShare = float64(t.Bytes), 1 // -no-ooae: every expert crosses
			}
			out.CopyBytes += int64(bytes)
			bytes = 0 // copied, then read from VRAM at a rate that makes it negligible
			if t.Class == gguf.ClassRoutedExpert {
				cpuExpert += float64(t.Bytes)
				cpuExpertActive += float64(t.Bytes) * readShare
			}
		}
		dp := byName[where]
		if e.kind[where] != backend.KindCPU {
			gpuMatmuls++
		}
		bw, fl := e.rates(where, e.kind[where])
		if e.kind[where] == backend.KindCPU {
			fl *= cpuTypeShare(t.Type)
		}
		if fl <= 0 {
			out.Unknown = fmt.Sprintf("the compute of %s is unknown (give --gpu-model NAME or --gpu-tflops)", where)
			return out
		}
		cs, ms := flops/fl, bytes/bw
		dp.FLOPs += flops
		dp.ComputeSeconds += cs
		dp.MemorySeconds += ms
		dp.Seconds += max(cs, ms)
	}
	if cpuExpert > 0 {
		out.ActiveShare = cpuExpertActive / cpuExpert
	}
	for dev, flops := range e.attentionFLOPs(u, depth) {
		dp := byName[dev]
		_, fl := e.rates(dev, e.kind[dev])
		if dp == nil || fl <= 0 {
			continue // no KV cache there, or a GPU whose compute is unknown: checked above when it holds weights
		}
		s := flops / fl
		dp.FLOPs += flops
		dp.ComputeSeconds += s
		dp.Seconds += s
		out.AttentionSeconds += s
	}
	out.CopySeconds = float64(out.CopyBytes) / e.m.pcie
	out.CrossingSeconds = float64(crossings(e.plan)) * crossingTime
	out.OverheadSeconds = tokenOverhead + float64(kernelsPerMatmul*gpuMatmuls)*launchLatency
	out.Seconds = out.CopySeconds + out.CrossingSeconds + out.OverheadSeconds
	for _, d := range out.Devices {
		out.Seconds += d.Seconds
	}
	return out
}

// attentionFLOPs is, per device holding KV cache, the attention work of u prompt tokens
// after depth others: each token scores its query against every key it sees (the cached
// ones and, causally, the ubatch's own before it; at most the window on sliding-window
// layers) and sums as many values, 2·(k + v) FLOPs per pair, with k and v the widths of
// all heads' keys and values (see attentionWidths). Recurrent layers scan a fixed-size
// state: their work is in their weights.
//
// With DeepSeek Sparse Attention a token attends only the positions its indexer keeps (at
// most top-k), and a layer with an indexer of its own (an indexer cache) first scores every
// position it sees: 2·heads·dim FLOPs per pair (deepseek32.cpp, glm-dsa.cpp).
func (e *estimator) attentionFLOPs(u, depth int) map[string]float64 {
	width := attentionWidths(e.plan.Tensors)
	indexer := indexerWidths(e.plan.Tensors)
	topK := e.plan.Model.IndexerTopK
	out := map[string]float64{}
	for _, l := range e.plan.Layers {
		if l.KVDevice == "" || (l.Kind != "attention" && l.Kind != "swa") {
			continue
		}
		// Σ over the ubatch's tokens of the keys each sees: depth + 1 … depth + u.
		pairs := float64(u)*float64(depth) + float64(u)*float64(u+1)/2
		if w := e.plan.Context.SWAWindow; l.Kind == "swa" && w > 0 {
			pairs = min(pairs, float64(u)*float64(w))
		}
		if topK > 0 {
			if l.IndexerBytes > 0 {
				out[l.KVDevice] += 2 * indexer[l.Index] * pairs
			}
			pairs = keptPairs(u, depth, topK)
		}
		out[l.KVDevice] += 2 * width[l.Index] * pairs
	}
	return out
}

// keptPairs is Σ over u tokens after depth others of min(top-k, the positions each sees):
// the query–key pairs sparse attention computes.
func keptPairs(u, depth, topK int) float64 {
	first, last := depth+1, depth+u // what the ubatch's first and last tokens see
	switch {
	case last <= topK:
		return float64(u)*float64(depth) + float64(u)*float64(u+1)/2
	case first >= topK:
		return float64(u) * float64(topK)
	}
	below := float64(topK)*float64(topK+1)/2 - float64(first-1)*float64(first)/2 // first … topK
	return below + float64(last-topK)*float64(topK)
}

// indexerWidths is, per layer, the lightning indexer's heads × head size: the query width
// of its attn_q_b projection, which every scored position costs in multiply-adds.
func indexerWidths(tensors []TensorUse) map[int]float64 {
	width := map[int]float64{}
	for i := range tensors {
		t := &tensors[i]
		if strings.HasSuffix(t.Name, ".indexer.attn_q_b.weight") && len(t.Shape) >= 2 {
			width[t.Layer] = float64(t.Shape[1])
		}
	}
	return width
}

// attentionWidths is, per layer, the summed width of all heads' keys and values that a
// query–key pair costs. Ordinary attention scores with the query projection's width and
// sums values of the output projection's input width. MLA layers split into attn_k_b and
// attn_v_b run as llama.cpp runs them, absorbed: every head scores against the compressed
// cache row (kv_lora_rank + the rope part, attn_kv_a_mqa's output) and sums compressed
// values (kv_lora_rank, attn_v_b's input), 1088 wide per head on DeepSeek-V2/V3 against
// the 320 (192 + 128) of the decompressed form; older files with one attn_kv_b decompress.
func attentionWidths(tensors []TensorUse) map[int]float64 {
	type parts struct{ q, out, kvA, kvLora, heads float64 }
	by := map[int]*parts{}
	for i := range tensors {
		t := &tensors[i]
		if t.Class != gguf.ClassAttention || len(t.Shape) < 2 {
			continue
		}
		p := by[t.Layer]
		if p == nil {
			p = &parts{}
			by[t.Layer] = p
		}
		switch {
		case strings.HasSuffix(t.Name, ".attn_q.weight"), strings.HasSuffix(t.Name, ".attn_q_b.weight"):
			p.q = float64(t.Shape[1])
		case strings.HasSuffix(t.Name, ".attn_output.weight"):
			p.out = float64(t.Shape[0])
		case strings.HasSuffix(t.Name, ".attn_kv_a_mqa.weight"):
			p.kvA = float64(t.Shape[1])
		case strings.HasSuffix(t.Name, ".attn_v_b.weight") && len(t.Shape) == 3:
			p.kvLora, p.heads = float64(t.Shape[0]), float64(t.Shape[2])
		}
	}
	width := make(map[int]float64, len(by))
	for l, p := range by {
		if p.kvA > 0 && p.heads > 0 {
			width[l] = p.heads * (p.kvA + p.kvLora)
		} else {
			width[l] = p.q + p.out
		}
	}
	return width
}

// activeShare is the expected share of a layer's experts that at least one of u tokens
// routes to: the mean over experts of 1 − (1 − p_e)^u with measured frequencies p_e; without
// them 1 − (1 − k/E)^u (uniform routing), or concentratedShare where the architecture's
// routing is known to concentrate (routingConcentration).
func (e *estimator) activeShare(layer, u int) float64 {
	if ps := e.stats.probabilities(layer); len(ps) > 0 {
		sum := 0.0
		for _, p := range ps {
			sum += hitProbability(p, u)
		}
		return sum / float64(len(ps))
	}
	if a := routingConcentration[e.plan.Model.Arch]; a > 0 {
		return concentratedShare(e.expertShare(), u, a)
	}
	return hitProbability(e.expertShare(), u)
}

// routingConcentration is, by architecture, the shape a of the gamma distribution that
// concentratedShare spreads a ubatch's routing over a layer's experts with, where public
// measurements show a ubatch hitting far fewer experts than uniform routing would. Op
// offload copies only the experts a ubatch hits (llama.cpp since its pull request 15346),
// and that pull request measured gpt-oss-20b (32 experts, 4 a token) with its expert
// tensors in RAM, before and after the change, at ubatches of 128 to 2048 tokens: 124 →
// 203, 253 → 373, 503 → 685, 1015 → 1179 and 1630 → 2090 t/s. The copy of every expert
// took about a second a ubatch, so the ubatches hit 61%, 67%, 72%, 75-84% and 73% of the
// experts, where uniform routing hits all of them from 128 tokens on; a = 0.2 gives 59%,
// 64%, 69%, 73% and 76%. Its author's trace of gpt-oss-120b (128 experts) over a 512-token
// batch of real code shows 72 to 95 experts used in each of the first eight layers (56% to
// 74%; a = 0.2: 59%). For other architectures ik_llama.cpp's port of the change (its pull
// request 698) found that a ubatch large enough to be offloaded hits nearly every expert,
// so they keep uniform routing; measured statistics (--expert-stats) replace either.
var routingConcentration = map[string]float64{"gpt-oss": 0.2}

// concentratedShare is the expected share of a layer's experts that u tokens hit when, for
// the tokens of one ubatch, expert e's share of the routing is p·X_e with X_e drawn from a
// gamma distribution of shape a and mean 1 (p = k/E): 1 − E[(1 − p·X)^u], which is
// 1 − (1 + u·p/a)^−a in its Poisson form. Small a is uneven routing (many experts that the
// ubatch never hits), large a tends to uniform routing. At least the k experts of one token
// are hit.
func concentratedShare(p float64, u int, a float64) float64 {
	return max(-math.Expm1(-a*math.Log1p(float64(u)*p/a)), p)
}

// hitProbability is 1 − (1 − p)^u, computed without losing small p.
func hitProbability(p float64, u int) float64 {
	switch {
	case p >= 1:
		return 1
	case p <= 0:
		return 0
	}
	return -math.Expm1(float64(u) * math.Log1p(-p))
}

// checkFits reports whether every device with a known capacity keeps its margin free.
func (p *Plan) checkFits() bool {
	return !slices.ContainsFunc(p.Devices, func(d DeviceUse) bool {
		fits, known := d.Fits()
		return known && !fits
	})
}

// DecodeBandwidthFromRun inverts the decode model: the CPU bandwidth (GB/s) at which the plan
// decodes at the measured tokens/s on hw (whose CPU bandwidth is ignored), at the run's
// depth (opts.Depth; llama-bench's tg runs from an empty context). A CPU-only run of any
// model calibrates the machine this way: performance-model.md's (CPU-only tg) × (bytes read
// per token), less the per-token overhead and, for hybrid runs, the GPU's share.
func DecodeBandwidthFromRun(plan *Plan, hw Hardware, tps float64, opts PredictOptions) (float64, error) {
	if !(tps > 0) || math.IsInf(tps, 0) {
		return 0, fmt.Errorf("measured speed %v tokens/s: want a positive number", tps)
	}
	hw.CPU.DecodeBandwidth, hw.CPU.DecodeSource = 1, "" // any figure: only the other terms are used
	e, err := newEstimator(plan, hw, PredictOptions{Depth: opts.Depth})
	if err != nil {
		return 0, err
	}
	d := e.decode()
	rest := d.Seconds
	var cpuBytes int64
	for _, dd := range d.Devices {
		if dd.Kind == backend.KindCPU {
			rest -= dd.Seconds
			cpuBytes = dd.Bytes()
		}
	}
	left := 1/tps - rest
	if left <= 0 || cpuBytes == 0 {
		return 0, fmt.Errorf("%.1f tokens/s is faster than the model allows even with an infinitely fast CPU (%.2f ms per token without it)", tps, 1e3*rest)
	}
	return float64(cpuBytes) / left / gbps, nil
}
