package synth

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/moerun/moerun/gguf"
)

// Token types as tokenizer.ggml.token_type stores them (llama_token_type).
const (
	tokenNormal  int32 = 1
	tokenControl int32 = 3
	tokenUnused  int32 = 5
)

// Tokenizer is the tokenizer.* metadata a model file carries.
type Tokenizer struct {
	kvs []gguf.KV
}

// Tokens is the number of tokens in the vocabulary.
func (t *Tokenizer) Tokens() int {
	for _, kv := range t.kvs {
		if kv.Key == "tokenizer.ggml.tokens" {
			return kv.Value.Len()
		}
	}
	return 0
}

// TokenizerFrom copies the tokenizer.* keys of a GGUF file (a vocab-only file such as
// llama.cpp's models/ggml-vocab-*.gguf, or any model) in file order.
func TokenizerFrom(md gguf.Metadata) (*Tokenizer, error) {
	t := &Tokenizer{}
	for _, kv := range md.All() {
		if strings.HasPrefix(kv.Key, "tokenizer.") {
			t.kvs = append(t.kvs, kv)
		}
	}
	if _, err := md.Strings("tokenizer.ggml.tokens"); err != nil {
		return nil, fmt.Errorf("not a vocabulary: %w", err)
	}
	return t, nil
}

// padded returns the tokenizer keys with the token list padded to size entries the way the
// converter fills a vocabulary smaller than the embedding: "[PAD<id>]" tokens of type
// UNUSED (scores, if any, get the lowest score the converter uses).
func (t *Tokenizer) padded(size int) ([]gguf.KV, error) {
	n := t.Tokens()
	if n > size {
		return nil, fmt.Errorf("the vocabulary has %d tokens but the model's embedding has only %d rows; raise the vocabulary size to at least %d", n, size, n)
	}
	out := make([]gguf.KV, 0, len(t.kvs))
	for _, kv := range t.kvs {
		v := kv.Value
		if n < size {
			var err error
			if v, err = padArray(kv.Key, v, n, size); err != nil {
				return nil, err
			}
		}
		out = append(out, gguf.KV{Key: kv.Key, Value: v})
	}
	return out, nil
}

func padArray(key string, v gguf.Value, n, size int) (gguf.Value, error) {
	switch key {
	case "tokenizer.ggml.tokens":
		toks, err := v.Strings()
		if err != nil {
			return v, fmt.Errorf("%s: %w", key, err)
		}
		return gguf.NewArray(padTokens(toks[:n:n], size)), nil
	case "tokenizer.ggml.token_type":
		ids, err := v.Ints()
		if err != nil || len(ids) != n {
			return v, fmt.Errorf("%s must be %d integers", key, n)
		}
		return gguf.NewArray(padNumbers[int32](ids, size, tokenUnused)), nil
	case "tokenizer.ggml.scores":
		scores, err := v.Floats()
		if err != nil || len(scores) != n {
			return v, fmt.Errorf("%s must be %d numbers", key, n)
		}
		// The converter gives unused tokens the lowest score there is.
		return gguf.NewArray(padNumbers[float32](scores, size, -10000)), nil
	}
	return v, nil
}

// padNumbers converts per-token values to the element type the converter writes and extends
// them to size with fill.
func padNumbers[T int32 | float32, S int64 | float64](vals []S, size int, fill T) []T {
	out := make([]T, size)
	for i := range out {
		out[i] = fill
		if i < len(vals) {
			out[i] = T(vals[i])
		}
	}
	return out
}

// padTokens extends a token list to size with the converter's "[PAD<id>]" tokens.
func padTokens(toks []string, size int) []string {
	toks = slices.Grow(toks, size-len(toks))
	for i := len(toks); i < size; i++ {
		toks = append(toks, "[PAD"+strconv.Itoa(i)+"]")
	}
	return toks
}

// vocabFamily is a built-in stand-in for a model family's tokenizer: the byte-level BPE
// pre-tokenizer it names, its special tokens and a short chat template in its format.
type vocabFamily struct {
	pre      string
	specials []string
	bos, eos string // special token texts ("" = none)
	pad      string
	addBOS   bool
	template string
}

var vocabFamilies = map[string]vocabFamily{
	"qwen2": {
		pre:      "qwen2",
		specials: []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"},
		bos:      "<|endoftext|>", eos: "<|im_end|>", pad: "<|endoftext|>",
		template: chatMLTemplate,
	},
	"deepseek-v3": {
		pre:      "deepseek-v3",
		specials: []string{"<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>"},
		bos:      "<｜begin▁of▁sentence｜>", eos: "<｜end▁of▁sentence｜>", pad: "<｜end▁of▁sentence｜>",
		addBOS: true,
		template: "{{- bos_token -}}{%- for message in messages -%}{%- if message['role'] == 'system' -%}{{- message['content'] -}}" +
			"{%- elif message['role'] == 'user' -%}{{- '<｜User｜>' + message['content'] -}}" +
			"{%- elif message['role'] == 'assistant' -%}{{- '<｜Assistant｜>' + message['content'] + '<｜end▁of▁sentence｜>' -}}" +
			"{%- endif -%}{%- endfor -%}{%- if add_generation_prompt -%}{{- '<｜Assistant｜>' -}}{%- endif -%}",
	},
	// Kimi-K2: its pre-tokenizer (llama.cpp's "kimi-k2", a hand-written Han-aware splitter),
	// special tokens and prompt format.
	"kimi-k2": {
		pre:      "kimi-k2",
		specials: []string{"[BOS]", "[EOS]", "<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|im_system|>", "<|im_middle|>"},
		bos:      "[BOS]", eos: "<|im_end|>", pad: "[EOS]",
		template: "{%- for message in messages -%}{{- '<|im_' + message['role'] + '|>' + message['role'] + '<|im_middle|>' + message['content'] + '<|im_end|>' -}}" +
			"{%- endfor -%}{%- if add_generation_prompt -%}{{- '<|im_assistant|>assistant<|im_middle|>' -}}{%- endif -%}",
	},
	"deepseek-llm": {
		pre:      "deepseek-llm",
		specials: []string{"<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"},
		bos:      "<｜begin▁of▁sentence｜>", eos: "<｜end▁of▁sentence｜>", pad: "<｜end▁of▁sentence｜>",
		addBOS: true,
		template: "{{- bos_token -}}{%- for message in messages -%}{%- if message['role'] == 'user' -%}{{- 'User: ' + message['content'] + '\n\n' -}}" +
			"{%- elif message['role'] == 'assistant' -%}{{- 'Assistant: ' + message['content'] + '<｜end▁of▁sentence｜>' -}}" +
			"{%- else -%}{{- message['content'] + '\n\n' -}}{%- endif -%}{%- endfor -%}{%- if add_generation_prompt -%}{{- 'Assistant:' -}}{%- endif -%}",
	},
	"glm4": {
		pre:      "glm4",
		specials: []string{"<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>"},
		bos:      "[gMASK]", eos: "<|endoftext|>", pad: "<|endoftext|>",
		template: "[gMASK]<sop>{%- for message in messages -%}{{- '<|' + message['role'] + '|>\n' + message['content'] -}}{%- endfor -%}" +
			"{%- if add_generation_prompt -%}{{- '<|assistant|>\n' -}}{%- endif -%}",
	},
	"gpt-oss": {
		pre:      "gpt-4o",
		specials: []string{"<|startoftext|>", "<|endoftext|>", "<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|return|>", "<|call|>"},
		bos:      "<|startoftext|>", eos: "<|return|>", pad: "<|endoftext|>",
		template: "{%- for message in messages -%}{{- '<|start|>' + message['role'] + '<|message|>' + message['content'] + '<|end|>' -}}{%- endfor -%}" +
			"{%- if add_generation_prompt -%}{{- '<|start|>assistant' -}}{%- endif -%}",
	},
	"llama3": {
		pre:      "llama-bpe",
		specials: []string{"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"},
		bos:      "<|begin_of_text|>", eos: "<|eot_id|>",
		addBOS: true,
		template: "{{- bos_token -}}{%- for message in messages -%}{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] + '<|eot_id|>' -}}" +
			"{%- endfor -%}{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}{%- endif -%}",
	},
	// MiniMax-M2's role markers: "]~!b[" opens the conversation, "]~b]" a turn, "[e~[" ends
	// one; the assistant's role is "ai".
	"minimax": {
		pre:      "minimax-m2",
		specials: []string{"]~!b[", "]~b]", "[e~[", "<think>", "</think>"},
		bos:      "]~!b[", eos: "[e~[",
		template: "{{- bos_token -}}{%- for message in messages -%}{%- set role = 'ai' if message['role'] == 'assistant' else message['role'] -%}" +
			"{{- ']~b]' + role + '\n' + message['content'] + '[e~[\n' -}}{%- endfor -%}{%- if add_generation_prompt -%}{{- ']~b]ai\n' -}}{%- endif -%}",
	},
	// Mixtral's real tokenizer is SentencePiece; the stand-in keeps its special tokens and
	// prompt format on the byte-level BPE every other preset uses.
	"mistral": {
		pre:      "default",
		specials: []string{"<unk>", "<s>", "</s>"},
		bos:      "<s>", eos: "</s>",
		addBOS: true,
		template: "{{- bos_token -}}{%- for message in messages -%}{%- if message['role'] == 'user' -%}{{- '[INST] ' + message['content'] + ' [/INST]' -}}" +
			"{%- else -%}{{- message['content'] + eos_token -}}{%- endif -%}{%- endfor -%}",
	},
}

const chatMLTemplate = "{%- for message in messages -%}{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' -}}" +
	"{%- endfor -%}{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}"

// fillerTokens makes n tokens, each a merge of an earlier token with a letter or a space
// ("Ġ"): first two symbols, then three, and so on, in a fixed order. A random model samples
// every row of its embedding about equally, so a vocabulary padded with unused tokens
// (which decode to nothing) would make it print nothing; with these it prints words of
// letters, and the tokenizer's merge list has the size of a real one.
func fillerTokens(existing []string, n int) (toks, merges []string) {
	have := make(map[string]bool, len(existing)+n)
	for _, t := range existing {
		have[t] = true
	}
	var symbols []string
	for _, c := range "abcdefghijklmnopqrstuvwxyzĠ" {
		symbols = append(symbols, string(c))
	}
	frontier := symbols
	for len(toks) < n {
		var next []string
		for _, l := range frontier {
			for _, r := range symbols {
				t := l + r
				next = append(next, t)
				if have[t] {
					continue // a merge that exists already (builtinMerges)
				}
				have[t] = true
				toks, merges = append(toks, t), append(merges, l+" "+r)
				if len(toks) == n {
					return toks, merges
				}
			}
		}
		frontier = next
	}
	return toks, merges
}

// builtinMerges are a few common English merges, each joining two existing tokens ("Ġ" is
// the byte-level encoding of a space), enough for the tokenizer to merge something.
var builtinMerges = []string{
	"Ġ t", "h e", "Ġ a", "i n", "Ġt he", "e r", "o n", "Ġ s", "r e", "a n", "Ġ w", "o r", "a t",
	"e n", "Ġ o", "Ġ c", "i s", "i t", "e s", "n d", "Ġo f", "Ġa nd", "Ġ i", "in g", "Ġ m", "o u",
	"Ġ b", "Ġ f", "Ġ p", "l l", "Ġt o", "Ġ h",
}

// byteTokens are GPT-2's 256 byte tokens in its bytes_to_unicode order: the printable
// Latin-1 bytes stand for themselves and come first, the other bytes map to U+0100 upwards.
func byteTokens() []string {
	printable := func(b int) bool { return b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF }
	var toks []string
	for b := range 256 {
		if printable(b) {
			toks = append(toks, string(rune(b)))
		}
	}
	next := 256
	for b := range 256 {
		if !printable(b) {
			toks = append(toks, string(rune(next)))
			next++
		}
	}
	return toks
}

// builtinTokenizer is a byte-level BPE vocabulary for a model family: the 256 byte
// tokens, builtinMerges, the family's special tokens (CONTROL), then filler tokens up to
// size (see fillerTokens), so that every row of the embedding is a token with visible text.
func builtinTokenizer(family string, size int) (*Tokenizer, error) {
	f, ok := vocabFamilies[family]
	if !ok {
		return nil, fmt.Errorf("no built-in vocabulary for %q", family)
	}
	toks := byteTokens()
	merges := slices.Clone(builtinMerges)
	for _, m := range builtinMerges {
		toks = append(toks, strings.Replace(m, " ", "", 1))
	}
	id := map[string]int{}
	for _, s := range f.specials {
		id[s] = len(toks)
		toks = append(toks, s)
	}
	if len(toks) > size {
		return nil, fmt.Errorf("the built-in %s vocabulary has %d tokens but the model's embedding has only %d rows; raise the vocabulary size to at least %d",
			family, len(toks), size, len(toks))
	}
	specials := [2]int{len(toks) - len(f.specials), len(toks)}
	filler, fillerMerges := fillerTokens(toks, size-len(toks))
	toks, merges = append(toks, filler...), append(merges, fillerMerges...)
	types := make([]int32, size)
	for i := range types {
		types[i] = tokenNormal
		if i >= specials[0] && i < specials[1] {
			types[i] = tokenControl
		}
	}
	md := []gguf.KV{
		{Key: "tokenizer.ggml.model", Value: gguf.NewValue("gpt2")},
		{Key: "tokenizer.ggml.pre", Value: gguf.NewValue(f.pre)},
		{Key: "tokenizer.ggml.tokens", Value: gguf.NewArray(toks)},
		{Key: "tokenizer.ggml.token_type", Value: gguf.NewArray(types)},
		{Key: "tokenizer.ggml.merges", Value: gguf.NewArray(merges)},
	}
	for _, sp := range []struct{ key, text string }{{"bos", f.bos}, {"eos", f.eos}, {"padding", f.pad}} {
		if sp.text != "" {
			md = append(md, gguf.KV{Key: "tokenizer.ggml." + sp.key + "_token_id", Value: gguf.NewValue(uint32(id[sp.text]))})
		}
	}
	md = append(md,
		gguf.KV{Key: "tokenizer.ggml.add_bos_token", Value: gguf.NewValue(f.addBOS)},
		gguf.KV{Key: "tokenizer.ggml.add_eos_token", Value: gguf.NewValue(false)},
		gguf.KV{Key: "tokenizer.chat_template", Value: gguf.NewValue(f.template)},
	)
	return &Tokenizer{kvs: md}, nil
}
