package backendtest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/tensor"
)

// RoPE, the KV cache's SetRows and attention.

// ropeConfig is one RoPE of a model family.
type ropeConfig struct {
	name   string
	rowLen int // head size
	heads  int
	rope   tensor.RoPE
}

var ropeConfigs = func() []ropeConfig {
	factors := make([]float32, 32)
	for i := range factors {
		factors[i] = 1 + float32(i%5)*0.37
	}
	return []ropeConfig{
		{"normal", 64, 4, tensor.RoPE{Mode: tensor.RoPENormal, Dims: 64, Base: 10000, FreqScale: 1, AttnFactor: 1}},
		// Llama 3's frequency factors, on the "normal" configuration otherwise.
		{"normal-factors", 64, 4, tensor.RoPE{Mode: tensor.RoPENormal, Dims: 64, Base: 10000, FreqScale: 1, AttnFactor: 1, FreqFactors: factors}},
		{"neox", 128, 2, tensor.RoPE{Mode: tensor.RoPENeoX, Dims: 128, Base: 1e6, FreqScale: 1, AttnFactor: 1}},
		// DeepSeek's MLA: the rotated part after the rest of the head.
		{"neox-offset", 96, 3, tensor.RoPE{Mode: tensor.RoPENeoX, Dims: 32, Offset: 64, Base: 10000, FreqScale: 1, AttnFactor: 1}},
		// A partial rotary factor: the first Dims of the head rotate.
		{"normal-partial", 80, 2, tensor.RoPE{Mode: tensor.RoPENormal, Dims: 32, Base: 10000, FreqScale: 1, AttnFactor: 1}},
		// gpt-oss's YaRN.
		{"neox-yarn", 64, 4, tensor.RoPE{Mode: tensor.RoPENeoX, Dims: 64, Base: 150000, FreqScale: 1.0 / 32, ExtFactor: 1,
			AttnFactor: 1, BetaFast: 32, BetaSlow: 1, OrigCtx: 4096}},
		// DeepSeek's YaRN on the normal mode, with a magnitude scale.
		{"normal-yarn", 64, 2, tensor.RoPE{Mode: tensor.RoPENormal, Dims: 64, Base: 10000, FreqScale: 0.025, ExtFactor: 1,
			AttnFactor: 0.8, BetaFast: 32, BetaSlow: 1, OrigCtx: 4096}},
	}
}()

// ropeSuite rotates tokens at positions below 512 (as test-backend-ops does: a device
// computes the angles its own way, and their error grows with the position), x as one row
// per (token, head) or one per token. The cases run on one backend one after the other,
// the same positions for every configuration of a batch size, so a backend that keeps
// the angles of earlier calls must tell the configurations apart (two differ only in
// their frequency factors).
func ropeSuite(e *env) {
	if !e.supports(tensor.F32) {
		return
	}
	for _, n := range []int{1, 3, 7, 65} {
		for _, perToken := range []bool{false, true} {
			for _, rc := range ropeConfigs {
				rows := "per-head"
				if perToken {
					rows = "per-token"
				}
				e.run(fmt.Sprintf("%s/tokens=%d,rows=%s", rc.name, n, rows), func(c *tcase) {
					pos := ropePositions(n, perToken)
					var x Tensor
					if perToken {
						x = c.random("x", rc.heads*rc.rowLen, n, -1, 1)
					} else {
						x = c.random("x", rc.rowLen, n*rc.heads, -1, 1)
					}
					c.check(x, ElementErr)
					r := rc.rope
					r.FreqFactors = slices.Clone(r.FreqFactors)
					c.run(func(b backend.Backend, s side) error { return b.RoPE(x.on(s), rc.rowLen, &r, pos) })
				})
			}
		}
	}
}

// ropePositions is n positions below 512 that depend only on n and shuffled: consecutive,
// or in another order.
func ropePositions(n int, shuffled bool) []int32 {
	rng := rand.New(rand.NewPCG(uint64(n), 512))
	start := rng.IntN(512 - n)
	pos := make([]int32, n)
	for i := range pos {
		pos[i] = int32(start + i)
	}
	if shuffled {
		rng.Shuffle(n, func(i, j int) { pos[i], pos[j] = pos[j], pos[i] })
	}
	return pos
}

// cacheTypes are the types tried as KV caches.
func cacheTypes() []tensor.Type { return tensor.Types() }

// setRowsSuite writes rows into a cache that holds other values, at its start, its middle
// and its end.
func setRowsSuite(e *env) {
	const capacity = 40
	for _, typ := range cacheTypes() {
		if !e.supports(typ) {
			continue
		}
		colsList := weightCols(typ)
		if 576%typ.BlockSize() == 0 {
			colsList = append(colsList, 576) // DeepSeek's MLA: 512 latent values and 64 rotated
		}
		for _, cols := range colsList {
			for _, n := range []int{1, 3, 7} {
				for _, first := range []int{0, 17, capacity - n} {
					e.run(fmt.Sprintf("%s/cols=%d,rows=%d,first=%d", typ, cols, n, first), func(c *tcase) {
						cache := c.tensor("cache", typ, cols, capacity, c.encoded(typ, cols*capacity))
						src := c.random("src", cols, n, -1, 1)
						c.check(cache, setRowsErr(typ, cols*n))
						c.run(func(b backend.Backend, s side) error { return b.SetRows(cache.on(s), first, src.on(s)) })
					})
				}
			}
		}
	}
}

// setRowsErr bounds the error of converting n values uniform in [-1, 1) to typ: for the
// block formats, about one value off by two steps (a device may round a value that falls
// between two steps the other way, and compute the scale in another order), relative to
// the n values' Σb² of about n/4, as test-backend-ops estimates it.
func setRowsErr(typ tensor.Type, n int) float64 {
	if typ.BlockSize() == 1 {
		return ElementErr
	}
	bits := math.Max(2, math.Round(typ.BitsPerWeight()-0.5)) // a 16-bit scale per block of 32
	step := 2 * 2 / math.Exp2(bits)
	return max(ElementErr, step*step/(0.25*float64(n)))
}

// indexerScoresSuite scores a cache of keys for DeepSeek Sparse Attention's indexer: the
// heads' ReLU'd products summed with their weights. Every token sees every position (a
// masked one scores -Inf on both sides, which the error bound cannot weigh; package
// tensor's test checks the masks).
func indexerScoresSuite(e *env) {
	const kvLen = 100
	for _, typ := range cacheTypes() {
		if !e.supports(typ) {
			continue
		}
		for _, dim := range []int{64, 128} {
			if int64(dim)%typ.BlockSize() != 0 {
				continue
			}
			for _, n := range []int{1, 5} {
				e.run(fmt.Sprintf("%s/dim=%d,tokens=%d", typ, dim, n), func(c *tcase) {
					const heads = 4
					keys := c.tensor("keys", typ, dim, kvLen, c.encoded(typ, dim*kvLen))
					q := c.random("q", dim, n*heads, -1, 1)
					w := c.random("w", heads, n, 0, 1)
					dst := c.output("dst", tensor.F32, kvLen, n, MatMulErr)
					pos := make([]int32, n)
					for i := range pos {
						pos[i] = int32(kvLen - 1 + i)
					}
					c.run(func(b backend.Backend, s side) error {
						return b.IndexerScores(dst.on(s), q.on(s), heads, pos, keys.on(s), w.on(s), kvLen)
					})
				})
			}
		}
	}
}

// attnConfig is one attention layout.
type attnConfig struct {
	name           string
	heads, kvHeads int
	kDim, vDim     int
	vOfK           bool // V is the first vDim columns of K's rows (MLA)
	window         int
	sinks          bool
	tokens         []int
	kvLen          func(n int) int
	pos            func(c *tcase, n, kvLen int) []int32
	ring           int // rows of a ring cache (position j at row j mod ring); 0: kvLen+5 rows
}

// atEnd is the positions of n new tokens at the end of the cache: a prefill or decode step.
func atEnd(_ *tcase, n, kvLen int) []int32 {
	pos := make([]int32, n)
	for i := range pos {
		pos[i] = int32(kvLen - n + i)
	}
	return pos
}

var attnConfigs = []attnConfig{
	{name: "mha", heads: 4, kvHeads: 4, kDim: 64, vDim: 64, tokens: []int{1, 3, 7},
		kvLen: func(n int) int { return 30 + n }, pos: atEnd},
	{name: "gqa", heads: 8, kvHeads: 2, kDim: 128, vDim: 128, tokens: []int{1, 7, 65},
		kvLen: func(n int) int { return 37 + n }, pos: atEnd},
	// Positions of the cache after a token's own are masked.
	{name: "gqa-masked", heads: 4, kvHeads: 1, kDim: 64, vDim: 64, tokens: []int{1, 3},
		kvLen: func(int) int { return 40 }, pos: func(c *tcase, n, _ int) []int32 { return c.positions(n, 20) }},
	// gpt-oss: sinks and a sliding window.
	{name: "sinks-window", heads: 8, kvHeads: 2, kDim: 64, vDim: 64, window: 16, sinks: true, tokens: []int{1, 7, 65},
		kvLen: func(n int) int { return 40 + n }, pos: atEnd},
	{name: "sinks", heads: 4, kvHeads: 2, kDim: 64, vDim: 64, sinks: true, tokens: []int{1, 7},
		kvLen: func(n int) int { return 20 + n }, pos: atEnd},
	// gpt-oss's sliding-window layers keep a ring of cells: the positions wrap around it
	// (twice here), inside the window and inside a long decode split across workers.
	{name: "window-ring", heads: 8, kvHeads: 2, kDim: 64, vDim: 64, window: 16, sinks: true, tokens: []int{1, 7, 65},
		kvLen: func(n int) int { return 200 + n }, pos: atEnd, ring: 96},
	{name: "long-ring", heads: 2, kvHeads: 2, kDim: 64, vDim: 64, window: 64, tokens: []int{1},
		kvLen: func(int) int { return 600 }, pos: atEnd, ring: 96},
	// DeepSeek's MLA: one KV head, V the latent part of K's rows.
	{name: "mla", heads: 4, kvHeads: 1, kDim: 96, vDim: 64, vOfK: true, tokens: []int{1, 7, 65},
		kvLen: func(n int) int { return 25 + n }, pos: atEnd},
	// A decode step over enough positions for a CPU to split them over its workers.
	{name: "long", heads: 2, kvHeads: 2, kDim: 64, vDim: 64, tokens: []int{1},
		kvLen: func(int) int { return 600 }, pos: atEnd},
}

// attentionSuite runs every layout over caches of every type the backend supports, in both
// numerics. The cache's rows past kvLen hold NaNs: nothing may read them.
func attentionSuite(e *env) {
	for _, typ := range cacheTypes() {
		if !e.supports(typ) {
			continue
		}
		for _, ac := range attnConfigs {
			if ac.kDim%int(typ.BlockSize()) != 0 || ac.vDim%int(typ.BlockSize()) != 0 {
				continue
			}
			for _, n := range ac.tokens {
				for _, num := range []tensor.AttnNumerics{tensor.AttnPrecise, tensor.AttnGGML} {
					numName := map[tensor.AttnNumerics]string{tensor.AttnPrecise: "precise", tensor.AttnGGML: "ggml"}[num]
					e.run(fmt.Sprintf("%s/%s/tokens=%d/%s", typ, ac.name, n, numName), func(c *tcase) {
						attentionCase(c, typ, ac, n, num)
					})
				}
			}
		}
	}
}

func attentionCase(c *tcase, typ tensor.Type, ac attnConfig, n int, num tensor.AttnNumerics) {
	kvLen := ac.kvLen(n)
	capacity := kvLen + 5
	if ac.ring > 0 {
		capacity = ac.ring
	}
	pos := ac.pos(c, n, kvLen)
	// cache is a cache of capacity positions of heads of dim, the first kvLen valid (all of
	// a ring's rows).
	cache := func(name string, dim int) Tensor {
		cols := ac.kvHeads * dim
		data := c.encoded(typ, cols*capacity)
		rb, _ := typ.RowBytes(int64(cols))
		for i := int64(kvLen) * rb; i < int64(len(data)); i++ {
			data[i] = 0xFF
		}
		return c.tensor(name, typ, cols, capacity, data)
	}
	k := cache("k", ac.kDim)
	v := k.Columns(0, ac.vDim)
	if !ac.vOfK {
		v = cache("v", ac.vDim)
	}
	q := c.random("q", ac.kDim, n*ac.heads, -1, 1)
	var sinks Tensor
	if ac.sinks {
		sinks = c.random("sinks", ac.heads, 1, -2, 2)
	}
	dst := c.output("dst", tensor.F32, ac.vDim, n*ac.heads, MatMulErr)
	p := tensor.AttnParams{Scale: 1 / float32(math.Sqrt(float64(ac.kDim))), Window: ac.window, Numerics: num}
	c.run(func(b backend.Backend, s side) error {
		return b.Attention(dst.on(s), q.on(s), ac.heads, pos, k.on(s), v.on(s), sinks.on(s), kvLen, p)
	})
}
