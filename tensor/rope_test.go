package tensor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

func ropeFromOracle(c *oracleCase, freqFactors []float32) RoPE {
	return RoPE{
		Mode: RoPEMode(c.Mode), Dims: c.NDims, Offset: c.Offset, Base: c.Base, FreqScale: c.FreqScale,
		ExtFactor: c.ExtFactor, AttnFactor: c.AttnFactor, BetaFast: c.BetaFast, BetaSlow: c.BetaSlow,
		OrigCtx: c.NCtxOrig, FreqFactors: freqFactors,
	}
}

// TestRoPEMatchesGGML compares with ggml_rope_ext itself: NeoX as qwen3moe uses it, normal
// with DeepSeek's YaRN (factor 40), NeoX YaRN with partial rotation, and frequency factors
// with an offset window; positions up to 100000.
func TestRoPEMatchesGGML(t *testing.T) {
	for _, c := range loadOracle(t, "rope") {
		r := oracleStream{c.Seed}
		x := r.fill(c.Ne0*c.Heads*len(c.Pos), 1)
		var ff []float32
		if c.FreqFactors {
			ff = make([]float32, c.NDims/2)
			for i := range ff {
				ff[i] = 1 + float32(math.Abs(float64(r.uniform())))
			}
		}
		rope := ropeFromOracle(&c, ff)
		rope.Apply(x, c.Ne0, c.Pos)
		expectBits(t, c.Name, x, c.outFloats(t))
	}
}

// TestRoPEByHand checks the formulas on values worked out on paper.
func TestRoPEByHand(t *testing.T) {
	plain := RoPE{Mode: RoPENormal, Dims: 4, Base: 10000, FreqScale: 1, AttnFactor: 1}
	// Pair 0 turns by the position in radians, pair 1 by pos·10000^(-1/2) = pos/100.
	x := []float32{1, 0, 0, 1, 7}
	plain.Offset = 0
	plain.Apply(x[:4], 4, []int32{2})
	want := []float32{float32(math.Cos(2)), float32(math.Sin(2)), -float32(math.Sin(0.02)), float32(math.Cos(0.02))}
	for i := range want {
		if math.Abs(float64(x[i]-want[i])) > 1e-6 {
			t.Errorf("normal: x[%d] = %g, want %g", i, x[i], want[i])
		}
	}
	if x[4] != 7 {
		t.Error("an element past the rows changed")
	}
	// NeoX pairs element i with i+2; position 0 is the identity; a partial rotation leaves
	// the tail alone.
	neox := RoPE{Mode: RoPENeoX, Dims: 4, Base: 10000, FreqScale: 1, AttnFactor: 1}
	y := []float32{1, 2, 3, 4, 5, 6, 1, 0, 0, 0, 8, 9}
	neox.Apply(y, 6, []int32{0, 1})
	for i, v := range []float32{1, 2, 3, 4, 5, 6} {
		if y[i] != v {
			t.Errorf("position 0: y[%d] = %g, want %g", i, y[i], v)
		}
	}
	if math.Abs(float64(y[6]-float32(math.Cos(1)))) > 1e-6 || math.Abs(float64(y[8]-float32(math.Sin(1)))) > 1e-6 || y[10] != 8 || y[11] != 9 {
		t.Errorf("neox position 1: %v", y[6:])
	}
	// AttnFactor scales cos and sin; YaRN with ExtFactor 1 adds 1 + 0.1·ln(1/FreqScale).
	scaled := RoPE{Mode: RoPENormal, Dims: 2, Base: 10000, FreqScale: 1, AttnFactor: 2}
	z := []float32{1, 0}
	scaled.Apply(z, 2, []int32{0})
	if z[0] != 2 || z[1] != 0 {
		t.Errorf("attn factor 2 at position 0: %v", z)
	}
	yarn := RoPE{Mode: RoPENormal, Dims: 2, Base: 10000, FreqScale: 0.25, ExtFactor: 1, AttnFactor: 1, BetaFast: 32, BetaSlow: 1, OrigCtx: 4096}
	z = []float32{1, 0}
	yarn.Apply(z, 2, []int32{0})
	if want := 1 + 0.1*math.Log(4); math.Abs(float64(z[0])-want) > 1e-6 {
		t.Errorf("YaRN magnitude: %g, want %g", z[0], want)
	}
}

// TestYaRNCorrDims checks the correction dimensions against moe-architectures.md §4.4:
// DeepSeek's 64 rope dims, base 10000, original context 4096, β 32/1 give [10, 23].
func TestYaRNCorrDims(t *testing.T) {
	r := RoPE{Dims: 64, Base: 10000, BetaFast: 32, BetaSlow: 1, OrigCtx: 4096}
	if lo, hi := r.corrDims(); lo != 10 || hi != 23 {
		t.Errorf("corr dims [%g, %g], want [10, 23]", lo, hi)
	}
}

func TestRoPEPanicsOnBadShape(t *testing.T) {
	for name, f := range map[string]func(){
		"odd dims": func() { (&RoPE{Mode: RoPENeoX, Dims: 3, Base: 1e4}).Apply(make([]float32, 4), 4, []int32{0}) },
		"window past": func() {
			(&RoPE{Mode: RoPENeoX, Dims: 4, Offset: 2, Base: 1e4}).Apply(make([]float32, 4), 4, []int32{0})
		},
		"partial rows": func() { (&RoPE{Mode: RoPENeoX, Dims: 4, Base: 1e4}).Apply(make([]float32, 6), 4, []int32{0}) },
		"unknown mode": func() { (&RoPE{Mode: 1, Dims: 4, Base: 1e4}).Apply(make([]float32, 4), 4, []int32{0}) },
		"short factors": func() {
			(&RoPE{Dims: 4, Base: 1e4, FreqFactors: []float32{1}}).Apply(make([]float32, 4), 4, []int32{0})
		},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

// TestLibmSinCos checks sin32/cos32 on arguments where glibc's sinf/cosf (the values below,
// from glibc 2.36 on x86-64) are not the correctly rounded result, in both reduction ranges.
func TestLibmSinCos(t *testing.T) {
	for _, c := range []struct {
		f        func(float32) float32
		x, glibc float32
		name     string
	}{
		{sin32, 0x1.2d7e82p-3, 0x1.2c6808p-3, "sin"},   // below π/4: the polynomial alone
		{cos32, 0x1.489064p+4, -0x1.d597cep-4, "cos"},  // below 120: fast reduction
		{cos32, 0x1.00b0cep+11, 0x1.e5d81ep-2, "cos"},  // large: 4/π table reduction
		{sin32, -0x1.00b0cep+11, 0x1.c2b3dep-1, "sin"}, // the original sign in the quadrant
		{cos32, 0x1p-13, 1, "cos"},                     // tiny
		{sin32, 0x1p-13, 0x1p-13, "sin"},
	} {
		if got := c.f(c.x); got != c.glibc {
			t.Errorf("%s(%x) = %x, glibc %x", c.name, c.x, got, c.glibc)
		}
	}
	if v := cos32(float32(math.Inf(1))); v == v {
		t.Errorf("cos(+Inf) = %g, want NaN", v)
	}
}

// TestRoPEKernelsAgree runs the installed rotation kernels (the SIMD build's vector ones)
// and the scalar ones on windows whose pair counts leave every kind of tail, several rows
// apart: the same bits (the vector code's float32 fusion and fma32's rounding through
// float64 could part only on a float32 tie, which these values do not hit).
func TestRoPEKernelsAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, dims := range []int{2, 6, 8, 14, 16, 24, 64, 66, 128, 130} {
		for _, k := range []struct {
			name         string
			fast, scalar func(x []float32, rowLen, rows int, cos, sin []float32)
		}{{"neox", active.ropeNeoX, rotateNeoX}, {"normal", active.ropeNormal, rotateNormal}} {
			const rows, pad = 5, 6
			rowLen := dims + pad
			x := randomFloats(rng, rows*rowLen)
			cos, sin := randomFloats(rng, dims/2), randomFloats(rng, dims/2)
			want := append([]float32(nil), x...)
			k.scalar(want[pad/2:], rowLen, rows, cos, sin)
			got := append([]float32(nil), x...)
			k.fast(got[pad/2:], rowLen, rows, cos, sin)
			expectBits(t, fmt.Sprintf("%s %d dims", k.name, dims), got, want)
			for h := range rows {
				for _, i := range []int{h * rowLen, h*rowLen + 1, h*rowLen + pad/2 + dims} {
					if got[i] != x[i] {
						t.Fatalf("%s %d dims: element %d outside the window changed", k.name, dims, i)
					}
				}
			}
		}
	}
}

// TestRoPEAngles checks that rotating by a table of Angles, computed once for a batch by
// a RoPE that differs only in which elements turn, gives Apply's bits, and that
// SameAngles tells apart every parameter the angles depend on.
func TestRoPEAngles(t *testing.T) {
	base := RoPE{Mode: RoPENeoX, Dims: 64, Base: 10000, FreqScale: 0.25, ExtFactor: 1, AttnFactor: 1, BetaFast: 32, BetaSlow: 1, OrigCtx: 4096}
	pos := []int32{0, 5, 4097, 100000}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, mode := range []RoPEMode{RoPENeoX, RoPENormal} {
		for _, offset := range []int{0, 64} {
			r := base
			r.Mode, r.Offset = mode, offset
			x := randomFloats(rng, len(pos)*3*128)
			want := append([]float32(nil), x...)
			r.Apply(want, 128, pos)
			table := make([]float32, len(pos)*base.Dims)
			base.Angles(table, pos)
			if !base.SameAngles(&r) {
				t.Fatalf("mode %d offset %d: not the same angles", mode, offset)
			}
			r.ApplyAngles(x, 128, table)
			expectBits(t, fmt.Sprintf("mode %d offset %d", mode, offset), x, want)
		}
	}
	for name, change := range map[string]func(*RoPE){
		"dims":         func(r *RoPE) { r.Dims = 32 },
		"base":         func(r *RoPE) { r.Base = 20000 },
		"freq scale":   func(r *RoPE) { r.FreqScale = 0.5 },
		"ext factor":   func(r *RoPE) { r.ExtFactor = 0 },
		"attn factor":  func(r *RoPE) { r.AttnFactor = 2 },
		"beta fast":    func(r *RoPE) { r.BetaFast = 16 },
		"beta slow":    func(r *RoPE) { r.BetaSlow = 2 },
		"orig ctx":     func(r *RoPE) { r.OrigCtx = 8192 },
		"freq factors": func(r *RoPE) { r.FreqFactors = nil },
		"a freq factor": func(r *RoPE) {
			r.FreqFactors = []float32{1, 2}
		},
	} {
		a, b := base, base
		a.FreqFactors = []float32{1, 1}
		b.FreqFactors = []float32{1, 1}
		change(&b)
		if a.SameAngles(&b) || b.SameAngles(&a) {
			t.Errorf("%s: reported as the same angles", name)
		}
	}
}
