package backendtest

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/tensor"
)

// The contract around the operations: copies to and from the host, allocation, loading,
// operands of other backends, crossings between devices.

func apiSuite(s *suite, t *testing.T) {
	t.Run("set-get", func(t *testing.T) { setGet(s, t) })
	t.Run("alloc-zeroed", func(t *testing.T) { allocZeroed(s, t) })
	t.Run("load", func(t *testing.T) { load(s, t) })
	t.Run("foreign-operands", func(t *testing.T) { foreignOperands(s, t) })
	t.Run("copy-between-devices", func(t *testing.T) { crossings(s, t) })
}

// open makes a backend under test that the test closes.
func (s *suite) open(t *testing.T) backend.Backend {
	t.Helper()
	b := s.newBackend(t)
	if b == nil {
		t.Fatal("newBackend returned nil")
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

func alloc(t *testing.T, b backend.Backend, size int64) backend.Buffer {
	t.Helper()
	buf, err := b.Alloc(size)
	if err != nil {
		t.Fatalf("%s: Alloc(%d): %v", b.Device().Name, size, err)
	}
	return buf
}

func newTensor(t *testing.T, buf backend.Buffer, off int64, typ tensor.Type, cols, rows int) backend.Tensor {
	t.Helper()
	x, err := backend.NewTensor(buf, off, typ, cols, rows)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// get reads a contiguous tensor back to the host.
func get(t *testing.T, b backend.Backend, x backend.Tensor) []byte {
	t.Helper()
	out := make([]byte, x.Bytes())
	if err := b.Get(out, x); err != nil {
		t.Fatalf("%s: Get of %s: %v", b.Device().Name, x, err)
	}
	if err := b.Synchronize(); err != nil {
		t.Fatalf("%s: Synchronize: %v", b.Device().Name, err)
	}
	return out
}

// refused checks that f returns an error, and does not panic.
func refused(t *testing.T, what string, f func() error) {
	t.Helper()
	if err := protect(f); err == nil {
		t.Errorf("%s: no error", what)
	} else if strings.HasPrefix(err.Error(), "panic: ") {
		t.Errorf("%s: %v", what, err)
	}
}

// setGet: bytes go in and come back unchanged at an offset; a host slice of the wrong size,
// a view past the end of its buffer and a tensor of another backend are errors.
func setGet(s *suite, t *testing.T) {
	b := s.open(t)
	buf := alloc(t, b, 256)
	x := newTensor(t, buf, 16, tensor.F32, 8, 3)
	data := make([]byte, x.Bytes())
	for i := range data {
		data[i] = byte(i*37 + 11)
	}
	if err := b.Set(x, data); err != nil {
		t.Fatalf("Set: %v", err)
	}
	if got := get(t, b, x); !bytes.Equal(got, data) {
		t.Errorf("Get after Set: %v, want %v", got, data)
	}
	if got := get(t, b, newTensor(t, buf, 0, tensor.F32, 4, 1)); !bytes.Equal(got, make([]byte, 16)) {
		t.Errorf("Set wrote before its tensor: %v", got)
	}
	refused(t, "Set of one byte too few", func() error { return b.Set(x, data[:len(data)-1]) })
	refused(t, "Set of one byte too many", func() error { return b.Set(x, append(data, 0)) })
	refused(t, "Get into one byte too few", func() error { return b.Get(make([]byte, len(data)-1), x) })
	refused(t, "Get into one byte too many", func() error { return b.Get(make([]byte, len(data)+1), x) })
	past := backend.Tensor{Buf: buf, Off: 240, Type: tensor.F32, Cols: 8, Rows: 1, Stride: 32}
	refused(t, "Set of a view past the end of its buffer", func() error { return b.Set(past, make([]byte, 32)) })
	refused(t, "Get of a view past the end of its buffer", func() error { return b.Get(make([]byte, 32), past) })
	for _, other := range []backend.Backend{s.ref, s.open(t)} {
		y := newTensor(t, alloc(t, other, 256), 16, tensor.F32, 8, 3)
		refused(t, "Set of a tensor of another backend", func() error { return b.Set(y, data) })
		refused(t, "Get of a tensor of another backend", func() error { return b.Get(make([]byte, len(data)), y) })
	}
	if err := b.Synchronize(); err != nil {
		t.Errorf("Synchronize after refused copies: %v", err)
	}
}

// allocZeroed: new buffers read as zeros, also where freed memory may be reused.
func allocZeroed(s *suite, t *testing.T) {
	b := s.open(t)
	for _, size := range []int64{4, 1000, 1 << 20} {
		buf := alloc(t, b, size)
		if buf.Size() != size {
			t.Errorf("Alloc(%d): a buffer of %d bytes", size, buf.Size())
		}
		if buf.Device() != b.Device().Name {
			t.Errorf("Alloc: a buffer of %q on %q", buf.Device(), b.Device().Name)
		}
		x := newTensor(t, buf, 0, tensor.F32, int(size/4), 1)
		if got := get(t, b, x); !bytes.Equal(got, make([]byte, size)) {
			t.Errorf("Alloc(%d): not zeroed", size)
		}
		ones := bytes.Repeat([]byte{0xA5}, int(size))
		if err := b.Set(x, ones); err != nil {
			t.Fatal(err)
		}
	}
}

// load: a weight's description is the one it was loaded with; the wrong number of bytes is
// an error naming the tensor.
func load(s *suite, t *testing.T) {
	b := s.open(t)
	if !b.Supports(backend.OpMatMul, tensor.F32) && !b.Supports(backend.OpGetRows, tensor.F32) {
		t.Skip("no operation on F32 weights")
	}
	for _, shape := range [][]int64{{32, 4}, {32, 4, 3}} {
		n := 4 * shape[0] * shape[1]
		if len(shape) == 3 {
			n *= shape[2]
		}
		w, err := b.Load("blk.7.ffn_up.weight", tensor.F32, shape, make([]byte, n))
		if err != nil {
			t.Fatalf("Load %v: %v", shape, err)
		}
		experts := 1
		if len(shape) == 3 {
			experts = int(shape[2])
		}
		if w.Name() != "blk.7.ffn_up.weight" || w.Type() != tensor.F32 || w.Cols() != int(shape[0]) || w.Rows() != int(shape[1]) || w.Experts() != experts {
			t.Errorf("Load %v: weight %s %s %d×%d×%d", shape, w.Name(), w.Type(), w.Cols(), w.Rows(), w.Experts())
		}
		for _, m := range []int64{n - 4, n + 4} {
			_, err := b.Load("blk.7.ffn_down.weight", tensor.F32, shape, make([]byte, m))
			if err == nil || !strings.Contains(err.Error(), "blk.7.ffn_down.weight") {
				t.Errorf("Load %v of %d bytes instead of %d: %v, want an error naming the tensor", shape, m, n, err)
			}
		}
	}
}

// crossings: backend.Copy between the backend and the host (the reference CPU) both ways,
// and between two instances of the backend.
func crossings(s *suite, t *testing.T) {
	a, a2 := s.open(t), s.open(t)
	const cols, rows = 37, 5
	data := make([]byte, 4*cols*rows)
	for i := range data {
		data[i] = byte(i*13 + 7)
	}
	on := func(b backend.Backend) backend.Tensor {
		return newTensor(t, alloc(t, b, 4*cols*rows+64), 32, tensor.F32, cols, rows)
	}
	host, devA, devA2, back := on(s.ref), on(a), on(a2), on(s.ref)
	if err := s.ref.Set(host, data); err != nil {
		t.Fatal(err)
	}
	var staging []byte
	for _, step := range []struct {
		name     string
		to       backend.Backend
		dst      backend.Tensor
		from     backend.Backend
		src      backend.Tensor
		readBack backend.Backend
	}{
		{"host to device", a, devA, s.ref, host, a},
		{"device to device", a2, devA2, a, devA, a2},
		{"device to host", s.ref, back, a2, devA2, s.ref},
	} {
		if err := backend.Copy(step.to, step.dst, step.from, step.src, &staging); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		// A copy out of a device has arrived after that device's Synchronize (Copy's
		// contract), not before: a GPU may hold it in a graph until then.
		if err := step.from.Synchronize(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if got := get(t, step.readBack, step.dst); !bytes.Equal(got, data) {
			t.Errorf("%s: the bytes changed", step.name)
		}
	}
	wrong := newTensor(t, alloc(t, a, 4*cols*rows), 0, tensor.F32, rows, cols)
	refused(t, "Copy into a tensor of another shape", func() error { return backend.Copy(a, wrong, s.ref, host, &staging) })
}

// apiCall is one valid call of an operation, its operands described by shape.
type apiCall struct {
	name    string
	op      backend.Op
	typ     tensor.Type // what Supports is asked about
	tensors []operandShape
	weights [][]int64 // F32 weights' shapes
	do      func(b backend.Backend, x []backend.Tensor, w []backend.Weight) error
}

type operandShape struct {
	typ        tensor.Type
	cols, rows int
}

func f32(cols, rows int) operandShape { return operandShape{tensor.F32, cols, rows} }
func i32(cols, rows int) operandShape { return operandShape{tensor.I32, cols, rows} }

var testRoPE = tensor.RoPE{Mode: tensor.RoPENeoX, Dims: 64, Base: 10000, FreqScale: 1, AttnFactor: 1}

var apiCalls = []apiCall{
	{"get-rows", backend.OpGetRows, tensor.F32, []operandShape{f32(32, 2)}, [][]int64{{32, 4}},
		func(b backend.Backend, x []backend.Tensor, w []backend.Weight) error {
			return b.GetRows(x[0], w[0], []int32{0, 3})
		}},
	{"mul-mat", backend.OpMatMul, tensor.F32, []operandShape{f32(4, 2), f32(32, 2)}, [][]int64{{32, 4}},
		func(b backend.Backend, x []backend.Tensor, w []backend.Weight) error {
			return b.MatMul(x[0], w[0], x[1])
		}},
	{"mul-mats", backend.OpMatMul, tensor.F32, []operandShape{f32(4, 2), f32(4, 2), f32(32, 2)}, [][]int64{{32, 4}, {32, 4}},
		func(b backend.Backend, x []backend.Tensor, w []backend.Weight) error {
			return b.MatMuls(x[:2], w, x[2])
		}},
	{"mul-mat-id", backend.OpMulMatID, tensor.F32, []operandShape{f32(4, 4), f32(32, 2), i32(2, 2)}, [][]int64{{32, 4, 3}},
		func(b backend.Backend, x []backend.Tensor, w []backend.Weight) error {
			return b.MulMatID(x[0], w[0], x[1], x[2], 2)
		}},
	{"mul-mat-ids", backend.OpMulMatID, tensor.F32, []operandShape{f32(4, 4), f32(4, 4), f32(32, 2), i32(2, 2)}, [][]int64{{32, 4, 3}, {32, 4, 3}},
		func(b backend.Backend, x []backend.Tensor, w []backend.Weight) error {
			return b.MulMatIDs(x[:2], w, x[2], x[3], 2)
		}},
	{"mul-mat-stack", backend.OpMatMulStack, tensor.F32, []operandShape{f32(4, 6), f32(32, 6)}, [][]int64{{32, 4, 3}},
		func(b backend.Backend, x []backend.Tensor, w []backend.Weight) error {
			return b.MatMulStack(x[0], w[0], x[1])
		}},
	{"rms-norm", backend.OpRMSNorm, tensor.F32, []operandShape{f32(32, 2), f32(32, 2), f32(32, 1)}, nil,
		func(b backend.Backend, x []backend.Tensor, _ []backend.Weight) error {
			return b.RMSNorm(x[0], x[1], x[2], 1e-6)
		}},
	{"l2-norm", backend.OpL2Norm, tensor.F32, []operandShape{f32(32, 2)}, nil,
		func(b backend.Backend, x []backend.Tensor, _ []backend.Weight) error { return b.L2Norm(x[0], 1e-6) }},
	{"layer-norm", backend.OpLayerNorm, tensor.F32, []operandShape{f32(32, 2), f32(32, 1), f32(32, 1)}, nil,
		func(b backend.Backend, x []backend.Tensor, _ []backend.Weight) error {
			return b.LayerNorm(x[0], x[1], x[2], 1e-6)
		}},
	{"hadamard", backend.OpHadamard, tensor.F32, []operandShape{f32(32, 2)}, nil,
		func(b backend.Backend, x []backend.Tensor, _ []backend.Weight) error { return b.Hadamard(x[0]) }},
	{"add", backend.OpAdd, tensor.F32, []operandShape{f32(32, 2), f32(32, 2), f32(32, 1)}, nil,
		func(b backend.Backend, x []backend.Tensor, _ []backend.Weight) error { return b.Add(x[0], x[1], x[2]) }},
	{"mul", backend.OpMul, tensor.F32, []operandShape{f32(32, 2), f32(32, 2), f32(32, 2)}, nil,
		func(b backend.Backend, x []backend.Tensor, _ []backend.Weight) error { return b.Mul(x[0], x[1], x[2]) }},
	{"scale", backend.OpScale, tensor.F32, []operandShape{f32(32, 2), f32(32, 2)}, nil,
		func(b backend.Backend, x []backend.Tensor, _ []backend.Weight) error { return b.Scale(x[0], x[1], 2) }},
	{"scale-rows", backend.OpScale, tensor.F32, []operandShape{f32(32, 2), f32(32, 2), f32(1, 2)}, nil,
		func(b backend.Backend, x []backend.Tensor, _ []backend.Weight) error {
			return b.ScaleRows(x[0], x[1], x[2])
		}},
	{"unary", backend.OpUnary, tensor.F32, []operandShape{f32(32, 2), f32(32, 2)}, nil,
		func(b backend.Backend, x []backend.Tensor, _ []backend.Weight) error {
			return b.Unary(x[0], x[1], backend.SiLU)
		}},
	{"swiglu", backend.OpSwiGLU, tensor.F32, []operandShape{f32(32, 2), f32(32, 2), f32(32, 2)}, nil,
		func(b backend.Backend, x []backend.Tensor, _ []backend.Weight) error {
			return b.SwiGLU(x[0], x[1], x[2])
		}},
	{"swiglu-oai", backend.OpSwiGLU, tensor.F32, []operandShape{f32(32, 2), f32(32, 2), f32(32, 2)}, nil,
		func(b backend.Backend, x []backend.Tensor, _ []backend.Weight) error {
			return b.SwiGLUOAI(x[0], x[1], x[2], 1.702, 7)
		}},
	{"copy", backend.OpCopy, tensor.F32, []operandShape{f32(32, 2), f32(32, 2)}, nil,
		func(b backend.Backend, x []backend.Tensor, _ []backend.Weight) error { return b.Copy(x[0], x[1]) }},
	{"rope", backend.OpRoPE, tensor.F32, []operandShape{f32(64, 4)}, nil,
		func(b backend.Backend, x []backend.Tensor, _ []backend.Weight) error {
			r := testRoPE
			return b.RoPE(x[0], 64, &r, []int32{0, 1})
		}},
	{"set-rows", backend.OpSetRows, tensor.F32, []operandShape{f32(64, 8), f32(64, 2)}, nil,
		func(b backend.Backend, x []backend.Tensor, _ []backend.Weight) error { return b.SetRows(x[0], 2, x[1]) }},
	{"attention", backend.OpAttention, tensor.F32, []operandShape{f32(64, 4), f32(64, 4), f32(64, 8), f32(64, 8), f32(2, 1)}, nil,
		func(b backend.Backend, x []backend.Tensor, _ []backend.Weight) error {
			return b.Attention(x[0], x[1], 2, []int32{4, 5}, x[2], x[3], x[4], 6, tensor.AttnParams{Scale: 0.125})
		}},
	{"route", backend.OpRoute, tensor.F32, []operandShape{i32(2, 2), f32(2, 2), f32(8, 2), f32(8, 1)}, nil,
		func(b backend.Backend, x []backend.Tensor, _ []backend.Weight) error {
			return b.Route(x[0], x[1], x[2], x[3], tensor.RouterConfig{Experts: 8, Used: 2, Gating: tensor.GatingSigmoid, NormWeights: true})
		}},
	{"add-id", backend.OpAddID, tensor.F32, []operandShape{f32(32, 4), f32(32, 8), i32(2, 2)}, nil,
		func(b backend.Backend, x []backend.Tensor, _ []backend.Weight) error {
			return b.AddID(x[0], x[1], x[2])
		}},
	{"indexer-scores", backend.OpIndexerScores, tensor.F32, []operandShape{f32(8, 2), f32(32, 4), f32(32, 8), f32(2, 2)}, nil,
		func(b backend.Backend, x []backend.Tensor, _ []backend.Weight) error {
			return b.IndexerScores(x[0], x[1], 2, []int32{7, 7}, x[2], x[3], 8)
		}},
	{"map-ids", backend.OpMapIDs, tensor.I32, []operandShape{i32(2, 2), i32(2, 2), i32(8, 1)}, nil,
		func(b backend.Backend, x []backend.Tensor, _ []backend.Weight) error {
			return b.MapIDs(x[0], x[1], x[2])
		}},
	{"weighted-sum", backend.OpWeightedSum, tensor.F32, []operandShape{f32(32, 2), f32(32, 4), f32(2, 2)}, nil,
		func(b backend.Backend, x []backend.Tensor, _ []backend.Weight) error {
			return b.WeightedSum(x[0], x[1], x[2], 2)
		}},
	{"causal-conv", backend.OpCausalConv, tensor.F32, []operandShape{f32(16, 3), f32(16, 3), f32(3, 16), f32(16, 4)}, nil,
		func(b backend.Backend, x []backend.Tensor, _ []backend.Weight) error {
			return b.CausalConv(x[0], x[1], x[2], x[3])
		}},
	{"gated-delta-rule", backend.OpGatedDeltaRule, tensor.F32, []operandShape{f32(32, 2), f32(64, 2), f32(2, 2), f32(2, 2), f32(256, 2)}, nil,
		func(b backend.Backend, x []backend.Tensor, _ []backend.Weight) error {
			return b.GatedDeltaRule(x[0], x[1], x[2], x[3], x[4], tensor.DeltaRule{Dim: 16, KHeads: 1, VHeads: 2, Stride: 64})
		}},
}

// operands allocates a call's operands (zeros) and loads its weights (zeros) on b.
func (ac apiCall) operands(t *testing.T, b backend.Backend) ([]backend.Tensor, []backend.Weight) {
	t.Helper()
	xs := make([]backend.Tensor, len(ac.tensors))
	for i, sh := range ac.tensors {
		rb, _ := sh.typ.RowBytes(int64(sh.cols))
		xs[i] = newTensor(t, alloc(t, b, rb*int64(sh.rows)), 0, sh.typ, sh.cols, sh.rows)
	}
	ws := make([]backend.Weight, len(ac.weights))
	for i, shape := range ac.weights {
		n := int64(4)
		for _, d := range shape {
			n *= d
		}
		w, err := b.Load(fmt.Sprintf("blk.0.w%d.weight", i), tensor.F32, shape, make([]byte, n))
		if err != nil {
			t.Fatalf("%s: Load: %v", b.Device().Name, err)
		}
		ws[i] = w
	}
	return xs, ws
}

// foreignOperands: every operand of every operation, in turn, is replaced by the same
// tensor (or weight) of another backend — the reference, a second instance of the backend
// under test — and the call must be refused with an error. The valid call succeeds before
// and after.
func foreignOperands(s *suite, t *testing.T) {
	b := s.open(t)
	others := []backend.Backend{s.ref, s.open(t)}
	for _, ac := range apiCalls {
		t.Run(ac.name, func(t *testing.T) {
			if !b.Supports(ac.op, ac.typ) {
				t.Skipf("%s not supported", ac.op)
			}
			xs, ws := ac.operands(t, b)
			valid := func(when string) {
				if err := protect(func() error { return ac.do(b, xs, ws) }); err != nil {
					t.Fatalf("the valid call %s: %v", when, err)
				}
			}
			valid("first")
			for k, other := range others {
				who := []string{"the reference", "a second instance"}[k]
				oxs, ows := ac.operands(t, other)
				for i := range xs {
					mixed := append([]backend.Tensor(nil), xs...)
					mixed[i] = oxs[i]
					refused(t, fmt.Sprintf("tensor operand %d on %s", i, who), func() error { return ac.do(b, mixed, ws) })
				}
				for i := range ws {
					mixed := append([]backend.Weight(nil), ws...)
					mixed[i] = ows[i]
					refused(t, fmt.Sprintf("weight operand %d on %s", i, who), func() error { return ac.do(b, xs, mixed) })
				}
			}
			valid("after the refusals")
			if err := b.Synchronize(); err != nil {
				t.Errorf("Synchronize: %v", err)
			}
		})
	}
}
