package tensor

import (
	"crypto/sha256"
	"encoding/hex"
	"math"
	"strings"
	"testing"
)

// TestIQGridsMatchGGML hashes the expanded lattice tables as ggml lays them out in memory
// (little-endian uint64 or uint32 per point) and compares with the SHA-256 of ggml-common.h's
// tables at the fixtures' commit, so every point is checked, not only those the fixtures use.
func TestIQGridsMatchGGML(t *testing.T) {
	iq1s := make([]byte, len(iq1sGrid))
	for i, v := range iq1sGrid {
		iq1s[i] = byte(v)
	}
	for _, c := range []struct {
		name  string
		bytes []byte
		want  string
	}{
		{"iq2xxs_grid", iq2xxsGrid[:], "05826b5d3e472a3a78f196be62ac78acf81df0f909626e12ab9fa2a5d490dd54"},
		{"iq2xs_grid", iq2xsGrid[:], "06e47aaca60b4dc1d9b5a3f34540437058a6b142b4d7a59d5ded769b4d1bf1de"},
		{"iq2s_grid", iq2sGrid[:], "e1aa1473412b0552c2174c30ef22ab4073f6a181b85a17056e8249bd2932fd88"},
		{"iq3xxs_grid", iq3xxsGrid[:], "46e35f5a997efdee6c99ce57854c8a0d4f0ff8ca57e5e8a60c0793ea580acf5d"},
		{"iq3s_grid", iq3sGrid[:], "bd1af4945a1717c65610b0284e4628b9a1ba3b306fae3a06f6e5f597356e349f"},
		{"iq1s_grid", iq1s, "07540ffc1aeaf6ad4d97e96b0fcc765aae39671d4ae4a27bbd0e796fde167c6a"},
		{"ksigns_iq2xs", iqSigns[:], "a76742a603f8beca5212ecce0f1f02f11a4887fd2f7c8b15aca0ea3eb3380c31"},
	} {
		sum := sha256.Sum256(c.bytes)
		if got := hex.EncodeToString(sum[:]); got != c.want {
			t.Errorf("%s: sha256 %s, ggml's table %s", c.name, got, c.want)
		}
	}
}

// TestNearestInt checks ggml's magic-number rounding against round-half-to-even over every
// multiple of 1/8 in ±1100 (halves included), and the limits of its exact range.
func TestNearestInt(t *testing.T) {
	for i := -8800; i <= 8800; i++ {
		f := float32(i) / 8
		if got, want := nearestInt(f), int(math.RoundToEven(float64(f))); got != want {
			t.Fatalf("nearestInt(%g) = %d, want %d", f, got, want)
		}
	}
	for _, f := range []float32{4194303, -4194303, 4194302.5} {
		if got, want := nearestInt(f), int(math.RoundToEven(float64(f))); got != want {
			t.Errorf("nearestInt(%g) = %d, want %d", f, got, want)
		}
	}
}

func TestE8M0Half(t *testing.T) {
	for e, want := range map[uint8]float32{
		0:   float32(math.Ldexp(1, -128)), // subnormal
		1:   float32(math.Ldexp(1, -127)), // subnormal
		2:   float32(math.Ldexp(1, -126)),
		127: 0.5,
		128: 1,
		254: float32(math.Ldexp(1, 126)),
	} {
		if got := e8m0Half(e); got != want {
			t.Errorf("e8m0Half(%d) = %g, want %g", e, got, want)
		}
	}
}

// TestMXFP4ExponentRounding: ggml takes floor(log2f(amax)) with log2f's float32 result, which
// for the largest float32 below 8 is already 3 (glibc's log2f gives 3, 1.99999988 below 4).
func TestMXFP4ExponentRounding(t *testing.T) {
	for amax, want := range map[float32]uint8{
		math.Nextafter32(8, 0): 3 - 2 + 127,
		math.Nextafter32(4, 0): 1 - 2 + 127,
		8:                      3 - 2 + 127,
	} {
		x := make([]float32, qk32)
		x[5] = -amax
		b := make([]byte, 17)
		encodeMXFP4(x, b)
		if b[0] != want {
			t.Errorf("amax %.9g: e = %d, want %d", amax, b[0], want)
		}
	}
}

// TestUE4M3 checks the decoder on hand-computed values and that encoding every decoded
// value gives its byte back; and the encoder's rounding (the first dropped mantissa bit
// rounds up) and saturation. ggml's encoder saturates from exponent 15 on, so it never
// produces 0x78..0x7D (256..416): they all encode as 0x7E (448).
func TestUE4M3(t *testing.T) {
	for x, want := range map[uint8]float32{
		0x00: 0, 0x7F: 0, // zero and NaN
		0x01: 1.0 / 512 / 2, // smallest subnormal 2^-9, halved
		0x38: 0.5,           // 1.0
		0x39: 0.5625,        // 1.125
		0x7E: 224,           // 448, the largest
		0xB8: 0.5,           // the top bit is ignored
	} {
		if got := ue4m3Half(x); got != want {
			t.Errorf("ue4m3Half(%#02x) = %g, want %g", x, got, want)
		}
	}
	for x := uint8(1); x < 0x7F; x++ {
		want := x
		if x >= 0x78 {
			want = 0x7E
		}
		if back := toUE4M3(2 * ue4m3Half(x)); back != want {
			t.Errorf("toUE4M3(%g) = %#02x, want %#02x", 2*ue4m3Half(x), back, want)
		}
	}
	for x, want := range map[float32]uint8{
		1.0625: 0x39, // halfway between 1 and 1.125
		1.06:   0x38,
		1000:   0x7E,
		-1:     0,
		0.0009: 0, // below half the smallest subnormal
	} {
		if got := toUE4M3(x); got != want {
			t.Errorf("toUE4M3(%g) = %#02x, want %#02x", x, got, want)
		}
	}
}

// TestTritPacking packs every combination of 5 base-3 digits the way TQ1_0 stores them
// (⌈q·256/243⌉ with the first digit most significant) and reads each digit back.
func TestTritPacking(t *testing.T) {
	for q := range 243 {
		b := uint8((q*256 + 242) / 243)
		for n := range 5 {
			want := q / int(math.Pow(3, float64(4-n))) % 3
			if got := trit(b, n); got != want {
				t.Fatalf("q=%d byte %#02x digit %d: %d, want %d", q, b, n, got, want)
			}
		}
	}
}

// TestBlockFormatsRoundTrip quantizes smooth data and checks the reconstruction error per
// type against its nominal precision, a sanity check that does not depend on ggml's data.
func TestBlockFormatsRoundTrip(t *testing.T) {
	const n = 1024
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(math.Sin(float64(i)*0.37) + 0.3*math.Cos(float64(i)*1.7))
	}
	for typ, maxRelRMS := range map[Type]float64{
		Q8_0: 0.01, Q8_1: 0.01, Q8_K: 0.01, Q6_K: 0.02, Q5_0: 0.04, Q5_1: 0.04, Q5_K: 0.04,
		Q4_0: 0.08, Q4_1: 0.08, Q4_K: 0.08, IQ4_NL: 0.08, IQ4_XS: 0.08, MXFP4: 0.15,
		NVFP4: 0.15, Q3_K: 0.15, Q2_K: 0.3, Q2_0: 0.6, TQ1_0: 0.7, TQ2_0: 0.7, Q1_0: 0.7,
	} {
		size, _ := typ.RowBytes(n)
		q := make([]byte, size)
		y := make([]float32, n)
		if err := Quantize(typ, x, q); err != nil {
			t.Fatal(err)
		}
		if err := Dequantize(typ, q, y); err != nil {
			t.Fatal(err)
		}
		var num, den float64
		for i := range x {
			num += float64(y[i]-x[i]) * float64(y[i]-x[i])
			den += float64(x[i]) * float64(x[i])
		}
		if rel := math.Sqrt(num / den); rel > maxRelRMS {
			t.Errorf("%s: relative RMS error %.4f > %g", typ, rel, maxRelRMS)
		}
	}
}

func TestBlockFormatErrors(t *testing.T) {
	if _, err := DotRow(Q8_K, 256, make([]byte, 292), make([]byte, 292)); err == nil || !strings.Contains(err.Error(), "activation format") {
		t.Errorf("Q8_K weights: %v", err)
	}
	if err := Quantize(IQ2_XXS, make([]float32, 256), make([]byte, 66)); err == nil || !strings.Contains(err.Error(), "iq2_xxs") {
		t.Errorf("IQ2_XXS quantizer: %v", err)
	}
	if err := Dequantize(Q4_K, make([]byte, 144), make([]float32, 255)); err == nil {
		t.Error("a partial block was accepted")
	}
	if err := QuantizeActivations(Q8_0, make([]float32, 32), make([]byte, 33)); err == nil {
		t.Error("a short activation buffer was accepted")
	}
}
