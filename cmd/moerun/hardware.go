package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/placement"
)

// machineFlags describe what moerun cannot measure of a machine: its GPUs, its RAM's
// theoretical figures, the CPU's rated clock and the PCIe link. calibrate saves them in the profile; place
// --predict and fit apply them over it.
type machineFlags struct {
	GPUModel    string  `name:"gpu-model" placeholder:"NAME,..." help:"GPU model, one per GPU: sets its VRAM, bandwidth and compute ('--gpu-model list' prints the table)."`
	GPUBW       string  `name:"gpu-bw" placeholder:"GB/s,..." help:"GPU memory bandwidth, one per GPU (or one for all)."`
	GPUTFLOPS   string  `name:"gpu-tflops" placeholder:"TFLOPS,..." help:"GPU FP16 tensor peak, one per GPU (or one for all), for prompt speed."`
	RAMBW       float64 `name:"ram-bw" placeholder:"GB/s" help:"The RAM's theoretical bandwidth."`
	RAMChannels int     `name:"ram-channels" placeholder:"N" help:"Memory channels, with --ram-speed: theoretical bandwidth = channels × MT/s × 8 B."`
	RAMSpeed    float64 `name:"ram-speed" placeholder:"MT/s" help:"Memory transfer rate (5600 for DDR5-5600)."`
	CPUGHz      float64 `name:"cpu-ghz" placeholder:"GHz" help:"The CPU's maximum boost clock as its specification states it: scales the default matmul rate (0.08 TFLOPS per thread at 5.7 GHz)."`
	PCIe        string  `name:"pcie" placeholder:"GENxLANES" help:"The GPUs' PCIe link, e.g. 4x16 (default 4x16)."`
}

// apply writes the flags over hw: GPU flags replace all of its GPUs, RAM flags all of its
// CPU memory figures (a calibrated bandwidth included), so figures of two machines never
// mix.
func (m *machineFlags) apply(hw *placement.Hardware) error {
	if m.RAMBW < 0 || m.RAMSpeed < 0 || m.RAMChannels < 0 || m.CPUGHz < 0 {
		return badInput("--ram-bw, --ram-channels, --ram-speed and --cpu-ghz must be positive")
	}
	if (m.RAMChannels > 0) != (m.RAMSpeed > 0) {
		return badInput("--ram-channels and --ram-speed go together (e.g. --ram-channels 2 --ram-speed 5600)")
	}
	if m.RAMBW > 0 || m.RAMChannels > 0 {
		hw.CPU = placement.CPUSpec{Threads: hw.CPU.Threads, TFLOPS: hw.CPU.TFLOPS, GHz: hw.CPU.GHz, RAM: hw.CPU.RAM,
			RAMBandwidth: m.RAMBW, RAMChannels: m.RAMChannels, RAMSpeed: m.RAMSpeed}
	}
	if m.CPUGHz > 0 {
		hw.CPU.GHz = m.CPUGHz
	}
	if m.GPUModel != "" || m.GPUBW != "" || m.GPUTFLOPS != "" {
		gpus, err := m.gpus()
		if err != nil {
			return err
		}
		hw.GPUs = gpus
	}
	if m.PCIe != "" {
		if _, err := placement.ParsePCIe(m.PCIe); err != nil {
			return badInput("--pcie: %v", err)
		}
		hw.PCIe = m.PCIe
	}
	return nil
}

// hardwareFlags describe the machine a prediction is for (place --predict, fit): the
// profile (moerun calibrate's, read from the default location when present), the machine
// flags over it, and the CPU's measured figures.
type hardwareFlags struct {
	Profile      string `name:"profile" placeholder:"FILE" type:"path" help:"Hardware profile to read (default: $XDG_CONFIG_HOME/moerun/profile.json when it exists; see moerun calibrate)."`
	NoProfile    bool   `name:"no-profile" help:"Do not read the default hardware profile."`
	machineFlags `embed:""`
	CPUBWEff     float64 `name:"cpu-bw-eff" placeholder:"GB/s" help:"The CPU's effective bandwidth inside decode, measured; wins over the theoretical one."`
	CPUTFLOPS    float64 `name:"cpu-tflops" placeholder:"TFLOPS" help:"The CPU's quantized matmul throughput with all threads (default: threads × 0.08)."`
	CPUThreads   int     `name:"cpu-threads" placeholder:"N" help:"CPU threads (default: -t of a pasted command line, the profile's, or this machine's cores)."`
	Depth        int     `name:"depth" placeholder:"N" help:"Tokens already in the context while decoding and before the prompt: each new token reads their KV cache (default 0)."`
	Prompt       int     `name:"prompt-tokens" placeholder:"N" help:"Tokens of the prompt whose mean speed pp is, each ubatch attending to those before it (llama-bench's -p; default: one ubatch)."`
	ExpertStats  string  `name:"expert-stats" placeholder:"FILE" type:"path" help:"Routing statistics (moerun.expert-stats/v1): prompt copies as measured, and the expert-granular what-if."`
}

// given reports whether any of the flags was set (they only matter with a prediction).
func (h *hardwareFlags) given() bool {
	return *h != hardwareFlags{}
}

// listGPUModels answers --gpu-model list.
func listGPUModels(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "NAME\tGPU\tVRAM\tBANDWIDTH\tFP16 TENSOR\n")
	for _, m := range placement.GPUModels() {
		fmt.Fprintf(tw, "%s\t%s\t%.0f GiB\t%.0f GB/s\t%.0f TFLOPS\n", m.Name, m.Title, float64(m.VRAM)/(1<<30), m.Bandwidth, m.TFLOPS)
	}
	return tw.Flush()
}

// hardware merges the profile and the flags. threads is -t from a pasted llama.cpp command
// line (0: none).
func (h *hardwareFlags) hardware(threads int) (placement.Hardware, error) {
	var hw placement.Hardware
	prof, err := h.profile()
	if err != nil {
		return hw, err
	}
	if prof != nil {
		hw = prof.Hardware
	}
	if h.CPUBWEff < 0 || h.CPUTFLOPS < 0 || h.CPUThreads < 0 || h.Depth < 0 || h.Prompt < 0 {
		return hw, badInput("--cpu-bw-eff, --cpu-tflops, --cpu-threads, --depth and --prompt-tokens must be positive")
	}
	if err := h.apply(&hw); err != nil {
		return hw, err
	}
	if h.CPUBWEff > 0 {
		hw.CPU.DecodeBandwidth, hw.CPU.DecodeSource = h.CPUBWEff, "flag"
	}
	switch {
	case h.CPUThreads > 0:
		hw.CPU.Threads, hw.CPU.ThreadsSource = h.CPUThreads, "--cpu-threads"
	case threads > 0:
		hw.CPU.Threads, hw.CPU.ThreadsSource = threads, "-t"
	case hw.CPU.Threads > 0:
		hw.CPU.ThreadsSource = "profile"
	}
	if h.CPUTFLOPS > 0 {
		hw.CPU.TFLOPS = h.CPUTFLOPS
	}
	if err := hw.Validate(); err != nil {
		return hw, badInput("hardware: %v", err)
	}
	return hw, nil
}

// profile reads --profile, or the default profile when it exists.
func (h *hardwareFlags) profile() (*placement.Profile, error) {
	if h.Profile != "" {
		p, err := placement.LoadProfile(h.Profile, false)
		if err != nil {
			return nil, badInput("--profile: %v", err)
		}
		return p, nil
	}
	if h.NoProfile {
		return nil, nil
	}
	path, err := placement.DefaultProfilePath()
	if err != nil {
		return nil, nil // no configuration directory: no default profile
	}
	p, err := placement.LoadProfile(path, true)
	if err != nil {
		return nil, badInput("%v (fix it, run moerun calibrate again, or give --no-profile)", err)
	}
	return p, nil
}

// gpus builds the GPU list from --gpu-model, --gpu-bw and --gpu-tflops: lists of one entry per
// GPU, where a single value applies to every GPU.
func (h *machineFlags) gpus() ([]placement.GPUSpec, error) {
	models, bws, tfs := splitList(h.GPUModel), splitList(h.GPUBW), splitList(h.GPUTFLOPS)
	n := max(len(models), len(bws), len(tfs))
	for _, l := range [][]string{models, bws, tfs} {
		if len(l) > 1 && len(l) != n {
			return nil, badInput("--gpu-model, --gpu-bw and --gpu-tflops list different numbers of GPUs")
		}
	}
	pick := func(l []string, i int) string {
		switch len(l) {
		case 0:
			return ""
		case 1:
			return l[0]
		}
		return l[i]
	}
	out := make([]placement.GPUSpec, n)
	for i := range out {
		if name := pick(models, i); name != "" {
			m, err := placement.LookupGPUModel(name)
			if err != nil {
				return nil, badInput("--gpu-model: %v", err)
			}
			out[i] = m.Spec()
		}
		for _, f := range []struct {
			flag, text string
			dst        *float64
		}{{"--gpu-bw", pick(bws, i), &out[i].Bandwidth}, {"--gpu-tflops", pick(tfs, i), &out[i].TFLOPS}} {
			if f.text == "" {
				continue
			}
			v, err := strconv.ParseFloat(f.text, 64)
			if err != nil || v <= 0 {
				return nil, badInput("%s %q: want a positive number", f.flag, f.text)
			}
			*f.dst = v
		}
	}
	return out, nil
}

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// gpuDevices are dry-run GPUs sized by the hardware's VRAM, for when no --gpu, --gpus or
// --device-mem says otherwise.
func gpuDevices(hw placement.Hardware) ([]backend.Device, error) {
	var devs []backend.Device
	for i, g := range hw.GPUs {
		if g.VRAM <= 0 {
			return nil, badInput("GPU %d's memory is unknown: give --gpu-model or --gpu SIZE", i)
		}
		devs = append(devs, backend.GPU(i, g.VRAM))
	}
	return devs, nil
}

// llamaThreads finds -t N in the llama.cpp flags a pasted command line carried (the ignored
// list holds them as "-t 8" or "--threads 8").
func llamaThreads(ignored []string) int {
	n := 0
	for _, item := range ignored {
		f := strings.Fields(item)
		if len(f) == 2 && (f[0] == "-t" || f[0] == "--threads") {
			if v, err := placement.Stoi(f[1]); err == nil && v > 0 {
				n = v
			}
		}
	}
	return n
}

// routingStats reads --expert-stats.
func (h *hardwareFlags) routingStats() (*placement.RoutingStats, error) {
	return readRoutingStats(h.ExpertStats)
}

// readRoutingStats reads a routing statistics document (nil for no path).
func readRoutingStats(path string) (*placement.RoutingStats, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s, err := placement.ReadRoutingStats(f)
	if err != nil {
		return nil, badInput("%s: %v", path, err)
	}
	return s, nil
}

// predict adds the prediction (and, with routing statistics, the expert what-if) to a plan.
func (h *hardwareFlags) predict(plan *placement.Plan, hw placement.Hardware) error {
	stats, err := h.routingStats()
	if err != nil {
		return err
	}
	opts := placement.PredictOptions{Depth: h.Depth, Prompt: h.Prompt, Routing: stats}
	pred, err := placement.Predict(plan, hw, opts)
	if err != nil {
		return badInput("--predict: %v", err)
	}
	if stats != nil && pred.Fits {
		if pred.WhatIf, err = placement.ExpertWhatIf(plan, hw, stats, opts); err != nil {
			return badInput("--expert-stats: %v", err)
		}
	}
	plan.Prediction = pred
	return nil
}

// hardware reads the machine for --predict and sizes the dry run's devices from it where
// --gpu, --gpus, --device-mem and --ram did not: the profile's or --gpu-model's GPUs, the
// profile's RAM.
func (c *placeCmd) hardware(devs []backend.Device) (placement.Hardware, []backend.Device, error) {
	if !c.Predict {
		if c.Hardware.given() {
			return placement.Hardware{}, nil, badInput("the hardware flags (--gpu-model, --ram-bw, --expert-stats, …) describe the machine for a prediction: add --predict")
		}
		return placement.Hardware{}, devs, nil
	}
	hw, err := c.Hardware.hardware(llamaThreads(c.LlamaIgnored))
	if err != nil {
		return hw, nil, err
	}
	devs, err = hardwareDevices(devs, hw, c.GPU != "" || c.GPUs != "" || c.DeviceMem != "", c.RAM != "")
	return hw, devs, err
}

// hardwareDevices completes a device list (GPUs given or not, then the CPU) from the
// hardware: GPUs by their VRAM when none were given, the RAM when it was not.
func hardwareDevices(devs []backend.Device, hw placement.Hardware, gpusGiven, ramGiven bool) ([]backend.Device, error) {
	if !gpusGiven && len(hw.GPUs) > 0 {
		gpus, err := gpuDevices(hw)
		if err != nil {
			return nil, err
		}
		devs = append(gpus, devs[len(devs)-1])
	}
	if !ramGiven && hw.CPU.RAM > 0 {
		devs[len(devs)-1] = backend.CPU(hw.CPU.RAM)
	}
	if err := backend.Validate(devs); err != nil {
		return nil, badInput("devices: %v", err)
	}
	return devs, nil
}

// moerunSwitch reports whether args[i] is place's own --predict switch rather than llama.cpp's
// --predict N (n_predict, which a pasted command line may carry): it is llama.cpp's only
// when a number follows.
func moerunSwitch(command string, args []string, i int) bool {
	if command != "place" || args[i] != "--predict" {
		return false
	}
	if i+1 < len(args) {
		if _, err := strconv.Atoi(args[i+1]); err == nil {
			return false
		}
	}
	return true
}
