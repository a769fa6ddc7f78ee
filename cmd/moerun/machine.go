package main

import (
	"errors"
	"fmt"
	"github.com/moerun/moerun/backend/sim"
	"io"
	"time"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/backend/cpu"
	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/moe"
	"github.com/moerun/moerun/placement"
	"github.com/moerun/moerun/tensor"
)

// machine is what run, serve and bench compute on: a worker pool for the host and the
// GPUs this build can drive (none without the cuda build tag, see gpu_cuda.go).
type machine struct {
	pool   *tensor.Pool
	host   *cpu.Backend
	gpus   []gpuBackend
	models []*moe.Model // loaded here; Close releases their memory
	stderr io.Writer    // where loading's warnings and account go
	// mapsWeights is whether the last model loaded computes on views of the file's mapping
	// (the load mode maps it), whose page sizes reportHugePages tells.
	mapsWeights bool
}

// gpuBackend is a GPU backend as the commands see it: it also reports what it did.
type gpuBackend interface {
	backend.Backend
	// Summary is a one-line account of the work done so far (operations, time, copies).
	Summary() string
}

// timedBackend is a GPU backend that times its work: Busy is the wall time its operations
// took so far, copies and waits included (a simulated GPU's work is the CPU's).
type timedBackend interface {
	Busy() time.Duration
}

// openMachine starts the pool and opens the GPUs: simulated ones of the sizes sims gives
// (--sim-gpu), else those this build and machine have. Without one, a command that asked
// for GPU layers gets llama.cpp's one-line warning and runs on the CPU. --no-repack turns
// the pool's packed prefill kernels off: llama.cpp's repacked arithmetic is theirs.
func openMachine(stderr io.Writer, threads int, rules placement.Rules, sims []int64) *machine {
	m := &machine{pool: tensor.NewPool(threads), stderr: stderr}
	m.pool.SetRepack(rules.Repack)
	m.host = cpu.New(cpu.Options{Pool: m.pool})
	var gpus []gpuBackend
	var err error
	if len(sims) > 0 {
		for i, size := range sims {
			gpus = append(gpus, sim.New(i, size, m.pool))
		}
	} else {
		gpus, err = openGPUs(m.pool)
	}
	m.gpus = gpus
	if len(gpus) == 0 && rules.GPULayers != placement.NGLAuto && rules.GPULayers != 0 {
		fmt.Fprintf(stderr, "moerun: warning: no usable GPU found (%v); -ngl is ignored and everything runs on the CPU\n", err)
	}
	return m
}

// devices lists the host and the GPUs as placement sees them.
func (m *machine) devices() []backend.Device {
	devs := []backend.Device{m.host.Device()}
	for _, g := range m.gpus {
		devs = append(devs, g.Device())
	}
	return devs
}

// backends lists the host and the GPUs as the runtime uses them.
func (m *machine) backends() []backend.Backend {
	bs := []backend.Backend{m.host}
	for _, g := range m.gpus {
		bs = append(bs, g)
	}
	return bs
}

// names is llama-bench's "backends" field: the GPU API when a GPU is in use, else CPU.
func (m *machine) names() string {
	switch {
	case len(m.gpus) == 0:
		return "CPU"
	case m.simulated():
		return "SIM"
	}
	return gpuAPI
}

// simulated reports whether the machine's GPUs are simulated ones.
func (m *machine) simulated() bool {
	_, ok := m.gpus[0].(*sim.Backend)
	return ok
}

// report writes each GPU's account of a run that took wall: what it did and, where the
// GPU times its work, the share of the time its operations (copies and waits included)
// took; the rest is the CPU's.
func (m *machine) report(w io.Writer, wall time.Duration) {
	m.reportExpertCache(w)
	for _, g := range m.gpus {
		fmt.Fprintf(w, "moerun: %s (%s): %s", g.Device().Name, g.Device().Description, g.Summary())
		if t, ok := g.(timedBackend); ok {
			fmt.Fprintf(w, "; %.0f%% of the %.2f s on GPU operations, the rest on the CPU", 100*t.Busy().Seconds()/max(wall.Seconds(), 1e-9), wall.Seconds())
		}
		fmt.Fprintln(w)
	}
}

// reportExpertCache writes what the models' expert caches did (--expert-cache).
func (m *machine) reportExpertCache(w io.Writer) {
	for _, model := range m.models {
		if st := model.ExpertCacheStats(); st.Layers > 0 {
			fmt.Fprintf(w, "moerun: expert cache: %d layers × %d slots (%s on the GPU): hit rate %.1f%% (%d of %d routed slots), %d swaps, %s moved\n",
				st.Layers, st.Slots, humanBytes(st.SlotBytes), 100*st.HitRate(), st.Hits, st.Hits+st.Misses, st.Swaps, humanBytes(st.BytesMoved))
		}
	}
}

// traffic is each GPU's count of crossings so far (the zero Traffic for a GPU that does
// not count them).
func (m *machine) traffic() []backend.Traffic {
	out := make([]backend.Traffic, len(m.gpus))
	for i, g := range m.gpus {
		if c, ok := g.(backend.Counter); ok {
			out[i] = c.Traffic()
		}
	}
	return out
}

// reportSteps writes what crossed between each GPU and the host per generated token, from
// each GPU's traffic over tokens tokens: the crossings the runtime makes where the plan
// changes device.
func (m *machine) reportSteps(w io.Writer, test string, traffic []backend.Traffic, tokens int) {
	for i, d := range traffic {
		if _, ok := m.gpus[i].(backend.Counter); !ok || tokens <= 0 {
			continue
		}
		n := float64(tokens)
		fmt.Fprintf(w, "moerun: %s per generated token (%s): %.3g copies in (%.3g KiB), %.3g out (%.3g KiB), %.3g waits, %.4g operations\n",
			m.gpus[i].Device().Name, test, float64(d.CopiesIn)/n, float64(d.BytesIn)/1024/n, float64(d.CopiesOut)/n, float64(d.BytesOut)/1024/n,
			float64(d.Syncs)/n, float64(d.Ops)/n)
	}
}

// Close releases the GPUs and stops the pool.
func (m *machine) Close() error {
	var errs []error
	for _, model := range m.models {
		errs = append(errs, model.Close())
	}
	for _, g := range m.gpus {
		errs = append(errs, g.Close())
	}
	errs = append(errs, m.host.Close())
	m.pool.Close()
	return errors.Join(errs...)
}

// load places a model on the machine with llama.cpp's rules and loads it; a model moe
// cannot run is bad input.
func (m *machine) load(name string, f *gguf.File, rules placement.Rules) (*moe.Model, *placement.Plan, error) {
	plan, err := placement.Place(placement.Model{Name: name, Metadata: f.Metadata, Tensors: f.Tensors}, rules, m.devices())
	if err != nil {
		return nil, nil, placeError(err)
	}
	if err := m.checkHostMemory(plan, totalRAM()); err != nil {
		return nil, nil, err
	}
	start := time.Now()
	model, err := moe.Load(f, plan, m.backends())
	if err != nil {
		if me := (*moe.ModelError)(nil); errors.As(err, &me) {
			return nil, nil, usageError{err}
		}
		return nil, nil, err
	}
	m.models = append(m.models, model)
	m.mapsWeights = plan.Settings.Mmap
	for _, w := range model.LoadWarnings() {
		fmt.Fprintln(m.stderr, "moerun: warning: "+w)
	}
	if copied, use, err := model.CopiedWeights(); copied > 0 {
		fmt.Fprintf(m.stderr, "moerun: weights read into memory (load mode %s): %.2f GiB in %.2f s", plan.Settings.LoadMode, float64(copied)/(1<<30), time.Since(start).Seconds())
		if err == nil {
			fmt.Fprintf(m.stderr, ", %.2f GiB of it in huge pages", float64(use.Huge)/(1<<30))
		}
		fmt.Fprintln(m.stderr)
	}
	return model, plan, nil
}

// hostMemoryCure says what frees short bytes of the host's RAM: the CPU's repacked copies
// of mapped weights where they are enough (--no-repack uses the mapping in place), else a
// shorter context.
func hostMemoryCure(plan *placement.Plan, short int64) string {
	var repacked int64
	for _, t := range plan.Tensors {
		if t.Storage == placement.StorageRepacked {
			repacked += t.Bytes
		}
	}
	if repacked >= short && plan.Settings.Mmap {
		return fmt.Sprintf("the CPU's repacked copies of the weights take %s: --no-repack uses them in place from the file mapping instead (prompts run slower), or lower -c", humanBytes(repacked))
	}
	return "lower -c"
}

// checkHostMemory refuses a plan whose host side cannot fit in ram bytes (0: unknown, no
// check): the KV cache, the compute buffers and copied weights are allocated rather than
// mapped, and an allocation beyond the machine's memory ends a Go process with a fatal
// error instead of an error (a -c of 100 million cells did).
func (m *machine) checkHostMemory(plan *placement.Plan, ram int64) error {
	if ram <= 0 {
		return nil
	}
	for _, d := range plan.Devices {
		if d.Device.Name != m.host.Device().Name {
			continue
		}
		copied := d.Weights - d.WeightsMapped
		if need := d.KV + d.Compute + copied; need > ram {
			return badInput("this machine's %s of RAM cannot hold the host's %s: KV cache %s for a context of %d cells, compute buffers %s, copied weights %s; %s",
				humanBytes(ram), humanBytes(need), humanBytes(d.KV), plan.Context.NCtx, humanBytes(d.Compute), humanBytes(copied), hostMemoryCure(plan, need-ram))
		}
	}
	return nil
}

// reportHugePages says how much of the model file the kernel maps with huge pages, once a
// run has read the weights: decode streams them, and with small pages it is measurably
// slower (docs/guide.md, "Huge pages"). Only the pages read so far count (a short run over
// a large model reads a fraction of its experts). always prints the count; otherwise only
// a GiB or more read mostly in small pages gets the line, as advice. Platforms that cannot
// tell say nothing.
func reportHugePages(w io.Writer, f *gguf.File, always bool) {
	const gib = 1 << 30
	use, err := f.PageUse()
	small := err == nil && use.Resident >= gib && use.Huge < use.Resident/2
	if err != nil || !(always || small) {
		return
	}
	fmt.Fprintf(w, "moerun: model file mapped with huge pages: %.2f of the %.2f GiB read (file %.2f GiB)",
		float64(use.Huge)/gib, float64(use.Resident)/gib, float64(f.Size())/gib)
	if small {
		fmt.Fprint(w, "; the page cache held it in small pages before moerun mapped it: see \"Huge pages\" in docs/guide.md, or read the weights into memory with --no-mmap")
	}
	fmt.Fprintln(w)
}
