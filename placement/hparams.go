package placement

import (
	"fmt"
	"slices"

	"github.com/moerun/moerun/arch"
	"github.com/moerun/moerun/gguf"
)

// hparams are the hyper-parameters placement needs, read from GGUF metadata the way
// llama.cpp's loader reads them (llama_model_base::load_hparams and the per-architecture
// load_arch_hparams): per-layer head counts, head sizes, the MLA, sliding-window and
// recurrent layer kinds, and the sizes the compute estimate uses.
type hparams struct {
	arch     string
	nLayer   int // blocks the main graph runs (n_layer)
	nNextN   int // NextN/MTP blocks appended after them
	nCtx     int // n_ctx_train
	nEmbd    int
	nVocab   int
	nExpert  int
	nUsed    int
	nFF      int // dense FFN width
	nFFExp   int // routed expert width
	nFFShexp int // shared expert width (0: none)

	nHead, nHeadKV  []int // per layer (n_layer_all entries)
	headK, headV    int   // key/value length of full-attention layers
	headKSWA        int   // of sliding-window layers
	headVSWA        int
	mla             bool // K-only cache of key_length elements (DeepSeek MLA files)
	headKMLA        int  // an MLA head's query length before absorption (key_length_mla)
	nSWA            int  // sliding window (0: none)
	swa             []bool
	recurrent       []bool // layers whose memory is a recurrent state, not a KV cache
	nEmbdR, nEmbdS  int    // recurrent conv and SSM state widths per sequence
	hybridKVFilter  bool   // only non-recurrent layers below n_layer get KV (hybrid memory)
	recurrentConvWd int    // conv channels of a recurrent layer (compute estimate)
	// DeepSeek Sparse Attention (deepseek32, glm-dsa): the lightning indexer keeps one key
	// of indexerDim values per position, in a second K-only cache, in the layers below
	// n_layer that indexerFull marks (GLM's "shared" layers reuse another's choice).
	indexerDim  int
	indexerTopK int // positions each query keeps (compute estimate)
	indexerFull []bool
}

// nLayerAll counts every block, NextN included: llama.cpp's layer index space.
func (h *hparams) nLayerAll() int { return h.nLayer + h.nNextN }

func readHParams(m *Model) (*hparams, error) {
	md := m.Metadata
	h := &hparams{arch: md.Arch()}
	if h.arch == "" {
		return nil, fmt.Errorf("model has no general.architecture")
	}
	var err error
	geti := func(key string, def int64) int {
		if err != nil {
			return 0
		}
		var v int64
		v, err = md.IntOr(key, def)
		if err == nil && (v < 0 || v > 1<<31) {
			err = fmt.Errorf("metadata %s = %d is out of range", md.Key(key), v)
		}
		return int(v)
	}
	need := func(key string) int {
		if err == nil && !md.Has(key) {
			err = fmt.Errorf("model metadata lacks %s, which placement needs", md.Key(key))
		}
		return geti(key, 0)
	}
	nAll := need("{arch}.block_count")
	h.nEmbd = need("{arch}.embedding_length")
	h.nCtx = geti("{arch}.context_length", 0)
	h.nNextN = geti("{arch}.nextn_predict_layers", 0)
	h.nExpert = geti("{arch}.expert_count", 0)
	h.nUsed = geti("{arch}.expert_used_count", 0)
	h.nFFExp = geti("{arch}.expert_feed_forward_length", 0)
	h.nFFShexp = geti("{arch}.expert_shared_feed_forward_length", 0)
	if err != nil {
		return nil, err
	}
	if h.nNextN >= nAll && nAll > 0 {
		return nil, fmt.Errorf("metadata says %d of %d blocks are NextN blocks", h.nNextN, nAll)
	}
	if nAll <= 0 || nAll > 4096 {
		return nil, fmt.Errorf("block_count %d is out of range", nAll)
	}
	h.nLayer = nAll - h.nNextN
	if h.nFF, err = widest(md, "{arch}.feed_forward_length"); err != nil {
		return nil, err
	}
	if shared := geti("{arch}.expert_shared_count", 0); h.nFFShexp == 0 && shared > 0 {
		h.nFFShexp = shared * h.nFFExp
	}
	if h.nHead, err = perLayer(md, "{arch}.attention.head_count", nAll, -1); err != nil {
		return nil, err
	}
	if h.nHeadKV, err = perLayer(md, "{arch}.attention.head_count_kv", nAll, -1); err != nil {
		return nil, err
	}
	for il := range h.nHeadKV {
		if h.nHeadKV[il] < 0 { // absent: as many KV heads as query heads
			h.nHeadKV[il] = h.nHead[il]
		}
	}
	if h.nHead[0] <= 0 {
		return nil, fmt.Errorf("model metadata lacks %s, which placement needs", md.Key("{arch}.attention.head_count"))
	}
	defHead := int64(h.nEmbd / h.nHead[0])
	h.headK = geti("{arch}.attention.key_length", defHead)
	h.headV = geti("{arch}.attention.value_length", defHead)
	h.headKSWA = geti("{arch}.attention.key_length_swa", int64(h.headK))
	h.headVSWA = geti("{arch}.attention.value_length_swa", int64(h.headV))
	h.headKMLA = geti("{arch}.attention.key_length_mla", 0)
	h.mla = h.headKMLA != 0 && geti("{arch}.attention.value_length_mla", 0) != 0
	if err != nil {
		return nil, err
	}
	h.nVocab = vocabSize(m)
	h.swa = make([]bool, nAll)
	h.recurrent = make([]bool, nAll)
	desc := arch.Of(h.arch)
	if desc.SlidingWindow { // openai-moe.cpp: every layer but the last of each period slides
		h.nSWA = geti("{arch}.attention.sliding_window", 0)
		period := geti("{arch}.attention.sliding_window_pattern", 2)
		if err != nil {
			return nil, err
		}
		for il := 0; il < h.nLayer; il++ {
			h.swa[il] = period == 0 || il%period < period-1
		}
	}
	if desc.Recurrent {
		if err := h.readRecurrent(md); err != nil {
			return nil, err
		}
	}
	// The indexer's memory is llama_kv_cache_dsa: the MLA cache and the indexer's, for the
	// layers below n_layer only (NextN blocks get none).
	if desc.Indexer {
		if err := h.readIndexer(md, desc.SharedIndexers); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// glm52Context is the training context from which llama.cpp takes a file of glm-dsa (the
// architecture with shared indexers) without attention.indexer.types for GLM-5.2, whose
// layers share indexers in a fixed pattern (GLM_5_2_DEFAULT_INDEXER_TYPES: full in layers 0
// and 1 and every fourth from 2), rather than GLM-5 or 5.1, whose every layer has its own.
const glm52Context = 1048576

// readIndexer reads the lightning indexer's key size and which layers have one, as
// deepseek32.cpp and glm-dsa.cpp do; without shared indexers every layer has its own.
func (h *hparams) readIndexer(md gguf.Metadata, shared bool) error {
	key := "{arch}.attention.indexer.key_length"
	if !md.Has(key) {
		return fmt.Errorf("model metadata lacks %s, which placement needs", md.Key(key))
	}
	d, err := md.IntOr(key, 0)
	if err != nil {
		return err
	}
	if d <= 0 || d > 1<<16 {
		return fmt.Errorf("metadata %s = %d is out of range", md.Key(key), d)
	}
	h.indexerDim = int(d)
	key = "{arch}.attention.indexer.top_k"
	if !md.Has(key) {
		return fmt.Errorf("model metadata lacks %s, which placement needs", md.Key(key))
	}
	if d, err = md.IntOr(key, 0); err != nil {
		return err
	}
	if d <= 0 || d > 1<<24 {
		return fmt.Errorf("metadata %s = %d is out of range", md.Key(key), d)
	}
	h.indexerTopK = int(d)
	h.indexerFull = make([]bool, h.nLayer)
	for il := range h.indexerFull {
		h.indexerFull[il] = !shared || h.nCtx < glm52Context || il < 2 || (il-2)%4 == 0
	}
	key = "{arch}.attention.indexer.types"
	v, ok := md.Get(key)
	if !shared || !ok {
		return nil
	}
	var types []bool
	if v.Type() != gguf.TypeArray {
		n, err := v.Int()
		if err != nil {
			return fmt.Errorf("metadata %s: %w", md.Key(key), err)
		}
		types = slices.Repeat([]bool{n != 0}, h.nLayer)
	} else if types, err = v.Bools(); err != nil {
		n, err := v.Ints()
		if err != nil {
			return fmt.Errorf("metadata %s: %w", md.Key(key), err)
		}
		for _, t := range n {
			types = append(types, t != 0)
		}
	}
	if len(types) < h.nLayer {
		return fmt.Errorf("metadata %s has %d entries for %d layers", md.Key(key), len(types), h.nLayer)
	}
	copy(h.indexerFull, types)
	return nil
}

// readRecurrent marks the Gated DeltaNet layers of the Qwen3-Next family and sizes their
// state, as qwen35moe.cpp and llama_hparams::n_embd_r/n_embd_s do; llama.cpp builds such a
// model a hybrid (KV + recurrent) memory (llm_arch_is_hybrid).
func (h *hparams) readRecurrent(md gguf.Metadata) error {
	h.hybridKVFilter = true
	if v, ok := md.Get("{arch}.attention.recurrent_layers"); ok {
		flags, err := v.Bools()
		if err != nil || len(flags) < h.nLayer {
			return fmt.Errorf("metadata %s must list a flag for each of %d layers", md.Key("{arch}.attention.recurrent_layers"), h.nLayer)
		}
		copy(h.recurrent, flags[:h.nLayer])
	} else {
		interval, err := md.IntOr("{arch}.full_attention_interval", 4)
		if err != nil {
			return err
		}
		if interval <= 0 {
			return fmt.Errorf("metadata %s = %d must be positive", md.Key("{arch}.full_attention_interval"), interval)
		}
		for il := 0; il < h.nLayer; il++ {
			h.recurrent[il] = int64(il+1)%interval != 0
		}
	}
	var vals [4]int64
	for i, key := range []string{"conv_kernel", "inner_size", "state_size", "group_count"} {
		v, err := md.IntOr("{arch}.ssm."+key, 0)
		if err != nil {
			return err
		}
		if v < 0 || v > 1<<24 {
			return fmt.Errorf("metadata %s = %d is out of range", md.Key("{arch}.ssm."+key), v)
		}
		vals[i] = v
	}
	conv, inner, state, groups := int(vals[0]), int(vals[1]), int(vals[2]), int(vals[3])
	h.recurrentConvWd = inner + 2*groups*state
	if conv > 0 {
		h.nEmbdR = (conv - 1) * h.recurrentConvWd
	}
	h.nEmbdS = state * inner
	return nil
}

// perLayer reads a key that is either one integer for every layer or an array with one per
// layer (llama.cpp's get_key_or_arr). A missing key gives def for every layer.
func perLayer(md gguf.Metadata, key string, n int, def int64) ([]int, error) {
	out := make([]int, n)
	v, ok := md.Get(key)
	if !ok {
		for i := range out {
			out[i] = int(def)
		}
		return out, nil
	}
	if v.Type() == gguf.TypeArray {
		vals, err := v.Ints()
		if err != nil {
			return nil, fmt.Errorf("metadata %s: %w", md.Key(key), err)
		}
		if len(vals) < n {
			return nil, fmt.Errorf("metadata %s has %d entries for %d layers", md.Key(key), len(vals), n)
		}
		for i := range out {
			if vals[i] < 0 || vals[i] > 1<<20 {
				return nil, fmt.Errorf("metadata %s[%d] = %d is out of range", md.Key(key), i, vals[i])
			}
			out[i] = int(vals[i])
		}
		return out, nil
	}
	x, err := v.Int()
	if err != nil {
		return nil, fmt.Errorf("metadata %s: %w", md.Key(key), err)
	}
	if x < 0 || x > 1<<20 {
		return nil, fmt.Errorf("metadata %s = %d is out of range", md.Key(key), x)
	}
	for i := range out {
		out[i] = int(x)
	}
	return out, nil
}

// widest reads an integer key that some models write per layer, taking the largest value
// (the widest dense FFN); 0 when absent.
func widest(md gguf.Metadata, key string) (int, error) {
	v, ok := md.Get(key)
	if !ok {
		return 0, nil
	}
	n := 1
	if v.Type() == gguf.TypeArray {
		n = v.Len()
	}
	vals, err := perLayer(md, key, n, 0)
	if err != nil {
		return 0, err
	}
	return slices.Max(append(vals, 0)), nil
}

// vocabSize is the number of rows of the embedding (or output) matrix, else the vocabulary
// the tokenizer lists.
func vocabSize(m *Model) int {
	for _, t := range m.Tensors {
		if (t.Name == "token_embd.weight" || t.Name == "output.weight") && len(t.Shape) >= 2 {
			return int(t.Shape[1])
		}
	}
	if v, ok := m.Metadata.Get("tokenizer.ggml.tokens"); ok {
		return v.Len()
	}
	return 0
}
