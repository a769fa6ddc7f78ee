package kernels

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/moerun/moerun/tensor"
)

const regenerate = "run `go generate ./backend/cuda/kernels` (needs nvcc) and commit moerun.ptx and moerun.ptx.sum"

// TestEntries checks that the PTX defines exactly the kernels Entries names.
func TestEntries(t *testing.T) {
	var got []string
	for _, m := range regexp.MustCompile(`(?m)^\.visible \.entry (\w+)\(`).FindAllStringSubmatch(PTX, -1) {
		got = append(got, m[1])
	}
	want := Entries()
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("PTX entries %v, want %v; %s", got, want, regenerate)
	}
}

// TestNames pins the entry names package cuda launches: the ABI between the two.
func TestNames(t *testing.T) {
	for typ, want := range map[tensor.Type][3]string{
		tensor.Q4_K:   {"mmv_q4_K", "mmq_q4_K", "getrows_q4_K"},
		tensor.IQ4_XS: {"mmv_iq4_xs", "mmq_iq4_xs", "getrows_iq4_xs"},
		tensor.BF16:   {"mmv_bf16", "mmq_bf16", "getrows_bf16"},
	} {
		if got := [3]string{MatVec(typ), MatMulTiled(typ), GetRows(typ)}; got != want {
			t.Errorf("%v: names %v, want %v", typ, got, want)
		}
	}
	if Supported(tensor.IQ2_XXS) || !Supported(tensor.MXFP4) {
		t.Errorf("Supported(iq2_xxs) = %v, Supported(mxfp4) = %v", Supported(tensor.IQ2_XXS), Supported(tensor.MXFP4))
	}
}

// TestTarget checks that the PTX is the portable compute_70 module gen.sh builds.
func TestTarget(t *testing.T) {
	for _, line := range []string{".target sm_70", ".address_size 64"} {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(line) + `$`).MatchString(PTX) {
			t.Errorf("PTX lacks %q; %s", line, regenerate)
		}
	}
}

// TestUpToDate checks that moerun.ptx.sum records the current sources: every .cu and .cuh
// file here and gen.sh, with their SHA-256.
func TestUpToDate(t *testing.T) {
	f, err := os.Open("moerun.ptx.sum")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recorded := map[string]string{}
	for sc := bufio.NewScanner(f); sc.Scan(); {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Fatalf("moerun.ptx.sum: malformed line %q", sc.Text())
		}
		recorded[name] = sum
	}
	sources := []string{"gen.sh"}
	for _, pattern := range []string{"*.cu", "*.cuh"} {
		matches, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		sources = append(sources, matches...)
	}
	for _, name := range sources {
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		if got := hex.EncodeToString(sum[:]); recorded[name] != got {
			t.Errorf("%s changed since moerun.ptx was generated; %s", name, regenerate)
		}
		delete(recorded, name)
	}
	for name := range recorded {
		t.Errorf("moerun.ptx.sum lists %s, which is gone; %s", name, regenerate)
	}
}
