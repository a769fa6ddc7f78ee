package tensor

import (
	"fmt"
	"math"
)

// IndexerScores scores cache positions for DeepSeek Sparse Attention's lightning indexer:
//
//	dst[t][j] = Σ_h w[t][h] · relu(q[t][h] · k[j])   for j ≤ pos[t],   −∞ for pos[t] < j < kvLen
//
// q is [tokens][heads][k.Dim], w [tokens][heads] (the head weights, already scaled), keys
// one head of k.Dim values per position (any cache type; position j at row k.cell(j)), dst
// [tokens][kvLen]. Each key is dequantized once to float32; the sum runs over the heads in
// order, adding qk·w only where the dot product (ggml_vec_dot_f32's, vecDotF32) is
// positive: the scores llama.cpp's indexer graph gives on the CPU, bit for bit. Chunks of
// positions run in parallel.
func (p *Pool) IndexerScores(dst, q []float32, heads int, pos []int32, k KV, w []float32, kvLen int) error {
	n := len(pos)
	switch {
	case heads <= 0 || k.Dim <= 0 || k.Heads != 1 || kvLen < 0:
		return fmt.Errorf("indexer scores: %d heads of %d values over a cache of %d heads, %d positions", heads, k.Dim, k.Heads, kvLen)
	case len(q) != n*heads*k.Dim || len(w) != n*heads || len(dst) != n*kvLen:
		return fmt.Errorf("indexer scores: %d tokens × %d heads × %d values need %d queries, %d weights and %d scores, have %d, %d and %d",
			n, heads, k.Dim, n*heads*k.Dim, n*heads, n*kvLen, len(q), len(w), len(dst))
	case k.Cells > 0 && kvLen > k.Cells:
		return fmt.Errorf("indexer scores: %d positions in a cache of %d cells", kvLen, k.Cells)
	}
	rb, err := k.Type.RowBytes(int64(k.Dim))
	if err != nil {
		return fmt.Errorf("indexer scores: %w", err)
	}
	last := -1 // the last position a token sees
	for _, p := range pos {
		last = max(last, int(p))
	}
	if seen := min(last, kvLen-1); seen >= 0 && k.cell(seen)*k.PosStride+int(rb) > len(k.Data) {
		return fmt.Errorf("indexer scores: %d bytes of keys for %d positions", len(k.Data), seen+1)
	}
	if err := p.lock(); err != nil {
		return err
	}
	defer p.mu.Unlock()
	p.scratch.keys = grow(p.scratch.keys, p.threads*indexerChunk*k.Dim)
	p.scratch.dots = grow(p.scratch.dots, p.threads*heads)
	j := &p.jobs.indexer
	*j = indexerJob{dst: dst, q: q, w: w, pos: pos, k: k, heads: heads, kvLen: kvLen, last: last, rowBytes: int(rb),
		scratch: p.scratch.keys, dots: p.scratch.dots}
	return p.run(j, ceilDiv(kvLen, indexerChunk))
}

// indexerChunk is how many positions a unit of IndexerScores scores.
const indexerChunk = 64

type indexerJob struct {
	dst, q, w   []float32
	pos         []int32
	k           KV
	heads       int
	kvLen, last int // positions scored; the last any token sees
	rowBytes    int
	scratch     []float32 // a chunk of keys' float32 values per worker
	dots        []float32 // a key's products with the heads, per worker
}

// unit scores the positions of chunk u for every token: the chunk's keys are decoded
// once, then each token's queries (heads × values, reused across the keys while they sit
// in the cache) score them.
func (j *indexerJob) unit(worker, u int) {
	dim := j.k.Dim
	keys := j.scratch[worker*indexerChunk*dim : (worker+1)*indexerChunk*dim]
	inf := float32(math.Inf(-1))
	from, to := u*indexerChunk, min((u+1)*indexerChunk, j.kvLen)
	seen := min(to, j.last+1) // the keys any token sees
	for pj := from; pj < seen; pj++ {
		if err := Dequantize(j.k.Type, j.k.row(pj, 0, j.rowBytes), keys[(pj-from)*dim:(pj-from+1)*dim]); err != nil {
			panic(err) // the type was checked: RowBytes knows it
		}
	}
	for t, p := range j.pos {
		q, w, dst := j.q[t*j.heads*dim:(t+1)*j.heads*dim], j.w[t*j.heads:(t+1)*j.heads], j.dst[t*j.kvLen:(t+1)*j.kvLen]
		for pj := from; pj < to; pj++ {
			if pj > int(p) {
				dst[pj] = inf
				continue
			}
			dst[pj] = j.score(q, w, keys[(pj-from)*dim:(pj-from+1)*dim], worker)
		}
	}
}

// score is one token's score of one key: Σ_h w[h]·relu(q_h·key) in head order, each dot
// product ggml_vec_dot_f32's; with keys of 128 values (DeepSeek-V3.2's and GLM-5's), all
// heads' products at once where the level has vecReducedKey128 (the same bits).
func (j *indexerJob) score(q, w, key []float32, worker int) float32 {
	var s float32
	if len(key) == 128 && active.vecReducedKey128 != nil {
		dots := j.dots[worker*j.heads : (worker+1)*j.heads]
		active.vecReducedKey128(q, (*[128]float32)(key), dots)
		for h, qk := range dots {
			s += relu(qk) * w[h]
		}
		return s
	}
	dim := len(key)
	for h := range j.heads {
		s += relu(vecDotF32(q[h*dim:(h+1)*dim], key)) * w[h]
	}
	return s
}

// relu is max(x, 0) as ggml's MAX(x, 0.0f) gives it (0 for a NaN), without a branch: the
// signs of the products vary at random, which a branch mispredicts half the time. A
// negative x gives +0, whose product with a weight adds nothing to a sum, as ggml's does.
func relu(x float32) float32 {
	b := math.Float32bits(x)
	negative := uint32(int32(b) >> 31)
	nan := uint32(int32(0x7F800000-(b&0x7FFFFFFF)) >> 31)
	return math.Float32frombits(b &^ (negative | nan))
}
