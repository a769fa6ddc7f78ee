package synth

import (
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/tensor"
)

const modelsDir = "../../testdata/models"

// fixtureCases shrink a preset to the sizes of a fixture model. The fixtures were written by
// llama.cpp's gguf-py in the converter's layout, so the shrunk preset must have the same
// tensors in the same order with the same shapes, and the same metadata keys, value types
// and values — except where a fixture chose a value of its own (differ).
var fixtureCases = []struct {
	file, preset string
	opts         Options
	differ       []string
}{
	{"tiny-qwen3moe.gguf", "qwen3-30b-a3b", Options{Layers: 4, Embd: 256, Heads: 4, HeadsKV: 2, HeadDim: 64,
		Experts: 16, ExpertsUsed: 4, ExpertFF: 128, FF: 1024, Vocab: 512, Context: 4096}, nil},
	{"tiny-deepseek2.gguf", "deepseek-v3", Options{Layers: 3, LeadingDense: 1, Embd: 256, Heads: 4, HeadDim: 48,
		VHeadDim: 32, RopeDim: 16, QLoraRank: 128, KVLoraRank: 64, Experts: 16, ExpertsUsed: 4, ExpertFF: 128,
		FF: 512, ExpertGroups: 4, ExpertGroupsUsed: 2, Vocab: 512}, nil},
	{"tiny-glm4moe.gguf", "glm-4.5-air", Options{Layers: 3, Embd: 256, Heads: 6, HeadsKV: 2, HeadDim: 64, RopeDim: 32,
		Experts: 16, ExpertsUsed: 4, ExpertFF: 128, FF: 384, Vocab: 512}, []string{"glm4moe.expert_weights_scale"}},
	{"tiny-gpt-oss.gguf", "gpt-oss-20b", Options{Layers: 4, Embd: 192, Heads: 4, HeadsKV: 2, HeadDim: 64,
		Experts: 16, ExpertsUsed: 4, ExpertFF: 128, FF: 128, Vocab: 512}, nil},
	{"tiny-qwen2moe.gguf", "qwen2-57b-a14b", Options{Layers: 3, Embd: 128, Heads: 4, HeadsKV: 2, Experts: 12,
		ExpertsUsed: 4, ExpertFF: 64, SharedFF: 256, FF: 352, Vocab: 512, Context: 8192}, nil},
	{"tiny-qwen35moe.gguf", "qwen3.5-35b-a3b", Options{Layers: 4, NoMTP: true, Embd: 256, Heads: 4, HeadsKV: 2,
		HeadDim: 64, RopeDim: 16, Experts: 16, ExpertsUsed: 4, ExpertFF: 64, SharedFF: 128, SSMState: 32,
		SSMGroups: 2, SSMHeads: 4, Vocab: 512}, nil},
}

func TestShrunkPresetMatchesFixture(t *testing.T) {
	for _, tc := range fixtureCases {
		t.Run(tc.file, func(t *testing.T) {
			f, err := gguf.Open(filepath.Join(modelsDir, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			m, err := Build(tc.preset+":f16", tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			compareTensors(t, f.Tensors, m.Tensors)
			compareMetadata(t, f.Metadata, m.Metadata, tc.differ)
		})
	}
}

func compareTensors(t *testing.T, want []gguf.TensorInfo, got []gguf.TensorSpec) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%d tensors, fixture has %d", len(got), len(want))
	}
	for i := range min(len(got), len(want)) {
		w, g := want[i], got[i]
		if g.Name != w.Name || !reflect.DeepEqual(g.Shape, w.Shape) {
			t.Errorf("tensor %d: %s %v, fixture has %s %v", i, g.Name, g.Shape, w.Name, w.Shape)
			continue
		}
		// The fixtures use their own mix of F16 and quantized types; what the converter
		// decides is which tensors stay F32 and that published MXFP4 experts stay MXFP4.
		if (w.Type == tensor.F32) != (g.Type == tensor.F32) || w.Type == tensor.MXFP4 && g.Type != tensor.MXFP4 {
			t.Errorf("%s is %s, fixture has %s", g.Name, g.Type, w.Type)
		}
	}
}

// compareMetadata checks keys, value types and values; general.* keys other than the
// architecture describe the file, not the layout, and the tokenizer is a stand-in.
func compareMetadata(t *testing.T, want, got gguf.Metadata, differ []string) {
	t.Helper()
	skip := func(key string) bool {
		return strings.HasPrefix(key, "general.") && key != "general.architecture" ||
			key == "tokenizer.chat_template"
	}
	for _, kv := range want.All() {
		if skip(kv.Key) {
			continue
		}
		v, ok := got.Get(kv.Key)
		switch {
		case !ok:
			t.Errorf("missing key %s", kv.Key)
		case v.TypeName() != kv.Value.TypeName():
			t.Errorf("%s is %s, fixture has %s", kv.Key, v.TypeName(), kv.Value.TypeName())
		case strings.HasPrefix(kv.Key, "tokenizer."), contains(differ, kv.Key):
		case !reflect.DeepEqual(v.Any(), kv.Value.Any()):
			t.Errorf("%s = %v, fixture has %v", kv.Key, v, kv.Value)
		}
	}
	for _, kv := range got.All() {
		if !skip(kv.Key) && !want.Has(kv.Key) {
			t.Errorf("extra key %s = %v", kv.Key, kv.Value)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Shapes from the architecture reference (shared/reference/moe-architectures.md §3, taken
// from llama.cpp's loaders) for the full-size presets.
func TestPresetShapes(t *testing.T) {
	cases := []struct {
		spec    string
		tensors int
		shapes  map[string][]int64
	}{
		{"qwen3-30b-a3b:f16", 3 + 48*12, map[string][]int64{
			"token_embd.weight":           {2048, 151936},
			"output.weight":               {2048, 151936},
			"blk.0.attn_q.weight":         {2048, 4096},
			"blk.0.attn_k.weight":         {2048, 512},
			"blk.0.attn_v.weight":         {2048, 512},
			"blk.0.attn_output.weight":    {4096, 2048},
			"blk.0.attn_q_norm.weight":    {128},
			"blk.0.ffn_gate_inp.weight":   {2048, 128},
			"blk.47.ffn_gate_exps.weight": {2048, 768, 128},
			"blk.47.ffn_down_exps.weight": {768, 2048, 128},
		}},
		{"qwen3-235b-a22b:f16", 3 + 94*12, map[string][]int64{
			"blk.0.attn_q.weight":         {4096, 8192},
			"blk.0.attn_k.weight":         {4096, 512},
			"blk.0.attn_output.weight":    {8192, 4096},
			"blk.93.ffn_up_exps.weight":   {4096, 1536, 128},
			"blk.93.ffn_down_exps.weight": {1536, 4096, 128},
		}},
		// 3 dense blocks of 13 tensors, 58 MoE blocks of 18.
		{"deepseek-v3:f16", 3 + 3*13 + 58*18, map[string][]int64{
			"token_embd.weight":            {7168, 129280},
			"blk.0.attn_q_a.weight":        {7168, 1536},
			"blk.0.attn_q_a_norm.weight":   {1536},
			"blk.0.attn_q_b.weight":        {1536, 24576},
			"blk.0.attn_kv_a_mqa.weight":   {7168, 576},
			"blk.0.attn_kv_a_norm.weight":  {512},
			"blk.0.attn_k_b.weight":        {128, 512, 128},
			"blk.0.attn_v_b.weight":        {512, 128, 128},
			"blk.0.attn_output.weight":     {16384, 7168},
			"blk.2.ffn_gate.weight":        {7168, 18432},
			"blk.2.ffn_down.weight":        {18432, 7168},
			"blk.3.ffn_gate_inp.weight":    {7168, 256},
			"blk.3.exp_probs_b.bias":       {256},
			"blk.3.ffn_gate_exps.weight":   {7168, 2048, 256},
			"blk.60.ffn_down_exps.weight":  {2048, 7168, 256},
			"blk.60.ffn_gate_shexp.weight": {7168, 2048},
			"blk.60.ffn_down_shexp.weight": {2048, 7168},
		}},
		// GLM-4.7-Flash (shapes as its safetensors index lists them, transposed): one dense
		// block of 13, 46 MoE blocks of 18, the MTP block of 18 + 6.
		{"glm-4.7-flash:f16", 3 + 13 + 46*18 + 24, map[string][]int64{
			"blk.0.attn_q_a.weight":                {2048, 768},
			"blk.0.attn_q_b.weight":                {768, 5120},
			"blk.0.attn_kv_a_mqa.weight":           {2048, 576},
			"blk.0.attn_k_b.weight":                {192, 512, 20},
			"blk.0.attn_v_b.weight":                {512, 256, 20},
			"blk.0.attn_output.weight":             {5120, 2048},
			"blk.0.ffn_gate.weight":                {2048, 10240},
			"blk.1.ffn_gate_inp.weight":            {2048, 64},
			"blk.1.exp_probs_b.bias":               {64},
			"blk.1.ffn_down_exps.weight":           {1536, 2048, 64},
			"blk.46.ffn_gate_shexp.weight":         {2048, 1536},
			"blk.47.ffn_up_exps.weight":            {2048, 1536, 64},
			"blk.47.nextn.eh_proj.weight":          {4096, 2048},
			"blk.47.nextn.embed_tokens.weight":     {2048, 154880},
			"blk.47.nextn.shared_head_head.weight": {2048, 154880},
			"blk.47.nextn.shared_head_norm.weight": {2048},
		}},
		// Kimi-K2: DeepSeek-V3's widths with 64 heads and 384 experts, one dense block.
		{"kimi-k2:f16", 3 + 13 + 60*18, map[string][]int64{
			"token_embd.weight":            {7168, 163840},
			"blk.0.attn_q_b.weight":        {1536, 12288},
			"blk.0.attn_k_b.weight":        {128, 512, 64},
			"blk.0.attn_v_b.weight":        {512, 128, 64},
			"blk.0.attn_output.weight":     {8192, 7168},
			"blk.0.ffn_down.weight":        {18432, 7168},
			"blk.1.ffn_gate_inp.weight":    {7168, 384},
			"blk.60.ffn_down_exps.weight":  {2048, 7168, 384},
			"blk.60.ffn_gate_shexp.weight": {7168, 2048},
		}},
		// Lite: plain attn_q, one dense block of 11 tensors, 26 MoE blocks of 15 (no exp_probs_b).
		{"deepseek-v2-lite:f16", 3 + 11 + 26*15, map[string][]int64{
			"blk.0.attn_q.weight":         {2048, 3072},
			"blk.1.ffn_gate_shexp.weight": {2048, 2816},
		}},
		{"gpt-oss-20b:mxfp4", 3 + 24*19, map[string][]int64{
			"blk.0.attn_q.weight":               {2880, 4096},
			"blk.0.attn_sinks.weight":           {64},
			"blk.0.ffn_gate_exps.bias":          {2880, 32},
			"blk.0.ffn_down_exps.weight":        {2880, 2880, 32},
			"blk.23.ffn_down_exps.bias":         {2880, 32},
			"blk.23.ffn_gate_inp.bias":          {32},
			"blk.23.attn_output.weight":         {4096, 2880},
			"blk.23.attn_output.bias":           {2880},
			"blk.23.ffn_up_exps.weight":         {2880, 2880, 32},
			"blk.23.attn_k.weight":              {2880, 512},
			"blk.23.ffn_gate_inp.weight":        {2880, 32},
			"blk.23.post_attention_norm.weight": {2880},
		}},
		// One dense block of 12 tensors, 45 MoE blocks of 17, the MTP block of 17 + 6.
		{"glm-4.5-air:f16", 3 + 12 + 45*17 + 17 + 6, map[string][]int64{
			"blk.0.attn_q.weight":                  {4096, 12288},
			"blk.0.attn_k.weight":                  {4096, 1024},
			"blk.0.ffn_down.weight":                {10944, 4096},
			"blk.46.nextn.eh_proj.weight":          {8192, 4096},
			"blk.46.nextn.shared_head_head.weight": {4096, 151552},
			"blk.45.ffn_down_exps.weight":          {1408, 4096, 128},
		}},
		{"mixtral-8x7b:q4_k_m", 3 + 32*10, map[string][]int64{
			"blk.31.ffn_gate_exps.weight": {4096, 14336, 8},
			"blk.31.attn_k.weight":        {4096, 1024},
		}},
		{"llama-3.1-70b:q4_k_m", 4 + 80*9, map[string][]int64{
			"rope_freqs.weight":    {64},
			"blk.79.ffn_up.weight": {8192, 28672},
			"blk.79.attn_v.weight": {8192, 1024},
		}},
		{"qwen2.5-32b:q4_k_m", 3 + 64*12, map[string][]int64{
			"blk.0.attn_q.bias":      {5120},
			"blk.0.attn_k.weight":    {5120, 1024},
			"blk.63.ffn_down.weight": {27648, 5120},
		}},
		// 30 linear-attention blocks of 19, 10 full-attention blocks of 16, the MTP block of 16 + 4.
		{"qwen3.5-35b-a3b:f16", 3 + 30*19 + 10*16 + 20, map[string][]int64{
			"blk.0.attn_qkv.weight":       {2048, 8192},
			"blk.0.ssm_conv1d.weight":     {4, 8192},
			"blk.0.ssm_out.weight":        {4096, 2048},
			"blk.3.attn_q.weight":         {2048, 8192},
			"blk.3.attn_output.weight":    {4096, 2048},
			"blk.3.ffn_up_exps.weight":    {2048, 512, 256},
			"blk.40.nextn.eh_proj.weight": {4096, 2048},
		}},
	}
	for _, tc := range cases {
		m, err := Build(tc.spec, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Tensors) != tc.tensors {
			t.Errorf("%s: %d tensors, want %d", tc.spec, len(m.Tensors), tc.tensors)
		}
		got := map[string][]int64{}
		for _, ts := range m.Tensors {
			got[ts.Name] = ts.Shape
		}
		for name, shape := range tc.shapes {
			if !reflect.DeepEqual(got[name], shape) {
				t.Errorf("%s: %s is %v, want %v", tc.spec, name, got[name], shape)
			}
		}
	}
}

func TestParams(t *testing.T) {
	// Published totals: DeepSeek-V3 671B (37B active without the MTP layer the converter
	// drops), Qwen3-30B-A3B 30.5B (3.3B active), Qwen3-235B-A22B 235B (22B active),
	// gpt-oss-20b 21B (3.6B active excluding embeddings), Mixtral 46.7B (12.9B active).
	cases := []struct {
		preset        string
		total, active float64 // billions
	}{
		{"deepseek-v3", 671.0, 37.5},
		{"qwen3-30b-a3b", 30.5, 3.35},
		{"qwen3-235b-a22b", 235.1, 22.2},
		{"mixtral-8x7b", 46.7, 12.9},
		{"llama-3.1-70b", 70.6, 70.6},
	}
	for _, tc := range cases {
		m, err := Build(tc.preset, Options{})
		if err != nil {
			t.Fatal(err)
		}
		total, active := m.Params()
		if d := float64(total)/1e9 - tc.total; d < -0.1 || d > 0.1 {
			t.Errorf("%s: %d parameters, want about %.1f B", tc.preset, total, tc.total)
		}
		if d := float64(active)/1e9 - tc.active; d < -0.1 || d > 0.1 {
			t.Errorf("%s: %d active parameters, want about %.2f B", tc.preset, active, tc.active)
		}
	}
}

func TestEveryPresetInEveryMix(t *testing.T) {
	for _, p := range Presets() {
		sizes, err := MixSizes(p, Options{})
		if err != nil {
			t.Fatal(err)
		}
		tok, err := builtinTokenizer(p.Family, p.Vocab)
		if err != nil {
			t.Fatal(err)
		}
		for i, mix := range Mixes() {
			m, err := BuildPreset(p, mix, Options{Tokenizer: tok})
			if err != nil {
				t.Fatal(err)
			}
			// MixSizes lays the header out once; check it against full layouts of two mixes
			// whose tensor orders differ (the converter's and llama-quantize's).
			if i < 2 {
				l, err := m.Layout()
				if err != nil {
					t.Fatalf("%s:%s: %v", p.Name, mix.Name, err)
				}
				if l.FileSize != sizes[i] {
					t.Errorf("%s:%s: MixSizes says %d, the layout %d", p.Name, mix.Name, sizes[i], l.FileSize)
				}
			}
			// The converter labels a model with MXFP4 experts MXFP4_MOE even as f16.
			want := uint64(mix.FileType)
			if p.NativeMXFP4 && mix.Name == "f16" {
				want = ftypeMXFP4MoE
			}
			if ft, _ := m.Metadata.Uint("general.file_type"); ft != want {
				t.Errorf("%s:%s: file type %d, want %d", p.Name, mix.Name, ft, want)
			}
			if n, _ := m.Metadata.Strings("tokenizer.ggml.tokens"); len(n) != p.Vocab {
				t.Errorf("%s: %d tokens for a vocabulary of %d", p.Name, len(n), p.Vocab)
			}
		}
	}
}

func TestSpecErrors(t *testing.T) {
	for _, tc := range []struct {
		spec string
		opts Options
		want string
	}{
		{"llama-9000", Options{}, `unknown preset "llama-9000"`},
		{"qwen3-30b-a3b:q3_k_m", Options{}, `unknown mix "q3_k_m"`},
		{"qwen3-30b-a3b", Options{Layers: 49}, "layers 49"},
		{"qwen3-30b-a3b", Options{Layers: -1}, "layers -1"},
		{"qwen3-30b-a3b", Options{Experts: 4}, "experts used 8"},
		{"qwen3-30b-a3b", Options{Heads: 6}, "not a multiple of KV heads"},
		{"qwen3-30b-a3b", Options{Vocab: 100}, "built-in qwen2 vocabulary has 291 tokens"},
		{"qwen3-30b-a3b", Options{Embd: -5}, "must be positive"},
		{"qwen3-30b-a3b", Options{LeadingDense: 2}, "no leading dense blocks"},
		{"deepseek-v3", Options{Experts: 12}, "expert groups 8 must divide"},
		{"deepseek-v3", Options{RopeDim: 192}, "rope dimension 192"},
		{"deepseek-v3", Options{Layers: 2}, "leading dense blocks"}, // not an error: clamped
		{"qwen3-30b-a3b:q8_0", Options{Embd: 200, Heads: 4, HeadDim: 50}, "no fallback for q8_0"},
		{"qwen3-30b-a3b", Options{Embd: 1 << 30}, "out of range"},
		{"mixtral-8x7b", Options{ExpertFF: 1024}, "as wide as the dense FFN"},
		{"deepseek-v2-lite", Options{Layers: 2}, "only with 26 or 27 layers"},
		{"qwen3.5-35b-a3b", Options{LegacySSMIn: true}, "no ssm_in to write the legacy way"},
		{"qwen3-next-80b-a3b", Options{SSMHeads: 24}, "the heads a multiple of the groups"},
	} {
		_, err := Build(tc.spec, tc.opts)
		if tc.want == "leading dense blocks" {
			if err != nil {
				t.Errorf("%s %+v: %v", tc.spec, tc.opts, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %+v: error %v, want one containing %q", tc.spec, tc.opts, err, tc.want)
		}
	}
}

func TestTokenizerFromVocabFile(t *testing.T) {
	f, err := gguf.Open("../../testdata/vocab/ggml-vocab-qwen3.gguf")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tok, err := TokenizerFrom(f.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	toks, _ := f.Metadata.Strings("tokenizer.ggml.tokens")
	m, err := Build("qwen3-30b-a3b:q4_k_m", Options{Tokenizer: tok})
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range f.Metadata.All() {
		if !strings.HasPrefix(kv.Key, "tokenizer.") {
			continue
		}
		v, ok := m.Metadata.Get(kv.Key)
		if !ok || v.TypeName() != kv.Value.TypeName() {
			t.Errorf("%s not copied", kv.Key)
		}
	}
	got, _ := m.Metadata.Strings("tokenizer.ggml.tokens")
	types, _ := m.Metadata.Ints("tokenizer.ggml.token_type")
	if len(got) != 151936 || len(types) != 151936 || !reflect.DeepEqual(got[:len(toks)], toks) {
		t.Fatalf("%d tokens (%d types), want the file's %d padded to 151936", len(got), len(types), len(toks))
	}
	if len(toks) < 151936 && (got[151935] != "[PAD151935]" || types[151935] != int64(tokenUnused)) {
		t.Errorf("padding token %q type %d", got[151935], types[151935])
	}
	if _, err := Build("qwen3-30b-a3b", Options{Tokenizer: tok, Vocab: 1000}); err == nil ||
		!strings.Contains(err.Error(), "has only 1000 rows") {
		t.Errorf("a vocabulary larger than the embedding: %v", err)
	}
	if _, err := TokenizerFrom(gguf.Metadata{}); err == nil {
		t.Error("metadata without tokens accepted as a vocabulary")
	}
}

func TestBuiltinVocabulary(t *testing.T) {
	toks := byteTokens()
	if len(toks) != 256 || toks[0] != "!" || toks[93] != "~" || toks[94] != "¡" || toks[187] != "ÿ" ||
		toks[188] != "Ā" || toks[188+32] != "Ġ" || toks[255] != "Ń" {
		t.Fatalf("byte tokens are not in GPT-2 bytes_to_unicode order: %q", toks)
	}
	for family := range vocabFamilies {
		tok, err := builtinTokenizer(family, 512)
		if err != nil {
			t.Fatal(err)
		}
		md, err := gguf.NewMetadata(tok.kvs...)
		if err != nil {
			t.Fatal(err)
		}
		words, _ := md.Strings("tokenizer.ggml.tokens")
		types, _ := md.Ints("tokenizer.ggml.token_type")
		index := map[string]int{}
		for i, w := range words {
			if _, dup := index[w]; dup {
				t.Errorf("%s: duplicate token %q", family, w)
			}
			index[w] = i
		}
		// Every merge joins two tokens that exist before the token it makes, and every
		// token but the byte tokens and the specials is made by one: the tokenizer can
		// produce each.
		merges, _ := md.Strings("tokenizer.ggml.merges")
		if len(merges) != 512-256-len(vocabFamilies[family].specials) {
			t.Errorf("%s: %d merges for 512 tokens", family, len(merges))
		}
		for _, m := range merges {
			l, r, _ := strings.Cut(m, " ")
			made, ok := index[l+r]
			if li, lok := index[l]; !lok || li >= made || !ok {
				t.Errorf("%s: merge %q has no earlier left part or result", family, m)
			}
			if ri, rok := index[r]; !rok || ri >= made {
				t.Errorf("%s: merge %q has no earlier right part", family, m)
			}
		}
		f := vocabFamilies[family]
		for _, sp := range []struct{ key, text string }{{"bos", f.bos}, {"eos", f.eos}, {"padding", f.pad}} {
			id, err := md.Uint("tokenizer.ggml." + sp.key + "_token_id")
			if sp.text == "" {
				if err == nil {
					t.Errorf("%s: %s id without a token", family, sp.key)
				}
				continue
			}
			if err != nil || words[id] != sp.text || types[id] != int64(tokenControl) {
				t.Errorf("%s: %s id %d (%v) is not the control token %q", family, sp.key, id, err, sp.text)
			}
		}
		// No row is left unused: a random model samples them all, and each must decode to
		// visible text.
		for i, typ := range types {
			if typ == int64(tokenUnused) || words[i] == "" {
				t.Errorf("%s: token %d %q of type %d", family, i, words[i], typ)
			}
		}
	}
	if _, err := builtinTokenizer("klingon", 512); err == nil {
		t.Error("unknown family accepted")
	}
}

func TestLlama3RopeFactors(t *testing.T) {
	p, _ := LookupPreset("llama-3.1-70b")
	f := llama3RopeFactors(&p.Config)
	// Llama 3.1's scaling: frequency i of a 128-dim head with theta 500000 has wavelength
	// 2π·500000^(i/64); below 8192/4 (i ≤ 28) the factor is 1, above 8192 (i ≥ 35) it is 8,
	// between it ramps. By hand, i = 29: wavelength 2400.2, smooth (8192/2400.2−1)/3 = 0.8043,
	// factor 1/((1−0.8043)/8 + 0.8043) = 1.207.
	if len(f) != 64 || f[0] != 1 || f[28] != 1 || f[35] != 8 || f[63] != 8 || f[29] < 1.20 || f[29] > 1.21 {
		t.Fatalf("factors %v", f)
	}
	for i := 30; i <= 34; i++ {
		if !(f[i] > f[i-1] && f[i] < 8) {
			t.Errorf("factor %d = %v does not ramp between 1 and 8: %v", i, f[i], f)
		}
	}
}

func ExampleBuild() {
	m, err := Build("deepseek-v3:q4_k_m", Options{})
	if err != nil {
		panic(err)
	}
	total, active := m.Params()
	l, _ := m.Layout()
	fmt.Printf("%d tensors, %.0fB parameters (%.2fB active), %.1f GB\n", len(m.Tensors), float64(total)/1e9, float64(active)/1e9, float64(l.FileSize)/1e9)
	// Output: 1086 tensors, 671B parameters (37.55B active), 404.5 GB
}

func TestPaddedFileVocabulary(t *testing.T) {
	tok := &Tokenizer{kvs: []gguf.KV{
		{Key: "tokenizer.ggml.model", Value: gguf.NewValue("llama")},
		{Key: "tokenizer.ggml.tokens", Value: gguf.NewArray([]string{"<unk>", "a"})},
		{Key: "tokenizer.ggml.scores", Value: gguf.NewArray([]float32{0, -1})},
		{Key: "tokenizer.ggml.token_type", Value: gguf.NewArray([]int32{2, 1})},
	}}
	kvs, err := tok.padded(4)
	if err != nil {
		t.Fatal(err)
	}
	md, err := gguf.NewMetadata(kvs...)
	if err != nil {
		t.Fatal(err)
	}
	toks, _ := md.Strings("tokenizer.ggml.tokens")
	scores, _ := md.Floats("tokenizer.ggml.scores")
	types, _ := md.Ints("tokenizer.ggml.token_type")
	if !reflect.DeepEqual(toks, []string{"<unk>", "a", "[PAD2]", "[PAD3]"}) ||
		!reflect.DeepEqual(scores, []float64{0, -1, -10000, -10000}) || !reflect.DeepEqual(types, []int64{2, 1, 5, 5}) {
		t.Errorf("padded to %q %v %v", toks, scores, types)
	}
	if v, _ := md.Get("tokenizer.ggml.scores"); v.TypeName() != "array[float32]" {
		t.Errorf("scores are %s", v.TypeName())
	}
	tok.kvs[3].Value = gguf.NewArray([]int32{2})
	if _, err := tok.padded(4); err == nil || !strings.Contains(err.Error(), "token_type must be 2 integers") {
		t.Errorf("a token_type list shorter than the tokens: %v", err)
	}
}

// FuzzBuild feeds arbitrary specs and sizes: Build must fail with an error or give a model
// whose layout the writer accepts, never panic.
func FuzzBuild(f *testing.F) {
	f.Add("qwen3-30b-a3b:q4_k_m", uint16(2), uint16(256), uint16(8), uint16(2), uint16(256), uint16(4), uint16(2), uint16(64), uint16(512), uint16(0))
	f.Add("deepseek-v3:q4_0", uint16(3), uint16(200), uint16(16), uint16(4), uint16(96), uint16(4), uint16(1), uint16(48), uint16(512), uint16(16))
	f.Add("gpt-oss-20b", uint16(1), uint16(100), uint16(4), uint16(2), uint16(64), uint16(2), uint16(1), uint16(32), uint16(400), uint16(0))
	f.Add("qwen3.5-35b-a3b:iq4_xs", uint16(4), uint16(256), uint16(16), uint16(4), uint16(64), uint16(4), uint16(2), uint16(64), uint16(512), uint16(16))
	f.Add("glm-4.5-air:mxfp4", uint16(2), uint16(96), uint16(4), uint16(1), uint16(32), uint16(3), uint16(1), uint16(32), uint16(300), uint16(8))
	f.Fuzz(func(t *testing.T, spec string, layers, embd, experts, used, expertFF, heads, headsKV, headDim, vocab, ropeDim uint16) {
		m, err := Build(spec, Options{Layers: int(layers), Embd: int(embd), Experts: int(experts), ExpertsUsed: int(used),
			ExpertFF: int(expertFF), FF: int(expertFF), Heads: int(heads), HeadsKV: int(headsKV), HeadDim: int(headDim),
			Vocab: int(vocab), RopeDim: int(ropeDim)})
		if err != nil {
			return
		}
		if _, err := m.Layout(); err != nil {
			t.Fatalf("%s built a model the writer rejects: %v", spec, err)
		}
		if total, active := m.Params(); total <= 0 || active <= 0 || active > total {
			t.Fatalf("%s: %d parameters, %d active", spec, total, active)
		}
	})
}

// The DeepSeek converter writes expert_gating_func only when the config names a scoring
// function (GLM-4.7-Flash's does not: llama.cpp then picks sigmoid by its layer count and
// vocabulary), and Glm4MoeLiteModel counts the MTP block in block_count and
// nextn_predict_layers; DeepSeek-V3's converter drops its MTP layer.
func TestDeepseek2Metadata(t *testing.T) {
	cases := []struct {
		spec          string
		blocks, nextn int64 // nextn -1: key absent
		gating        int64 // -1: key absent
		vocab, dense  int64
	}{
		{"glm-4.7-flash:q4_k_m", 48, 1, -1, 154880, 1},
		{"kimi-k2:q4_k_m", 61, -1, 2, 163840, 1},
		{"deepseek-v3:q4_k_m", 61, -1, 2, 129280, 3},
	}
	for _, tc := range cases {
		m, err := Build(tc.spec, Options{})
		if err != nil {
			t.Fatal(err)
		}
		md := m.Metadata
		get := func(key string) int64 {
			if !md.Has(key) {
				return -1
			}
			v, err := md.Int(key)
			if err != nil {
				t.Fatalf("%s: %s: %v", tc.spec, key, err)
			}
			return v
		}
		for _, k := range []struct {
			key  string
			want int64
		}{
			{"deepseek2.block_count", tc.blocks}, {"deepseek2.nextn_predict_layers", tc.nextn},
			{"deepseek2.expert_gating_func", tc.gating}, {"deepseek2.vocab_size", tc.vocab},
			{"deepseek2.leading_dense_block_count", tc.dense},
		} {
			if got := get(k.key); got != k.want {
				t.Errorf("%s: %s = %d, want %d (-1: absent)", tc.spec, k.key, got, k.want)
			}
		}
	}
}
