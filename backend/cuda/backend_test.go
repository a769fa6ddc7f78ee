//go:build cuda

package cuda

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/backend/cpu"
	"github.com/moerun/moerun/backend/cuda/kernels"
	"github.com/moerun/moerun/tensor"
	"gorgonia.org/cu"
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
	if _, err := New(len(devs), Options{Host: pool}); err == nil {
		t.Errorf("New(%d) succeeded past the last device", len(devs))
	}
}

// TestNeedsHost: the host pool is required, with or without a GPU (New checks it first).
func TestNeedsHost(t *testing.T) {
	_, err := New(0, Options{})
	if err == nil || !strings.Contains(err.Error(), "Options.Host") {
		t.Errorf("New without a host pool: %v, want an error naming Options.Host", err)
	}
}

// pair is the same weight on the GPU and on the host.
type pair struct {
	gpu, cpu backend.Weight
	m        *tensor.Matrix
	data     []byte // the weight's bytes in host memory
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
	return pair{gpu: gw, cpu: cw, m: m, data: data}
}

func randomVector(n int, rng *rand.Rand) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
}

// newTensor allocates a rows×cols tensor of type typ on b holding data (raw elements, as
// many as the tensor has).
func newTensor[T float32 | int32](t *testing.T, b backend.Backend, typ tensor.Type, cols, rows int, data []T) backend.Tensor {
	t.Helper()
	if len(data) != cols*rows {
		t.Fatalf("%d values for a %d×%d tensor", len(data), rows, cols)
	}
	buf, err := b.Alloc(int64(4 * cols * rows))
	if err != nil {
		t.Fatal(err)
	}
	x, err := backend.NewTensor(buf, 0, typ, cols, rows)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Set(x, asBytes(data)); err != nil {
		t.Fatal(err)
	}
	return x
}

// f32s is an F32 tensor on b with rows of cols values (len(data)/cols rows).
func f32s(t *testing.T, b backend.Backend, cols int, data []float32) backend.Tensor {
	t.Helper()
	return newTensor(t, b, tensor.F32, cols, len(data)/cols, data)
}

// i32s is an I32 tensor on b with rows of cols ids (len(ids)/cols rows).
func i32s(t *testing.T, b backend.Backend, cols int, ids []int32) backend.Tensor {
	t.Helper()
	return newTensor(t, b, tensor.I32, cols, len(ids)/cols, ids)
}

// values reads an F32 tensor of b back.
func values(t *testing.T, b backend.Backend, x backend.Tensor) []float32 {
	t.Helper()
	out := make([]float32, x.Elements())
	if err := b.Get(asBytes(out), x); err != nil {
		t.Fatal(err)
	}
	if err := b.Synchronize(); err != nil {
		t.Fatal(err)
	}
	return out
}

func asBytes[T float32 | int32](v []T) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))
}

// exactMatVec is the float64 reference: the dequantized row (bit-exact with ggml) dotted
// with the activations as ggml's dot product for the type sees them (seenActivations).
func exactMatVec(t *testing.T, m *tensor.Matrix, expert, row int, x []float32) float64 {
	w := make([]float32, m.Cols())
	m.Row(expert, row, w)
	var s float64
	for i, xi := range seenActivations(t, m.Type(), x) {
		s += float64(w[i]) * float64(xi)
	}
	return s
}

// seenActivations are the activations x as a dot product with weights of type typ sees
// them: converted to the type's VecDotType and back, as the CPU matmul converts them —
// rounded to F16 or BF16 for weights of those types, quantized to 8 bits (Q8_0, Q8_1 or
// Q8_K) for the quantized ones, float32 for F32.
func seenActivations(t *testing.T, typ tensor.Type, x []float32) []float32 {
	t.Helper()
	tr, err := tensor.TraitsOf(typ)
	if err != nil {
		t.Fatal(err)
	}
	rowBytes, err := tr.VecDotType.RowBytes(int64(len(x)))
	if err != nil {
		t.Fatal(err)
	}
	converted, seen := make([]byte, rowBytes), make([]float32, len(x))
	if err := tensor.QuantizeActivations(tr.VecDotType, x, converted); err != nil {
		t.Fatal(err)
	}
	if err := tensor.Dequantize(tr.VecDotType, converted, seen); err != nil {
		t.Fatal(err)
	}
	return seen
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

// The products' bounds, on the NMSE. matmulTol is test-backend-ops' bound against the CPU
// backend, for what may legitimately differ more: MatMulStack of float weights. cpuTol is
// the bound against the CPU backend otherwise: the GPU sees the activations as the CPU
// quantizes them (seenActivations), so the two differ only by float32 rounding (the CPU
// multiplies integer quants per block, the GPU their float values) — a GPU multiplying
// the exact activations instead is about 3e-5 away, which is what took the golden models
// off llama.cpp's path. exactTol bounds the GPU against the float64 reference.
//
// Q4_1 and Q5_1 activations (Q8_1) keep one more CPU rounding the GPU does not make: their
// blocks' sums s = d·Σq, which the min term multiplies, are stored as F16, where the GPU
// sums the values q·d themselves (an error of up to 2^-11 of the min term); cpuQ8_1Tol
// allows that.
const (
	matmulTol  = 5e-4
	cpuTol     = 1e-9
	cpuQ8_1Tol = 1e-5
	exactTol   = 1e-9
)

// cpuBound is the bound against the CPU backend for weights of type typ.
func cpuBound(t *testing.T, typ tensor.Type) float64 {
	tr, err := tensor.TraitsOf(typ)
	if err != nil {
		t.Fatal(err)
	}
	if tr.VecDotType == tensor.Q8_1 {
		return cpuQ8_1Tol
	}
	return cpuTol
}

// shapes returns column counts for a type: one block, several, and an odd number of them.
func shapes(typ tensor.Type) []int {
	bs := int(typ.BlockSize())
	return []int{bs, 8 * bs, 11 * bs, max(4096/bs, 1) * bs}
}

func TestMatMulConformance(t *testing.T) {
	g, c := testBackends(t)
	// The batches for the tiled kernel draw from a stream of their own, so that the
	// others' data stay what they were before those were added.
	rng, tiledRng := rand.New(rand.NewPCG(7, 11)), rand.New(rand.NewPCG(17, 19))
	for _, typ := range kernels.Types() {
		for _, cols := range shapes(typ) {
			for _, rows := range []int{1, 5, 37} {
				// 40 tokens: the tiled kernel (tiledMinTokens), a full pass and a part one.
				for _, tokens := range []int{1, 3, 8, 13, 40} {
					t.Run(fmt.Sprintf("%s/%dx%d/t%d", typ, cols, rows, tokens), func(t *testing.T) {
						rng := rng
						if tokens >= tiledMinTokens {
							rng = tiledRng
						}
						p := randomWeight(t, g, c, typ, cols, rows, 1, rng)
						x := randomVector(cols*tokens, rng)
						gd, cd := f32s(t, g, rows, make([]float32, rows*tokens)), f32s(t, c, rows, make([]float32, rows*tokens))
						if err := g.MatMul(gd, p.gpu, f32s(t, g, cols, x)); err != nil {
							t.Fatal(err)
						}
						if err := c.MatMul(cd, p.cpu, f32s(t, c, cols, x)); err != nil {
							t.Fatal(err)
						}
						got, want := values(t, g, gd), values(t, c, cd)
						exact := make([]float64, rows*tokens)
						for tk := range tokens {
							for r := range rows {
								exact[tk*rows+r] = exactMatVec(t, p.m, 0, r, x[tk*cols:(tk+1)*cols])
							}
						}
						if e, bound := nmse(widen(got), widen(want)), cpuBound(t, typ); e > bound {
							t.Errorf("NMSE against the CPU backend %.3g > %g", e, bound)
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
	rng, tiledRng := rand.New(rand.NewPCG(3, 5)), rand.New(rand.NewPCG(23, 29)) // as in TestMatMulConformance
	const experts, k = 6, 3
	for _, typ := range kernels.Types() {
		cols := shapes(typ)[1]
		// 70 tokens: 210 pairs, past tiledMinPairsPerExpert·experts, so the tiled kernel,
		// an expert's pairs in groups of a full pass and a part one.
		for _, tokens := range []int{1, 4, 29, 70} {
			for _, shared := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s/t%d/shared=%v", typ, tokens, shared), func(t *testing.T) {
					const rows = 19
					rng := rng
					if tokens*k >= tiledMinPairsPerExpert*experts {
						rng = tiledRng
					}
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
					nan := make([]float32, len(ids)*rows)
					for i := range nan {
						nan[i] = float32(math.NaN()) // unused slots must be overwritten with 0
					}
					gd, cd := f32s(t, g, rows, nan), f32s(t, c, rows, make([]float32, len(ids)*rows))
					if err := g.MulMatID(gd, p.gpu, f32s(t, g, cols, x), i32s(t, g, k, ids), k); err != nil {
						t.Fatal(err)
					}
					if err := c.MulMatID(cd, p.cpu, f32s(t, c, cols, x), i32s(t, c, k, ids), k); err != nil {
						t.Fatal(err)
					}
					got, want := values(t, g, gd), values(t, c, cd)
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
							exact[pi*rows+r] = exactMatVec(t, p.m, int(e), r, x[xi*cols:(xi+1)*cols])
						}
					}
					if e, bound := nmse(widen(got), widen(want)), cpuBound(t, typ); !(e <= bound) {
						t.Errorf("NMSE against the CPU backend %.3g > %g", e, bound)
					}
					if e := nmse(widen(got), exact); !(e <= exactTol) {
						t.Errorf("NMSE against the float64 reference %.3g > %g", e, exactTol)
					}
				})
			}
		}
	}
}

// TestStage: a stack of experts staged for op offload with only some experts' bytes copied
// computes, for ids that select only those, what the stack loaded whole computes, and the
// bytes copied are those experts'.
func TestStage(t *testing.T) {
	g, _ := testBackends(t)
	c := cpu.New(cpu.Options{Pool: g.host.Pool()})
	rng := rand.New(rand.NewPCG(5, 9))
	const experts, k, rows, tokens = 6, 2, 19, 33
	for _, typ := range []tensor.Type{tensor.Q8_0, tensor.Q4_K} {
		t.Run(typ.String(), func(t *testing.T) {
			cols := shapes(typ)[1]
			p := randomWeight(t, g, c, typ, cols, rows, experts, rng)
			used := []int32{1, 2, 4}
			ids := make([]int32, tokens*k)
			for i := range ids {
				ids[i] = used[rng.IntN(len(used))]
			}
			expertBytes := int64(len(p.data) / experts)
			spans := [][2]int64{{expertBytes, 3 * expertBytes}, {4 * expertBytes, 5 * expertBytes}}
			buf, err := g.Alloc(256 + int64(len(p.data)))
			if err != nil {
				t.Fatal(err)
			}
			before := g.Stats().StagedBytes
			staged, err := g.Stage(buf, 256, "staged", typ, []int64{int64(cols), rows, experts}, p.data, spans)
			if err != nil {
				t.Fatal(err)
			}
			if got := g.Stats().StagedBytes - before; got != 3*expertBytes {
				t.Errorf("staged %d bytes, the used experts hold %d", got, 3*expertBytes)
			}
			x := randomVector(cols*tokens, rng)
			sd, wd := f32s(t, g, rows, make([]float32, len(ids)*rows)), f32s(t, g, rows, make([]float32, len(ids)*rows))
			if err := g.MulMatID(sd, staged, f32s(t, g, cols, x), i32s(t, g, k, ids), k); err != nil {
				t.Fatal(err)
			}
			if err := g.MulMatID(wd, p.gpu, f32s(t, g, cols, x), i32s(t, g, k, ids), k); err != nil {
				t.Fatal(err)
			}
			if got, want := values(t, g, sd), values(t, g, wd); !slices.Equal(got, want) {
				t.Errorf("the staged stack computes %v…, the loaded one %v…", got[:4], want[:4])
			}
		})
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
			gd, cd := f32s(t, g, cols, make([]float32, len(ids)*cols)), f32s(t, c, cols, make([]float32, len(ids)*cols))
			if err := g.GetRows(gd, p.gpu, ids); err != nil {
				t.Fatal(err)
			}
			if err := c.GetRows(cd, p.cpu, ids); err != nil {
				t.Fatal(err)
			}
			got, want := values(t, g, gd), values(t, c, cd)
			// Dequantization is a few float32 operations per value; the GPU may fuse
			// them (FMA) where Go rounds twice, so allow element-wise ops' 1e-7.
			if e := nmse(widen(got), widen(want)); e > 1e-7 {
				t.Errorf("NMSE %.3g > 1e-7", e)
			}
		})
	}
}

// TestMatMulStack: the GPU's MatMulStack is its MulMatID with row i of x on matrix
// i mod Experts (the same launch, bit for bit), within the matmul tolerance of the CPU's
// MatMulStack and within the exact tolerance of the float64 reference.
func TestMatMulStack(t *testing.T) {
	g, c := testBackends(t)
	rng := rand.New(rand.NewPCG(6, 6))
	const experts, tokens, rows = 4, 3, 17
	for _, typ := range kernels.Types() {
		t.Run(typ.String(), func(t *testing.T) {
			cols := shapes(typ)[1]
			p := randomWeight(t, g, c, typ, cols, rows, experts, rng)
			x := randomVector(cols*tokens*experts, rng)
			ids := make([]int32, tokens*experts)
			for i := range ids {
				ids[i] = int32(i % experts)
			}
			n := len(ids) * rows
			stack, viaID, cpuStack := f32s(t, g, rows, make([]float32, n)), f32s(t, g, rows, make([]float32, n)), f32s(t, c, rows, make([]float32, n))
			if err := g.MatMulStack(stack, p.gpu, f32s(t, g, cols, x)); err != nil {
				t.Fatal(err)
			}
			if err := g.MulMatID(viaID, p.gpu, f32s(t, g, cols, x), i32s(t, g, experts, ids), experts); err != nil {
				t.Fatal(err)
			}
			if err := c.MatMulStack(cpuStack, p.cpu, f32s(t, c, cols, x)); err != nil {
				t.Fatal(err)
			}
			got := values(t, g, stack)
			if via := values(t, g, viaID); !slices.Equal(got, via) {
				t.Errorf("MatMulStack %v, MulMatID %v", got[:4], via[:4])
			}
			exact := make([]float64, n)
			for i := range ids {
				for r := range rows {
					exact[i*rows+r] = exactMatVec(t, p.m, i%experts, r, x[i*cols:(i+1)*cols])
				}
			}
			if e := nmse(widen(got), widen(values(t, c, cpuStack))); !(e <= matmulTol) {
				t.Errorf("NMSE against the CPU backend %.3g > %g", e, matmulTol)
			}
			if e := nmse(widen(got), exact); !(e <= exactTol) {
				t.Errorf("NMSE against the float64 reference %.3g > %g", e, exactTol)
			}
			// Rows that are not whole groups of the stack's matrices are an error.
			if err := g.MatMulStack(f32s(t, g, rows, make([]float32, 5*rows)), p.gpu, f32s(t, g, cols, x[:5*cols])); err == nil {
				t.Error("MatMulStack of 5 rows over 4 matrices succeeded")
			}
		})
	}
}

// TestFused: MatMuls and MulMatIDs give what MatMul and MulMatID give for each weight, bit
// for bit (the GPU runs them one by one).
func TestFused(t *testing.T) {
	g, c := testBackends(t)
	rng := rand.New(rand.NewPCG(8, 8))
	const cols, experts, k, tokens = 256, 5, 2, 3
	q := randomWeight(t, g, c, tensor.Q4_K, cols, 7, 1, rng)
	v := randomWeight(t, g, c, tensor.Q8_0, cols, 9, 1, rng)
	x := f32s(t, g, cols, randomVector(cols*tokens, rng))
	fused := []backend.Tensor{f32s(t, g, 7, make([]float32, 7*tokens)), f32s(t, g, 9, make([]float32, 9*tokens))}
	if err := g.MatMuls(fused, []backend.Weight{q.gpu, v.gpu}, x); err != nil {
		t.Fatal(err)
	}
	for i, w := range []pair{q, v} {
		one := f32s(t, g, w.gpu.Rows(), make([]float32, w.gpu.Rows()*tokens))
		if err := g.MatMul(one, w.gpu, x); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(values(t, g, fused[i]), values(t, g, one)) {
			t.Errorf("MatMuls' output %d differs from MatMul's", i)
		}
	}
	gate := randomWeight(t, g, c, tensor.Q4_K, cols, 6, experts, rng)
	up := randomWeight(t, g, c, tensor.Q6_K, cols, 6, experts, rng)
	ids := i32s(t, g, k, []int32{0, 4, 2, -1, 3, 3})
	fused = []backend.Tensor{f32s(t, g, 6, make([]float32, 6*tokens*k)), f32s(t, g, 6, make([]float32, 6*tokens*k))}
	if err := g.MulMatIDs(fused, []backend.Weight{gate.gpu, up.gpu}, x, ids, k); err != nil {
		t.Fatal(err)
	}
	for i, w := range []pair{gate, up} {
		one := f32s(t, g, 6, make([]float32, 6*tokens*k))
		if err := g.MulMatID(one, w.gpu, x, ids, k); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(values(t, g, fused[i]), values(t, g, one)) {
			t.Errorf("MulMatIDs' output %d differs from MulMatID's", i)
		}
	}
	if err := g.MatMuls(fused[:1], []backend.Weight{q.gpu, v.gpu}, x); err == nil {
		t.Error("MatMuls with one output for two weights succeeded")
	}
	if err := g.MulMatIDs(fused, []backend.Weight{gate.gpu}, x, ids, k); err == nil {
		t.Error("MulMatIDs with two outputs for one stack succeeded")
	}
}

// TestDeviceMemory: the backend's buffers are device memory (crossings are copies),
// allocated zeroed; Set, Get and a strided Copy move the values exactly; Supports lists the
// operations with kernels and those run through the host; and another device's tensor is
// refused.
func TestDeviceMemory(t *testing.T) {
	g, c := testBackends(t)
	buf, err := g.Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	if buf.Device() != g.Device().Name || buf.Host() != nil || buf.Size() != 64 {
		t.Errorf("a buffer on %s of %d bytes (host memory %v), want device memory on %s", buf.Device(), buf.Size(), buf.Host() != nil, g.Device().Name)
	}
	zeros, err := backend.NewTensor(buf, 0, tensor.F32, 4, 4)
	if err != nil {
		t.Fatal(err)
	}
	if got := values(t, g, zeros); !slices.Equal(got, make([]float32, 16)) {
		t.Errorf("a new buffer holds %v, want zeros", got)
	}
	if err := g.Free(buf); err != nil {
		t.Fatal(err)
	}
	if err := g.Free(buf); err == nil {
		t.Error("a second Free of a buffer succeeded")
	}

	rng := rand.New(rand.NewPCG(2, 2))
	a := randomVector(3*40, rng)
	gx := f32s(t, g, 40, a)
	// A strided view (columns 8..24 of each row) copied into a contiguous tensor, and back
	// into the view of another tensor.
	view := gx.Columns(8, 16)
	packed := f32s(t, g, 16, make([]float32, 3*16))
	if err := g.Copy(packed, view); err != nil {
		t.Fatal(err)
	}
	var want []float32
	for r := range 3 {
		want = append(want, a[r*40+8:r*40+24]...)
	}
	if got := values(t, g, packed); !slices.Equal(got, want) {
		t.Errorf("strided copy %v, want %v", got[:4], want[:4])
	}
	other := f32s(t, g, 40, make([]float32, 3*40))
	if err := g.Copy(other.Columns(8, 16), packed); err != nil {
		t.Fatal(err)
	}
	back := values(t, g, other)
	for r := range 3 {
		for col := range 40 {
			w := float32(0)
			if col >= 8 && col < 24 {
				w = a[r*40+col]
			}
			if back[r*40+col] != w {
				t.Fatalf("copy into a view: row %d column %d = %g, want %g", r, col, back[r*40+col], w)
			}
		}
	}

	// A crossing to the host is a Get, without staging.
	var staging []byte
	host := f32s(t, c, 40, make([]float32, len(a)))
	if err := backend.Copy(c, host, g, gx, &staging); err != nil {
		t.Fatal(err)
	}
	if err := g.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if crossed := values(t, c, host); !slices.Equal(crossed, a) || staging != nil {
		t.Errorf("copied to the host: %v, want %v (staging %d bytes)", crossed[:4], a[:4], len(staging))
	}
	if err := g.Copy(gx, f32s(t, c, 40, a)); err == nil || !strings.Contains(err.Error(), "copy it to") {
		t.Errorf("Copy of the CPU's tensor: %v", err)
	}
	for _, op := range backend.AllOps() {
		for _, typ := range tensor.Types() {
			want := false
			switch op {
			case backend.OpGetRows, backend.OpMatMul, backend.OpMulMatID, backend.OpMatMulStack:
				want = c.Supports(op, typ) || kernels.Supported(typ)
			case backend.OpCopy, backend.OpRMSNorm, backend.OpL2Norm, backend.OpAdd, backend.OpMul, backend.OpScale,
				backend.OpUnary, backend.OpSwiGLU, backend.OpAddID, backend.OpWeightedSum, backend.OpRoPE, backend.OpRoute,
				backend.OpLayerNorm, backend.OpHadamard:
				want = typ == tensor.F32
			case backend.OpSetRows:
				want = typ == tensor.F32 || typ == tensor.F16 || typ == tensor.Q8_0
			case backend.OpMapIDs:
				want = typ == tensor.I32
			case backend.OpAttention, backend.OpCausalConv, backend.OpGatedDeltaRule, backend.OpIndexerScores:
				// Attention and the indexer's scores on F32, F16 and Q8_0 caches with kernels,
				// on the host's other types; the recurrent operations on F32, as the host.
				want = c.Supports(op, typ)
			}
			if got := g.Supports(op, typ); got != want {
				t.Errorf("Supports(%s, %s) = %v, want %v", op, typ, got, want)
			}
		}
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
	if !g.Supports(backend.OpMatMul, typ) || !g.Supports(backend.OpMatMulStack, typ) {
		t.Errorf("the host's weight operations on %s are not supported", typ)
	}
	rng := rand.New(rand.NewPCG(9, 9))
	p := randomWeight(t, g, c, typ, 256, 4, 1, rng)
	x := randomVector(256*2, rng)
	gd, cd := f32s(t, g, 4, make([]float32, 8)), f32s(t, c, 4, make([]float32, 8))
	if err := g.MatMul(gd, p.gpu, f32s(t, g, 256, x)); err != nil {
		t.Fatal(err)
	}
	if err := c.MatMul(cd, p.cpu, f32s(t, c, 256, x)); err != nil {
		t.Fatal(err)
	}
	if got, want := values(t, g, gd), values(t, c, cd); !slices.Equal(got, want) {
		t.Errorf("host fallback %v, CPU %v", got, want)
	}
	// A stack: row i of x on matrix i mod 3.
	s := randomWeight(t, g, c, typ, 256, 4, 3, rng)
	xs := randomVector(256*6, rng)
	gd, cd = f32s(t, g, 4, make([]float32, 24)), f32s(t, c, 4, make([]float32, 24))
	if err := g.MatMulStack(gd, s.gpu, f32s(t, g, 256, xs)); err != nil {
		t.Fatal(err)
	}
	if err := c.MatMulStack(cd, s.cpu, f32s(t, c, 256, xs)); err != nil {
		t.Fatal(err)
	}
	if got, want := values(t, g, gd), values(t, c, cd); !slices.Equal(got, want) {
		t.Errorf("host fallback's MatMulStack %v, CPU %v", got, want)
	}
	if s := g.Stats(); s.HostOps != 2 || s.Ops != 0 {
		t.Errorf("HostOps %d and Ops %d, want 2 and 0", s.HostOps, s.Ops)
	}
}

// TestErrors: wrong operands are errors naming the tensor, as on the CPU.
func TestErrors(t *testing.T) {
	g, c := testBackends(t)
	rng := rand.New(rand.NewPCG(4, 4))
	p := randomWeight(t, g, c, tensor.Q8_0, 64, 3, 1, rng)
	dst, x := f32s(t, g, 3, make([]float32, 3)), f32s(t, g, 64, make([]float32, 64))
	if err := g.MatMul(dst, p.gpu, f32s(t, g, 63, make([]float32, 63))); err == nil {
		t.Error("MatMul of 63 values by 64 columns succeeded")
	}
	if err := g.MatMul(dst, p.cpu, x); err == nil {
		t.Error("MatMul of another backend's weight succeeded")
	}
	if err := g.MatMul(dst, p.gpu, f32s(t, c, 64, make([]float32, 64))); err == nil || !strings.Contains(err.Error(), "copy it to") {
		t.Errorf("MatMul of another backend's tensor: %v", err)
	}
	if err := g.MatMul(dst, p.gpu, i32s(t, g, 64, make([]int32, 64))); err == nil {
		t.Error("MatMul of i32 activations succeeded")
	}
	wide := f32s(t, g, 128, make([]float32, 2*128))
	if err := g.MatMul(f32s(t, g, 3, make([]float32, 6)), p.gpu, wide.Columns(0, 64)); err == nil {
		t.Error("MatMul of strided activations succeeded")
	}
	if err := g.MulMatID(dst, p.gpu, x, f32s(t, g, 1, []float32{0}), 1); err == nil {
		t.Error("MulMatID with f32 ids succeeded")
	}
	if err := g.GetRows(f32s(t, g, 64, make([]float32, 64)), p.gpu, []int32{3}); err == nil {
		t.Error("GetRows past the last row succeeded")
	}
	// Empty batches are no work, not a launch with an empty grid.
	if err := g.MatMul(f32s(t, g, 3, nil), p.gpu, f32s(t, g, 64, nil)); err != nil {
		t.Errorf("MatMul of no tokens: %v", err)
	}
	if err := g.GetRows(f32s(t, g, 64, nil), p.gpu, nil); err != nil {
		t.Errorf("GetRows of no rows: %v", err)
	}
}

// TestExactOps: the operations between the products whose arithmetic is only roundings of
// single operations (no exp or log) give the CPU backend's bits, on contiguous and strided
// operands; the conformance suite checks them, and the rest, within its tolerances.
func TestExactOps(t *testing.T) {
	g, c := testBackends(t)
	rng := rand.New(rand.NewPCG(5, 5))
	const cols, rows, k = 70, 6, 3
	x, y, row := randomVector(rows*cols, rng), randomVector(rows*cols, rng), randomVector(cols, rng)
	factors, slotW := randomVector(rows, rng), randomVector(rows*k, rng)
	ys := randomVector(rows*k*cols, rng)
	ids := []int32{2, -1, 0, 1, 1, -1}
	wide := randomVector(rows*(cols+10), rng)
	cases := []struct {
		name string
		run  func(b backend.Backend) (backend.Tensor, error)
	}{
		{"add", func(b backend.Backend) (backend.Tensor, error) {
			d := f32s(t, b, cols, make([]float32, rows*cols))
			return d, b.Add(d, f32s(t, b, cols, x), f32s(t, b, cols, y))
		}},
		{"add a repeated row", func(b backend.Backend) (backend.Tensor, error) {
			d := f32s(t, b, cols, make([]float32, rows*cols))
			return d, b.Add(d, f32s(t, b, cols, x), f32s(t, b, cols, row))
		}},
		{"mul a repeated row", func(b backend.Backend) (backend.Tensor, error) {
			d := f32s(t, b, cols, make([]float32, rows*cols))
			return d, b.Mul(d, f32s(t, b, cols, x), f32s(t, b, cols, row))
		}},
		{"scale", func(b backend.Backend) (backend.Tensor, error) {
			d := f32s(t, b, cols, make([]float32, rows*cols))
			return d, b.Scale(d, f32s(t, b, cols, x), 0.37)
		}},
		{"scale rows", func(b backend.Backend) (backend.Tensor, error) {
			d := f32s(t, b, cols, make([]float32, rows*cols))
			return d, b.ScaleRows(d, f32s(t, b, cols, x), f32s(t, b, 1, factors))
		}},
		{"rms-norm of a strided view, weighted", func(b backend.Backend) (backend.Tensor, error) {
			d := f32s(t, b, cols, make([]float32, rows*cols))
			return d, b.RMSNorm(d, f32s(t, b, cols+10, wide).Columns(4, cols), f32s(t, b, cols, row), 1e-6)
		}},
		{"rms-norm in place", func(b backend.Backend) (backend.Tensor, error) {
			d := f32s(t, b, cols, x)
			return d, b.RMSNorm(d, d, backend.Tensor{}, 1e-5)
		}},
		{"l2-norm of a strided view", func(b backend.Backend) (backend.Tensor, error) {
			d := f32s(t, b, cols+10, wide)
			return d, b.L2Norm(d.Columns(8, cols), 1e-6)
		}},
		{"add-id", func(b backend.Backend) (backend.Tensor, error) {
			d := f32s(t, b, cols, x)
			return d, b.AddID(d, f32s(t, b, cols, y[:3*cols]), i32s(t, b, 1, ids))
		}},
		{"map-ids", func(b backend.Backend) (backend.Tensor, error) {
			d := i32s(t, b, 1, make([]int32, len(ids)))
			return d, b.MapIDs(d, i32s(t, b, 1, ids), i32s(t, b, 2, []int32{1, -1}))
		}},
		{"weighted-sum", func(b backend.Backend) (backend.Tensor, error) {
			d := f32s(t, b, cols, make([]float32, rows*cols))
			return d, b.WeightedSum(d, f32s(t, b, cols, ys), f32s(t, b, 1, slotW), k)
		}},
	}
	// The causal convolution: 4 taps (every term fused, as Qwen3.5's), and 10 (the first 8
	// added unfused, and more state than tokens); the output, then the state it left.
	for _, taps := range []int{4, 10} {
		kernel, state := randomVector(taps*cols, rng), randomVector((taps-1)*cols, rng)
		st := map[backend.Backend]backend.Tensor{}
		cases = append(cases, struct {
			name string
			run  func(b backend.Backend) (backend.Tensor, error)
		}{fmt.Sprintf("causal-conv, %d taps", taps), func(b backend.Backend) (backend.Tensor, error) {
			d := f32s(t, b, cols, make([]float32, rows*cols))
			st[b] = f32s(t, b, taps-1, state)
			return d, b.CausalConv(d, f32s(t, b, cols, x), st[b], f32s(t, b, cols, kernel))
		}}, struct {
			name string
			run  func(b backend.Backend) (backend.Tensor, error)
		}{fmt.Sprintf("causal-conv's state, %d taps", taps), func(b backend.Backend) (backend.Tensor, error) {
			return st[b], nil
		}})
	}
	for _, tc := range cases {
		gd, err := tc.run(g)
		if err != nil {
			t.Fatalf("%s on %s: %v", tc.name, g.Device().Name, err)
		}
		cd, err := tc.run(c)
		if err != nil {
			t.Fatalf("%s on the CPU: %v", tc.name, err)
		}
		got, want := values(t, g, gd), values(t, c, cd)
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Errorf("%s: element %d = %g, CPU %g", tc.name, i, got[i], want[i])
				break
			}
		}
	}
}

// TestExactRoPEAndSetRows: RoPE (normal and NeoX, partial, YaRN, frequency factors) gives the
// CPU backend's bits, its angles being tensor's own; SetRows writes the CPU's bytes into F32,
// F16 and Q8_0 caches, rows first.. only.
func TestExactRoPEAndSetRows(t *testing.T) {
	g, c := testBackends(t)
	rng := rand.New(rand.NewPCG(10, 10))
	const rowLen, heads = 64, 3
	pos := []int32{0, 7, 300, 4095}
	x := randomVector(len(pos)*heads*rowLen, rng)
	factors := make([]float32, 16)
	for i := range factors {
		factors[i] = 1 + float32(i)/4
	}
	ropes := []tensor.RoPE{
		{Mode: tensor.RoPENeoX, Dims: rowLen, Base: 1e6, FreqScale: 1, AttnFactor: 1},
		{Mode: tensor.RoPENormal, Dims: 32, Offset: 16, Base: 1e4, FreqScale: 1, AttnFactor: 1, FreqFactors: factors},
		{Mode: tensor.RoPENeoX, Dims: 32, Base: 1e4, FreqScale: 0.25, ExtFactor: 1, AttnFactor: 1, BetaFast: 32, BetaSlow: 1, OrigCtx: 4096},
	}
	for i := range ropes {
		r := &ropes[i]
		gx, cx := f32s(t, g, heads*rowLen, x), f32s(t, c, heads*rowLen, x)
		if err := g.RoPE(gx, rowLen, r, pos); err != nil {
			t.Fatal(err)
		}
		if err := c.RoPE(cx, rowLen, r, pos); err != nil {
			t.Fatal(err)
		}
		got, want := values(t, g, gx), values(t, c, cx)
		for j := range want {
			if math.Float32bits(got[j]) != math.Float32bits(want[j]) {
				t.Errorf("rope %d: element %d = %g, CPU %g", i, j, got[j], want[j])
				break
			}
		}
	}
	if err := g.RoPE(f32s(t, g, rowLen, x[:rowLen*5]), rowLen, &ropes[0], pos); err == nil {
		t.Error("RoPE of 5 rows at 4 positions succeeded")
	}

	const cols, cacheRows, first = 96, 9, 3
	src := randomVector(4*cols, rng)
	src[5] = 0 // a block with a zero, and one all zeros
	clear(src[cols+32 : cols+64])
	for _, typ := range []tensor.Type{tensor.F32, tensor.F16, tensor.Q8_0} {
		caches := [2]backend.Tensor{}
		for i, b := range []backend.Backend{g, c} {
			rb, err := typ.RowBytes(cols)
			if err != nil {
				t.Fatal(err)
			}
			buf, err := b.Alloc(rb * cacheRows)
			if err != nil {
				t.Fatal(err)
			}
			if caches[i], err = backend.NewTensor(buf, 0, typ, cols, cacheRows); err != nil {
				t.Fatal(err)
			}
			if err := b.SetRows(caches[i], first, f32s(t, b, cols, src)); err != nil {
				t.Fatal(err)
			}
		}
		got, want := make([]byte, caches[0].Bytes()), make([]byte, caches[1].Bytes())
		if err := g.Get(got, caches[0]); err != nil {
			t.Fatal(err)
		}
		if err := g.Synchronize(); err != nil {
			t.Fatal(err)
		}
		if err := c.Get(want, caches[1]); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("set-rows into %s: the cache's bytes differ from the CPU's", typ)
		}
	}
}

// TestAttention: the GPU's attention against the CPU's in both numerics, far inside the
// conformance suite's bound (the order of a score's sum is the difference; ggml's per-row
// numerics round the queries and an F16 V's sums the same way on both): grouped heads, a
// sliding window, sinks, MLA's V as a view of K's rows, each cache type the kernel reads;
// and heads too large for the kernel, which run on the host.
func TestAttention(t *testing.T) {
	g, c := testBackends(t)
	rng := rand.New(rand.NewPCG(12, 12))
	cases := []struct {
		name                   string
		heads, kvHeads, dk, dv int
		vOfK, sinks            bool
		window, tokens, kvLen  int
		typ                    tensor.Type
	}{
		{"gqa f16", 8, 2, 64, 64, false, false, 0, 5, 40, tensor.F16},
		{"window sinks q8_0", 4, 2, 64, 64, false, true, 9, 3, 30, tensor.Q8_0},
		{"mla f32", 4, 1, 96, 64, true, false, 0, 2, 20, tensor.F32},
		{"large heads on the host", 2, 1, 640, 640, false, false, 0, 1, 10, tensor.F16},
	}
	for _, tc := range cases {
		capacity := tc.kvLen + 3
		pos := make([]int32, tc.tokens)
		for i := range pos {
			pos[i] = int32(tc.kvLen - tc.tokens + i)
		}
		q := randomVector(tc.tokens*tc.heads*tc.dk, rng)
		sinks := randomVector(tc.heads, rng)
		cacheBytes := func(dim int) []byte {
			cols := tc.kvHeads * dim
			rb, err := tc.typ.RowBytes(int64(cols))
			if err != nil {
				t.Fatal(err)
			}
			data := make([]byte, rb*int64(capacity))
			if err := tensor.Quantize(tc.typ, randomVector(cols*capacity, rng), data); err != nil {
				t.Fatal(err)
			}
			return data
		}
		kData, vData := cacheBytes(tc.dk), cacheBytes(tc.dv)
		for _, num := range []tensor.AttnNumerics{tensor.AttnPrecise, tensor.AttnGGML} {
			var outs [2][]float32
			for i, b := range []backend.Backend{g, c} {
				k := newBytes(t, b, tc.typ, tc.kvHeads*tc.dk, capacity, kData)
				v := k.Columns(0, tc.dv)
				if !tc.vOfK {
					v = newBytes(t, b, tc.typ, tc.kvHeads*tc.dv, capacity, vData)
				}
				var s backend.Tensor
				if tc.sinks {
					s = f32s(t, b, tc.heads, sinks)
				}
				dst := f32s(t, b, tc.dv, make([]float32, tc.tokens*tc.heads*tc.dv))
				p := tensor.AttnParams{Scale: 1 / float32(math.Sqrt(float64(tc.dk))), Window: tc.window, Numerics: num}
				if err := b.Attention(dst, f32s(t, b, tc.dk, q), tc.heads, pos, k, v, s, tc.kvLen, p); err != nil {
					t.Fatalf("%s on %s: %v", tc.name, b.Device().Name, err)
				}
				outs[i] = values(t, b, dst)
			}
			if e := nmse(widen(outs[0]), widen(outs[1])); !(e <= 1e-10) {
				t.Errorf("%s, numerics %d: NMSE against the CPU's attention %.3g > 1e-10", tc.name, num, e)
			}
		}
	}
}

// newBytes is a tensor of type typ on b holding data.
func newBytes(t *testing.T, b backend.Backend, typ tensor.Type, cols, rows int, data []byte) backend.Tensor {
	t.Helper()
	buf, err := b.Alloc(int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	x, err := backend.NewTensor(buf, 0, typ, cols, rows)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Set(x, data); err != nil {
		t.Fatal(err)
	}
	return x
}

// TestRouteTies: experts with equal scores are picked in the CPU's order (the lower index
// first), which the conformance suite's tie-free logits leave open; the weights are the
// CPU's within float rounding (a GPU's expf may differ from glibc's in the last bits).
func TestRouteTies(t *testing.T) {
	g, c := testBackends(t)
	cfg := tensor.RouterConfig{Experts: 12, Used: 5, Gating: tensor.GatingSigmoid, NormWeights: true, Scale: 2.5}
	logits := []float32{0.5, 1, 0.5, -1, 1, 1, 0.25, 0.5, 0, 1, -2, 0.5, // four 1s, then the 0.5s from expert 0 on
		3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3}
	var ids [2][]int32
	var weights [2][]float32
	for i, b := range []backend.Backend{g, c} {
		it, wt := i32s(t, b, cfg.Used, make([]int32, 2*cfg.Used)), f32s(t, b, cfg.Used, make([]float32, 2*cfg.Used))
		if err := b.Route(it, wt, f32s(t, b, cfg.Experts, logits), backend.Tensor{}, cfg); err != nil {
			t.Fatal(err)
		}
		raw := make([]int32, 2*cfg.Used)
		if err := b.Get(asBytes(raw), it); err != nil {
			t.Fatal(err)
		}
		ids[i], weights[i] = raw, values(t, b, wt)
	}
	if want := []int32{1, 4, 5, 9, 0, 0, 1, 2, 3, 4}; !slices.Equal(ids[1], want) {
		t.Fatalf("the CPU picked %v, the test expects %v", ids[1], want)
	}
	if !slices.Equal(ids[0], ids[1]) {
		t.Errorf("GPU ids %v, CPU %v", ids[0], ids[1])
	}
	for i, w := range weights[1] {
		if math.Abs(float64(weights[0][i]-w)) > 1e-6*math.Abs(float64(w)) {
			t.Errorf("GPU weights %v, CPU %v", weights[0], weights[1])
			break
		}
	}
}

// TestMulMatIDNoGroups: slots that select no expert of the stack (every slot unused, or an
// id past the stack, which the device cannot report without a wait) get zero outputs, over
// outputs that held NaNs; the other slots are MulMatID's as usual. The batches of 2 tokens
// run mmv, those of 48 (96 slots, tiledMinPairsPerExpert·experts) mmq.
func TestMulMatIDNoGroups(t *testing.T) {
	g, c := testBackends(t)
	rng := rand.New(rand.NewPCG(13, 13))
	const cols, rows, experts, k = 64, 5, 3, 2
	p := randomWeight(t, g, c, tensor.Q8_0, cols, rows, experts, rng)
	x := randomVector(48*cols, rng)
	unused, some := make([]int32, 96), make([]int32, 96)
	for i := range unused {
		unused[i], some[i] = -1, -1
	}
	some[5], some[17], some[60], some[95] = 1, 7, 2, 1
	for _, ids := range [][]int32{{-1, -1, -1, -1}, {1, 7, -1, 2}, unused, some} {
		nan := make([]float32, len(ids)*rows)
		for i := range nan {
			nan[i] = float32(math.NaN())
		}
		dst := f32s(t, g, rows, nan)
		if err := g.MulMatID(dst, p.gpu, f32s(t, g, cols, x[:len(ids)/k*cols]), i32s(t, g, k, ids), k); err != nil {
			t.Fatal(err)
		}
		got := values(t, g, dst)
		for slot, e := range ids {
			for r := range rows {
				v := got[slot*rows+r]
				want := float32(0)
				if e >= 0 && e < experts {
					want = float32(exactMatVec(t, p.m, int(e), r, x[slot/k*cols:(slot/k+1)*cols]))
				}
				if !(math.Abs(float64(v-want)) <= 1e-4*(1+math.Abs(float64(want)))) {
					t.Errorf("ids %v: slot %d row %d = %g, want %g", ids, slot, r, v, want)
				}
			}
		}
	}
}

// TestIndexerScoresMasks: the lightning indexer's kernel scores each token's positions up
// to its own and gives -Inf after them, as the CPU does; the finite scores agree within
// float32 rounding of the reductions (F32 keys).
func TestIndexerScoresMasks(t *testing.T) {
	g, c := testBackends(t)
	rng := rand.New(rand.NewPCG(9, 9))
	const heads, dim, kvLen = 3, 64, 12
	pos := []int32{3, 10}
	q, w, keys := randomVector(len(pos)*heads*dim, rng), randomVector(len(pos)*heads, rng), randomVector(kvLen*dim, rng)
	run := func(b backend.Backend) []float32 {
		d := f32s(t, b, kvLen, make([]float32, len(pos)*kvLen))
		if err := b.IndexerScores(d, f32s(t, b, dim, q), heads, pos, f32s(t, b, dim, keys), f32s(t, b, heads, w), kvLen); err != nil {
			t.Fatalf("%s: %v", b.Device().Name, err)
		}
		return values(t, b, d)
	}
	got, want := run(g), run(c)
	for i := range want {
		tk, j := i/kvLen, i%kvLen
		switch {
		case j > int(pos[tk]) && !math.IsInf(float64(got[i]), -1):
			t.Errorf("token %d position %d: %g, want -Inf past position %d", tk, j, got[i], pos[tk])
		case j <= int(pos[tk]) && math.Abs(float64(got[i]-want[i])) > 1e-4*(1+math.Abs(float64(want[i]))):
			t.Errorf("token %d position %d: %g, the CPU %g", tk, j, got[i], want[i])
		}
	}
}

// TestStagingHalves stages one half's worth of bytes, queues a marker (a memset) on the
// copy stream, then two halves more: the last chunk refills the first half once that
// half's own copy has run, without waiting for the marker queued after it (the fake
// driver runs queued work only when waited for, and its synchronous copy does not wait,
// so the marker shows whether it ran), and the device ends up with every byte.
func TestStagingHalves(t *testing.T) {
	g, _ := testBackends(t)
	const half, cols = stagingBytes / 2, 4096 // F32 rows of 4096
	data := make([]byte, 3*half)
	for i := range data {
		data[i] = byte(i*7 + i>>16)
	}
	buf, err := g.Alloc(int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	markerBuf, err := g.Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	marker := markerBuf.(*buffer).ptr
	stage := func(off, n int) {
		t.Helper()
		if _, err := g.Stage(buf, int64(off), "chunk", tensor.F32, []int64{cols, int64(n) / 4 / cols, 1}, data[off:off+n], nil); err != nil {
			t.Fatal(err)
		}
	}
	stage(0, half)
	var ran [1]byte
	err = g.do(func() error {
		if err := cu.MemsetD8Async(marker, 7, 64, g.copyStream); err != nil {
			return err
		}
		stage(half, 2*half)
		return cu.MemcpyDtoH(unsafe.Pointer(&ran[0]), marker, 1)
	})
	if err != nil {
		t.Fatal(err)
	}
	if g.dev.Description == "fake GPU (CPU emulation)" && ran[0] != 0 {
		t.Error("refilling the first half waited for the work queued after its copy")
	}
	if err := g.Synchronize(); err != nil { // the copy stream's work, before Get on the stream
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if err := g.Get(got, backend.Tensor{Buf: buf, Type: tensor.F32, Cols: cols, Rows: len(data) / 4 / cols, Stride: 4 * cols}); err != nil {
		t.Fatal(err)
	}
	if err := g.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Error("the staged bytes differ from the host's")
	}
}

// TestStagingOrder stages two expert stacks into the same bytes, each followed by a
// MulMatID on it: the copy of the second waits for the product of the first (which the
// fake driver, running queued work late, would otherwise give the second stack's bytes),
// the first copy waits for the buffer's zeroing memset on the stream, and each product
// waits for its copy. Both products equal those of the stacks loaded whole.
func TestStagingOrder(t *testing.T) {
	g, c := testBackends(t)
	rng := rand.New(rand.NewPCG(3, 8))
	const experts, k, rows, tokens = 4, 2, 17, 5
	typ := tensor.Q8_0
	cols := shapes(typ)[1]
	a, bw := randomWeight(t, g, c, typ, cols, rows, experts, rng), randomWeight(t, g, c, typ, cols, rows, experts, rng)
	buf, err := g.Alloc(int64(len(a.data)))
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]int32, tokens*k)
	for i := range ids {
		ids[i] = int32(rng.IntN(experts))
	}
	x := f32s(t, g, cols, randomVector(cols*tokens, rng))
	product := func(w backend.Weight) backend.Tensor {
		t.Helper()
		d := f32s(t, g, rows, make([]float32, len(ids)*rows))
		if err := g.MulMatID(d, w, x, i32s(t, g, k, ids), k); err != nil {
			t.Fatal(err)
		}
		return d
	}
	var staged []backend.Tensor
	for _, p := range []pair{a, bw} {
		w, err := g.Stage(buf, 0, "stack", typ, []int64{int64(cols), rows, experts}, p.data, nil)
		if err != nil {
			t.Fatal(err)
		}
		staged = append(staged, product(w))
	}
	for i, p := range []pair{a, bw} {
		if got, want := values(t, g, staged[i]), values(t, g, product(p.gpu)); !slices.Equal(got, want) {
			t.Errorf("stack %d staged computes %v…, loaded %v…", i, got[:4], want[:4])
		}
	}
}
