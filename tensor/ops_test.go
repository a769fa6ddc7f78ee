package tensor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func near(got, want []float32, tol float64) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if d := math.Abs(float64(got[i] - want[i])); d > tol*math.Max(1, math.Abs(float64(want[i]))) {
			return false
		}
	}
	return true
}

// Hand-computed cases for every op; TestOpsMatchGGML checks the bits against ggml.
func TestOpsByHand(t *testing.T) {
	inf := float32(math.Inf(1))
	for _, c := range []struct {
		name string
		run  func() []float32
		want []float32
	}{
		// Rows (3, 4) and (1, 1): mean squares 12.5 and 1.
		{"RMSNorm", func() []float32 {
			y := make([]float32, 4)
			RMSNorm(y, []float32{3, 4, 1, 1}, 2, 0)
			return y
		}, []float32{3 / 3.5355339, 4 / 3.5355339, 1, 1}},
		// softmax(0, ln 3) = (1/4, 3/4); scale 2 gives (0, ln 9) → (1/10, 9/10); a -Inf mask
		// entry gets no weight, and one mask row applies to every row.
		{"Softmax", func() []float32 {
			y := make([]float32, 6)
			ln3 := float32(math.Log(3))
			Softmax(y[:2], []float32{0, ln3}, 2, 1, nil)
			Softmax(y[2:], []float32{0, ln3, 5, 7}, 2, 2, []float32{0, 0})
			y[4], y[5] = 0, 0
			Softmax(y[4:], []float32{0, ln3}, 2, 1, []float32{0, -inf})
			return y
		}, []float32{0.25, 0.75, 0.1, 0.9, 1, 0}},
		// x·σ(x): σ(1) = 0.7310586, σ(0) = 1/2, and far out x or 0.
		{"SiLU", func() []float32 {
			y := make([]float32, 4)
			SiLU(y, []float32{1, 0, 100, -100}, 4)
			return y
		}, []float32{0.7310586, 0, 100, 0}},
		{"SwiGLU", func() []float32 {
			y := make([]float32, 2)
			SwiGLU(y, []float32{1, -1}, []float32{2, 3}, 2)
			return y
		}, []float32{2 * 0.7310586, 3 * -0.26894142}},
		// gpt-oss: gate 10 is clipped to 7, up -8 to -7: 7·σ(1.702·7)·(−7+1); gate 0 gives 0.
		{"SwiGLUOAI", func() []float32 {
			y := make([]float32, 2)
			SwiGLUOAI(y, []float32{10, 0}, []float32{-8, 5}, 1.702, 7)
			return y
		}, []float32{float32(7 / (1 + math.Exp(-1.702*7)) * -6), 0}},
		{"Sigmoid", func() []float32 {
			y := make([]float32, 3)
			Sigmoid(y, []float32{0, float32(math.Log(3)), -inf})
			return y
		}, []float32{0.5, 0.75, 0}},
		{"Add broadcast", func() []float32 {
			y := make([]float32, 4)
			Add(y, []float32{1, 2, 3, 4}, []float32{10, 20})
			return y
		}, []float32{11, 22, 13, 24}},
		{"Mul broadcast", func() []float32 {
			y := make([]float32, 4)
			Mul(y, []float32{1, 2, 3, 4}, []float32{10, -1})
			return y
		}, []float32{10, -2, 30, -4}},
		{"Scale in place", func() []float32 {
			y := []float32{1, -2, 0.5}
			Scale(y, y, 4)
			return y
		}, []float32{4, -8, 2}},
	} {
		if got := c.run(); !near(got, c.want, 1e-6) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestGetRows(t *testing.T) {
	data := make([]byte, 3*2*2)
	if err := Quantize(F16, []float32{1, 2, 3, 4, 5, 6}, data); err != nil {
		t.Fatal(err)
	}
	w, err := NewMatrix(F16, []int64{2, 3}, data)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]float32, 6)
	if err := GetRows(got, w, []int32{2, 0, 2}); err != nil || fmt.Sprint(got) != "[5 6 1 2 5 6]" {
		t.Errorf("rows 2, 0, 2: %v, %v", got, err)
	}
	for _, c := range []struct {
		ids  []int32
		dst  int
		want string
	}{
		{[]int32{3}, 2, "id 3 (position 0) outside [0, 3)"},
		{[]int32{0, -1}, 4, "id -1 (position 1)"},
		{[]int32{0}, 3, "need 2 outputs"},
	} {
		if err := GetRows(make([]float32, c.dst), w, c.ids); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ids %v: %v, want an error containing %q", c.ids, err, c.want)
		}
	}
}

// TestArgsortTies spells out the tie order: up to 16 values, equal values keep the order of
// their indices (libstdc++'s insertion sort is stable); -Inf sorts last; NaNs give some
// order without reading out of bounds. Longer inputs are checked against ggml in
// TestArgsortMatchesGGML.
func TestArgsortTies(t *testing.T) {
	inf := float32(math.Inf(1))
	idx := make([]int32, 6)
	ArgsortDesc(idx, []float32{1, 3, 3, -inf, 2, 3})
	if fmt.Sprint(idx) != "[1 2 5 4 0 3]" {
		t.Errorf("ties: %v", idx)
	}
	nan := float32(math.NaN())
	for _, n := range []int{5, 40, 300} {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(i % 7)
			if i%3 == 0 {
				x[i] = nan
			}
		}
		idx := make([]int32, n)
		ArgsortDesc(idx, x)
		seen := make([]bool, n)
		for _, i := range idx {
			if seen[i] {
				t.Fatalf("%d values with NaNs: index %d twice", n, i)
			}
			seen[i] = true
		}
	}
}

func TestOpsPanicOnBadShapes(t *testing.T) {
	for name, f := range map[string]func(){
		"RMSNorm rows":    func() { RMSNorm(make([]float32, 5), make([]float32, 5), 2, 0) },
		"Softmax mask":    func() { Softmax(make([]float32, 4), make([]float32, 4), 2, 1, make([]float32, 3)) },
		"SwiGLU lengths":  func() { SwiGLU(make([]float32, 4), make([]float32, 4), make([]float32, 2), 2) },
		"Add broadcast":   func() { Add(make([]float32, 4), make([]float32, 4), make([]float32, 3)) },
		"Argsort lengths": func() { ArgsortDesc(make([]int32, 2), make([]float32, 3)) },
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "tensor.") {
					t.Errorf("%s: recovered %v, want a panic naming the op", name, r)
				}
			}()
			f()
		}()
	}
}

// FuzzArgsortDesc: any input, NaNs and infinities included, gives a permutation; without
// NaNs it is sorted by descending value.
func FuzzArgsortDesc(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 0, 0, 128, 127})
	f.Add(make([]byte, 4*40))
	f.Fuzz(func(t *testing.T, raw []byte) {
		x := make([]float32, len(raw)/4)
		hasNaN := false
		for i := range x {
			x[i] = math.Float32frombits(uint32(raw[4*i]) | uint32(raw[4*i+1])<<8 | uint32(raw[4*i+2])<<16 | uint32(raw[4*i+3])<<24)
			hasNaN = hasNaN || x[i] != x[i]
		}
		idx := make([]int32, len(x))
		ArgsortDesc(idx, x)
		seen := make([]bool, len(x))
		for i, j := range idx {
			if seen[j] {
				t.Fatalf("index %d twice", j)
			}
			seen[j] = true
			if !hasNaN && i > 0 && x[idx[i-1]] < x[j] {
				t.Fatalf("position %d: %g after %g", i, x[j], x[idx[i-1]])
			}
		}
	})
}

// TestVSiLURun holds the installed run of ggml_v_silu lanes (a vector kernel in the SIMD
// build) to vsilu32 lane by lane, over magnitudes that reach its scalar finish (|x| > 87),
// infinities and NaN, and run lengths around its step of eight.
func TestVSiLURun(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, n := range []int{0, 3, 8, 16, 21, 64} {
		for range 100 {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(rng.NormFloat64() * math.Exp(rng.Float64()*6-2)) // |x| up to ~1e3
				if rng.IntN(64) == 0 {
					x[i] = []float32{float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 0}[rng.IntN(4)]
				}
			}
			got := make([]float32, n)
			active.vsiluRun(got, x)
			for i, v := range x {
				if want := vsilu32(v); math.Float32bits(got[i]) != math.Float32bits(want) && !(got[i] != got[i] && want != want) {
					t.Fatalf("n=%d x=%g: %g (%#08x), want %g (%#08x)", n, v, got[i], math.Float32bits(got[i]), want, math.Float32bits(want))
				}
			}
		}
	}
}

// TestRMSNormRowsAlike checks that the four-row path of RMSNorm gives each row the bits it
// gets normalized alone (the path the ggml fixtures check, with at most three rows).
func TestRMSNormRowsAlike(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, cols := range []int{1, 7, 128, 2048} {
		x := randomFloats(rng, 9*cols)
		for i := range x[:cols] {
			x[i] *= 1e-20 // a row of tiny values, where eps dominates
		}
		got := make([]float32, len(x))
		RMSNorm(got, x, cols, 1e-6)
		for r := range 9 {
			want := make([]float32, cols)
			RMSNorm(want, x[r*cols:(r+1)*cols], cols, 1e-6)
			expectBits(t, fmt.Sprintf("cols %d row %d", cols, r), got[r*cols:(r+1)*cols], want)
		}
	}
}

// TestElementwiseKernels checks Add, Mul (with b repeated over rows) and AddScaled on
// lengths around the vector width against the operations written out per element.
func TestElementwiseKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, n := range []int{1, 7, 8, 9, 16, 31, 2048} {
		a, b := randomFloats(rng, 3*n), randomFloats(rng, n)
		sum, prod := make([]float32, 3*n), make([]float32, 3*n)
		Add(sum, a, b)
		Mul(prod, a, b)
		acc := append([]float32(nil), a[:n]...)
		AddScaled(acc, b, 0.37)
		wantSum, wantProd, wantAcc := make([]float32, 3*n), make([]float32, 3*n), make([]float32, n)
		for i := range a {
			wantSum[i], wantProd[i] = a[i]+b[i%n], a[i]*b[i%n]
		}
		for i := range n {
			wantAcc[i] = a[i] + float32(b[i]*0.37)
		}
		expectBits(t, fmt.Sprintf("Add %d", n), sum, wantSum)
		expectBits(t, fmt.Sprintf("Mul %d", n), prod, wantProd)
		expectBits(t, fmt.Sprintf("AddScaled %d", n), acc, wantAcc)
	}
}

// TestFMA32RoundsOnce checks fma32 where the float64 sum lands exactly halfway between
// two float32 values: a·b = -2^-24 + 2^-60 and c = 1 + 2^-23 make the exact sum
// 1 + 2^-24 + 2^-60, just above the midpoint of 1 and 1 + 2^-23; rounded to float64 first
// it is the midpoint itself, which float32 rounds to even (1).
func TestFMA32RoundsOnce(t *testing.T) {
	for _, sign := range []float32{1, -1} {
		a := float32(1 - math.Ldexp(1, -18))
		b := sign * float32(-(1+math.Ldexp(1, -18))*math.Ldexp(1, -24))
		c := sign * float32(1+math.Ldexp(1, -23))
		if twice := float32(math.FMA(float64(a), float64(b), float64(c))); twice != sign {
			t.Fatalf("the case does not round differently twice: %v", twice)
		}
		if got := fma32(a, b, c); got != c {
			t.Errorf("fma32(%v, %v, %v) = %v, want %v", a, b, c, got, c)
		}
	}
}
