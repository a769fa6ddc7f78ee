package backendtest

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/backend/cpu"
	"github.com/moerun/moerun/tensor"
)

// The bounds on the normalised mean squared error Σ(a−b)²/Σb² of a result a against the
// reference's b (test-backend-ops's).
const (
	// MatMulErr bounds the products: mul-mat, mul-mat-id, mul-mat-stack, attention.
	MatMulErr = 5e-4
	// SoftmaxErr bounds the router's weights (a softmax or sigmoid, normalised).
	SoftmaxErr = 1e-6
	// ElementErr bounds element-wise and row operations, lookups and conversions.
	ElementErr = 1e-7
)

// Options tune Run.
type Options struct {
	// Exact requires every result to have the reference's bits, not only to be within the
	// bounds: for backends that compute with the CPU's kernels (backend/sim, a second CPU
	// backend). Such a backend should compute on a pool of as many workers as the
	// reference's, since a decode step's attention over many positions is split by worker.
	Exact bool
	// Threads is the number of workers of the reference's pool; 0 means 1, which costs
	// least where the CPUs are few and gives results that do not depend on the machine.
	Threads int
}

// Run runs the conformance suite on the backends newBackend makes, as subtests of t named
// after the operations (backend.Op's String) and, under them, the type and shape of each
// case; a subtest "api" checks the contract around the operations. newBackend is called
// once per subtest of t (and a few more times where two instances are needed); Run closes
// every backend it returns. newBackend may call t.Skip.
func Run(t *testing.T, newBackend func(t *testing.T) backend.Backend, opts Options) {
	t.Helper()
	if opts.Threads <= 0 {
		opts.Threads = 1
	}
	pool := tensor.NewPool(opts.Threads)
	defer pool.Close()
	ref := cpu.New(cpu.Options{Pool: pool})
	defer ref.Close()
	s := &suite{opts: opts, newBackend: newBackend, ref: ref, refPool: pool}
	for _, op := range backend.AllOps() {
		run, ok := opSuites[op]
		if !ok {
			t.Errorf("%s: the suite has no cases for this operation", op)
			continue
		}
		t.Run(op.String(), func(t *testing.T) {
			e := s.env(t, op)
			defer e.close()
			run(e)
			e.report()
		})
	}
	t.Run("api", func(t *testing.T) { apiSuite(s, t) })
	if s.supported == 0 && s.unsupported > 0 {
		t.Errorf("the backend supports none of the %d (operation, type) pairs the suite tries: it checked nothing", s.unsupported)
	}
	t.Logf("%d (operation, type) pairs supported, %d not", s.supported, s.unsupported)
}

// opSuites are the cases of each operation.
var opSuites = map[backend.Op]func(*env){
	backend.OpGetRows:        getRowsSuite,
	backend.OpMatMul:         matMulSuite,
	backend.OpMulMatID:       mulMatIDSuite,
	backend.OpMatMulStack:    matMulStackSuite,
	backend.OpRMSNorm:        rmsNormSuite,
	backend.OpL2Norm:         l2NormSuite,
	backend.OpAdd:            addSuite,
	backend.OpMul:            mulSuite,
	backend.OpScale:          scaleSuite,
	backend.OpUnary:          unarySuite,
	backend.OpSwiGLU:         swiGLUSuite,
	backend.OpCopy:           copySuite,
	backend.OpRoPE:           ropeSuite,
	backend.OpSetRows:        setRowsSuite,
	backend.OpAttention:      attentionSuite,
	backend.OpRoute:          routeSuite,
	backend.OpAddID:          addIDSuite,
	backend.OpWeightedSum:    weightedSumSuite,
	backend.OpCausalConv:     causalConvSuite,
	backend.OpGatedDeltaRule: gatedDeltaRuleSuite,
	backend.OpMapIDs:         mapIDsSuite,
	backend.OpIndexerScores:  indexerScoresSuite,
	backend.OpLayerNorm:      layerNormSuite,
	backend.OpHadamard:       hadamardSuite,
}

// suite is one Run.
type suite struct {
	opts                   Options
	newBackend             func(*testing.T) backend.Backend
	ref                    *cpu.Backend // the reference where one instance does (api)
	refPool                *tensor.Pool // the references' workers
	supported, unsupported int          // (operation, type) pairs
}

// side picks the backend under test or the reference.
type side int

const (
	testSide side = iota
	refSide
)

// env is one operation's subtest: a fresh backend under test and the reference.
type env struct {
	s           *suite
	t           *testing.T
	op          backend.Op
	b           [2]backend.Backend
	unsupported []string
	noReference []string
}

func (s *suite) env(t *testing.T, op backend.Op) *env {
	t.Helper()
	b := s.newBackend(t)
	if b == nil {
		t.Fatal("newBackend returned nil")
	}
	return &env{s: s, t: t, op: op, b: [2]backend.Backend{b, s.ref}}
}

func (e *env) close() {
	if err := e.b[testSide].Close(); err != nil {
		e.t.Errorf("Close: %v", err)
	}
}

// supports reports whether the backend under test runs the operation with type typ (and
// the reference can check it), recording the answer.
func (e *env) supports(typ tensor.Type) bool {
	if !e.b[testSide].Supports(e.op, typ) {
		e.unsupported = append(e.unsupported, typ.String())
		e.s.unsupported++
		return false
	}
	if !e.b[refSide].Supports(e.op, typ) {
		e.noReference = append(e.noReference, typ.String())
		return false
	}
	e.s.supported++
	return true
}

func (e *env) report() {
	if len(e.unsupported) > 0 {
		e.t.Logf("skipped, not supported by %s: %s", e.b[testSide].Device().Name, strings.Join(e.unsupported, " "))
	}
	if len(e.noReference) > 0 {
		e.t.Logf("skipped, no reference on the CPU: %s", strings.Join(e.noReference, " "))
	}
}

// run runs one case as a subtest.
func (e *env) run(name string, f func(c *tcase)) {
	e.t.Run(name, func(t *testing.T) {
		h := fnv.New64a()
		h.Write([]byte(t.Name()))
		// A fresh reference for each case: its results do not depend on the calls before
		// (a cache of the CPU's, say RoPE's angles, that confused two calls would confuse
		// them on both sides), and what it allocated goes with it.
		ref := cpu.New(cpu.Options{Pool: e.s.refPool})
		defer ref.Close()
		c := &tcase{t: t, b: [2]backend.Backend{e.b[testSide], ref}, rng: rand.New(rand.NewPCG(0x5eed, h.Sum64())),
			exact: e.s.opts.Exact}
		f(c)
	})
}

// tcase is one case: its buffers on both backends, the outputs to compare.
type tcase struct {
	t     *testing.T
	b     [2]backend.Backend // under test, reference
	rng   *rand.Rand
	bufs  []*hostBuf
	exact bool
}

// guard is the number of bytes before and after each tensor in its buffer, which the
// operations must leave alone.
const guard = 64

// hostBuf is a buffer allocated on both backends with the same initial bytes.
type hostBuf struct {
	name  string
	init  []byte
	whole [2]backend.Tensor // the whole buffer, as F32, for Set and Get
	outs  []output
}

// output is a view whose values are compared.
type output struct {
	name   string
	x      Tensor
	maxErr float64
}

// Tensor is a tensor on both backends: the same view of a buffer of each.
type Tensor struct {
	name string
	buf  *hostBuf
	v    [2]backend.Tensor
}

func (x Tensor) on(s side) backend.Tensor { return x.v[s] }

func (x Tensor) each(f func(backend.Tensor) backend.Tensor) Tensor {
	if x.buf != nil {
		x.v[0], x.v[1] = f(x.v[0]), f(x.v[1])
	}
	return x
}

// Columns, Slice and Rowwise are backend.Tensor's on both sides.
func (x Tensor) Columns(from, n int) Tensor {
	return x.each(func(v backend.Tensor) backend.Tensor { return v.Columns(from, n) })
}

func (x Tensor) Slice(from, to int) Tensor {
	return x.each(func(v backend.Tensor) backend.Tensor { return v.Slice(from, to) })
}

func (x Tensor) Rowwise(cols, stride, offset int) Tensor {
	return x.each(func(v backend.Tensor) backend.Tensor { return v.Rowwise(cols, stride, offset) })
}

// weight is a weight loaded on both backends.
type weight [2]backend.Weight

// buffer allocates a buffer holding data between guards on both backends.
func (c *tcase) buffer(name string, data []byte) *hostBuf {
	c.t.Helper()
	size := (guard + len(data) + guard + 3) &^ 3
	init := make([]byte, size)
	fill := func(b []byte) {
		for i := range b {
			b[i] = byte(c.rng.Uint32())
		}
	}
	fill(init[:guard])
	copy(init[guard:], data)
	fill(init[guard+len(data):])
	hb := &hostBuf{name: name, init: init}
	for s, b := range c.b {
		mem, err := b.Alloc(int64(size))
		if err != nil {
			c.t.Fatalf("%s: Alloc(%d): %v", b.Device().Name, size, err)
		}
		if mem.Size() != int64(size) {
			c.t.Fatalf("%s: Alloc(%d) gave a buffer of %d bytes", b.Device().Name, size, mem.Size())
		}
		hb.whole[s] = backend.Tensor{Buf: mem, Type: tensor.F32, Cols: size / 4, Rows: 1, Stride: int64(size)}
		if err := b.Set(hb.whole[s], init); err != nil {
			c.t.Fatalf("%s: Set of %s: %v", b.Device().Name, name, err)
		}
	}
	c.bufs = append(c.bufs, hb)
	return hb
}

// tensor is a contiguous rows×cols tensor of typ holding data (encoded rows).
func (c *tcase) tensor(name string, typ tensor.Type, cols, rows int, data []byte) Tensor {
	c.t.Helper()
	rb, err := typ.RowBytes(int64(cols))
	if err != nil {
		c.t.Fatalf("%s: %v", name, err)
	}
	if int64(len(data)) != rb*int64(rows) {
		c.t.Fatalf("%s: %d bytes for %d rows of %d %s", name, len(data), rows, cols, typ)
	}
	hb := c.buffer(name, data)
	x := Tensor{name: name, buf: hb}
	for s := range x.v {
		v, err := backend.NewTensor(hb.whole[s].Buf, guard, typ, cols, rows)
		if err != nil {
			c.t.Fatal(err)
		}
		x.v[s] = v
	}
	return x
}

// values is an F32 input.
func (c *tcase) values(name string, cols, rows int, vals []float32) Tensor {
	c.t.Helper()
	return c.tensor(name, tensor.F32, cols, rows, f32Bytes(vals))
}

// random is an F32 input of values uniform in [lo, hi).
func (c *tcase) random(name string, cols, rows int, lo, hi float32) Tensor {
	c.t.Helper()
	return c.values(name, cols, rows, c.uniform(cols*rows, lo, hi))
}

// ids is an I32 input.
func (c *tcase) ids(name string, cols, rows int, ids []int32) Tensor {
	c.t.Helper()
	return c.tensor(name, tensor.I32, cols, rows, i32Bytes(ids))
}

// output is a tensor whose elements start as NaNs (invalid ids for I32), checked with
// maxErr after the operation.
func (c *tcase) output(name string, typ tensor.Type, cols, rows int, maxErr float64) Tensor {
	c.t.Helper()
	x := c.blank(name, typ, cols, rows)
	c.check(x, maxErr)
	return x
}

// blank is a tensor whose elements start as NaNs (invalid ids for I32), unchecked: a wider
// tensor of which a view will be the output.
func (c *tcase) blank(name string, typ tensor.Type, cols, rows int) Tensor {
	c.t.Helper()
	rb, err := typ.RowBytes(int64(cols))
	if err != nil {
		c.t.Fatalf("%s: %v", name, err)
	}
	fill := byte(0xFF) // NaN in F32, F16, BF16 and the scales of the block formats
	if typ == tensor.I32 {
		fill = 0x7F // an id no operation may leave behind
	}
	return c.tensor(name, typ, cols, rows, slices.Repeat([]byte{fill}, int(rb)*rows))
}

// check makes x (a view of a tensor of the case) an output compared with maxErr.
func (c *tcase) check(x Tensor, maxErr float64) {
	x.buf.outs = append(x.buf.outs, output{name: x.name, x: x, maxErr: maxErr})
}

// weight loads a weight on both backends.
func (c *tcase) weight(name string, typ tensor.Type, shape []int64, data []byte) weight {
	c.t.Helper()
	var w weight
	for s, b := range c.b {
		var err error
		if w[s], err = b.Load(name, typ, shape, data); err != nil {
			c.t.Fatalf("%s: Load %s %s %v: %v", b.Device().Name, name, typ, shape, err)
		}
	}
	return w
}

// run runs the operation on the reference, then on the backend under test, and compares
// every buffer of the case.
func (c *tcase) run(f func(b backend.Backend, s side) error) {
	c.t.Helper()
	if err := protect(func() error { return f(c.b[refSide], refSide) }); err != nil {
		c.t.Fatalf("the reference (CPU) fails the case: %v", err)
	}
	test := c.b[testSide]
	if err := protect(func() error { return f(test, testSide) }); err != nil {
		c.t.Fatalf("%s: %v", test.Device().Name, err)
	}
	c.compare()
}

// protect runs f, turning a panic into an error.
func protect(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
		}
	}()
	return f()
}

// compare reads every buffer back from both backends and checks it.
func (c *tcase) compare() {
	c.t.Helper()
	got := make([][2][]byte, len(c.bufs))
	for i, hb := range c.bufs {
		for s, b := range c.b {
			got[i][s] = make([]byte, len(hb.init))
			if err := b.Get(got[i][s], hb.whole[s]); err != nil {
				c.t.Fatalf("%s: Get of %s: %v", b.Device().Name, hb.name, err)
			}
		}
	}
	for _, b := range c.b {
		if err := b.Synchronize(); err != nil {
			c.t.Fatalf("%s: Synchronize: %v", b.Device().Name, err)
		}
	}
	for i, hb := range c.bufs {
		written := make([]bool, len(hb.init))
		for _, o := range hb.outs {
			v := o.x.v[testSide]
			rb := v.RowBytes()
			for r := range int64(v.Rows) {
				from := v.Off + r*v.Stride
				for j := range written[from : from+rb] {
					written[from+int64(j)] = true
				}
			}
		}
		for s, b := range c.b {
			who := b.Device().Name
			if side(s) == refSide {
				who = "the reference (CPU)"
			}
			c.unchanged(who, hb, got[i][s], written)
		}
		for _, o := range hb.outs {
			c.compareOutput(o, got[i][testSide], got[i][refSide])
		}
	}
}

// unchanged checks that the bytes of hb that are no output's still hold their initial
// values.
func (c *tcase) unchanged(who string, hb *hostBuf, data []byte, written []bool) {
	c.t.Helper()
	changed, first := 0, -1
	for j := range data {
		if !written[j] && data[j] != hb.init[j] {
			if first < 0 {
				first = j
			}
			changed++
		}
	}
	if changed == 0 {
		return
	}
	where := fmt.Sprintf("at byte %d of the tensor", first-guard)
	switch {
	case first < guard:
		where = fmt.Sprintf("%d bytes before the tensor", guard-first)
	case len(hb.outs) == 0:
		where += " (an input)"
	default:
		where += " (between or after its rows)"
	}
	c.t.Errorf("%s changed %d bytes of %s that are no output's, the first %s", who, changed, hb.name, where)
}

// compareOutput compares an output view of both backends' bytes.
func (c *tcase) compareOutput(o output, test, ref []byte) {
	c.t.Helper()
	v := o.x.v[testSide]
	name := fmt.Sprintf("%s (%s %d×%d)", o.name, v.Type, v.Rows, v.Cols)
	rb := v.RowBytes()
	rowOf := func(data []byte, r int) []byte {
		off := v.Off + int64(r)*v.Stride
		return data[off : off+rb]
	}
	if v.Type == tensor.I32 || c.exact {
		for r := range v.Rows {
			if a, b := rowOf(test, r), rowOf(ref, r); !slices.Equal(a, b) {
				c.t.Errorf("%s: not the reference's bits: row %d, %s", name, r, describe(v, a, b))
				return
			}
		}
		if v.Type == tensor.I32 {
			return
		}
	}
	a, b := make([]float32, v.Elements()), make([]float32, v.Elements())
	for r := range v.Rows {
		for s, dst := range [][]float32{a, b} {
			src := [][]byte{test, ref}[s]
			if err := tensor.Dequantize(v.Type, rowOf(src, r), dst[r*v.Cols:(r+1)*v.Cols]); err != nil {
				c.t.Fatalf("%s: %v", name, err)
			}
		}
	}
	for i := range a {
		x, y := float64(a[i]), float64(b[i])
		switch {
		case math.IsNaN(y):
			c.t.Errorf("%s: the reference has a NaN at row %d column %d (the case's inputs are wrong)", name, i/v.Cols, i%v.Cols)
			return
		case math.IsNaN(x):
			c.t.Errorf("%s: NaN at row %d column %d, the reference has %g (unwritten, or computed)", name, i/v.Cols, i%v.Cols, b[i])
			return
		case math.IsInf(x, 0) != math.IsInf(y, 0) || math.IsInf(x, 0) && x != y:
			c.t.Errorf("%s: %g at row %d column %d, the reference has %g", name, a[i], i/v.Cols, i%v.Cols, b[i])
			return
		}
	}
	if err := nmse(a, b); err > o.maxErr {
		worst, wi := 0.0, 0
		for i := range a {
			if d := math.Abs(float64(a[i]) - float64(b[i])); d > worst {
				worst, wi = d, i
			}
		}
		c.t.Errorf("%s: NMSE %.3g > %.3g; the largest difference at row %d column %d: %g, the reference has %g",
			name, err, o.maxErr, wi/v.Cols, wi%v.Cols, a[wi], b[wi])
	}
}

// describe shows the first differing element of two rows of v (decoded if it can be).
func describe(v backend.Tensor, a, b []byte) string {
	if v.Type == tensor.I32 {
		for i := 0; i+4 <= len(a); i += 4 {
			x, y := int32(binary.LittleEndian.Uint32(a[i:])), int32(binary.LittleEndian.Uint32(b[i:]))
			if x != y {
				return fmt.Sprintf("column %d: %d, the reference has %d", i/4, x, y)
			}
		}
	}
	x, y := make([]float32, v.Cols), make([]float32, v.Cols)
	if tensor.Dequantize(v.Type, a, x) != nil || tensor.Dequantize(v.Type, b, y) != nil {
		return "other bytes"
	}
	for i := range x {
		if math.Float32bits(x[i]) != math.Float32bits(y[i]) {
			return fmt.Sprintf("column %d: %g, the reference has %g", i, x[i], y[i])
		}
	}
	return "the same values in other bytes"
}

// nmse is Σ(a−b)²/Σb², or Σ(a−b)² where b is all zeros.
func nmse(a, b []float32) float64 {
	var num, den float64
	for i := range a {
		d := float64(a[i]) - float64(b[i])
		num += d * d
		den += float64(b[i]) * float64(b[i])
	}
	if den == 0 {
		return num
	}
	return num / den
}
