// Package backendtest is the backends' conformance suite, in the spirit of llama.cpp's
// test-backend-ops: every operation of backend.Ops, with every weight type the tensor
// package quantizes and with regular and odd shapes (one token, a few, a partial block of
// rows; strided views where an operation takes them), runs on the backend under test and on
// a reference CPU backend from the same inputs, and the outputs are compared by normalised
// mean squared error: 5e-4 for the weights' products and attention, 1e-7 for the rest, as
// llama.cpp's suite allows. An operation the backend's Supports declines is skipped and
// logged; a backend that supports none fails, so the suite cannot pass by doing nothing.
//
// A backend plugs in with a test of its own package that calls Run with a constructor:
// backend/sim does (a simulated GPU, which must agree exactly), and the CUDA backend and
// its CPU emulation are meant to.
package backendtest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/backend/cpu"
	"github.com/moerun/moerun/tensor"
)

// Thresholds of the normalised MSE (Σ(a−b)²/Σb²), llama.cpp's for these operations.
const (
	ProductNMSE     = 5e-4
	ElementwiseNMSE = 1e-7
)

// WeightTypes are the weight types the products are checked with.
var WeightTypes = []tensor.Type{tensor.F32, tensor.F16, tensor.BF16, tensor.Q8_0, tensor.Q4_0, tensor.Q4_K,
	tensor.Q5_K, tensor.Q6_K, tensor.Q2_K, tensor.Q3_K, tensor.MXFP4, tensor.IQ4_NL, tensor.IQ4_XS}

// Run checks the backend newBackend makes (on pool, for one test) against the CPU backend.
func Run(t *testing.T, newBackend func(t *testing.T, pool *tensor.Pool) backend.Backend) {
	pool := tensor.NewPool(2)
	t.Cleanup(pool.Close)
	h := &harness{dut: newBackend(t, pool), ref: cpu.New(cpu.Options{Pool: pool}), rng: rand.New(rand.NewPCG(1, 2))}
	t.Cleanup(func() { h.ref.Close() })
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h.t = t
			c.run(h)
		})
	}
	if h.ran == 0 {
		t.Errorf("%s supports none of the operations", h.dut.Device().Name)
	}
	t.Logf("%s: %d checks ran, %d skipped as unsupported", h.dut.Device().Name, h.ran, h.skipped)
}

// harness runs one check on both backends.
type harness struct {
	t            *testing.T
	dut, ref     backend.Backend
	rng          *rand.Rand
	ran, skipped int
}

// supports skips the check unless the backend under test runs op on t.
func (h *harness) supports(op backend.Op, t tensor.Type) bool {
	if h.dut.Supports(op, t) {
		h.ran++
		return true
	}
	h.skipped++
	h.t.Logf("%s does not run %s on %s: skipped", h.dut.Device().Name, op, t)
	return false
}

// pair is one input or output on both backends.
type pair struct{ dut, ref backend.Tensor }

// put places rows×cols values of type t (F32 or I32 for activations) on both backends.
func (h *harness) put(t tensor.Type, cols, rows int, bytes []byte) pair {
	h.t.Helper()
	var p pair
	for _, side := range []struct {
		b backend.Backend
		x *backend.Tensor
	}{{h.dut, &p.dut}, {h.ref, &p.ref}} {
		rb, err := backend.RowBytes(t, cols)
		if err != nil {
			h.t.Fatal(err)
		}
		buf, err := side.b.Alloc(max(rb*int64(rows), 1))
		if err != nil {
			h.t.Fatal(err)
		}
		if *side.x, err = backend.NewTensor(buf, 0, t, cols, rows); err != nil {
			h.t.Fatal(err)
		}
		if bytes != nil {
			if err := side.b.Set(*side.x, bytes); err != nil {
				h.t.Fatal(err)
			}
		}
	}
	return p
}

// floats places random values (normal, times scale) on both backends.
func (h *harness) floats(cols, rows int, scale float64) pair {
	h.t.Helper()
	v := make([]float32, cols*rows)
	for i := range v {
		v[i] = float32(h.rng.NormFloat64() * scale)
	}
	return h.put(tensor.F32, cols, rows, f32Bytes(v))
}

// zeros is an output of rows×cols on both backends.
func (h *harness) zeros(cols, rows int) pair { return h.put(tensor.F32, cols, rows, nil) }

// ids places int32 values on both backends.
func (h *harness) ids(cols int, v []int32) pair {
	h.t.Helper()
	return h.put(tensor.I32, cols, len(v)/cols, i32Bytes(v))
}

// weight quantizes random values into a weight of type t on both backends; ok is false
// when the tensor package cannot quantize t.
func (h *harness) weight(t tensor.Type, cols, rows, experts int) (dut, ref backend.Weight, ok bool) {
	h.t.Helper()
	vals := make([]float32, cols*rows*experts)
	for i := range vals {
		vals[i] = float32(h.rng.NormFloat64() * (0.5 + float64(i/cols%7)/7)) // row scales vary
	}
	shape := []int64{int64(cols), int64(rows), int64(experts)}
	size, err := t.Bytes(shape)
	if err != nil {
		return nil, nil, false
	}
	data := make([]byte, size)
	if err := tensor.Quantize(t, vals, data); err != nil {
		return nil, nil, false
	}
	name := fmt.Sprintf("test.%s.weight", t)
	if dut, err = h.dut.Load(name, t, shape, data); err != nil {
		h.t.Fatalf("%s: %v", h.dut.Device().Name, err)
	}
	if ref, err = h.ref.Load(name, t, shape, data); err != nil {
		h.t.Fatal(err)
	}
	return dut, ref, true
}

// check runs an operation on both backends and compares its output, read as rows×cols.
func (h *harness) check(what string, tol float64, out pair, run func(b backend.Backend, side func(pair) backend.Tensor) error) {
	h.t.Helper()
	if err := run(h.dut, func(p pair) backend.Tensor { return p.dut }); err != nil {
		h.t.Errorf("%s on %s: %v", what, h.dut.Device().Name, err)
		return
	}
	if err := run(h.ref, func(p pair) backend.Tensor { return p.ref }); err != nil {
		h.t.Fatalf("%s on the CPU: %v", what, err)
	}
	got, want := h.read(h.dut, out.dut), h.read(h.ref, out.ref)
	if e := nmse(got, want); !(e <= tol) {
		h.t.Errorf("%s: normalised MSE %.3g > %.3g", what, e, tol)
	}
}

// read copies a tensor's F32 elements back, through a contiguous copy on its backend when
// it is a strided view.
func (h *harness) read(b backend.Backend, x backend.Tensor) []float32 {
	h.t.Helper()
	if !x.Contiguous() {
		buf, err := b.Alloc(x.RowBytes() * int64(x.Rows))
		if err != nil {
			h.t.Fatal(err)
		}
		c, _ := backend.NewTensor(buf, 0, x.Type, x.Cols, x.Rows)
		if err := b.Copy(c, x); err != nil {
			h.t.Fatal(err)
		}
		x = c
	}
	out := make([]float32, x.Elements())
	if err := b.Get(f32Bytes(out), x); err != nil {
		h.t.Fatal(err)
	}
	if err := b.Synchronize(); err != nil {
		h.t.Fatal(err)
	}
	return out
}

// nmse is Σ(a−b)²/Σb²; NaN where a has a NaN or an infinity b has not.
func nmse(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var num, den float64
	for i := range a {
		d := float64(a[i]) - float64(b[i])
		if a[i] == b[i] { // also equal infinities
			d = 0
		}
		num += d * d
		den += float64(b[i]) * float64(b[i])
	}
	if num == 0 {
		return 0
	}
	return num / max(den, 1e-30)
}

func f32Bytes(v []float32) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))
}

func i32Bytes(v []int32) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))
}

// testCase is one group of checks.
type testCase struct {
	name string
	run  func(h *harness)
}

// tokenCounts are the batch sizes products are checked at: one token (ggml's vec-dot path),
// a few, and a batch that is not a multiple of a tile.
var tokenCounts = []int{1, 3, 17}

var cases = []testCase{
	{"get-rows", func(h *harness) {
		for _, t := range WeightTypes {
			if !h.supports(backend.OpGetRows, t) {
				continue
			}
			dw, rw, ok := h.weight(t, 256, 12, 1)
			if !ok {
				continue
			}
			ids := []int32{3, 0, 11, 3}
			out := h.zeros(256, len(ids))
			h.check("get-rows "+t.String(), ProductNMSE, out, func(b backend.Backend, s func(pair) backend.Tensor) error {
				return b.GetRows(s(out), pick(b, h, dw, rw), ids)
			})
		}
	}},
	{"mul-mat", func(h *harness) {
		for _, t := range WeightTypes {
			if !h.supports(backend.OpMatMul, t) {
				continue
			}
			dw, rw, ok := h.weight(t, 256, 24, 1)
			if !ok {
				continue
			}
			for _, n := range tokenCounts {
				x, out := h.floats(256, n, 1), h.zeros(24, n)
				h.check(fmt.Sprintf("mul-mat %s, %d tokens", t, n), ProductNMSE, out, func(b backend.Backend, s func(pair) backend.Tensor) error {
					return b.MatMul(s(out), pick(b, h, dw, rw), s(x))
				})
				out2 := h.zeros(24, n)
				h.check(fmt.Sprintf("mul-mats %s, %d tokens", t, n), ProductNMSE, out2, func(b backend.Backend, s func(pair) backend.Tensor) error {
					return b.MatMuls([]backend.Tensor{s(out2)}, []backend.Weight{pick(b, h, dw, rw)}, s(x))
				})
			}
		}
	}},
	{"mul-mat-id", func(h *harness) {
		const experts, k = 6, 2
		for _, t := range WeightTypes {
			if !h.supports(backend.OpMulMatID, t) {
				continue
			}
			dw, rw, ok := h.weight(t, 256, 16, experts)
			if !ok {
				continue
			}
			for _, n := range tokenCounts {
				ids := make([]int32, n*k)
				for i := range ids {
					ids[i] = int32(h.rng.IntN(experts+1)) - 1 // -1: a slot smart expert reduction dropped
				}
				id := h.ids(k, ids)
				for _, perSlot := range []bool{false, true} {
					rows := n
					if perSlot {
						rows = n * k
					}
					x, out := h.floats(256, rows, 1), h.zeros(16, n*k)
					h.check(fmt.Sprintf("mul-mat-id %s, %d tokens, input per slot %v", t, n, perSlot), ProductNMSE, out, func(b backend.Backend, s func(pair) backend.Tensor) error {
						return b.MulMatIDs([]backend.Tensor{s(out)}, []backend.Weight{pick(b, h, dw, rw)}, s(x), s(id), k)
					})
				}
			}
		}
	}},
	{"mul-mat-stack", func(h *harness) {
		for _, t := range []tensor.Type{tensor.F32, tensor.F16, tensor.Q8_0} {
			if !h.supports(backend.OpMatMulStack, t) {
				continue
			}
			dw, rw, ok := h.weight(t, 64, 32, 4)
			if !ok {
				continue
			}
			x, out := h.floats(64, 3*4, 1), h.zeros(32, 3*4)
			h.check("mul-mat-stack "+t.String(), ProductNMSE, out, func(b backend.Backend, s func(pair) backend.Tensor) error {
				return b.MatMulStack(s(out), pick(b, h, dw, rw), s(x))
			})
		}
	}},
	{"rms-norm", func(h *harness) {
		if !h.supports(backend.OpRMSNorm, tensor.F32) {
			return
		}
		x, w := h.floats(96, 5, 3), h.floats(96, 1, 1)
		out := h.zeros(96, 5)
		h.check("rms-norm with weights", ElementwiseNMSE, out, func(b backend.Backend, s func(pair) backend.Tensor) error {
			return b.RMSNorm(s(out), s(x), s(w), 1e-6)
		})
		out2 := h.zeros(96, 5)
		h.check("rms-norm", ElementwiseNMSE, out2, func(b backend.Backend, s func(pair) backend.Tensor) error {
			return b.RMSNorm(s(out2), s(x), backend.Tensor{}, 1e-6)
		})
		// In place on the first 64 columns of each row, as MLA normalises its latent.
		y := h.floats(96, 5, 2)
		view := pair{y.dut.Columns(0, 64), y.ref.Columns(0, 64)}
		w64 := h.floats(64, 1, 1)
		h.check("rms-norm of a strided view in place", ElementwiseNMSE, y, func(b backend.Backend, s func(pair) backend.Tensor) error {
			return b.RMSNorm(s(view), s(view), s(w64), 1e-6)
		})
	}},
	{"l2-norm", func(h *harness) {
		if !h.supports(backend.OpL2Norm, tensor.F32) {
			return
		}
		x := h.floats(128, 4, 2)
		view := pair{x.dut.Columns(32, 32), x.ref.Columns(32, 32)}
		h.check("l2-norm of a strided view", ElementwiseNMSE, x, func(b backend.Backend, s func(pair) backend.Tensor) error {
			return b.L2Norm(s(view), 1e-6)
		})
	}},
	{"element-wise", func(h *harness) {
		a, c, row := h.floats(70, 6, 1), h.floats(70, 6, 1), h.floats(70, 1, 1)
		factors := h.floats(1, 6, 1)
		type ew struct {
			name string
			op   backend.Op
			run  func(b backend.Backend, out backend.Tensor, s func(pair) backend.Tensor) error
		}
		for _, e := range []ew{
			{"add", backend.OpAdd, func(b backend.Backend, out backend.Tensor, s func(pair) backend.Tensor) error {
				return b.Add(out, s(a), s(c))
			}},
			{"add a row to every row", backend.OpAdd, func(b backend.Backend, out backend.Tensor, s func(pair) backend.Tensor) error {
				return b.Add(out, s(a), s(row))
			}},
			{"mul", backend.OpMul, func(b backend.Backend, out backend.Tensor, s func(pair) backend.Tensor) error {
				return b.Mul(out, s(a), s(c))
			}},
			{"mul by a row", backend.OpMul, func(b backend.Backend, out backend.Tensor, s func(pair) backend.Tensor) error {
				return b.Mul(out, s(a), s(row))
			}},
			{"scale", backend.OpScale, func(b backend.Backend, out backend.Tensor, s func(pair) backend.Tensor) error {
				return b.Scale(out, s(a), -0.37)
			}},
			{"scale rows", backend.OpScale, func(b backend.Backend, out backend.Tensor, s func(pair) backend.Tensor) error {
				return b.ScaleRows(out, s(a), s(factors))
			}},
			{"sigmoid", backend.OpUnary, func(b backend.Backend, out backend.Tensor, s func(pair) backend.Tensor) error {
				return b.Unary(out, s(a), backend.Sigmoid)
			}},
			{"softplus", backend.OpUnary, func(b backend.Backend, out backend.Tensor, s func(pair) backend.Tensor) error {
				return b.Unary(out, s(a), backend.Softplus)
			}},
			{"silu", backend.OpUnary, func(b backend.Backend, out backend.Tensor, s func(pair) backend.Tensor) error {
				return b.Unary(out, s(a), backend.SiLU)
			}},
			{"swiglu", backend.OpSwiGLU, func(b backend.Backend, out backend.Tensor, s func(pair) backend.Tensor) error {
				return b.SwiGLU(out, s(a), s(c))
			}},
			{"swiglu-oai", backend.OpSwiGLU, func(b backend.Backend, out backend.Tensor, s func(pair) backend.Tensor) error {
				return b.SwiGLUOAI(out, s(a), s(c), 1.702, 7)
			}},
		} {
			if !h.supports(e.op, tensor.F32) {
				continue
			}
			out := h.zeros(70, 6)
			h.check(e.name, ElementwiseNMSE, out, func(b backend.Backend, s func(pair) backend.Tensor) error { return e.run(b, s(out), s) })
		}
	}},
	{"copy", func(h *harness) {
		if !h.supports(backend.OpCopy, tensor.F32) {
			return
		}
		src := h.floats(96, 4, 1)
		dst := h.zeros(40, 8)
		// The odd halves of src's rows into a strided view of dst: both sides strided.
		from := pair{src.dut.Rowwise(24, 48, 24), src.ref.Rowwise(24, 48, 24)}
		to := pair{dst.dut.Columns(8, 24), dst.ref.Columns(8, 24)}
		h.check("copy between strided views", ElementwiseNMSE, dst, func(b backend.Backend, s func(pair) backend.Tensor) error {
			return b.Copy(s(to), s(from))
		})
	}},
	{"rope", func(h *harness) {
		if !h.supports(backend.OpRoPE, tensor.F32) {
			return
		}
		pos := []int32{0, 1, 7, 300}
		for _, r := range []tensor.RoPE{
			{Mode: tensor.RoPENormal, Dims: 64, Base: 10000, FreqScale: 1, AttnFactor: 1},
			{Mode: tensor.RoPENeoX, Dims: 64, Base: 1e6, FreqScale: 1, AttnFactor: 1},
			{Mode: tensor.RoPENeoX, Dims: 32, Offset: 64, Base: 10000, FreqScale: 0.25, ExtFactor: 1, AttnFactor: 1, BetaFast: 32, BetaSlow: 1, OrigCtx: 4096}, // partial, YaRN
		} {
			x := h.floats(96, len(pos)*2, 1) // two heads of 96 per token
			h.check(fmt.Sprintf("rope mode %d, %d dims at %d", r.Mode, r.Dims, r.Offset), ElementwiseNMSE, x, func(b backend.Backend, s func(pair) backend.Tensor) error {
				return b.RoPE(s(x), 96, &r, pos)
			})
		}
	}},
	{"attention", func(h *harness) {
		for _, c := range []struct {
			name             string
			cache            tensor.Type
			heads, kvHeads   int
			dim, vDim        int
			tokens, past     int
			window           int
			sinks, valuesInK bool
		}{
			{"GQA, F16 cache", tensor.F16, 8, 2, 64, 64, 3, 20, 0, false, false},
			{"one token, Q8_0 cache", tensor.Q8_0, 4, 4, 64, 64, 1, 40, 0, false, false},
			{"sliding window and sinks", tensor.F16, 4, 2, 64, 64, 5, 30, 8, true, false},
			{"MLA: values inside the keys", tensor.F16, 4, 1, 96, 64, 2, 10, 0, false, true},
		} {
			if !h.supports(backend.OpSetRows, c.cache) || !h.supports(backend.OpAttention, c.cache) {
				continue
			}
			const cells = 256
			kCols := c.kvHeads * c.dim
			kc := h.put(c.cache, kCols, cells, nil)
			vc := kc
			if !c.valuesInK {
				vc = h.put(c.cache, c.kvHeads*c.vDim, cells, nil)
			}
			n := c.past + c.tokens
			keys, values := h.floats(kCols, n, 1), h.floats(c.kvHeads*c.vDim, n, 1)
			// Fill the cache through set-rows, then compare what was stored.
			stored := func(b backend.Backend, s func(pair) backend.Tensor) error {
				if err := b.SetRows(s(kc), 0, s(keys)); err != nil {
					return err
				}
				if c.valuesInK {
					return nil
				}
				return b.SetRows(s(vc), 0, s(values))
			}
			if err := stored(h.dut, func(p pair) backend.Tensor { return p.dut }); err != nil {
				h.t.Errorf("%s: set-rows on %s: %v", c.name, h.dut.Device().Name, err)
				continue
			}
			if err := stored(h.ref, func(p pair) backend.Tensor { return p.ref }); err != nil {
				h.t.Fatal(err)
			}
			v := vc
			if c.valuesInK {
				v = pair{kc.dut.Columns(0, c.vDim), kc.ref.Columns(0, c.vDim)}
			}
			q := h.floats(c.dim, c.tokens*c.heads, 1)
			var sinks pair
			if c.sinks {
				sinks = h.floats(c.heads, 1, 1)
			}
			pos := make([]int32, c.tokens)
			for i := range pos {
				pos[i] = int32(c.past + i)
			}
			out := h.zeros(c.vDim, c.tokens*c.heads)
			p := tensor.AttnParams{Scale: 1 / float32(math.Sqrt(float64(c.dim))), Window: c.window, Numerics: tensor.AttnPrecise}
			h.check("attention, "+c.name, ProductNMSE, out, func(b backend.Backend, s func(pair) backend.Tensor) error {
				var st backend.Tensor
				if c.sinks {
					st = s(sinks)
				}
				return b.Attention(s(out), s(q), c.heads, pos, s(kc), s(v), st, cells, p)
			})
		}
	}},
	{"route", func(h *harness) {
		if !h.supports(backend.OpRoute, tensor.F32) {
			return
		}
		for _, c := range []struct {
			name string
			cfg  tensor.RouterConfig
			bias bool
		}{
			{"softmax, renormalised", tensor.RouterConfig{Experts: 16, Used: 4, Gating: tensor.GatingSoftmax, NormWeights: true}, false},
			{"sigmoid, bias, groups, scale", tensor.RouterConfig{Experts: 32, Used: 8, Gating: tensor.GatingSigmoid, NormWeights: true, Scale: 2.5, Groups: 8, GroupsUsed: 4}, true},
			{"softmax over the selected", tensor.RouterConfig{Experts: 16, Used: 4, Gating: tensor.GatingSoftmaxWeight}, false},
			{"smart expert reduction", tensor.RouterConfig{Experts: 16, Used: 6, Gating: tensor.GatingSoftmax, NormWeights: true, SER: tensor.SER{MinExperts: 2, Threshold: 0.6}}, false},
		} {
			const n = 5
			logits := h.floats(c.cfg.Experts, n, 2)
			var bias pair
			if c.bias {
				bias = h.floats(c.cfg.Experts, 1, 0.1)
			}
			ids := h.put(tensor.I32, c.cfg.Used, n, nil)
			weights := h.zeros(c.cfg.Used, n)
			h.check("route, "+c.name, ElementwiseNMSE, weights, func(b backend.Backend, s func(pair) backend.Tensor) error {
				var bt backend.Tensor
				if c.bias {
					bt = s(bias)
				}
				return b.Route(s(ids), s(weights), s(logits), bt, c.cfg)
			})
			got, want := h.readIDs(h.dut, ids.dut), h.readIDs(h.ref, ids.ref)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				h.t.Errorf("route, %s: experts %v, the CPU's %v", c.name, got, want)
			}
		}
	}},
	{"add-id and weighted sum", func(h *harness) {
		const n, k, cols, experts = 4, 3, 48, 5
		ids := h.ids(k, []int32{0, 4, -1, 2, 2, 1, 3, -1, 0, 4, 1, 2})
		if h.supports(backend.OpAddID, tensor.F32) {
			x, bias := h.floats(cols, n*k, 1), h.floats(cols, experts, 1)
			h.check("add-id", ElementwiseNMSE, x, func(b backend.Backend, s func(pair) backend.Tensor) error {
				return b.AddID(s(x), s(bias), s(ids))
			})
		}
		if h.supports(backend.OpWeightedSum, tensor.F32) {
			y, w, out := h.floats(cols, n*k, 1), h.floats(k, n, 1), h.zeros(cols, n)
			h.check("weighted sum", ElementwiseNMSE, out, func(b backend.Backend, s func(pair) backend.Tensor) error {
				return b.WeightedSum(s(out), s(y), s(w), k)
			})
		}
	}},
	{"gated delta net", func(h *harness) {
		const taps, dim, kHeads, vHeads, n = 4, 16, 2, 4, 3
		channels := 2*kHeads*dim + vHeads*dim
		if h.supports(backend.OpCausalConv, tensor.F32) {
			x, state, w, out := h.floats(channels, n, 1), h.floats((taps-1)*channels, 1, 1), h.floats(channels, taps, 0.5), h.zeros(channels, n)
			h.check("causal conv", ElementwiseNMSE, out, func(b backend.Backend, s func(pair) backend.Tensor) error {
				return b.CausalConv(s(out), s(x), s(state), s(w))
			})
		}
		if h.supports(backend.OpGatedDeltaRule, tensor.F32) {
			qkv := h.floats(channels, n, 0.3)
			decay, beta := h.floats(vHeads, n, 0.2), h.floats(vHeads, n, 0.5)
			states, out := h.floats(vHeads*dim*dim, 1, 0.1), h.zeros(vHeads*dim, n)
			h.check("gated delta rule", ProductNMSE, out, func(b backend.Backend, s func(pair) backend.Tensor) error {
				return b.GatedDeltaRule(s(out), s(qkv), s(decay), s(beta), s(states), tensor.DeltaRule{Dim: dim, KHeads: kHeads, VHeads: vHeads, Stride: channels})
			})
		}
	}},
	{"operands of another backend", func(h *harness) {
		// An operand of the reference backend given to the backend under test is an
		// error naming the devices, never a silent copy or a panic.
		x := h.floats(16, 2, 1)
		out := h.zeros(16, 2)
		if h.dut.Device().Name == h.ref.Device().Name {
			return
		}
		h.ran++
		if err := h.dut.Copy(out.dut, x.ref); err == nil || !strings.Contains(err.Error(), h.ref.Device().Name) {
			h.t.Errorf("an operand on %s: %v", h.ref.Device().Name, err)
		}
		if err := h.dut.Set(out.dut, make([]byte, 3)); err == nil {
			h.t.Error("Set of 3 bytes into a tensor of 128 accepted")
		}
		if err := h.dut.Get(make([]byte, 3), out.dut); err == nil {
			h.t.Error("Get of a tensor of 128 bytes into 3 accepted")
		}
	}},
}

// pick is the weight of backend b.
func pick(b backend.Backend, h *harness, dut, ref backend.Weight) backend.Weight {
	if b == h.dut {
		return dut
	}
	return ref
}

// readIDs copies an I32 tensor back.
func (h *harness) readIDs(b backend.Backend, x backend.Tensor) []int32 {
	h.t.Helper()
	out := make([]int32, x.Elements())
	if err := b.Get(i32Bytes(out), x); err != nil {
		h.t.Fatal(err)
	}
	if err := b.Synchronize(); err != nil {
		h.t.Fatal(err)
	}
	return out
}
