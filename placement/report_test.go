package placement

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"strings"
	"testing"
)

func tinyPlan(t *testing.T, ots ...string) *Plan {
	t.Helper()
	m := openModel(t, tinyQwen)
	return place(t, m, rulesWith(t, 99, ots...), devicesFor(8))
}

func TestTextReport(t *testing.T) {
	plan := tinyPlan(t, "exps=CPU")
	var b bytes.Buffer
	if err := plan.WriteText(&b, TextOptions{Tensors: true}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"model    " + tinyQwen + " (qwen3moe): 4 blocks, 16 experts (4 used), 51 tensors",
		"MEMORY", "verdict: fits: CUDA0", "LAYER MAP", "ROUTED EXP", "RULES", "-ot exps=CPU",
		"TENSORS (51)", "blk.0.ffn_up_exps.weight", "CPU_Mapped", "-ngl layer map: layer 0 → CUDA0", "input layer",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text report lacks %q:\n%s", want, out)
		}
	}
	// The layer map has one row per block plus output and input.
	if n := strings.Count(out, "\n  output "); n != 1 {
		t.Errorf("%d output rows", n)
	}
	b.Reset()
	plan.WriteText(&b, TextOptions{})
	if strings.Contains(b.String(), "TENSORS") {
		t.Error("tensor list without --tensors")
	}
}

// The JSON document always carries devices[] and tensors[] with the documented fields.
func TestJSONReport(t *testing.T) {
	plan := tinyPlan(t, "exps=CPU")
	var b bytes.Buffer
	if err := plan.WriteJSON(&b, []string{"--port 8080"}); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc["schema"] != "moerun.place/v1" {
		t.Errorf("schema %v", doc["schema"])
	}
	devices := doc["devices"].([]any)
	for _, key := range []string{"name", "capacity_bytes", "weights_bytes", "kv_bytes", "compute_bytes", "total_bytes", "fits"} {
		for _, d := range devices {
			if _, ok := d.(map[string]any)[key]; !ok {
				t.Errorf("device lacks %q: %v", key, d)
			}
		}
	}
	tensors := doc["tensors"].([]any)
	if len(tensors) != 51 {
		t.Fatalf("%d tensors", len(tensors))
	}
	for _, key := range []string{"name", "class", "layer", "type", "bytes", "device", "rule"} {
		if _, ok := tensors[0].(map[string]any)[key]; !ok {
			t.Errorf("tensor lacks %q", key)
		}
	}
	var decoded struct {
		Devices []struct {
			Name                                string
			CapacityBytes                       int64 `json:"capacity_bytes"`
			WeightsBytes, KVBytes, ComputeBytes int64
			TotalBytes                          int64 `json:"total_bytes"`
			Fits                                *bool
		}
		Tensors []struct {
			Name, Class, Type, Device, Rule string
			Layer                           *int
			Bytes                           int64
		}
		Ignored []string `json:"ignored_flags"`
	}
	if err := json.Unmarshal(b.Bytes(), &decoded); err != nil {
		t.Fatal(err)
	}
	cuda := decoded.Devices[0]
	if cuda.Name != "CUDA0" || cuda.CapacityBytes != 8<<30 || cuda.Fits == nil || !*cuda.Fits || cuda.TotalBytes != plan.Devices[0].Total {
		t.Errorf("CUDA0: %+v", cuda)
	}
	first := decoded.Tensors[0]
	if first.Name != "token_embd.weight" || first.Layer != nil || first.Device != "CPU" || first.Rule != "input layer (always on the CPU list)" {
		t.Errorf("first tensor %+v", first)
	}
	exps := decoded.Tensors[10]
	if exps.Name != "blk.0.ffn_gate_exps.weight" || *exps.Layer != 0 || exps.Device != "CPU" || exps.Rule != "-ot exps=CPU" || exps.Class != "routed_expert" {
		t.Errorf("expert tensor %+v", exps)
	}
	if len(decoded.Ignored) != 1 {
		t.Errorf("ignored flags %v", decoded.Ignored)
	}
}

// The SVG is well-formed XML with a cell for every layer, coloured per device.
func TestSVGAndHTML(t *testing.T) {
	plan := tinyPlan(t, "exps=CPU")
	var b bytes.Buffer
	if err := plan.WriteSVG(&b); err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(b.Bytes()))
	rects := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "rect" {
			rects++
		}
	}
	if rects < 6*len(plan.Layers) || !strings.Contains(b.String(), cpuColour) || !strings.Contains(b.String(), palette[0]) {
		t.Errorf("%d rects for %d layers", rects, len(plan.Layers))
	}
	b.Reset()
	if err := plan.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	html := b.String()
	if !strings.HasPrefix(html, "<!DOCTYPE html>") || !strings.Contains(html, "<svg") || !strings.Contains(html, "exps=CPU") || strings.Contains(html, "<script") {
		t.Error("HTML report is not a self-contained page with the layer map and rules")
	}
}
