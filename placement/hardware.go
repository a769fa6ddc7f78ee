package placement

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Hardware describes the machine a prediction is for: the CPU's memory and compute, each GPU's
// bandwidth and compute, and the PCIe link between them. The memory sizes it records (RAM,
// VRAM) only describe the machine for commands that build a device list from it: Predict
// checks capacities on the plan's devices. Zero means "not known". The same struct is the
// body of a profile file (see Profile).
type Hardware struct {
	CPU  CPUSpec   `json:"cpu"`
	GPUs []GPUSpec `json:"gpus,omitempty"`
	// PCIe is the link the GPUs use to fetch CPU-held weights for large batches, as
	// GENxLANES ("4x16"); "" assumes PCIe 4.0 x16.
	PCIe string `json:"pcie,omitempty"`
}

// CPUSpec is the host side of Hardware.
type CPUSpec struct {
	Threads int `json:"threads,omitempty"` // -t; 0: the cores of the machine moerun runs on
	// ThreadsSource says where Threads came from ("--cpu-threads", "-t", "profile"), for
	// the report; not stored in profiles.
	ThreadsSource string `json:"-"`
	RAM           int64  `json:"ram_bytes,omitempty"` // installed memory
	// RAMChannels × RAMSpeed (MT/s) × 8 B is the theoretical bandwidth when RAMBandwidth is 0.
	RAMChannels  int     `json:"ram_channels,omitempty"`
	RAMSpeed     float64 `json:"ram_speed_mts,omitempty"`
	RAMBandwidth float64 `json:"ram_bw_gbps,omitempty"` // theoretical, GB/s
	// DecodeBandwidth is the effective bandwidth of the CPU inside decode, GB/s: what the
	// predictor divides CPU-read bytes by. It wins over any theoretical figure.
	DecodeBandwidth float64 `json:"decode_bw_gbps,omitempty"`
	// DecodeSource says where DecodeBandwidth came from: "matvec" (moerun calibrate's
	// mat-vec over expert-shaped weights), "run" (tokens/s of a real run × bytes read per
	// token), or "flag" (--cpu-bw-eff).
	DecodeSource string `json:"decode_bw_source,omitempty"`
	// StreamBandwidth is a measured plain sequential read of a large buffer, GB/s: the
	// ceiling no kernel beats. Informative; the predictor does not use it.
	StreamBandwidth float64 `json:"stream_bw_gbps,omitempty"`
	TFLOPS          float64 `json:"tflops,omitempty"` // quantized matmul throughput, all threads
	// GHz is the cores' maximum boost clock as the CPU's specification states it: without
	// TFLOPS, the matmul rate per thread scales with it (see cpuGFLOPS).
	GHz float64 `json:"ghz,omitempty"`
}

// GPUSpec is one GPU of Hardware, in device order (CUDA0 first).
type GPUSpec struct {
	Model     string  `json:"model,omitempty"`      // a name from GPUModels, when known
	Device    string  `json:"device,omitempty"`     // the device it describes; "" = by position
	VRAM      int64   `json:"vram_bytes,omitempty"` // total memory (informative: --gpu sets the free memory)
	Bandwidth float64 `json:"bw_gbps,omitempty"`    // memory bandwidth, GB/s
	TFLOPS    float64 `json:"tflops,omitempty"`     // FP16 tensor peak, dense
}

// GPUModel is a row of the built-in GPU table.
type GPUModel struct {
	Name      string  // command-line name: "rtx4090"
	Title     string  // "GeForce RTX 4090"
	VRAM      int64   // bytes
	Bandwidth float64 // GB/s
	// TFLOPS is the FP16 tensor-core peak without sparsity (with FP32 accumulation on
	// GeForce cards, which run it at half the FP16-accumulate rate): approximate, used only
	// for prompt-processing estimates.
	TFLOPS float64
}

const gib = 1 << 30

// gpuModels are the GPUs --gpu-model knows. Bandwidths are those of
// shared/reference/performance-model.md (the RTX 4060 Laptop's from the measurements it
// cites); VRAM sizes and tensor peaks are the vendors' published specifications.
var gpuModels = []GPUModel{
	{"rtx2080", "GeForce RTX 2080", 8 * gib, 448, 40.3},
	{"rtx3060-12g", "GeForce RTX 3060 12GB", 12 * gib, 360, 25.6},
	{"rtx3060ti", "GeForce RTX 3060 Ti", 8 * gib, 448, 32.4},
	{"rtx3070", "GeForce RTX 3070", 8 * gib, 448, 40.6},
	{"rtx3080", "GeForce RTX 3080 10GB", 10 * gib, 760, 59.5},
	{"rtx3090", "GeForce RTX 3090", 24 * gib, 936, 71},
	{"rtx3090ti", "GeForce RTX 3090 Ti", 24 * gib, 1008, 80},
	{"rtx4060", "GeForce RTX 4060", 8 * gib, 272, 30.2},
	{"rtx4060-laptop", "GeForce RTX 4060 Laptop", 8 * gib, 256, 23},
	{"rtx4060ti-8g", "GeForce RTX 4060 Ti 8GB", 8 * gib, 288, 44.1},
	{"rtx4060ti-16g", "GeForce RTX 4060 Ti 16GB", 16 * gib, 288, 44.1},
	{"rtx4070", "GeForce RTX 4070", 12 * gib, 504, 58.3},
	{"rtx4080", "GeForce RTX 4080", 16 * gib, 717, 97.5},
	{"rtx4090", "GeForce RTX 4090", 24 * gib, 1008, 165.2},
	{"rtx5060ti-16g", "GeForce RTX 5060 Ti 16GB", 16 * gib, 448, 47},
	{"rtx5070", "GeForce RTX 5070", 12 * gib, 672, 61.7},
	{"rtx5070ti", "GeForce RTX 5070 Ti", 16 * gib, 896, 87.9},
	{"rtx5080", "GeForce RTX 5080", 16 * gib, 960, 112.6},
	{"rtx5090", "GeForce RTX 5090", 32 * gib, 1792, 209.5},
	{"a6000", "RTX A6000", 48 * gib, 768, 154.8},
	{"rtx-pro-6000", "RTX PRO 6000 Blackwell", 96 * gib, 1792, 500},
	{"h100-sxm", "H100 SXM 80GB", 80 * gib, 3350, 989},
	{"h200", "H200 141GB", 141 * 1e9, 4800, 989},
}

// GPUModels lists the built-in GPU table.
func GPUModels() []GPUModel { return append([]GPUModel(nil), gpuModels...) }

// LookupGPUModel finds a GPU by its table name, ignoring case, spaces, '_' and a leading
// "nvidia-" or "geforce-" ("RTX_4090" and "geforce rtx4090" both work).
func LookupGPUModel(name string) (GPUModel, error) {
	key := strings.ToLower(strings.TrimSpace(name))
	key = strings.NewReplacer(" ", "", "_", "").Replace(key)
	for _, prefix := range []string{"nvidia-", "nvidia", "geforce-", "geforce"} {
		key = strings.TrimPrefix(key, prefix)
	}
	for _, m := range gpuModels {
		if key == m.Name || key == strings.ReplaceAll(m.Name, "-", "") {
			return m, nil
		}
	}
	names := make([]string, len(gpuModels))
	for i, m := range gpuModels {
		names[i] = m.Name
	}
	return GPUModel{}, fmt.Errorf("unknown GPU model %q; known: %s", name, strings.Join(names, ", "))
}

// Spec turns a table row into the GPUSpec of one device.
func (m GPUModel) Spec() GPUSpec {
	return GPUSpec{Model: m.Name, VRAM: m.VRAM, Bandwidth: m.Bandwidth, TFLOPS: m.TFLOPS}
}

// RAMBandwidth is the theoretical bandwidth of channels 64-bit channels at the given
// transfer rate: channels × MT/s × 8 B, in GB/s (DDR5-5600 dual channel: 89.6).
func RAMBandwidth(channels int, mts float64) float64 {
	return float64(channels) * mts * 8 / 1000
}

// PCIeLink is a PCIe generation and lane count.
type PCIeLink struct{ Gen, Lanes int }

// pcieLaneGBs is the usable rate of one lane per direction, GB/s, by generation (after
// 8b/10b or 128b/130b encoding): 3.0 x16 is 15.75 GB/s, 4.0 x16 31.5, 5.0 x16 63.
var pcieLaneGBs = map[int]float64{1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.877}

// ParsePCIe reads a link as GENxLANES: "4x16", "gen4x16", "pcie4.0x8".
func ParsePCIe(s string) (PCIeLink, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	t = strings.TrimPrefix(strings.TrimPrefix(t, "pcie"), "gen")
	genText, lanesText, ok := strings.Cut(t, "x")
	genText = strings.TrimSuffix(genText, ".0")
	gen, err1 := strconv.Atoi(genText)
	lanes, err2 := strconv.Atoi(lanesText)
	if !ok || err1 != nil || err2 != nil || pcieLaneGBs[gen] == 0 || !validLanes(lanes) {
		return PCIeLink{}, fmt.Errorf("PCIe link %q: want GENxLANES with generation 1-6 and 1, 2, 4, 8 or 16 lanes, e.g. 4x16", s)
	}
	return PCIeLink{Gen: gen, Lanes: lanes}, nil
}

func validLanes(n int) bool { return n == 1 || n == 2 || n == 4 || n == 8 || n == 16 }

func (l PCIeLink) String() string { return fmt.Sprintf("%dx%d", l.Gen, l.Lanes) }

// Theoretical is the link's rate per direction, GB/s.
func (l PCIeLink) Theoretical() float64 { return pcieLaneGBs[l.Gen] * float64(l.Lanes) }

// Effective is what copies of weights reach: 0.78 of the link (performance-model.md: about
// 12, 25 and 50 GB/s on x16 links of generations 3, 4 and 5 from pinned memory). Weights used
// in place from the file mapping are pageable memory, which the driver stages through a
// pinned buffer; public prompt measurements of mapped weights (gpt-oss-120b with
// --n-cpu-moe on an RTX 3090, docs/predict.md) imply at least this rate, not less, so
// mapped and pinned weights are copied at the same rate.
func (l PCIeLink) Effective() float64 { return 0.78 * l.Theoretical() }

// defaultPCIe is assumed when neither flags nor the profile name a link.
var defaultPCIe = PCIeLink{Gen: 4, Lanes: 16}

// Profile is a hardware profile file (schema moerun.profile/v1): the machine's Hardware and
// how its figures were obtained. moerun calibrate writes it; place --predict and fit read it.
type Profile struct {
	Schema  string `json:"schema"`
	Created string `json:"created,omitempty"` // RFC 3339
	Host    string `json:"host,omitempty"`    // the CPU's name, for people reading the file
	Hardware
	// Calibration records how the CPU figures were measured, for people and for a later
	// re-calibration; the predictor reads only Hardware.
	Calibration *Calibration `json:"calibration,omitempty"`
}

// Calibration is what moerun calibrate measured.
type Calibration struct {
	Method   string  `json:"method"`              // "matvec" or "run"
	Model    string  `json:"model,omitempty"`     // matvec: the preset whose experts were copied; run: the model run
	Type     string  `json:"type,omitempty"`      // matvec: the weight set (layers, experts, types, shapes)
	Kernel   string  `json:"kernel,omitempty"`    // which dot-product kernels ran
	Threads  int     `json:"threads"`             // workers used
	SetBytes int64   `json:"set_bytes,omitempty"` // size of the weight set read
	LLCBytes int64   `json:"llc_bytes,omitempty"` // last-level cache size seen (0: unknown)
	Bytes    int64   `json:"bytes,omitempty"`     // bytes read by the timed mat-vecs
	Seconds  float64 `json:"seconds,omitempty"`   // time they took
	TPS      float64 `json:"tokens_per_s"`        // run: decode tokens/s; matvec: steps (k experts × every layer) per second
	Note     string  `json:"note,omitempty"`      // what the figures mean
	Run      string  `json:"run,omitempty"`       // for "run": the command measured
	Stream   float64 `json:"stream_s,omitempty"`  // seconds of the stream-read measurement
}

// ProfileSchema names the profile document.
const ProfileSchema = "moerun.profile/v1"

// DefaultProfilePath is where profiles live: $XDG_CONFIG_HOME/moerun/profile.json (on Linux;
// the platform's user configuration directory elsewhere).
func DefaultProfilePath() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("no configuration directory for the profile (set $XDG_CONFIG_HOME or give --profile FILE): %w", err)
	}
	return filepath.Join(dir, "moerun", "profile.json"), nil
}

// maxProfileBytes caps what ReadProfile reads: a profile is a few hundred bytes.
const maxProfileBytes = 1 << 20

// ReadProfile reads and checks a profile document.
func ReadProfile(r io.Reader) (*Profile, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxProfileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxProfileBytes {
		return nil, fmt.Errorf("profile: larger than %d bytes, not a moerun profile", maxProfileBytes)
	}
	var p Profile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("profile: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("profile: data after the JSON document")
	}
	if p.Schema != ProfileSchema {
		return nil, fmt.Errorf("profile: schema %q, want %q", p.Schema, ProfileSchema)
	}
	if err := p.Hardware.Validate(); err != nil {
		return nil, fmt.Errorf("profile: %w", err)
	}
	return &p, nil
}

// LoadProfile reads a profile file; a missing file is (nil, nil) when optional.
func LoadProfile(path string, optional bool) (*Profile, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) && optional {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	p, err := ReadProfile(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// Write writes the profile as indented JSON.
func (p *Profile) Write(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(p)
}

// Validate checks that every figure is a sane positive number (or zero, unknown).
func (h *Hardware) Validate() error {
	c := h.CPU
	type bound struct {
		what     string
		v, limit float64
	}
	checks := []bound{
		{"cpu.threads", float64(c.Threads), 1 << 16},
		{"cpu.ram_bytes", float64(c.RAM), 1 << 60},
		{"cpu.ram_channels", float64(c.RAMChannels), 64},
		{"cpu.ram_speed_mts", c.RAMSpeed, 100000},
		{"cpu.ram_bw_gbps", c.RAMBandwidth, 100000},
		{"cpu.decode_bw_gbps", c.DecodeBandwidth, 100000},
		{"cpu.stream_bw_gbps", c.StreamBandwidth, 100000},
		{"cpu.tflops", c.TFLOPS, 100000},
		{"cpu.ghz", c.GHz, 100},
	}
	for i, g := range h.GPUs {
		p := fmt.Sprintf("gpus[%d].", i)
		checks = append(checks, bound{p + "vram_bytes", float64(g.VRAM), 1 << 50},
			bound{p + "bw_gbps", g.Bandwidth, 1e6}, bound{p + "tflops", g.TFLOPS, 1e6})
	}
	for _, b := range checks {
		if math.IsNaN(b.v) || b.v < 0 || b.v > b.limit {
			return fmt.Errorf("%s = %v is out of range (0 to %v)", b.what, b.v, b.limit)
		}
	}
	if (c.RAMChannels == 0) != (c.RAMSpeed == 0) {
		return fmt.Errorf("cpu.ram_channels and cpu.ram_speed_mts go together (give both or neither)")
	}
	switch c.DecodeSource {
	case "", "matvec", "run", "flag":
	default:
		return fmt.Errorf("cpu.decode_bw_source %q: want matvec, run or flag", c.DecodeSource)
	}
	if h.PCIe != "" {
		if _, err := ParsePCIe(h.PCIe); err != nil {
			return err
		}
	}
	return nil
}
