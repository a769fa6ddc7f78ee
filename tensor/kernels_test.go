package tensor

import (
	"reflect"
	"strings"
	"testing"
)

// kernelsAt is level l's kernels, or skips the test where this build or CPU has no such
// level.
func kernelsAt(t testing.TB, l Level) *kernelSet {
	t.Helper()
	for _, k := range kernelLevels {
		if k.level == l {
			return k
		}
	}
	t.Skipf("no %s kernels in this build on this CPU", l)
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

func hasLevel(l Level) bool {
	for _, k := range kernelLevels {
		if k.level == l {
			return true
		}
	}
	return false
}

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
