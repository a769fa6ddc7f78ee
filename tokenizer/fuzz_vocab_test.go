package tokenizer

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/moerun/moerun/gguf"
)

// Limits that keep one fuzz input's work small: Load builds per-token caches and Encode
// runs BPE over the text, so long lists and texts only slow the fuzzer down.
const (
	fuzzMaxTokens = 512
	fuzzMaxMerges = 512
	fuzzMaxText   = 256
)

// fuzzPreNames are the pre-tokenizer names FuzzLoad picks from by index; the last is unknown.
var fuzzPreNames = func() []string {
	names := make([]string, 0, len(preTypes)+1)
	for name := range preTypes {
		names = append(names, name)
	}
	slices.Sort(names)
	return append(names, "no-such-pre")
}()

// Bits of FuzzLoad's opts.
const (
	fuzzComplete     = 1 << iota // all 256 byte tokens, every merge's result, normal types: Encode round-trips
	fuzzTypes                    // write tokenizer.ggml.token_type from types
	fuzzScores                   // write tokenizer.ggml.scores
	fuzzBOS                      // write bos_token_id (bits 16-23) and add_bos_token
	fuzzEOS                      // write eos_token_id (bits 24-31) and add_eos_token
	fuzzFIM                      // write fim_pre_token_id (bits 16-23)
	fuzzPhi3                     // general.name names Phi-3 (whitespace-stripping specials)
	fuzzBadTypes                 // write a key of the wrong GGUF type (which: bits 12-13)
	fuzzShortTypes               // token_type one entry short
	fuzzNoMerges                 // leave tokenizer.ggml.merges out
	fuzzSpacePrefix              // add_space_prefix
	fuzzParseSpecial             // Encode with parseSpecial
)

// fuzzVocabMetadata builds the tokenizer.ggml.* metadata of a vocabulary from fuzzed
// parts as a converter would write it: tokens and merges one per line, one token type
// per byte of types.
func fuzzVocabMetadata(t *testing.T, tokens, merges string, types []byte, pre uint8, opts uint32) (md gguf.Metadata, toks []string) {
	toks = strings.Split(tokens, "\n")
	if len(toks) > fuzzMaxTokens {
		toks = toks[:fuzzMaxTokens]
	}
	mergeList := strings.Split(merges, "\n")
	if len(mergeList) > fuzzMaxMerges {
		mergeList = mergeList[:fuzzMaxMerges]
	}
	if tokens == "" {
		toks = nil // an empty vocabulary, which Load must reject
	}
	if opts&fuzzComplete != 0 {
		// Every byte has a token and every merge's result is a token, so that no text is lost.
		all := make([]string, 0, 256+len(toks)+len(mergeList))
		for b := range 256 {
			all = append(all, string(byteToRune[b]))
		}
		all = append(all, toks...)
		for _, m := range mergeList {
			if sp := strings.IndexByte(m[min(1, len(m)):], ' '); sp >= 0 {
				sp += min(1, len(m))
				all = append(all, m[:sp]+m[sp+1:])
			}
		}
		toks = all
	}
	kvs := []gguf.KV{
		{Key: "tokenizer.ggml.model", Value: gguf.NewValue("gpt2")},
		{Key: "tokenizer.ggml.pre", Value: gguf.NewValue(fuzzPreNames[int(pre)%len(fuzzPreNames)])},
		{Key: "tokenizer.ggml.tokens", Value: gguf.NewArray(toks)},
	}
	if opts&fuzzNoMerges == 0 {
		kvs = append(kvs, gguf.KV{Key: "tokenizer.ggml.merges", Value: gguf.NewArray(mergeList)})
	}
	if opts&fuzzTypes != 0 && opts&fuzzComplete == 0 {
		tt := make([]int32, len(toks))
		for i := range tt {
			if i < len(types) {
				tt[i] = int32(types[i] % 8) // 1-6 are the defined types; 0 and 7 are not
			} else {
				tt[i] = typeNormal
			}
		}
		if opts&fuzzShortTypes != 0 && len(tt) > 0 {
			tt = tt[:len(tt)-1]
		}
		kvs = append(kvs, gguf.KV{Key: "tokenizer.ggml.token_type", Value: gguf.NewArray(tt)})
	}
	if opts&fuzzScores != 0 {
		scores := make([]float32, len(toks))
		for i := range scores {
			scores[i] = -float32(i)
		}
		kvs = append(kvs, gguf.KV{Key: "tokenizer.ggml.scores", Value: gguf.NewArray(scores)})
	}
	if opts&fuzzBOS != 0 {
		kvs = append(kvs, gguf.KV{Key: "tokenizer.ggml.bos_token_id", Value: gguf.NewValue(uint32(opts >> 16 & 0xff))},
			gguf.KV{Key: "tokenizer.ggml.add_bos_token", Value: gguf.NewValue(true)})
	}
	if opts&fuzzEOS != 0 {
		kvs = append(kvs, gguf.KV{Key: "tokenizer.ggml.eos_token_id", Value: gguf.NewValue(uint32(opts >> 24))},
			gguf.KV{Key: "tokenizer.ggml.add_eos_token", Value: gguf.NewValue(true)})
	}
	if opts&fuzzFIM != 0 {
		kvs = append(kvs, gguf.KV{Key: "tokenizer.ggml.fim_pre_token_id", Value: gguf.NewValue(uint32(opts >> 16 & 0xff))})
	}
	if opts&fuzzPhi3 != 0 {
		kvs = append(kvs, gguf.KV{Key: "general.name", Value: gguf.NewValue("Phi-3 mini")})
	}
	if opts&fuzzSpacePrefix != 0 {
		kvs = append(kvs, gguf.KV{Key: "tokenizer.ggml.add_space_prefix", Value: gguf.NewValue(true)})
	}
	if opts&fuzzBadTypes != 0 {
		// A key of the wrong type: which one depends on the other bits.
		bad := []gguf.KV{
			{Key: "tokenizer.ggml.padding_token_id", Value: gguf.NewValue("0")},
			{Key: "tokenizer.ggml.unknown_token_id", Value: gguf.NewValue(int32(-1))},
			{Key: "tokenizer.ggml.add_bos_token", Value: gguf.NewValue(uint8(1))},
			{Key: "tokenizer.chat_template", Value: gguf.NewArray([]string{"x"})},
		}[opts>>12&3]
		if !slices.ContainsFunc(kvs, func(kv gguf.KV) bool { return kv.Key == bad.Key }) {
			kvs = append(kvs, bad)
		}
	}
	md, err := gguf.NewMetadata(kvs...)
	if err != nil {
		t.Fatalf("building metadata: %v", err)
	}
	return md, toks
}

// FuzzLoad builds vocabularies from fuzzed tokens, merges, token types, scores and special
// token ids and loads them. Load never panics; it either fails with an error that names
// what is wrong or gives a vocabulary whose tokens are the ones written (empty ones renamed),
// whose special ids lie inside it, and whose Encode yields only ids inside it. When every
// byte and every merge result has a token (fuzzComplete), decoding gives the text back.
func FuzzLoad(f *testing.F) {
	// Seeds: the heads of real vocabularies, and small hand-made ones.
	for _, name := range []string{"ggml-vocab-gpt-2.gguf", "ggml-vocab-qwen3.gguf", "ggml-vocab-deepseek-v3.gguf"} {
		file, err := gguf.Open(vocabDir + "/" + name)
		if err != nil {
			f.Fatal(err)
		}
		toks, err := file.Metadata.Strings("tokenizer.ggml.tokens")
		if err != nil {
			f.Fatal(err)
		}
		merges, err := file.Metadata.Strings("tokenizer.ggml.merges")
		if err != nil {
			f.Fatal(err)
		}
		types, _ := file.Metadata.Ints("tokenizer.ggml.token_type")
		pre, _ := file.Metadata.String("tokenizer.ggml.pre")
		file.Close()
		// The head of the vocabulary and its specials, which sit at the end. Seeds stay
		// small: the fuzzer minimizes every interesting input, running it once per byte.
		head := append(slices.Clone(toks[:48]), toks[len(toks)-8:]...)
		tb := make([]byte, 0, len(head))
		if len(types) == len(toks) {
			for _, ty := range append(slices.Clone(types[:48]), types[len(types)-8:]...) {
				tb = append(tb, byte(ty))
			}
		}
		preIdx := uint8(slices.Index(fuzzPreNames, pre))
		f.Add(strings.Join(head, "\n"), strings.Join(merges[:24], "\n"), tb, preIdx, uint32(fuzzTypes|fuzzScores|fuzzParseSpecial), "Hello world <|im_end|> 12345 日本語")
		f.Add(strings.Join(head[:24], "\n"), strings.Join(merges[:12], "\n"), tb, preIdx, uint32(fuzzComplete|fuzzBOS|fuzzEOS|5<<16|7<<24), "Hello, world!\n\tthe end")
	}
	f.Add("a\nb\nab\n<|im_start|>\n<|im_end|>\n\n<|fim_prefix|>", "a b\nab ab\n  \n", []byte{1, 1, 1, 3, 3, 6, 4}, uint8(0), uint32(fuzzTypes|fuzzParseSpecial|fuzzFIM|3<<16), "ab<|im_start|>abab<|im_end|>")
	f.Add("<unk>\n<s>\n</s>\n<|end|>\n<|call|>\n<|return|>", "", []byte{2, 3, 3, 3, 3, 3}, uint8(3), uint32(fuzzTypes|fuzzPhi3|fuzzParseSpecial), " <s> hi </s> <|end|>")
	f.Add("x", "x x", []byte{}, uint8(1), uint32(fuzzBadTypes|2<<12), "x")
	f.Add("", "", []byte{}, uint8(0), uint32(0), "")

	f.Fuzz(func(t *testing.T, tokens, merges string, types []byte, pre uint8, opts uint32, text string) {
		if len(text) > fuzzMaxText {
			text = text[:fuzzMaxText]
		}
		md, toks := fuzzVocabMetadata(t, tokens, merges, types, pre, opts)
		v, err := Load(md)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("Load failed with an empty error")
			}
			if len(toks) > 0 && opts&(fuzzBadTypes|fuzzShortTypes|fuzzNoMerges) == 0 && int(pre)%len(fuzzPreNames) != len(fuzzPreNames)-1 {
				t.Fatalf("a well-formed vocabulary was rejected: %v", err)
			}
			return
		}
		if v.Len() != len(toks) {
			t.Fatalf("%d tokens loaded of %d", v.Len(), len(toks))
		}
		for i, tok := range toks {
			if tok == "" {
				tok = "[EMPTY_" + strconv.Itoa(i) + "]"
			}
			if v.Text(int32(i)) != tok {
				t.Fatalf("token %d is %q, written as %q", i, v.Text(int32(i)), tok)
			}
			if id, ok := v.ID(tok); !ok || v.Text(id) != tok {
				t.Fatalf("ID(%q) = %d, %v", tok, id, ok)
			}
		}
		inRange := func(id int32) bool { return id >= 0 && int(id) < v.Len() }
		for name, id := range map[string]int32{"BOS": v.BOS, "EOS": v.EOS, "EOT": v.EOT, "EOM": v.EOM, "UNK": v.UNK, "PAD": v.PAD} {
			if id != None && !inRange(id) {
				t.Fatalf("%s is %d, outside the %d tokens", name, id, v.Len())
			}
		}
		for _, id := range v.EOG() {
			if !inRange(id) {
				t.Fatalf("end-of-generation token %d outside the %d tokens", id, v.Len())
			}
		}
		parseSpecial := opts&fuzzParseSpecial != 0
		ids := v.Encode(text, true, parseSpecial)
		for _, id := range ids {
			if !inRange(id) {
				t.Fatalf("Encode(%q) gave %d, outside the %d tokens", text, id, v.Len())
			}
		}
		_ = v.Decode(ids, true, true)
		_ = v.Decode(ids, false, false)
		d := v.NewStreamDecoder(true)
		for _, id := range ids {
			d.Add(id)
		}
		d.Flush()
		if opts&fuzzComplete != 0 && !v.cleanSpaces && !v.addSpacePrefix {
			ids := v.Encode(text, false, parseSpecial)
			want := sanitizeUTF8(text)
			if got := v.Decode(ids, false, true); got != want && !hasSpecialText(v, text) {
				t.Fatalf("%q → %v → %q", text, ids, got)
			}
		}
	})
}

// hasSpecialText reports whether text holds a special token's text that is not valid UTF-8
// or that strips whitespace: such tokens are cut out of the raw text, so decoding them does
// not give the sanitized text back.
func hasSpecialText(v *Vocab, text string) bool {
	for _, id := range v.special {
		if strings.Contains(text, v.tokens[id]) && (v.attrs[id]&(AttrLStrip|AttrRStrip) != 0 || sanitizeUTF8(v.tokens[id]) != v.tokens[id]) {
			return true
		}
	}
	return false
}
