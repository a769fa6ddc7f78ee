// Package synth builds GGUF files with the exact layout llama.cpp's converter and quantizer
// produce for real models — tensor names, shapes, order and types, metadata keys and value
// types — without downloading anything: as an in-memory layout (for placement planning), as a
// sparse file (header plus a hole the size of the weights) or as a file of random weights at a
// sane scale (for tests and benchmarks).
//
// A model is a Preset (published hyper-parameters) plus a Mix (the llama-quantize file type
// that picks each tensor's type), optionally shrunk with Options.
package synth

import (
	"fmt"
	"sort"
	"strings"
)

// Config holds the hyper-parameters that decide a model's GGUF layout, named after the
// Hugging Face config.json fields they come from. Zero means "absent" for optional ones.
type Config struct {
	Arch    string // general.architecture
	Layers  int    // num_hidden_layers: decoder blocks run by the main graph
	NextN   int    // multi-token-prediction blocks appended after them (blk.<Layers+i>)
	Embd    int    // hidden_size
	Vocab   int    // vocab_size: rows of token_embd and output
	Context int    // max_position_embeddings

	Heads   int // num_attention_heads
	HeadsKV int // num_key_value_heads
	// HeadDim is head_dim (key and value length per head). For MLA models it is
	// qk_nope_head_dim + qk_rope_head_dim and VHeadDim is v_head_dim.
	HeadDim  int
	VHeadDim int
	RopeDim  int // rope.dimension_count; 0 = not written

	QLoraRank  int // MLA q_lora_rank (0: plain attn_q, as DeepSeek-V2-Lite)
	KVLoraRank int // MLA kv_lora_rank

	// DeepSeek Sparse Attention's lightning indexer (deepseek32, glm-dsa): index_n_heads,
	// index_head_dim, index_topk; IndexerTypes is GLM's indexer_types (true: a "full"
	// layer with its own indexer, false: "shared", reusing the previous full layer's
	// selection), written only when set.
	IndexerHeads, IndexerHeadDim, IndexerTopK int
	IndexerTypes                              []bool

	FF           int // intermediate_size: dense FFN width
	Experts      int // routed experts per MoE layer
	ExpertsUsed  int // num_experts_per_tok
	ExpertFF     int // moe_intermediate_size (llama-architecture experts are FF wide instead)
	SharedCount  int // n_shared_experts (deepseek2, glm4moe): shared width = ExpertFF × SharedCount
	SharedFF     int // shared_expert_intermediate_size (qwen2moe, qwen35moe, qwen3next)
	LeadingDense int // first_k_dense_replace

	ExpertGroups     int     // n_group (written when the config has it)
	ExpertGroupsUsed int     // topk_group
	GatingFunc       uint32  // expert_gating_func: 1 softmax, 2 sigmoid; 0 = not written
	WeightsScale     float32 // routed_scaling_factor; 0 = not written
	WeightsNorm      bool    // norm_topk_prob (written only when true)
	ExpProbsBias     bool    // e_score_correction_bias → blk.N.exp_probs_b.bias
	QKNorm           bool    // use_qk_norm (glm4moe): per-head attn_q_norm/attn_k_norm

	RMSEps   float32
	RopeBase float32 // rope_theta
	Yarn     *Yarn   // rope_scaling of type yarn
	// Llama3Rope is rope_scaling of type llama3: the converter stores its per-frequency
	// factors as the rope_freqs.weight tensor.
	Llama3Rope *Llama3Rope

	SlidingWindow int // gpt-oss sliding_window

	// Gated DeltaNet (qwen35moe, qwen3next) linear attention.
	FullAttnInterval int // every n-th layer is full attention
	SSMConv          int // linear_conv_kernel_dim
	SSMState         int // linear_key_head_dim (= value head dim)
	SSMGroups        int // linear_num_key_heads
	SSMHeads         int // linear_num_value_heads
	// LegacySSMIn is Options.LegacySSMIn: Qwen3-Next's in_proj_qkvz as one ssm_in matrix.
	LegacySSMIn bool
}

// Yarn is a YaRN rope_scaling block.
type Yarn struct {
	Factor      float32
	OrigContext int
	BetaFast    float32
	BetaSlow    float32
	// LogMul is DeepSeek's 0.1·mscale_all_dim (0: not written).
	LogMul float32
}

// Llama3Rope is Llama 3.1's rope_scaling block.
type Llama3Rope struct {
	Factor, LowFreqFactor, HighFreqFactor float64
	OrigContext                           int
}

// Preset is a published model: its hyper-parameters and where they come from.
type Preset struct {
	Name    string   // lower-case id used on the command line: "qwen3-30b-a3b"
	Aliases []string // other ids for the same layout ("deepseek-r1")
	Title   string   // the model's published name
	Source  string   // where the hyper-parameters were read
	Family  string   // tokenizer family of the built-in vocabulary (see vocab.go)
	// NativeMXFP4 marks models published with MXFP4 routed experts (gpt-oss): the experts
	// keep that type under every mix, as the converter writes them and uploaders keep them.
	NativeMXFP4 bool
	Config
}

// deepseekV3 is DeepSeek-V3's config, which DeepSeek-V3.2 keeps and adds its indexer to.
var deepseekV3 = Config{
	Arch: "deepseek2", Layers: 61, Embd: 7168, Vocab: 129280, Context: 163840,
	Heads: 128, HeadsKV: 1, HeadDim: 192, VHeadDim: 128, RopeDim: 64,
	QLoraRank: 1536, KVLoraRank: 512,
	FF: 18432, Experts: 256, ExpertsUsed: 8, ExpertFF: 2048, SharedCount: 1, LeadingDense: 3,
	ExpertGroups: 8, ExpertGroupsUsed: 4, GatingFunc: 2, WeightsScale: 2.5, WeightsNorm: true, ExpProbsBias: true,
	RMSEps: 1e-6, RopeBase: 10000,
	Yarn: &Yarn{Factor: 40, OrigContext: 4096, BetaFast: 32, BetaSlow: 1, LogMul: 0.1},
}

// qwen35MoE35B is Qwen3.5-35B-A3B's config, which Qwen3.6-35B-A3B keeps.
var qwen35MoE35B = Config{
	Arch: "qwen35moe", Layers: 40, NextN: 1, Embd: 2048, Vocab: 248320, Context: 262144,
	Heads: 16, HeadsKV: 2, HeadDim: 256, RopeDim: 64,
	Experts: 256, ExpertsUsed: 8, ExpertFF: 512, SharedFF: 512,
	RMSEps: 1e-6, RopeBase: 1e7,
	FullAttnInterval: 4, SSMConv: 4, SSMState: 128, SSMGroups: 16, SSMHeads: 32,
}

// qwen3Next80B is Qwen3-Next-80B-A3B's config, which Qwen3-Coder-Next keeps with another
// rope_theta.
var qwen3Next80B = Config{
	Arch: "qwen3next", Layers: 48, NextN: 1, Embd: 2048, Vocab: 151936, Context: 262144,
	Heads: 16, HeadsKV: 2, HeadDim: 256, RopeDim: 64,
	FF: 5120, Experts: 512, ExpertsUsed: 10, ExpertFF: 512, SharedFF: 512,
	RMSEps: 1e-6, RopeBase: 1e7,
	FullAttnInterval: 4, SSMConv: 4, SSMState: 128, SSMGroups: 16, SSMHeads: 32,
}

// presets are the built-in models. Hyper-parameters are the values of each model's published
// config.json (Source names it). They were written down from those files, not fetched at
// build time; every preset's shapes are checked against the sizes of published GGUF files of
// the model (published_test.go), the DeepSeek and Qwen3 ones also against
// shared/reference/moe-architectures.md, and values Source marks "unchecked" change no
// tensor shape (context lengths).
var presets = []Preset{
	{
		Name: "deepseek-v3", Aliases: []string{"deepseek-r1", "deepseek-v3-0324", "deepseek-r1-0528"},
		Title: "DeepSeek-V3 / R1 (671B)", Family: "deepseek-v3",
		Source: "deepseek-ai/DeepSeek-V3 config.json (= inference/configs/config_671B.json; R1 has the same shapes). " +
			"llama.cpp's converter drops the MTP layer 61 (DeepseekV2Model.skip_mtp), so block_count is 61 and there is no NextN block.",
		Config: deepseekV3,
	},
	{
		Name: "deepseek-v3.2", Aliases: []string{"deepseek-v3.2-exp", "deepseek-v3.2-speciale"},
		Title: "DeepSeek-V3.2 (685B)", Family: "deepseek-v3",
		Source: "deepseek-ai/DeepSeek-V3.2 config.json (DeepseekV32ForCausalLM, converted by conversion/deepseek.py's DeepseekV32Model): " +
			"DeepSeek-V3's shapes and routing plus DeepSeek Sparse Attention's lightning indexer, index_n_heads 64 of index_head_dim " +
			"128 keeping index_topk 2048 positions; num_nextn_predict_layers 1: this converter keeps the MTP block as blk.61 " +
			"with the copies of the embedding and head the checkpoint's layer 61 holds (685.35B parameters, DeepSeek's \"685B\"). " +
			"V3.2-Exp and V3.2-Speciale have the same shapes",
		Config: func() Config {
			c := deepseekV3
			c.Arch, c.NextN = "deepseek32", 1
			c.IndexerHeads, c.IndexerHeadDim, c.IndexerTopK = 64, 128, 2048
			return c
		}(),
	},
	{
		Name: "glm-5", Aliases: []string{"glm-5.1"}, Title: "GLM-5 (744B-A40B)", Family: "glm4",
		Source: "zai-org/GLM-5 config.json (GlmMoeDsaForCausalLM, converted by conversion/glm.py's GlmMoeDsaModel; values as " +
			"jd-opensource/xllm's glm5.h transcribes them): 78 layers, hidden 6144, dense FFN 12288 in the first 3, 64 heads with " +
			"q_lora_rank 2048, kv_lora_rank 512, qk_nope 192 + qk_rope 64, v_head_dim 256; 256 experts of 2048 with 8 routed and 1 " +
			"shared, sigmoid scoring with e_score_correction_bias, n_group 1, routed_scaling_factor 2.5, norm_topk_prob; vocabulary " +
			"154880, context 202752, rope_theta 1e6 without scaling (rms_norm_eps 1e-5 unchecked); lightning indexer of 32 heads of " +
			"128 keeping 2048 positions, every layer full (no indexer_types: llama.cpp reads a context under 1M as GLM-5/5.1); " +
			"num_nextn_predict_layers 1, kept as blk.78 without an embedding or head of its own (753.86B parameters, the 753.9B " +
			"Hugging Face counts for zai-org/GLM-5; 751.96B in the repeating layers, as ik_llama.cpp's log in sokann/GLM-5-GGUF-1.594bpw " +
			"prints them). GLM-5.1 has the same shapes",
		Config: Config{
			Arch: "glm-dsa", Layers: 78, NextN: 1, Embd: 6144, Vocab: 154880, Context: 202752,
			Heads: 64, HeadsKV: 1, HeadDim: 256, VHeadDim: 256, RopeDim: 64,
			QLoraRank: 2048, KVLoraRank: 512,
			FF: 12288, Experts: 256, ExpertsUsed: 8, ExpertFF: 2048, SharedCount: 1, LeadingDense: 3,
			ExpertGroups: 1, ExpertGroupsUsed: 1, GatingFunc: 2, WeightsScale: 2.5, WeightsNorm: true, ExpProbsBias: true,
			RMSEps: 1e-5, RopeBase: 1e6,
			IndexerHeads: 32, IndexerHeadDim: 128, IndexerTopK: 2048,
		},
	},
	{
		Name: "kimi-k2", Aliases: []string{"kimi-k2-instruct", "kimi-k2-instruct-0905", "kimi-k2-thinking"},
		Title: "Kimi-K2 (1T-A32B)", Family: "kimi-k2",
		Source: "moonshotai/Kimi-K2-Instruct config.json (DeepseekV3ForCausalLM, converted by conversion/deepseek.py): DeepSeek-V3's " +
			"attention and expert widths with 64 heads, 384 experts of 2048 with 8 routed and 1 shared, one leading dense layer, " +
			"n_group 1, sigmoid scoring, routed_scaling_factor 2.827, vocabulary 163840, rope_theta 50000 with YaRN factor 32 over " +
			"4096 (beta_fast 1, beta_slow 1, mscale_all_dim 1; rms_norm_eps 1e-6 unchecked), num_nextn_predict_layers 0. K2-Instruct-0905 and K2-Thinking have " +
			"the same shapes with a 262144 context (Thinking's experts are published in INT4; GGUFs of it are converted from BF16)",
		Config: Config{
			Arch: "deepseek2", Layers: 61, Embd: 7168, Vocab: 163840, Context: 131072,
			Heads: 64, HeadsKV: 1, HeadDim: 192, VHeadDim: 128, RopeDim: 64,
			QLoraRank: 1536, KVLoraRank: 512,
			FF: 18432, Experts: 384, ExpertsUsed: 8, ExpertFF: 2048, SharedCount: 1, LeadingDense: 1,
			ExpertGroups: 1, ExpertGroupsUsed: 1, GatingFunc: 2, WeightsScale: 2.827, WeightsNorm: true, ExpProbsBias: true,
			RMSEps: 1e-6, RopeBase: 50000,
			Yarn: &Yarn{Factor: 32, OrigContext: 4096, BetaFast: 1, BetaSlow: 1, LogMul: 0.1},
		},
	},
	{
		Name: "deepseek-v2-lite", Title: "DeepSeek-V2-Lite (16B)", Family: "deepseek-llm",
		Source: "deepseek-ai/DeepSeek-V2-Lite config.json (q_lora_rank null, scoring_func softmax, n_group 1, mscale_all_dim 0.707)",
		Config: Config{
			Arch: "deepseek2", Layers: 27, Embd: 2048, Vocab: 102400, Context: 163840,
			Heads: 16, HeadsKV: 1, HeadDim: 192, VHeadDim: 128, RopeDim: 64, KVLoraRank: 512,
			FF: 10944, Experts: 64, ExpertsUsed: 6, ExpertFF: 1408, SharedCount: 2, LeadingDense: 1,
			ExpertGroups: 1, ExpertGroupsUsed: 1, GatingFunc: 1, WeightsScale: 1,
			RMSEps: 1e-6, RopeBase: 10000,
			Yarn: &Yarn{Factor: 40, OrigContext: 4096, BetaFast: 32, BetaSlow: 1, LogMul: 0.1 * 0.707},
		},
	},
	{
		Name: "qwen3-30b-a3b", Title: "Qwen3-30B-A3B", Family: "qwen2",
		Source: "Qwen/Qwen3-30B-A3B config.json (also zyzshishui/slime scripts/models/qwen3-30B-A3B.sh)",
		Config: Config{
			Arch: "qwen3moe", Layers: 48, Embd: 2048, Vocab: 151936, Context: 40960,
			Heads: 32, HeadsKV: 4, HeadDim: 128,
			FF: 6144, Experts: 128, ExpertsUsed: 8, ExpertFF: 768,
			RMSEps: 1e-6, RopeBase: 1e6,
		},
	},
	{
		Name: "qwen3-235b-a22b", Title: "Qwen3-235B-A22B", Family: "qwen2",
		Source: "Qwen/Qwen3-235B-A22B config.json (also zyzshishui/slime scripts/models/qwen3-235B-A22B.sh)",
		Config: Config{
			Arch: "qwen3moe", Layers: 94, Embd: 4096, Vocab: 151936, Context: 40960,
			Heads: 64, HeadsKV: 4, HeadDim: 128,
			FF: 12288, Experts: 128, ExpertsUsed: 8, ExpertFF: 1536,
			RMSEps: 1e-6, RopeBase: 1e6,
		},
	},
	{
		Name: "qwen3-coder-480b-a35b", Title: "Qwen3-Coder-480B-A35B", Family: "qwen2",
		Source: "Qwen/Qwen3-Coder-480B-A35B-Instruct config.json",
		Config: Config{
			Arch: "qwen3moe", Layers: 62, Embd: 6144, Vocab: 151936, Context: 262144,
			Heads: 96, HeadsKV: 8, HeadDim: 128,
			FF: 8192, Experts: 160, ExpertsUsed: 8, ExpertFF: 2560,
			RMSEps: 1e-6, RopeBase: 1e7,
		},
	},
	{
		Name: "qwen2-57b-a14b", Title: "Qwen2-57B-A14B", Family: "qwen2",
		Source: "Qwen/Qwen2-57B-A14B-Instruct config.json (context length unchecked)",
		Config: Config{
			Arch: "qwen2moe", Layers: 28, Embd: 3584, Vocab: 151936, Context: 32768,
			Heads: 28, HeadsKV: 4,
			FF: 18944, Experts: 64, ExpertsUsed: 8, ExpertFF: 2560, SharedFF: 20480,
			RMSEps: 1e-6, RopeBase: 1e6,
		},
	},
	{
		Name: "glm-4.5-air", Title: "GLM-4.5-Air (106B-A12B)", Family: "glm4",
		Source: "zai-org/GLM-4.5-Air config.json (num_nextn_predict_layers 1: the converter appends the MTP block as blk.46)",
		Config: Config{
			Arch: "glm4moe", Layers: 46, NextN: 1, Embd: 4096, Vocab: 151552, Context: 131072,
			Heads: 96, HeadsKV: 8, HeadDim: 128, RopeDim: 64,
			FF: 10944, Experts: 128, ExpertsUsed: 8, ExpertFF: 1408, SharedCount: 1, LeadingDense: 1,
			ExpertGroups: 1, ExpertGroupsUsed: 1, GatingFunc: 2, WeightsScale: 1, WeightsNorm: true, ExpProbsBias: true,
			RMSEps: 1e-5, RopeBase: 1e6,
		},
	},
	{
		Name: "glm-4.6", Aliases: []string{"glm-4.5", "glm-4.7"}, Title: "GLM-4.6 (355B-A32B)", Family: "glm4",
		Source: "zai-org/GLM-4.6 config.json (GLM-4.5 and GLM-4.7 have the same shapes; the GLM-5 report's table lists " +
			"GLM-4.5: 3 dense + 89 MoE layers, 1 MTP layer, hidden 5120, dense FFN 12288, expert FFN 1536, 96 heads over 8 KV heads " +
			"of 128, 160 experts with 8 routed and 1 shared, vocabulary 151552); use_qk_norm true; the converter appends the MTP block as blk.92",
		Config: Config{
			Arch: "glm4moe", Layers: 92, NextN: 1, Embd: 5120, Vocab: 151552, Context: 202752,
			Heads: 96, HeadsKV: 8, HeadDim: 128, RopeDim: 64,
			FF: 12288, Experts: 160, ExpertsUsed: 8, ExpertFF: 1536, SharedCount: 1, LeadingDense: 3,
			ExpertGroups: 1, ExpertGroupsUsed: 1, GatingFunc: 2, WeightsScale: 2.5, WeightsNorm: true, ExpProbsBias: true,
			QKNorm: true, RMSEps: 1e-5, RopeBase: 1e6,
		},
	},
	{
		Name: "glm-4.7-flash", Title: "GLM-4.7-Flash (30B-A3B)", Family: "glm4",
		Source: "zai-org/GLM-4.7-Flash config.json (Glm4MoeLiteForCausalLM, converted as deepseek2 by conversion/glm.py): 47 layers, " +
			"hidden 2048, dense FFN 10240 in the first layer, 20 heads with q_lora_rank 768, kv_lora_rank 512, qk_nope 192 + qk_rope 64, " +
			"v_head_dim 256; 64 experts of 1536 with 4 routed and 1 shared, noaux_tc routing with e_score_correction_bias, " +
			"routed_scaling_factor 1.8, norm_topk_prob; vocabulary 154880, untied output, rope_theta 1e6 without scaling. The config " +
			"names no scoring function, so no expert_gating_func is written (llama.cpp picks sigmoid for this layout); " +
			"num_nextn_predict_layers 1: the converter keeps the MTP block, with its own embedding and head, as blk.47",
		Config: Config{
			Arch: "deepseek2", Layers: 47, NextN: 1, Embd: 2048, Vocab: 154880, Context: 202752,
			Heads: 20, HeadsKV: 1, HeadDim: 256, VHeadDim: 256, RopeDim: 64,
			QLoraRank: 768, KVLoraRank: 512,
			FF: 10240, Experts: 64, ExpertsUsed: 4, ExpertFF: 1536, SharedCount: 1, LeadingDense: 1,
			ExpertGroups: 1, ExpertGroupsUsed: 1, WeightsScale: 1.8, WeightsNorm: true, ExpProbsBias: true,
			RMSEps: 1e-5, RopeBase: 1e6,
		},
	},
	{
		Name: "qwen3.5-35b-a3b", Title: "Qwen3.5-35B-A3B", Family: "qwen2",
		Source: "Qwen/Qwen3.5-35B-A3B config.json text_config (checked against THUDM/slime " +
			"scripts/models/qwen3.5-35B-A3B.sh); mtp_num_hidden_layers 1: the current converter appends the MTP block as blk.40",
		Config: qwen35MoE35B,
	},
	{
		Name: "qwen3.6-35b-a3b", Title: "Qwen3.6-35B-A3B", Family: "qwen2",
		Source: "Qwen/Qwen3.6-35B-A3B config.json text_config (qwen3_5_moe_text, the Qwen3.5-MoE code): the same shapes as " +
			"Qwen3.5-35B-A3B — 40 layers (30 Gated DeltaNet + 10 gated attention), hidden 2048, 16 heads over 2 KV heads of 256 " +
			"with 64 rotary dims, 256 experts of 512 with 8 routed and a 512-wide shared expert, linear attention 16 key heads and " +
			"32 value heads of 128, vocabulary 248320, context 262144; mtp_num_hidden_layers 1 (blk.40)",
		Config: qwen35MoE35B,
	},
	{
		Name: "qwen3.5-122b-a10b", Title: "Qwen3.5-122B-A10B", Family: "qwen2",
		Source: "Qwen/Qwen3.5-122B-A10B config.json text_config: 48 layers (36 Gated DeltaNet + 12 gated attention, " +
			"full_attention_interval 4), hidden 3072, 32 heads over 2 KV heads of 256, 256 experts of 1024 with 8 routed and a " +
			"1024-wide shared expert, linear attention 16 key heads and 64 value heads of 128; mtp_num_hidden_layers 1 (blk.48)",
		Config: Config{
			Arch: "qwen35moe", Layers: 48, NextN: 1, Embd: 3072, Vocab: 248320, Context: 262144,
			Heads: 32, HeadsKV: 2, HeadDim: 256, RopeDim: 64,
			Experts: 256, ExpertsUsed: 8, ExpertFF: 1024, SharedFF: 1024,
			RMSEps: 1e-6, RopeBase: 1e7,
			FullAttnInterval: 4, SSMConv: 4, SSMState: 128, SSMGroups: 16, SSMHeads: 64,
		},
	},
	{
		Name: "qwen3-next-80b-a3b", Title: "Qwen3-Next-80B-A3B", Family: "qwen2",
		Source: "Qwen/Qwen3-Next-80B-A3B-Instruct config.json (Thinking has the same shapes): 48 layers (36 Gated DeltaNet + " +
			"12 gated attention, full_attention_interval 4), hidden 2048, 16 heads over 2 KV heads of 256 with partial_rotary_factor " +
			"0.25, 512 experts of 512 with 10 routed and a 512-wide shared expert, linear attention 16 key heads and 32 value heads " +
			"of 128, vocabulary 151936, untied output (rope_theta unchecked). The checkpoint's mtp.* block: the current converter " +
			"appends it as blk.48; GGUFs converted before it have none (--no-mtp)",
		Config: qwen3Next80B,
	},
	{
		Name: "qwen3-coder-next", Title: "Qwen3-Coder-Next (80B-A3B)", Family: "qwen2",
		Source: "Qwen/Qwen3-Coder-Next config.json as its quantized copies repeat it (mlx-community/Qwen3-Coder-Next-nvfp4, " +
			"Open4bits/Qwen3-Coder-Next-mlx-2Bit): Qwen3-Next-80B-A3B's shapes; rope_theta 5e6 from the derived " +
			"QuantTrio/Qwen3-Coder-Next-E336 config (unchecked against Qwen's own file)",
		Config: func() Config {
			c := qwen3Next80B
			c.RopeBase = 5e6
			return c
		}(),
	},
	{
		Name: "minimax-m2", Aliases: []string{"minimax-m2.1", "minimax-m2.5", "minimax-m2.7"}, Title: "MiniMax-M2 (230B-A10B)", Family: "minimax",
		Source: "MiniMaxAI/MiniMax-M2 configuration_minimax_m2.py defaults and the config.json copies of M2.1 (QuixiAI/MiniMax-M2.1-bf16) " +
			"and M2.7 (amd/MiniMax-M2.7-BF16), the same shapes: 62 layers, hidden 3072, 48 heads over 8 KV heads of 128, rotary_dim 64, " +
			"256 experts of 1536 with 8 routed, sigmoid scoring with a routing bias, vocabulary 200064, untied output; the checkpoint's " +
			"MTP modules are not converted. Context 196608 (M2.7: 204800)",
		Config: Config{
			Arch: "minimax-m2", Layers: 62, Embd: 3072, Vocab: 200064, Context: 196608,
			Heads: 48, HeadsKV: 8, HeadDim: 128, RopeDim: 64,
			FF: 1536, Experts: 256, ExpertsUsed: 8, ExpertFF: 1536, GatingFunc: 2, ExpProbsBias: true,
			RMSEps: 1e-6, RopeBase: 5e6,
		},
	},
	{
		Name: "gpt-oss-20b", Title: "gpt-oss-20b", Family: "gpt-oss", NativeMXFP4: true,
		Source: "openai/gpt-oss-20b config.json",
		Config: Config{
			Arch: "gpt-oss", Layers: 24, Embd: 2880, Vocab: 201088, Context: 131072,
			Heads: 64, HeadsKV: 8, HeadDim: 64,
			FF: 2880, Experts: 32, ExpertsUsed: 4, ExpertFF: 2880,
			RMSEps: 1e-5, RopeBase: 150000, SlidingWindow: 128,
			Yarn: &Yarn{Factor: 32, OrigContext: 4096, BetaFast: 32, BetaSlow: 1},
		},
	},
	{
		Name: "gpt-oss-120b", Title: "gpt-oss-120b", Family: "gpt-oss", NativeMXFP4: true,
		Source: "openai/gpt-oss-120b config.json",
		Config: Config{
			Arch: "gpt-oss", Layers: 36, Embd: 2880, Vocab: 201088, Context: 131072,
			Heads: 64, HeadsKV: 8, HeadDim: 64,
			FF: 2880, Experts: 128, ExpertsUsed: 4, ExpertFF: 2880,
			RMSEps: 1e-5, RopeBase: 150000, SlidingWindow: 128,
			Yarn: &Yarn{Factor: 32, OrigContext: 4096, BetaFast: 32, BetaSlow: 1},
		},
	},
	{
		Name: "mixtral-8x7b", Title: "Mixtral-8x7B", Family: "mistral",
		Source: "mistralai/Mixtral-8x7B-v0.1 config.json (current converter: experts merged into ffn_*_exps)",
		Config: Config{
			Arch: "llama", Layers: 32, Embd: 4096, Vocab: 32000, Context: 32768,
			Heads: 32, HeadsKV: 8,
			FF: 14336, Experts: 8, ExpertsUsed: 2, // llama's experts are FF wide: no expert_feed_forward_length
			RMSEps: 1e-5, RopeBase: 1e6,
		},
	},
	{
		Name: "llama-3.1-70b", Title: "Llama-3.1-70B", Family: "llama3",
		Source: "meta-llama/Llama-3.1-70B-Instruct config.json (rope_scaling llama3 → rope_freqs.weight)",
		Config: Config{
			Arch: "llama", Layers: 80, Embd: 8192, Vocab: 128256, Context: 131072,
			Heads: 64, HeadsKV: 8, FF: 28672,
			RMSEps: 1e-5, RopeBase: 500000,
			Llama3Rope: &Llama3Rope{Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OrigContext: 8192},
		},
	},
	{
		Name: "qwen2.5-32b", Title: "Qwen2.5-32B", Family: "qwen2",
		Source: "Qwen/Qwen2.5-32B-Instruct config.json (context length and RMS epsilon unchecked)",
		Config: Config{
			Arch: "qwen2", Layers: 64, Embd: 5120, Vocab: 152064, Context: 32768,
			Heads: 40, HeadsKV: 8, FF: 27648,
			RMSEps: 1e-6, RopeBase: 1e6,
		},
	},
}

// Presets lists the built-in models in a stable order.
func Presets() []Preset { return append([]Preset(nil), presets...) }

// LookupPreset finds a preset by name or alias, ignoring case.
func LookupPreset(name string) (Preset, error) {
	name = strings.ToLower(strings.TrimSpace(name))
	for _, p := range presets {
		if p.Name == name {
			return p, nil
		}
		for _, a := range p.Aliases {
			if a == name {
				return p, nil
			}
		}
	}
	return Preset{}, fmt.Errorf("unknown preset %q; known presets: %s", name, strings.Join(presetNames(), ", "))
}

func presetNames() []string {
	var names []string
	for _, p := range presets {
		names = append(names, p.Name)
	}
	sort.Strings(names)
	return names
}
