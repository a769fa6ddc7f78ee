package placement

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The GPU table holds the reference's bandwidths (performance-model.md) and looks names up
// loosely.
func TestGPUModels(t *testing.T) {
	for name, bw := range map[string]float64{"rtx3060-12g": 360, "RTX 4090": 1008, "geforce rtx5090": 1792, "RTX_3090": 936, "h100-sxm": 3350, "rtxpro6000": 1792} {
		m, err := LookupGPUModel(name)
		if err != nil {
			t.Fatal(err)
		}
		if m.Bandwidth != bw {
			t.Errorf("%s: %v GB/s, want %v", name, m.Bandwidth, bw)
		}
	}
	if m, _ := LookupGPUModel("rtx4090"); m.VRAM != 24<<30 || m.Spec().Bandwidth != 1008 || m.Spec().Model != "rtx4090" {
		t.Errorf("rtx4090: %+v", m)
	}
	if _, err := LookupGPUModel("rtx9999"); err == nil || !strings.Contains(err.Error(), "rtx4090") {
		t.Errorf("unknown GPU: %v", err)
	}
	seen := map[string]bool{}
	for _, m := range GPUModels() {
		if seen[m.Name] || m.VRAM <= 0 || m.Bandwidth <= 0 || m.TFLOPS <= 0 || m.Title == "" {
			t.Errorf("table row %+v", m)
		}
		seen[m.Name] = true
	}
}

// Memory and PCIe figures from the reference's physical limits.
func TestBandwidthFigures(t *testing.T) {
	for _, c := range []struct {
		ch   int
		mts  float64
		want float64
	}{{1, 3200, 25.6}, {1, 4800, 38.4}, {2, 5600, 89.6}, {1, 6400, 51.2}, {12, 4800, 460.8}} {
		if got := RAMBandwidth(c.ch, c.mts); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("%d × %v MT/s: %v GB/s, want %v", c.ch, c.mts, got, c.want)
		}
	}
	for s, want := range map[string]float64{"3x16": 15.76, "4x16": 31.504, "gen5x16": 63.008, "PCIe4.0x8": 15.752} {
		l, err := ParsePCIe(s)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(l.Theoretical()-want) > 1e-9 {
			t.Errorf("%s: %v GB/s, want %v", s, l.Theoretical(), want)
		}
	}
	l, _ := ParsePCIe("4x16")
	if p := l.Effective(); math.Abs(p-24.57) > 0.01 {
		t.Errorf("PCIe 4.0 x16: %.2f GB/s; the reference measures about 25 pinned", p)
	}
	for _, bad := range []string{"", "4", "x16", "4x3", "7x16", "4x", "fourx16", "4x16x"} {
		if _, err := ParsePCIe(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// A profile written is the profile read, and a bad one says what is wrong.
func TestProfileRoundTrip(t *testing.T) {
	p := &Profile{Schema: ProfileSchema, Created: "2025-01-01T00:00:00Z", Host: "test CPU",
		Hardware: Hardware{CPU: CPUSpec{Threads: 2, DecodeBandwidth: 12.5, DecodeSource: "matvec", StreamBandwidth: 30},
			GPUs: []GPUSpec{{Model: "rtx4090", Bandwidth: 1008, VRAM: 24 << 30, TFLOPS: 165.2}}, PCIe: "4x16"},
		Calibration: &Calibration{Method: "matvec", Model: "qwen3-30b-a3b", Type: "q4_K", Threads: 2, SetBytes: 1 << 30, Bytes: 5 << 30, Seconds: 1}}
	var b bytes.Buffer
	if err := p.Write(&b); err != nil {
		t.Fatal(err)
	}
	got, err := ReadProfile(&b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Hardware.CPU != p.Hardware.CPU || got.GPUs[0] != p.GPUs[0] || *got.Calibration != *p.Calibration || got.Host != p.Host {
		t.Errorf("read back %+v", got)
	}
	for doc, want := range map[string]string{
		`{"schema":"moerun.profile/v2"}`:                                    "schema",
		`{"schema":"moerun.profile/v1","cpu":{"decode_bw_gbps":-1}}`:        "decode_bw_gbps",
		`{"schema":"moerun.profile/v1","cpu":{"ram_channels":2}}`:           "go together",
		`{"schema":"moerun.profile/v1","cpu":{"decode_bw_source":"guess"}}`: "decode_bw_source",
		`{"schema":"moerun.profile/v1","pcie":"9x16"}`:                      "PCIe",
		`{"schema":"moerun.profile/v1","gpus":[{"bw_gbps":1e99}]}`:          "gpus[0].bw_gbps",
		`{"schema":"moerun.profile/v1","cpu":{"threads":2},"extra":1}`:      "unknown field",
		`{"schema":"moerun.profile/v1"`:                                     "profile",
	} {
		if _, err := ReadProfile(strings.NewReader(doc)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one mentioning %q", doc, err, want)
		}
	}
}

// A missing optional profile is no error; a missing named one is.
func TestLoadProfile(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "none.json")
	if p, err := LoadProfile(missing, true); p != nil || err != nil {
		t.Errorf("optional missing profile: %v, %v", p, err)
	}
	if _, err := LoadProfile(missing, false); err == nil {
		t.Error("a missing named profile was accepted")
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadProfile(bad, true); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("bad profile: %v", err)
	}
	t.Setenv("XDG_CONFIG_HOME", dir)
	if path, err := DefaultProfilePath(); err != nil || path != filepath.Join(dir, "moerun", "profile.json") {
		t.Errorf("default path %q, %v", path, err)
	}
}

// ReadProfile never panics and never accepts a profile that fails its own checks.
func FuzzReadProfile(f *testing.F) {
	f.Add(`{"schema":"moerun.profile/v1","cpu":{"threads":16,"decode_bw_gbps":45,"decode_bw_source":"matvec"},"gpus":[{"model":"rtx4090","bw_gbps":1008}],"pcie":"4x16"}`)
	f.Add(`{"schema":"moerun.profile/v1","cpu":{"ram_channels":2,"ram_speed_mts":5600}}`)
	f.Add(`{"schema":"moerun.profile/v1","calibration":{"method":"matvec","threads":2,"set_bytes":1,"llc_bytes":0,"bytes":1,"seconds":1,"tokens_per_s":1}}`)
	f.Fuzz(func(t *testing.T, doc string) {
		p, err := ReadProfile(strings.NewReader(doc))
		if err != nil {
			return
		}
		if err := p.Hardware.Validate(); err != nil {
			t.Fatalf("accepted a profile that fails validation: %v", err)
		}
	})
}
