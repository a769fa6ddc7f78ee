package tensor

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"testing"
)

// activationGoldens reads ggml's encodings of the 8 test vectors (quant-activations.json).
func activationGoldens(t *testing.T) []map[string]json.RawMessage {
	t.Helper()
	raw, err := os.ReadFile("../testdata/quant/quant-activations.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Vectors []map[string]json.RawMessage `json:"vectors"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Vectors
}

func goldenFloats(t *testing.T, v map[string]json.RawMessage, key string) []float32 {
	t.Helper()
	var xs []float64
	if err := json.Unmarshal(v[key], &xs); err != nil {
		t.Fatal(err)
	}
	out := make([]float32, len(xs))
	for i, x := range xs {
		out[i] = float32(x)
	}
	return out
}

func goldenHex(t *testing.T, v map[string]json.RawMessage, key string) []byte {
	t.Helper()
	var s string
	if err := json.Unmarshal(v[key], &s); err != nil {
		t.Fatal(err)
	}
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestHalfFloatsMatchGGML narrows ggml's test vectors (including exact rounding ties and
// values that underflow) and compares with ggml's encodings, then widens them back.
func TestHalfFloatsMatchGGML(t *testing.T) {
	for _, v := range activationGoldens(t) {
		var name string
		json.Unmarshal(v["name"], &name)
		x := goldenFloats(t, v, "x")
		for _, c := range []struct {
			key    string
			narrow func(float32) uint16
			widen  func(uint16) float32
		}{{"f16_ref", F32ToF16, F16ToF32}, {"bf16_ref", F32ToBF16, BF16ToF32}} {
			want := goldenHex(t, v, c.key)
			for i, xi := range x {
				w := binary.LittleEndian.Uint16(want[2*i:])
				if got := c.narrow(xi); got != w {
					t.Fatalf("%s %s[%d]: %g -> %#04x, ggml %#04x", name, c.key, i, xi, got, w)
				}
			}
		}
	}
}

// TestHalfDequantMatchesGGML widens every element of the F16 and BF16 fixture tensors and
// compares bit patterns with ggml's own conversion.
func TestHalfDequantMatchesGGML(t *testing.T) {
	for _, c := range []struct {
		name  string
		widen func(uint16) float32
	}{{"F16", F16ToF32}, {"BF16", BF16ToF32}} {
		want, err := os.ReadFile("../testdata/quant/dequant/" + c.name + ".f32.bin")
		if err != nil {
			t.Fatal(err)
		}
		src := halfTensorBytes(t, c.name)
		for i := 0; i < len(src)/2; i++ {
			got := math.Float32bits(c.widen(binary.LittleEndian.Uint16(src[2*i:])))
			if w := binary.LittleEndian.Uint32(want[4*i:]); got != w {
				t.Fatalf("%s element %d: %#08x, ggml %#08x", c.name, i, got, w)
			}
		}
	}
}

// halfTensorBytes reads <name>.weight out of quant-tensors.gguf using the offsets in the index.
func halfTensorBytes(t *testing.T, name string) []byte {
	t.Helper()
	raw, err := os.ReadFile("../testdata/quant/quant-tensors.dequant.json")
	if err != nil {
		t.Fatal(err)
	}
	var index struct {
		Types []struct {
			Type   string `json:"type"`
			Offset int64  `json:"gguf_data_offset"`
			Bytes  int64  `json:"bytes"`
		} `json:"types"`
	}
	json.Unmarshal(raw, &index)
	file, err := os.ReadFile("../testdata/quant/quant-tensors.gguf")
	if err != nil {
		t.Fatal(err)
	}
	for _, ty := range index.Types {
		if ty.Type == name {
			return file[ty.Offset : ty.Offset+ty.Bytes]
		}
	}
	t.Fatalf("%s not in the index", name)
	return nil
}

// TestF16Exhaustive round-trips all 65,536 binary16 values through float32.
func TestF16Exhaustive(t *testing.T) {
	for h := range 1 << 16 {
		f := F16ToF32(uint16(h))
		back := F32ToF16(f)
		if math.IsNaN(float64(f)) {
			if back&0x7C00 != 0x7C00 || back&0x3FF == 0 {
				t.Fatalf("NaN %#04x came back as %#04x", h, back)
			}
			continue
		}
		if back != uint16(h) {
			t.Fatalf("%#04x -> %g -> %#04x", h, f, back)
		}
	}
	// Boundaries: the largest finite value, the overflow threshold, the smallest subnormal.
	for _, c := range []struct {
		f    float32
		want uint16
	}{
		{65504, 0x7BFF}, {65519.99, 0x7BFF}, {65520, 0x7C00}, {-1e10, 0xFC00},
		{5.960464477539063e-08, 0x0001}, {2.98023223876953125e-08, 0x0000}, {2.98023224e-08 * 1.0000001, 0x0001},
		{float32(math.Inf(-1)), 0xFC00}, {float32(math.Copysign(0, -1)), 0x8000},
	} {
		if got := F32ToF16(c.f); got != c.want {
			t.Errorf("F32ToF16(%g) = %#04x, want %#04x", c.f, got, c.want)
		}
	}
}

// TestRoundToF16 holds the branch-light rounding to the two conversions it replaces, over a
// spread of float32 bit patterns (every 97th, which visits every exponent, both signs, NaN
// payloads, and both sides of each rounding boundary many times; the whole 2^32 range was
// checked once, taking 30 s) and the boundaries of F32ToF16's cases.
func TestRoundToF16(t *testing.T) {
	check := func(b uint32) {
		x := math.Float32frombits(b)
		if got, want := math.Float32bits(roundToF16(x)), math.Float32bits(F16ToF32(F32ToF16(x))); got != want {
			t.Fatalf("roundToF16(%#08x) = %#08x, want %#08x", b, got, want)
		}
	}
	for b := uint64(0); b < 1<<32; b += 97 {
		check(uint32(b))
	}
	for _, edge := range []uint32{0x477FEFFF, 0x477FF000, 0x38800000, 0x387FFFFF, 0x33000000, 0x33000001, 0x7F800001, 0x7FC00000, 0x7F800000} {
		for _, sign := range []uint32{0, 0x80000000} {
			for d := uint32(0); d < 3; d++ {
				check(sign | (edge - 1 + d))
			}
		}
	}
}

// TestDecodeF16 holds F16's row decoders (the scalar one, which widens normal values
// itself, and the installed one, a vector kernel in the SIMD build) to F16ToF32 on every
// binary16 bit pattern.
func TestDecodeF16(t *testing.T) {
	src := make([]byte, 2<<16)
	for h := range 1 << 16 {
		binary.LittleEndian.PutUint16(src[2*h:], uint16(h))
	}
	for _, decode := range []func(src []byte, dst []float32){decodeF16, active.traits[F16].ToFloat} {
		for _, n := range []int{1 << 16, 1<<16 - 3} { // with a remainder after the vector steps
			dst := make([]float32, n)
			decode(src[2*(1<<16-n):], dst)
			for i, got := range dst {
				h := uint16(1<<16 - n + i)
				if want := F16ToF32(h); math.Float32bits(got) != math.Float32bits(want) {
					t.Fatalf("%#04x: %g (%#08x), want %g (%#08x)", h, got, math.Float32bits(got), want, math.Float32bits(want))
				}
			}
		}
	}
}

// TestEncodeF16 holds the installed F16 encoder (F16C's VCVTPS2PH in the SIMD build) to
// F32ToF16 on every sign, exponent and top mantissa bits of float32 (the upper 16 bits of
// the pattern), each with low halves around binary16's rounding point (bit 12 is half a
// last place for normal results) and a few others; the rest after a whole vector step too.
func TestEncodeF16(t *testing.T) {
	lows := []uint32{0, 1, 0x0FFF, 0x1000, 0x1001, 0x2000, 0x3000, 0x3001, 0x6FFF, 0x9000, 0xF000, 0xFFFF, 0x5A5A}
	src := make([]float32, 0, len(lows)<<16)
	for hi := range uint32(1 << 16) {
		for _, lo := range lows {
			src = append(src, math.Float32frombits(hi<<16|lo))
		}
	}
	for _, n := range []int{len(src), len(src) - 5} {
		dst := make([]byte, 2*n)
		active.traits[F16].FromFloat(src[:n], dst)
		for i, f := range src[:n] {
			if got, want := binary.LittleEndian.Uint16(dst[2*i:]), F32ToF16(f); got != want {
				t.Fatalf("%#08x: %#04x, want %#04x", math.Float32bits(f), got, want)
			}
		}
	}
}

// TestQuantizeActivations holds the installed Q8_0 and Q8_K activation quantizers (vector
// kernels in the SIMD build) to the scalar ones on blocks of every kind: random scales over
// 60 binades, all zeros (either sign), one nonzero value, exact halves of a step (ties for
// the rounding), subnormals, values near float32's largest, a largest magnitude held by
// both signs (the first one sets Q8_K's sign), and blocks with an infinity or a NaN among
// finite blocks.
func TestQuantizeActivations(t *testing.T) {
	for _, c := range []struct {
		typ           Type
		values, bytes int
		scalar        func(src []float32, dst []byte)
	}{
		{Q8_0, qk32, 34, func(src []float32, dst []byte) { formatQ8_0.encode(src, dst, true) }},
		{Q8_K, qkK, 292, encodeQ8_K},
	} {
		blocks := activationBlocks(c.values)
		src := make([]float32, 0, c.values*len(blocks))
		for _, b := range blocks {
			src = append(src, b...)
		}
		got, want := make([]byte, c.bytes*len(blocks)), make([]byte, c.bytes*len(blocks))
		if err := QuantizeActivations(c.typ, src, got); err != nil {
			t.Fatal(err)
		}
		c.scalar(src, want)
		for b := range blocks {
			if g, w := got[c.bytes*b:c.bytes*(b+1)], want[c.bytes*b:c.bytes*(b+1)]; string(g) != string(w) {
				t.Errorf("%s block %d: % x\nwant % x", c.typ, b, g, w)
			}
		}
	}
}

// activationBlocks makes the blocks of TestQuantizeActivations, n values each.
func activationBlocks(n int) [][]float32 {
	rng := rand.New(rand.NewPCG(7, 8))
	block := func(f func(j int) float32) []float32 {
		b := make([]float32, n)
		for j := range b {
			b[j] = f(j)
		}
		return b
	}
	var blocks [][]float32
	for i := range 200 {
		scale := float32(math.Ldexp(1, i%60-30))
		blocks = append(blocks, block(func(int) float32 { return scale * float32(rng.NormFloat64()) }))
	}
	ties := block(func(j int) float32 { return float32(j%32-16) + 0.5 }) // amax 15.5: v·127/15.5 lands on halves
	ties[0] = 127
	single := make([]float32, n)
	single[5] = -3
	bothSigns := block(func(j int) float32 { return float32(j%7) - 3 })
	bothSigns[n/2], bothSigns[3] = 9, -9 // the first of largest magnitude is negative
	blocks = append(blocks,
		make([]float32, n),
		block(func(int) float32 { return float32(math.Copysign(0, -1)) }),
		single, ties, bothSigns,
		block(func(j int) float32 { return math.Float32frombits(uint32(j + 1)) }), // subnormals
		block(func(j int) float32 { return math.MaxFloat32 / float32(j+1) }),
	)
	for _, bad := range []float32{float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN())} {
		b := append([]float32(nil), blocks[3]...)
		b[9] = bad
		blocks = append(blocks, b, blocks[4])
	}
	return blocks
}
