//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/backend/cpu"
	"github.com/moerun/moerun/backend/cuda/kernels"
	"github.com/moerun/moerun/tensor"
)

// The GPU tests need a GPU; without one they skip, and TestNoGPU checks what a user of a
// CUDA build on such a machine gets. MOERUN_REQUIRE_GPU=1 turns the skip into a failure,
// for runs on a GPU machine that must not pass vacuously.
func needGPU(t *testing.T) {
	t.Helper()
	if err := Available(); err != nil {
		if os.Getenv("MOERUN_REQUIRE_GPU") == "1" {
			t.Fatalf("MOERUN_REQUIRE_GPU=1 and %v", err)
		}
		t.Skipf("no GPU: %v", err)
	}
}

// TestNoGPU: without a usable driver the process lives on (cu's init did not exit it, or
// this test would not run) and every entry point says why nothing can run.
func TestNoGPU(t *testing.T) {
	err := Available()
	if err == nil {
		t.Skip("a GPU is present")
	}
	if _, derr := Devices(); derr == nil {
		t.Error("Devices succeeded without a driver")
	}
	pool := tensor.NewPool(1)
	defer pool.Close()
	if _, nerr := New(0, Options{Host: pool}); nerr == nil {
		t.Error("New succeeded without a driver")
	}
	t.Logf("as expected: %v", err)
}

func TestDevices(t *testing.T) {
	needGPU(t)
	devs, err := Devices()
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) == 0 {
		t.Fatal("the driver initialised but lists no GPU")
	}
	for i, d := range devs {
		if want := fmt.Sprintf("CUDA%d", i); d.Name != want || d.Kind != backend.KindGPU {
			t.Errorf("device %d: %+v, want name %s and kind gpu", i, d, want)
		}
		if d.TotalBytes <= 0 || d.FreeBytes <= 0 || d.FreeBytes > d.TotalBytes {
			t.Errorf("%s: free %d of total %d bytes", d.Name, d.FreeBytes, d.TotalBytes)
		}
		t.Logf("%s: %s, %d MiB free of %d MiB", d.Name, d.Description, d.FreeBytes>>20, d.TotalBytes>>20)
	}
	pool := tensor.NewPool(1)
	defer pool.Close()
	if _, err := New(len(devs), Options{Host: pool}); err == nil || !strings.Contains(err.Error(), "no such device") {
		t.Errorf("New(%d) past the last device: %v", len(devs), err)
	}
	if _, err := New(0, Options{}); err == nil || !strings.Contains(err.Error(), "no host pool") {
		t.Errorf("New without a host pool: %v", err)
	}
}

// pair is the same weight on the GPU and on the host.
type pair struct {
	gpu, cpu backend.Weight
	m        *tensor.Matrix
}

// testBackends opens CUDA0 and a CPU backend to check it against.
func testBackends(t *testing.T) (*Backend, *cpu.Backend) {
	t.Helper()
	needGPU(t)
	pool := tensor.NewPool(2)
	t.Cleanup(pool.Close)
	g, err := New(0, Options{Host: pool})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Close(); err != nil {
			t.Error(err)
		}
	})
	return g, cpu.New(cpu.Options{Pool: pool})
}

// randomWeight quantizes random values (varied scales, so every block's scale matters)
// into a cols × rows × experts tensor and loads it on both backends.
func randomWeight(t *testing.T, g *Backend, c *cpu.Backend, typ tensor.Type, cols, rows, experts int, rng *rand.Rand) pair {
	t.Helper()
	src := make([]float32, cols*rows*experts)
	for i := range src {
		src[i] = float32(rng.NormFloat64()) * float32(1+i%7)
	}
	shape := []int64{int64(cols), int64(rows), int64(experts)}
	rowBytes, err := typ.RowBytes(int64(cols))
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, rowBytes*int64(rows*experts))
	if err := tensor.Quantize(typ, src, data); err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("%s_%dx%dx%d", typ, cols, rows, experts)
	gw, err := g.Load(name, typ, shape, data)
	if err != nil {
		t.Fatal(err)
	}
	cw, err := c.Load(name, typ, shape, data)
	if err != nil {
		t.Fatal(err)
	}
	m, err := tensor.NewMatrix(typ, shape, data)
	if err != nil {
		t.Fatal(err)
	}
	return pair{gpu: gw, cpu: cw, m: m}
}

func randomVector(n int, rng *rand.Rand) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
}

// exactMatVec is the float64 reference: the dequantized row (bit-exact with ggml) dotted
// with the activations as ggml's dot product for the type sees them: rounded to F16 or
// BF16 for weights of those types, float32 for the rest.
func exactMatVec(m *tensor.Matrix, expert, row int, x []float32) float64 {
	w := make([]float32, m.Cols())
	m.Row(expert, row, w)
	var s float64
	for i, v := range w {
		xi := x[i]
		switch m.Type() {
		case tensor.F16:
			xi = tensor.F16ToF32(tensor.F32ToF16(xi))
		case tensor.BF16:
			xi = tensor.BF16ToF32(tensor.F32ToBF16(xi))
		}
		s += float64(v) * float64(xi)
	}
	return s
}

// nmse is test-backend-ops' normalized mean squared error of got against want.
func nmse(got, want []float64) float64 {
	var num, den float64
	for i := range got {
		d := got[i] - want[i]
		num += d * d
		den += want[i] * want[i]
	}
	if den == 0 {
		return num
	}
	return num / den
}

func widen(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

// matmulTol is the bound against the CPU backend (test-backend-ops' 5e-4); exactTol
// bounds the GPU against the float64 reference, which it should meet far more tightly
// since it multiplies float32 activations instead of quantizing them.
const (
	matmulTol = 5e-4
	exactTol  = 1e-9
)

// shapes returns column counts for a type: one block, several, and an odd number of them.
func shapes(typ tensor.Type) []int {
	bs := int(typ.BlockSize())
	return []int{bs, 8 * bs, 11 * bs, max(4096/bs, 1) * bs}
}

func TestMatMulConformance(t *testing.T) {
	g, c := testBackends(t)
	rng := rand.New(rand.NewPCG(7, 11))
	for _, typ := range kernels.Types() {
		for _, cols := range shapes(typ) {
			for _, rows := range []int{1, 5, 37} {
				for _, tokens := range []int{1, 3, 8, 13} {
					t.Run(fmt.Sprintf("%s/%dx%d/t%d", typ, cols, rows, tokens), func(t *testing.T) {
						p := randomWeight(t, g, c, typ, cols, rows, 1, rng)
						x := randomVector(cols*tokens, rng)
						got, want := make([]float32, rows*tokens), make([]float32, rows*tokens)
						if err := matMul(g, got, p.gpu, x); err != nil {
							t.Fatal(err)
						}
						if err := matMul(c, want, p.cpu, x); err != nil {
							t.Fatal(err)
						}
						exact := make([]float64, rows*tokens)
						for tk := range tokens {
							for r := range rows {
								exact[tk*rows+r] = exactMatVec(p.m, 0, r, x[tk*cols:(tk+1)*cols])
							}
						}
						// The CPU rounds the activations to 8 bits, an error relative
						// to |w|·|x| rather than to the result: over a handful of
						// outputs one near-zero dot product dominates the NMSE, so the
						// CPU comparison needs a few rows; the exact one holds always.
						if e := nmse(widen(got), widen(want)); e > matmulTol && len(got) >= 16 {
							t.Errorf("NMSE against the CPU backend %.3g > %g", e, matmulTol)
						}
						if e := nmse(widen(got), exact); e > exactTol {
							t.Errorf("NMSE against the float64 reference %.3g > %g", e, exactTol)
						}
					})
				}
			}
		}
	}
}

func TestMulMatIDConformance(t *testing.T) {
	g, c := testBackends(t)
	rng := rand.New(rand.NewPCG(3, 5))
	const experts, k = 6, 3
	for _, typ := range kernels.Types() {
		cols := shapes(typ)[1]
		for _, tokens := range []int{1, 4, 29} {
			for _, shared := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s/t%d/shared=%v", typ, tokens, shared), func(t *testing.T) {
					const rows = 19
					p := randomWeight(t, g, c, typ, cols, rows, experts, rng)
					ids := make([]int32, tokens*k)
					for i := range ids {
						ids[i] = int32(rng.IntN(experts+1)) - 1 // -1: an unused slot, as SER leaves
					}
					vectors := tokens
					if !shared {
						vectors = tokens * k
					}
					x := randomVector(cols*vectors, rng)
					got, want := make([]float32, len(ids)*rows), make([]float32, len(ids)*rows)
					for i := range got {
						got[i] = float32(math.NaN()) // unused slots must be overwritten with 0
					}
					if err := mulMatID(g, got, p.gpu, x, ids, k); err != nil {
						t.Fatal(err)
					}
					if err := mulMatID(c, want, p.cpu, x, ids, k); err != nil {
						t.Fatal(err)
					}
					exact := make([]float64, len(got))
					for pi, e := range ids {
						if e < 0 {
							continue
						}
						xi := pi
						if shared {
							xi = pi / k
						}
						for r := range rows {
							exact[pi*rows+r] = exactMatVec(p.m, int(e), r, x[xi*cols:(xi+1)*cols])
						}
					}
					if e := nmse(widen(got), widen(want)); !(e <= matmulTol) {
						t.Errorf("NMSE against the CPU backend %.3g > %g", e, matmulTol)
					}
					if e := nmse(widen(got), exact); !(e <= exactTol) {
						t.Errorf("NMSE against the float64 reference %.3g > %g", e, exactTol)
					}
				})
			}
		}
	}
}

func TestGetRowsConformance(t *testing.T) {
	g, c := testBackends(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, typ := range kernels.Types() {
		t.Run(typ.String(), func(t *testing.T) {
			cols := shapes(typ)[2]
			p := randomWeight(t, g, c, typ, cols, 50, 1, rng)
			ids := []int32{0, 49, 7, 7, 23}
			got, want := make([]float32, len(ids)*cols), make([]float32, len(ids)*cols)
			if err := getRows(g, got, p.gpu, ids); err != nil {
				t.Fatal(err)
			}
			if err := getRows(c, want, p.cpu, ids); err != nil {
				t.Fatal(err)
			}
			// Dequantization is a few float32 operations per value; the GPU may fuse
			// them (FMA) where Go rounds twice, so allow element-wise ops' 1e-7.
			if e := nmse(widen(got), widen(want)); e > 1e-7 {
				t.Errorf("NMSE %.3g > 1e-7", e)
			}
		})
	}
}

// TestHostFallback: a weight type without a CUDA kernel is computed by the host pool, with
// the CPU's exact results.
func TestHostFallback(t *testing.T) {
	g, c := testBackends(t)
	var typ tensor.Type
	for _, cand := range []tensor.Type{tensor.TQ2_0, tensor.TQ1_0} {
		if !kernels.Supported(cand) {
			typ = cand
			break
		}
	}
	if typ == 0 {
		t.Skip("every candidate type has a kernel")
	}
	rng := rand.New(rand.NewPCG(9, 9))
	p := randomWeight(t, g, c, typ, 256, 4, 1, rng)
	x := randomVector(256*2, rng)
	got, want := make([]float32, 8), make([]float32, 8)
	if err := matMul(g, got, p.gpu, x); err != nil {
		t.Fatal(err)
	}
	if err := matMul(c, want, p.cpu, x); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("host fallback %v, CPU %v", got, want)
	}
	if s := g.Stats(); s.HostOps != 1 {
		t.Errorf("HostOps %d, want 1", s.HostOps)
	}
}

// TestErrors: wrong operands are errors naming the tensor, as on the CPU.
func TestErrors(t *testing.T) {
	g, c := testBackends(t)
	rng := rand.New(rand.NewPCG(4, 4))
	p := randomWeight(t, g, c, tensor.Q8_0, 64, 3, 1, rng)
	if err := matMul(g, make([]float32, 3), p.gpu, make([]float32, 63)); err == nil {
		t.Error("MatMul of 63 values by 64 columns succeeded")
	}
	if err := matMul(g, make([]float32, 3), p.cpu, make([]float32, 64)); err == nil {
		t.Error("MatMul of another backend's weight succeeded")
	}
	if err := getRows(g, make([]float32, 64), p.gpu, []int32{3}); err == nil {
		t.Error("GetRows past the last row succeeded")
	}
	// Empty batches are no work, not a launch with an empty grid.
	if err := matMul(g, nil, p.gpu, nil); err != nil {
		t.Errorf("MatMul of no tokens: %v", err)
	}
	if err := getRows(g, nil, p.gpu, nil); err != nil {
		t.Errorf("GetRows of no rows: %v", err)
	}
}

func TestRouting(t *testing.T) {
	var r routing
	// 3 slots per token; expert 1 gets 10 pairs (two groups), expert 3 one, expert 0 none.
	ids := []int32{1, 3, -1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, -1, -1}
	r.group(ids, 4)
	wantSel := []int32{0, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 1}
	if !slices.Equal(r.sel, wantSel) {
		t.Errorf("sel %v, want %v", r.sel, wantSel)
	}
	if want := []int32{0, 8, 10, 11, 12}; !slices.Equal(r.groupStart, want) {
		t.Errorf("group starts %v, want %v", r.groupStart, want)
	}
	if want := []int32{1, 1, 2, 3}; !slices.Equal(r.groupExpert, want) {
		t.Errorf("group experts %v, want %v", r.groupExpert, want)
	}
	if len(r.packed) != len(r.sel)+len(r.groupStart)+len(r.groupExpert) {
		t.Errorf("packed holds %d values", len(r.packed))
	}
	sel, gs, ge := r.offsets(1000)
	if sel != 1000 || gs != 1000+4*12 || ge != 1000+4*17 {
		t.Errorf("offsets %d %d %d", sel, gs, ge)
	}
	r.group([]int32{-1, -1}, 4)
	if len(r.groupExpert) != 0 || !slices.Equal(r.groupStart, []int32{0}) {
		t.Errorf("all unused: groups %v starting %v", r.groupExpert, r.groupStart)
	}
}
