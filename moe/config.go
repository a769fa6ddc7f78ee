package moe

import (
	"fmt"
	"math"
	"slices"

	"github.com/moerun/moerun/arch"
	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/placement"
	"github.com/moerun/moerun/tensor"
)

// Config is everything the forward pass needs to know about a model, read from its
// metadata with llama.cpp's defaults and checks: the hyper-parameters placement reads
// (placement.ReadHParams, one reader for both) plus the keys only the runtime uses (norm
// epsilon, RoPE and YaRN, gating, MLA ranks), read by the architecture's file.
type Config struct {
	Arch     string
	Layers   int
	NextN    int // NextN/MTP blocks after the Layers blocks: checked as llama.cpp does, not run
	Embd     int
	Vocab    int
	CtxTrain int
	Eps      float32 // RMS norm epsilon, the same for every norm of the model

	Heads   int
	HeadsKV int // KV heads of the cache (1 for MLA)
	HeadK   int // query/key head size of the attention kernel (MLA: kv_lora_rank + rope dims)
	HeadV   int // value head size of the attention kernel (MLA: kv_lora_rank)

	// RoPE holds the context-level rotary settings (llama_context's cparams) for the
	// rotated part of a head; Offset is left 0 and set per use.
	RoPE tensor.RoPE
	// KQScale multiplies the attention scores: 1/sqrt(head size), or DeepSeek's YaRN
	// magnitude correction.
	KQScale float32

	Router    RouterConfig // n_expert, top-k, gating, norm, scale, groups
	FF        int          // dense FFN width (DeepSeek's leading dense layers)
	FFExp     int          // routed expert width
	FFShexp   int          // shared expert width (0: none)
	DenseLead int          // leading layers with a dense FFN instead of experts

	// DeepSeek's multi-head latent attention.
	QLoRA  int  // q_lora_rank (0: one plain attn_q matrix)
	KVLoRA int  // kv_lora_rank: the compressed KV width
	Nope   int  // per-head query/key dims without RoPE
	Rot    int  // per-head dims with RoPE
	VHead  int  // value head size before the output projection
	MLA    bool // absorbed form with attn_k_b/attn_v_b (else the legacy attn_kv_b)
	// YarnLogMul is rope_yarn_log_mul (DeepSeek's mscale_all_dim), 0 when absent.
	YarnLogMul float32
	// Indexer is DeepSeek Sparse Attention's lightning indexer (deepseek32, glm-dsa); its
	// Heads are 0 for other architectures.
	Indexer IndexerConfig

	// Sliding-window attention (gpt-oss): layer il attends only to the last Window
	// positions where SWA[il] (placement reads both), and its RoPE uses the base SWABase.
	Window  int
	SWA     []bool
	SWABase float32

	// Recurrent marks the layers whose attention is recurrent (Qwen3.5's Gated DeltaNet,
	// sized by DeltaNet) rather than over a KV cache.
	Recurrent []bool
	DeltaNet  DeltaNetConfig
}

// maxExperts is llama.cpp's LLAMA_MAX_EXPERTS; maxRotaryDims is the most rotary dimensions
// tensor.RoPE takes (more than any model has).
const (
	maxExperts    = 1024
	maxRotaryDims = 1024
)

// readConfig reads the parts of the configuration every architecture shares and hands the
// rest to the architecture's reader.
func readConfig(m placement.Model) (*Config, *architecture, error) {
	if err := CheckArchitecture(m.Metadata.Arch()); err != nil {
		return nil, nil, err
	}
	fwd := architectures[arch.Of(m.Metadata.Arch())]
	hp, err := placement.ReadHParams(m)
	if err != nil {
		return nil, nil, err
	}
	md := m.Metadata
	c := &Config{Arch: hp.Arch, Layers: hp.Layers, NextN: len(hp.Heads) - hp.Layers, Embd: hp.Embd, Vocab: hp.Vocab, CtxTrain: hp.CtxTrain,
		FF: hp.FF, FFExp: hp.FFExp, FFShexp: hp.FFShexp, HeadK: hp.HeadK, HeadV: hp.HeadV,
		Recurrent: hp.Recurrent[:hp.Layers], Window: hp.SlidingWindow, SWA: hp.SWA[:hp.Layers],
		Indexer: IndexerConfig{HeadDim: hp.IndexerDim, Full: hp.IndexerFull}}
	r := metaReader{md: md}
	r.require("{arch}.attention.layer_norm_rms_epsilon")
	c.Eps = r.float("{arch}.attention.layer_norm_rms_epsilon", 0)
	if r.err != nil {
		return nil, nil, r.err
	}
	if c.Heads, err = uniform(md, "{arch}.attention.head_count", hp.Heads[:hp.Layers]); err != nil {
		return nil, nil, err
	}
	if c.HeadsKV, err = uniform(md, "{arch}.attention.head_count_kv", hp.HeadsKV[:hp.Layers]); err != nil {
		return nil, nil, err
	}
	if c.Embd <= 0 || c.Vocab <= 0 || c.Heads <= 0 || c.HeadsKV <= 0 || c.Heads%c.HeadsKV != 0 || c.HeadK <= 0 || c.HeadV <= 0 {
		return nil, nil, fmt.Errorf("inconsistent attention metadata: embedding %d, vocabulary %d, %d heads over %d KV heads, key/value length %d/%d",
			c.Embd, c.Vocab, c.Heads, c.HeadsKV, c.HeadK, c.HeadV)
	}
	c.Router = RouterConfig{
		Experts: hp.Experts, Used: hp.Used,
		Groups:     r.int("{arch}.expert_group_count", 0),
		GroupsUsed: r.int("{arch}.expert_group_used_count", 0),
	}
	if hp.Experts > maxExperts {
		return nil, nil, fmt.Errorf("%s = %d exceeds llama.cpp's limit of %d experts", md.Key("{arch}.expert_count"), hp.Experts, maxExperts)
	}
	if fwd.yarnLogMul {
		// The converter writes 0.1·mscale_all_dim; llama.cpp undoes the 0.1.
		c.YarnLogMul = r.float("{arch}.rope.scaling.yarn_log_multiplier", 0) / 0.1
	}
	rope, err := readRoPE(&r, c.CtxTrain, c.YarnLogMul)
	if err != nil {
		return nil, nil, err
	}
	c.RoPE = rope
	if err := fwd.config(c, &r); err != nil {
		return nil, nil, err
	}
	if r.err != nil {
		return nil, nil, r.err
	}
	if c.Rot <= 0 || c.Rot%2 != 0 || c.Rot > maxRotaryDims {
		return nil, nil, fmt.Errorf("%d rotary dimensions: RoPE rotates an even number of dimensions, at most %d", c.Rot, maxRotaryDims)
	}
	if err := c.Router.Validate(); err != nil {
		return nil, nil, fmt.Errorf("router metadata: %w", err)
	}
	return c, fwd, nil
}

// CheckArchitecture reports whether moerun can run models of an architecture (the
// general.architecture of a file), with an error saying which it can run.
func CheckArchitecture(name string) error {
	if _, ok := architectures[arch.Of(name)]; ok {
		return nil
	}
	if name == "" {
		return fmt.Errorf("the model has no general.architecture")
	}
	return fmt.Errorf("architecture %q is not supported (moerun runs %s)", name, supportedArchs())
}

// uniform returns the value of a per-layer key that these architectures keep the same for
// every layer.
func uniform(md gguf.Metadata, key string, perLayer []int) (int, error) {
	if len(perLayer) == 0 {
		return 0, missingKey(md, key)
	}
	if slices.Min(perLayer) != slices.Max(perLayer) {
		return 0, fmt.Errorf("metadata %s differs between layers, which %s does not do", md.Key(key), md.Arch())
	}
	return perLayer[0], nil
}

func missingKey(md gguf.Metadata, key string) error {
	return fmt.Errorf("model metadata lacks %s", md.Key(key))
}

// metaReader reads optional keys with defaults, remembering the first error (a key of the
// wrong type or out of range) so that a reader can read many keys and check once.
type metaReader struct {
	md  gguf.Metadata
	err error
}

func (r *metaReader) int(key string, def int64) int {
	if r.err != nil {
		return 0
	}
	v, err := r.md.IntOr(key, def)
	if err == nil && (v < 0 || v > 1<<30) {
		err = fmt.Errorf("metadata %s = %d is out of range", r.md.Key(key), v)
	}
	r.err = err
	return int(v)
}

// need reads an integer key that must be present.
func (r *metaReader) need(key string) int {
	r.require(key)
	return r.int(key, 0)
}

// require checks that keys are present.
func (r *metaReader) require(keys ...string) {
	for _, key := range keys {
		if r.err == nil && !r.md.Has(key) {
			r.err = missingKey(r.md, key)
		}
	}
}

func (r *metaReader) float(key string, def float64) float32 {
	if r.err != nil {
		return 0
	}
	v, err := r.md.FloatOr(key, def)
	r.err = err
	return float32(v)
}

func (r *metaReader) bool(key string, def bool) bool {
	if r.err != nil {
		return false
	}
	v, err := r.md.BoolOr(key, def)
	r.err = err
	return v
}

func (r *metaReader) string(key, def string) string {
	if r.err != nil {
		return ""
	}
	v, err := r.md.StringOr(key, def)
	r.err = err
	return v
}

// readRoPE derives the context-level rotary parameters as llama.cpp's loader
// (llama_model_base::load_hparams) and context (llama_context's constructor) do for a
// context that overrides nothing: the scaling type and factor from the file, YaRN's
// extrapolation factor 1 when the type is yarn, and an attention factor that cancels the
// magnitude ggml's YaRN RoPE applies (moe-architectures.md §4.2), given YaRN's log
// multiplier (0 when the architecture does not read one). YaRN's original context defaults
// to the training context. Dims is left to the architecture.
func readRoPE(r *metaReader, ctxTrain int, logMul float32) (tensor.RoPE, error) {
	md := r.md
	base := r.float("{arch}.rope.freq_base", 10000)
	scaling := r.string("{arch}.rope.scaling.type", "linear")
	factor := r.float("{arch}.rope.scaling.factor", 0)
	if !md.Has("{arch}.rope.scaling.factor") {
		factor = r.float("{arch}.rope.scale_linear", 0) // the older key
	}
	origCtx := r.int("{arch}.rope.scaling.original_context_length", 0)
	attnFactor := r.float("{arch}.rope.scaling.attn_factor", 1)
	if r.err != nil {
		return tensor.RoPE{}, r.err
	}
	if origCtx == 0 {
		origCtx = ctxTrain
	}
	freqScale := float32(1)
	if factor != 0 {
		freqScale = 1 / factor
	}
	rope := tensor.RoPE{Base: base, FreqScale: freqScale, AttnFactor: 1, BetaFast: 32, BetaSlow: 1, OrigCtx: origCtx}
	switch scaling {
	case "none":
		rope.FreqScale = 1
	case "linear":
	case "yarn":
		rope.ExtFactor = 1
	default:
		return tensor.RoPE{}, fmt.Errorf("metadata %s = %q: moerun supports none, linear and yarn", md.Key("{arch}.rope.scaling.type"), scaling)
	}
	if !(base > 0) || !(rope.FreqScale > 0) || math.IsInf(float64(rope.FreqScale), 0) {
		return tensor.RoPE{}, fmt.Errorf("rope metadata: frequency base %g, scaling factor %g", base, factor)
	}
	if rope.ExtFactor != 0 {
		f := 1 / rope.FreqScale
		rope.AttnFactor = yarnMScale(f, 1)
		if logMul != 0 {
			// llama.cpp divides get_mscale(f, mscale) by get_mscale(f, mscale_all_dims),
			// taking mscale = mscale_all_dims for deepseek2 (TAG_DEEPSEEK2_YARN_LOG_MUL_FIX),
			// the only architecture here with a multiplier (or both are 1): the ratio is 1.
			rope.AttnFactor = 1
		}
		// ggml's YaRN RoPE multiplies by 1 + 0.1 ln f again; llama.cpp cancels it here.
		rope.AttnFactor *= 1 / (1 + 0.1*log32(f))
	}
	rope.AttnFactor *= attnFactor
	return rope, nil
}

// yarnMScale is llama.cpp's get_mscale: the magnitude YaRN gives attention for a context
// scaling factor.
func yarnMScale(scale, mscale float32) float32 {
	if scale <= 1 {
		return 1
	}
	return 0.1*mscale*log32(scale) + 1
}

func log32(x float32) float32 { return float32(math.Log(float64(x))) }
