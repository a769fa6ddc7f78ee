package tensor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// kernelsAt is level l's kernels, or skips the test where this build or CPU has no such
// level.
func kernelsAt(t testing.TB, l Level) *kernelSet {
	t.Helper()
	k := levelOf(l)
	if k == nil {
		t.Skipf("no %s kernels in this build on this CPU", l)
	}
	return k
}

// levelOf is level l's kernels, or nil where this build or CPU has no such level.
func levelOf(l Level) *kernelSet {
	for _, k := range kernelLevels {
		if k.level == l {
			return k
		}
	}
	return nil
}

func TestParseLevel(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Level
	}{{"generic", LevelGeneric}, {"avx2", LevelAVX2}, {"AVX512", LevelAVX512}, {" avx2 ", LevelAVX2}} {
		got, err := ParseLevel(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseLevel(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if tc.want.String() != strings.ToLower(strings.TrimSpace(tc.in)) {
			t.Errorf("%v.String() = %q", tc.want, tc.want.String())
		}
	}
	for _, bad := range []string{"", "avx", "sse4", "avx512vnni", "native"} {
		if _, err := ParseLevel(bad); err == nil || !strings.Contains(err.Error(), "generic, avx2, avx512") {
			t.Errorf("ParseLevel(%q): error %v, want one naming the levels", bad, err)
		}
	}
	if _, err := parseISAEnv("avx3"); err == nil || !strings.Contains(err.Error(), ISAEnv) {
		t.Errorf("parseISAEnv(avx3): %v, want an error naming %s", err, ISAEnv)
	}
	if l, err := parseISAEnv(""); err != nil || l != LevelAVX512 {
		t.Errorf("parseISAEnv(empty) = %v, %v: want no cap", l, err)
	}
}

// TestSelectLevel: a cap picks the best level at or below it, never one the CPU lacks,
// and the generic level is always there.
func TestSelectLevel(t *testing.T) {
	if kernelLevels[0] != &genericKernels {
		t.Fatal("the generic level is not the first")
	}
	for i := 1; i < len(kernelLevels); i++ {
		if kernelLevels[i].level <= kernelLevels[i-1].level {
			t.Fatalf("levels out of order: %v", Levels())
		}
	}
	best := kernelLevels[len(kernelLevels)-1].level
	for l := LevelGeneric; l <= LevelAVX512; l++ {
		got := selectLevel(l).level
		if got > l || got > best || (l <= best && !hasLevel(l) && got == l) {
			t.Errorf("selectLevel(%v) = %v with levels %v", l, got, Levels())
		}
		if hasLevel(l) && got != l {
			t.Errorf("selectLevel(%v) = %v, the CPU has it", l, got)
		}
	}
	if active != selectLevel(isaCap) {
		t.Errorf("active level %v, want %v under %s=%q", active.level, selectLevel(isaCap).level, ISAEnv, isaCap)
	}
}

func hasLevel(l Level) bool { return levelOf(l) != nil }

// TestLevelsKeepGeneric: building a level leaves the one below untouched (each has its own
// tables), and every level covers every registered type.
func TestLevelsKeepGeneric(t *testing.T) {
	for _, k := range kernelLevels {
		for typ, tr := range traits {
			ktr := k.traits[typ]
			if ktr == nil {
				t.Errorf("%s: no %s traits", k.level, typ)
				continue
			}
			if k != &genericKernels && ktr == tr {
				t.Errorf("%s shares %s's Traits with the generic level", k.level, typ)
			}
			if (ktr.VecDot == nil) != (tr.VecDot == nil) || ktr.VecDotType != tr.VecDotType {
				t.Errorf("%s: %s's VecDot or VecDotType differs in kind from the generic one", k.level, typ)
			}
		}
	}
	for typ, tr := range traits {
		if tr.VecDot != nil && reflect.ValueOf(tr.VecDot).Pointer() != reflect.ValueOf(genericKernels.traits[typ].VecDot).Pointer() {
			t.Errorf("%s: the generic level's VecDot was replaced", typ)
		}
	}
	if len(genericKernels.dotRowsOne)+len(genericKernels.dotTokens2)+len(genericKernels.packedFormats)+len(genericKernels.repackedKernels) != 0 {
		t.Error("a SIMD level wrote into the generic level's tables")
	}
}

// TestKernelLevelNamed: KernelLevel names the active level first.
func TestKernelLevelNamed(t *testing.T) {
	if got := KernelLevel(); !strings.HasPrefix(got, active.level.String()) {
		t.Errorf("KernelLevel() = %q, active level %v", got, active.level)
	}
}

// llamaRepacks is what llama.cpp's CPU backend repacks at a level (ggml-cpu/repack.cpp,
// ggml_repack_get_optimal_repack_type, for x86 at the fixtures' commit): matrices of these
// types with a multiple of 8 rows run in the repacked kernels' arithmetic there.
func llamaRepacks(l Level) []Type {
	switch l {
	case LevelAVX2:
		return []Type{Q4_0, Q4_K, IQ4_NL, MXFP4}
	case LevelAVX512:
		return []Type{Q4_0, Q4_K, IQ4_NL, MXFP4, Q2_K}
	}
	return nil
}

// TestRepackedWhereLlamaRepacks holds every level to llama.cpp built for it: a one-token
// product of each type llama.cpp repacks there (16 rows, so repacked) must have the bits of
// the repacked arithmetic (gemv's), and of each other type VecDot's. An AVX2 level that
// ran Q4_0 in ggml_vec_dot's arithmetic, as llama.cpp's AVX2 build never does, flipped a
// router decision of the synth-glm4moe fixture.
func TestRepackedWhereLlamaRepacks(t *testing.T) {
	gemv := map[Type]func(n int, w, a []byte) float32{
		Q4_0:   func(n int, w, a []byte) float32 { return blockwiseDot(Q4_0, n, w, a) },
		IQ4_NL: func(n int, w, a []byte) float32 { return blockwiseDot(IQ4_NL, n, w, a) },
		MXFP4:  func(n int, w, a []byte) float32 { return blockwiseDot(MXFP4, n, w, a) },
		Q4_K:   func(n int, w, a []byte) float32 { return repackedQ4KDot(n, w, a, qkK) },
		Q2_K:   func(n int, w, a []byte) float32 { return repackedQ2KDot(n, w, a, qkK) },
	}
	const rows, n = 16, 512
	rng := rand.New(rand.NewPCG(41, 43))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	defer func(k *kernelSet) { active = k }(active)
	for _, k := range kernelLevels {
		active = k
		repacks := llamaRepacks(k.level)
		for typ := range gemv {
			t.Run(fmt.Sprintf("%s/%s", k.level, typ), func(t *testing.T) {
				repacked := slices.Contains(repacks, typ)
				if repacked && typ == Q2_K && !slices.Contains(k.features, "VNNI") {
					t.Skip("no Q2_K kernels in llama.cpp's repacked arithmetic without AVX-512 VNNI")
				}
				data := randomRows(t, typ, rows, n, 1, rng)
				m, err := NewMatrix(typ, []int64{n, rows}, data)
				if err != nil {
					t.Fatal(err)
				}
				p := NewPool(2)
				defer p.Close()
				dst := make([]float32, rows)
				if err := p.MatMul(dst, m, x); err != nil {
					t.Fatal(err)
				}
				vt := k.traits[typ].VecDotType
				rb, _ := vt.RowBytes(n)
				act := make([]byte, rb)
				if err := QuantizeActivations(vt, x, act); err != nil {
					t.Fatal(err)
				}
				want, arithmetic := k.traits[typ].VecDot, "VecDot's"
				if repacked {
					want, arithmetic = gemv[typ], "the repacked"
				}
				for r := range rows {
					w := data[r*m.rowBytes : (r+1)*m.rowBytes]
					if got, exp := dst[r], want(n, w, act); math.Float32bits(got) != math.Float32bits(exp) {
						t.Fatalf("row %d: %v, %s arithmetic gives %v", r, got, arithmetic, exp)
					}
				}
			})
		}
	}
}
