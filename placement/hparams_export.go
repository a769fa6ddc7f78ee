package placement

// HParams are the hyper-parameters placement reads from a model's metadata, exported for
// the runtime (moe), which needs the same values: one reader of these keys, with one set of
// defaults and checks, serves both.
type HParams struct {
	Arch     string
	Layers   int // blocks the main graph runs (n_layer)
	CtxTrain int // n_ctx_train
	Embd     int
	Vocab    int // rows of token_embd (or output), else the tokenizer's list
	Experts  int
	Used     int   // experts per token
	FF       int   // dense FFN width (the widest layer's)
	FFExp    int   // routed expert width (0 when the file does not say)
	FFShexp  int   // shared expert width (0: none)
	Heads    []int // per block, NextN blocks included
	HeadsKV  []int // per block; defaults to Heads
	HeadK    int   // key_length (default embedding_length / head_count)
	HeadV    int   // value_length
	// SlidingWindow is the window of the layers SWA marks (gpt-oss's alternating
	// sliding-window attention); 0 when the model has none.
	SlidingWindow int
	SWA           []bool // per block
	// Recurrent marks the layers whose memory is a recurrent state instead of a KV cache
	// (the Gated DeltaNet layers of hybrid models), per block.
	Recurrent []bool
	// IndexerDim is the key size of DeepSeek Sparse Attention's lightning indexer (0: the
	// model has none); IndexerFull marks the layers below Layers with an indexer of their
	// own (GLM's shared layers reuse the choice of the last full one).
	IndexerDim  int
	IndexerFull []bool
}

// ReadHParams reads a model's hyper-parameters. Missing or inconsistent metadata is a
// *ModelError naming the key.
func ReadHParams(m Model) (HParams, error) {
	h, err := readHParams(&m)
	if err != nil {
		return HParams{}, &ModelError{Model: m.Name, Err: err}
	}
	return HParams{
		Arch: h.arch, Layers: h.nLayer, CtxTrain: h.nCtx, Embd: h.nEmbd, Vocab: h.nVocab,
		Experts: h.nExpert, Used: h.nUsed, FF: h.nFF, FFExp: h.nFFExp, FFShexp: h.nFFShexp,
		Heads: h.nHead, HeadsKV: h.nHeadKV, HeadK: h.headK, HeadV: h.headV,
		SlidingWindow: h.nSWA, SWA: h.swa, Recurrent: h.recurrent,
		IndexerDim: h.indexerDim, IndexerFull: h.indexerFull,
	}, nil
}
