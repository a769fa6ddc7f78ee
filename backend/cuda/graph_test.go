//go:build cuda

package cuda

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/backend/cpu"
	"github.com/moerun/moerun/backend/cuda/kernels"
	"github.com/moerun/moerun/tensor"
)

// graphStep is a decode step of a one-layer attention block, as the runtime queues it:
// the token's embedding in, norm, projections, RoPE at the token's position, its K and V
// into F16 caches, attention over the cache so far, the output projection and residual,
// and the result read back. host, when set, is a weight without a CUDA kernel whose
// product (computed on the host through copies) is added too.
type graphStep struct {
	norm                 backend.Tensor
	wq, wk, wv, wo, host backend.Weight
	kCache, vCache       backend.Tensor
	rope                 tensor.RoPE
	dim, heads, headDim  int
	out                  []float32
	acts                 []backend.Tensor // x, xn, q, k, v, att, o, h
}

func newGraphStep(t *testing.T, g *Backend, host bool, rng *rand.Rand) *graphStep {
	t.Helper()
	const dim, heads, headDim, capacity = 256, 2, 64, 16
	s := &graphStep{dim: dim, heads: heads, headDim: headDim,
		rope: tensor.RoPE{Mode: tensor.RoPENeoX, Dims: headDim, Base: 1e4, FreqScale: 1, AttnFactor: 1}}
	s.norm = f32s(t, g, dim, randomVector(dim, rng))
	load := func(typ tensor.Type, cols, rows int) backend.Weight {
		src := randomVector(cols*rows, rng)
		rb, err := typ.RowBytes(int64(cols))
		if err != nil {
			t.Fatal(err)
		}
		data := make([]byte, rb*int64(rows))
		if err := tensor.Quantize(typ, src, data); err != nil {
			t.Fatal(err)
		}
		w, err := g.Load("w", typ, []int64{int64(cols), int64(rows)}, data)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	s.wq, s.wk, s.wv = load(tensor.Q4_K, dim, heads*headDim), load(tensor.Q8_0, dim, headDim), load(tensor.Q6_K, dim, headDim)
	s.wo = load(tensor.Q8_0, heads*headDim, dim)
	if host {
		typ := tensor.TQ2_0
		if kernels.Supported(typ) {
			t.Skip("TQ2_0 has a kernel: no weight type runs on the host")
		}
		s.host = load(typ, dim, dim)
	}
	s.kCache = newBytes(t, g, tensor.F16, headDim, capacity, make([]byte, 2*headDim*capacity))
	s.vCache = newBytes(t, g, tensor.F16, headDim, capacity, make([]byte, 2*headDim*capacity))
	s.out = make([]float32, dim)
	for _, cols := range []int{dim, dim, heads * headDim, headDim, headDim, heads * headDim, dim, dim} {
		buf, err := g.Alloc(int64(4 * cols))
		if err != nil {
			t.Fatal(err)
		}
		x, err := backend.NewTensor(buf, 0, tensor.F32, cols, 1)
		if err != nil {
			t.Fatal(err)
		}
		s.acts = append(s.acts, x)
	}
	return s
}

// run queues the step for the token at pos with embedding emb and waits for its result.
// Its activations live in buffers of the step, as the runtime's passes keep theirs.
func (s *graphStep) run(t *testing.T, g *Backend, pos int, emb []float32) []float32 {
	t.Helper()
	x, xn, q, k, v, att, o, h := s.acts[0], s.acts[1], s.acts[2], s.acts[3], s.acts[4], s.acts[5], s.acts[6], s.acts[7]
	p := []int32{int32(pos)}
	check := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	check(g.Set(x, asBytes(emb)))
	check(g.RMSNorm(xn, x, s.norm, 1e-6))
	check(g.MatMul(q, s.wq, xn))
	check(g.MatMul(k, s.wk, xn))
	check(g.MatMul(v, s.wv, xn))
	check(g.RoPE(q, s.headDim, &s.rope, p))
	check(g.RoPE(k, s.headDim, &s.rope, p))
	check(g.SetRows(s.kCache, pos, k))
	check(g.SetRows(s.vCache, pos, v))
	params := tensor.AttnParams{Scale: 1 / float32(math.Sqrt(float64(s.headDim))), Numerics: tensor.AttnGGML}
	heads := func(x backend.Tensor) backend.Tensor { // a row per head
		h, err := backend.NewTensor(x.Buf, 0, tensor.F32, s.headDim, s.heads)
		check(err)
		return h
	}
	check(g.Attention(heads(att), heads(q), s.heads, p, s.kCache, s.vCache, backend.Tensor{}, pos+1, params))
	check(g.MatMul(o, s.wo, att))
	check(g.Add(x, x, o))
	if s.host != nil {
		check(g.MatMul(h, s.host, x))
		check(g.Add(x, x, h))
	}
	check(g.Get(asBytes(s.out), x))
	check(g.Synchronize())
	return slices.Clone(s.out)
}

// TestGraphs: steps launched as CUDA graphs give the bytes of the same steps launched
// directly; once the first steps have built their graphs, a step at the next position
// replays them as they are (its position, the cache's length and the RoPE angles reach the
// kernels through device memory); a host-run operation splits a step into two graphs;
// MOERUN_CUDA_GRAPHS=0 launches directly.
func TestGraphs(t *testing.T) {
	needGPU(t)
	for _, host := range []bool{false, true} {
		on, off := newGPU(t, false), newGPU(t, true)
		sOn, sOff := newGraphStep(t, on, host, rand.New(rand.NewPCG(5, 5))), newGraphStep(t, off, host, rand.New(rand.NewPCG(5, 5)))
		rng := rand.New(rand.NewPCG(6, 6))
		const warm, steps = 2, 5
		perStep := 1
		if host {
			perStep = 2
		}
		var before Stats
		for pos := range steps {
			if pos == warm {
				before = on.Stats()
			}
			emb := randomVector(sOn.dim, rng)
			got, want := sOn.run(t, on, pos, emb), sOff.run(t, off, pos, emb)
			if !slices.Equal(got, want) {
				t.Fatalf("host op %v, step %d: the graphs' result differs from direct launches'", host, pos)
			}
		}
		d := graphStats(on.Stats(), before)
		n := (steps - warm) * perStep
		if d.GraphLaunches != n || d.GraphReplays != n {
			t.Errorf("host op %v: steps %d..%d launched %d graphs (%d built, %d updated, %d replayed), want %d, all replayed",
				host, warm, steps-1, d.GraphLaunches, d.GraphsBuilt, d.GraphUpdates, d.GraphReplays, n)
		}
		// The first steps build the graphs (scratch growing on the way splits some).
		if s := on.Stats(); s.GraphsBuilt == 0 || s.GraphsBuilt > 2*warm*perStep {
			t.Errorf("host op %v: %d graphs instantiated in all, want 1 to %d", host, s.GraphsBuilt, 2*warm*perStep)
		}
		if s := off.Stats(); s.GraphLaunches != 0 {
			t.Errorf("NoGraphs launched %d graphs", s.GraphLaunches)
		}
	}

	// Work that differs from a kept graph's only in a kernel's parameter is not replayed
	// through it: 1·2·3·5, each product its own graph of the same nodes.
	g := newGPU(t, false)
	x := f32s(t, g, 8, []float32{1, 1, 1, 1, 1, 1, 1, 1})
	for i, f := range []float32{2, 3, 5} {
		if err := g.Scale(x, x, f); err != nil {
			t.Fatal(err)
		}
		if got, want := values(t, g, x)[0], []float32{2, 6, 30}[i]; got != want {
			t.Errorf("scaled by %g: %g, want %g", f, got, want)
		}
	}

	t.Setenv(graphsEnv, "0")
	g = newGPU(t, false)
	x = f32s(t, g, 8, make([]float32, 8))
	if err := g.Scale(x, x, 2); err != nil {
		t.Fatal(err)
	}
	values(t, g, x)
	if s := g.Stats(); s.GraphLaunches != 0 {
		t.Errorf("%s=0 launched %d graphs", graphsEnv, s.GraphLaunches)
	}
}

// graphStats is the graph counts of s since before.
func graphStats(s, before Stats) Stats {
	return Stats{GraphLaunches: s.GraphLaunches - before.GraphLaunches, GraphsBuilt: s.GraphsBuilt - before.GraphsBuilt,
		GraphUpdates: s.GraphUpdates - before.GraphUpdates, GraphReplays: s.GraphReplays - before.GraphReplays}
}

// newGPU opens CUDA0 with a pool of its own, graphs off where noGraphs says, closed when
// the test ends.
func newGPU(t *testing.T, noGraphs bool) *Backend {
	t.Helper()
	pool := tensor.NewPool(2)
	g, err := New(0, Options{Host: pool, NoGraphs: noGraphs})
	if err != nil {
		pool.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Close(); err != nil {
			t.Error(err)
		}
		pool.Close()
	})
	return g
}

// NoTiled (MOERUN_CUDA_TILED=0) runs a prompt's product on mmv instead of mmq: the same
// products within the float64 reference's tolerance, summed in another order, so some
// output differs in its last bits (mmv sums each lane's 16-value chunks across the row,
// mmq each 32-column slice, then the slices in order).
func TestNoTiled(t *testing.T) {
	needGPU(t)
	pool := tensor.NewPool(2)
	t.Cleanup(pool.Close)
	var outs [2][]float32
	const cols, rows, tokens = 4096, 37, 40
	x := randomVector(cols*tokens, rand.New(rand.NewPCG(3, 5)))
	for i, noTiled := range []bool{false, true} {
		g, err := New(0, Options{Host: pool, NoTiled: noTiled})
		if err != nil {
			t.Fatal(err)
		}
		c := cpu.New(cpu.Options{Pool: pool})
		p := randomWeight(t, g, c, tensor.Q4_K, cols, rows, 1, rand.New(rand.NewPCG(1, 2)))
		d := f32s(t, g, rows, make([]float32, rows*tokens))
		if err := g.MatMul(d, p.gpu, f32s(t, g, cols, x)); err != nil {
			t.Fatal(err)
		}
		outs[i] = values(t, g, d)
		exact := make([]float64, rows*tokens)
		for tk := range tokens {
			for r := range rows {
				exact[tk*rows+r] = exactMatVec(t, p.m, 0, r, x[tk*cols:(tk+1)*cols])
			}
		}
		if e := nmse(widen(outs[i]), exact); e > exactTol {
			t.Errorf("NoTiled %v: NMSE against the float64 reference %.3g > %g", noTiled, e, exactTol)
		}
		if err := g.Close(); err != nil {
			t.Error(err)
		}
	}
	if slices.Equal(outs[0], outs[1]) {
		t.Error("NoTiled gave the tiled kernel's bits: the option did not reach the product")
	}
}
