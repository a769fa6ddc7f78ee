package main

import "slices"

// placementFlags are llama.cpp's placement options (spelled as llama-server spells them, see
// llamaargs.go) and the dry-run device inventory, shared by every command that places a
// model: place now, run, serve and bench as they come. Their values are read with
// llama.cpp's own rules and order by rules() and devices() in place.go.
type placementFlags struct {
	GPULayers   string   `name:"n-gpu-layers" placeholder:"N|auto|all" group:"placement" help:"-ngl, --gpu-layers: layers to offload, counting the output layer first (default auto)."`
	Override    []string `name:"override-tensor" sep:"none" placeholder:"PATTERN=BUFFER,..." group:"placement" help:"-ot: put tensors whose name matches the regex on a buffer type (CPU, CUDA0, …); repeatable, first match wins."`
	CPUMoE      bool     `name:"cpu-moe" group:"placement" help:"-cmoe: keep every layer's routed experts on the CPU."`
	NCPUMoE     []string `name:"n-cpu-moe" sep:"none" placeholder:"N" group:"placement" help:"-ncmoe: keep the routed experts of the first N blocks on the CPU."`
	TensorSplit string   `name:"tensor-split" placeholder:"N0,N1,..." group:"devices" help:"-ts: share of the layers per GPU."`
	SplitMode   string   `name:"split-mode" placeholder:"none|layer|row" group:"devices" help:"-sm: how to split across GPUs (default layer)."`
	MainGPU     string   `name:"main-gpu" placeholder:"INDEX" group:"devices" help:"-mg: the GPU for -sm none."`
	Device      string   `name:"device" placeholder:"DEV,..." group:"devices" help:"-dev: the GPUs to use, or none."`
	CtxSize     string   `short:"c" name:"ctx-size" placeholder:"N" group:"memory" help:"-c: context size (default: the model's)."`
	BatchSize   string   `short:"b" name:"batch-size" placeholder:"N" group:"memory" help:"-b: logical batch: the most tokens a step takes before sampling, every slot's decode token and prompt tokens up to it (default 2048)."`
	UBatchSize  string   `name:"ubatch-size" placeholder:"N" group:"memory" help:"-ub: physical batch: the most tokens a forward pass takes, which sizes the compute buffers; at most -b, 0 for -b's (default 512)."`
	Parallel    string   `name:"parallel" placeholder:"N" group:"memory" help:"-np: server slots (default auto: 4 sharing one cache)."`
	CacheTypeK  string   `name:"cache-type-k" placeholder:"TYPE" group:"memory" help:"-ctk: K cache type (f16, q8_0, …)."`
	CacheTypeV  string   `name:"cache-type-v" placeholder:"TYPE" group:"memory" help:"-ctv: V cache type."`
	FlashAttn   string   `name:"flash-attn" placeholder:"on|off|auto" group:"memory" help:"-fa: flash attention (default auto)."`
	KVOffload   bool     `name:"kv-offload" negatable:"" default:"true" group:"memory" help:"-kvo/-nkvo: KV cache on the layers' devices (default) or all on the CPU."`
	KVUnified   bool     `name:"kv-unified" negatable:"" group:"memory" help:"-kvu/-no-kvu: one KV cache for all slots."`
	SWAFull     bool     `name:"swa-full" group:"memory" help:"Full-size sliding-window cache."`
	Mmap        bool     `name:"mmap" negatable:"" default:"true" group:"memory" help:"--no-mmap: read the CPU's weights into memory (in huge pages) instead of mapping the file."`
	Mlock       bool     `name:"mlock" group:"memory" help:"Read the CPU's weights into memory and lock them in RAM (as llama.cpp: no mmap)."`
	DirectIO    bool     `name:"direct-io" negatable:"" group:"memory" help:"-dio: read the CPU's weights into memory with direct I/O, bypassing the page cache (no mmap)."`
	LoadMode    string   `name:"load-mode" placeholder:"MODE" group:"memory" help:"-lm: auto or mmap (map the file), none, mlock or dio (read into memory), mmap+mlock (map and lock)."`
	NoHost      bool     `name:"no-host" group:"memory" help:"Skip the pinned host buffer (lets the CPU repack weights)."`
	Repack      bool     `name:"repack" negatable:"" default:"true" group:"memory" help:"-nr: --no-repack disables the CPU's repacked layouts."`
	OpOffload   bool     `name:"op-offload" negatable:"" default:"true" group:"memory" help:"--no-op-offload: never run CPU-held weights on the GPU."`
	ActiveOnly  bool     `name:"offload-only-active-experts" negatable:"" default:"true" group:"memory" help:"-no-ooae: op offload copies every expert of a CPU-held stack to the GPU, not only those the batch routes to (ik_llama.cpp's flag)."`
	HotStats    string   `name:"hot-stats" placeholder:"FILE" type:"path" group:"placement" help:"Routing statistics (moerun.expert-stats/v1, written by run --expert-stats) that -ot's hot:K expert selectors read: PATTERN@hot:K=DEVICE puts each layer's K most selected experts there. moerun's own."`
	ExpertCache string   `name:"expert-cache" placeholder:"SLOTS[:SWAPS]" group:"placement" help:"Keep SLOTS experts of each MoE layer whose experts are in RAM (-ot exps=CPU, --n-cpu-moe) on its GPU, the most used lately, refilling at most SWAPS a layer between two passes (default 2); SLOTS auto: as many as the GPU's free memory holds. moerun's own; run, bench and serve."`
	Fit         string   `name:"fit" placeholder:"on|off" group:"placement" help:"-fit: adjust unset -c, -ngl and overrides to the free memory (default on)."`
	FitTarget   string   `name:"fit-target" placeholder:"MiB,..." group:"placement" help:"-fitt: free memory --fit keeps per device (default 1024)."`
	FitCtx      string   `name:"fit-ctx" placeholder:"N" group:"placement" help:"-fitc: smallest context --fit may choose (default 4096)."`

	GPU       string `name:"gpu" placeholder:"SIZE" group:"devices" help:"Dry run with one GPU (CUDA0) with this much free memory: 8GiB, 8G, 8192MiB."`
	GPUs      string `name:"gpus" placeholder:"SIZE,..." group:"devices" help:"Dry run with several GPUs: 24GiB,24GiB."`
	SimGPU    string `name:"sim-gpu" placeholder:"SIZE,..." group:"devices" help:"Simulated GPUs CUDA0, CUDA1, ... with this much memory each: memory of their own that the host cannot address, computed with the CPU's kernels. run, bench and serve compute on them (same answers as the CPU, crossings counted); place and fit plan for them. For testing placements without a GPU."`
	DeviceMem string `name:"device-mem" placeholder:"NAME=SIZE,..." group:"devices" help:"Dry run with named devices: CUDA0=8GiB,CUDA1=12GiB."`
	RAM       string `name:"ram" placeholder:"SIZE" group:"devices" help:"The host's RAM, to check it (default: not checked)."`
	Semantics string `name:"semantics" default:"llama.cpp" enum:"llama.cpp,ik_llama.cpp" group:"placement" help:"Whose rules to apply: llama.cpp or ik_llama.cpp."`

	LlamaIgnored []string `name:"llama-ignored" hidden:"" sep:"none"`

	flagOrder []string // flag names in command-line order, from AfterApply
}

// given records a flag set in code (bench's lists) as given once, last: rules reads a flag
// only where the command line gave it.
func (c *placementFlags) given(name string) {
	c.flagOrder = append(slices.DeleteFunc(c.flagOrder, func(n string) bool { return n == name }), name)
}
