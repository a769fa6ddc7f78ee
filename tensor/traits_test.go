package tensor

import (
	"math"
	"os"
	"strings"
	"testing"
)

func TestHalfTraitsMatchGGML(t *testing.T) {
	for _, c := range []struct {
		name string
		typ  Type
	}{{"F16", F16}, {"BF16", BF16}} {
		src := halfTensorBytes(t, c.name)
		got := make([]float32, len(src)/2)
		if err := Dequantize(c.typ, src, got); err != nil {
			t.Fatal(err)
		}
		want, _ := os.ReadFile("../testdata/quant/dequant/" + c.name + ".f32.bin")
		back := make([]byte, len(src))
		if err := Quantize(c.typ, got, back); err != nil {
			t.Fatal(err)
		}
		wantF := make([]float32, len(got))
		Dequantize(F32, want, wantF)
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(wantF[i]) || back[2*i] != src[2*i] || back[2*i+1] != src[2*i+1] {
				t.Fatalf("%s element %d: %g (ggml %g)", c.name, i, got[i], wantF[i])
			}
		}
	}
}

func TestDotRowFloat(t *testing.T) {
	w := []float32{1, 2, 3, -4}
	a := []float32{0.5, 0.25, -1, 2}
	for _, typ := range []Type{F32, F16, BF16} {
		wb, ab := make([]byte, 4*typ.BlockBytes()), make([]byte, 4*typ.BlockBytes())
		Quantize(typ, w, wb)
		QuantizeActivations(typ, a, ab)
		got, err := DotRow(typ, 4, wb, ab)
		if err != nil || got != -10 { // 0.5 + 0.5 - 3 - 8, exact in every format
			t.Errorf("%s: %v, %v", typ, got, err)
		}
	}
}

func TestTraitErrors(t *testing.T) {
	if _, err := DotRow(F32, 4, make([]byte, 16), make([]byte, 12)); err == nil || !strings.Contains(err.Error(), "activations") {
		t.Errorf("short activations: %v", err)
	}
	if err := Dequantize(F16, make([]byte, 3), make([]float32, 2)); err == nil {
		t.Error("odd buffer accepted")
	}
	if _, err := TraitsOf(I32); err == nil || !strings.Contains(err.Error(), "i32") {
		t.Errorf("i32 kernels: %v", err)
	}
}
