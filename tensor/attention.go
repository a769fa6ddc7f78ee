package tensor

import (
	"fmt"
	"math"
	"slices"
)

// KV is one layer's cached keys or values, usually a view of the cache memory: for each
// position, Heads rows of Dim elements of Type. The row of position j and head h starts at
// byte j·PosStride + h·HeadStride of Data. llama.cpp's cache is dense (PosStride =
// Heads·HeadStride, HeadStride = the bytes of Dim elements); DeepSeek's MLA cache stores
// one row [compressed kv | rope part] per position and uses its first kv_lora_rank elements
// as V: a view with the same Data and PosStride and a smaller Dim.
//
// Cells, when positive, makes the cache a ring of that many rows: position j is kept at row
// j mod Cells, as a sliding-window layer keeps only its last positions (llama.cpp's SWA
// cache, whose cells a single sequence fills in this order). 0 means row j is position j.
type KV struct {
	Type       Type
	Data       []byte
	Dim        int
	Heads      int
	PosStride  int
	HeadStride int
	Cells      int
}

// cell is the row that holds position j (divided only past the first lap: a full cache
// never wraps).
func (c *KV) cell(j int) int {
	if c.Cells > 0 && j >= c.Cells {
		return j % c.Cells
	}
	return j
}

// runEnd is the position after j at which the ring wraps to row 0 again: positions j up to
// it lie in consecutive rows.
func (c *KV) runEnd(j int) int {
	if c.Cells > 0 {
		return j - j%c.Cells + c.Cells
	}
	return math.MaxInt
}

// row returns the bytes of position j, head h.
func (c *KV) row(j, h, rowBytes int) []byte {
	off := c.cell(j)*c.PosStride + h*c.HeadStride
	return c.Data[off : off+rowBytes]
}

// at returns the cache from position j on, head h: rows of PosStride bytes up to runEnd(j).
func (c *KV) at(j, h int) []byte {
	return c.Data[c.cell(j)*c.PosStride+h*c.HeadStride:]
}

// AttnNumerics chooses how attention does its arithmetic.
type AttnNumerics int

const (
	// AttnPrecise keeps Q in float32, decodes K and V to float32, sums dot products in
	// float64 and accumulates in float32.
	AttnPrecise AttnNumerics = iota
	// AttnGGML does what ggml-cpu's flash attention (GGML_OP_FLASH_ATTN_EXT, llama.cpp's
	// default on CPU) does, to get close to llama.cpp's values bit for bit:
	//   - fewer than 64 query tokens, or a K/V type other than F16/F32 (the per-row kernel):
	//     Q is converted to K's VecDotType (F16 for an F16 cache, Q8_0 for Q8_0), each score is
	//     K's VecDot, the softmax runs online position by position with expf, and with an F16 V
	//     the weighted sum of V is accumulated in F16 (rounded after every step); otherwise
	//     in float32 with fused multiply-adds.
	//   - one query token and at least 512 positions, F16/F32 K and V of one type: the
	//     positions are split into one chunk per thread whose partial results are merged,
	//     as ggml splits them across its threads (so the result depends on the thread count,
	//     as llama.cpp's does).
	//   - 64 query tokens or more with F16/F32 K and V of one type and Dim a multiple of 16
	//     (the tiled kernel): Q stays float32, scores are float32 fused multiply-add chains,
	//     the online softmax advances 64 positions at a time with ggml_v_expf, and V is
	//     accumulated in float32.
	// Checked against ggml itself (tools/oracle/ops_golden.cpp), it gives the same bits for an
	// F16 cache as the build the fixtures come from, ggml's AVX-512 build without
	// AVX512-FP16 (ggml_float.go; a build with AVX512-FP16 multiplies and adds the F16 scores
	// in half precision, ~1e-3 away). Not reproduced: the order in which ggml's SIMD dot
	// products of Q8_0 caches add up (scores use K's VecDot as Traits defines it, which
	// differs in the last bits).
	AttnGGML
)

// AttnParams are the settings of one attention call.
type AttnParams struct {
	Scale float32 // multiplies q·k: usually 1/sqrt(head size); DeepSeek's YaRN scale differs
	// Window is the sliding window of SWA layers (gpt-oss): key j is visible from query
	// position p only if p − j < Window. 0 means no window.
	Window int
	// Sinks holds one logit per query head that joins each softmax's denominator without a
	// value (gpt-oss's attention sinks); nil for none.
	Sinks []float32
	// Keep, when not nil, lists the only positions the query attends, ascending (DeepSeek
	// Sparse Attention's choice); the others are skipped as ggml's flash attention skips
	// masked positions, split across workers as the whole range would be. One query token.
	Keep []int32
	// Batch, when more than the call's tokens, is how many query tokens the llama.cpp
	// operation these belong to has (one context's tokens of a ubatch): ggml picks its
	// kernel by that count, so that with AttnGGML a part of a batch of 64 or more runs the
	// tiled kernel's arithmetic and a part of any batch is never split across workers. 0:
	// the call's own tokens.
	Batch    int
	Numerics AttnNumerics
}

// batchTokens is the number of query tokens ggml's kernel choice sees for a call of n.
func (a *AttnParams) batchTokens(n int) int { return max(n, a.Batch) }

// ggmlTile is the tile of ggml's tiled flash attention kernel (GGML_FA_TILE_Q/_KV), and
// ggmlSplitKV the number of positions from which it splits a single query's positions
// across threads.
const (
	ggmlTile    = 64
	ggmlSplitKV = 512
)

// tiledTokens is how many query tokens one unit of the tiled kernel takes: their rows share
// each decoded tile of K and V (a row's arithmetic does not depend on its neighbours, so
// the grouping changes no bit), and a batch still cuts into enough units for the workers.
const tiledTokens = 32

// Attention is causal multi-head attention over a KV cache (llama.cpp's build_attn with
// flash attention): for query token t at position pos[t] and head h,
//
//	out[t][h] = Σ_j softmax_j(Scale · q[t][h]·K[j][g]) · V[j][g],   g = h / (heads / kvHeads)
//
// over the positions j < kvLen with j <= pos[t] (and inside the sliding window). q is
// [tokens][heads][k.Dim] and dst [tokens][heads][v.Dim], both float32; k and v hold
// kvHeads heads each (grouped-query attention when kvHeads < heads). The softmax runs online
// over the positions, so memory does not grow with the context; one query token with a
// long context is split into chunks of positions across the workers and merged.
func (p *Pool) Attention(dst, q []float32, heads int, pos []int32, k, v KV, kvLen int, a AttnParams) error {
	if err := p.lock(); err != nil {
		return err
	}
	defer p.mu.Unlock()
	j := &p.jobs.attn // the pool's job value: nothing to allocate
	*j = attnJob{q: q, dst: dst, heads: heads, pos: pos, k: k, v: v, kvLen: kvLen, params: a}
	if err := j.check(); err != nil {
		return err
	}
	j.kernel = j.chooseKernel()
	j.chunks, j.chunkLen = 1, kvLen
	if j.kernel != attnTiled && a.batchTokens(len(pos)) == 1 && kvLen >= ggmlSplitKV && p.threads > 1 &&
		(a.Numerics != AttnGGML || j.kernel == attnRowFloatKV) {
		j.chunks = p.threads
		j.chunkLen = ceilDiv(kvLen, p.threads)
	}
	j.kvHeads = k.Heads
	j.group = heads / k.Heads
	j.block = 1
	if j.kernel == attnTiled {
		j.block = tiledTokens
	}
	p.scratch.attn = grow(p.scratch.attn, p.threads)
	j.scratch = p.scratch.attn
	if j.chunks > 1 {
		p.scratch.partials = grow(p.scratch.partials, heads*j.chunks*(v.Dim+2))
		j.partials = p.scratch.partials
	}
	if err := p.run(j, ceilDiv(len(pos), j.block)*j.kvHeads*j.chunks); err != nil || j.chunks == 1 {
		return err
	}
	j.merging = true
	return p.run(j, heads)
}

// check validates the shapes; the cache layout comes from the runtime, positions from the
// batch, so a mismatch is reported, not a crash.
func (j *attnJob) check() error {
	k, v := &j.k, &j.v
	if j.heads <= 0 || k.Heads <= 0 || j.heads%k.Heads != 0 || v.Heads != k.Heads {
		return fmt.Errorf("attention: %d query heads over %d K heads and %d V heads", j.heads, k.Heads, v.Heads)
	}
	if len(j.q) != len(j.pos)*j.heads*k.Dim || len(j.dst) != len(j.pos)*j.heads*v.Dim {
		return fmt.Errorf("attention: %d tokens × %d heads need %d query and %d output values, have %d and %d",
			len(j.pos), j.heads, len(j.pos)*j.heads*k.Dim, len(j.pos)*j.heads*v.Dim, len(j.q), len(j.dst))
	}
	if j.params.Sinks != nil && len(j.params.Sinks) != j.heads {
		return fmt.Errorf("attention: %d sinks for %d heads", len(j.params.Sinks), j.heads)
	}
	if j.kvLen < 0 || j.params.Window < 0 || j.params.Batch < 0 {
		return fmt.Errorf("attention: %d positions, window %d, batch %d", j.kvLen, j.params.Window, j.params.Batch)
	}
	if keep := j.params.Keep; keep != nil {
		if len(j.pos) != 1 {
			return fmt.Errorf("attention: positions to keep for %d query tokens (one at a time)", len(j.pos))
		}
		for i, p := range keep {
			if p < 0 || i > 0 && p <= keep[i-1] {
				return fmt.Errorf("attention: the positions to keep are not ascending (%d after %d)", p, keep[max(i-1, 0)])
			}
		}
	}
	for _, c := range []struct {
		name  string
		cache *KV
	}{{"K", k}, {"V", v}} {
		kv := c.cache
		tr, err := TraitsOf(kv.Type)
		if err != nil {
			return fmt.Errorf("attention: %s cache: %w", c.name, err)
		}
		if tr.ToFloat == nil || (c.name == "K" && tr.VecDot == nil) {
			return fmt.Errorf("attention: no %s cache kernels for %s", c.name, kv.Type)
		}
		if kv.Dim <= 0 {
			return fmt.Errorf("attention: %s head size %d", c.name, kv.Dim)
		}
		rowBytes, err := kv.Type.RowBytes(int64(kv.Dim))
		if err != nil {
			return fmt.Errorf("attention: %s cache: %w", c.name, err)
		}
		if kv.HeadStride < 0 || kv.PosStride < 0 || (kv.Heads > 1 && kv.HeadStride < int(rowBytes)) {
			return fmt.Errorf("attention: %s cache strides %d, %d for rows of %d bytes", c.name, kv.PosStride, kv.HeadStride, rowBytes)
		}
		if kv.Cells < 0 || kv.Cells != k.Cells {
			return fmt.Errorf("attention: a %s cache of %d cells, K's has %d", c.name, kv.Cells, k.Cells)
		}
		if rows := j.rows(); rows > 0 {
			end := int64(rows-1)*int64(kv.PosStride) + int64(kv.Heads-1)*int64(kv.HeadStride) + rowBytes
			if end > int64(len(kv.Data)) {
				return fmt.Errorf("attention: %d positions of the %s cache need %d bytes, it has %d", j.kvLen, c.name, end, len(kv.Data))
			}
		}
	}
	if err := j.checkRing(); err != nil {
		return err
	}
	j.kRowBytes, _ = k.Type.RowBytes(int64(k.Dim))
	j.vRowBytes, _ = v.Type.RowBytes(int64(v.Dim))
	j.kTraits, _ = TraitsOf(k.Type)
	j.vTraits, _ = TraitsOf(v.Type)
	if j.params.Numerics == AttnGGML {
		qt := j.kTraits.VecDotType
		qBytes, err := qt.RowBytes(int64(k.Dim))
		if err != nil {
			return fmt.Errorf("attention: queries as %s: %w", qt, err)
		}
		j.qBytes = int(qBytes)
		if err := QuantizeActivations(qt, nil, nil); err != nil { // is there a converter?
			return fmt.Errorf("attention: queries for a %s cache: %w", k.Type, err)
		}
	}
	return nil
}

// rows is how many rows of the caches the positions below kvLen occupy.
func (j *attnJob) rows() int {
	if j.k.Cells > 0 {
		return min(j.kvLen, j.k.Cells)
	}
	return j.kvLen
}

// checkRing makes sure a ring cache holds every position the batch's queries see.
func (j *attnJob) checkRing() error {
	return CheckRing(j.pos, j.kvLen, j.params.Window, j.k.Cells)
}

// CheckRing makes sure a ring cache of cells rows (0: not a ring) holds every position the
// queries at pos see among the first kvLen, with a sliding window of window positions (0:
// none): they must lie within cells consecutive positions, or some would share a row. Every
// backend's attention checks it.
func CheckRing(pos []int32, kvLen, window, cells int) error {
	if cells == 0 || kvLen <= cells || len(pos) == 0 {
		return nil
	}
	first, last := math.MaxInt, -1
	for _, p := range pos {
		f, l := visibleRange(int(p), kvLen, window)
		if f <= l {
			first, last = min(first, f), max(last, l)
		}
	}
	if last >= 0 && last-first+1 > cells {
		return fmt.Errorf("attention: the queries see positions %d to %d, more than the ring cache's %d cells hold (window %d)",
			first, last, cells, window)
	}
	return nil
}

// The kernels Attention can run.
const (
	attnPrecise    = iota // AttnPrecise
	attnRow               // ggml's per-row kernel, a K/V type other than F16/F32
	attnRowFloatKV        // ggml's per-row kernel, F16/F32 K and V of one type (may split)
	attnTiled             // ggml's tiled kernel
)

func (j *attnJob) chooseKernel() int {
	switch {
	case j.params.Numerics != AttnGGML:
		return attnPrecise
	case TiledAttention(j.params.batchTokens(len(j.pos)), j.k, j.v):
		return attnTiled
	case floatKV(j.k, j.v):
		return attnRowFloatKV
	}
	return attnRow
}

// AttnTileTokens is the batch size from which ggml's flash attention may run its tiled
// kernel (GGML_FA_TILE_Q).
const AttnTileTokens = ggmlTile

// TiledAttention reports whether Attention with AttnGGML runs ggml's tiled kernel for a
// batch of tokens query tokens over the caches k and v — vectorized here, as in ggml —
// rather than its per-row kernel: batches of AttnTileTokens or more over F16 or F32
// caches of one type.
func TiledAttention(tokens int, k, v KV) bool {
	return floatKV(k, v) && tokens >= AttnTileTokens && v.Dim%vecWidth == 0
}

// floatKV reports whether K and V are both F16 or both F32.
func floatKV(k, v KV) bool { return (k.Type == F16 || k.Type == F32) && k.Type == v.Type }

type attnJob struct {
	q, dst    []float32
	heads     int
	pos       []int32
	k, v      KV
	kvLen     int
	params    AttnParams
	kTraits   *Traits
	vTraits   *Traits
	kRowBytes int64
	vRowBytes int64
	qBytes    int
	kernel    int
	kvHeads   int
	group     int // query heads per KV head
	block     int // query tokens per unit: 1, or tiledTokens for the tiled kernel
	chunks    int // chunks of positions per (token, KV head)
	chunkLen  int
	partials  []float32 // per (head, chunk): M, S, then Dim(V) accumulators
	merging   bool      // the second pass, merging the chunks
	scratch   []attnScratch
}

// attnScratch is one worker's working memory.
type attnScratch struct {
	q      []byte         // the group's queries converted for K's VecDot
	qWide  []float32      // or rounded to F16 and widened (an F16 K)
	keys   []float32      // decoded K rows (the tiled kernel: a tile, transposed)
	values []float32      // decoded V rows
	krow   []float32      // the tiled kernel: one K row before it is transposed
	acc    []float32      // per row (query token and head of the group): the weighted sum of V
	max    []float32      // per row: the running maximum score (M)
	sum    []float32      // per row: the running sum of exponentials (S)
	scores []float32      // a tile of scores (perRow: a chunk's for the group)
	exps   []float32      // perRow: each step's exponential
	raised []bool         // perRow: whether the step's score raised the running maximum
	kept   [ggmlTile]bool // the tiled kernel with Keep: which of a tile's positions are kept
	// madHeads: per block of eight heads and position, each head's weight of the values
	// (ws) and rescaling of its accumulator (ms), and which heads rescale (a bit each).
	ws, ms      []float32
	raisedHeads []uint8
}

func (j *attnJob) unit(w, u int) {
	if j.merging {
		j.merge(u)
		return
	}
	chunk := u % j.chunks
	g := u / j.chunks % j.kvHeads
	t0 := u / (j.chunks * j.kvHeads) * j.block
	t1 := min(t0+j.block, len(j.pos))
	s := &j.scratch[w]
	dk, dv, group := j.k.Dim, j.v.Dim, j.group
	rows := (t1 - t0) * group
	s.acc = grow(s.acc, (rows+7)&^7*dv) // madHeads writes whole eights of heads
	s.max = grow(s.max, rows)
	s.sum = grow(s.sum, rows)
	clear(s.acc)
	clear(s.sum)
	for r := range s.max {
		s.max[r] = float32(math.Inf(-1))
	}
	if j.kernel == attnTiled {
		j.tiled(s, g, t0, t1)
	} else {
		first, last := j.visible(t0)
		c0 := chunk * j.chunkLen
		c1 := min(c0+j.chunkLen, j.kvLen)
		qs := j.q[(t0*j.heads+g*group)*dk : (t0*j.heads+(g+1)*group)*dk]
		if j.kernel != attnPrecise {
			j.perRowQueries(s, qs) // once for all the runs Keep makes
		}
		j.keptRuns(max(first, c0), min(last, c1-1), func(from, to int) {
			if j.kernel == attnPrecise {
				j.precise(s, qs, g, from, to)
			} else {
				j.perRow(s, g, from, to)
			}
		})
	}
	for r := range rows {
		t, h := t0+r/group, g*group+r%group
		acc := s.acc[r*dv : (r+1)*dv]
		m, sum := s.max[r], s.sum[r]
		if j.params.Sinks != nil && chunk == 0 {
			m, sum = addSink(acc, m, sum, j.params.Sinks[h])
		}
		if j.chunks > 1 {
			part := j.partials[(h*j.chunks+chunk)*(dv+2):][:dv+2]
			part[0], part[1] = m, sum
			copy(part[2:], acc)
			continue
		}
		finish(j.dst[(t*j.heads+h)*dv:][:dv], acc, sum)
	}
}

// keptRuns calls visit for each run of consecutive positions of first..last that the query
// attends: the whole range, or the runs of Keep inside it. The kernels carry their online
// softmax from one call to the next, so the runs add up to one pass that skips the rest.
func (j *attnJob) keptRuns(first, last int, visit func(from, to int)) {
	keep := j.params.Keep
	if keep == nil {
		if first <= last {
			visit(first, last)
		}
		return
	}
	i, _ := slices.BinarySearch(keep, int32(first))
	for i < len(keep) && int(keep[i]) <= last {
		from := i
		for i+1 < len(keep) && keep[i+1] == keep[i]+1 && int(keep[i+1]) <= last {
			i++
		}
		visit(int(keep[from]), int(keep[i]))
		i++
	}
}

// visible is the range of positions query token t sees: causal, and inside the window if
// any.
func (j *attnJob) visible(t int) (first, last int) {
	return visibleRange(int(j.pos[t]), j.kvLen, j.params.Window)
}

// visibleRange is the positions a query at pos sees among the first kvLen, with a sliding
// window of window positions (0: none).
func visibleRange(pos, kvLen, window int) (first, last int) {
	first, last = 0, min(pos, kvLen-1)
	if window > 0 {
		first = max(first, pos-window+1)
	}
	return first, last
}

// addSink lets a sink logit join the softmax (ggml applies it after the positions).
func addSink(acc []float32, m, sum, sink float32) (float32, float32) {
	ms, vs := float32(1), float32(1)
	if sink > m {
		ms = exp32(m - sink)
		m = sink
		for d := range acc {
			acc[d] *= ms
		}
	} else {
		vs = exp32(sink - m)
	}
	return m, fma32(sum, ms, vs)
}

// finish divides the weighted sum by the softmax denominator.
func finish(out, acc []float32, sum float32) {
	inv := float32(0)
	if sum != 0 {
		inv = 1 / sum
	}
	for d, x := range acc {
		out[d] = x * inv
	}
}

// merge combines the chunks of head u of the (single) query token, as ggml's
// flash_attn_ext_reduce_partials does.
func (j *attnJob) merge(h int) {
	dv := j.v.Dim
	out := j.dst[h*dv : (h+1)*dv]
	clear(out)
	m, sum := float32(math.Inf(-1)), float32(0)
	for c := range j.chunks {
		part := j.partials[(h*j.chunks+c)*(dv+2):][:dv+2]
		pm, ps := part[0], part[1]
		if ps == 0 {
			continue
		}
		newMax := max(m, pm)
		scaleOld, scaleNew := exp32(m-newMax), exp32(pm-newMax)
		for d, x := range part[2:] {
			out[d] = fma32(out[d], scaleOld, float32(x*scaleNew))
		}
		sum = fma32(sum, scaleOld, float32(ps*scaleNew))
		m = newMax
	}
	if sum != 0 {
		inv := 1 / sum
		for d := range out {
			out[d] *= inv
		}
	}
}

// precise is the plain kernel: float32 queries, float64 dot products, float32 accumulation.
func (j *attnJob) precise(s *attnScratch, qs []float32, g, first, last int) {
	dk, dv, group := j.k.Dim, j.v.Dim, j.group
	s.keys = grow(s.keys, dk)
	s.values = grow(s.values, dv)
	for pos := first; pos <= last; pos++ {
		j.kTraits.ToFloat(j.k.row(pos, g, int(j.kRowBytes)), s.keys)
		j.vTraits.ToFloat(j.v.row(pos, g, int(j.vRowBytes)), s.values)
		for i := range group {
			s.step(i, dv, float32(active.dotFloat64(qs[i*dk:(i+1)*dk], s.keys))*j.params.Scale, false, false)
		}
	}
}

// The inner loops of the plain kernel, in plain Go: the generic level's kernels
// (kernels.go documents each; the SIMD levels have vector versions, simd_attn_amd64.go).

func dotFloat64Go(q, k []float32) float64 {
	k = k[:len(q)]
	var s0, s1, s2, s3 float64
	d := 0
	for ; d+4 <= len(q); d += 4 {
		s0 += float64(q[d]) * float64(k[d])
		s1 += float64(q[d+1]) * float64(k[d+1])
		s2 += float64(q[d+2]) * float64(k[d+2])
		s3 += float64(q[d+3]) * float64(k[d+3])
	}
	for ; d < len(q); d++ {
		s0 += float64(q[d]) * float64(k[d])
	}
	return (s0 + s1) + (s2 + s3)
}

func madHalfGo(acc, x []float32, s float32) {
	acc = acc[:len(x)]
	for d, v := range x {
		acc[d] = roundToF16(fma32(v, s, acc[d]))
	}
}

func scaleHalfGo(acc []float32, s float32) {
	for d, a := range acc {
		acc[d] = roundToF16(a * s)
	}
}

func madFloatGo(acc, x []float32, s float32) {
	acc = acc[:len(x)]
	for d, v := range x {
		acc[d] = fma32(v, s, acc[d])
	}
}

func addScaledGo(acc, x []float32, s float32) {
	acc = acc[:len(x)]
	for d, v := range x {
		acc[d] += v * s
	}
}

// step adds one position (its score and the values in s.values) to head i's online softmax:
// a new maximum rescales the sum and the accumulator by e^(old−new), otherwise the position
// weighs e^(score−max). ggml's per-row kernel does the multiply-adds fused and, for an F16 V,
// rounds its accumulator to F16 after every step (fused, half); the plain kernel does neither.
func (s *attnScratch) step(i, dv int, score float32, fused, half bool) {
	if raised := score > s.max[i]; raised {
		s.apply(i, dv, score, exp32(s.max[i]-score), true, fused, half)
	} else {
		s.apply(i, dv, score, exp32(score-s.max[i]), false, fused, half)
	}
}

// apply is step with its exponential e given: e^(M−score) when the score raised the
// running maximum M (raised), else e^(score−M).
func (s *attnScratch) apply(i, dv int, score, e float32, raised, fused, half bool) {
	acc := s.acc[i*dv : (i+1)*dv]
	ms, vs := float32(1), e
	if raised {
		ms, vs = e, 1
		s.max[i] = score
		if half {
			active.scaleHalf(acc, ms)
		} else {
			for d := range acc {
				acc[d] *= ms
			}
		}
	}
	if fused {
		if half {
			active.madHalf(acc, s.values, vs)
		} else {
			active.madFloat(acc, s.values, vs)
		}
		s.sum[i] = fma32(s.sum[i], ms, vs)
		return
	}
	active.addScaled(acc, s.values, vs)
	s.sum[i] = s.sum[i]*ms + vs
}

// perRowQueries converts the group's queries qs as ggml's per-row kernel does before its
// scores: for an F16 K rounded to F16 and widened, otherwise to K's VecDotType.
func (j *attnJob) perRowQueries(s *attnScratch, qs []float32) {
	dk, group := j.k.Dim, j.group
	if j.k.Type == F16 {
		s.qWide = grow(s.qWide, group*dk)
		for d, x := range qs[:group*dk] {
			s.qWide[d] = roundToF16(x)
		}
		s.keys = grow(s.keys, dk)
		return
	}
	qt := j.kTraits.VecDotType
	s.q = grow(s.q, group*j.qBytes)
	for i := range group {
		// Converted at a length check accepted, so it cannot fail.
		_ = QuantizeActivations(qt, qs[i*dk:(i+1)*dk], s.q[i*j.qBytes:(i+1)*j.qBytes])
	}
}

// perRow is ggml's flash_attn_ext_f16_one_chunk over positions first..last, with the
// group's queries converted by perRowQueries. The rows of an F16 K are widened once for the
// whole group of query heads (exact), and each score summed as ggml_vec_dot_f16 does
// (vecDotF16).
func (j *attnJob) perRow(s *attnScratch, g, first, last int) {
	dk, dv, group := j.k.Dim, j.v.Dim, j.group
	wide := j.k.Type == F16
	s.values = grow(s.values, dv)
	halfV := j.v.Type == F16 // ggml accumulates an F16 V in F16 (VKQ16)
	// A chunk of positions at a time: first the group's scores, then the running maximum
	// each score meets and so each softmax step's one exponential, all of them by exp32s
	// (the same bits as one by one), then the steps in ggml's order.
	s.scores = grow(s.scores, group*perRowChunk)
	s.exps = grow(s.exps, group*perRowChunk)
	s.raised = grow(s.raised, group*perRowChunk)
	for c0, c1 := first, 0; c0 <= last; c0 = c1 {
		c1 = min(c0+perRowChunk, last+1, j.k.runEnd(c0)) // a chunk's rows are consecutive
		keys := j.k.at(c0, g)
		scored := wide && active.f16Heads != nil && active.f16Heads(s.qWide[:group*dk], keys, j.k.PosStride, c1-c0, dk, s.scores, perRowChunk, s.keys) ||
			!wide && j.scoreTokens4(s, keys, c1-c0)
		if !scored {
			for pos := c0; pos < c1; pos++ {
				krow := j.k.row(pos, g, int(j.kRowBytes))
				if wide {
					j.kTraits.ToFloat(krow, s.keys)
				}
				for i := range group {
					score := &s.scores[i*perRowChunk+pos-c0]
					if wide {
						*score = vecDotF16(s.qWide[i*dk:(i+1)*dk], s.keys)
					} else {
						*score = j.kTraits.VecDot(dk, krow, s.q[i*j.qBytes:(i+1)*j.qBytes])
					}
				}
			}
		}
		n := c1 - c0
		for i := range group {
			scores, exps, raised := s.scores[i*perRowChunk:][:n], s.exps[i*perRowChunk:][:n], s.raised[i*perRowChunk:][:n]
			m := s.max[i]
			for p, score := range scores {
				score *= j.params.Scale
				scores[p] = score
				if raised[p] = score > m; raised[p] {
					exps[p], m = m-score, score
				} else {
					exps[p] = score - m
				}
			}
			active.exp32s(exps)
		}
		if halfV && active.madHalfHeads != nil && dv%32 == 0 {
			j.madHeads(s, g, c0, n)
			continue
		}
		for pos := c0; pos < c1; pos++ {
			j.vTraits.ToFloat(j.v.row(pos, g, int(j.vRowBytes)), s.values)
			for i := range group {
				at := i*perRowChunk + pos - c0
				s.apply(i, dv, s.scores[at], s.exps[at], s.raised[at], true, halfV)
			}
		}
	}
}

// madHeads is the loop of apply calls that ends perRow's chunk (positions c0..c0+n-1, whose
// scores, exponentials and raised flags are in s) for an F16 V: the running maxima and sums
// here, the F16 accumulators by madHalfHeads eight heads at a time, each head's steps in
// the same order with the same operations, so the same bits. Heads past the group pad the
// last eight with zero weights (unit leaves room for them in s.acc).
func (j *attnJob) madHeads(s *attnScratch, g, c0, n int) {
	group, dv := j.group, j.v.Dim
	blocks := (group + 7) / 8
	// Sized for a whole chunk whatever n is, so that decoding does not allocate as the
	// context grows.
	s.ws = grow(s.ws, blocks*perRowChunk*8)
	s.ms = grow(s.ms, blocks*perRowChunk*8)
	s.raisedHeads = grow(s.raisedHeads, blocks*perRowChunk)
	clear(s.ws[:blocks*n*8])
	clear(s.raisedHeads[:blocks*n])
	for i := range group {
		b, h := i/8, i%8
		sum := s.sum[i]
		for p := range n {
			at, step := i*perRowChunk+p, (b*n+p)*8+h
			e := s.exps[at]
			if !s.raised[at] {
				s.ws[step] = e
				sum += e // fma32(sum, 1, e): one rounding either way
				continue
			}
			s.max[i] = s.scores[at]
			s.ws[step], s.ms[step] = 1, e
			s.raisedHeads[b*n+p] |= 1 << h
			sum = fma32(sum, e, 1)
		}
		s.sum[i] = sum
	}
	v := j.v.at(c0, g)
	for b := range blocks {
		active.madHalfHeads(s.acc[b*8*dv:], v, j.v.PosStride, n, dv, s.ws[b*n*8:], s.ms[b*n*8:], s.raisedHeads[b*n:])
	}
}

// scoreTokens4 scores n positions of a quantized K from keys (the first one's row) against
// the group's queries four heads at a time, through the K type's four-token rows kernel
// (a Q8_0 cache: VecDot's bits), or returns false where there is none.
func (j *attnJob) scoreTokens4(s *attnScratch, keys []byte, n int) bool {
	rows4 := active.dotTokens4Rows[j.k.Type]
	if rows4 == nil || j.group%4 != 0 {
		return false
	}
	q := func(h int) []byte { return s.q[h*j.qBytes : (h+1)*j.qBytes] }
	out := func(h int) []float32 { return s.scores[h*perRowChunk:][:n] }
	for h := 0; h < j.group; h += 4 {
		rows4(j.k.Dim, keys, j.k.PosStride, q(h), q(h+1), q(h+2), q(h+3), out(h), out(h+1), out(h+2), out(h+3))
	}
	return true
}

// perRowChunk is how many positions perRow scores, and takes the exponentials of, at a time.
const perRowChunk = 64

// tiled is ggml's flash_attn_ext_tiled for one query row per head of the group: positions go
// in tiles of 64 from 0, each tile's scores are float32 FMA chains over float32 queries and
// keys, the running maximum advances once per tile, and the tile's exponentials (ggml_v_expf,
// summed 16 at a time) weight float32 values.
func (j *attnJob) tiled(s *attnScratch, g, t0, t1 int) {
	dk, dv, group := j.k.Dim, j.v.Dim, j.group
	s.keys = grow(s.keys, ggmlTile*dk)
	s.values = grow(s.values, ggmlTile*dv)
	s.krow = grow(s.krow, dk)
	s.scores = grow(s.scores, 4*ggmlTile)
	var scores [4]*[ggmlTile]float32
	for r := range scores {
		scores[r] = (*[ggmlTile]float32)(s.scores[r*ggmlTile : (r+1)*ggmlTile])
	}
	first, last := j.visible(t0)
	for t := t0 + 1; t < t1; t++ {
		f, l := j.visible(t)
		first, last = min(first, f), max(last, l)
	}
	var kept *[ggmlTile]bool // with Keep (one token): which of the tile's positions it keeps
	if j.params.Keep != nil {
		kept = &s.kept
	}
	for tile := first / ggmlTile * ggmlTile; tile <= last; tile += ggmlTile {
		if kept != nil {
			*kept = [ggmlTile]bool{}
			some := false
			j.keptRuns(max(first, tile), min(last, tile+ggmlTile-1), func(from, to int) {
				for pos := from; pos <= to; pos++ {
					kept[pos-tile] = true
				}
				some = true
			})
			if !some {
				continue // ggml skips a tile its mask hides entirely
			}
		}
		// Decode the positions any row of the block sees, K transposed ([d][position]) so
		// that a row's scores are computed eight positions at a time. A position the token
		// does not keep is not decoded: its score becomes −Inf whatever its key, and its
		// weight 0 multiplies a zeroed value row (0·v adds nothing, as in ggml).
		for pos := max(first, tile); pos <= min(last, tile+ggmlTile-1); pos++ {
			r := pos - tile
			if kept != nil && !kept[r] {
				clear(s.values[r*dv : (r+1)*dv])
				continue
			}
			j.kTraits.ToFloat(j.k.row(pos, g, int(j.kRowBytes)), s.krow)
			for d, k := range s.krow {
				s.keys[d*ggmlTile+r] = k
			}
			j.vTraits.ToFloat(j.v.row(pos, g, int(j.vRowBytes)), s.values[r*dv:(r+1)*dv])
		}
		for t := t0; t < t1; t++ {
			f, l := j.visible(t)
			lo, hi := max(f, tile)-tile, min(l, tile+ggmlTile-1)-tile // the row's positions in the tile
			if lo > hi {
				continue // nothing visible in this tile for this token
			}
			// The heads of the group go four at a time (then two, then one), which share
			// the tile's loads; each row's arithmetic is its own.
			for i := 0; i < group; {
				n := 4
				for i+n > group {
					n /= 2
				}
				j.tileRows(s, &scores, t, g, (t-t0)*group+i, i, n, lo, hi, kept)
				i += n
			}
		}
	}
}

// tileRows runs a tile for n (1, 2 or 4) consecutive heads of group g, from head i of
// token t (its row of s.acc): their scores, each row's softmax step, and the weighted
// sums of the tile's values for the rows that have any. kept, when not nil, masks the
// positions the token does not keep as ggml's top-k mask does: their scores become −Inf,
// so they weigh nothing, and a tile with none kept changes nothing.
func (j *attnJob) tileRows(s *attnScratch, scores *[4]*[ggmlTile]float32, t, g, row, i, n, lo, hi int, kept *[ggmlTile]bool) {
	dk, dv := j.k.Dim, j.v.Dim
	var q, acc [4][]float32
	for r := range n {
		q[r] = j.q[(t*j.heads+g*j.group+i+r)*dk:][:dk]
		acc[r] = s.acc[(row+r)*dv:][:dv]
	}
	switch n {
	case 4:
		active.tileScores4(scores, &q, s.keys, lo, hi, j.params.Scale)
	case 2:
		active.tileScores2(scores[0], scores[1], q[0], q[1], s.keys, lo, hi, j.params.Scale)
	default:
		active.tileScores(scores[0], q[0], s.keys, lo, hi, j.params.Scale)
	}
	if kept != nil {
		for r := range n {
			for c := lo; c <= hi; c++ {
				if !kept[c] {
					scores[r][c] = float32(math.Inf(-1))
				}
			}
		}
	}
	all, weighed := true, [4]bool{}
	for r := range n {
		weighed[r] = s.tileSoftmax(row+r, acc[r], scores[r])
		all = all && weighed[r]
	}
	switch {
	case all && n == 4:
		active.tileAccumulate4(&acc, s.values, scores, lo, hi)
	case all && n == 2:
		active.tileAccumulate2(acc[0], acc[1], s.values, scores[0], scores[1], lo, hi)
	default:
		for r := range n {
			if weighed[r] {
				active.tileAccumulate(acc[r], s.values, scores[r], lo, hi)
			}
		}
	}
}

// tileSoftmax is ggml's online softmax step for one row (acc its weighted sum of V) and a
// tile of its scores: the running maximum advances once per tile (rescaling the row's sum
// and acc), the
// scores become their exponentials and are summed 16 at a time. False if every score is
// −Inf: the row has nothing to add.
func (s *attnScratch) tileSoftmax(row int, acc []float32, scores *[ggmlTile]float32) bool {
	tileMax, nan := active.tileMaxOf(scores)
	if nan {
		tileMax = float32(math.Inf(-1))
		for _, sc := range scores {
			if !(tileMax > sc) {
				tileMax = sc
			}
		}
	}
	if tileMax == float32(math.Inf(-1)) {
		return false
	}
	if newMax := max(s.max[row], tileMax); newMax > s.max[row] {
		ms := exp32(s.max[row] - newMax)
		for d := range acc {
			acc[d] *= ms
		}
		s.sum[row] *= ms
		s.max[row] = newMax
	}
	sum, done := active.tileExpSum(scores, s.max[row])
	if !done {
		active.tileExp(scores, s.max[row])
		sum = 0
		for c := 0; c < ggmlTile; c += vecWidth {
			sum += float64(sum16((*[vecWidth]float32)(scores[c : c+vecWidth])))
		}
	}
	s.sum[row] = float32(float64(s.sum[row]) + sum)
	return true
}

func tileScores4Go(scores *[4]*[ggmlTile]float32, q *[4][]float32, keys []float32, lo, hi int, scale float32) {
	for r, sc := range scores {
		active.tileScores(sc, q[r], keys, lo, hi, scale)
	}
}

func tileAccumulate4Go(acc *[4][]float32, values []float32, weights *[4]*[ggmlTile]float32, lo, hi int) {
	for r, w := range weights {
		active.tileAccumulate(acc[r], values, w, lo, hi)
	}
}

func tileAccumulate2Go(acc0, acc1, values []float32, weights0, weights1 *[ggmlTile]float32, lo, hi int) {
	active.tileAccumulate(acc0, values, weights0, lo, hi)
	active.tileAccumulate(acc1, values, weights1, lo, hi)
}

func tileScores2Go(scores0, scores1 *[ggmlTile]float32, q0, q1, keys []float32, lo, hi int, scale float32) {
	active.tileScores(scores0, q0, keys, lo, hi, scale)
	active.tileScores(scores1, q1, keys, lo, hi, scale)
}

// tileScoresGo sets scores[r] = (q·K[r])·scale for the tile's positions lo..hi, each dot
// one chain of fused multiply-adds over the dimensions in order (ggml's tiled kernel), and
// −Inf for the others. keys is the tile transposed: keys[d*ggmlTile+r].
func tileScoresGo(scores *[ggmlTile]float32, q, keys []float32, lo, hi int, scale float32) {
	for r := range scores {
		if r < lo || r > hi {
			scores[r] = float32(math.Inf(-1))
			continue
		}
		var dot float32
		for d, qd := range q {
			dot = fma32(qd, keys[d*ggmlTile+r], dot)
		}
		scores[r] = dot * scale
	}
}

// tileExpGo replaces each score by ggml_v_expf(score − max) (0 for −Inf).
func tileExpGo(scores *[ggmlTile]float32, max float32) {
	for r, sc := range scores {
		scores[r] = vexp32(sc - max)
	}
}

// tileAccumulateGo adds weights[r]·V[r] to acc for the positions lo..hi in order, one
// fused multiply-add per value.
func tileAccumulateGo(acc, values []float32, weights *[ggmlTile]float32, lo, hi int) {
	dv := len(acc)
	for r := lo; r <= hi; r++ {
		w, vals := weights[r], values[r*dv:(r+1)*dv]
		for d, x := range vals {
			acc[d] = fma32(x, w, acc[d])
		}
	}
}
