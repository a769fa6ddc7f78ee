//go:build cuda

package moe

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/backend/cpu"
	"github.com/moerun/moerun/backend/cuda"
	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/tensor"
)

// diffBackend is a GPU backend that checks each operation against the CPU backend on the
// same inputs: before the GPU runs it, every buffer the operation touches is copied to a
// host mirror, the CPU backend runs it on the mirrors, and the two outputs are compared.
// The errors are the operation's own (each starts from the GPU's inputs), so the first
// operation whose output is far from the CPU's is where a GPU run leaves the CPU's path.
type diffBackend struct {
	backend.Backend // the GPU
	ref             *cpu.Backend
	mirrors         map[backend.Buffer]backend.Buffer
	calls           int
	worst           map[string]*opDiff
	log             func(string)
	threshold       float64
	useCPU          string // operations whose CPU results replace the GPU's (a name prefix)
}

// opDiff is the largest difference an operation showed, relative to its output's scale.
type opDiff struct {
	calls            int
	rel, abs, refMax float64
	call             int
	what             string
}

// dualWeight is a weight loaded on both backends.
type dualWeight struct {
	backend.Weight // the GPU's
	ref            backend.Weight
}

func (d *diffBackend) Load(name string, t tensor.Type, shape []int64, data []byte) (backend.Weight, error) {
	g, err := d.Backend.Load(name, t, shape, data)
	if err != nil {
		return nil, err
	}
	c, err := d.ref.Load(name, t, shape, data)
	if err != nil {
		return nil, err
	}
	return &dualWeight{g, c}, nil
}

func gw(w backend.Weight) backend.Weight { return w.(*dualWeight).Weight }
func cw(w backend.Weight) backend.Weight { return w.(*dualWeight).ref }
func gws(ws []backend.Weight) []backend.Weight {
	out := make([]backend.Weight, len(ws))
	for i, w := range ws {
		out[i] = gw(w)
	}
	return out
}
func cws(ws []backend.Weight) []backend.Weight {
	out := make([]backend.Weight, len(ws))
	for i, w := range ws {
		out[i] = cw(w)
	}
	return out
}

// whole is all of buf as one row of bytes.
func whole(buf backend.Buffer) backend.Tensor {
	return backend.Tensor{Buf: buf, Type: tensor.I8, Cols: int(buf.Size()), Rows: 1, Stride: buf.Size()}
}

// fetch copies buf's bytes off the GPU.
func (d *diffBackend) fetch(buf backend.Buffer) []byte {
	out := make([]byte, buf.Size())
	if err := d.Backend.Get(out, whole(buf)); err != nil {
		panic(err)
	}
	if err := d.Backend.Synchronize(); err != nil {
		panic(err)
	}
	return out
}

// mirror is x on its host mirror, refreshed from the GPU.
func (d *diffBackend) mirror(x backend.Tensor) backend.Tensor {
	if !x.Valid() || x.Buf.Device() != d.Device().Name {
		return x
	}
	m, ok := d.mirrors[x.Buf]
	if !ok {
		var err error
		if m, err = d.ref.Alloc(x.Buf.Size()); err != nil {
			panic(err)
		}
		d.mirrors[x.Buf] = m
	}
	copy(m.Host(), d.fetch(x.Buf))
	x.Buf = m
	return x
}

// check runs an operation on both backends and compares outs.
func (d *diffBackend) check(name string, outs, ins []backend.Tensor, gpu func() error, ref func(outs, ins []backend.Tensor) error) error {
	d.calls++
	mo, mi := make([]backend.Tensor, len(outs)), make([]backend.Tensor, len(ins))
	for i, x := range ins {
		mi[i] = d.mirror(x)
	}
	for i, x := range outs {
		mo[i] = d.mirror(x)
	}
	refErr := ref(mo, mi)
	if err := gpu(); err != nil {
		return err
	}
	if refErr != nil {
		d.log(fmt.Sprintf("call %d %s: the CPU refuses: %v", d.calls, name, refErr))
		return nil
	}
	for i, x := range outs {
		if x.Buf.Device() != d.Device().Name {
			continue
		}
		got := d.fetch(x.Buf)
		want := mo[i].Buf.Host()
		d.compare(fmt.Sprintf("%s out %d", name, i), x, got, want)
		if d.useCPU != "" && strings.HasPrefix(name, d.useCPU) {
			// The CPU's result goes on: how much of the run's distance this operation's
			// rounding makes.
			if err := d.Backend.Set(whole(x.Buf), want); err != nil {
				return err
			}
		}
	}
	return nil
}

func (d *diffBackend) compare(name string, x backend.Tensor, got, want []byte) {
	var maxAbs, refMax, worstG, worstW float64
	worstAt, mismatches := -1, 0
	rb := x.RowBytes()
	for r := 0; r < x.Rows; r++ {
		off := x.Off + int64(r)*x.Stride
		g, w := got[off:off+rb], want[off:off+rb]
		switch x.Type {
		case tensor.F32, tensor.F16:
			size := 4
			if x.Type == tensor.F16 {
				size = 2
			}
			for c := 0; c < x.Cols; c++ {
				var gv, wv float64
				if size == 4 {
					gv = float64(math.Float32frombits(binary.LittleEndian.Uint32(g[c*4:])))
					wv = float64(math.Float32frombits(binary.LittleEndian.Uint32(w[c*4:])))
				} else {
					gv = float64(tensor.F16ToF32(binary.LittleEndian.Uint16(g[c*2:])))
					wv = float64(tensor.F16ToF32(binary.LittleEndian.Uint16(w[c*2:])))
				}
				if math.IsNaN(gv) != math.IsNaN(wv) {
					mismatches++
					continue
				}
				refMax = max(refMax, math.Abs(wv))
				if diff := math.Abs(gv - wv); diff > maxAbs {
					maxAbs, worstAt, worstG, worstW = diff, r*x.Cols+c, gv, wv
				}
			}
		default:
			for j := range g {
				if g[j] != w[j] {
					mismatches++
				}
			}
		}
	}
	rel := maxAbs / max(refMax, 1e-30)
	if mismatches > 0 {
		rel = math.Inf(1)
	}
	o := d.worst[name]
	if o == nil {
		o = &opDiff{}
		d.worst[name] = o
	}
	o.calls++
	what := fmt.Sprintf("%s: max |Δ| %.3g at %d (gpu %.6g cpu %.6g), ref max %.3g, %d mismatches", x, maxAbs, worstAt, worstG, worstW, refMax, mismatches)
	if rel > o.rel {
		o.rel, o.abs, o.refMax, o.call, o.what = rel, maxAbs, refMax, d.calls, what
	}
	if rel > d.threshold {
		d.log(fmt.Sprintf("call %d %s: rel %.3g %s", d.calls, name, rel, what))
	}
}

func (d *diffBackend) report(t *testing.T) {
	names := make([]string, 0, len(d.worst))
	for n := range d.worst {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int { return cmp.Compare(d.worst[b].rel, d.worst[a].rel) })
	for _, n := range names {
		o := d.worst[n]
		t.Logf("%-28s %6d calls, worst rel %.3g (call %d): %s", n, o.calls, o.rel, o.call, o.what)
	}
}

type ts = []backend.Tensor

func (d *diffBackend) GetRows(dst backend.Tensor, w backend.Weight, ids []int32) error {
	return d.check("get-rows "+w.Name(), ts{dst}, nil, func() error { return d.Backend.GetRows(dst, gw(w), ids) },
		func(o, _ ts) error { return d.ref.GetRows(o[0], cw(w), ids) })
}
func (d *diffBackend) MatMul(dst backend.Tensor, w backend.Weight, x backend.Tensor) error {
	return d.check("matmul "+w.Type().String(), ts{dst}, ts{x}, func() error { return d.Backend.MatMul(dst, gw(w), x) },
		func(o, i ts) error { return d.ref.MatMul(o[0], cw(w), i[0]) })
}
func (d *diffBackend) MatMuls(dsts []backend.Tensor, ws []backend.Weight, x backend.Tensor) error {
	return d.check("matmuls "+ws[0].Type().String(), dsts, ts{x}, func() error { return d.Backend.MatMuls(dsts, gws(ws), x) },
		func(o, i ts) error { return d.ref.MatMuls(o, cws(ws), i[0]) })
}
func (d *diffBackend) MulMatID(dst backend.Tensor, w backend.Weight, x, ids backend.Tensor, k int) error {
	return d.check("mul-mat-id "+w.Type().String(), ts{dst}, ts{x, ids}, func() error { return d.Backend.MulMatID(dst, gw(w), x, ids, k) },
		func(o, i ts) error { return d.ref.MulMatID(o[0], cw(w), i[0], i[1], k) })
}
func (d *diffBackend) MulMatIDs(dsts []backend.Tensor, ws []backend.Weight, x, ids backend.Tensor, k int) error {
	return d.check("mul-mat-ids "+ws[0].Type().String(), dsts, ts{x, ids}, func() error { return d.Backend.MulMatIDs(dsts, gws(ws), x, ids, k) },
		func(o, i ts) error { return d.ref.MulMatIDs(o, cws(ws), i[0], i[1], k) })
}
func (d *diffBackend) MatMulStack(dst backend.Tensor, w backend.Weight, x backend.Tensor) error {
	return d.check("matmul-stack "+w.Type().String(), ts{dst}, ts{x}, func() error { return d.Backend.MatMulStack(dst, gw(w), x) },
		func(o, i ts) error { return d.ref.MatMulStack(o[0], cw(w), i[0]) })
}
func (d *diffBackend) RMSNorm(dst, x, w backend.Tensor, eps float32) error {
	return d.check("rms-norm", ts{dst}, ts{x, w}, func() error { return d.Backend.RMSNorm(dst, x, w, eps) },
		func(o, i ts) error { return d.ref.RMSNorm(o[0], i[0], i[1], eps) })
}
func (d *diffBackend) L2Norm(x backend.Tensor, eps float32) error {
	return d.check("l2-norm", ts{x}, nil, func() error { return d.Backend.L2Norm(x, eps) },
		func(o, _ ts) error { return d.ref.L2Norm(o[0], eps) })
}
func (d *diffBackend) Add(dst, a, b backend.Tensor) error {
	return d.check("add", ts{dst}, ts{a, b}, func() error { return d.Backend.Add(dst, a, b) },
		func(o, i ts) error { return d.ref.Add(o[0], i[0], i[1]) })
}
func (d *diffBackend) Mul(dst, a, b backend.Tensor) error {
	return d.check("mul", ts{dst}, ts{a, b}, func() error { return d.Backend.Mul(dst, a, b) },
		func(o, i ts) error { return d.ref.Mul(o[0], i[0], i[1]) })
}
func (d *diffBackend) Scale(dst, x backend.Tensor, s float32) error {
	return d.check("scale", ts{dst}, ts{x}, func() error { return d.Backend.Scale(dst, x, s) },
		func(o, i ts) error { return d.ref.Scale(o[0], i[0], s) })
}
func (d *diffBackend) ScaleRows(dst, x, s backend.Tensor) error {
	return d.check("scale-rows", ts{dst}, ts{x, s}, func() error { return d.Backend.ScaleRows(dst, x, s) },
		func(o, i ts) error { return d.ref.ScaleRows(o[0], i[0], i[1]) })
}
func (d *diffBackend) Unary(dst, x backend.Tensor, f backend.Unary) error {
	return d.check(fmt.Sprintf("unary %d", f), ts{dst}, ts{x}, func() error { return d.Backend.Unary(dst, x, f) },
		func(o, i ts) error { return d.ref.Unary(o[0], i[0], f) })
}
func (d *diffBackend) SwiGLU(dst, gate, up backend.Tensor) error {
	return d.check("swiglu", ts{dst}, ts{gate, up}, func() error { return d.Backend.SwiGLU(dst, gate, up) },
		func(o, i ts) error { return d.ref.SwiGLU(o[0], i[0], i[1]) })
}
func (d *diffBackend) SwiGLUOAI(dst, gate, up backend.Tensor, alpha, limit float32) error {
	return d.check("swiglu-oai", ts{dst}, ts{gate, up}, func() error { return d.Backend.SwiGLUOAI(dst, gate, up, alpha, limit) },
		func(o, i ts) error { return d.ref.SwiGLUOAI(o[0], i[0], i[1], alpha, limit) })
}
func (d *diffBackend) Copy(dst, src backend.Tensor) error {
	return d.check("copy", ts{dst}, ts{src}, func() error { return d.Backend.Copy(dst, src) },
		func(o, i ts) error { return d.ref.Copy(o[0], i[0]) })
}
func (d *diffBackend) RoPE(x backend.Tensor, rowLen int, r *tensor.RoPE, pos []int32) error {
	return d.check(fmt.Sprintf("rope dims %d", r.Dims), ts{x}, nil, func() error { return d.Backend.RoPE(x, rowLen, r, pos) },
		func(o, _ ts) error { return d.ref.RoPE(o[0], rowLen, r, pos) })
}
func (d *diffBackend) SetRows(dst backend.Tensor, first int, src backend.Tensor) error {
	return d.check("set-rows "+dst.Type.String(), ts{dst.Slice(first, first+src.Rows)}, ts{src},
		func() error { return d.Backend.SetRows(dst, first, src) },
		func(o, i ts) error { return d.ref.SetRows(d.mirror(dst), first, i[0]) })
}
func (d *diffBackend) Attention(dst, q backend.Tensor, heads int, pos []int32, k, v, sinks backend.Tensor, kvLen int, p tensor.AttnParams) error {
	name := fmt.Sprintf("attention dk %d dv %d n %d", q.Cols, dst.Cols, len(pos))
	return d.check(name, ts{dst}, ts{q, k, v, sinks}, func() error { return d.Backend.Attention(dst, q, heads, pos, k, v, sinks, kvLen, p) },
		func(o, i ts) error { return d.ref.Attention(o[0], i[0], heads, pos, i[1], i[2], i[3], kvLen, p) })
}
func (d *diffBackend) AddID(x, bias, ids backend.Tensor) error {
	return d.check("add-id", ts{x}, ts{bias, ids}, func() error { return d.Backend.AddID(x, bias, ids) },
		func(o, i ts) error { return d.ref.AddID(o[0], i[0], i[1]) })
}
func (d *diffBackend) WeightedSum(dst, y, w backend.Tensor, k int) error {
	return d.check("weighted-sum", ts{dst}, ts{y, w}, func() error { return d.Backend.WeightedSum(dst, y, w, k) },
		func(o, i ts) error { return d.ref.WeightedSum(o[0], i[0], i[1], k) })
}
func (d *diffBackend) Route(ids, weights, logits, bias backend.Tensor, r tensor.RouterConfig) error {
	return d.check("route", ts{ids, weights}, ts{logits, bias}, func() error { return d.Backend.Route(ids, weights, logits, bias, r) },
		func(o, i ts) error { return d.ref.Route(o[0], o[1], i[0], i[1], r) })
}

// TestCUDAOpDiff runs one golden model's prompts with -ngl 99 on the GPU, every operation
// checked against the CPU backend on the same inputs (diffBackend), and logs each kind of
// operation's largest difference: where a GPU run's gap to llama.cpp comes from (it found
// the exact activations of the quantized products, issue 31). A diagnostic, run by hand:
// MOERUN_CUDA_OPDIFF names the golden model, MOERUN_CUDA_OPDIFF_PROMPTS limits the prompts
// to the first n, and MOERUN_CUDA_OPDIFF_USECPU lets the CPU's results of the operations
// whose names start with it go on in place of the GPU's (how much of the final distance
// their rounding makes). The recurrent state's operations run on the host anyway and are
// not checked.
func TestCUDAOpDiff(t *testing.T) {
	model := os.Getenv("MOERUN_CUDA_OPDIFF")
	if model == "" {
		t.Skip("MOERUN_CUDA_OPDIFF names no golden model")
	}
	if err := cuda.Available(); err != nil {
		t.Skip(err)
	}
	gpu, host := cudaAndHost(t, 2)
	ref := cpu.New(cpu.Options{Pool: host.Pool()})
	defer ref.Close()
	d := &diffBackend{Backend: gpu, ref: ref, mirrors: map[backend.Buffer]backend.Buffer{},
		worst: map[string]*opDiff{}, threshold: 1e-2, useCPU: os.Getenv("MOERUN_CUDA_OPDIFF_USECPU")}
	logged := 0
	d.log = func(s string) {
		if logged < 60 {
			t.Log(s)
		}
		logged++
	}
	for _, gm := range goldenModels {
		if gm.golden != model {
			continue
		}
		f, err := gguf.Open(gm.path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		plan := placeModel(t, f, gpuPlacements[1].rules(t), []backend.Device{host.Device(), gpu.Device()})
		m, err := Load(f, plan, []backend.Backend{host, d})
		if err != nil {
			t.Fatal(err)
		}
		g := loadGolden(t, gm.golden)
		if n := os.Getenv("MOERUN_CUDA_OPDIFF_PROMPTS"); n != "" {
			var k int
			fmt.Sscan(n, &k)
			g.Prompts = g.Prompts[:k]
		}
		_, final, _, _ := teacherForced(t, &testModel{Model: m, file: f, pool: host.Pool()}, g, DefaultContextOptions())
		t.Logf("final max |Δ| %.3g", final.maxDiff)
		d.report(t)
	}
}
