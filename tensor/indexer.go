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
	p.scratch.keys = grow(p.scratch.keys, p.threads*k.Dim)
	j := &p.jobs.indexer
	*j = indexerJob{dst: dst, q: q, w: w, pos: pos, k: k, heads: heads, kvLen: kvLen, last: last, rowBytes: int(rb), scratch: p.scratch.keys}
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
	scratch     []float32 // a key's float32 values per worker
}

// unit scores the positions of chunk u for every token.
func (j *indexerJob) unit(worker, u int) {
	dim := j.k.Dim
	key := j.scratch[worker*dim : (worker+1)*dim]
	inf := float32(math.Inf(-1))
	for pj := u * indexerChunk; pj < min((u+1)*indexerChunk, j.kvLen); pj++ {
		if pj > j.last {
			for t := range j.pos {
				j.dst[t*j.kvLen+pj] = inf
			}
			continue
		}
		if err := Dequantize(j.k.Type, j.k.row(pj, 0, j.rowBytes), key); err != nil {
			panic(err) // the type was checked: RowBytes knows it
		}
		for t, p := range j.pos {
			if pj > int(p) {
				j.dst[t*j.kvLen+pj] = inf
				continue
			}
			var s float32
			for h := range j.heads {
				if qk := vecDotF32(j.q[(t*j.heads+h)*dim:(t*j.heads+h+1)*dim], key); qk > 0 {
					s += qk * j.w[t*j.heads+h]
				}
			}
			j.dst[t*j.kvLen+pj] = s
		}
	}
}
