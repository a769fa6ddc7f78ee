package tensor

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// denseKV stores float rows [pos][head][dim] as a cache of type t, laid out like llama.cpp's.
func denseKV(t testing.TB, typ Type, rows []float32, dim, heads int) KV {
	t.Helper()
	rowBytes, err := typ.RowBytes(int64(dim))
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, len(rows)/dim*int(rowBytes))
	if err := Quantize(typ, rows, data); err != nil {
		t.Fatal(err)
	}
	return KV{Type: typ, Data: data, Dim: dim, Heads: heads, PosStride: heads * int(rowBytes), HeadStride: int(rowBytes)}
}

// TestAttentionMatchesGGML runs ggml's flash attention cases from the oracle with AttnGGML:
// the per-row kernel (F16 with its F16 accumulator, F32, Q8_0), the split of a long decode
// across 2 threads, the tiled kernel for 64+ tokens, GQA, an MLA-style V that is a view of K,
// sinks and a sliding window. The outputs must be ggml's bits.
func TestAttentionMatchesGGML(t *testing.T) {
	p := NewPool(2) // the oracle ran with 2 threads, which the split path depends on
	defer p.Close()
	cases := append(loadOracle(t, "flash_attn_ext"), loadOracleFile(t, "ggml-ops-avx512f.json", "flash_attn_ext")...)
	for _, c := range cases {
		typ, err := ParseType(c.Type)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := TraitsOf(typ); err != nil {
			t.Logf("%s: skipped, %v", c.Name, err)
			continue
		}
		r := oracleStream{c.Seed}
		tokens := len(c.Pos)
		q := r.fill(c.DK*c.Heads*tokens, 0.5)
		k := denseKV(t, typ, r.fill(c.DK*c.KVHeads*c.NKV, 0.5), c.DK, c.KVHeads)
		var v KV
		if c.MLA {
			v = k
			v.Dim = c.DV
		} else {
			v = denseKV(t, typ, r.fill(c.DV*c.KVHeads*c.NKV, 1), c.DV, c.KVHeads)
		}
		params := AttnParams{Scale: c.Scale, Window: c.Window, Numerics: AttnGGML}
		if c.Sinks {
			params.Sinks = r.fill(c.Heads, 2)
		}
		got := make([]float32, tokens*c.Heads*c.DV)
		if err := p.Attention(got, q, c.Heads, c.Pos, k, v, c.NKV, params); err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		want := c.outFloats(t)
		if typ == F16 {
			expectBits(t, c.Name, got, want)
			continue
		}
		// With an F32 or Q8_0 cache the scores are that type's dot product, which ggml sums
		// in SIMD order and Traits in the scalar reference order; they differ in the last
		// bits, the rest of the kernel is the same.
		want64 := make([]float64, len(want))
		for i, w := range want {
			want64[i] = float64(w)
		}
		if e := nmse(got, want64); !(e < 1e-12) {
			t.Errorf("%s: NMSE %.3g against ggml", c.Name, e)
		}
	}
}

// refAttention is the textbook computation in float64 from the cache's decoded values:
// scores over the positions kept (a.Keep, all when nil), a full softmax with the sink in
// the denominator, the weighted sum.
func refAttention(q []float32, heads int, pos []int32, k, v KV, kvLen int, a AttnParams) []float64 {
	kTr, _ := TraitsOf(k.Type)
	vTr, _ := TraitsOf(v.Type)
	kBytes, _ := k.Type.RowBytes(int64(k.Dim))
	vBytes, _ := v.Type.RowBytes(int64(v.Dim))
	krow, vrow := make([]float32, k.Dim), make([]float32, v.Dim)
	group := heads / k.Heads
	out := make([]float64, len(pos)*heads*v.Dim)
	for t, p := range pos {
		for h := range heads {
			g := h / group
			qh := q[(t*heads+h)*k.Dim:][:k.Dim]
			var scores []float64
			var visible []int
			for j := 0; j < kvLen; j++ {
				if j > int(p) || (a.Window > 0 && int(p)-j >= a.Window) {
					continue
				}
				if _, kept := slices.BinarySearch(a.Keep, int32(j)); a.Keep != nil && !kept {
					continue
				}
				kTr.ToFloat(k.row(j, g, int(kBytes)), krow)
				var s float64
				for d := range krow {
					s += float64(qh[d]) * float64(krow[d])
				}
				scores = append(scores, s*float64(a.Scale))
				visible = append(visible, j)
			}
			m := math.Inf(-1)
			for _, s := range scores {
				m = math.Max(m, s)
			}
			var sink float64
			if a.Sinks != nil {
				m = math.Max(m, float64(a.Sinks[h]))
				sink = math.Exp(float64(a.Sinks[h]) - m)
			}
			sum := sink
			for i := range scores {
				scores[i] = math.Exp(scores[i] - m)
				sum += scores[i]
			}
			o := out[(t*heads+h)*v.Dim:][:v.Dim]
			for i, j := range visible {
				vTr.ToFloat(v.row(j, g, int(vBytes)), vrow)
				for d := range vrow {
					o[d] += scores[i] / sum * float64(vrow[d])
				}
			}
		}
	}
	return out
}

// attnCacheTypes are the registered types a cache can use with a head size of 64.
func attnCacheTypes() []Type {
	var out []Type
	for _, typ := range Types() {
		tr, err := TraitsOf(typ)
		if err != nil || tr.VecDot == nil || tr.FromFloat == nil || 64%typ.BlockSize() != 0 {
			continue
		}
		if QuantizeActivations(tr.VecDotType, nil, nil) != nil {
			continue
		}
		out = append(out, typ)
	}
	return out
}

// TestAttentionAgainstReference compares both numerics with the float64 reference over the
// cache types, for decode (short and split), a few tokens and a prefill batch, with GQA, a
// window and sinks, on 1 and 3 threads. The prefill batches (ggml's tiled kernel) only run
// for F16 and F32, the types that kernel takes; the others share their code with decode.
func TestAttentionAgainstReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	pools := []*Pool{NewPool(1), NewPool(3)}
	for _, p := range pools {
		defer p.Close()
	}
	const dim, heads, kvHeads = 64, 4, 2
	cases := []struct {
		name   string
		pos    []int32
		kvLen  int
		window int
		sinks  bool
	}{
		{"decode", []int32{40}, 41, 0, false},
		{"decode split", []int32{520}, 530, 0, true},
		{"few tokens, window", []int32{30, 31, 32}, 33, 8, false},
		{"prefill", seq(0, 70), 70, 0, true},
		{"prefill, window", seq(10, 70), 80, 20, false},
	}
	for _, typ := range attnCacheTypes() {
		for _, c := range cases {
			if len(c.pos) >= ggmlTile && typ != F16 && typ != F32 {
				continue
			}
			q := randomFloats(rng, len(c.pos)*heads*dim)
			k := denseKV(t, typ, randomFloats(rng, c.kvLen*kvHeads*dim), dim, kvHeads)
			v := denseKV(t, typ, randomFloats(rng, c.kvLen*kvHeads*dim), dim, kvHeads)
			a := AttnParams{Scale: 1 / float32(math.Sqrt(dim)), Window: c.window}
			if c.sinks {
				a.Sinks = randomFloats(rng, heads)
			}
			want := refAttention(q, heads, c.pos, k, v, c.kvLen, a)
			for _, numerics := range []AttnNumerics{AttnPrecise, AttnGGML} {
				a.Numerics = numerics
				// AttnPrecise only rounds its float32 accumulators. AttnGGML rounds the
				// queries to K's VecDotType (F16, or 8-bit blocks for quantized caches) and
				// may accumulate in F16.
				tol := 1e-9
				if tr, _ := TraitsOf(typ); numerics == AttnGGML {
					tol = 5e-5 // 700 steps of an F16 accumulator in "decode split" on 1 thread
					if tr.VecDotType.Info().Quantized {
						tol = 2e-4
					}
				}
				for _, p := range pools {
					got := make([]float32, len(want))
					if err := p.Attention(got, q, heads, c.pos, k, v, c.kvLen, a); err != nil {
						t.Fatalf("%s %s: %v", typ, c.name, err)
					}
					if e := nmse(got, want); !(e < tol) {
						t.Errorf("%s %s, numerics %d, %d threads: NMSE %.3g", typ, c.name, numerics, p.Threads(), e)
					}
				}
			}
		}
	}
}

// TestAttentionRing runs attention over a ring cache (KV.Cells: position j at row j mod
// Cells, as a sliding-window layer keeps its cache) and over the whole cache holding the
// same values, and wants the same bits: every kernel sees the same positions in the same
// order, whichever rows hold them. The cases wrap the ring inside the window, inside a
// per-row chunk, across the split of a long decode between threads and inside a tile of
// the tiled kernel.
func TestAttentionRing(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	pools := []*Pool{NewPool(1), NewPool(3)}
	for _, p := range pools {
		defer p.Close()
	}
	const dim, heads, kvHeads = 64, 4, 2
	cases := []struct {
		name          string
		pos           []int32
		kvLen, window int
		cells         int
	}{
		{"decode, wrapped", []int32{780}, 1024, 128, 256},
		// Split across 3 threads at 854, the ring wrapping at 800.
		{"decode split, wrapped", []int32{900}, 1280, 128, 200},
		{"decode, window as large as the ring", []int32{600}, 768, 256, 256},
		{"few tokens across the wrap", seq(510, 5), 768, 100, 256},
		{"prefill across the wrap", seq(480, 70), 768, 128, 256},
		{"a ring not yet full", []int32{100}, 256, 128, 256},
	}
	for _, typ := range attnCacheTypes() {
		for _, c := range cases {
			if len(c.pos) >= ggmlTile && typ != F16 && typ != F32 {
				continue
			}
			q := randomFloats(rng, len(c.pos)*heads*dim)
			k := denseKV(t, typ, randomFloats(rng, c.kvLen*kvHeads*dim), dim, kvHeads)
			v := denseKV(t, typ, randomFloats(rng, c.kvLen*kvHeads*dim), dim, kvHeads)
			// The cache holds the positions up to the last query's; those after it, up to
			// kvLen, are padding that the causal mask hides.
			written := int(c.pos[len(c.pos)-1]) + 1
			kRing, vRing := ringOf(k, written, c.cells), ringOf(v, written, c.cells)
			a := AttnParams{Scale: 1 / float32(math.Sqrt(dim)), Window: c.window, Sinks: randomFloats(rng, heads)}
			for _, numerics := range []AttnNumerics{AttnPrecise, AttnGGML} {
				a.Numerics = numerics
				for _, p := range pools {
					want := make([]float32, len(c.pos)*heads*dim)
					got := make([]float32, len(want))
					if err := p.Attention(want, q, heads, c.pos, k, v, c.kvLen, a); err != nil {
						t.Fatalf("%s %s: %v", typ, c.name, err)
					}
					if err := p.Attention(got, q, heads, c.pos, kRing, vRing, c.kvLen, a); err != nil {
						t.Fatalf("%s %s, ring: %v", typ, c.name, err)
					}
					for i := range want {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Errorf("%s %s, numerics %d, %d threads: value %d is %g over the ring, %g over the whole cache",
								typ, c.name, numerics, p.Threads(), i, got[i], want[i])
							break
						}
					}
				}
			}
		}
	}
}

// ringOf is a ring of cells rows holding what the dense cache c holds, its positions
// 0..n-1 written in order to row j mod cells (each overwriting the one cells before).
func ringOf(c KV, n, cells int) KV {
	r := c
	r.Cells = cells
	r.Data = make([]byte, cells*c.PosStride)
	for j := range n {
		copy(r.Data[j%cells*c.PosStride:][:c.PosStride], c.Data[j*c.PosStride:])
	}
	return r
}

func seq(first, n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(first + i)
	}
	return out
}

// TestAttentionByHand works one head out on paper: q = (1, 0), keys (1, 0) and (0, 1),
// values (2, 0) and (0, 4), scale ln 3. The scores are ln 3 and 0, so the weights are 3/4
// and 1/4 and the output (1.5, 1); at position 0 only the first key is visible.
func TestAttentionByHand(t *testing.T) {
	p := NewPool(1)
	defer p.Close()
	k := denseKV(t, F32, []float32{1, 0, 0, 1}, 2, 1)
	v := denseKV(t, F32, []float32{2, 0, 0, 4}, 2, 1)
	q := []float32{1, 0, 1, 0}
	for _, numerics := range []AttnNumerics{AttnPrecise, AttnGGML} {
		out := make([]float32, 4)
		a := AttnParams{Scale: float32(math.Log(3)), Numerics: numerics}
		if err := p.Attention(out, q, 1, []int32{1, 0}, k, v, 2, a); err != nil {
			t.Fatal(err)
		}
		want := []float32{1.5, 1, 2, 0}
		for i := range want {
			if math.Abs(float64(out[i]-want[i])) > 1e-6 {
				t.Errorf("numerics %d: %v, want %v", numerics, out, want)
				break
			}
		}
		// A sink with logit ln 3 + ln 2 (= ln 6) at position 0 takes 6/7 of the weight.
		a.Sinks = []float32{float32(math.Log(6))}
		a.Scale = 1
		if err := p.Attention(out[:2], q[:2], 1, []int32{0}, k, v, 2, a); err != nil {
			t.Fatal(err)
		}
		if w := float32(math.E) / (float32(math.E) + 6) * 2; math.Abs(float64(out[0]-w)) > 1e-6 || out[1] != 0 {
			t.Errorf("numerics %d with a sink: %v, want [%g 0]", numerics, out[:2], w)
		}
		// No visible position (a query before the cache): zeros, as in ggml.
		if err := p.Attention(out[:2], q[:2], 1, []int32{-1}, k, v, 2, AttnParams{Scale: 1, Numerics: numerics}); err != nil || out[0] != 0 || out[1] != 0 {
			t.Errorf("numerics %d, nothing visible: %v %v", numerics, out[:2], err)
		}
	}
}

func TestAttentionErrors(t *testing.T) {
	p := NewPool(1)
	defer p.Close()
	cache := denseKV(t, F16, make([]float32, 4*2*8), 8, 2)
	good := func() (q, dst []float32, heads int, pos []int32, k, v KV, kvLen int, a AttnParams) {
		return make([]float32, 4*8), make([]float32, 4*8), 4, []int32{3}, cache, cache, 4, AttnParams{Scale: 1}
	}
	for _, c := range []struct {
		change func(q, dst *[]float32, heads *int, pos *[]int32, k, v *KV, kvLen *int, a *AttnParams)
		want   string
	}{
		{func(q, dst *[]float32, heads *int, pos *[]int32, k, v *KV, kvLen *int, a *AttnParams) { *heads = 3 }, "3 query heads"},
		{func(q, dst *[]float32, heads *int, pos *[]int32, k, v *KV, kvLen *int, a *AttnParams) { *q = (*q)[:31] }, "need 32 query"},
		{func(q, dst *[]float32, heads *int, pos *[]int32, k, v *KV, kvLen *int, a *AttnParams) { *kvLen = 5 }, "5 positions of the K cache need 160 bytes, it has 128"},
		{func(q, dst *[]float32, heads *int, pos *[]int32, k, v *KV, kvLen *int, a *AttnParams) {
			a.Sinks = []float32{1}
		}, "1 sinks for 4 heads"},
		{func(q, dst *[]float32, heads *int, pos *[]int32, k, v *KV, kvLen *int, a *AttnParams) { v.Heads = 1 }, "1 V heads"},
		{func(q, dst *[]float32, heads *int, pos *[]int32, k, v *KV, kvLen *int, a *AttnParams) { k.Type = I32 }, "K cache: no CPU kernels for tensor type i32"},
		{func(q, dst *[]float32, heads *int, pos *[]int32, k, v *KV, kvLen *int, a *AttnParams) {
			v.HeadStride = 2
		}, "V cache strides"},
		{func(q, dst *[]float32, heads *int, pos *[]int32, k, v *KV, kvLen *int, a *AttnParams) { a.Window = -1 }, "window -1"},
		{func(q, dst *[]float32, heads *int, pos *[]int32, k, v *KV, kvLen *int, a *AttnParams) {
			k.Cells, v.Cells = 2, 2
		}, "see positions 0 to 3, more than the ring cache's 2 cells hold"},
		{func(q, dst *[]float32, heads *int, pos *[]int32, k, v *KV, kvLen *int, a *AttnParams) { v.Cells = 2 }, "a V cache of 2 cells, K's has 0"},
	} {
		q, dst, heads, pos, k, v, kvLen, a := good()
		c.change(&q, &dst, &heads, &pos, &k, &v, &kvLen, &a)
		err := p.Attention(dst, q, heads, pos, k, v, kvLen, a)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want one containing %q", err, c.want)
		}
	}
	q, dst, heads, pos, k, v, kvLen, a := good()
	if err := p.Attention(dst, q, heads, pos, k, v, kvLen, a); err != nil {
		t.Errorf("valid call: %v", err)
	}
}

func BenchmarkAttentionDecode(b *testing.B) {
	// One token of a Qwen3-30B-A3B layer (32 heads of 128 over 4 KV heads) at growing
	// context, with the default F16 cache and with -ctk/-ctv q8_0.
	rng := rand.New(rand.NewPCG(31, 32))
	const heads, kvHeads, dim = 32, 4, 128
	for _, c := range []struct {
		cache Type
		ctx   int
	}{{F16, 1024}, {F16, 16384}, {Q8_0, 16384}} {
		ctx := c.ctx
		k := denseKV(b, c.cache, randomFloats(rng, ctx*kvHeads*dim), dim, kvHeads)
		v := denseKV(b, c.cache, randomFloats(rng, ctx*kvHeads*dim), dim, kvHeads)
		q := randomFloats(rng, heads*dim)
		out := make([]float32, heads*dim)
		for _, threads := range []int{1, 2} {
			for _, numerics := range []AttnNumerics{AttnPrecise, AttnGGML} {
				b.Run(fmt.Sprintf("cache=%s/ctx=%d/numerics=%d/threads=%d", c.cache, ctx, numerics, threads), func(b *testing.B) {
					p := NewPool(threads)
					defer p.Close()
					a := AttnParams{Scale: 1 / float32(math.Sqrt(dim)), Numerics: numerics}
					b.SetBytes(int64(2 * len(k.Data)))
					for b.Loop() {
						if err := p.Attention(out, q, heads, []int32{int32(ctx - 1)}, k, v, ctx, a); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}

// TestFloatDots holds the float products (vector kernels in the SIMD build) to ggml's
// orders written out plainly: ggml_vec_dot_f16/f32's four 16-lane accumulators over steps
// of 64 and tinyBLAS's one over steps of 16, each lane a chain of fused multiply-adds,
// reduced as _mm512_reduce_add_ps; the values past the last step of 64 in float64 (F16) or
// by fused multiply-adds (F32). Values of mixed magnitudes, lengths around the steps.
func TestFloatDots(t *testing.T) {
	reduce := func(v [16]float32) float32 {
		for half := 8; half >= 2; half /= 2 {
			for i := range half {
				v[i] = v[i+half] + v[i]
			}
		}
		return v[0] + v[1]
	}
	vec := func(q, k []float32, f16 bool) float32 {
		var acc [4][16]float32
		whole := len(q) / 64 * 64
		for d := range whole {
			a, l := d%64/16, d%16
			acc[a][l] = fma32(q[d], k[d], acc[a][l])
		}
		var v [16]float32
		for l := range v {
			v[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l])
		}
		if f16 {
			sum := float64(reduce(v))
			for d := whole; d < len(q); d++ {
				sum += float64(q[d] * k[d])
			}
			return float32(sum)
		}
		sum := reduce(v)
		for d := whole; d < len(q); d++ {
			sum = fma32(q[d], k[d], sum)
		}
		return sum
	}
	tiny := func(q, k []float32) float32 {
		var acc [16]float32
		for d := range q {
			acc[d%16] = fma32(q[d], k[d], acc[d%16])
		}
		return reduce(acc)
	}
	rng := rand.New(rand.NewPCG(9, 10))
	for _, n := range []int{0, 1, 16, 48, 63, 64, 65, 127, 128, 160, 192, 576} {
		q, k := make([]float32, n), make([]float32, n)
		for d := range q {
			q[d] = roundToF16(float32(rng.NormFloat64() * math.Exp2(float64(rng.IntN(20)-10))))
			k[d] = roundToF16(float32(rng.NormFloat64()))
		}
		check := func(what string, got, want float32) {
			t.Helper()
			if math.Float32bits(got) != math.Float32bits(want) {
				t.Errorf("n=%d %s: %v (%#x), want %v (%#x)", n, what, got, math.Float32bits(got), want, math.Float32bits(want))
			}
		}
		check("vecDotF16", vecDotF16(q, k), vec(q, k, true))
		if n%16 == 0 && n > 0 {
			check("tinyDot", active.tinyDot(q, k), tiny(q, k))
		}
		w, a := make([]byte, 4*n), make([]byte, 4*n)
		for d := range q {
			binary.LittleEndian.PutUint32(w[4*d:], math.Float32bits(q[d]))
			binary.LittleEndian.PutUint32(a[4*d:], math.Float32bits(k[d]))
		}
		check("F32 VecDot", active.traits[F32].VecDot(n, w, a), vec(q, k, false))
		for d := range q {
			binary.LittleEndian.PutUint16(w[2*d:], F32ToF16(q[d]))
			binary.LittleEndian.PutUint16(a[2*d:], F32ToF16(k[d]))
		}
		check("F16 VecDot", active.traits[F16].VecDot(n, w, a), vec(q, k, true))
	}
}

// TestAddScaled holds the installed acc += x·s (a vector kernel in the SIMD build) to the
// plain loop bit for bit, at lengths around its step of eight.
func TestAddScaled(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, n := range []int{0, 1, 7, 8, 9, 16, 23, 64, 131} {
		x, acc := randomFloats(rng, n), randomFloats(rng, n)
		s := float32(rng.NormFloat64())
		want := make([]float32, n)
		for d := range want {
			want[d] = acc[d] + x[d]*s
		}
		active.addScaled(acc, x, s)
		for d := range want {
			if math.Float32bits(acc[d]) != math.Float32bits(want[d]) {
				t.Fatalf("n=%d [%d]: %g, want %g", n, d, acc[d], want[d])
			}
		}
	}
}

// BenchmarkAttentionDecodeMLA is one token of DeepSeek-V2-Lite's absorbed MLA attention:
// 16 query heads against one shared latent row of 576 values (512 compressed + 64 RoPE,
// the keys) whose first 512 are the values, over 4,096 positions, ggml numerics.
func BenchmarkAttentionDecodeMLA(b *testing.B) {
	const heads, latent, rope, ctx = 16, 512, 64, 4096
	rng := rand.New(rand.NewPCG(33, 34))
	k := denseKV(b, F16, randomFloats(rng, ctx*(latent+rope)), latent+rope, 1)
	v := k
	v.Dim = latent
	q := randomFloats(rng, heads*(latent+rope))
	out := make([]float32, heads*latent)
	for _, threads := range []int{1, 2} {
		b.Run(fmt.Sprintf("threads=%d", threads), func(b *testing.B) {
			p := NewPool(threads)
			defer p.Close()
			a := AttnParams{Scale: 1 / float32(math.Sqrt(192)), Numerics: AttnGGML}
			b.SetBytes(int64(len(k.Data)))
			for b.Loop() {
				if err := p.Attention(out, q, heads, []int32{ctx - 1}, k, v, ctx, a); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestMadKernels holds the installed accumulator updates (vector kernels in the SIMD build)
// to their scalar definitions bit for bit: madHalf to roundToF16(fma32(x, s, acc)), madFloat
// to fma32(x, s, acc), scaleHalf to roundToF16(acc·s). Accumulators from binary16
// subnormals to beyond its range (where madHalf's AVX2 kernel hands over to the scalar
// code), with signs, zeros and ties, at lengths around the steps of eight and sixteen.
func TestMadKernels(t *testing.T) {
	for _, k := range []struct {
		name   string
		kernel func(acc, x []float32, s float32)
		want   func(x, s, acc float32) float32
	}{
		{"madHalf", active.madHalf, func(x, s, acc float32) float32 { return roundToF16(fma32(x, s, acc)) }},
		{"madFloat", active.madFloat, fma32},
		{"scaleHalf", func(acc, _ []float32, s float32) { active.scaleHalf(acc, s) }, func(_, s, acc float32) float32 { return roundToF16(acc * s) }},
	} {
		rng := rand.New(rand.NewPCG(9, 10))
		for _, n := range []int{0, 5, 8, 13, 16, 29, 64, 131} {
			for round := range 200 {
				x, acc := randomFloats(rng, n), randomFloats(rng, n)
				for d := range acc {
					acc[d] *= float32(math.Ldexp(1, rng.IntN(44)-28)) // 2^-28 .. 2^15
					if rng.IntN(16) == 0 {
						acc[d] = F16ToF32(uint16(rng.IntN(1 << 16))) // any binary16, Inf and NaN too
					}
				}
				s := float32(rng.NormFloat64()) * float32(math.Ldexp(1, rng.IntN(8)-4))
				if round%50 == 0 {
					s = 0
				}
				want := make([]float32, n)
				for d := range want {
					want[d] = k.want(x[d], s, acc[d])
				}
				k.kernel(acc, x, s)
				for d := range want {
					if math.Float32bits(acc[d]) != math.Float32bits(want[d]) && !(acc[d] != acc[d] && want[d] != want[d]) {
						t.Fatalf("%s n=%d [%d]: %g (%#08x), want %g (%#08x)", k.name, n, d, acc[d], math.Float32bits(acc[d]), want[d], math.Float32bits(want[d]))
					}
				}
			}
		}
	}
}

// TestAttentionQuantizedKeysFourHeads holds decode attention over a Q8_0 key cache, whose
// scores go four query heads at a time through the four-token rows kernel where the build
// has one, to the same attention with the scores taken one head and position at a time:
// the same bits, for groups of four and eight heads over chunks of positions.
func TestAttentionQuantizedKeysFourHeads(t *testing.T) {
	rows4 := active.dotTokens4Rows[Q8_0]
	if rows4 == nil {
		t.Skip("no four-token Q8_0 kernel in this build")
	}
	rng := rand.New(rand.NewPCG(53, 59))
	p := NewPool(2)
	defer p.Close()
	for _, c := range []struct{ dim, heads, kvHeads, ctx int }{{64, 8, 2, 100}, {128, 16, 2, 130}, {96, 8, 1, 7}} {
		k := denseKV(t, Q8_0, randomFloats(rng, c.ctx*c.kvHeads*c.dim), c.dim, c.kvHeads)
		v := denseKV(t, F16, randomFloats(rng, c.ctx*c.kvHeads*c.dim), c.dim, c.kvHeads)
		q := randomFloats(rng, c.heads*c.dim)
		a := AttnParams{Scale: 1 / float32(math.Sqrt(float64(c.dim))), Numerics: AttnGGML}
		got, want := make([]float32, len(q)), make([]float32, len(q))
		if err := p.Attention(got, q, c.heads, []int32{int32(c.ctx - 1)}, k, v, c.ctx, a); err != nil {
			t.Fatal(err)
		}
		delete(active.dotTokens4Rows, Q8_0)
		err := p.Attention(want, q, c.heads, []int32{int32(c.ctx - 1)}, k, v, c.ctx, a)
		active.dotTokens4Rows[Q8_0] = rows4
		if err != nil {
			t.Fatal(err)
		}
		expectBits(t, fmt.Sprintf("dim %d, %d heads over %d", c.dim, c.heads, c.kvHeads), got, want)
	}
}

// TestFloatMatMul checks which order MatMul and MulMatID give F16 and F32 weights: tinyBLAS's
// (tinyDot) for a batch of two tokens or more when the rows are a multiple of 4 and the
// row length of 16, ggml_vec_dot's otherwise and always for MulMatID (mul_mat_id), row by
// row against dotF16/dotF32 and a plain tinyDot, through the four-row kernels and the
// rows left over.
func TestFloatMatMul(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	p := NewPool(2)
	defer p.Close()
	for _, typ := range []Type{F16, F32} {
		for _, shape := range [][2]int{{8, 96}, {6, 96}, {8, 72}, {12, 16}} {
			rows, cols := shape[0], shape[1]
			data := make([]byte, 2*rows*int(must(typ.RowBytes(int64(cols)))))
			active.traits[typ].FromFloat(wideFloats(rng, 2*rows*cols), data)
			m, err := NewMatrix(typ, []int64{int64(cols), int64(rows), 2}, data)
			if err != nil {
				t.Fatal(err)
			}
			rb := m.rowBytes
			for _, tokens := range []int{1, 2, 5} {
				x := wideFloats(rng, tokens*cols)
				act := make([]byte, tokens*rb)
				active.traits[typ].FromFloat(x, act)
				want := func(e, r, tok int, tiny bool) float32 {
					w, a := data[(e*rows+r)*rb:][:rb], act[tok*rb:][:rb]
					if !tiny {
						return active.traits[typ].VecDot(cols, w, a)
					}
					q, k := make([]float32, cols), make([]float32, cols)
					active.traits[typ].ToFloat(w, q)
					active.traits[typ].ToFloat(a, k)
					return tinyDotGo(q, k)
				}
				expert := m.Expert(1)
				dst := make([]float32, tokens*rows)
				if err := p.MatMul(dst, &expert, x); err != nil {
					t.Fatal(err)
				}
				tiny := tokens >= 2 && rows%4 == 0 && cols%16 == 0
				ids := make([]int32, tokens)
				idDst := make([]float32, tokens*rows)
				if err := p.MulMatID(idDst, m, x, ids, 1); err != nil {
					t.Fatal(err)
				}
				for tok := range tokens {
					for r := range rows {
						if got, w := dst[tok*rows+r], want(1, r, tok, tiny); math.Float32bits(got) != math.Float32bits(w) {
							t.Fatalf("%s %dx%d, %d tokens: MatMul token %d row %d: %v, want %v (tinyBLAS %v)", typ, rows, cols, tokens, tok, r, got, w, tiny)
						}
						if got, w := idDst[tok*rows+r], want(0, r, tok, false); math.Float32bits(got) != math.Float32bits(w) {
							t.Fatalf("%s %dx%d, %d tokens: MulMatID token %d row %d: %v, want %v", typ, rows, cols, tokens, tok, r, got, w)
						}
					}
				}
			}
		}
	}
}

// TestAttentionKeep checks AttnParams.Keep, DeepSeek Sparse Attention's chosen positions:
// a query keeping some positions gets the same bits as one attending a cache made of just
// those rows (ggml skips masked positions), with every kernel a single token runs, and
// keeping every position changes nothing, also where the positions are split across
// workers.
func TestAttentionKeep(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	pools := []*Pool{NewPool(1), NewPool(2)}
	for _, p := range pools {
		defer p.Close()
	}
	const dim, vDim, heads = 96, 64, 4 // an MLA-like cache: one head, V a prefix of K
	for _, typ := range []Type{F16, F32, Q8_0} {
		for _, kvLen := range []int{300, 600} {
			rows := randomFloats(rng, kvLen*dim)
			k := denseKV(t, typ, rows, dim, 1)
			v := k
			v.Dim = vDim
			q := randomFloats(rng, heads*dim)
			pos := []int32{int32(kvLen - 1)}
			var keep []int32
			for j := range kvLen {
				if rng.IntN(3) == 0 || j == kvLen-1 {
					keep = append(keep, int32(j))
				}
			}
			gatheredRows := make([]float32, 0, len(keep)*dim)
			for _, j := range keep {
				gatheredRows = append(gatheredRows, rows[int(j)*dim:(int(j)+1)*dim]...)
			}
			gk := denseKV(t, typ, gatheredRows, dim, 1)
			gv := gk
			gv.Dim = vDim
			all := seq(0, kvLen)
			for _, numerics := range []AttnNumerics{AttnPrecise, AttnGGML} {
				for _, p := range pools {
					a := AttnParams{Scale: 0.1, Numerics: numerics}
					run := func(k, v KV, pos []int32, kvLen int, keep []int32) []float32 {
						out := make([]float32, heads*vDim)
						a.Keep = keep
						if err := p.Attention(out, q, heads, pos, k, v, kvLen, a); err != nil {
							t.Fatal(err)
						}
						return out
					}
					name := fmt.Sprintf("%s, %d positions, numerics %d, %d threads", typ, kvLen, numerics, p.threads)
					if !slices.Equal(run(k, v, pos, kvLen, all), run(k, v, pos, kvLen, nil)) {
						t.Errorf("%s: keeping every position changes the result", name)
					}
					got := run(k, v, pos, kvLen, keep)
					want := run(gk, gv, []int32{int32(len(keep) - 1)}, len(keep), nil)
					if kvLen < ggmlSplitKV || p.threads == 1 {
						if !slices.Equal(got, want) {
							t.Errorf("%s: kept positions give other bits than a cache of those rows", name)
						}
						continue
					}
					// Split across the workers, as ggml splits a lone token's whole range, the kept
					// positions are summed in float32 parts; the gathered rows, too few to split,
					// go through the per-row kernel, which sums an F16 V in F16.
					for i := range got {
						if math.Abs(float64(got[i]-want[i])) > 2e-3 {
							t.Fatalf("%s: element %d: %g kept, %g over the gathered rows", name, i, got[i], want[i])
						}
					}
				}
			}
		}
	}
	out := make([]float32, 2*heads*vDim)
	k := denseKV(t, F16, randomFloats(rng, 10*dim), dim, 1)
	v := k
	v.Dim = vDim
	for _, c := range []struct {
		pos  []int32
		keep []int32
	}{{[]int32{8, 9}, []int32{1, 2}}, {[]int32{9}, []int32{3, 3}}, {[]int32{9}, []int32{4, 2}}} {
		err := pools[0].Attention(out[:len(c.pos)*heads*vDim], randomFloats(rng, len(c.pos)*heads*dim), heads, c.pos, k, v, 10, AttnParams{Scale: 1, Keep: c.keep})
		if err == nil {
			t.Errorf("keeping %v for positions %v: no error", c.keep, c.pos)
		}
	}
}

// TestAttentionBatchKernel checks AttnParams.Batch: a token attending alone as part of a
// batch of 64 or more gets the bits its row gets in that batch's call (ggml's tiled
// kernel, whose rows do not depend on each other), also through Keep when it keeps every
// position it sees; keeping fewer masks them in the tiles, which changes the result; a
// part of a batch is never split across workers as a lone token's long range is.
func TestAttentionBatchKernel(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	p := NewPool(2)
	defer p.Close()
	const dim, vDim, heads, kvLen = 80, 64, 4, 700
	rows := randomFloats(rng, kvLen*dim)
	k := denseKV(t, F16, rows, dim, 1)
	v := k
	v.Dim = vDim
	const batch = 70
	pos := seq(kvLen-batch, batch)
	q := randomFloats(rng, batch*heads*dim)
	a := AttnParams{Scale: 0.125, Numerics: AttnGGML}
	whole := make([]float32, batch*heads*vDim)
	if err := p.Attention(whole, q, heads, pos, k, v, kvLen, a); err != nil {
		t.Fatal(err)
	}
	alone := func(tok int, keep []int32, batchOf int) []float32 {
		out := make([]float32, heads*vDim)
		b := a
		b.Keep, b.Batch = keep, batchOf
		if err := p.Attention(out, q[tok*heads*dim:(tok+1)*heads*dim], heads, pos[tok:tok+1], k, v, kvLen, b); err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, tok := range []int{0, 37, batch - 1} {
		want := whole[tok*heads*vDim : (tok+1)*heads*vDim]
		if got := alone(tok, nil, batch); !slices.Equal(got, want) {
			t.Errorf("token %d of %d alone: other bits than in its batch", tok, batch)
		}
		if got := alone(tok, seq(0, int(pos[tok])+1), batch); !slices.Equal(got, want) {
			t.Errorf("token %d of %d keeping every position: other bits than in its batch", tok, batch)
		}
		if got := alone(tok, nil, 0); slices.Equal(got, want) {
			t.Errorf("token %d alone without its batch: the tiled kernel's bits (the per-row kernel's are expected)", tok)
		}
		var keep []int32
		for j := range int(pos[tok]) + 1 {
			if j%3 != 1 {
				keep = append(keep, int32(j))
			}
		}
		kept := alone(tok, keep, batch)
		if slices.Equal(kept, want) {
			t.Errorf("token %d keeping two thirds of its positions: the result did not change", tok)
		}
		ref := refAttention(q[tok*heads*dim:(tok+1)*heads*dim], heads, pos[tok:tok+1], k, v, kvLen, AttnParams{Scale: a.Scale, Keep: keep})
		for i := range kept {
			if math.Abs(float64(kept[i])-ref[i]) > 1e-3 {
				t.Fatalf("token %d keeping two thirds: element %d is %g, the float64 reference %g", tok, i, kept[i], ref[i])
			}
		}
	}
	if err := p.Attention(make([]float32, heads*vDim), q[:heads*dim], heads, pos[:1], k, v, kvLen, AttnParams{Batch: -1}); err == nil {
		t.Error("a negative batch: no error")
	}
}
