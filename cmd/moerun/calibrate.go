package main

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/internal/mmap"
	"github.com/moerun/moerun/placement"
	"github.com/moerun/moerun/tensor"
)

// calibCmd is `moerun calibrate`: it measures this machine's CPU for the predictor and
// saves a hardware profile that place --predict and fit read.
//
// What it measures: the RAM's streaming read bandwidth (tensor.Pool.StreamRead over a
// buffer several times the last-level cache), and the effective decode bandwidth — the
// throughput of moerun's own expert mat-vecs (tensor.Pool.MulMatID, one token, k random
// experts per layer: exactly the routed-expert work of a decode step) over a synthesized set
// of expert weights of a preset's shapes and types, also several times the cache. Until
// moerun's runtime decodes whole models, that is the closest thing to a real run it has;
// --from-run instead fills the same figure from a real run's tokens/s (llama-bench's tg of a
// model run on the CPU alone), which is what predictions of llama.cpp want.
type calibCmd struct {
	Preset  string       `name:"preset" default:"qwen3-30b-a3b:q4_k_m" placeholder:"NAME[:MIX]" help:"The model whose expert shapes and weight types are measured (or, with --from-run, that was run)." group:"model"`
	Model   string       `short:"m" name:"model" placeholder:"FILE" help:"With --from-run: the GGUF file that was run (instead of --preset)." group:"model"`
	FromRun float64      `name:"from-run" placeholder:"TOKENS/S" help:"Calibrate from a real CPU-only run of the model instead of measuring: its decode tokens/s (llama-bench tg)." group:"model"`
	Threads int          `short:"t" name:"threads" placeholder:"N" help:"Threads (default: this machine's physical cores)."`
	Size    string       `name:"size" placeholder:"SIZE" help:"Size of the weight set (default: 4 × the last-level cache, at least 1 GiB)."`
	Seconds float64      `name:"seconds" default:"3" help:"How long to time the mat-vecs."`
	Output  string       `short:"o" name:"output" placeholder:"FILE" type:"path" help:"Where to save the profile (default: the default profile, $XDG_CONFIG_HOME/moerun/profile.json)." group:"output"`
	DryRun  bool         `name:"dry-run" help:"Measure and print, but save nothing." group:"output"`
	JSON    bool         `name:"json" help:"Print the profile as JSON." group:"output"`
	Machine machineFlags `embed:"" group:"prediction"`
}

// Help is the command's detailed help: what to know first, and an example that docs/docs_test.go runs.
func (*calibCmd) Help() string {
	return "Without --from-run it measures this machine for a few seconds (--seconds) on a weight set larger than the caches.\n" +
		"\n" +
		"Example (derive the CPU's effective bandwidth from a llama-bench CPU run of Qwen3-30B-A3B at 20 tokens/s; print, do not save):\n" +
		"\n" +
		"    moerun calibrate --from-run 20 --preset qwen3-30b-a3b --dry-run"
}

// Calibration limits.
const (
	minSetBytes  = 1 << 30 // below this, caches of some server CPUs hold a good part of the set
	llcMultiple  = 4       // the set is this many times the last-level cache
	maxStreamRun = 5       // stream-read passes; the best counts
)

func (c *calibCmd) Run(e *env) error {
	if c.Machine.GPUModel == "list" {
		return listGPUModels(e.stdout)
	}
	if c.Threads < 0 || !(c.Seconds > 0) || c.Seconds > 600 || c.FromRun < 0 {
		return badInput("--threads, --seconds (up to 600) and --from-run must be positive")
	}
	prof, err := c.baseProfile()
	if err != nil {
		return err
	}
	threads := c.Threads
	if threads == 0 {
		threads = tensor.DefaultThreads()
	}
	prof.CPU.Threads = threads
	if c.FromRun > 0 {
		err = c.fromRun(prof)
	} else {
		err = c.measureMatVec(e, prof, threads)
	}
	if err != nil {
		return err
	}
	if err := prof.Hardware.Validate(); err != nil {
		return fmt.Errorf("calibration gave an invalid profile: %w", err)
	}
	if c.JSON {
		if err := prof.Write(e.stdout); err != nil {
			return err
		}
	} else {
		c.print(e, prof)
	}
	if c.DryRun {
		return nil
	}
	return c.save(e, prof)
}

// baseProfile starts from the existing profile, keeping what calibrate does not measure (GPUs,
// PCIe, the RAM's theoretical figures, the CPU's rated clock), then applies the machine flags.
func (c *calibCmd) baseProfile() (*placement.Profile, error) {
	path, err := c.path()
	if err != nil {
		return nil, err
	}
	prof := &placement.Profile{Schema: placement.ProfileSchema}
	if old, err := placement.LoadProfile(path, true); err == nil && old != nil { // a broken one is replaced
		prof.Hardware = old.Hardware
	}
	prof.Created, prof.Host = time.Now().UTC().Format(time.RFC3339), cpuName()
	theo := prof.CPU
	prof.CPU = placement.CPUSpec{RAM: totalRAM(), RAMBandwidth: theo.RAMBandwidth, RAMChannels: theo.RAMChannels, RAMSpeed: theo.RAMSpeed, GHz: theo.GHz}
	if err := c.Machine.apply(&prof.Hardware); err != nil {
		return nil, err
	}
	return prof, nil
}

func (c *calibCmd) path() (string, error) {
	if c.Output != "" {
		return c.Output, nil
	}
	return placement.DefaultProfilePath()
}

// fromRun fills the decode bandwidth from a real CPU-only run: the model's bytes read per
// token at the measured speed.
func (c *calibCmd) fromRun(prof *placement.Profile) error {
	source := &placeCmd{Model: c.Model}
	if c.Model == "" {
		source.Preset = c.Preset
	}
	model, closeModel, err := source.model()
	if err != nil {
		return err
	}
	defer closeModel()
	r := placement.DefaultRules()
	r.CtxSize, r.Fit = 4096, false
	plan, err := placement.Place(model, r, []backend.Device{backend.CPU(0)})
	if err != nil {
		return placeError(err)
	}
	bw, err := placement.DecodeBandwidthFromRun(plan, prof.Hardware, c.FromRun, placement.PredictOptions{})
	if err != nil {
		return badInput("--from-run: %v", err)
	}
	prof.CPU.DecodeBandwidth, prof.CPU.DecodeSource = bw, "run"
	prof.Calibration = &placement.Calibration{Method: "run", Model: model.Name, Threads: prof.CPU.Threads, TPS: c.FromRun,
		Run:  fmt.Sprintf("%.2f tokens/s decoding %s on the CPU alone", c.FromRun, model.Name),
		Note: "decode_bw_gbps = bytes read per token / (1/tokens_per_s - per-token overhead)"}
	return nil
}

// expertSet is the synthesized weights: per layer the gate, up and down expert stacks of a
// preset, in its types, all in one buffer.
type expertSet struct {
	buf       []byte
	free      func() error        // releases buf
	layers    [][3]*tensor.Matrix // gate, up, down
	perExpert int64               // bytes of one expert's three matrices
	k         int                 // experts used per token
	embd, ff  int
}

// expertShape is a preset's routed experts: the types of the gate, up and down stacks and
// their sizes.
type expertShape struct {
	types            [3]tensor.Type // gate, up, down
	embd, ff, number int
	used             int
}

// expertShapes reads a preset's routed experts from its layout: the first MoE block's
// ffn_gate_exps, ffn_up_exps and ffn_down_exps.
func expertShapes(spec string) (expertShape, error) {
	var sh expertShape
	model, closeModel, err := presetModel(spec)
	if err != nil {
		return sh, err
	}
	defer closeModel()
	byName := map[string]gguf.TensorInfo{}
	first := -1
	for _, t := range model.Tensors {
		byName[t.Name] = t
		if l, ok := gguf.LayerOf(t.Name); ok && strings.HasSuffix(t.Name, ".ffn_gate_exps.weight") && (first < 0 || l < first) {
			first = l
		}
	}
	used, _ := model.Metadata.IntOr("{arch}.expert_used_count", 0)
	sh.used = int(used)
	var found [3]bool
	for i, part := range []string{"gate", "up", "down"} {
		t, ok := byName[fmt.Sprintf("blk.%d.ffn_%s_exps.weight", first, part)]
		if !ok || len(t.Shape) != 3 {
			continue
		}
		found[i], sh.types[i] = true, t.Type
		if part == "gate" {
			sh.embd, sh.ff, sh.number = int(t.Shape[0]), int(t.Shape[1]), int(t.Shape[2])
		}
	}
	if found != [3]bool{true, true, true} || sh.used <= 0 || sh.used > sh.number {
		return sh, badInput("--preset %s: it has no separate ffn_gate/up/down expert tensors to measure (use a model such as qwen3-30b-a3b)", spec)
	}
	return sh, nil
}

// newExpertSet lays out layers of the preset's routed experts until the set reaches size
// bytes (with fewer experts per layer when one layer alone is larger), each matrix
// quantized once from random weights and copied to every expert: the values do not matter
// to the speed, but every byte is distinct memory.
func newExpertSet(spec string, size int64, seed uint64) (*expertSet, string, error) {
	sh, err := expertShapes(spec)
	if err != nil {
		return nil, "", err
	}
	rng := rand.New(rand.NewPCG(seed, seed))
	// [rows, cols] of gate, up, down per expert; cols is the dot-product length.
	dims := [3][2]int{{sh.ff, sh.embd}, {sh.ff, sh.embd}, {sh.embd, sh.ff}}
	var protos [3][]byte
	var perExpert int64
	for i, d := range dims {
		rowBytes, err := sh.types[i].RowBytes(int64(d[1]))
		if err != nil {
			return nil, "", err
		}
		vals := make([]float32, d[1])
		protos[i] = make([]byte, rowBytes*int64(d[0]))
		for r := range d[0] {
			for j := range vals {
				vals[j] = float32(rng.NormFloat64()) * 0.02
			}
			if err := tensor.Quantize(sh.types[i], vals, protos[i][int64(r)*rowBytes:int64(r+1)*rowBytes]); err != nil {
				return nil, "", fmt.Errorf("quantizing a %s expert: %w", sh.types[i], err)
			}
		}
		perExpert += int64(len(protos[i]))
	}
	experts := sh.number
	if int64(experts)*perExpert > size {
		experts = max(sh.used, int(size/perExpert))
	}
	layerBytes := int64(experts) * perExpert
	layers := max(1, int((size+layerBytes-1)/layerBytes))
	// In huge pages where the system gives them, as moerun maps model files.
	buf, free, err := mmap.Anonymous(int(int64(layers) * layerBytes))
	if err != nil {
		return nil, "", err
	}
	set := &expertSet{k: sh.used, embd: sh.embd, ff: sh.ff, perExpert: perExpert, buf: buf, free: free}
	off := int64(0)
	for range layers {
		var mats [3]*tensor.Matrix
		for i, d := range dims {
			n := int64(len(protos[i])) * int64(experts)
			data := set.buf[off : off+n]
			for e := range experts {
				copy(data[int64(e)*int64(len(protos[i])):], protos[i])
			}
			m, err := tensor.NewMatrix(sh.types[i], []int64{int64(d[1]), int64(d[0]), int64(experts)}, data)
			if err != nil {
				free()
				return nil, "", err
			}
			mats[i], off = m, off+n
		}
		set.layers = append(set.layers, mats)
	}
	desc := fmt.Sprintf("%d layers × %d experts of %s (gate/up %s, down %s, %d × %d), %d used per token",
		layers, experts, spec, sh.types[0], sh.types[2], sh.embd, sh.ff, sh.used)
	return set, desc, nil
}

// measureMatVec measures the stream-read and expert mat-vec bandwidths.
func (c *calibCmd) measureMatVec(e *env, prof *placement.Profile, threads int) error {
	llc := llcBytes()
	size := max(int64(minSetBytes), llcMultiple*llc)
	if c.Size != "" {
		var err error
		if size, err = parseSize("--size", c.Size); err != nil {
			return err
		}
	}
	fmt.Fprintf(e.stderr, "calibrate: building %s of expert weights…\n", humanSize(size))
	set, desc, err := newExpertSet(c.Preset, size, 1)
	if err != nil {
		return err
	}
	defer set.free()
	pool := tensor.NewPool(threads)
	defer pool.Close()
	fmt.Fprintf(e.stderr, "calibrate: stream read, %d threads…\n", threads)
	stream, streamSec, err := streamBandwidth(pool, set.buf, maxStreamRun)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "calibrate: expert mat-vecs for %.0f s…\n", c.Seconds)
	bytes, sec, steps, err := set.decode(pool, time.Duration(c.Seconds*float64(time.Second)))
	if err != nil {
		return err
	}
	kernel := kernelDescription()
	bw := float64(bytes) / sec / 1e9
	prof.CPU.DecodeBandwidth, prof.CPU.DecodeSource, prof.CPU.StreamBandwidth = bw, "matvec", stream
	prof.Calibration = &placement.Calibration{Method: "matvec", Model: c.Preset, Type: desc, Kernel: kernel, Threads: threads,
		SetBytes: int64(len(set.buf)), LLCBytes: llc, Bytes: bytes, Seconds: sec, TPS: float64(steps) / sec, Stream: streamSec,
		Note: "decode_bw_gbps is the throughput of moerun's expert mat-vecs (one token, k random experts per layer) " +
			"over weights far larger than the cache; stream_bw_gbps a plain read of the same memory. " +
			"It predicts moerun's own decoding (" + kernel + "); " +
			"to predict llama.cpp, calibrate with --from-run from a llama-bench CPU run instead"}
	return nil
}

// streamBandwidth is the best of reads stream reads of buf, GB/s, and the time they took.
func streamBandwidth(pool *tensor.Pool, buf []byte, reads int) (float64, float64, error) {
	best, total := 0.0, 0.0
	for range reads {
		start := time.Now()
		if err := pool.StreamRead(buf); err != nil {
			return 0, 0, err
		}
		s := time.Since(start).Seconds()
		total += s
		best = max(best, float64(len(buf))/s/1e9)
	}
	return best, total, nil
}

// decode runs decode steps for at least d: per layer, the gate and up mat-vecs of one token
// for k random experts, then their down mat-vecs. It returns the weight bytes read, the
// seconds and the steps.
func (s *expertSet) decode(pool *tensor.Pool, d time.Duration) (int64, float64, int, error) {
	rng := rand.New(rand.NewPCG(2, 2))
	x := make([]float32, s.embd)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	gate, up := make([]float32, s.k*s.ff), make([]float32, s.k*s.ff)
	down := make([]float32, s.k*s.embd)
	ids := make([]int32, s.k)
	step := func() (int64, error) {
		var n int64
		for _, l := range s.layers {
			pickExperts(rng, ids, l[0].Experts())
			if err := pool.MulMatID(gate, l[0], x, ids, s.k); err != nil {
				return 0, err
			}
			if err := pool.MulMatID(up, l[1], x, ids, s.k); err != nil {
				return 0, err
			}
			if err := pool.MulMatID(down, l[2], gate, ids, s.k); err != nil {
				return 0, err
			}
			n += int64(s.k) * s.perExpert
		}
		return n, nil
	}
	if _, err := step(); err != nil { // warm up: pages, caches, workers
		return 0, 0, 0, err
	}
	var bytes int64
	steps := 0
	start := time.Now()
	for time.Since(start) < d || steps == 0 {
		n, err := step()
		if err != nil {
			return 0, 0, 0, err
		}
		bytes += n
		steps++
	}
	return bytes, time.Since(start).Seconds(), steps, nil
}

// pickExperts draws k distinct experts, as a router's top-k does.
func pickExperts(rng *rand.Rand, ids []int32, experts int) {
	for i := range ids {
	draw:
		for {
			e := int32(rng.IntN(experts))
			for _, prev := range ids[:i] {
				if prev == e {
					continue draw
				}
			}
			ids[i] = e
			break
		}
	}
}

// kernelDescription names the dot-product kernels this binary has: tensor's vector kernels
// come with GOEXPERIMENT=simd, else the scalar ones run.
func kernelDescription() string {
	kind := "scalar dot products (built without GOEXPERIMENT=simd)"
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "GOEXPERIMENT" && strings.Contains(s.Value, "simd") {
				kind = "vector dot products where tensor has them (GOEXPERIMENT=simd)"
			}
		}
	}
	return "tensor.Pool.MulMatID, " + kind + ", " + runtime.GOARCH
}

func (c *calibCmd) print(e *env, p *placement.Profile) {
	cpu := p.CPU
	fmt.Fprintf(e.stdout, "host            %s, %d threads, %s RAM\n", orUnknown(p.Host), cpu.Threads, humanSize(cpu.RAM))
	if cal := p.Calibration; cal != nil && cal.Method == "run" {
		fmt.Fprintf(e.stdout, "decode          %.1f GB/s effective, from %s\n", cpu.DecodeBandwidth, cal.Run)
		return
	}
	cal := p.Calibration
	fmt.Fprintf(e.stdout, "stream read     %.1f GB/s (best of %d reads of %s; last-level cache %s)\n", cpu.StreamBandwidth, maxStreamRun, humanSize(cal.SetBytes), humanSize(cal.LLCBytes))
	fmt.Fprintf(e.stdout, "expert mat-vec  %.1f GB/s effective decode bandwidth (%.1f decode steps/s over %s)\n", cpu.DecodeBandwidth, cal.TPS, cal.Type)
	fmt.Fprintf(e.stdout, "kernels         %s\n", cal.Kernel)
	if cpu.StreamBandwidth > 0 && cpu.DecodeBandwidth < 0.3*cpu.StreamBandwidth {
		fmt.Fprintf(e.stdout, "note            the mat-vec reaches %.0f%% of the stream read: moerun's kernels are compute-bound here; "+
			"predictions of llama.cpp want 'moerun calibrate --from-run TOKENS/S' from a llama-bench CPU run\n", 100*cpu.DecodeBandwidth/cpu.StreamBandwidth)
	}
}

func (c *calibCmd) save(e *env, p *placement.Profile) error {
	path, err := c.path()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := writeFile(tmp, p.Write); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "calibrate: saved %s\n", path)
	return nil
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown CPU"
	}
	return s
}

func humanSize(n int64) string {
	if n <= 0 {
		return "unknown"
	}
	return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
}

// llcBytes is the largest CPU cache (Linux sysfs), 0 when unknown.
func llcBytes() int64 {
	var best int64
	dirs, _ := filepath.Glob("/sys/devices/system/cpu/cpu0/cache/index*")
	for _, d := range dirs {
		data, err := os.ReadFile(filepath.Join(d, "size"))
		if err != nil {
			continue
		}
		best = max(best, parseCacheSize(strings.TrimSpace(string(data))))
	}
	return best
}

// parseCacheSize reads sysfs cache sizes such as "32K" or "266240K".
func parseCacheSize(s string) int64 {
	mul := int64(1)
	switch {
	case strings.HasSuffix(s, "K"):
		mul, s = 1<<10, strings.TrimSuffix(s, "K")
	case strings.HasSuffix(s, "M"):
		mul, s = 1<<20, strings.TrimSuffix(s, "M")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n * mul
}

// cpuName is the CPU's model name (Linux /proc/cpuinfo), "" when unknown.
func cpuName() string {
	return procField("/proc/cpuinfo", "model name")
}

// totalRAM is the installed memory (Linux /proc/meminfo), 0 when unknown.
func totalRAM() int64 {
	f := strings.Fields(procField("/proc/meminfo", "MemTotal"))
	if len(f) == 2 && f[1] == "kB" {
		if n, err := strconv.ParseInt(f[0], 10, 64); err == nil {
			return n << 10
		}
	}
	return 0
}

// procField is the value of the first "key: value" line of a /proc file.
func procField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
