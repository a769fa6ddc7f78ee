package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moerun/moerun/placement"
)

func readProfileFile(t *testing.T, path string) *placement.Profile {
	t.Helper()
	p, err := placement.LoadProfile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// --from-run inverts the decode model on the run's model: Qwen3-30B-A3B Q4_K_M at 27.2 t/s on
// the CPU alone (the reference's 7950X anchor) is about 53 GB/s effective, as the
// measurements file notes. The profile keeps GPU figures given with it, and place reads it.
func TestCalibrateFromRun(t *testing.T) {
	dir := isolate(t)
	code, out, errOut := moerun(t, "calibrate", "--from-run", "27.2", "-t", "16", "--preset", "qwen3-30b-a3b:q4_k_m", "--gpu-model", "rtx4080", "--pcie", "4x16", "--cpu-ghz", "5.7")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	path := filepath.Join(dir, "moerun", "profile.json")
	p := readProfileFile(t, path)
	if p.CPU.DecodeSource != "run" || math.Abs(p.CPU.DecodeBandwidth-53.5) > 1 || p.CPU.Threads != 16 || len(p.GPUs) != 1 || p.GPUs[0].Model != "rtx4080" || p.PCIe != "4x16" || p.CPU.GHz != 5.7 {
		t.Errorf("profile %+v", p)
	}
	if p.Calibration == nil || p.Calibration.Method != "run" || p.Calibration.TPS != 27.2 || !strings.Contains(out, "from 27.20 tokens/s") || !strings.Contains(errOut, path) {
		t.Errorf("calibration %+v; out %q; err %q", p.Calibration, out, errOut)
	}
	// Predicting the run it came from gives its speed back.
	doc := placePredict(t, "--preset", "qwen3-30b-a3b:q4_k_m", "-ngl", "0", "-c", "4096", "--predict")
	if tg := *doc.Prediction.TG; math.Abs(tg-27.2) > 0.01 {
		t.Errorf("the calibrating run predicted at %.3f t/s", tg)
	}
	// A second calibration keeps the GPU figures and the clock it does not measure.
	if code, _, errOut := moerun(t, "calibrate", "--from-run", "20", "-t", "16"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if p := readProfileFile(t, path); len(p.GPUs) != 1 || p.CPU.GHz != 5.7 || p.CPU.DecodeBandwidth >= 53 {
		t.Errorf("recalibrated profile %+v", p)
	}
}

// A real measurement, small and short: both bandwidths are measured and the profile says how.
func TestCalibrateMeasures(t *testing.T) {
	isolate(t)
	out := filepath.Join(t.TempDir(), "p.json")
	code, stdout, errOut := moerun(t, "calibrate", "--size", "48MiB", "--seconds", "0.2", "-t", "2", "-o", out, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var printed placement.Profile
	if err := json.Unmarshal([]byte(stdout), &printed); err != nil {
		t.Fatal(err)
	}
	p := readProfileFile(t, out)
	cal := p.Calibration
	if p.CPU.DecodeSource != "matvec" || p.CPU.DecodeBandwidth <= 0 || p.CPU.StreamBandwidth <= 0 || cal == nil || cal.Bytes <= 0 || cal.Seconds < 0.2 ||
		cal.SetBytes < 48<<20 || !strings.Contains(cal.Kernel, "MulMatID") || !strings.Contains(cal.Type, "q4_K") {
		t.Errorf("profile %+v, calibration %+v", p.CPU, cal)
	}
	if printed.CPU != p.CPU {
		t.Errorf("printed %+v, saved %+v", printed.CPU, p.CPU)
	}
	// Every step reads k = 8 experts of every layer: Qwen3-30B-A3B's first block has gate and
	// up of 768 Q4_K rows of 2048 (1152 B each) and down of 2048 Q6_K rows of 768 (630 B).
	perExpert := int64(2*768*1152 + 2048*630)
	if cal.Bytes%(8*perExpert) != 0 {
		t.Errorf("%d bytes read is not whole steps of 8 experts of %d bytes", cal.Bytes, perExpert)
	}
}

func TestCalibrateBadInput(t *testing.T) {
	isolate(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--preset", "llama-3.1-70b", "--size", "8MiB", "--dry-run"}, "expert tensors"},
		{[]string{"--preset", "nope", "--dry-run"}, "--preset"},
		{[]string{"--seconds", "0", "--dry-run"}, "positive"},
		{[]string{"--from-run", "100000", "--dry-run"}, "faster than the model allows"},
		{[]string{"--pcie", "9x1", "--from-run", "10", "--dry-run"}, "--pcie"},
		{[]string{"--size", "1XB", "--dry-run"}, "unknown unit"},
	} {
		code, _, errOut := moerun(t, append([]string{"calibrate"}, c.args...)...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%q: exit %d %q, want 2 and %q", c.args, code, errOut, c.want)
		}
	}
	// A dry run saves nothing.
	dir := isolate(t)
	if code, _, errOut := moerun(t, "calibrate", "--from-run", "10", "--dry-run"); code != 0 {
		t.Fatalf("exit %d %s", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, "moerun", "profile.json")); !os.IsNotExist(err) {
		t.Errorf("a dry run wrote the profile: %v", err)
	}
}

func TestParseCacheSize(t *testing.T) {
	for in, want := range map[string]int64{"32K": 32 << 10, "266240K": 266240 << 10, "8M": 8 << 20, "512": 512, "x": 0, "-1K": 0} {
		if got := parseCacheSize(in); got != want {
			t.Errorf("%q: %d, want %d", in, got, want)
		}
	}
}
