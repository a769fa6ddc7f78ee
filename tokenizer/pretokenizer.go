package tokenizer

import (
	"fmt"
	"sync"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// A splitter cuts a piece of text into consecutive sub-pieces that cover it exactly,
// appending them to out. Pieces are substrings of s (no copies).
type splitter interface {
	split(s string, out []string) []string
}

// preTokenizer is the pipeline llama.cpp runs before BPE for one tokenizer.ggml.pre value:
// each stage re-splits every piece the previous stage produced.
type preTokenizer struct {
	stages []splitter
}

func (p *preTokenizer) split(text string, out []string) []string {
	if len(p.stages) == 1 {
		return p.stages[0].split(text, out)
	}
	pieces := []string{text}
	var next []string
	for _, st := range p.stages {
		next = next[:0]
		for _, piece := range pieces {
			next = st.split(piece, next)
		}
		pieces, next = next, pieces
	}
	return append(out, pieces...)
}

// regexSplitter splits like llama.cpp's unicode_regex_split_stl: every match is a piece and
// so is every gap between matches ("Isolated" in Hugging Face terms).
type regexSplitter struct {
	re *regexp2.Regexp
}

func (r regexSplitter) split(s string, out []string) []string {
	if s == "" {
		return out
	}
	runes := []rune(s)
	// offs[i] is the byte offset of rune i; regexp2 reports positions in runes.
	offs := make([]int, len(runes)+1)
	b := 0
	for i, c := range runes {
		offs[i] = b
		b += utf8.RuneLen(c)
	}
	offs[len(runes)] = b
	prev := 0
	// Without MatchTimeout regexp2 never returns an error; a nil match ends the loop.
	m, _ := r.re.FindRunesMatch(runes)
	for m != nil {
		if m.Index > prev {
			out = append(out, s[offs[prev]:offs[m.Index]])
		}
		end := m.Index + m.Length
		out = append(out, s[offs[m.Index]:offs[end]])
		prev = end
		m, _ = r.re.FindNextMatch(m)
	}
	if prev < len(runes) {
		out = append(out, s[offs[prev]:])
	}
	return out
}

// Pre-tokenizer regexes as llama.cpp writes them (src/llama-vocab.cpp,
// llm_tokenizer_bpe), compiled with regexp2's default options: the RE2 option would make \s
// ASCII-only. The only change: llama.cpp's "\s+$" is written "\s+\z", because .NET's $ also
// matches before a final newline while std::regex's does not.
const (
	patGPT2    = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)`
	patLlama3  = `(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patQwen2   = `(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patQwen35  = `(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patGPT4o   = `[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patDSV3Num = `\p{N}{1,3}`
	patDSV3CJK = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
	// CJK ideographs, U+0800 to U+4E00 (Samaritan to CJK Extension A, as DeepSeek wrote
	// it) and Hangul.
	patCJKHangul = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
	patDSV3Word  = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
)

// preTypes lists the supported tokenizer.ggml.pre values. Each entry is llama.cpp's
// pre-tokenizer for that name together with the vocabulary flags the name implies.
type preType struct {
	patterns     []string
	fast         splitter // hand-written equivalent of patterns (nil: run the regexes)
	ignoreMerges bool     // a word that is itself a token is not merged (llama 3)
	addBOS       bool     // default for add_bos when the file does not say
	cleanSpaces  bool     // detokenizer removes the space before punctuation (GPT-2 era)
	noBOS        bool     // the name disables the bos token (GLM-4)
}

var (
	gpt2Type = preType{patterns: []string{patGPT2}, cleanSpaces: true}
	qwen2    = preType{patterns: []string{patQwen2}, fast: wordSplitter{maxDigits: 1}}
	llama3   = preType{patterns: []string{patLlama3}, fast: wordSplitter{maxDigits: 3}, cleanSpaces: true}
	gpt4o    = preType{patterns: []string{patGPT4o}}
	dsV3     = preType{patterns: []string{patDSV3Num, patDSV3CJK, patDSV3Word}, fast: deepseekV3Splitter{}}
)

var preTypes = map[string]preType{
	"default": {patterns: []string{`[\p{P}\$\+<=>\^~\|]+`, patGPT2, `\p{N}+`, `[0-9][0-9][0-9]`}, cleanSpaces: true},
	"gpt-2":   gpt2Type,
	"phi-2":   gpt2Type,
	"mpt":     gpt2Type,
	"olmo":    gpt2Type,
	"jais":    gpt2Type,

	"llama3":      withFlags(llama3, true, true),
	"llama-v3":    withFlags(llama3, true, true),
	"llama-bpe":   withFlags(llama3, true, true),
	"falcon3":     withFlags(llama3, true, true),
	"pixtral":     withFlags(llama3, true, true),
	"dbrx":        llama3,
	"smaug-bpe":   llama3,
	"glm4":        noBOS(llama3),
	"chatglm-bpe": noBOS(llama3),

	"qwen2":            qwen2,
	"deepseek-r1-qwen": qwen2,
	"hunyuan":          qwen2,
	"stablelm2":        withClean(qwen2),
	"megrez":           withClean(qwen2),
	"qwen35":           {patterns: []string{patQwen35}, fast: wordSplitter{marks: true, maxDigits: 1}},

	// Literal ranges are written as escapes: an editor's Unicode normalisation would
	// silently change characters such as U+1F7D.
	"deepseek-llm": {patterns: []string{
		`[\r\n]`,
		"\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943]+",
		"\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+",
		`\s+\z`,
		patCJKHangul,
		`\p{N}+`,
	}},
	"deepseek-coder": {patterns: []string{`[\r\n]`, `\s?\p{L}+`, `\s?\p{P}+`, patCJKHangul, `\p{N}`}},
	"deepseek-v3":    dsV3,
	"hunyuan-dense":  dsV3,
	"joyai-llm":      dsV3,

	// Kimi-K2: llama.cpp runs a hand-written splitter, not the model's regex (which uses
	// class intersections), so the splitter is its only form here too.
	"kimi-k2": {fast: kimiK2Splitter{}},

	"gpt-4o":     gpt4o,
	"llama4":     gpt4o,
	"minimax-m2": gpt4o,
}

func withFlags(p preType, ignoreMerges, addBOS bool) preType {
	p.ignoreMerges, p.addBOS = ignoreMerges, addBOS
	return p
}

func withClean(p preType) preType {
	p.cleanSpaces = true
	return p
}

func noBOS(p preType) preType {
	p.noBOS = true
	return p
}

// newPreTokenizer builds the pipeline for a tokenizer.ggml.pre value. With useRegex the
// regexes run even where a hand-written splitter exists (the splitters' test oracle), but
// for a splitter that has no regex form.
func newPreTokenizer(name string, useRegex bool) (*preTokenizer, preType, error) {
	pt, ok := preTypes[name]
	if !ok {
		return nil, preType{}, fmt.Errorf("pre-tokenizer %q (tokenizer.ggml.pre) is not supported", name)
	}
	if pt.fast != nil && (!useRegex || len(pt.patterns) == 0) {
		return &preTokenizer{stages: []splitter{pt.fast}}, pt, nil
	}
	p := &preTokenizer{}
	for _, pat := range pt.patterns {
		re, err := compiledPattern(pat)
		if err != nil {
			return nil, preType{}, err
		}
		p.stages = append(p.stages, regexSplitter{re})
	}
	return p, pt, nil
}

var (
	compiledMu sync.Mutex
	compiled   = map[string]*regexp2.Regexp{}
)

// compiledPattern compiles each pattern once per process: the expressions are constants
// and regexp2 programs are safe for concurrent use.
func compiledPattern(pat string) (*regexp2.Regexp, error) {
	compiledMu.Lock()
	defer compiledMu.Unlock()
	if re, ok := compiled[pat]; ok {
		return re, nil
	}
	re, err := regexp2.Compile(pat, regexp2.None)
	if err != nil {
		return nil, fmt.Errorf("pre-tokenizer regex %q: %w", pat, err)
	}
	compiled[pat] = re
	return re, nil
}
