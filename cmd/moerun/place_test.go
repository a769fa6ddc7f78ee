package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/gguf/synth"
	"github.com/moerun/moerun/placement/placetest"
)

// placeDoc is the part of moerun.place/v1 these tests read.
type placeDoc struct {
	Schema  string `json:"schema"`
	Context struct {
		NCtx int `json:"n_ctx"`
	} `json:"context"`
	Settings struct {
		LoadMode string `json:"load_mode"`
		Mmap     bool   `json:"mmap"`
	} `json:"settings"`
	Devices []struct {
		Name    string `json:"name"`
		Weights int64  `json:"weights_bytes"`
		KV      int64  `json:"kv_bytes"`
		Total   int64  `json:"total_bytes"`
		Fits    *bool  `json:"fits"`
	} `json:"devices"`
	Layers []struct {
		Name     string `json:"name"`
		Device   string `json:"device"`
		KVDevice string `json:"kv_device"`
	} `json:"layers"`
	Tensors []struct {
		Name, Device, Rule string
	} `json:"tensors"`
	Rules []struct {
		Origin string `json:"origin"`
	} `json:"rules"`
	Ignored []string `json:"ignored_flags"`
	Fit     struct {
		Status string `json:"status"`
	} `json:"fit"`
}

func placeJSON(t *testing.T, args ...string) placeDoc {
	t.Helper()
	code, out, errOut := moerun(t, append([]string{"place", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var doc placeDoc
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	return doc
}

func (d placeDoc) device(name string) (weights, kv int64) {
	for _, dev := range d.Devices {
		if dev.Name == name {
			return dev.Weights, dev.KV
		}
	}
	return -1, -1
}

func (d placeDoc) tensorDevices() map[string]string {
	m := map[string]string{}
	for _, t := range d.Tensors {
		m[t.Name] = t.Device
	}
	return m
}

// Every case of what llama.cpp decided (placement/testdata) through the whole command line:
// the same device for every tensor and layer cache, the same weight and KV bytes, and
// llama.cpp's errors with exit code 2.
func TestPlaceFixtureCases(t *testing.T) {
	data, err := os.ReadFile("../../placement/testdata/tiny-qwen3moe.cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var fixture struct {
		GPU struct {
			FreeMiB int64 `json:"free_mib"`
		} `json:"gpu"`
		Cases []struct {
			Case       string            `json:"case"`
			Flags      []string          `json:"flags"`
			ExitCode   int               `json:"exit_code"`
			ErrorLines []string          `json:"error_lines"`
			Tensors    map[string]string `json:"tensors"`
			KVLayers   map[string]string `json:"kv_layers"`
			Context    struct {
				NCtx int `json:"n_ctx"`
			} `json:"context"`
			Weights map[string]int64 `json:"weights_bytes"`
			Memory  map[string]struct {
				Context int64 `json:"context"`
			} `json:"memory_bytes"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(data, &fixture); err != nil {
		t.Fatal(err)
	}
	gpu := fmt.Sprintf("%dMiB", fixture.GPU.FreeMiB)
	for _, c := range fixture.Cases {
		t.Run(c.Case, func(t *testing.T) {
			args := append([]string{"place", tinyQwen, "--gpu", gpu, "--ram", "64GiB", "--json"}, c.Flags...)
			code, out, errOut := moerun(t, args...)
			if c.ExitCode != 0 {
				if code != exitUsage {
					t.Fatalf("exit %d, want 2 (llama.cpp: %q)", code, c.ErrorLines)
				}
				for _, line := range c.ErrorLines {
					if c.Case == "invalid_regex" {
						line = "missing closing ) at position 5" // llama.cpp: std::regex's "Mismatched '(' and ')'"
					}
					if !strings.Contains(errOut, strings.TrimSpace(line)) {
						t.Errorf("stderr lacks %q:\n%s", line, errOut)
					}
				}
				return
			}
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			var doc placeDoc
			if err := json.Unmarshal([]byte(out), &doc); err != nil {
				t.Fatal(err)
			}
			if diff := diffMaps(c.Tensors, doc.tensorDevices()); diff != "" {
				t.Error(diff)
			}
			for _, l := range doc.Layers {
				if want, ok := c.KVLayers[l.Name]; ok && l.KVDevice != want {
					t.Errorf("KV of layer %s on %s, want %s", l.Name, l.KVDevice, want)
				}
			}
			for name, want := range c.Weights {
				if w, kv := doc.device(name); w != want || kv != c.Memory[name].Context {
					t.Errorf("%s: weights %d KV %d, llama.cpp %d and %d", name, w, kv, want, c.Memory[name].Context)
				}
			}
			if doc.Context.NCtx != c.Context.NCtx {
				t.Errorf("n_ctx %d, want %d", doc.Context.NCtx, c.Context.NCtx)
			}
		})
	}
}

func diffMaps(want, got map[string]string) string {
	var b strings.Builder
	for k, v := range want {
		if got[k] != v {
			fmt.Fprintf(&b, "%s on %q, llama.cpp: %s\n", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		fmt.Fprintf(&b, "%d tensors, llama.cpp %d\n", len(got), len(want))
	}
	return b.String()
}

// LLAMA_ARG_* variables apply first: the environment's -ot entry precedes the command
// line's, scalars from the command line win, negated booleans read LLAMA_ARG_NO_….
func TestPlaceEnvironment(t *testing.T) {
	t.Setenv("LLAMA_ARG_OVERRIDE_TENSOR", "exps=CUDA0")
	t.Setenv("LLAMA_ARG_N_GPU_LAYERS", "0")
	doc := placeJSON(t, tinyQwen, "--gpu", "8GiB", "-ngl", "99", "-ot", "exps=CPU")
	if d := doc.tensorDevices()["blk.2.ffn_up_exps.weight"]; d != "CUDA0" {
		t.Errorf("experts on %s: the environment's override comes first", d)
	}
	if len(doc.Rules) != 2 || doc.Rules[0].Origin != "LLAMA_ARG_OVERRIDE_TENSOR exps=CUDA0" || doc.Rules[1].Origin != "-ot exps=CPU" {
		t.Errorf("rules %+v", doc.Rules)
	}
	if d := doc.tensorDevices()["blk.2.attn_q.weight"]; d != "CUDA0" {
		t.Errorf("attention on %s: -ngl 99 beats LLAMA_ARG_N_GPU_LAYERS=0", d)
	}
	t.Setenv("LLAMA_ARG_OVERRIDE_TENSOR", "")
	os.Unsetenv("LLAMA_ARG_OVERRIDE_TENSOR")
	t.Setenv("LLAMA_ARG_NO_KV_OFFLOAD", "1")
	t.Setenv("LLAMA_ARG_CPU_MOE", "1")
	doc = placeJSON(t, tinyQwen, "--gpu", "8GiB")
	if _, kv := doc.device("CPU"); kv == 0 {
		t.Error("LLAMA_ARG_NO_KV_OFFLOAD did not keep the cache on the CPU")
	}
	if d := doc.tensorDevices()["blk.0.ffn_down_exps.weight"]; d != "CPU" || doc.Rules[0].Origin != "LLAMA_ARG_CPU_MOE" {
		t.Errorf("LLAMA_ARG_CPU_MOE: experts on %s, rules %+v", d, doc.Rules)
	}
	t.Setenv("LLAMA_ARG_KV_OFFLOAD", "maybe")
	os.Unsetenv("LLAMA_ARG_NO_KV_OFFLOAD")
	code, _, errOut := moerun(t, "place", tinyQwen, "--gpu", "8GiB")
	if code != exitUsage || !strings.Contains(errOut, `error while handling environment variable "LLAMA_ARG_KV_OFFLOAD": invalid boolean value`) {
		t.Errorf("exit %d: %s", code, errOut)
	}
}

// The load-mode flags override each other in command-line order.
func TestPlaceLoadModeOrder(t *testing.T) {
	for _, c := range []struct {
		flags []string
		mode  string
		mmap  bool
	}{
		{nil, "auto", true},
		{[]string{"--no-mmap"}, "none", false},
		{[]string{"--no-mmap", "--mmap"}, "mmap", true},
		{[]string{"--mmap", "--mlock"}, "mlock", false},
		{[]string{"--mlock", "-lm", "mmap+mlock"}, "mmap+mlock", true},
		{[]string{"-lm", "mmap", "-dio"}, "dio", false},
	} {
		doc := placeJSON(t, append([]string{tinyQwen, "--gpu", "8GiB"}, c.flags...)...)
		if doc.Settings.LoadMode != c.mode || doc.Settings.Mmap != c.mmap {
			t.Errorf("%q: load mode %s mmap %v, want %s %v", c.flags, doc.Settings.LoadMode, doc.Settings.Mmap, c.mode, c.mmap)
		}
	}
}

// A whole pasted llama-server command line works; its other flags are listed as ignored.
func TestPlacePastedCommandLine(t *testing.T) {
	code, out, errOut := moerun(t, "place", "llama-server", "-m", tinyQwen, "--host", "0.0.0.0", "--port", "8080", "-ngl", "99",
		"-ot", `blk\.[0-3]\.ffn_.*_exps=CPU`, "-c", "8192", "-fa", "on", "--jinja", "-t", "8", "--temp", "0.6", "--gpu", "8GiB", "--json")
	var doc placeDoc
	if err := json.Unmarshal([]byte(out), &doc); code != 0 || err != nil {
		t.Fatalf("exit %d, %v: %s", code, err, errOut)
	}
	if doc.Context.NCtx != 8192 || doc.tensorDevices()["blk.3.ffn_up_exps.weight"] != "CPU" {
		t.Errorf("n_ctx %d, experts on %s", doc.Context.NCtx, doc.tensorDevices()["blk.3.ffn_up_exps.weight"])
	}
	want := []string{"llama-server", "--host 0.0.0.0", "--port 8080", "--jinja", "-t 8", "--temp 0.6"}
	if strings.Join(doc.Ignored, "|") != strings.Join(want, "|") {
		t.Errorf("ignored %q, want %q", doc.Ignored, want)
	}
	code, out, _ = moerun(t, "place", tinyQwen, "--gpu", "8GiB", "--port", "8080")
	if code != 0 || !strings.Contains(out, "accepted but ignored (they do not affect placement): --port 8080") {
		t.Errorf("exit %d:\n%s", code, out)
	}
}

func TestPlaceUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--gpu", "8X"}, `--gpu "8X": unknown unit "X"`},
		{[]string{"--gpu", "24"}, "want a number and a unit"},
		{[]string{"--gpu", "8G", "--gpus", "8G,8G"}, "give the GPUs once"},
		{[]string{"--device-mem", "CUDA0"}, "want NAME=SIZE"},
		{[]string{"--gpu", "8G", "-ncmoe", "-3"}, `error while handling argument "-ncmoe": invalid value`},
		{[]string{"--gpu", "8G", "-ot", "exps=CUDA1"}, "Available buffer types:\n  CPU\n  CUDA0"},
		{[]string{"--gpu", "8G", "-ngl", "lots"}, `error while handling argument "-ngl"`},
		{[]string{"--gpu", "8G", "-ctk", "q4_K"}, "Unsupported cache type: q4_K"},
		{[]string{"--gpu", "8G", "-dev", "CUDA3"}, "invalid device: CUDA3"},
		{[]string{"--gpu", "8G", "-sm", "row"}, "does not support split buffers"},
		{[]string{"--gpu", "8G", "--bogus"}, "unknown flag --bogus"},
		{[]string{"--gpu", "8G", "-ctv", "q8_0", "-fa", "off"}, "quantized V cache requires flash_attn"},
	} {
		code, _, errOut := moerun(t, append([]string{"place", tinyQwen}, c.args...)...)
		if code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("%q: exit %d, stderr %q; want 2 and %q", c.args, code, errOut, c.want)
		}
	}
	if code, _, errOut := moerun(t, "place", "--gpu", "8G"); code != exitUsage || !strings.Contains(errOut, "no model") {
		t.Errorf("no model: exit %d %s", code, errOut)
	}
	if code, _, _ := moerun(t, "place", "missing.gguf"); code != exitUsage {
		t.Errorf("missing file: exit %d", code)
	}
}

func TestPlaceReportsAndOptions(t *testing.T) {
	dir := t.TempDir()
	html, svg := filepath.Join(dir, "p.html"), filepath.Join(dir, "p.svg")
	code, out, errOut := moerun(t, "place", tinyQwen, "--gpus", "4GiB,4GiB", "-ts", "1,3", "--tensors", "--html", html, "--svg", svg, "--ram", "16G")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"CUDA0, CUDA1 (-sm layer)", "TENSORS (51)", "verdict: fits"} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q", want)
		}
	}
	for _, p := range []string{html, svg} {
		if b, err := os.ReadFile(p); err != nil || !strings.Contains(string(b), "<svg") {
			t.Errorf("%s: %v", p, err)
		}
	}
	doc := placeJSON(t, tinyQwen, "--semantics", "ik_llama.cpp", "-ngl", "2", "--device-mem", "CUDA0=4GiB,RPC0=2GiB", "-dev", "CUDA0")
	if d := doc.tensorDevices()["output.weight"]; d != "CPU" {
		t.Errorf("ik -ngl 2 puts the output on %s", d)
	}
}

// Sparse full-size files and split models are read from the header only.
func TestPlaceSparseAndSplit(t *testing.T) {
	dir := t.TempDir()
	l, err := placetest.DeepSeekV3(placetest.Q4_K_M, true)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "ds-v3.gguf")
	if _, err := gguf.WriteSparse(path, l.Metadata, l.Specs); err != nil {
		t.Skip("no sparse files here:", err)
	}
	doc := placeJSON(t, path, "--gpu", "24GiB", "-ngl", "99", "-ot", "exps=CPU", "-c", "32768", "--ram", "512GiB")
	if _, kv := doc.device("CUDA0"); kv != 2_302_672_896 {
		t.Errorf("DeepSeek-V3 MLA cache %d B", kv)
	}
	if len(doc.Tensors) != 1086 || doc.Devices[0].Fits == nil || !*doc.Devices[0].Fits {
		t.Errorf("%d tensors, devices %+v", len(doc.Tensors), doc.Devices)
	}

	// The tiny model as a two-part split (gguf-split's layout: metadata in the first part,
	// split.no/count/tensors.count in both), opened from its second part.
	f, err := gguf.Open(tinyQwen)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	half := len(f.Tensors) / 2
	var second string
	for part, tensors := range [][]gguf.TensorInfo{f.Tensors[:half], f.Tensors[half:]} {
		var kvs []gguf.KV
		if part == 0 {
			kvs = append(kvs, f.Metadata.All()...)
		}
		kvs = append(kvs, gguf.KV{Key: "split.no", Value: gguf.NewValue(uint16(part))},
			gguf.KV{Key: "split.count", Value: gguf.NewValue(uint16(2))},
			gguf.KV{Key: "split.tensors.count", Value: gguf.NewValue(int32(len(f.Tensors)))})
		md, err := gguf.NewMetadata(kvs...)
		if err != nil {
			t.Fatal(err)
		}
		var specs []gguf.TensorSpec
		for _, ti := range tensors {
			specs = append(specs, gguf.TensorSpec{Name: ti.Name, Type: ti.Type, Shape: ti.Shape})
		}
		second = filepath.Join(dir, fmt.Sprintf("tiny-%05d-of-00002.gguf", part+1))
		if _, err := gguf.WriteSparse(second, md, specs); err != nil {
			t.Fatal(err)
		}
	}
	if doc := placeJSON(t, second, "--gpu", "8GiB"); len(doc.Tensors) != len(f.Tensors) {
		t.Errorf("split model: %d tensors, want %d", len(doc.Tensors), len(f.Tensors))
	}
}

// BenchmarkPlaceCommandDeepSeekV3 runs `moerun place` on a full-size sparse DeepSeek-V3
// Q4_K_M file (404 GB declared, its 129,280-token vocabulary in the header), as
// gguf-parser-go's estimate of the same file does: -ngl 99 -ot exps=CPU -c 4096.
func BenchmarkPlaceCommandDeepSeekV3(b *testing.B) {
	l, err := placetest.DeepSeekV3(placetest.Q4_K_M, true)
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(b.TempDir(), "ds-v3.gguf")
	if _, err := gguf.WriteSparse(path, l.Metadata, l.Specs); err != nil {
		b.Skip("no sparse files here:", err)
	}
	args := []string{"place", path, "--gpu", "24GiB", "-ngl", "99", "-ot", "exps=CPU", "-c", "4096"}
	for b.Loop() {
		if code := run(args, discard{}, discard{}); code != 0 {
			b.Fatalf("exit %d", code)
		}
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func TestPlaceModelWithoutMetadataIsBadInput(t *testing.T) {
	code, _, errOut := moerun(t, "place", "../../testdata/quant/quant-tensors.gguf", "--gpu", "8GiB")
	if code != exitUsage || !strings.Contains(errOut, "quant-tensors.gguf") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

// TestPlacePreset plans a built-in DeepSeek-V3 layout with nothing on disk: with --cpu-moe
// every routed expert goes to the CPU and everything else fits a 24 GiB GPU.
func TestPlacePreset(t *testing.T) {
	code, out, errOut := moerun(t, "place", "--preset", "deepseek-v3:q4_k_m", "--gpu", "24GiB", "--cpu-moe", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var doc struct {
		Devices []struct {
			Name string `json:"name"`
			Fits bool   `json:"fits"`
		} `json:"devices"`
		Tensors []struct {
			Name   string `json:"name"`
			Class  string `json:"class"`
			Device string `json:"device"`
		} `json:"tensors"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Tensors) != 1086 {
		t.Errorf("%d tensors", len(doc.Tensors))
	}
	for _, tt := range doc.Tensors {
		if onCPU := tt.Device == "CPU"; onCPU != (tt.Class == "routed_expert" || tt.Name == "token_embd.weight") {
			t.Errorf("%s (%s) on %s", tt.Name, tt.Class, tt.Device)
		}
	}
	for _, d := range doc.Devices {
		if d.Name == "CUDA0" && !d.Fits {
			t.Error("CUDA0 does not fit")
		}
	}
	for _, args := range [][]string{
		{"place", "--preset", "no-such-model", "--gpu", "8GiB"},
		{"place", "--preset", "qwen3-30b-a3b", tinyQwen, "--gpu", "8GiB"},
	} {
		if code, _, errOut := moerun(t, args...); code != exitUsage || errOut == "" {
			t.Errorf("%v: exit %d, %q", args, code, errOut)
		}
	}
}

// TestNewUserHints: a bare -fa (older guides) says how to write it now; a model file that
// does not exist points at --preset and synth.
func TestNewUserHints(t *testing.T) {
	for _, args := range [][]string{{"place", "--preset", "qwen3-30b-a3b", "-fa"}, {"place", "--preset", "qwen3-30b-a3b", "-fa", "-ngl", "99"}} {
		code, _, errOut := moerun(t, args...)
		if code != 2 || !strings.Contains(errOut, "write -fa on") {
			t.Errorf("%v: exit %d: %s", args, code, errOut)
		}
	}
	code, _, errOut := moerun(t, "place", "-fa", "on", "--preset", "qwen3-30b-a3b")
	if code != 0 {
		t.Errorf("-fa on: exit %d: %s", code, errOut)
	}
	for _, args := range [][]string{{"place", "no-such-model.gguf"}, {"run", "-m", "no-such-model.gguf", "-p", "hi"}, {"bench", "-m", "no-such-model.gguf"}} {
		code, _, errOut := moerun(t, args...)
		if code != 2 || !strings.Contains(errOut, "--preset NAME") || !strings.Contains(errOut, "moerun synth") {
			t.Errorf("%v: exit %d: %s", args, code, errOut)
		}
	}
}

// place --preset takes every built-in layout with llama.cpp's usual hybrid flags: the
// routed experts stay in RAM, everything else but the input embedding goes to the GPU, and
// the NextN/MTP blocks are not loaded, as llama.cpp does without MTP decoding.
func TestPlaceEveryPreset(t *testing.T) {
	for _, p := range synth.Presets() {
		m, err := synth.Build(p.Name, synth.Options{})
		if err != nil {
			t.Fatal(err)
		}
		doc := placeJSON(t, "--preset", p.Name, "--gpu", "4TiB", "--ram", "4TiB", "-ngl", "99", "-ot", "exps=CPU", "-c", "4096")
		devices := doc.tensorDevices()
		if len(devices) != len(m.Tensors) {
			t.Errorf("%s: place lists %d tensors, the layout has %d", p.Name, len(devices), len(m.Tensors))
		}
		for _, ts := range m.Tensors {
			want := "CUDA0"
			layer, inBlock := gguf.LayerOf(ts.Name)
			switch {
			case inBlock && layer >= p.Layers:
				want = "" // NextN/MTP block: not loaded
			case strings.Contains(ts.Name, "_exps."), ts.Name == "token_embd.weight":
				want = "CPU"
			}
			if got, ok := devices[ts.Name]; !ok || got != want {
				t.Errorf("%s: %s on %q, want %q", p.Name, ts.Name, got, want)
			}
		}
	}
}

// TestBatchSizeErrors: -b and -ub that cannot work are usage errors naming the flag and
// the default; -ub 0 is llama.cpp's "as -b", and a ubatch above the batch is cut to it.
func TestBatchSizeErrors(t *testing.T) {
	for _, c := range []struct{ flag, value, want string }{
		{"-b", "0", "-b 0: the logical batch"}, {"-b", "-1", "-b -1: the logical batch"}, {"-ub", "-2", "-ub -2: the physical batch"},
	} {
		code, _, errOut := moerun(t, "place", "--preset", "qwen3-30b-a3b", c.flag, c.value)
		if code != exitUsage || !strings.Contains(errOut, c.want) || !strings.Contains(errOut, "default") {
			t.Errorf("%s %s: exit %d: %s", c.flag, c.value, code, errOut)
		}
	}
	for _, c := range []struct {
		args          []string
		batch, ubatch int
	}{{[]string{"-ub", "0", "-b", "1024"}, 1024, 1024}, {[]string{"-b", "256"}, 256, 256}, {nil, 2048, 512}} {
		code, out, errOut := moerun(t, append([]string{"place", "--preset", "qwen3-30b-a3b", "-c", "4096", "--json"}, c.args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", c.args, code, errOut)
		}
		var plan struct {
			Context struct {
				NBatch  int `json:"n_batch"`
				NUBatch int `json:"n_ubatch"`
			} `json:"context"`
		}
		if err := json.Unmarshal([]byte(out), &plan); err != nil {
			t.Fatal(err)
		}
		if plan.Context.NBatch != c.batch || plan.Context.NUBatch != c.ubatch {
			t.Errorf("%v: n_batch %d, n_ubatch %d; want %d, %d", c.args, plan.Context.NBatch, plan.Context.NUBatch, c.batch, c.ubatch)
		}
	}
}

// GGML_OP_OFFLOAD_MIN_BATCH, ggml's variable, sets the op offload threshold the plan and
// the prediction use, read as C's atoi.
func TestPlaceOffloadMinBatch(t *testing.T) {
	for value, want := range map[string]string{"1000": `"op_offload_min_batch": 1000`, "8x": `"op_offload_min_batch": 8`, "": `"op_offload_min_batch": 0`} {
		t.Setenv("GGML_OP_OFFLOAD_MIN_BATCH", value)
		code, out, errOut := moerun(t, "place", tinyQwen, "--gpu", "8GiB", "-ngl", "99", "--predict", "--ram-bw", "50", "--gpu-bw", "900", "--json")
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("GGML_OP_OFFLOAD_MIN_BATCH=%q: exit %d, want %s in the prediction: %s", value, code, want, errOut)
		}
	}
}

// ik_llama.cpp's -no-ooae reaches the plan (its JSON settings, a note) and the prediction
// (a ubatch copies every CPU-held expert); -ooae, the default, does neither.
func TestPlaceOffloadAllExperts(t *testing.T) {
	args := []string{"place", "--preset", "gpt-oss-20b", "--gpu-model", "rtx4080", "--ram", "64GiB", "--ram-bw", "80", "-ngl", "99", "--cpu-moe", "-ub", "512", "--predict"}
	for _, c := range []struct {
		flag  string
		whole bool
	}{{"-no-ooae", true}, {"--no-offload-only-active-experts", true}, {"-ooae", false}} {
		code, out, errOut := moerun(t, append(args, c.flag)...)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", c.flag, code, errOut)
		}
		if got := strings.Contains(out, "every expert of a stack (-no-ooae)"); got != c.whole {
			t.Errorf("%s: the op offload note names whole stacks: %v, want %v", c.flag, got, c.whole)
		}
		if got := strings.Contains(out, "100% of the expert bytes hit"); got != c.whole {
			t.Errorf("%s: a ubatch copies every expert: %v, want %v\n%s", c.flag, got, c.whole, out)
		}
		code, out, _ = moerun(t, append(append(args, c.flag), "--json")...)
		if got := strings.Contains(out, `"offload_all_experts": true`); code != 0 || got != c.whole {
			t.Errorf("%s --json: exit %d, offload_all_experts %v, want %v", c.flag, code, got, c.whole)
		}
	}
}
