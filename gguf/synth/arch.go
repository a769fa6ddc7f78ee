package synth

import (
	"fmt"
	"math"

	"github.com/moerun/moerun/arch"
	"github.com/moerun/moerun/gguf"
)

// tensorDecl is one tensor of a layout before its type is chosen.
type tensorDecl struct {
	name  string
	shape []int64 // GGUF order
}

type tensorList []tensorDecl

func (l *tensorList) add(name string, shape ...int) {
	s := make([]int64, len(shape))
	for i, d := range shape {
		s[i] = int64(d)
	}
	*l = append(*l, tensorDecl{name: name, shape: s})
}

// blk adds a tensor of block i.
func (l *tensorList) blk(i int, name string, shape ...int) {
	l.add(fmt.Sprintf("blk.%d.%s", i, name), shape...)
}

// kvList collects metadata in the order the converter writes it; keys get the architecture
// prefix.
type kvList struct {
	arch     string
	fileType uint32 // general.file_type, which the converter writes among the model's keys
	kvs      []gguf.KV
}

func (l *kvList) put(key string, v gguf.Value) {
	l.kvs = append(l.kvs, gguf.KV{Key: l.arch + "." + key, Value: v})
}
func (l *kvList) u32(key string, v int)       { l.put(key, gguf.NewValue(uint32(v))) }
func (l *kvList) f32(key string, v float32)   { l.put(key, gguf.NewValue(v)) }
func (l *kvList) boolean(key string, v bool)  { l.put(key, gguf.NewValue(v)) }
func (l *kvList) str(key string, v string)    { l.put(key, gguf.NewValue(v)) }
func (l *kvList) i32s(key string, v []int32)  { l.put(key, gguf.NewArray(v)) }
func (l *kvList) u32If(key string, v int)     { ifThen(v != 0, func() { l.u32(key, v) }) }
func (l *kvList) f32If(key string, v float32) { ifThen(v != 0, func() { l.f32(key, v) }) }

func ifThen(cond bool, f func()) {
	if cond {
		f()
	}
}

// archLayout is how the converter lays out one architecture. Key and tensor orders follow
// the fixture models in testdata/models, which were written by gguf-py in the converter's
// layout (tensors in each block in the order the converter emits them). What the rest of
// moerun also needs to know about an architecture is in its descriptor (package arch).
type archLayout struct {
	keys    func(c *Config, kv *kvList)
	tensors func(c *Config, t *tensorList)
	// leadingDense says the layout writes leading_dense_block_count and its dense blocks.
	leadingDense bool
	// expertsAsWideAsFF says the experts take the dense feed-forward length, having no
	// width of their own (Mixtral, in Llama's layout).
	expertsAsWideAsFF bool
	// legacySSMIn says the layout can also write the linear attention's input projection
	// the way older converters did, as one ssm_in matrix (Options.LegacySSMIn).
	legacySSMIn bool
	// check, when set, checks what the architecture's loader in llama.cpp further requires
	// of a config.
	check func(c *Config) error
	// is70B reports llama.cpp's LLM_TYPE_70B, for which llama-quantize gives attn_v more bits.
	is70B func(c *Config) bool
}

var layouts = map[*arch.Arch]archLayout{
	arch.Qwen3MoE:   {keys: qwen3moeKeys, tensors: qwen3moeTensors},
	arch.Qwen2MoE:   {keys: qwen2moeKeys, tensors: qwen2moeTensors},
	arch.Qwen35MoE:  {keys: qwen3nextKeys, tensors: qwen35moeTensors},
	arch.Qwen3Next:  {keys: qwen3nextKeys, tensors: qwen3nextTensors, legacySSMIn: true},
	arch.DeepSeek2:  {keys: deepseek2Keys, tensors: deepseek2Tensors(true), leadingDense: true, check: checkDeepSeek2},
	arch.DeepSeek32: {keys: dsaKeys, tensors: deepseek2Tensors(true), leadingDense: true},
	// GLM-5's NextN block shares the model's output head.
	arch.GLMDSA:    {keys: dsaKeys, tensors: deepseek2Tensors(false), leadingDense: true},
	arch.GLM4MoE:   {keys: glm4moeKeys, tensors: glm4moeTensors, leadingDense: true},
	arch.GPTOSS:    {keys: gptOssKeys, tensors: gptOssTensors},
	arch.MiniMaxM2: {keys: minimaxM2Keys, tensors: minimaxM2Tensors, check: checkMiniMaxM2},
	// llama.cpp names a Llama with 80 layers and grouped KV heads 70B (src/models/llama.cpp).
	arch.Llama: {keys: llamaKeys, tensors: llamaTensors, expertsAsWideAsFF: true,
		is70B: func(c *Config) bool { return c.Experts == 0 && c.Layers == 80 && c.Heads != c.HeadsKV }},
	arch.Qwen2: {keys: qwen2Keys, tensors: qwen2Tensors, is70B: func(c *Config) bool { return c.Layers == 80 }},
}

// desc is the descriptor of the config's architecture.
func (c *Config) desc() *arch.Arch { return arch.Of(c.Arch) }

// layout is the config's architecture's layout; the zero layout for one synth cannot write,
// which validate refuses.
func (c *Config) layout() archLayout { return layouts[c.desc()] }

// The pieces every architecture shares.

func (c *Config) blocks() int { return c.Layers + c.NextN }

func embedding(c *Config, t *tensorList) { t.add("token_embd.weight", c.Embd, c.Vocab) }

func outputHead(c *Config, t *tensorList) {
	t.add("output_norm.weight", c.Embd)
	t.add("output.weight", c.Embd, c.Vocab)
}

// attentionQKV adds attn_q/k/v (with biases when asked) for heads of HeadDim values.
func attentionQKV(c *Config, t *tensorList, i, qWidth int, bias bool) {
	kv := c.HeadsKV * c.headDim()
	for _, p := range []struct {
		name  string
		width int
	}{{"attn_q", qWidth}, {"attn_k", kv}, {"attn_v", kv}} {
		t.blk(i, p.name+".weight", c.Embd, p.width)
		if bias {
			t.blk(i, p.name+".bias", p.width)
		}
	}
}

// headDim is head_dim, or hidden_size / heads where the config has none.
func (c *Config) headDim() int {
	if c.HeadDim != 0 {
		return c.HeadDim
	}
	return c.Embd / c.Heads
}

func denseFFN(c *Config, t *tensorList, i int) {
	t.blk(i, "ffn_gate.weight", c.Embd, c.FF)
	t.blk(i, "ffn_up.weight", c.Embd, c.FF)
	t.blk(i, "ffn_down.weight", c.FF, c.Embd)
}

func routedExperts(c *Config, t *tensorList, i, width int) {
	t.blk(i, "ffn_gate_exps.weight", c.Embd, width, c.Experts)
	t.blk(i, "ffn_up_exps.weight", c.Embd, width, c.Experts)
	t.blk(i, "ffn_down_exps.weight", width, c.Embd, c.Experts)
}

func sharedExpert(c *Config, t *tensorList, i, width int) {
	t.blk(i, "ffn_gate_shexp.weight", c.Embd, width)
	t.blk(i, "ffn_up_shexp.weight", c.Embd, width)
	t.blk(i, "ffn_down_shexp.weight", width, c.Embd)
}

// llamaStyleBlock starts a Llama-family block: pre-norm attention (optionally with q/k/v
// biases and per-head q/k norms), then the FFN's norm.
func llamaStyleBlock(c *Config, t *tensorList, i int, bias, qkNorm bool) {
	t.blk(i, "attn_norm.weight", c.Embd)
	attentionQKV(c, t, i, c.Heads*c.headDim(), bias)
	if qkNorm {
		t.blk(i, "attn_q_norm.weight", c.headDim())
		t.blk(i, "attn_k_norm.weight", c.headDim())
	}
	t.blk(i, "attn_output.weight", c.Heads*c.headDim(), c.Embd)
	t.blk(i, "ffn_norm.weight", c.Embd)
}

// routedMoE is a router and its expert stacks.
func routedMoE(c *Config, t *tensorList, i, width int) {
	t.blk(i, "ffn_gate_inp.weight", c.Embd, c.Experts)
	routedExperts(c, t, i, width)
}

// nextnHead adds the tensors that turn block i into a multi-token-prediction block. GLM's
// MTP block has its own embedding and head; Qwen3.5's shares the model's.
func nextnHead(c *Config, t *tensorList, i int, ownHead bool) {
	t.blk(i, "nextn.eh_proj.weight", 2*c.Embd, c.Embd)
	if ownHead {
		t.blk(i, "nextn.embed_tokens.weight", c.Embd, c.Vocab)
	}
	t.blk(i, "nextn.enorm.weight", c.Embd)
	t.blk(i, "nextn.hnorm.weight", c.Embd)
	if ownHead {
		t.blk(i, "nextn.shared_head_head.weight", c.Embd, c.Vocab)
	}
	t.blk(i, "nextn.shared_head_norm.weight", c.Embd)
}

// baseKeys are the keys TextModel.set_gguf_parameters writes for every model, in its order;
// each architecture's own keys follow. gating is set for models whose config names a
// scoring function the base converter reads (DeepSeek).
func baseKeys(c *Config, kv *kvList, gating bool) {
	kv.u32("block_count", c.blocks())
	kv.u32("context_length", c.Context)
	kv.u32("embedding_length", c.Embd)
	kv.u32If("feed_forward_length", c.FF)
	kv.u32("attention.head_count", c.Heads)
	kv.u32("attention.head_count_kv", c.HeadsKV)
	yarnKeys(c, kv)
	if c.desc().MRoPE {
		kv.i32s("rope.dimension_sections", ropeSections(c.RopeDim))
	}
	kv.f32("rope.freq_base", c.RopeBase)
	kv.f32("attention.layer_norm_rms_epsilon", c.RMSEps)
	if c.Experts > 0 {
		kv.u32("expert_count", c.Experts)
		kv.u32("expert_used_count", c.ExpertsUsed)
	}
	groupKeys(c, kv)
	if gating {
		// Written when the config names a scoring function (GLM-4.7-Flash's has none).
		kv.u32If("expert_gating_func", int(c.GatingFunc))
	}
	// A config with head_dim gets key and value lengths here; MLA models write their own.
	if c.HeadDim != 0 && c.KVLoraRank == 0 {
		kv.u32("attention.key_length", c.HeadDim)
		kv.u32("attention.value_length", c.HeadDim)
	}
	kv.kvs = append(kv.kvs, gguf.KV{Key: "general.file_type", Value: gguf.NewValue(kv.fileType)})
}

func yarnKeys(c *Config, kv *kvList) {
	if y := c.Yarn; y != nil {
		kv.str("rope.scaling.type", "yarn")
		kv.f32("rope.scaling.factor", y.Factor)
		kv.u32("rope.scaling.original_context_length", y.OrigContext)
		kv.f32("rope.scaling.yarn_beta_fast", y.BetaFast)
		kv.f32("rope.scaling.yarn_beta_slow", y.BetaSlow)
	}
}

// qwen3moe (src/models/qwen3moe.cpp): q/k norms, all layers MoE, no shared expert.

func qwen3moeKeys(c *Config, kv *kvList) { qwen2moeKeys(c, kv) }

func qwen3moeTensors(c *Config, t *tensorList) {
	embedding(c, t)
	for i := range c.blocks() {
		llamaStyleBlock(c, t, i, false, true)
		routedMoE(c, t, i, c.ExpertFF)
	}
	outputHead(c, t)
}

// qwen2moe (src/models/qwen2moe.cpp): q/k/v biases, a shared expert behind a sigmoid gate.

// qwen2moeKeys is Qwen2MoeModel.set_gguf_parameters, which Qwen3-MoE inherits.
func qwen2moeKeys(c *Config, kv *kvList) {
	baseKeys(c, kv, false)
	kv.u32("expert_feed_forward_length", c.ExpertFF)
	kv.u32If("expert_shared_feed_forward_length", c.SharedFF)
}

func qwen2moeTensors(c *Config, t *tensorList) {
	embedding(c, t)
	for i := range c.blocks() {
		llamaStyleBlock(c, t, i, true, false)
		routedMoE(c, t, i, c.ExpertFF)
		gatedSharedExpert(c, t, i)
	}
	outputHead(c, t)
}

// gatedSharedExpert is the Qwen shared expert with its scalar sigmoid gate, stored [Embd, 1].
func gatedSharedExpert(c *Config, t *tensorList, i int) {
	t.blk(i, "ffn_gate_inp_shexp.weight", c.Embd, 1)
	sharedExpert(c, t, i, c.SharedFF)
}

// qwen35moe (src/models/qwen35moe.cpp): Gated DeltaNet linear attention in three of every
// four layers, gated full attention in the rest, shared expert in every layer; its keys
// are Qwen3-Next's (qwen3nextKeys) plus the M-RoPE sections baseKeys writes.

// ropeSections splits the rotary half-dimensions into Qwen3.5's interleaved M-RoPE sections
// in the published proportion 11:11:10 (of 32), the fourth section empty.
func ropeSections(ropeDim int) []int32 {
	half := ropeDim / 2
	third := half * 10 / 32
	first := (half - third + 1) / 2
	return []int32{int32(first), int32(half - third - first), int32(third), 0}
}

func (c *Config) isRecurrent(i int) bool {
	return i < c.Layers && (i+1)%c.FullAttnInterval != 0
}

// Qwen3.5's converter splits in_proj_ba into ssm_beta and ssm_alpha (one row per value
// head each); Qwen3-Next's keeps it whole as ssm_ba.
func qwen35moeTensors(c *Config, t *tensorList) {
	hybridDeltaNetTensors(c, t, func(i int) {
		t.blk(i, "ssm_beta.weight", c.Embd, c.SSMHeads)
		t.blk(i, "ssm_alpha.weight", c.Embd, c.SSMHeads)
	})
}

// qwen3next (src/models/qwen3next.cpp): Qwen3.5-MoE's layout before it, with the beta and
// alpha projections in one tensor, NeoX RoPE without M-RoPE sections, and value heads in
// the checkpoint's order, grouped by key head.

// qwen3nextKeys is Qwen3NextModel.set_gguf_parameters (which Qwen3.5's converter inherits):
// Qwen2-MoE's keys, the linear attention's sizes, the layer pattern and partial rotary
// dimensions, then the MTP block count.
func qwen3nextKeys(c *Config, kv *kvList) {
	qwen2moeKeys(c, kv)
	kv.u32("ssm.conv_kernel", c.SSMConv)
	kv.u32("ssm.state_size", c.SSMState)
	kv.u32("ssm.group_count", c.SSMGroups)
	kv.u32("ssm.time_step_rank", c.SSMHeads)
	kv.u32("ssm.inner_size", c.SSMState*c.SSMHeads)
	kv.u32("full_attention_interval", c.FullAttnInterval)
	kv.u32("rope.dimension_count", c.RopeDim)
	kv.u32If("nextn_predict_layers", c.NextN)
}

func qwen3nextTensors(c *Config, t *tensorList) {
	hybridDeltaNetTensors(c, t, func(i int) {
		// in_proj_ba: for each key head, its value heads' beta rows, then their alpha rows.
		t.blk(i, "ssm_ba.weight", c.Embd, 2*c.SSMHeads)
	})
}

// hybridDeltaNetTensors is the Qwen3-Next family's layout: Gated DeltaNet layers (whose beta
// and alpha projections betaAlpha adds) and gated full attention, each followed by routed
// experts and a gated shared expert; the MTP blocks are full-attention blocks.
func hybridDeltaNetTensors(c *Config, t *tensorList, betaAlpha func(i int)) {
	embedding(c, t)
	keyDim := c.SSMState * c.SSMGroups
	valueDim := c.SSMState * c.SSMHeads
	for i := range c.blocks() {
		t.blk(i, "attn_norm.weight", c.Embd)
		t.blk(i, "post_attention_norm.weight", c.Embd)
		if c.isRecurrent(i) {
			if c.LegacySSMIn {
				// Each key head's query, key, values and z rows in turn.
				t.blk(i, "ssm_in.weight", c.Embd, 2*keyDim+2*valueDim)
			} else {
				t.blk(i, "attn_qkv.weight", c.Embd, 2*keyDim+valueDim)
				t.blk(i, "attn_gate.weight", c.Embd, valueDim)
			}
			t.blk(i, "ssm_conv1d.weight", c.SSMConv, 2*keyDim+valueDim)
			t.blk(i, "ssm_dt.bias", c.SSMHeads)
			t.blk(i, "ssm_a", c.SSMHeads)
			betaAlpha(i)
			t.blk(i, "ssm_norm.weight", c.SSMState)
			t.blk(i, "ssm_out.weight", valueDim, c.Embd)
		} else {
			// The query projection carries the output gate: twice the query width.
			attentionQKV(c, t, i, 2*c.Heads*c.headDim(), false)
			t.blk(i, "attn_q_norm.weight", c.headDim())
			t.blk(i, "attn_k_norm.weight", c.headDim())
			t.blk(i, "attn_output.weight", c.Heads*c.headDim(), c.Embd)
		}
		routedMoE(c, t, i, c.ExpertFF)
		gatedSharedExpert(c, t, i)
		if i >= c.Layers {
			nextnHead(c, t, i, false)
		}
	}
	outputHead(c, t)
}

// deepseek2 (src/models/deepseek2.cpp): MLA stored as MQA with split attn_k_b/attn_v_b
// (conversion/deepseek.py), leading dense layers, shared experts, optional expert groups and
// exp_probs_b.

// checkDeepSeek2 refuses a config without a query LoRA that llama.cpp would not take for a
// Lite model: src/models/deepseek2.cpp reads q_lora_rank unless the model has 26 or 27 layers.
func checkDeepSeek2(c *Config) error {
	if c.QLoraRank == 0 && c.Layers != 26 && c.Layers != 27 {
		return fmt.Errorf("llama.cpp loads a deepseek2 model without a query LoRA rank only with 26 or 27 layers (%d here); set a query LoRA rank", c.Layers)
	}
	return nil
}

func deepseek2Keys(c *Config, kv *kvList) {
	baseKeys(c, kv, true)
	kv.u32("leading_dense_block_count", c.LeadingDense)
	kv.u32("vocab_size", c.Vocab)
	kv.u32If("attention.q_lora_rank", c.QLoraRank)
	kv.u32("attention.kv_lora_rank", c.KVLoraRank)
	// MLA is written as one KV "head" of the compressed cache: kv_lora_rank + rope dims.
	kv.u32("attention.key_length", c.KVLoraRank+c.RopeDim)
	kv.u32("attention.value_length", c.KVLoraRank)
	kv.u32("attention.key_length_mla", c.HeadDim)
	kv.u32("attention.value_length_mla", c.VHeadDim)
	kv.u32("expert_feed_forward_length", c.ExpertFF)
	kv.u32("expert_shared_count", c.SharedCount)
	kv.f32If("expert_weights_scale", c.WeightsScale)
	ifThen(c.WeightsNorm, func() { kv.boolean("expert_weights_norm", true) })
	kv.u32("rope.dimension_count", c.RopeDim)
	if c.Yarn != nil {
		kv.f32If("rope.scaling.yarn_log_multiplier", c.Yarn.LogMul)
	}
	// Glm4MoeLiteModel (conversion/glm.py) keeps GLM-4.7-Flash's MTP block and says so
	// after the DeepSeek keys; DeepSeek-V3's converter drops its MTP layer.
	kv.u32If("nextn_predict_layers", c.NextN)
}

func groupKeys(c *Config, kv *kvList) {
	kv.u32If("expert_group_count", c.ExpertGroups)
	kv.u32If("expert_group_used_count", c.ExpertGroupsUsed)
}

// deepseek2Tensors lays out deepseek2 and the architectures that extend it, whose NextN
// blocks have their own copy of the output head or (nextnOwnHead false) not.
func deepseek2Tensors(nextnOwnHead bool) func(c *Config, t *tensorList) {
	return func(c *Config, t *tensorList) { mlaTensors(c, t, nextnOwnHead) }
}

func mlaTensors(c *Config, t *tensorList, nextnOwnHead bool) {
	embedding(c, t)
	nope := c.HeadDim - c.RopeDim
	for i := range c.blocks() {
		t.blk(i, "attn_norm.weight", c.Embd)
		if c.QLoraRank > 0 {
			t.blk(i, "attn_q_a_norm.weight", c.QLoraRank)
		}
		t.blk(i, "attn_kv_a_norm.weight", c.KVLoraRank)
		if c.QLoraRank > 0 {
			t.blk(i, "attn_q_a.weight", c.Embd, c.QLoraRank)
			t.blk(i, "attn_q_b.weight", c.QLoraRank, c.Heads*c.HeadDim)
		} else {
			t.blk(i, "attn_q.weight", c.Embd, c.Heads*c.HeadDim)
		}
		t.blk(i, "attn_kv_a_mqa.weight", c.Embd, c.KVLoraRank+c.RopeDim)
		t.blk(i, "attn_k_b.weight", nope, c.KVLoraRank, c.Heads)
		t.blk(i, "attn_v_b.weight", c.KVLoraRank, c.VHeadDim, c.Heads)
		t.blk(i, "attn_output.weight", c.Heads*c.VHeadDim, c.Embd)
		if c.IndexerHeads > 0 {
			indexer(c, t, i)
		}
		t.blk(i, "ffn_norm.weight", c.Embd)
		if i < c.LeadingDense {
			denseFFN(c, t, i)
			continue
		}
		t.blk(i, "ffn_gate_inp.weight", c.Embd, c.Experts)
		if c.ExpProbsBias {
			t.blk(i, "exp_probs_b.bias", c.Experts)
		}
		routedExperts(c, t, i, c.ExpertFF)
		sharedExpert(c, t, i, c.ExpertFF*c.SharedCount)
		if i >= c.Layers {
			// GLM-4.7-Flash's and DeepSeek-V3.2's MTP blocks have their own embedding and
			// head (DeepSeek's checkpoint keeps copies in layer 61, which its converter keeps);
			// GLM-5's shares the model's.
			nextnHead(c, t, i, nextnOwnHead)
		}
	}
	outputHead(c, t)
}

// deepseek32 and glm-dsa (src/models/deepseek32.cpp, glm-dsa.cpp; conversion/deepseek.py's
// DeepseekV32Model and conversion/glm.py's GlmMoeDsaModel): deepseek2's layout plus the
// lightning indexer of DeepSeek Sparse Attention in every block, and the MTP block, which
// both converters keep.

func dsaKeys(c *Config, kv *kvList) {
	deepseek2Keys(c, kv)
	kv.u32("attention.indexer.head_count", c.IndexerHeads)
	kv.u32("attention.indexer.key_length", c.IndexerHeadDim)
	kv.u32("attention.indexer.top_k", c.IndexerTopK)
	if c.IndexerTypes != nil {
		kv.put("attention.indexer.types", gguf.NewArray(c.IndexerTypes))
	}
}

// indexer adds block i's lightning indexer: the query from the query LoRA (attn_q_b), one
// key head from the block's input with its LayerNorm (weight and bias), and the per-head
// weights (proj).
func indexer(c *Config, t *tensorList, i int) {
	t.blk(i, "indexer.k_norm.weight", c.IndexerHeadDim)
	t.blk(i, "indexer.k_norm.bias", c.IndexerHeadDim)
	t.blk(i, "indexer.proj.weight", c.Embd, c.IndexerHeads)
	t.blk(i, "indexer.attn_k.weight", c.Embd, c.IndexerHeadDim)
	t.blk(i, "indexer.attn_q_b.weight", c.QLoraRank, c.IndexerHeads*c.IndexerHeadDim)
}

// glm4moe (src/models/glm4-moe.cpp): q/k/v biases, post_attention_norm before the FFN,
// leading dense layers, sigmoid routing with exp_probs_b, NextN blocks appended.

func glm4moeKeys(c *Config, kv *kvList) {
	baseKeys(c, kv, false)
	kv.u32("rope.dimension_count", c.RopeDim)
	kv.u32("expert_feed_forward_length", c.ExpertFF)
	kv.u32("expert_shared_count", c.SharedCount)
	kv.u32("leading_dense_block_count", c.LeadingDense)
	kv.u32("expert_gating_func", int(c.GatingFunc))
	kv.f32If("expert_weights_scale", c.WeightsScale)
	kv.boolean("expert_weights_norm", c.WeightsNorm)
	kv.u32If("nextn_predict_layers", c.NextN)
}

func glm4moeTensors(c *Config, t *tensorList) {
	embedding(c, t)
	for i := range c.blocks() {
		t.blk(i, "attn_norm.weight", c.Embd)
		attentionQKV(c, t, i, c.Heads*c.headDim(), true)
		if c.QKNorm {
			t.blk(i, "attn_q_norm.weight", c.headDim())
			t.blk(i, "attn_k_norm.weight", c.headDim())
		}
		t.blk(i, "attn_output.weight", c.Heads*c.headDim(), c.Embd)
		t.blk(i, "post_attention_norm.weight", c.Embd)
		if i < c.LeadingDense {
			denseFFN(c, t, i)
			continue
		}
		t.blk(i, "ffn_gate_inp.weight", c.Embd, c.Experts)
		t.blk(i, "exp_probs_b.bias", c.Experts)
		routedExperts(c, t, i, c.ExpertFF)
		sharedExpert(c, t, i, c.ExpertFF*c.SharedCount)
		if i >= c.Layers {
			nextnHead(c, t, i, true)
		}
	}
	outputHead(c, t)
}

// gpt-oss (src/models/openai-moe.cpp): biases everywhere, attention sinks, router and expert
// biases, MXFP4 experts.

func gptOssKeys(c *Config, kv *kvList) {
	baseKeys(c, kv, false)
	kv.u32("attention.sliding_window", c.SlidingWindow)
	kv.u32("expert_feed_forward_length", c.ExpertFF)
}

func gptOssTensors(c *Config, t *tensorList) {
	embedding(c, t)
	for i := range c.blocks() {
		t.blk(i, "attn_norm.weight", c.Embd)
		attentionQKV(c, t, i, c.Heads*c.headDim(), true)
		t.blk(i, "attn_output.weight", c.Heads*c.headDim(), c.Embd)
		t.blk(i, "attn_output.bias", c.Embd)
		t.blk(i, "attn_sinks.weight", c.Heads)
		t.blk(i, "post_attention_norm.weight", c.Embd)
		t.blk(i, "ffn_gate_inp.weight", c.Embd, c.Experts)
		t.blk(i, "ffn_gate_inp.bias", c.Experts)
		t.blk(i, "ffn_gate_exps.weight", c.Embd, c.ExpertFF, c.Experts)
		t.blk(i, "ffn_gate_exps.bias", c.ExpertFF, c.Experts)
		t.blk(i, "ffn_up_exps.weight", c.Embd, c.ExpertFF, c.Experts)
		t.blk(i, "ffn_up_exps.bias", c.ExpertFF, c.Experts)
		t.blk(i, "ffn_down_exps.weight", c.ExpertFF, c.Embd, c.Experts)
		t.blk(i, "ffn_down_exps.bias", c.Embd, c.Experts)
	}
	outputHead(c, t)
}

// minimax-m2 (src/models/minimax-m2.cpp, conversion/minimax.py): grouped-query attention
// with RMS norms over all query heads and over all key heads at once, partial NeoX RoPE, and
// in every block routed experts behind a sigmoid router with a selection bias; no shared
// expert. The converter writes intermediate_size as both feed_forward_length, by which
// llama.cpp sizes the experts, and expert_feed_forward_length.

// checkMiniMaxM2 refuses a config whose dense and expert widths differ, which the
// converter, writing one intermediate size as both, cannot produce.
func checkMiniMaxM2(c *Config) error {
	if c.FF != c.ExpertFF {
		return fmt.Errorf("minimax-m2's converter writes one intermediate size as the feed-forward and the expert length (here %d and %d): set both", c.FF, c.ExpertFF)
	}
	return nil
}

func minimaxM2Keys(c *Config, kv *kvList) {
	baseKeys(c, kv, true)
	kv.u32("expert_feed_forward_length", c.ExpertFF)
	kv.u32("rope.dimension_count", c.RopeDim)
}

func minimaxM2Tensors(c *Config, t *tensorList) {
	embedding(c, t)
	for i := range c.blocks() {
		t.blk(i, "attn_norm.weight", c.Embd)
		attentionQKV(c, t, i, c.Heads*c.headDim(), false)
		t.blk(i, "attn_output.weight", c.Heads*c.headDim(), c.Embd)
		t.blk(i, "attn_q_norm.weight", c.Heads*c.headDim())
		t.blk(i, "attn_k_norm.weight", c.HeadsKV*c.headDim())
		t.blk(i, "ffn_norm.weight", c.Embd)
		t.blk(i, "ffn_gate_inp.weight", c.Embd, c.Experts)
		t.blk(i, "exp_probs_b.bias", c.Experts)
		routedExperts(c, t, i, c.ExpertFF)
	}
	outputHead(c, t)
}

// llama (src/models/llama.cpp): Llama 3.x dense, and Mixtral when it has experts.

func llamaKeys(c *Config, kv *kvList) {
	baseKeys(c, kv, false)
	kv.u32("vocab_size", c.Vocab)
	kv.u32("rope.dimension_count", c.headDim())
}

func llamaTensors(c *Config, t *tensorList) {
	if c.Llama3Rope != nil {
		// generate_extra_tensors runs before the checkpoint's tensors.
		t.add("rope_freqs.weight", c.headDim()/2)
	}
	embedding(c, t)
	for i := range c.blocks() {
		llamaStyleBlock(c, t, i, false, false)
		if c.Experts == 0 {
			denseFFN(c, t, i)
		} else {
			routedMoE(c, t, i, c.FF)
		}
	}
	outputHead(c, t)
}

// llama3RopeFactors are the per-frequency scale factors Llama 3.1's rope_scaling defines,
// computed as the converter's LlamaModel.generate_extra_tensors does.
func llama3RopeFactors(c *Config) []float32 {
	r := c.Llama3Rope
	dim := c.headDim()
	lowWavelen := float64(r.OrigContext) / r.LowFreqFactor
	highWavelen := float64(r.OrigContext) / r.HighFreqFactor
	out := make([]float32, 0, dim/2)
	for i := 0; i < dim; i += 2 {
		freq := 1 / math.Pow(float64(c.RopeBase), float64(i)/float64(dim))
		wavelen := 2 * math.Pi / freq
		switch {
		case wavelen < highWavelen:
			out = append(out, 1)
		case wavelen > lowWavelen:
			out = append(out, float32(r.Factor))
		default:
			smooth := (float64(r.OrigContext)/wavelen - r.LowFreqFactor) / (r.HighFreqFactor - r.LowFreqFactor)
			out = append(out, float32(1/((1-smooth)/r.Factor+smooth)))
		}
	}
	return out
}

// qwen2 (src/models/qwen2.cpp): dense with q/k/v biases.

func qwen2Keys(c *Config, kv *kvList) { baseKeys(c, kv, false) }

func qwen2Tensors(c *Config, t *tensorList) {
	embedding(c, t)
	for i := range c.blocks() {
		llamaStyleBlock(c, t, i, true, false)
		denseFFN(c, t, i)
	}
	outputHead(c, t)
}
