package placement

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/tensor"
)

const tinyQwen = "../testdata/models/tiny-qwen3moe.gguf"

// fixtureCase is one case of testdata/tiny-qwen3moe.cases.json: what llama.cpp 3f545bec
// decided for a set of flags with one 24,105 MiB GPU-like device attached.
type fixtureCase struct {
	Case       string            `json:"case"`
	Flags      []string          `json:"flags"`
	ExitCode   int               `json:"exit_code"`
	ErrorLines []string          `json:"error_lines"`
	Tensors    map[string]string `json:"tensors"`
	Layers     map[string]string `json:"layers"`
	KVLayers   map[string]string `json:"kv_layers"`
	Context    struct {
		NCtx int `json:"n_ctx"`
	} `json:"context"`
	Weights     map[string]int64 `json:"weights_bytes"`
	MemoryBytes map[string]struct {
		Model, Context, Compute int64
	} `json:"memory_bytes"`
}

func loadFixture(t *testing.T) (gpuMiB int64, cases []fixtureCase) {
	t.Helper()
	data, err := os.ReadFile("testdata/tiny-qwen3moe.cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		GPU struct {
			Name    string `json:"name"`
			FreeMiB int64  `json:"free_mib"`
		} `json:"gpu"`
		Cases []fixtureCase `json:"cases"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	if f.GPU.Name != "CUDA0" || len(f.Cases) < 30 {
		t.Fatalf("unexpected fixture: %+v, %d cases", f.GPU, len(f.Cases))
	}
	return f.GPU.FreeMiB, f.Cases
}

func openModel(t testing.TB, path string) Model {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return Model{Name: path, Metadata: f.Metadata, Tensors: f.Tensors}
}

// fixtureDevices are the devices of the fixture run: the GPU-like device was an RPC server
// (no pinned host buffer, no op offload), and the CPU an AVX2 machine that repacks Q4_0.
func fixtureDevices(gpuMiB int64) []backend.Device {
	gpu := backend.Device{Name: "CUDA0", Kind: backend.KindGPU, TotalBytes: gpuMiB << 20, FreeBytes: gpuMiB << 20}
	cpu := backend.Device{Name: "CPU", Kind: backend.KindCPU, TotalBytes: 64 << 30, FreeBytes: 64 << 30, MapsHostMemory: true,
		Repack: map[tensor.Type]int{tensor.Q4_0: 8, tensor.Q4_K: 8, tensor.IQ4_NL: 8, tensor.MXFP4: 8}}
	return []backend.Device{gpu, cpu}
}

// rulesFromFlags reads the llama.cpp flags the fixture uses into Rules with the package's
// own parsers (the CLI's full flag handling is tested in cmd/moerun).
func rulesFromFlags(flags []string) (Rules, error) {
	r := DefaultRules()
	var err error
	for i := 0; i < len(flags); i++ {
		flag, val := flags[i], ""
		if i+1 < len(flags) {
			val = flags[i+1]
		}
		var items []Item
		var item Item
		switch flag {
		case "-ngl":
			r.GPULayers, err = ParseGPULayers(flag, val)
		case "-ot":
			items, err = ParseOverrideTensor(flag, val)
			r.Items = append(r.Items, items...)
		case "--n-cpu-moe":
			item, err = NCPUMoEItem(flag, val)
			r.Items = append(r.Items, item)
		case "-c":
			r.CtxSize, err = Stoi(val)
		case "-ctk":
			r.CacheK, err = ParseCacheType(flag, val)
		case "-ctv":
			r.CacheV, err = ParseCacheType(flag, val)
		case "-sm":
			r.SplitMode, err = ParseSplitMode(flag, val)
		case "--fit":
			r.Fit, err = ParseOnOff(flag, val)
		case "-fitt":
			r.FitTarget, err = ParseFitTarget(flag, val)
		case "--cpu-moe":
			r.Items = append(r.Items, CPUMoEItem(flag))
			continue
		case "--no-kv-offload":
			r.KVOffload = false
			continue
		case "--no-repack":
			r.Repack = false
			continue
		default:
			return r, fmt.Errorf("fixture flag %s not handled by the test", flag)
		}
		if err != nil {
			return r, err
		}
		i++
	}
	return r, nil
}

// computeTolerance is how far the compute-buffer estimate may be from llama.cpp's own
// allocator on these tiny graphs: 35% or 3 MiB, whichever is larger (docs/placement.md).
func computeWithin(est, actual int64) bool {
	diff := est - actual
	if diff < 0 {
		diff = -diff
	}
	return diff <= max(actual*35/100, 3<<20)
}

func TestFixtureCases(t *testing.T) {
	gpuMiB, cases := loadFixture(t)
	model := openModel(t, tinyQwen)
	devs := fixtureDevices(gpuMiB)
	for _, c := range cases {
		t.Run(c.Case, func(t *testing.T) {
			rules, err := rulesFromFlags(c.Flags)
			var plan *Plan
			if err == nil {
				plan, err = Place(model, rules, devs)
			}
			if c.ExitCode != 0 {
				checkFixtureError(t, c, err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			checkFixtureCase(t, c, plan)
		})
	}
}

func checkFixtureError(t *testing.T, c fixtureCase, err error) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error; llama.cpp said %q", c.ErrorLines)
	}
	msg := err.Error()
	switch c.Case {
	case "invalid_regex": // llama.cpp: "Mismatched '(' and ')' in regular expression" at load
		var pe *PatternError
		if !errors.As(err, &pe) || pe.Pattern != `blk\.(0` || pe.Pos != 5 || !strings.Contains(msg, "missing closing )") {
			t.Errorf("error %v; want the pattern and the position of the unclosed '('", err)
		}
	default: // llama.cpp's own lines must appear
		for _, line := range c.ErrorLines {
			if !strings.Contains(msg, strings.TrimSpace(line)) {
				t.Errorf("error %q lacks llama.cpp's %q", msg, line)
			}
		}
	}
}

func checkFixtureCase(t *testing.T, c fixtureCase, plan *Plan) {
	t.Helper()
	got := map[string]string{}
	for _, tu := range plan.Tensors {
		got[tu.Name] = tu.Device
	}
	if len(got) != len(c.Tensors) {
		t.Errorf("%d tensors placed, fixture has %d", len(got), len(c.Tensors))
	}
	for name, want := range c.Tensors {
		if got[name] != want {
			t.Errorf("%s on %q, llama.cpp put it on %s", name, got[name], want)
		}
	}
	for _, l := range plan.Layers {
		label := l.Label()
		if want, ok := c.Layers[label]; ok && l.Device != want {
			t.Errorf("layer %s on %s, want %s", label, l.Device, want)
		}
		if want, ok := c.KVLayers[label]; ok && l.KVDevice != want {
			t.Errorf("KV of layer %s on %s, want %s", label, l.KVDevice, want)
		}
	}
	if plan.Context.NCtx != c.Context.NCtx {
		t.Errorf("n_ctx %d, want %d", plan.Context.NCtx, c.Context.NCtx)
	}
	for _, d := range plan.Devices {
		name := d.Device.Name
		if d.Weights != c.Weights[name] {
			t.Errorf("%s weights %d B, llama.cpp %d B", name, d.Weights, c.Weights[name])
		}
		mb := c.MemoryBytes[name]
		if d.KV != mb.Context {
			t.Errorf("%s KV %d B, llama.cpp %d B", name, d.KV, mb.Context)
		}
		t.Logf("compute %s est %d actual %d (%+.0f%%)", name, d.Compute, mb.Compute, 100*float64(d.Compute-mb.Compute)/float64(max(mb.Compute, 1)))
		if !computeWithin(d.Compute, mb.Compute) {
			t.Errorf("%s compute estimate %d B, llama.cpp allocated %d B", name, d.Compute, mb.Compute)
		}
	}
}
