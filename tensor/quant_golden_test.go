package tensor_test

// Checks every block format against llama.cpp's own outputs (testdata/quant, see its README):
// ggml's dequantization of the quantized fixture tensors (bit patterns), llama-quantize's
// bytes, ggml's activation encodings, and ggml's generic and SIMD dot products.

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"os"
	"sync"
	"testing"

	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/tensor"
)

const quantDir = "../testdata/quant/"

// quantFixture is quant-tensors.gguf with its index.
type quantFixture struct {
	file   *gguf.File
	types  []fixtureType
	source []float32 // source.weight: 64 rows of 512
}

// fixtureType is a type's entry in quant-tensors.dequant.json.
type fixtureType struct {
	Name    string `json:"type"`
	Imatrix bool   `json:"imatrix_used"`
}

var loadQuantFixture = sync.OnceValues(func() (*quantFixture, error) {
	var fx quantFixture
	raw, err := os.ReadFile(quantDir + "quant-tensors.dequant.json")
	if err != nil {
		return nil, err
	}
	var index struct {
		Types []fixtureType `json:"types"`
	}
	if err := json.Unmarshal(raw, &index); err != nil {
		return nil, err
	}
	fx.types = index.Types
	// The file stays open (and mapped) for the life of the test binary.
	if fx.file, err = gguf.Open(quantDir + "quant-tensors.gguf"); err != nil {
		return nil, err
	}
	src, err := fx.tensorBytes("source.weight")
	if err != nil {
		return nil, err
	}
	fx.source = make([]float32, len(src)/4)
	if err := tensor.Dequantize(tensor.F32, src, fx.source); err != nil {
		return nil, err
	}
	return &fx, nil
})

func quantFixtureT(t testing.TB) *quantFixture {
	t.Helper()
	fx, err := loadQuantFixture()
	if err != nil {
		t.Fatal(err)
	}
	return fx
}

func (fx *quantFixture) tensorBytes(name string) ([]byte, error) {
	ti, ok := fx.file.Tensor(name)
	if !ok {
		return nil, errors.New(name + " not in quant-tensors.gguf")
	}
	return fx.file.TensorData(ti)
}

// weight returns the quantized fixture tensor of a type (64 rows of 512 values).
func (fx *quantFixture) weight(t *testing.T, name string) (tensor.Type, []byte) {
	t.Helper()
	typ, err := tensor.ParseType(name)
	if err != nil {
		t.Fatal(err)
	}
	data, err := fx.tensorBytes(name + ".weight")
	if err != nil {
		t.Fatal(err)
	}
	return typ, data
}

func TestDequantizeMatchesGGML(t *testing.T) {
	fx := quantFixtureT(t)
	for _, ft := range fx.types {
		t.Run(ft.Name, func(t *testing.T) {
			typ, data := fx.weight(t, ft.Name)
			want, err := os.ReadFile(quantDir + "dequant/" + ft.Name + ".f32.bin")
			if err != nil {
				t.Fatal(err)
			}
			got := make([]float32, len(fx.source))
			if err := tensor.Dequantize(typ, data, got); err != nil {
				t.Fatal(err)
			}
			bad := 0
			for k, g := range got {
				if w := binary.LittleEndian.Uint32(want[4*k:]); math.Float32bits(g) != w {
					if bad++; bad <= 3 {
						t.Errorf("element %d (row %d): %g (%#08x), ggml %g (%#08x)",
							k, k/512, g, math.Float32bits(g), math.Float32frombits(w), w)
					}
				}
			}
			if bad > 0 {
				t.Errorf("%d of %d elements differ", bad, len(got))
			}
		})
	}
}

// TestQuantizeMatchesLlamaQuantize quantizes source.weight and compares with the bytes
// llama-quantize wrote, for every type it quantized without an importance matrix.
func TestQuantizeMatchesLlamaQuantize(t *testing.T) {
	fx := quantFixtureT(t)
	for _, ft := range fx.types {
		if ft.Imatrix {
			continue
		}
		t.Run(ft.Name, func(t *testing.T) {
			typ, want := fx.weight(t, ft.Name)
			got := make([]byte, len(want))
			if err := tensor.Quantize(typ, fx.source, got); err != nil {
				if typ == tensor.IQ3_S {
					t.Skip("no IQ3_S quantizer (issue 3 asks only for its dequantization):", err)
				}
				t.Fatal(err)
			}
			compareBlocks(t, typ, got, want)
		})
	}
}

// compareBlocks reports the first differing blocks of two encodings.
func compareBlocks(t *testing.T, typ tensor.Type, got, want []byte) {
	t.Helper()
	size := int(typ.BlockBytes())
	bad := 0
	for off := 0; off < len(want); off += size {
		g, w := got[off:off+size], want[off:off+size]
		if string(g) != string(w) {
			if bad++; bad <= 3 {
				t.Errorf("block %d:\n got  %x\n want %x", off/size, g, w)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d blocks differ", bad, len(want)/size)
	}
}

// activationVector is one of the 8 test vectors of quant-activations.json with its encodings.
type activationVector struct {
	Name      string    `json:"name"`
	X         []float32 `json:"x"`
	Encodings map[string]string
}

type activationDots struct {
	VecDotType string       `json:"vec_dot_type"`
	Activation string       `json:"activation"`
	CPU        [][]float32  `json:"cpu"`
	Generic    *[][]float32 `json:"generic"`
}

// activationGolden is quant-activations.json: the vectors and, per weight type, the dots.
type activationGolden struct {
	vectors []activationVector
	dots    map[string]json.RawMessage
}

var loadActivations = sync.OnceValues(func() (*activationGolden, error) {
	raw, err := os.ReadFile(quantDir + "quant-activations.json")
	if err != nil {
		return nil, err
	}
	var doc struct {
		Vectors []map[string]json.RawMessage `json:"vectors"`
		Dots    map[string]json.RawMessage   `json:"dots"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	vectors := make([]activationVector, len(doc.Vectors))
	for i, fields := range doc.Vectors {
		v := &vectors[i]
		v.Encodings = map[string]string{}
		for key, value := range fields {
			var err error
			switch key {
			case "name":
				err = json.Unmarshal(value, &v.Name)
			case "x":
				err = json.Unmarshal(value, &v.X)
			case "note":
			default:
				var s string
				err = json.Unmarshal(value, &s)
				v.Encodings[key] = s
			}
			if err != nil {
				return nil, err
			}
		}
	}
	return &activationGolden{vectors, doc.Dots}, nil
})

func activationsT(t *testing.T) ([]activationVector, map[string]json.RawMessage) {
	t.Helper()
	golden, err := loadActivations()
	if err != nil {
		t.Fatal(err)
	}
	return golden.vectors, golden.dots
}

func (v *activationVector) encoding(t *testing.T, key string) []byte {
	t.Helper()
	b, err := hex.DecodeString(v.Encodings[key])
	if err != nil || len(b) == 0 {
		t.Fatalf("vector %s: no encoding %q (%v)", v.Name, key, err)
	}
	return b
}

// TestActivationEncodingsMatchGGML compares the reference quantizers (Quantize) and the CPU
// matmul's converters (QuantizeActivations) with ggml's encodings of the test vectors.
func TestActivationEncodingsMatchGGML(t *testing.T) {
	vectors, _ := activationsT(t)
	for _, c := range []struct {
		key      string
		typ      tensor.Type
		quantize func(tensor.Type, []float32, []byte) error
	}{
		{"q8_0_ref", tensor.Q8_0, tensor.Quantize},
		{"q8_0_cpu", tensor.Q8_0, tensor.QuantizeActivations},
		{"q8_1_ref", tensor.Q8_1, tensor.Quantize},
		{"q8_1_cpu", tensor.Q8_1, tensor.QuantizeActivations},
		{"q8_K_ref", tensor.Q8_K, tensor.Quantize},
		{"q8_K_cpu", tensor.Q8_K, tensor.QuantizeActivations},
	} {
		for _, v := range vectors {
			t.Run(c.key+"/"+v.Name, func(t *testing.T) {
				want := v.encoding(t, c.key)
				got := make([]byte, len(want))
				if err := c.quantize(c.typ, v.X, got); err != nil {
					t.Fatal(err)
				}
				compareBlocks(t, c.typ, got, want)
			})
		}
	}
}

// TestVecDotMatchesGGML computes every row of every fixture tensor against every test
// vector (in ggml's own activation encoding): the scalar kernels bit for bit with ggml's
// generic C kernel, and the installed ones (vector kernels where built) within 1e-5·Σ|w·x|
// of the SIMD kernel llama.cpp runs on x86.
func TestVecDotMatchesGGML(t *testing.T) {
	fx := quantFixtureT(t)
	vectors, dots := activationsT(t)
	const n = 512
	for _, ft := range fx.types {
		t.Run(ft.Name, func(t *testing.T) {
			typ, data := fx.weight(t, ft.Name)
			var want activationDots
			if err := json.Unmarshal(dots[ft.Name], &want); err != nil {
				t.Fatal(err)
			}
			tr, err := tensor.TraitsOf(typ)
			if err != nil {
				t.Fatal(err)
			}
			if tr.VecDotType.String() != want.VecDotType {
				t.Fatalf("partner type %s, ggml uses %s", tr.VecDotType, want.VecDotType)
			}
			rowBytes := len(data) / 64
			weights := make([]float32, n)
			acts := make([]float32, n)
			bad := 0
			for i, v := range vectors {
				act := v.encoding(t, want.Activation)
				if err := tensor.Dequantize(tr.VecDotType, act, acts); err != nil {
					t.Fatal(err)
				}
				for r := range 64 {
					row := data[r*rowBytes : (r+1)*rowBytes]
					got, err := tensor.DotRow(typ, n, row, act)
					if err != nil {
						t.Fatal(err)
					}
					if want.Generic != nil {
						// The scalar kernel, also where a vector kernel is installed.
						ref := tensor.ScalarVecDot(typ)(n, row, act)
						if g := (*want.Generic)[i][r]; math.Float32bits(ref) != math.Float32bits(g) {
							if bad++; bad <= 3 {
								t.Errorf("vector %s row %d: %g, ggml generic %g", v.Name, r, ref, g)
							}
						}
					}
					if err := tensor.Dequantize(typ, row, weights); err != nil {
						t.Fatal(err)
					}
					var magnitude float64
					for k, w := range weights {
						magnitude += math.Abs(float64(w) * float64(acts[k]))
					}
					if diff := math.Abs(float64(got) - float64(want.CPU[i][r])); diff > 1e-5*magnitude {
						t.Errorf("vector %s row %d: %g, ggml x86 %g: differs by %g > 1e-5·%g",
							v.Name, r, got, want.CPU[i][r], diff, magnitude)
					}
				}
			}
			if bad > 0 {
				t.Errorf("%d of %d dot products differ from ggml's generic kernel", bad, 64*len(vectors))
			}
		})
	}
}
