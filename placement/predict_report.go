package placement

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// The prediction's part of moerun.place/v1 (docs/schemas.md). Speeds are null when the plan
// does not fit (and pp_tps also when it cannot be predicted).
type jsonPrediction struct {
	Fits     bool          `json:"fits"`
	Problems []string      `json:"problems"`
	TG       *float64      `json:"tg_tps"`
	PP       *float64      `json:"pp_tps"`
	UBatch   int           `json:"ubatch"`
	Depth    int           `json:"depth"`
	Prompt   int           `json:"prompt"`
	Decode   *jsonDecode   `json:"decode"`
	Prefill  *jsonPrefill  `json:"prefill"`
	Machine  jsonMachine   `json:"machine"`
	Notes    []string      `json:"notes"`
	WhatIf   *jsonWhatIf   `json:"expert_what_if,omitempty"`
	Constant jsonConstants `json:"constants"`
}

type jsonDecode struct {
	Seconds         float64            `json:"seconds"`
	Crossings       int                `json:"crossings"`
	CrossingSeconds float64            `json:"crossing_seconds"`
	OverheadSeconds float64            `json:"overhead_seconds"`
	CacheHits       float64            `json:"expert_cache_hits,omitempty"`
	Devices         []jsonDeviceDecode `json:"devices"`
}

type jsonDeviceDecode struct {
	Device         string  `json:"device"`
	Kind           string  `json:"kind"`
	ExpertBytes    int64   `json:"expert_bytes"`
	OtherBytes     int64   `json:"other_bytes"`
	KVBytes        int64   `json:"kv_bytes"`
	FLOPs          float64 `json:"flops"`
	Bandwidth      float64 `json:"bandwidth_gbps"`
	MemorySeconds  float64 `json:"memory_seconds"`
	ComputeSeconds float64 `json:"compute_seconds"`
	Seconds        float64 `json:"seconds"`
	Bound          string  `json:"bound"`
}

type jsonPrefill struct {
	UBatch           int                 `json:"ubatch"`
	Seconds          float64             `json:"seconds"`
	AttentionSeconds float64             `json:"attention_seconds"`
	OffloadTo        string              `json:"offload_to"`
	CopyBytes        int64               `json:"copy_bytes"`
	CopySeconds      float64             `json:"copy_seconds"`
	ActiveShare      float64             `json:"active_share"`
	CrossingSeconds  float64             `json:"crossing_seconds"`
	OverheadSeconds  float64             `json:"overhead_seconds"`
	Devices          []jsonDevicePrefill `json:"devices"`
}

type jsonDevicePrefill struct {
	Device         string  `json:"device"`
	FLOPs          float64 `json:"flops"`
	ComputeSeconds float64 `json:"compute_seconds"`
	MemorySeconds  float64 `json:"memory_seconds"`
	Seconds        float64 `json:"seconds"`
}

type jsonMachine struct {
	CPUBandwidth   float64          `json:"cpu_bw_gbps"`
	CPUBandwidthBy string           `json:"cpu_bw_source"`
	CPUThreads     int              `json:"cpu_threads"`
	CPUThreadsBy   string           `json:"cpu_threads_source"`
	CPUTFLOPS      float64          `json:"cpu_tflops"`
	CPUTFLOPSBy    string           `json:"cpu_tflops_source"`
	GPUs           []jsonMachineGPU `json:"gpus"`
	PCIe           string           `json:"pcie"`
	PCIeBy         string           `json:"pcie_source"`
	PCIeGBs        float64          `json:"pcie_copy_gbps"`
}

type jsonMachineGPU struct {
	Device    string  `json:"device"`
	Model     string  `json:"model"`
	Bandwidth float64 `json:"bw_gbps"`
	TFLOPS    float64 `json:"tflops"`
}

// jsonConstants are the model's fixed parameters, so readers can redo the arithmetic.
type jsonConstants struct {
	GPUEfficiency float64 `json:"gpu_bw_efficiency"`
	Crossing      float64 `json:"crossing_seconds"`
	Overhead      float64 `json:"token_overhead_seconds"`
	GPUCompute    float64 `json:"gpu_compute_efficiency"`
	OffloadBatch  int     `json:"op_offload_min_batch"`
}

type jsonWhatIf struct {
	LayerTG   float64      `json:"layer_tg_tps"`
	Equal     jsonGranular `json:"equal_vram"`
	Spare     jsonGranular `json:"with_spare_vram"`
	Hot       jsonGranular `json:"hot_selector"`
	HotK      int          `json:"hot_k"`
	Skew      float64      `json:"skew"`
	Recommend string       `json:"recommend"`
	Why       string       `json:"why"`
	Llama     []string     `json:"llama_flags"`
	Notes     []string     `json:"notes"`
}

type jsonGranular struct {
	Budget   int64    `json:"vram_bytes"`
	Experts  int      `json:"experts_in_vram"`
	Coverage float64  `json:"read_coverage"`
	TG       float64  `json:"tg_tps"`
	Gain     float64  `json:"gain"`
	Rules    []string `json:"rules"`
}

func (p *Prediction) toJSON() *jsonPrediction {
	if p == nil {
		return nil
	}
	m := p.Machine
	out := &jsonPrediction{Fits: p.Fits, Problems: nonNil(p.Problems), UBatch: p.UBatch, Depth: p.Depth, Prompt: p.Prompt, Notes: nonNil(p.Notes),
		Machine: jsonMachine{CPUBandwidth: m.CPUBandwidth, CPUBandwidthBy: m.CPUBandwidthBy, CPUThreads: m.CPUThreads, CPUThreadsBy: m.CPUThreadsBy,
			CPUTFLOPS: m.CPUTFLOPS, CPUTFLOPSBy: m.CPUTFLOPSBy, GPUs: []jsonMachineGPU{}, PCIe: m.PCIe, PCIeBy: m.PCIeBy, PCIeGBs: m.PCIeGBs},
		Constant: jsonConstants{gpuEfficiency, crossingTime, tokenOverhead, gpuComputeEff, p.OffloadMinBatch},
	}
	for _, g := range m.GPUs {
		out.Machine.GPUs = append(out.Machine.GPUs, jsonMachineGPU(g))
	}
	if p.Fits {
		out.TG = &p.TG
		if p.PP > 0 {
			out.PP = &p.PP
		}
	}
	if d := p.Decode; d != nil {
		out.Decode = &jsonDecode{Seconds: d.Seconds, Crossings: d.Crossings, CrossingSeconds: d.CrossingSeconds, OverheadSeconds: d.OverheadSeconds, CacheHits: d.CacheHits,
			Devices: []jsonDeviceDecode{}}
		for _, dd := range d.Devices {
			out.Decode.Devices = append(out.Decode.Devices, jsonDeviceDecode{dd.Device, dd.Kind.String(), dd.ExpertBytes, dd.OtherBytes, dd.KVBytes,
				dd.FLOPs, dd.Bandwidth, dd.MemorySeconds, dd.ComputeSeconds, dd.Seconds, dd.Bound()})
		}
	}
	if f := p.Prefill; f != nil && f.Unknown == "" {
		out.Prefill = &jsonPrefill{UBatch: f.UBatch, Seconds: f.Seconds, AttentionSeconds: f.AttentionSeconds, OffloadTo: f.OffloadTo, CopyBytes: f.CopyBytes, CopySeconds: f.CopySeconds,
			ActiveShare: f.ActiveShare, CrossingSeconds: f.CrossingSeconds, OverheadSeconds: f.OverheadSeconds, Devices: []jsonDevicePrefill{}}
		for _, d := range f.Devices {
			out.Prefill.Devices = append(out.Prefill.Devices, jsonDevicePrefill(d))
		}
	}
	out.WhatIf = p.WhatIf.toJSON()
	return out
}

// toJSON is the expert what-if as its JSON object (the prediction's expert_what_if, and
// moerun fit's).
func (w *WhatIf) toJSON() *jsonWhatIf {
	if w == nil {
		return nil
	}
	g := func(x Granular) jsonGranular {
		return jsonGranular{x.Budget, x.Experts, x.Coverage, x.TG, x.Gain, nonNil(x.Rules)}
	}
	return &jsonWhatIf{LayerTG: w.LayerTG, Equal: g(w.Equal), Spare: g(w.Spare), Hot: g(w.Hot), HotK: w.HotK, Skew: w.Skew, Recommend: w.Recommend, Why: w.Why,
		Llama: nonNil(w.Llama), Notes: nonNil(w.Notes)}
}

// writeText writes the prediction section of the text report.
func (p *Prediction) writeText(w io.Writer) {
	if p == nil {
		return
	}
	fmt.Fprintf(w, "\nPREDICTION (decode at context depth %d; prompt in ubatches of %d)\n", p.Depth, p.UBatch)
	if !p.Fits {
		fmt.Fprintf(w, "  no speed: the placement does not fit (%s)\n", strings.Join(p.Problems, "; "))
	} else {
		pp := "not predicted"
		if p.PP > 0 {
			pp = fmt.Sprintf("%.0f tokens/s", p.PP)
		}
		fmt.Fprintf(w, "  tg ≈ %.1f tokens/s, pp ≈ %s\n", p.TG, pp)
		p.writeDecode(w)
		p.writePrefill(w)
	}
	p.Machine.writeText(w)
	for _, n := range p.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
	p.WhatIf.writeText(w)
}

func (p *Prediction) writeDecode(w io.Writer) {
	d := p.Decode
	fmt.Fprintf(w, "  per token (%.2f ms):\n", 1e3*d.Seconds)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "    DEVICE\tREAD\tEXPERTS\tOTHER\tKV\tBANDWIDTH\tMEMORY\tCOMPUTE\tTIME\tBOUND\t\n")
	for _, dd := range d.Devices {
		fmt.Fprintf(tw, "    %s\t%s\t%s\t%s\t%s\t%.1f GB/s\t%s\t%s\t%s\t%s\t\n", dd.Device, decimalBytes(dd.Bytes()), decimalBytes(dd.ExpertBytes),
			decimalBytes(dd.OtherBytes), decimalBytes(dd.KVBytes), dd.Bandwidth, ms(dd.MemorySeconds), ms(dd.ComputeSeconds), ms(dd.Seconds), dd.Bound())
	}
	tw.Flush()
	fmt.Fprintf(w, "    + %d device crossings × %.0f µs = %s, + %s per-token overhead\n", d.Crossings, 1e6*crossingTime, ms(d.CrossingSeconds), ms(d.OverheadSeconds))
}

func (p *Prediction) writePrefill(w io.Writer) {
	f := p.Prefill
	if f.Unknown != "" {
		return
	}
	fmt.Fprintf(w, "  per ubatch of %d prompt tokens (%.0f ms):", f.UBatch, 1e3*f.Seconds)
	for _, d := range f.Devices {
		if d.Seconds > 0 {
			fmt.Fprintf(w, " %s %s,", d.Device, ms(d.Seconds))
		}
	}
	if f.AttentionSeconds > 0 {
		fmt.Fprintf(w, " of which attention %s,", ms(f.AttentionSeconds))
	}
	if f.OffloadTo != "" {
		fmt.Fprintf(w, " copies of CPU weights to %s %s (%s, %.0f%% of the expert bytes hit)", f.OffloadTo, ms(f.CopySeconds),
			decimalBytes(f.CopyBytes), 100*f.ActiveShare)
	} else {
		fmt.Fprint(w, " no op offload")
	}
	fmt.Fprintln(w)
}

func (m *Machine) writeText(w io.Writer) {
	fmt.Fprintf(w, "  machine: CPU %.1f GB/s effective (%s), %d threads (%s), %.2f TFLOP/s (%s)\n", m.CPUBandwidth, m.CPUBandwidthBy, m.CPUThreads, m.CPUThreadsBy, m.CPUTFLOPS, m.CPUTFLOPSBy)
	for _, g := range m.GPUs {
		name, tf := g.Model, "compute unknown"
		if name == "" {
			name = "GPU"
		}
		if g.TFLOPS > 0 {
			tf = fmt.Sprintf("%.0f TFLOPS FP16 tensor peak", g.TFLOPS)
		}
		fmt.Fprintf(w, "           %s %s: %.0f GB/s, %s\n", g.Device, name, g.Bandwidth, tf)
	}
	fmt.Fprintf(w, "           PCIe %s (%s): %.1f GB/s for weight copies\n", m.PCIe, m.PCIeBy, m.PCIeGBs)
}

// maxRulesShown is how many expert rules the text report prints (JSON has them all).
const maxRulesShown = 6

// writeText writes the expert what-if for a terminal.
func (w *WhatIf) writeText(out io.Writer) {
	if w == nil {
		return
	}
	fmt.Fprintf(out, "\nEXPERT WHAT-IF (routing statistics: hottest experts in VRAM instead of whole layers)\n")
	fmt.Fprintf(out, "  whole layers (as placed): tg ≈ %.1f tokens/s\n", w.LayerTG)
	for _, g := range []struct {
		name string
		x    Granular
	}{{"same VRAM", w.Equal}, {"+ spare VRAM", w.Spare}} {
		fmt.Fprintf(out, "  experts, %s (%s): tg ≈ %.1f tokens/s (%+.1f%%), %d experts in VRAM serve %.0f%% of expert reads\n",
			g.name, humanBytes(g.x.Budget), g.x.TG, 100*g.x.Gain, g.x.Experts, 100*g.x.Coverage)
	}
	fmt.Fprintf(out, "  advice: %s — %s\n", w.Recommend, w.Why)
	if w.Recommend == "expert-granular" {
		fmt.Fprintf(out, "  moerun rules (expert selector @…; not expressible in llama.cpp):\n")
		rules := w.Spare.Rules
		if len(rules) > maxRulesShown+1 { // the catch-all rule is always shown
			rules = append(rules[:maxRulesShown:maxRulesShown], rules[len(rules)-1])
		}
		for i, r := range rules {
			if i == maxRulesShown && len(w.Spare.Rules) > len(rules) {
				fmt.Fprintf(out, "    … %d more (--json lists them all)\n", len(w.Spare.Rules)-len(rules))
			}
			fmt.Fprintf(out, "    -ot '%s'\n", r)
		}
	}
	if w.HotK > 0 {
		fmt.Fprintf(out, "  one selector, each layer's %d hottest experts (%s): tg ≈ %.1f tokens/s (%+.1f%%), %d experts serve %.0f%% of expert reads\n",
			w.HotK, humanBytes(w.Hot.Budget), w.Hot.TG, 100*w.Hot.Gain, w.Hot.Experts, 100*w.Hot.Coverage)
		quoted := make([]string, len(w.Hot.Rules))
		for i, r := range w.Hot.Rules {
			quoted[i] = "-ot '" + r + "'"
		}
		fmt.Fprintf(out, "    %s --hot-stats FILE, or -ot '%s=CPU' --expert-cache %d (the same VRAM, following the routing as it goes)\n",
			strings.Join(quoted, " "), expsRegex, w.HotK)
	}
	if len(w.Llama) > 0 {
		fmt.Fprintf(out, "  llama.cpp (whole layers only): %s\n", strings.Join(w.Llama, " "))
	}
	for _, n := range w.Notes {
		fmt.Fprintf(out, "  note: %s\n", n)
	}
}

// decimalBytes prints bytes in decimal units, as bandwidths are given (GB/s).
func decimalBytes(n int64) string {
	switch v := float64(n); {
	case v >= 1e9:
		return fmt.Sprintf("%.2f GB", v/1e9)
	case v >= 1e6:
		return fmt.Sprintf("%.1f MB", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1f kB", v/1e3)
	}
	return fmt.Sprintf("%d B", n)
}

func ms(s float64) string {
	if s < 1e-3 {
		return fmt.Sprintf("%.0f µs", 1e6*s)
	}
	return fmt.Sprintf("%.2f ms", 1e3*s)
}
