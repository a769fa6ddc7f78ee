package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// predictDoc is the part of moerun.place/v1's prediction these tests read.
type predictDoc struct {
	Prediction *struct {
		Fits    bool     `json:"fits"`
		TG      *float64 `json:"tg_tps"`
		PP      *float64 `json:"pp_tps"`
		UBatch  int      `json:"ubatch"`
		Depth   int      `json:"depth"`
		Prompt  int      `json:"prompt"`
		Machine struct {
			CPUBW   float64 `json:"cpu_bw_gbps"`
			CPUBWBy string  `json:"cpu_bw_source"`
			Threads int     `json:"cpu_threads"`
			PCIe    string  `json:"pcie"`
			GPUs    []struct {
				Device string  `json:"device"`
				Model  string  `json:"model"`
				BW     float64 `json:"bw_gbps"`
			} `json:"gpus"`
		} `json:"machine"`
		Decode struct {
			Devices []struct {
				Device  string  `json:"device"`
				Seconds float64 `json:"seconds"`
				KV      int64   `json:"kv_bytes"`
			} `json:"devices"`
		} `json:"decode"`
		WhatIf *struct {
			Recommend string `json:"recommend"`
		} `json:"expert_what_if"`
	} `json:"prediction"`
	Devices []struct {
		Name     string `json:"name"`
		Capacity int64  `json:"capacity_bytes"`
	} `json:"devices"`
	Ignored []string `json:"ignored_flags"`
}

// runJSON runs a command line with --json appended (after a pasted llama-server, which must
// follow the command) and decodes its output.
func runJSON[T any](t *testing.T, args ...string) T {
	t.Helper()
	var doc T
	code, out, errOut := moerun(t, append(args, "--json")...)
	if code != 0 {
		t.Fatalf("%q: exit %d: %s", args, code, errOut)
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	return doc
}

func placePredict(t *testing.T, args ...string) predictDoc {
	t.Helper()
	return runJSON[predictDoc](t, append([]string{"place"}, args...)...)
}

// place --predict --json: the interface scripts rely on (issue 8, item 5).
func TestPlacePredictJSON(t *testing.T) {
	isolate(t)
	doc := placePredict(t, "--preset", "qwen3-30b-a3b:q4_k_m", "-ngl", "99", "--n-cpu-moe", "36", "-c", "4096", "--gpu-model", "rtx2080",
		"--ram-bw", "102", "--ram-channels", "4", "--ram-speed", "3200", "--cpu-threads", "10", "--pcie", "3x16", "--depth", "1000", "--predict")
	p := doc.Prediction
	if p == nil || !p.Fits || p.TG == nil || p.PP == nil || p.UBatch != 512 || p.Depth != 1000 {
		t.Fatalf("prediction %+v", p)
	}
	if math.Abs(p.Machine.CPUBW-0.35*102) > 1e-9 || p.Machine.Threads != 10 || p.Machine.PCIe != "3x16" || len(p.Machine.GPUs) != 1 || p.Machine.GPUs[0].BW != 448 {
		t.Errorf("machine %+v", p.Machine)
	}
	if len(p.Decode.Devices) != 2 || p.Decode.Devices[0].Device != "CUDA0" || p.Decode.Devices[0].KV <= 0 || p.Decode.Devices[1].Seconds <= 0 {
		t.Errorf("decode devices %+v", p.Decode.Devices)
	}
	// --gpu-model sized the dry-run GPU: 8 GiB.
	if doc.Devices[0].Name != "CUDA0" || doc.Devices[0].Capacity != 8<<30 {
		t.Errorf("devices %+v", doc.Devices)
	}
	// --prompt-tokens 4096: eight ubatches, the later ones attending to more tokens, so a slower mean.
	long := placePredict(t, "--preset", "qwen3-30b-a3b:q4_k_m", "-ngl", "99", "--n-cpu-moe", "36", "-c", "8192", "--gpu-model", "rtx2080",
		"--ram-bw", "102", "--cpu-threads", "10", "--pcie", "3x16", "--depth", "1000", "--prompt-tokens", "4096", "--predict").Prediction
	if long == nil || long.Prompt != 4096 || p.Prompt != 512 || long.PP == nil || *long.PP >= *p.PP {
		t.Errorf("--prompt-tokens 4096: %+v; one ubatch: prompt %d, %v t/s", long, p.Prompt, *p.PP)
	}
}

// A pasted llama-server command line: its -t sets the CPU threads, and its own --predict N
// (n_predict) stays an ignored llama.cpp flag.
func TestPlacePredictPasted(t *testing.T) {
	isolate(t)
	doc := placePredict(t, "llama-server", "--preset", "qwen3-30b-a3b", "-t", "6", "--predict", "128", "--gpu", "12GiB", "--gpu-bw", "360",
		"--cpu-bw-eff", "30", "-ngl", "99", "--cpu-moe", "--predict")
	if doc.Prediction == nil || doc.Prediction.Machine.Threads != 6 || doc.Prediction.Machine.CPUBWBy != "--cpu-bw-eff" {
		t.Fatalf("prediction %+v", doc.Prediction)
	}
	if !strings.Contains(strings.Join(doc.Ignored, " "), "--predict 128") {
		t.Errorf("ignored %q: llama.cpp's --predict 128 should be listed", doc.Ignored)
	}
	plain := placePredict(t, "llama-server", "--preset", "qwen3-30b-a3b", "--predict", "128", "--gpu", "12GiB")
	if plain.Prediction != nil {
		t.Error("llama.cpp's --predict 128 asked moerun for a prediction")
	}
}

// The default profile is read when present; a flag about the CPU's memory replaces its CPU
// figures, --no-profile ignores it.
func TestPlacePredictProfile(t *testing.T) {
	dir := isolate(t)
	path := filepath.Join(dir, "moerun", "profile.json")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	prof := `{"schema":"moerun.profile/v1","cpu":{"threads":12,"ram_bytes":68719476736,"decode_bw_gbps":41.5,"decode_bw_source":"run"},
		"gpus":[{"model":"rtx4090","vram_bytes":25769803776,"bw_gbps":1008,"tflops":165.2}],"pcie":"4x16"}`
	if err := os.WriteFile(path, []byte(prof), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"--preset", "qwen3-30b-a3b", "-ngl", "99", "--n-cpu-moe", "20", "-c", "4096", "--predict"}
	doc := placePredict(t, args...)
	p := doc.Prediction
	if p == nil || p.Machine.CPUBW != 41.5 || p.Machine.CPUBWBy != "calibrated (run)" || p.Machine.Threads != 12 || len(p.Machine.GPUs) != 1 {
		t.Fatalf("from the profile: %+v", p)
	}
	if len(doc.Devices) != 2 || doc.Devices[0].Capacity != 24<<30 || doc.Devices[1].Capacity != 64<<30 {
		t.Errorf("devices sized from the profile: %+v", doc.Devices)
	}
	over := placePredict(t, append(args, "--ram-bw", "100")...)
	if math.Abs(over.Prediction.Machine.CPUBW-0.55*100) > 1e-9 || over.Prediction.Machine.Threads != 12 {
		t.Errorf("--ram-bw over the profile: %+v", over.Prediction.Machine)
	}
	code, _, errOut := moerun(t, append([]string{"place", "--no-profile"}, args...)...)
	if code != 2 || !strings.Contains(errOut, "moerun calibrate") {
		t.Errorf("--no-profile: exit %d %s", code, errOut)
	}
	if err := os.WriteFile(path, []byte(`{"schema":"moerun.profile/v1","cpu":{"threads":-1}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := moerun(t, append([]string{"place"}, args...)...); code != 2 || !strings.Contains(errOut, path) {
		t.Errorf("broken profile: exit %d %s", code, errOut)
	}
}

// Hardware flags without --predict are a mistake; a prediction for a plan that does not fit
// has no speed.
func TestPlacePredictMisuse(t *testing.T) {
	isolate(t)
	code, _, errOut := moerun(t, "place", "--preset", "qwen3-30b-a3b", "--gpu-model", "rtx4090")
	if code != 2 || !strings.Contains(errOut, "add --predict") {
		t.Errorf("exit %d %s", code, errOut)
	}
	doc := placePredict(t, "--preset", "qwen3-30b-a3b", "-ngl", "99", "-c", "4096", "--gpu-model", "rtx3060-12g", "--ram-bw", "60", "--predict")
	if p := doc.Prediction; p == nil || p.Fits || p.TG != nil {
		t.Errorf("does not fit, yet %+v", p)
	}
	code, out, _ := moerun(t, "place", "--preset", "qwen3-30b-a3b", "-ngl", "99", "-c", "4096", "--gpu-model", "rtx3060-12g", "--ram-bw", "60", "--predict")
	if code != 0 || !strings.Contains(out, "no speed: the placement does not fit (CUDA0 needs") {
		t.Errorf("text: exit %d\n%s", code, out)
	}
}

// Routing statistics add the expert what-if to the prediction.
func TestPlacePredictExpertStats(t *testing.T) {
	isolate(t)
	var b strings.Builder
	b.WriteString(`{"schema":"moerun.expert-stats/v1","model":"m","layers":[`)
	for l := range 48 {
		if l > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"layer":%d,"tokens":1000,"dropped_slots":0,"experts":[`, l)
		for e := range 128 {
			if e > 0 {
				b.WriteString(",")
			}
			sel := 2 // a few hot experts per layer take most of the routing
			if e%16 == l%16 {
				sel = 870
			}
			fmt.Fprintf(&b, `{"expert":%d,"selected":%d,"weight_sum":1}`, e, sel)
		}
		b.WriteString("]}")
	}
	b.WriteString("]}")
	stats := filepath.Join(t.TempDir(), "stats.json")
	if err := os.WriteFile(stats, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	doc := placePredict(t, "--preset", "qwen3-30b-a3b", "-ngl", "99", "--n-cpu-moe", "36", "-c", "4096", "--gpu-model", "rtx3060-12g",
		"--cpu-bw-eff", "30", "--expert-stats", stats, "--predict")
	if w := doc.Prediction.WhatIf; w == nil || w.Recommend != "expert-granular" {
		t.Errorf("what-if %+v", w)
	}
	if code, _, errOut := moerun(t, "place", "--preset", "qwen3-30b-a3b", "--gpu-model", "rtx3060-12g", "--cpu-bw-eff", "30",
		"--expert-stats", filepath.Join(t.TempDir(), "none.json"), "--predict"); code != 2 || !strings.Contains(errOut, "none.json") {
		t.Errorf("missing stats file: exit %d %s", code, errOut)
	}
}

// TestPredictionSaysWhereThreadsCameFrom: a prediction for described hardware names where
// its thread count came from, and says so when it fell back to this machine's cores.
func TestPredictionSaysWhereThreadsCameFrom(t *testing.T) {
	isolate(t)
	base := []string{"place", "--preset", "qwen3-30b-a3b", "--gpu-model", "rtx4090", "--ram-bw", "80", "--predict"}
	for _, c := range []struct {
		extra []string
		want  string
	}{
		{nil, "threads (this machine's cores; --cpu-threads or -t for another)"},
		{[]string{"-t", "8"}, "8 threads (-t)"},
		{[]string{"--cpu-threads", "12"}, "12 threads (--cpu-threads)"},
	} {
		code, out, errOut := moerun(t, append(append([]string{}, base...), c.extra...)...)
		if code != 0 || !strings.Contains(out, c.want) {
			t.Errorf("%v: exit %d, want %q in:\n%s%s", c.extra, code, c.want, out, errOut)
		}
	}
}

// --cpu-ghz scales the CPU's default matmul rate, and the report says by what; a negative
// clock is bad input.
func TestPlacePredictCPUClock(t *testing.T) {
	isolate(t)
	args := []string{"place", "--preset", "qwen3-30b-a3b", "-c", "4096", "--ram-bw", "460", "--cpu-threads", "44", "--predict"}
	code, out, errOut := moerun(t, append(args, "--cpu-ghz", "3.7")...)
	if code != 0 || !strings.Contains(out, "44 threads × 52 GFLOP/s (80 at 5.7 GHz, scaled to 3.7 GHz)") {
		t.Errorf("exit %d %s\n%s", code, errOut, out)
	}
	if code, _, errOut := moerun(t, append(args, "--cpu-ghz", "-1")...); code != 2 || !strings.Contains(errOut, "--cpu-ghz") {
		t.Errorf("a negative clock: exit %d %s", code, errOut)
	}
}
