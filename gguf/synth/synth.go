package synth

import (
	"fmt"
	"slices"
	"strings"

	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/tensor"
)

// Options shrink or adjust a preset before its layout is built. Zero fields keep the
// preset's value; the names follow the Hugging Face config fields Config documents.
type Options struct {
	// Layers keeps the first N decoder blocks; multi-token-prediction blocks stay, appended
	// after them as the converter appends them.
	Layers int

	Embd, FF, Experts, ExpertsUsed, ExpertFF, SharedFF int
	Heads, HeadsKV, HeadDim, VHeadDim, RopeDim         int
	QLoraRank, KVLoraRank                              int
	Vocab, Context                                     int
	ExpertGroups, ExpertGroupsUsed                     int
	SSMState, SSMGroups, SSMHeads                      int
	// IndexerHeads, IndexerHeadDim and IndexerTopK size DeepSeek Sparse Attention's
	// lightning indexer (deepseek32, glm-dsa).
	IndexerHeads, IndexerHeadDim, IndexerTopK int
	// LeadingDense is the number of leading dense-FFN blocks (models that have them).
	LeadingDense int
	// NoMTP leaves out multi-token-prediction blocks, like the converter's --no-mtp.
	NoMTP bool
	// LegacySSMIn writes Qwen3-Next's in_proj_qkvz as the one ssm_in matrix that converters
	// wrote before llama.cpp split it into attn_qkv and attn_gate (llama.cpp still reads it).
	LegacySSMIn bool

	// Imatrix picks types as llama-quantize does when given an importance matrix (it
	// changes the ffn_down types of q4_0 and iq4_xs).
	Imatrix bool

	// Tokenizer supplies the tokenizer.* metadata (see TokenizerFrom); nil uses a small
	// built-in byte-level BPE vocabulary of the model's family. Either is padded with
	// unused tokens to the model's vocabulary size.
	Tokenizer *Tokenizer
}

// Model is a built layout: everything a GGUF header holds.
type Model struct {
	Preset   Preset // with the options applied to its Config
	Mix      Mix
	Metadata gguf.Metadata
	Tensors  []gguf.TensorSpec // in file order
}

// DefaultMix is the mix a spec without one gets: the model's published native format for
// gpt-oss, Q4_K_M (the most common download) for the rest.
func (p *Preset) DefaultMix() string {
	if p.NativeMXFP4 {
		return "mxfp4"
	}
	return "q4_k_m"
}

// ParseSpec splits "PRESET[:MIX]" into a preset and a mix.
func ParseSpec(spec string) (Preset, Mix, error) {
	name, mixName, hasMix := strings.Cut(spec, ":")
	p, err := LookupPreset(name)
	if err != nil {
		return Preset{}, Mix{}, err
	}
	if !hasMix {
		mixName = p.DefaultMix()
	}
	m, err := LookupMix(mixName)
	if err != nil {
		return Preset{}, Mix{}, err
	}
	return p, m, nil
}

// Build lays out the model a spec ("deepseek-v3:q4_k_m") names, with options applied.
func Build(spec string, opts Options) (*Model, error) {
	p, mix, err := ParseSpec(spec)
	if err != nil {
		return nil, err
	}
	return BuildPreset(p, mix, opts)
}

// BuildPreset lays out a preset in a mix.
func BuildPreset(p Preset, mix Mix, opts Options) (*Model, error) {
	if err := p.apply(opts); err != nil {
		return nil, fmt.Errorf("%s: %w", p.Name, err)
	}
	specs, err := p.tensorSpecs(mix, opts.Imatrix)
	if err != nil {
		return nil, fmt.Errorf("%s:%s: %w", p.Name, mix.Name, err)
	}
	tok := opts.Tokenizer
	if tok == nil {
		if tok, err = builtinTokenizer(p.Family, p.Config.Vocab); err != nil {
			return nil, fmt.Errorf("%s: %w", p.Name, err)
		}
	}
	md, err := p.metadata(mix, tok)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.Name, err)
	}
	return &Model{Preset: p, Mix: mix, Metadata: md, Tensors: specs}, nil
}

// tensorSpecs lists the tensors in file order with the types the mix gives them.
func (p *Preset) tensorSpecs(mix Mix, imatrix bool) ([]gguf.TensorSpec, error) {
	c := &p.Config
	var decls tensorList
	c.layout().tensors(c, &decls)
	quantOrder := sortForQuantizer(decls)
	types, err := chooseTypes(p, mix, imatrix, quantOrder)
	if err != nil {
		return nil, err
	}
	typeOf := make(map[string]tensor.Type, len(quantOrder))
	for i, d := range quantOrder {
		typeOf[d.name] = types[i]
	}
	// The converter writes tensors in its own order; llama-quantize writes them in the
	// order it walked them.
	fileOrder := decls
	if mix.FileType != ftypeF16 {
		fileOrder = quantOrder
	}
	specs := make([]gguf.TensorSpec, len(fileOrder))
	var total int64
	for i, d := range fileOrder {
		specs[i] = gguf.TensorSpec{Name: d.name, Type: typeOf[d.name], Shape: d.shape}
		n, err := specs[i].Type.Bytes(d.shape)
		if err != nil {
			return nil, fmt.Errorf("tensor %s: %w", d.name, err)
		}
		if total += n; total < 0 {
			return nil, fmt.Errorf("the model's size overflows")
		}
	}
	return specs, nil
}

// metadata is the file's key-value section in the order the converter, and llama-quantize
// after it, write it.
func (p *Preset) metadata(mix Mix, tok *Tokenizer) (gguf.Metadata, error) {
	c := &p.Config
	tokKVs, err := tok.padded(c.Vocab)
	if err != nil {
		return gguf.Metadata{}, err
	}
	// A model converted from MXFP4 experts is labelled MXFP4_MOE by the converter.
	fileType := mix.FileType
	if fileType == ftypeF16 && p.NativeMXFP4 {
		fileType = ftypeMXFP4MoE
	}
	kv := &kvList{arch: c.Arch, fileType: fileType}
	kv.kvs = append(kv.kvs,
		gguf.KV{Key: "general.architecture", Value: gguf.NewValue(c.Arch)},
		gguf.KV{Key: "general.type", Value: gguf.NewValue("model")},
		gguf.KV{Key: "general.name", Value: gguf.NewValue(p.Title)},
	)
	c.layout().keys(c, kv)
	quantVersion := gguf.KV{Key: "general.quantization_version", Value: gguf.NewValue(uint32(2))}
	if mix.FileType == ftypeF16 {
		// The converter: the model's keys, the quantization version, the tokenizer.
		kv.kvs = append(append(kv.kvs, quantVersion), tokKVs...)
	} else {
		// llama-quantize copies the converter's keys and then sets these two anew, which
		// moves them to the end.
		kv.kvs = slices.DeleteFunc(kv.kvs, func(e gguf.KV) bool { return e.Key == "general.file_type" })
		kv.kvs = append(append(kv.kvs, tokKVs...), quantVersion,
			gguf.KV{Key: "general.file_type", Value: gguf.NewValue(fileType)})
	}
	return gguf.NewMetadata(kv.kvs...)
}

// withVocab is the vocabulary size an override leaves the preset with.
func (p *Preset) withVocab(override int) int {
	if override != 0 {
		return override
	}
	return p.Vocab
}

// apply sets the options on the preset's Config and checks that the result is a model
// llama.cpp can load.
func (p *Preset) apply(o Options) error {
	c := &p.Config
	if o.Layers != 0 {
		if o.Layers < 0 || o.Layers > c.Layers {
			return fmt.Errorf("layers %d: the model has %d blocks; keep 1 to %d", o.Layers, c.Layers, c.Layers)
		}
		c.Layers = o.Layers
		c.LeadingDense = min(c.LeadingDense, c.Layers)
	}
	for _, s := range []struct {
		dst *int
		v   int
	}{
		{&c.Embd, o.Embd}, {&c.FF, o.FF}, {&c.Experts, o.Experts}, {&c.ExpertsUsed, o.ExpertsUsed},
		{&c.ExpertFF, o.ExpertFF}, {&c.SharedFF, o.SharedFF}, {&c.Heads, o.Heads}, {&c.HeadsKV, o.HeadsKV},
		{&c.HeadDim, o.HeadDim}, {&c.VHeadDim, o.VHeadDim}, {&c.RopeDim, o.RopeDim},
		{&c.QLoraRank, o.QLoraRank}, {&c.KVLoraRank, o.KVLoraRank}, {&c.Vocab, o.Vocab}, {&c.Context, o.Context},
		{&c.ExpertGroups, o.ExpertGroups}, {&c.ExpertGroupsUsed, o.ExpertGroupsUsed},
		{&c.SSMState, o.SSMState}, {&c.SSMGroups, o.SSMGroups}, {&c.SSMHeads, o.SSMHeads},
		{&c.LeadingDense, o.LeadingDense},
		{&c.IndexerHeads, o.IndexerHeads}, {&c.IndexerHeadDim, o.IndexerHeadDim}, {&c.IndexerTopK, o.IndexerTopK},
	} {
		if s.v < 0 {
			return fmt.Errorf("sizes must be positive, got %d", s.v)
		}
		if s.v != 0 {
			*s.dst = s.v
		}
	}
	if o.ExpertFF != 0 && c.layout().expertsAsWideAsFF {
		return fmt.Errorf("%s-architecture experts are as wide as the dense FFN; set the feed-forward length instead", c.Arch)
	}
	if o.NoMTP {
		c.NextN = 0
	}
	if o.LegacySSMIn {
		if !c.layout().legacySSMIn {
			return fmt.Errorf("%s has no ssm_in to write the legacy way (qwen3next has)", c.Arch)
		}
		c.LegacySSMIn = true
	}
	if o.IndexerHeads != 0 || o.IndexerHeadDim != 0 || o.IndexerTopK != 0 {
		if !c.desc().Indexer {
			return fmt.Errorf("%s has no lightning indexer to size (deepseek32 and glm-dsa have)", c.Arch)
		}
	}
	if c.IndexerTypes != nil && len(c.IndexerTypes) != c.Layers {
		// Shortened: keep the types of the blocks that remain.
		c.IndexerTypes = c.IndexerTypes[:min(c.Layers, len(c.IndexerTypes))]
	}
	if o.LeadingDense != 0 && !c.layout().leadingDense {
		return fmt.Errorf("%s has no leading dense blocks to set", c.Arch)
	}
	if c.Yarn != nil && c.Context < c.Yarn.OrigContext {
		// Keep the YaRN block consistent with a shortened context.
		y := *c.Yarn
		y.OrigContext = c.Context
		c.Yarn = &y
	}
	return c.validate()
}

// maxDim bounds every size, maxLayers the blocks and maxVocab the vocabulary (both built in
// memory as lists), so that shapes and byte counts stay far from overflow.
const (
	maxDim    = 1 << 24
	maxLayers = 1 << 12
	maxVocab  = 1 << 21
)

func (c *Config) validate() error {
	if _, ok := layouts[c.desc()]; !ok {
		return fmt.Errorf("no layout for architecture %q", c.Arch)
	}
	for _, s := range []struct {
		name string
		v    int
		max  int
	}{{"layers", c.Layers, maxLayers}, {"embedding length", c.Embd, maxDim}, {"vocabulary size", c.Vocab, maxVocab},
		{"context length", c.Context, maxDim}, {"heads", c.Heads, maxDim}, {"KV heads", c.HeadsKV, maxDim}} {
		if s.v < 1 || s.v > s.max {
			return fmt.Errorf("%s %d out of range 1..%d", s.name, s.v, s.max)
		}
	}
	for _, v := range []int{c.FF, c.Experts, c.ExpertFF, c.SharedFF, c.HeadDim, c.VHeadDim, c.RopeDim,
		c.QLoraRank, c.KVLoraRank, c.ExpertGroups, c.SSMState, c.SSMGroups, c.SSMHeads} {
		if v > maxDim {
			return fmt.Errorf("size %d exceeds %d", v, maxDim)
		}
	}
	mla := c.KVLoraRank > 0
	switch {
	case !mla && c.Heads%c.HeadsKV != 0:
		return fmt.Errorf("heads %d is not a multiple of KV heads %d", c.Heads, c.HeadsKV)
	case c.HeadDim == 0 && c.Embd%c.Heads != 0:
		return fmt.Errorf("embedding length %d is not a multiple of heads %d (give a head dimension)", c.Embd, c.Heads)
	case c.RopeDim%2 != 0 || c.RopeDim > c.headDim():
		return fmt.Errorf("rope dimension %d must be even and at most the head dimension %d", c.RopeDim, c.headDim())
	case mla && (c.RopeDim == 0 || c.HeadDim <= c.RopeDim || c.VHeadDim < 1):
		return fmt.Errorf("MLA needs 0 < rope dimension %d < head dimension %d and a value head dimension (got %d)", c.RopeDim, c.HeadDim, c.VHeadDim)
	case c.LeadingDense < c.Layers && c.Experts > 0 && (c.ExpertsUsed < 1 || c.ExpertsUsed > c.Experts):
		return fmt.Errorf("experts used %d must be 1 to the number of experts %d", c.ExpertsUsed, c.Experts)
	case c.Experts > 0 && c.ExpertFF < 1 && !c.layout().expertsAsWideAsFF:
		return fmt.Errorf("expert feed-forward length must be positive")
	case c.LeadingDense > c.Layers:
		return fmt.Errorf("leading dense blocks %d exceed the %d layers", c.LeadingDense, c.Layers)
	case (c.LeadingDense > 0 || c.Experts == 0) && c.FF < 1:
		return fmt.Errorf("dense feed-forward length must be positive")
	}
	if check := c.layout().check; check != nil {
		if err := check(c); err != nil {
			return err
		}
	}
	if c.ExpertGroups > 1 {
		perGroup := c.Experts / c.ExpertGroups
		switch {
		case c.Experts%c.ExpertGroups != 0:
			return fmt.Errorf("expert groups %d must divide the number of experts %d", c.ExpertGroups, c.Experts)
		case c.ExpertGroupsUsed < 1 || c.ExpertGroupsUsed >= c.ExpertGroups:
			return fmt.Errorf("expert groups used %d must be 1 to %d (one less than the groups)", c.ExpertGroupsUsed, c.ExpertGroups-1)
		case c.ExpertsUsed > perGroup*c.ExpertGroupsUsed:
			return fmt.Errorf("%d experts used cannot come from %d groups of %d experts", c.ExpertsUsed, c.ExpertGroupsUsed, perGroup)
		}
	}
	if c.desc().Indexer {
		if err := c.validateIndexer(); err != nil {
			return err
		}
	}
	if c.desc().Recurrent && (c.SSMConv < 1 || c.SSMState < 1 || c.SSMGroups < 1 || c.SSMHeads < 1 || c.FullAttnInterval < 1 || c.SSMHeads%c.SSMGroups != 0) {
		return fmt.Errorf("linear attention needs positive SSM state, groups and heads, the heads a multiple of the groups")
	}
	return nil
}

// validateIndexer checks what llama.cpp 3f545bec needs to load and run a model with the
// lightning indexer: a query LoRA (the indexer's query comes from it), an indexer head of
// a power of two from 64 (it rotates keys and queries with a Hadamard matrix that size) and
// at least as wide as the rotary part, a positive top-k, and a first layer with its own
// indexer (GLM's shared layers reuse an earlier one's selection).
func (c *Config) validateIndexer() error {
	d := c.IndexerHeadDim
	switch {
	case c.QLoraRank < 1:
		return fmt.Errorf("%s needs a query LoRA rank: the indexer's query is projected from it", c.Arch)
	case c.IndexerHeads < 1 || c.IndexerTopK < 1:
		return fmt.Errorf("the lightning indexer needs heads (%d) and a top-k (%d)", c.IndexerHeads, c.IndexerTopK)
	case d < 64 || d&(d-1) != 0 || d > maxDim:
		return fmt.Errorf("indexer head dimension %d: llama.cpp rotates it with a Hadamard matrix, so it must be a power of two from 64", d)
	case d < c.RopeDim:
		return fmt.Errorf("indexer head dimension %d is narrower than the %d rotary dimensions", d, c.RopeDim)
	case len(c.IndexerTypes) > 0 && !c.IndexerTypes[0]:
		return fmt.Errorf("the first layer's indexer must be a full one: shared layers reuse an earlier layer's selection")
	}
	return nil
}

// Params counts the model's parameters: all of them, and those one token's forward pass
// reads (routed experts scaled by experts used / experts; multi-token-prediction blocks,
// which the main graph does not run, left out).
func (m *Model) Params() (total, active int64) {
	c := &m.Preset.Config
	for _, t := range m.Tensors {
		n := int64(1)
		for _, d := range t.Shape {
			n *= d
		}
		total += n
		if layer, ok := blockOf(t.Name); ok && layer >= c.Layers {
			continue
		}
		if gguf.ClassOf(t.Name) == gguf.ClassRoutedExpert {
			n = n * int64(c.ExpertsUsed) / int64(c.Experts)
		}
		active += n
	}
	return total, active
}

// MixSizes returns the file size of the preset in every mix of Mixes(), in that order. The
// header is the same size in every mix, so it is laid out once.
func MixSizes(p Preset, opts Options) ([]int64, error) {
	if opts.Tokenizer == nil {
		// The vocabulary is the same in every mix: build it once.
		tok, err := builtinTokenizer(p.Family, p.withVocab(opts.Vocab))
		if err != nil {
			return nil, err
		}
		opts.Tokenizer = tok
	}
	var header, align int64
	var sizes []int64
	for _, mix := range mixes {
		m, err := BuildPreset(p, mix, opts)
		if err != nil {
			return nil, err
		}
		if header == 0 {
			l, err := m.Layout()
			if err != nil {
				return nil, err
			}
			header, align = l.DataOffset, l.Alignment
		}
		size := header
		for _, t := range m.Tensors {
			n, err := t.Type.Bytes(t.Shape)
			if err != nil {
				return nil, fmt.Errorf("tensor %s: %w", t.Name, err)
			}
			size += (n + align - 1) / align * align
		}
		sizes = append(sizes, size)
	}
	return sizes, nil
}

// Layout places the header and tensors as the file will have them.
func (m *Model) Layout() (*gguf.Layout, error) { return gguf.NewLayout(m.Metadata, m.Tensors) }

// WriteSparse writes the model as a sparse file: the header, and the weights' space left as
// a hole that reads as zeros.
func (m *Model) WriteSparse(path string) (*gguf.Layout, error) {
	return gguf.WriteSparse(path, m.Metadata, m.Tensors)
}
