// Package tokenizer turns text into token ids and back exactly as llama.cpp does for a
// GGUF file's byte-level BPE vocabulary (tokenizer.ggml.model "gpt2"), and renders the
// file's chat template. It knows GGUF metadata only, never tensors.
package tokenizer

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/moerun/moerun/gguf"
)

// Attr is a token's attribute set, as llama.cpp derives it from tokenizer.ggml.token_type
// and a few rules on token texts.
type Attr uint16

// Token attributes (llama_token_attr's bits).
const (
	AttrUnknown Attr = 1 << iota
	AttrUnused
	AttrNormal
	AttrControl
	AttrUserDefined
	AttrByte
	AttrNormalized
	AttrLStrip // partitioning eats the whitespace before the token
	AttrRStrip // … and after it
)

// GGUF token types (tokenizer.ggml.token_type).
const (
	typeNormal      = 1
	typeUnknown     = 2
	typeControl     = 3
	typeUserDefined = 4
	typeUnused      = 5
	typeByte        = 6
)

// None marks an absent special token id.
const None int32 = -1

// Vocab is a byte-level BPE vocabulary with its pre-tokenizer and special tokens. It is
// safe for concurrent use.
type Vocab struct {
	// Pre is tokenizer.ggml.pre, the pre-tokenizer's name.
	Pre string
	// Special token ids, None when absent.
	BOS, EOS, EOT, EOM, UNK, PAD int32
	// AddBOS and AddEOS say whether Encode with addSpecial adds them.
	AddBOS, AddEOS bool
	// ChatTemplate is tokenizer.chat_template ("" when absent).
	ChatTemplate string

	tokens []string
	attrs  []Attr
	ids    map[string]int32
	eog    map[int32]bool

	merges     map[uint64]merge // by the ids of the two parts
	textMerges map[string]merge // "left right" for parts that are not tokens
	byteTokens [256]int32       // token of each byte's byte-level spelling, or None
	special    []int32          // partition candidates, longest text first
	pieces     []string         // each token's text as output (llama.cpp's piece cache)
	pre        *preTokenizer
	cache      wordCache

	ignoreMerges   bool // llama 3: a word that is a token is not split
	cleanSpaces    bool // detokenizer's clean_up_tokenization_spaces
	addSpacePrefix bool // detokenizer drops one leading space
}

// merge is one rule of the merge table: its rank (lower merges first) and the id of the
// merged text (None when the vocabulary lacks it).
type merge struct {
	rank   int32
	result int32
}

// maxTokens bounds the vocabulary size read from a file (the largest real ones are ~260k).
const maxTokens = 1 << 24

// Load reads a vocabulary from GGUF metadata (the tokenizer.ggml.* keys), as llama.cpp's
// llama_vocab::load does for BPE models.
func Load(md gguf.Metadata) (*Vocab, error) {
	model, err := md.String("tokenizer.ggml.model")
	if err != nil {
		return nil, err
	}
	if model != "gpt2" {
		return nil, fmt.Errorf("tokenizer model %q (tokenizer.ggml.model) is not supported: only byte-level BPE (\"gpt2\")", model)
	}
	v := &Vocab{BOS: 11, EOS: 11, EOT: None, EOM: None, UNK: None, PAD: None}
	if v.Pre, err = md.StringOr("tokenizer.ggml.pre", "default"); err != nil {
		return nil, err
	}
	pre, pt, err := newPreTokenizer(v.Pre, false)
	if err != nil {
		return nil, err
	}
	v.pre, v.ignoreMerges, v.cleanSpaces, v.AddBOS = pre, pt.ignoreMerges, pt.cleanSpaces, pt.addBOS
	if pt.noBOS {
		v.BOS = None
	}
	if err := v.loadTokens(md); err != nil {
		return nil, err
	}
	if err := v.loadMerges(md); err != nil {
		return nil, err
	}
	if err := v.loadSpecialIDs(md); err != nil {
		return nil, err
	}
	if v.ChatTemplate, err = md.StringOr("tokenizer.chat_template", ""); err != nil {
		return nil, err
	}
	v.deriveSpecialTokens(md)
	v.buildCaches()
	v.applyModelAttrs(md)
	return v, nil
}

func (v *Vocab) loadTokens(md gguf.Metadata) error {
	tokens, err := md.Strings("tokenizer.ggml.tokens")
	if err != nil {
		return err
	}
	if len(tokens) == 0 || len(tokens) > maxTokens {
		return fmt.Errorf("tokenizer.ggml.tokens: %d tokens (want 1 to %d)", len(tokens), maxTokens)
	}
	var types []int64
	if md.Has("tokenizer.ggml.token_type") {
		if types, err = md.Ints("tokenizer.ggml.token_type"); err != nil {
			return err
		}
		if len(types) < len(tokens) {
			return fmt.Errorf("tokenizer.ggml.token_type has %d entries for %d tokens", len(types), len(tokens))
		}
	}
	v.tokens = make([]string, len(tokens))
	v.attrs = make([]Attr, len(tokens))
	v.ids = make(map[string]int32, len(tokens))
	for i, t := range tokens {
		if t == "" { // llama.cpp renames empty tokens so that every text maps to one id
			t = fmt.Sprintf("[EMPTY_%d]", i)
		}
		v.tokens[i] = t
		v.ids[t] = int32(i) // a duplicate text maps to its last id, as in llama.cpp
		v.attrs[i] = AttrNormal
		if types != nil {
			v.attrs[i] = attrOfType(types[i])
		}
	}
	return nil
}

func attrOfType(t int64) Attr {
	switch t {
	case typeNormal:
		return AttrNormal
	case typeUnknown:
		return AttrUnknown
	case typeControl:
		return AttrControl
	case typeUserDefined:
		return AttrUserDefined
	case typeUnused:
		return AttrUnused
	case typeByte:
		return AttrByte
	}
	return 0 // undefined
}

func (v *Vocab) loadMerges(md gguf.Metadata) error {
	merges, err := md.Strings("tokenizer.ggml.merges")
	if err != nil {
		return err
	}
	v.merges = make(map[uint64]merge, len(merges))
	for rank, m := range merges {
		// Split at the first space after position 0: a part may itself be a space.
		sp := strings.IndexByte(m[min(1, len(m)):], ' ')
		if sp < 0 {
			continue
		}
		sp += min(1, len(m))
		left, right := m[:sp], m[sp+1:]
		rule := merge{rank: int32(rank), result: v.id(left + right)}
		l, r := v.id(left), v.id(right)
		if l == None || r == None {
			if v.textMerges == nil {
				v.textMerges = map[string]merge{}
			}
			if _, dup := v.textMerges[m]; !dup {
				v.textMerges[m] = rule
			}
			continue
		}
		if _, dup := v.merges[pairKey(l, r)]; !dup { // the first rule for a pair wins
			v.merges[pairKey(l, r)] = rule
		}
	}
	return nil
}

func pairKey(l, r int32) uint64 { return uint64(uint32(l))<<32 | uint64(uint32(r)) }

// id returns the token whose text is s, or None.
func (v *Vocab) id(s string) int32 {
	if id, ok := v.ids[s]; ok {
		return id
	}
	return None
}

// loadSpecialIDs applies the tokenizer.ggml.*_token_id keys over the defaults. As in
// llama.cpp an id outside the vocabulary is ignored (the default stays).
func (v *Vocab) loadSpecialIDs(md gguf.Metadata) error {
	n := int32(len(v.tokens))
	for _, s := range []struct {
		key string
		id  *int32
	}{
		{"tokenizer.ggml.bos_token_id", &v.BOS},
		{"tokenizer.ggml.eos_token_id", &v.EOS},
		{"tokenizer.ggml.eot_token_id", &v.EOT},
		{"tokenizer.ggml.eom_token_id", &v.EOM},
		{"tokenizer.ggml.unknown_token_id", &v.UNK},
		{"tokenizer.ggml.padding_token_id", &v.PAD},
	} {
		if *s.id >= n {
			*s.id = None
		}
		if !md.Has(s.key) {
			continue
		}
		id, err := md.Uint(s.key)
		if err != nil {
			return err
		}
		if id < uint64(n) {
			*s.id = int32(id)
		}
	}
	var err error
	if v.AddBOS, err = md.BoolOr("tokenizer.ggml.add_bos_token", v.AddBOS); err != nil {
		return err
	}
	if v.AddEOS, err = md.BoolOr("tokenizer.ggml.add_eos_token", v.AddEOS); err != nil {
		return err
	}
	if v.addSpacePrefix, err = md.BoolOr("tokenizer.ggml.add_space_prefix", false); err != nil {
		return err
	}
	return nil
}

// Texts by which llama.cpp recognises end-of-turn, fill-in-the-middle and end-of-generation
// tokens that the converter did not name in the metadata.
var (
	eotTexts = []string{"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>"}
	eomTexts = []string{"<|eom_id|>"}
	eogTexts = []string{"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>", "<｜end▁of▁sentence｜>", "[e~["}
	// gpt-oss's channel markers are always rendered, whatever the file says.
	alwaysRendered = []string{"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"}
)

// fimRule is one fill-in-the-middle token: its metadata keys (the later wins) and the texts
// that identify it when no key names it. Pad, repo and file-separator tokens end generation.
type fimRule struct {
	keys  []string
	texts []string
	eog   bool
}

var fimRules = []fimRule{
	{[]string{"fim_pre_token_id", "prefix_token_id"}, []string{"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>", "<|code_prefix|>", "<|prefix|>"}, false},
	{[]string{"fim_suf_token_id", "suffix_token_id"}, []string{"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>", "<|code_suffix|>", "<|suffix|>"}, false},
	{[]string{"fim_mid_token_id", "middle_token_id"}, []string{"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>", "<|code_middle|>", "<|middle|>"}, false},
	{[]string{"fim_pad_token_id"}, []string{"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"}, true},
	{[]string{"fim_rep_token_id"}, []string{"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"}, true},
	{[]string{"fim_sep_token_id"}, []string{"<|file_sep|>"}, true},
}

// byText finds the token among texts and marks it control. llama.cpp scans a hash map, so
// when several candidates exist the one it picks is unspecified; we pick the lowest id.
func (v *Vocab) byText(texts []string) int32 {
	found := None
	for _, t := range texts {
		if id := v.id(t); id != None && (found == None || id < found) {
			found = id
		}
	}
	if found != None {
		v.attrs[found] |= AttrControl
	}
	return found
}

// deriveSpecialTokens finds the end-of-turn and fill-in-the-middle tokens by text, marks
// them control, and builds the end-of-generation set, following llama_vocab::load.
func (v *Vocab) deriveSpecialTokens(md gguf.Metadata) {
	if v.EOT == None {
		v.EOT = v.byText(eotTexts)
	}
	if v.EOM == None {
		v.EOM = v.byText(eomTexts)
	}
	v.eog = map[int32]bool{}
	for _, rule := range fimRules {
		id := None
		for _, key := range rule.keys {
			if k, err := md.Uint("tokenizer.ggml." + key); err == nil && k < uint64(len(v.tokens)) {
				id = int32(k)
			}
		}
		if id == None {
			id = v.byText(rule.texts)
		}
		if rule.eog && id != None {
			v.eog[id] = true
		}
	}
	for id, t := range v.tokens {
		if v.attrs[id]&AttrControl != 0 && strings.Contains(t, "unused") {
			v.attrs[id] |= AttrUnused
		}
	}
	for _, t := range eogTexts {
		if id := v.id(t); id != None {
			v.eog[id] = true
			v.attrs[id] |= AttrControl
		}
	}
	for _, t := range alwaysRendered {
		if id := v.id(t); id != None {
			v.attrs[id] = AttrUserDefined
		}
	}
	for _, id := range []int32{v.EOS, v.EOT, v.EOM} {
		if id != None {
			v.eog[id] = true
		}
	}
	// Harmony (gpt-oss) ends turns with <|return|> and <|call|>; its <|end|> only closes a
	// message. Gemma 4 likewise keeps </s> as text when it has <|tool_response>.
	has := func(t string) bool { id := v.id(t); return id != None && v.eog[id] }
	hasCall := has("<|call|>") || has("<|calls|>")
	if end := v.id("<|end|>"); end != None && v.eog[end] && hasCall && (has("<|return|>") || has("<|flush|>")) {
		delete(v.eog, end)
		v.attrs[end] = AttrUserDefined
	}
	if s := v.id("</s>"); s != None && v.eog[s] && has("<|tool_response>") {
		delete(v.eog, s)
		v.attrs[s] = AttrNormal
	}
}

func (v *Vocab) buildCaches() {
	for b := range 256 {
		v.byteTokens[b] = v.id(string(byteToRune[b]))
	}
	for id, a := range v.attrs {
		if a&(AttrControl|AttrUserDefined|AttrUnknown) != 0 {
			v.special = append(v.special, int32(id))
		}
	}
	// Longest first, so that a token containing another is matched whole.
	slices.SortStableFunc(v.special, func(a, b int32) int {
		return cmp.Compare(len(v.tokens[b]), len(v.tokens[a]))
	})
	v.pieces = make([]string, len(v.tokens))
	for id := range v.tokens {
		v.pieces[id] = v.renderPiece(int32(id))
	}
	v.cache.init()
}

// Len is the number of tokens.
func (v *Vocab) Len() int { return len(v.tokens) }

// Text is a token's text as stored in the vocabulary (byte-level spelling for normal
// tokens); "" for an id out of range.
func (v *Vocab) Text(id int32) string {
	if id < 0 || int(id) >= len(v.tokens) {
		return ""
	}
	return v.tokens[id]
}

// Attr is a token's attribute set (0 for an id out of range).
func (v *Vocab) Attr(id int32) Attr {
	if id < 0 || int(id) >= len(v.attrs) {
		return 0
	}
	return v.attrs[id]
}

// ID returns the token whose vocabulary text is s.
func (v *Vocab) ID(s string) (int32, bool) {
	id, ok := v.ids[s]
	return id, ok
}

// IsEOG reports whether generating id ends the generation.
func (v *Vocab) IsEOG(id int32) bool { return v.eog[id] }

// EOG lists the end-of-generation tokens in ascending order.
func (v *Vocab) EOG() []int32 {
	ids := make([]int32, 0, len(v.eog))
	for id := range v.eog {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// applyModelAttrs sets the whitespace-stripping attributes llama.cpp gives some models by
// name, since GGUF files do not carry them: Phi-3's special tokens eat the whitespace after
// them (except <unk>, <s> and <|endoftext|>), ModernBERT's [MASK] the whitespace before.
func (v *Vocab) applyModelAttrs(md gguf.Metadata) {
	name, _ := md.StringOr("general.name", "")
	name = strings.ToLower(name)
	switch {
	case strings.Contains(name, "phi-3") || strings.Contains(name, "phi3"):
		for _, id := range v.special {
			v.attrs[id] |= AttrRStrip
		}
		if id := v.id("</s>"); id != None {
			v.attrs[id] |= AttrRStrip
		}
		for _, t := range []string{"<unk>", "<s>", "<|endoftext|>"} {
			if id := v.id(t); id != None {
				v.attrs[id] &^= AttrRStrip
			}
		}
	case strings.Contains(name, "modern-bert"):
		if id := v.id("[MASK]"); id != None {
			v.attrs[id] |= AttrLStrip
		}
	}
}
