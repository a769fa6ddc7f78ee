package tensor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// computeTypes lists the registered types that can be weights of a matmul and that the
// tests can make from floats (a reference quantizer exists). It grows as types land.
func computeTypes(t testing.TB) []Type {
	var out []Type
	var noQuantizer []string
	for _, typ := range Types() {
		tr, err := TraitsOf(typ)
		if err != nil || tr.VecDot == nil {
			continue
		}
		if tr.FromFloat == nil {
			noQuantizer = append(noQuantizer, typ.String())
			continue
		}
		out = append(out, typ)
	}
	if len(noQuantizer) > 0 {
		t.Logf("not tested (no quantizer to make weights from floats): %s", strings.Join(noQuantizer, ", "))
	}
	return out
}

// randomMatrix quantizes N(0,1) weights of the given shape to typ and returns the matrix
// and the weights as the format stores them (dequantized), which references multiply.
func randomMatrix(t testing.TB, rng *rand.Rand, typ Type, shape ...int64) (*Matrix, []float32) {
	t.Helper()
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	src := randomFloats(rng, int(n))
	size, err := typ.Bytes(shape)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, size)
	if err := Quantize(typ, src, data); err != nil {
		t.Fatal(err)
	}
	if err := Dequantize(typ, data, src); err != nil {
		t.Fatal(err)
	}
	m, err := NewMatrix(typ, shape, data)
	if err != nil {
		t.Fatal(err)
	}
	return m, src
}

func randomFloats(rng *rand.Rand, n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(rng.NormFloat64())
	}
	return out
}

// refDot is the float64 dot product the references use.
func refDot(w, x []float32) float64 {
	var s float64
	for i := range w {
		s += float64(w[i]) * float64(x[i])
	}
	return s
}

// nmse is the normalized mean squared error of test-backend-ops: Σ(got-want)² / Σwant².
func nmse(got []float32, want []float64) float64 {
	var num, den float64
	for i := range want {
		d := float64(got[i]) - want[i]
		num += d * d
		den += want[i] * want[i]
	}
	return num / den
}

// matmulTolerance is the bound llama.cpp's test-backend-ops puts on MUL_MAT.
const matmulTolerance = 5e-4

// colsFor picks a row length for typ: one to three blocks, at least 32 elements.
func colsFor(rng *rand.Rand, typ Type) int {
	bs := int(typ.BlockSize())
	blocks := 1 + rng.IntN(3)
	for bs*blocks < 32 {
		blocks *= 8
	}
	return bs * blocks
}

func TestMatMulEveryType(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pools := []*Pool{NewPool(1), NewPool(3)}
	for _, p := range pools {
		defer p.Close()
	}
	for _, typ := range computeTypes(t) {
		// Rows cover a single row, a partial tile and several tiles; tokens cover decode, a
		// few, and more than one token tile. Every case has at least 20 outputs: the NMSE of
		// a single dot product is too noisy to bound (its sum may nearly cancel).
		for _, shape := range [][2]int{{1, 24}, {7, 3}, {33, 1}, {19, 40}} {
			rows, tokens := shape[0], shape[1]
			cols := colsFor(rng, typ)
			w, wf := randomMatrix(t, rng, typ, int64(cols), int64(rows))
			x := randomFloats(rng, tokens*cols)
			want := make([]float64, tokens*rows)
			for tok := range tokens {
				for r := range rows {
					want[tok*rows+r] = refDot(wf[r*cols:(r+1)*cols], x[tok*cols:(tok+1)*cols])
				}
			}
			for _, p := range pools {
				got := make([]float32, tokens*rows)
				if err := p.MatMul(got, w, x); err != nil {
					t.Fatalf("%s: %v", typ, err)
				}
				if e := nmse(got, want); !(e < matmulTolerance) {
					t.Errorf("%s %d×%d × %d tokens, %d threads: NMSE %.3g", typ, rows, cols, tokens, p.Threads(), e)
				}
				checkGGMLPath(t, typ, w, x, got)
			}
		}
	}
}

// checkGGMLPath checks that every output is exactly ggml's: the activations converted once
// with QuantizeActivations, then one VecDot per row, whatever the tiling and thread count.
func checkGGMLPath(t *testing.T, typ Type, w *Matrix, x []float32, got []float32) {
	t.Helper()
	tr, _ := TraitsOf(typ)
	actBytes, _ := tr.VecDotType.RowBytes(int64(w.Cols()))
	act := make([]byte, actBytes)
	for tok := range len(x) / w.Cols() {
		if err := QuantizeActivations(tr.VecDotType, x[tok*w.Cols():(tok+1)*w.Cols()], act); err != nil {
			t.Fatal(err)
		}
		for r := range w.Rows() {
			want, err := DotRow(typ, w.Cols(), w.data[r*w.rowBytes:(r+1)*w.rowBytes], act)
			if err != nil {
				t.Fatal(err)
			}
			if g := got[tok*w.Rows()+r]; math.Float32bits(g) != math.Float32bits(want) {
				t.Fatalf("%s token %d row %d: %g, DotRow gives %g", typ, tok, r, g, want)
			}
		}
	}
}

func TestMulMatIDEveryType(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	pools := []*Pool{NewPool(1), NewPool(2)}
	for _, p := range pools {
		defer p.Close()
	}
	const experts, k = 6, 3
	for _, typ := range computeTypes(t) {
		for _, tokens := range []int{1, 5, 40} {
			cols, rows := colsFor(rng, typ), 1+2*rng.IntN(12) // odd row counts, 1..23
			w, wf := randomMatrix(t, rng, typ, int64(cols), int64(rows), experts)
			ids := routeTokens(rng, tokens, k, experts)
			for _, perSlot := range []bool{false, true} {
				vectors := tokens
				if perSlot {
					vectors = tokens * k
				}
				x := randomFloats(rng, vectors*cols)
				want := make([]float64, tokens*k*rows)
				for i, e := range ids {
					if e < 0 {
						continue // unused slot: zero
					}
					v := i / k
					if perSlot {
						v = i
					}
					for r := range rows {
						row := wf[(int(e)*rows+r)*cols:][:cols]
						want[i*rows+r] = refDot(row, x[v*cols:(v+1)*cols])
					}
				}
				for _, p := range pools {
					got := make([]float32, len(want))
					for i := range got {
						got[i] = float32(math.NaN()) // unused slots must be overwritten with zeros
					}
					if err := p.MulMatID(got, w, x, ids, k); err != nil {
						t.Fatalf("%s: %v", typ, err)
					}
					if e := nmse(got, want); !(e < matmulTolerance) {
						t.Errorf("%s %d experts of %d×%d, %d tokens, per-slot %v, %d threads: NMSE %.3g",
							typ, experts, rows, cols, tokens, perSlot, p.Threads(), e)
					}
				}
			}
		}
	}
}

// routeTokens picks k distinct experts per token, like a router, and marks a few slots
// unused (-1) the way smart expert reduction does.
func routeTokens(rng *rand.Rand, tokens, k, experts int) []int32 {
	ids := make([]int32, 0, tokens*k)
	for range tokens {
		for s, e := range rng.Perm(experts)[:k] {
			if s > 0 && rng.IntN(8) == 0 {
				e = -1
			}
			ids = append(ids, int32(e))
		}
	}
	return ids
}

// TestMulMatIDMatchesMatMul checks the grouping by expert against plain matmuls of each
// expert's view: the outputs must be bit-identical.
func TestMulMatIDMatchesMatMul(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	p := NewPool(2)
	defer p.Close()
	const cols, rows, experts, k, tokens = 64, 37, 8, 2, 70
	w, _ := randomMatrix(t, rng, F16, cols, rows, experts)
	ids := routeTokens(rng, tokens, k, experts)
	x := randomFloats(rng, tokens*cols)
	got := make([]float32, tokens*k*rows)
	if err := p.MulMatID(got, w, x, ids, k); err != nil {
		t.Fatal(err)
	}
	one := make([]float32, rows)
	for i, e := range ids {
		if e < 0 {
			continue
		}
		view := w.Expert(int(e))
		tok := i / k
		if err := p.MatMul(one, &view, x[tok*cols:(tok+1)*cols]); err != nil {
			t.Fatal(err)
		}
		for r := range rows {
			if got[i*rows+r] != one[r] {
				t.Fatalf("token %d slot %d expert %d row %d: %g, matmul of the expert gives %g", tok, i%k, e, r, got[i*rows+r], one[r])
			}
		}
	}
}

func TestMatMulErrors(t *testing.T) {
	p := NewPool(2)
	defer p.Close()
	w, err := NewMatrix(F32, []int64{4, 3}, make([]byte, 48))
	if err != nil {
		t.Fatal(err)
	}
	stack, err := NewMatrix(F32, []int64{4, 3, 2}, make([]byte, 96))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"partial vector", p.MatMul(make([]float32, 3), w, make([]float32, 5)), "not whole vectors"},
		{"short dst", p.MatMul(make([]float32, 5), w, make([]float32, 8)), "need 6 outputs"},
		{"stack in MatMul", p.MatMul(make([]float32, 3), stack, make([]float32, 4)), "MulMatID"},
		{"bad k", p.MulMatID(make([]float32, 3), stack, make([]float32, 4), []int32{0, 1, 0}, 2), "k=2"},
		{"id too large", p.MulMatID(make([]float32, 6), stack, make([]float32, 4), []int32{0, 2}, 2), "slot 1: expert id 2 outside [0, 2)"},
		{"id -2", p.MulMatID(make([]float32, 6), stack, make([]float32, 4), []int32{-2, 0}, 2), "expert id -2"},
		{"activation count", p.MulMatID(make([]float32, 6), stack, make([]float32, 12), []int32{0, 1}, 2), "one per token or one per slot"},
		{"dst of MulMatID", p.MulMatID(make([]float32, 5), stack, make([]float32, 4), []int32{0, 1}, 2), "need 6 outputs"},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, c.err, c.want)
		}
	}
}

func TestNewMatrixErrors(t *testing.T) {
	for _, c := range []struct {
		typ   Type
		shape []int64
		bytes int
		want  string
	}{
		{F32, []int64{4, 3}, 40, "needs 48 bytes, have 40"},
		{F32, nil, 0, "empty shape"},
		{F32, []int64{4, 0}, 0, "positive"},
		{F32, []int64{4, 1, 1, 2}, 32, "1 beyond"},
		{F16, []int64{-2}, 0, "positive"},
		{Type(4), []int64{32}, 18, "unknown ggml type id 4"},
		{I32, []int64{4}, 16, "no CPU kernels for tensor type i32"},
	} {
		_, err := NewMatrix(c.typ, c.shape, make([]byte, c.bytes))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %v: error %v, want one containing %q", c.typ, c.shape, err, c.want)
		}
	}
	// Activation-only formats (Q8_1, Q8_K) decode (GetRows works) but have no dot product
	// as weights.
	p := NewPool(1)
	defer p.Close()
	for _, typ := range Types() {
		if tr, err := TraitsOf(typ); err == nil && tr.VecDot == nil {
			w, err := NewMatrix(typ, []int64{typ.BlockSize()}, make([]byte, typ.BlockBytes()))
			if err != nil {
				t.Fatalf("%s: %v", typ, err)
			}
			out := make([]float32, typ.BlockSize())
			if err := GetRows(out, w, []int32{0}); err != nil {
				t.Errorf("%s get_rows: %v", typ, err)
			}
			err = p.MatMul(make([]float32, 1), w, make([]float32, typ.BlockSize()))
			if err == nil || !strings.Contains(err.Error(), "activation format") {
				t.Errorf("%s weights: %v", typ, err)
			}
			err = p.MulMatID(make([]float32, 1), w, make([]float32, typ.BlockSize()), []int32{0}, 1)
			if err == nil || !strings.Contains(err.Error(), "activation format") {
				t.Errorf("%s expert weights: %v", typ, err)
			}
		}
	}
}

func TestMatrixViews(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	w, wf := randomMatrix(t, rng, BF16, 8, 3, 4)
	if w.Type() != BF16 || w.Cols() != 8 || w.Rows() != 3 || w.Experts() != 4 {
		t.Fatalf("accessors: %v %d %d %d", w.Type(), w.Cols(), w.Rows(), w.Experts())
	}
	e := w.Expert(2)
	row := make([]float32, 8)
	e.Row(0, 1, row)
	if fmt.Sprint(row) != fmt.Sprint(wf[(2*3+1)*8:][:8]) || e.Experts() != 1 {
		t.Errorf("expert 2 row 1: %v, want %v", row, wf[(2*3+1)*8:][:8])
	}
}

func newTestRand() *rand.Rand { return rand.New(rand.NewPCG(11, 12)) }

// TestMatMulMatchesGGML multiplies the oracle's weights (quantized by ggml's reference
// quantizer, which Quantize reproduces byte for byte) with its activations and compares with
// ggml_mul_mat and ggml_mul_mat_id on the CPU. Only the order in which ggml's SIMD kernels
// add up a row may differ, so the outputs agree to float32 rounding; a difference in how the
// activations are converted would show as an NMSE orders of magnitude larger.
//
// F16 is the exception: the oracle's build (-march=native on a CPU with AVX512-FP16) sums
// F16 dot products of 128 elements or more in half precision (GGML_F16x32 in
// simd-mappings.h), so its results are rounded to F16 steps.
func TestMatMulMatchesGGML(t *testing.T) {
	p := NewPool(2)
	defer p.Close()
	cases := append(loadOracle(t, "mul_mat"), loadOracle(t, "mul_mat_id")...)
	var skipped []string
	for _, c := range cases {
		typ, err := ParseType(c.Type)
		if err != nil {
			t.Fatal(err)
		}
		if tr, err := TraitsOf(typ); err != nil || tr.FromFloat == nil || tr.VecDot == nil {
			skipped = append(skipped, c.Name)
			continue
		}
		experts := max(c.Experts, 1)
		r := oracleStream{c.Seed}
		shape := []int64{int64(c.Cols), int64(c.Rows), int64(experts)}
		size, _ := typ.Bytes(shape)
		data := make([]byte, size)
		if err := Quantize(typ, r.fill(c.Cols*c.Rows*experts, 0.5), data); err != nil {
			t.Fatal(err)
		}
		w, err := NewMatrix(typ, shape, data)
		if err != nil {
			t.Fatal(err)
		}
		want := c.outFloats(t)
		got := make([]float32, len(want))
		if c.Op == "mul_mat" {
			err = p.MatMul(got, w, r.fill(c.Cols*c.N, 1))
		} else {
			vectors := len(c.IDs) / c.K
			if c.PerSlot {
				vectors = len(c.IDs)
			}
			err = p.MulMatID(got, w, r.fill(c.Cols*vectors, 1), c.IDs, c.K)
		}
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		want64 := make([]float64, len(want))
		for i, v := range want {
			want64[i] = float64(v)
		}
		tol := 1e-10
		if typ == F16 {
			tol = 1e-6
		}
		if e := nmse(got, want64); !(e < tol) {
			t.Errorf("%s: NMSE %.3g against ggml", c.Name, e)
		}
	}
	if len(skipped) > 0 {
		t.Logf("types without kernels yet, skipped: %v", skipped)
	}
}

// FuzzMulMatID feeds arbitrary expert ids, k and activation counts: MulMatID must either
// reject them with an error or compute every output, never panic or read outside w.
func FuzzMulMatID(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3}, uint8(2), uint8(2))
	f.Add([]byte{255, 0, 7, 8}, uint8(1), uint8(4))
	f.Add([]byte{}, uint8(3), uint8(0))
	const cols, rows, experts = 32, 5, 8
	w, _ := randomMatrix(f, newTestRand(), Q8_0, cols, rows, experts)
	p := NewPool(2)
	defer p.Close()
	f.Fuzz(func(t *testing.T, raw []byte, k uint8, vectors uint8) {
		ids := make([]int32, len(raw))
		for i, b := range raw {
			ids[i] = int32(int8(b)) // negative and too-large ids both occur
		}
		x := make([]float32, int(vectors)*cols)
		dst := make([]float32, len(ids)*rows)
		err := p.MulMatID(dst, w, x, ids, int(k))
		valid := k > 0 && len(ids)%int(k) == 0 && (int(vectors) == len(ids)/int(k) || int(vectors) == len(ids))
		for _, e := range ids {
			valid = valid && e >= -1 && e < experts
		}
		if valid != (err == nil) {
			t.Fatalf("ids %v, k %d, %d vectors: error %v", ids, k, vectors, err)
		}
	})
}

// TestStreamTiles checks the single-vector tile sizes (hand-computed) and that decode
// mat-vecs cut into many such tiles give every row its one-row VecDot, for a dense matrix
// and for the experts a MulMatID touches.
func TestStreamTiles(t *testing.T) {
	for _, c := range []struct{ total, threads, want int }{
		{255 << 20, 2, 1 << 20}, // the output matrix: capped
		{4718592, 2, 147456},    // a 4.5 MiB attention matrix: 16 tiles a worker
		{884736, 2, 64 << 10},   // one 0.84 MiB expert: the floor
		{7077888, 8, 64 << 10},  // eight 0.84 MiB experts over 8 workers: 54 KiB, floored
	} {
		if got := streamTile(c.total, c.threads); got != c.want {
			t.Errorf("streamTile(%d, %d) = %d, want %d", c.total, c.threads, got, c.want)
		}
	}

	rng := rand.New(rand.NewPCG(7, 8))
	p := NewPool(2)
	defer p.Close()
	const cols, rows, experts = 512, 4096, 6 // Q8_0 rows of 544 bytes: 2.1 MiB an expert
	w, _ := randomMatrix(t, rng, Q8_0, cols, rows, experts)
	x := randomFloats(rng, cols)
	a := make([]byte, cols/32*34)
	if err := QuantizeActivations(Q8_0, x, a); err != nil {
		t.Fatal(err)
	}
	check := func(what string, got []float32, e int) {
		t.Helper()
		view := w.Expert(e)
		for r := range rows {
			row := view.data[r*view.rowBytes : (r+1)*view.rowBytes]
			if want := view.tr.VecDot(cols, row, a); got[r] != want {
				t.Fatalf("%s expert %d row %d: %g, one-row VecDot %g", what, e, r, got[r], want)
			}
		}
	}
	one := make([]float32, rows)
	view := w.Expert(3)
	if err := p.MatMul(one, &view, x); err != nil {
		t.Fatal(err)
	}
	check("matmul", one, 3)
	ids := []int32{5, 1, 3}
	got := make([]float32, len(ids)*rows)
	if err := p.MulMatID(got, w, x, ids, len(ids)); err != nil {
		t.Fatal(err)
	}
	for i, e := range ids {
		check("mulmatid", got[i*rows:(i+1)*rows], int(e))
	}
}

// TestFusedMatchSeparate checks MatMuls and MulMatIDs against MatMul and MulMatID called
// once per matrix: the same bits, for decode and prefill, on one and three threads, with
// unused slots (zero in every output), per-slot activations, and matrices that cannot be
// fused (other activation formats, other shapes), which run one after the other.
func TestFusedMatchSeparate(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	const cols, experts, k = 512, 6, 3
	mat := func(typ Type, rows int, experts ...int64) *Matrix {
		w, _ := randomMatrix(t, rng, typ, append([]int64{cols, int64(rows)}, experts...)...)
		return w
	}
	for _, threads := range []int{1, 3} {
		p := NewPool(threads)
		defer p.Close()
		for _, tokens := range []int{1, 7} {
			x := randomFloats(rng, tokens*cols)
			for name, ws := range map[string][]*Matrix{
				"alike":           {mat(Q4_K, 96), mat(Q4_K, 16), mat(Q6_K, 40)},
				"other formats":   {mat(Q4_K, 32), mat(Q8_0, 48), mat(Q4_K, 8)},
				"a single matrix": {mat(Q8_0, 33)},
			} {
				dsts := make([][]float32, len(ws))
				for i, w := range ws {
					dsts[i] = make([]float32, tokens*w.Rows())
				}
				if err := p.MatMuls(dsts, ws, x); err != nil {
					t.Fatal(err)
				}
				for i, w := range ws {
					want := make([]float32, tokens*w.Rows())
					if err := p.MatMul(want, w, x); err != nil {
						t.Fatal(err)
					}
					expectBits(t, fmt.Sprintf("MatMuls %s, %d threads, %d tokens, matrix %d", name, threads, tokens, i), dsts[i], want)
				}
			}
			ids := routeTokens(rng, tokens, k, experts)
			ids[1] = -1 // an unused slot
			for _, perSlot := range []bool{false, true} {
				xs := x
				if perSlot {
					xs = randomFloats(rng, tokens*k*cols)
				}
				for name, ws := range map[string][]*Matrix{
					"alike":        {mat(Q4_K, 40, experts), mat(Q4_K, 40, experts)},
					"other format": {mat(Q4_K, 24, experts), mat(Q8_0, 24, experts)},
					"other shape":  {mat(Q4_K, 24, experts), mat(Q4_K, 16, experts)},
				} {
					dsts := make([][]float32, len(ws))
					for i, w := range ws {
						dsts[i] = make([]float32, tokens*k*w.Rows())
						for j := range dsts[i] {
							dsts[i][j] = float32(math.NaN())
						}
					}
					if err := p.MulMatIDs(dsts, ws, xs, ids, k); err != nil {
						t.Fatal(err)
					}
					for i, w := range ws {
						want := make([]float32, tokens*k*w.Rows())
						if err := p.MulMatID(want, w, xs, ids, k); err != nil {
							t.Fatal(err)
						}
						expectBits(t, fmt.Sprintf("MulMatIDs %s, %d threads, %d tokens, per slot %v, stack %d", name, threads, tokens, perSlot, i), dsts[i], want)
					}
				}
			}
		}
	}
	p := NewPool(2)
	defer p.Close()
	a, b := mat(Q4_K, 16), mat(Q4_K, 16)
	if err := p.MatMuls([][]float32{make([]float32, 16)}, []*Matrix{a, b}, randomFloats(rng, cols)); err == nil {
		t.Error("MatMuls: one output for two matrices accepted")
	}
	if err := p.MatMuls([][]float32{make([]float32, 16), make([]float32, 15)}, []*Matrix{a, b}, randomFloats(rng, cols)); err == nil {
		t.Error("MatMuls: an output of the wrong size accepted")
	}
	if p.MatMuls(nil, nil, nil) != nil || p.MulMatIDs(nil, nil, nil, nil, 1) != nil {
		t.Error("no matrices: an error")
	}

	// Two stacks whose columns make x one vector per token for the first and one per slot
	// for the second (k = 2): each is multiplied as MulMatID would.
	wide, narrow := mat(Q8_0, 8, experts), func() *Matrix {
		w, _ := randomMatrix(t, rng, Q8_0, cols/2, 8, experts)
		return w
	}()
	ids := []int32{4, 1}
	x := randomFloats(rng, cols)
	dsts := [][]float32{make([]float32, 2*8), make([]float32, 2*8)}
	if err := p.MulMatIDs(dsts, []*Matrix{wide, narrow}, x, ids, 2); err != nil {
		t.Fatal(err)
	}
	for i, w := range []*Matrix{wide, narrow} {
		want := make([]float32, 2*8)
		if err := p.MulMatID(want, w, x, ids, 2); err != nil {
			t.Fatal(err)
		}
		expectBits(t, fmt.Sprintf("stacks of other widths, stack %d", i), dsts[i], want)
	}
	// A bad stack after a mismatched one is still an error, not a panic.
	bad := mat(Q8_0, 8, experts)
	if err := p.MulMatIDs([][]float32{dsts[0], dsts[1], make([]float32, 5)}, []*Matrix{wide, narrow, bad}, x, ids, 2); err == nil {
		t.Error("MulMatIDs: an output of the wrong size after a mismatched stack accepted")
	}
}
