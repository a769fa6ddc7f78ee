package tensor

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"testing"
)

// ggml-ops.json holds ggml-cpu's own outputs (llama.cpp 3f545bec, AVX-512 build, 2 threads)
// for deterministic inputs, written by tools/oracle/ops_golden.cpp. The tests regenerate the
// inputs with the same stream and require moerun's ops to give the same bits.

// oracleCase is one case of the oracle; each op uses some of the fields. Floats were
// printed with %.9g, so decoding them as float32 recovers the exact values.
type oracleCase struct {
	Op, Name, Out, In string
	Seed              uint64
	N                 int

	Cols, Rows   int
	Eps, Scale   float32
	Alpha, Limit float32
	Mask         bool

	Ne0, Heads, Mode int
	Pos              []int32
	NDims            int     `json:"n_dims"`
	Offset           int     `json:"offset"`
	NCtxOrig         int     `json:"n_ctx_orig"`
	Base             float32 `json:"base"`
	FreqScale        float32 `json:"freq_scale"`
	ExtFactor        float32 `json:"ext_factor"`
	AttnFactor       float32 `json:"attn_factor"`
	BetaFast         float32 `json:"beta_fast"`
	BetaSlow         float32 `json:"beta_slow"`
	FreqFactors      bool    `json:"freq_factors"`

	Type       string
	DK         int `json:"dk"`
	DV         int `json:"dv"`
	KVHeads    int `json:"kv_heads"`
	NKV        int `json:"n_kv"`
	Window     int
	Sinks, MLA bool

	Experts, K int
	PerSlot    bool `json:"per_slot"`
	IDs        []int32
}

// ggml-ops-avx512f.json holds flash_attn_ext cases with head sizes of 128 and more from
// an AVX-512 build of the same commit without AVX512-FP16 (`ops_golden wide`), which sums
// those F16 scores in float32 vectors where the fixture build uses half precision.

func loadOracle(t *testing.T, op string) []oracleCase {
	t.Helper()
	return loadOracleFile(t, "ggml-ops.json", op)
}

func loadOracleFile(t *testing.T, name, op string) []oracleCase {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	var file struct{ Cases []oracleCase }
	if err := json.Unmarshal(b, &file); err != nil {
		t.Fatal(err)
	}
	var out []oracleCase
	for _, c := range file.Cases {
		if c.Op == op {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no %s cases in %s", op, name)
	}
	return out
}

func decodeB64(t *testing.T, s string) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (c *oracleCase) outFloats(t *testing.T) []float32 {
	b := decodeB64(t, c.Out)
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// oracleStream is the oracle's input stream: splitmix64, each draw a multiple of 2^-13 in
// [-4, 4).
type oracleStream struct{ s uint64 }

func (r *oracleStream) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func (r *oracleStream) uniform() float32 { return float32(int32(r.next()>>48)-32768) / 8192 }

func (r *oracleStream) fill(n int, scale float32) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = r.uniform() * scale
	}
	return out
}

func expectBits(t *testing.T, name string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d values, ggml has %d", name, len(got), len(want))
		return
	}
	mismatches, first := 0, -1
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(got[i] != got[i] && want[i] != want[i]) {
			if first < 0 {
				first = i
			}
			mismatches++
		}
	}
	if mismatches > 0 {
		t.Errorf("%s: %d of %d values differ from ggml's bits; first at %d: %g (%#08x), ggml %g (%#08x)",
			name, mismatches, len(got), first, got[first], math.Float32bits(got[first]), want[first], math.Float32bits(want[first]))
	}
}

func TestOpsMatchGGML(t *testing.T) {
	for _, c := range loadOracle(t, "rms_norm") {
		r := oracleStream{c.Seed}
		x := r.fill(c.Cols*c.Rows, c.Scale)
		got := make([]float32, len(x))
		RMSNorm(got, x, c.Cols, c.Eps)
		expectBits(t, c.Name, got, c.outFloats(t))
	}
	for _, c := range loadOracle(t, "soft_max") {
		r := oracleStream{c.Seed}
		x := r.fill(c.Cols*c.Rows, 2)
		var mask []float32
		if c.Mask {
			mask = make([]float32, len(x))
			for i := range mask {
				if v := r.uniform(); v < -3 {
					mask[i] = float32(math.Inf(-1))
				} else {
					mask[i] = v
				}
			}
		}
		got := make([]float32, len(x))
		Softmax(got, x, c.Cols, c.Scale, mask)
		expectBits(t, c.Name, got, c.outFloats(t))
	}
	for _, op := range []string{"silu", "swiglu", "swiglu_oai", "sigmoid"} {
		for _, c := range loadOracle(t, op) {
			r := oracleStream{c.Seed}
			a, b := r.fill(c.Cols*c.Rows, c.Scale), r.fill(c.Cols*c.Rows, c.Scale)
			got := make([]float32, len(a))
			switch op {
			case "silu":
				SiLU(got, a, c.Cols)
			case "swiglu":
				SwiGLU(got, a, b, c.Cols)
			case "swiglu_oai":
				SwiGLUOAI(got, a, b, c.Alpha, c.Limit)
			case "sigmoid":
				Sigmoid(got, a)
			}
			expectBits(t, c.Name, got, c.outFloats(t))
		}
	}
}

func TestArgsortMatchesGGML(t *testing.T) {
	for _, c := range loadOracle(t, "argsort") {
		in := decodeB64(t, c.In)
		x := make([]float32, c.N)
		for i := range x {
			x[i] = math.Float32frombits(binary.LittleEndian.Uint32(in[4*i:]))
		}
		want := decodeB64(t, c.Out)
		got := make([]int32, c.N)
		ArgsortDesc(got, x)
		for i := range got {
			if w := int32(binary.LittleEndian.Uint32(want[4*i:])); got[i] != w {
				t.Errorf("%s: position %d holds index %d (value %g), ggml has %d (value %g)", c.Name, i, got[i], x[got[i]], w, x[w])
				break
			}
		}
	}
}

// TestExp32MatchesGlibc holds exp32 to glibc's expf bit for bit (testdata/expf-glibc.json,
// tools/oracle/expf_golden.c): inputs where expf is not the correctly rounded result (the
// float64 exponential rounded to float32 misses about 1 in 13,000 of them, all of these),
// a stride over every bit pattern (NaNs, infinities, subnormals) and the edges of the
// overflow and underflow cases.
func TestExp32MatchesGlibc(t *testing.T) {
	b, err := os.ReadFile("testdata/expf-glibc.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct{ Pairs [][2]string }
	if err := json.Unmarshal(b, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Pairs) < 1000 {
		t.Fatalf("%d pairs", len(file.Pairs))
	}
	roundedDiffers := 0
	for _, p := range file.Pairs {
		var in, want uint32
		if _, err := fmt.Sscanf(p[0]+" "+p[1], "%x %x", &in, &want); err != nil {
			t.Fatal(err)
		}
		x := math.Float32frombits(in)
		got := math.Float32bits(exp32(x))
		if x != x { // a NaN: any NaN will do
			if w := math.Float32frombits(want); w == w || got&0x7F800000 != 0x7F800000 || got&0x7FFFFF == 0 {
				t.Errorf("expf(NaN %#08x) = %#08x, glibc %#08x", in, got, want)
			}
			continue
		}
		if got != want {
			t.Errorf("expf(%v) = %v (%#08x), glibc %v (%#08x)", x, math.Float32frombits(got), got, math.Float32frombits(want), want)
		}
		if math.Float32bits(float32(math.Exp(float64(x)))) != want {
			roundedDiffers++
		}
	}
	if roundedDiffers < 500 { // the file is meant to hold the hard cases
		t.Errorf("only %d inputs where expf is not the rounded float64 exponential", roundedDiffers)
	}
	// The installed exp32s (a vector kernel in the SIMD build) on the same inputs, in one
	// slice, so that special values sit in vector steps among ordinary ones.
	xs := make([]float32, len(file.Pairs))
	for i, p := range file.Pairs {
		var in uint32
		fmt.Sscanf(p[0], "%x", &in)
		xs[i] = math.Float32frombits(in)
	}
	ys := append([]float32(nil), xs...)
	active.exp32s(ys)
	for i, x := range xs {
		if got, want := ys[i], exp32(x); math.Float32bits(got) != math.Float32bits(want) && !(got != got && want != want) {
			t.Errorf("exp32s(%v) = %v, exp32 %v", x, got, want)
		}
	}
}

// TestExp32sSweep holds the installed exp32s to exp32 on every 97th float32 bit pattern
// whose magnitude is below 128 (both signs: ordinary values, the range exp32 handles
// apart, subnormals and zeros), in slices whose lengths leave tails.
func TestExp32sSweep(t *testing.T) {
	var xs []float32
	for b := uint32(0); b < 0x43000000; b += 97 {
		xs = append(xs, math.Float32frombits(b), math.Float32frombits(b|0x80000000))
	}
	xs = append(xs, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()))
	ys := append([]float32(nil), xs...)
	for off := 0; off < len(ys); off += 1000 + off%7 {
		active.exp32s(ys[off:min(off+1000+off%7, len(ys))])
	}
	for i, x := range xs {
		if got, want := ys[i], exp32(x); math.Float32bits(got) != math.Float32bits(want) && !(got != got && want != want) {
			t.Fatalf("exp32s(%v) = %v (%#08x), exp32 %v (%#08x)", x, got, math.Float32bits(got), want, math.Float32bits(want))
		}
	}
}
