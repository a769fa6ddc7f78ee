package moe

import (
	"fmt"
	"math"
	"slices"

	"github.com/moerun/moerun/tensor"
)

// deepseek32 is DeepSeek-V3.2 (llama.cpp's src/models/deepseek32.cpp) and glmDSA is GLM-5
// (src/models/glm-dsa.cpp): DeepSeek-V3's multi-head latent attention and MoE blocks with
// DeepSeek Sparse Attention. In every layer a lightning indexer scores each earlier
// position for each query, and attention reads only the top-k positions it picks. They
// differ in the indexer's RoPE (NeoX pairs for DeepSeek, adjacent pairs for GLM), GLM's
// "shared" layers, which reuse the last full layer's choice instead of having an indexer
// of their own, and the defaults llama.cpp gives missing keys.
var deepseek32 = architecture{
	yarnLogMul: true,
	config: func(c *Config, r *metaReader) error {
		c.QLoRA = r.need("{arch}.attention.q_lora_rank")
		r.require("{arch}.expert_gating_func") // deepseek32.cpp requires it
		if err := readMLAConfig(c, r, func() Gating { return GatingSoftmax }); err != nil {
			return err
		}
		// deepseek32.cpp sets the indexer key norm's epsilon (its only LayerNorm) to 1e-6.
		return readIndexerConfig(c, r, tensor.RoPENeoX, 1e-6)
	},
	attention:   bindDSA,
	feedForward: bindDSAFeedForward,
	unrun:       checkDSANextN(false),
}

var glmDSA = architecture{
	config: func(c *Config, r *metaReader) error {
		c.QLoRA = r.need("{arch}.attention.q_lora_rank")
		if err := readMLAConfig(c, r, func() Gating { return GatingSigmoid }); err != nil {
			return err
		}
		// glm-dsa.cpp leaves f_norm_eps, the indexer key norm's epsilon, at its zero default.
		return readIndexerConfig(c, r, tensor.RoPENormal, 0)
	},
	attention:   bindDSA,
	feedForward: bindDSAFeedForward,
	unrun:       checkDSANextN(true),
}

// IndexerConfig sizes DeepSeek Sparse Attention's lightning indexer.
type IndexerConfig struct {
	Heads   int // attention.indexer.head_count
	HeadDim int // attention.indexer.key_length: one key head of this size per position
	TopK    int // attention.indexer.top_k: positions each query keeps
	// Full marks the layers with an indexer of their own (every layer but GLM's "shared"
	// ones, which reuse the selection of the last full layer before them).
	Full []bool
	// RoPE rotates the first rotary dimensions of the indexer's query and key heads.
	RoPE tensor.RoPE
	Eps  float32 // epsilon of the key's LayerNorm
}

// readIndexerConfig reads the indexer's hyper-parameters (placement read its key size and
// which layers have one), checked as llama.cpp 3f545bec needs them: MLA, an indexer head
// no narrower than the rotary part, and a head size that its Hadamard rotation (a power of
// two from 64) covers.
func readIndexerConfig(c *Config, r *metaReader, mode tensor.RoPEMode, eps float32) error {
	x := &c.Indexer
	x.Heads = r.need("{arch}.attention.indexer.head_count")
	x.TopK = r.need("{arch}.attention.indexer.top_k")
	if r.err != nil {
		return r.err
	}
	d := x.HeadDim
	switch {
	case !c.MLA:
		return fmt.Errorf("%s needs MLA (attention.key_length_mla and value_length_mla)", c.Arch)
	case c.QLoRA <= 0:
		return fmt.Errorf("%s needs a query LoRA rank: the indexer's query is projected from it", c.Arch)
	case x.Heads <= 0 || x.TopK <= 0:
		return fmt.Errorf("%s: indexer of %d heads keeping %d positions", c.Arch, x.Heads, x.TopK)
	case d < c.Rot:
		return fmt.Errorf("%s: an indexer head of %d is narrower than the %d rotary dims", c.Arch, d, c.Rot)
	case hadamardSize(d) != d:
		return fmt.Errorf("%s: indexer head size %d: llama.cpp rotates it with a Hadamard matrix, which needs a power of two from 64", c.Arch, d)
	}
	x.RoPE = c.RoPE
	x.RoPE.Mode, x.RoPE.Dims, x.RoPE.Offset = mode, c.Rot, 0
	x.Eps = eps
	if !x.Full[0] {
		return fmt.Errorf("%s: layer 0's indexer is shared, but there is no earlier full one to share", c.Arch)
	}
	return nil
}

// hadamardSize is the size of the Hadamard matrix llama.cpp's indexer cache rotates keys
// and queries of d elements with (llama_kv_cache::build_input_k_rot): the largest power of
// two from 64 that divides d, 0 where there is none. The indexer multiplies by it, so it
// runs only where that is d itself.
func hadamardSize(d int) int {
	n := 64
	if d%n != 0 {
		return 0
	}
	for d%(2*n) == 0 {
		n *= 2
	}
	return n
}

// bindDSAFeedForward binds the leading dense and MoE feed-forward networks, as deepseek2's.
func bindDSAFeedForward(c *Config, b *binder, il int) (feedForward, error) {
	return bindLeadDenseMoE(c, b, il, false)
}

// dsaAttention is MLA attention restricted to the positions a lightning indexer chooses.
type dsaAttention struct {
	mla     *mla
	indexer *lightningIndexer // nil in a layer that shares an earlier layer's choice
	topK    int
}

// lightningIndexer scores earlier positions for each query token: the query's heads
// (attn_q_b of the query LoRA) and one key per position (attn_k of the layer's input,
// LayerNormed), both RoPE'd on their first dims and rotated by a Hadamard matrix, as
// Σ_h weight_h · relu(q_h · k) with per-token head weights (proj) scaled by
// 1/sqrt(heads·dim). Its keys live in the layer's cache beside the MLA rows.
//
// The devices compute its three projections, and where the layer's cache is the key's
// LayerNorm, the RoPE and Hadamard rotation of both, and the scores (IndexerScores, over
// the cached keys, in parallel); the host runs the top-k (llama.cpp's tie order,
// topPositions) on the scores read back.
type lightningIndexer struct {
	qB, k, proj  weight
	normW, normB param // the key's LayerNorm weight and bias
	cfg          *IndexerConfig
}

func bindDSA(c *Config, b *binder, il int) (attention, error) {
	a, err := bindMLA(c, b, il)
	if err != nil {
		return nil, err
	}
	x := &c.Indexer
	d := &dsaAttention{mla: a, topK: x.TopK}
	if !x.Full[il] {
		// glm-dsa.cpp loads a shared layer's indexer tensors where a file has them, and
		// never uses them: they are loaded too, so that the devices hold what place counts.
		return d, loadUnusedIndexer(c, b, il)
	}
	idx := &lightningIndexer{cfg: x}
	if idx.normW, err = b.param(blk(il, "indexer.k_norm.weight"), x.HeadDim); err != nil {
		return nil, err
	}
	if idx.normB, err = b.param(blk(il, "indexer.k_norm.bias"), x.HeadDim); err != nil {
		return nil, err
	}
	if idx.proj, err = b.matrix(blk(il, "indexer.proj.weight"), c.Embd, x.Heads); err != nil {
		return nil, err
	}
	if idx.k, err = b.matrix(blk(il, "indexer.attn_k.weight"), c.Embd, x.HeadDim); err != nil {
		return nil, err
	}
	if idx.qB, err = b.matrix(blk(il, "indexer.attn_q_b.weight"), c.QLoRA, x.Heads*x.HeadDim); err != nil {
		return nil, err
	}
	d.indexer = idx
	return d, nil
}

// indexerChecks are a block's indexer tensors.
func indexerChecks(c *Config, optional bool) []tensorCheck {
	x := &c.Indexer
	return []tensorCheck{
		{"indexer.k_norm.weight", optional, []int{x.HeadDim}},
		{"indexer.k_norm.bias", optional, []int{x.HeadDim}},
		{"indexer.proj.weight", optional, []int{c.Embd, x.Heads}},
		{"indexer.attn_k.weight", optional, []int{c.Embd, x.HeadDim}},
		{"indexer.attn_q_b.weight", optional, []int{c.QLoRA, x.Heads * x.HeadDim}},
	}
}

// loadUnusedIndexer loads the indexer tensors a shared layer's file may have.
func loadUnusedIndexer(c *Config, b *binder, il int) error {
	for _, ch := range indexerChecks(c, true) {
		name := blk(il, ch.name)
		if !b.has(name) {
			continue
		}
		var err error
		if len(ch.shape) == 1 {
			_, err = b.param(name, ch.shape...)
		} else {
			_, err = b.matrix(name, ch.shape...)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// checkDSANextN checks the NextN/MTP block as deepseek2's, with its indexer, which
// deepseek32.cpp requires and glm-dsa.cpp takes as optional (the draft head never runs it).
func checkDSANextN(indexerOptional bool) func(c *Config, b *binder) error {
	return func(c *Config, b *binder) error {
		return checkMLANextN(c, b, indexerChecks(c, indexerOptional))
	}
}

func (d *dsaAttention) cacheShape() cacheShape {
	s := d.mla.cacheShape()
	if d.indexer != nil {
		s.indexDim = d.indexer.cfg.HeadDim
	}
	return s
}

func (d *dsaAttention) forward(c *pass, il int, in value) value {
	qr := d.mla.queryLoRA(c, in)
	if d.indexer != nil {
		c.selection = d.indexer.choose(c, il, in, qr, d.topK)
	}
	return d.mla.attention(c, il, in, qr, &c.selection)
}

// selection is what a lightning indexer chose for the tokens of a pass: for each token
// (row of the pass) the positions it attends, ascending, or nil where it sees no more
// positions than top-k, which keeps them all.
type selection struct {
	positions [][]int32
}

// choose runs the indexer for the pass's tokens: it stores their keys in the layer's
// cache and picks each token's top-k positions by score. It runs where the layer's cache
// is, its projections copied there only where the plan computes them elsewhere; only the
// scores come back to the host, for the top-k, and only for sequences longer than it.
func (x *lightningIndexer) choose(c *pass, il int, in, qr value, topK int) selection {
	cfg := x.cfg
	heads, dim := cfg.Heads, cfg.HeadDim
	n := len(c.pos)
	sel := selection{positions: make([][]int32, n)}
	dev := c.m.kvDev[il]
	q, k, w := c.to(dev, c.matmul(x.qB, qr)), c.to(dev, c.matmul(x.k, in)), c.to(dev, c.matmul(x.proj, in))
	c.layerNorm(k, x.normW, x.normB, cfg.Eps)
	c.rope(&cfg.RoPE, q, dim)
	c.rope(&cfg.RoPE, k, dim)
	q = q.Reshape(dim) // a row per (token, head)
	c.hadamard(q)
	c.hadamard(k)
	// The weights are scaled once instead of every score (as llama.cpp pre-scales them).
	c.scale(w, 1/float32(math.Sqrt(float64(dim*heads))))
	x.store(c, il, k)
	for _, sg := range c.segs {
		end := sg.c.n + sg.rows
		if end <= topK {
			continue // every token keeps every position
		}
		// llama.cpp scores every cell of its padded view of the cache (attend's kvLen), the
		// masked ones -inf: they take part in its top-k's tie order.
		nKV := min(sg.c.size, max(cacheBlock, (end+cacheBlock-1)/cacheBlock*cacheBlock))
		scores := c.alloc(dev, tensor.F32, nKV, sg.rows)
		if c.err == nil {
			c.fail(c.backendOf(dev).IndexerScores(scores, q.Slice(sg.first*heads, (sg.first+sg.rows)*heads), heads, c.pos[sg.first:sg.first+sg.rows],
				sg.c.caches[il].index.Slice(0, nKV), w.Slice(sg.first, sg.first+sg.rows), nKV))
		}
		c.indexScores = grow(c.indexScores, sg.rows*nKV)
		c.read(c.indexScores[:sg.rows*nKV], scores)
		if c.err != nil {
			return sel
		}
		for r := range sg.rows {
			if t := sg.first + r; int(c.pos[t])+1 > topK {
				sel.positions[t] = topPositions(c.indexScores[r*nKV:(r+1)*nKV], topK)
			}
		}
	}
	return sel
}

// store writes the tokens' indexer keys (rows of k, on the layer's cache device) into each
// segment's cache, converted to the cache type as ggml_set_rows converts them.
func (x *lightningIndexer) store(c *pass, il int, k value) {
	for _, sg := range c.segs {
		if c.err != nil {
			return
		}
		cache := sg.c.caches[il]
		c.fail(cache.setRows(cache.index, sg.c.n, sg.of(k)))
	}
}

// topPositions returns the positions of the k highest of scores, ascending. It picks them
// as ggml-cpu's top-k does, with the C++ standard library's partial sort (libstdc++'s heap
// selection), so that ties, common where every head's ReLU is zero, fall to the same
// positions: the heap is made of the first k indices, and each later index whose score is
// strictly higher than the heap's lowest replaces it.
func topPositions(scores []float32, k int) []int32 {
	greater := func(a, b int32) bool { return scores[a] > scores[b] }
	heap := make([]int32, k)
	for i := range heap {
		heap[i] = int32(i)
	}
	for parent := (k - 2) / 2; k >= 2; parent-- {
		adjustHeap(heap, parent, heap[parent], greater)
		if parent == 0 {
			break
		}
	}
	for i := k; i < len(scores); i++ {
		if greater(int32(i), heap[0]) {
			adjustHeap(heap, 0, int32(i), greater)
		}
	}
	slices.Sort(heap)
	return heap
}

// adjustHeap is libstdc++'s __adjust_heap: it moves the hole at index hole down to a leaf
// along the preferred children, then pushes v up from there (a heap whose root is the
// element every other is "less" than by less).
func adjustHeap(heap []int32, hole int, v int32, less func(a, b int32) bool) {
	n, top := len(heap), hole
	child := hole
	for child < (n-1)/2 {
		child = 2 * (child + 1)
		if less(heap[child], heap[child-1]) {
			child--
		}
		heap[hole] = heap[child]
		hole = child
	}
	if n%2 == 0 && child == (n-2)/2 {
		child = 2 * (child + 1)
		heap[hole] = heap[child-1]
		hole = child - 1
	}
	for parent := (hole - 1) / 2; hole > top && less(heap[parent], v); parent = (hole - 1) / 2 {
		heap[hole] = heap[parent]
		hole = parent
	}
	heap[hole] = v
}
