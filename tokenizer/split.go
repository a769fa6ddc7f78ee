package tokenizer

import "unicode/utf8"

// Hand-written splitters for the most used pre-tokenizers. Each does in one left-to-right
// pass what its regex (patQwen2, patLlama3, patQwen35, the three deepseek-v3 patterns) does
// with backtracking; the regexes stay as their test oracle (see split_test.go).

// runeAt decodes the rune at byte offset i of s; past the end it returns -1, which has no
// character class and is neither \r nor \n.
func runeAt(s string, i int) (rune, int) {
	if i >= len(s) {
		return -1, 0
	}
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

func classAt(s string, i int) charClass {
	r, _ := runeAt(s, i)
	if r < 0 {
		return 0
	}
	return classOf(r)
}

func isCRLF(r rune) bool { return r == '\r' || r == '\n' }

// contractionEnd returns the end of an English contraction ('s 't 're 've 'm 'll 'd, any
// ASCII case) starting at i, or -1.
func contractionEnd(s string, i int) int {
	if i+1 >= len(s) || s[i] != '\'' {
		return -1
	}
	switch s[i+1] | 0x20 {
	case 's', 't', 'm', 'd':
		return i + 2
	}
	if i+2 < len(s) {
		a, b := s[i+1]|0x20, s[i+2]|0x20
		if (a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l') {
			return i + 3
		}
	}
	return -1
}

// spaceRunEnd handles the three whitespace alternatives shared by the patterns, for a run
// of whitespace starting at i: \s*[\r\n]+ (up to the last line break of the run), then
// \s+(?!\S) (all but the last space when a non-space follows), then \s+. It returns -1 when
// s[i] is not whitespace.
func spaceRunEnd(s string, i int) int {
	end, lastBreak, count, lastStart := i, -1, 0, i
	for end < len(s) {
		r, n := runeAt(s, end)
		if classOf(r)&classSpace == 0 {
			break
		}
		if isCRLF(r) {
			lastBreak = end + n
		}
		lastStart = end
		end += n
		count++
	}
	switch {
	case count == 0:
		return -1
	case lastBreak >= 0:
		return lastBreak
	case count > 1 && end < len(s):
		return lastStart
	}
	return end
}

// wordSplitter is the Qwen2 / Llama 3 / Qwen3.5 family:
//
//	(?:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,maxDigits}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// with marks: letters runs also take \p{M} and the punctuation run excludes it (Qwen3.5).
type wordSplitter struct {
	marks     bool
	maxDigits int
}

func (w wordSplitter) split(s string, out []string) []string {
	word := classLetter
	if w.marks {
		word |= classMark
	}
	other := classSpace | classLetter | classNumber
	if w.marks {
		other |= classMark
	}
	for pos := 0; pos < len(s); {
		r, n := runeAt(s, pos)
		c := classOf(r)
		end := contractionEnd(s, pos)
		switch {
		case end >= 0:
		case !isCRLF(r) && c&classNumber == 0 && (c&word != 0 || classAt(s, pos+n)&word != 0):
			end = runEnd(s, pos+n, word, true)
		case c&classNumber != 0:
			end = pos
			for k := 0; k < w.maxDigits && classAt(s, end)&classNumber != 0; k++ {
				_, n2 := runeAt(s, end)
				end += n2
			}
		case r == ' ' && pos+n < len(s) && classAt(s, pos+n)&other == 0, c&other == 0:
			end = pos
			if r == ' ' {
				end++
			}
			end = runEnd(s, end, other, false)
			for end < len(s) && isCRLF(rune(s[end])) {
				end++
			}
		default:
			end = spaceRunEnd(s, pos)
			if end < 0 {
				end = pos + n
			}
		}
		out = append(out, s[pos:end])
		pos = end
	}
	return out
}

// runEnd returns the end of the run starting at i of runes whose classes intersect mask
// (with in) or do not (without in).
func runEnd(s string, i int, mask charClass, in bool) int {
	for i < len(s) {
		r, n := runeAt(s, i)
		if (classOf(r)&mask != 0) != in {
			break
		}
		i += n
	}
	return i
}

// deepseekV3Splitter runs the three deepseek-v3 stages: \p{N}{1,3}, then runs of CJK
// ideographs and kana [一-龥぀-ゟ゠-ヿ]+, then on every resulting piece
//
//	[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
type deepseekV3Splitter struct{}

func isDSV3CJK(r rune) bool {
	return (r >= 0x4E00 && r <= 0x9FA5) || (r >= 0x3040 && r <= 0x309F) || (r >= 0x30A0 && r <= 0x30FF)
}

func (deepseekV3Splitter) split(s string, out []string) []string {
	// Stage 1: groups of up to three digits, and the text between them.
	for pos := 0; pos < len(s); {
		if classAt(s, pos)&classNumber != 0 {
			end := pos
			for k := 0; k < 3 && classAt(s, end)&classNumber != 0; k++ {
				_, n := runeAt(s, end)
				end += n
			}
			out = dsv3Word(s[pos:end], out)
			pos = end
			continue
		}
		end := runEnd(s, pos, classNumber, false)
		// Stage 2: CJK runs and the text between them.
		gap := s[pos:end]
		for i := 0; i < len(gap); {
			r, _ := runeAt(gap, i)
			cjk := isDSV3CJK(r)
			j := i
			for j < len(gap) {
				r2, n2 := runeAt(gap, j)
				if isDSV3CJK(r2) != cjk {
					break
				}
				j += n2
			}
			out = dsv3Word(gap[i:j], out)
			i = j
		}
		pos = end
	}
	return out
}

func isASCIIPunct(r rune) bool {
	return r < utf8.RuneSelf && r > ' ' && r < 0x7F && !isASCIILetter(r) && !(r >= '0' && r <= '9')
}

func isASCIILetter(r rune) bool { return (r|0x20) >= 'a' && (r|0x20) <= 'z' }

// dsv3Word is the third deepseek-v3 stage on one piece. Text no alternative matches stays
// together as one piece, as regex gaps do.
func dsv3Word(s string, out []string) []string {
	const letterMark = classLetter | classMark
	const punctSym = classPunct | classSymbol
	gap := 0
	for pos := 0; pos < len(s); {
		r, n := runeAt(s, pos)
		c := classOf(r)
		next, nn := runeAt(s, pos+n)
		nc := charClass(0)
		if next >= 0 {
			nc = classOf(next)
		}
		end := -1
		switch {
		case isASCIIPunct(r) && next >= 0 && isASCIILetter(next):
			end = pos + n + nn
			for end < len(s) && isASCIILetter(rune(s[end])) {
				end++
			}
		case !isCRLF(r) && c&(classLetter|punctSym) == 0 && nc&letterMark != 0:
			end = runEnd(s, pos+n+nn, letterMark, true)
		case c&letterMark != 0:
			end = runEnd(s, pos+n, letterMark, true)
		case r == ' ' && nc&punctSym != 0, c&punctSym != 0:
			end = runEnd(s, pos+n, punctSym, true)
			for end < len(s) && isCRLF(rune(s[end])) {
				end++
			}
		default:
			end = spaceRunEnd(s, pos)
		}
		if end < 0 {
			pos += n
			continue
		}
		if gap < pos {
			out = append(out, s[gap:pos])
		}
		out = append(out, s[pos:end])
		pos, gap = end, end
	}
	if gap < len(s) {
		out = append(out, s[gap:])
	}
	return out
}

// kimiK2Splitter is llama.cpp's hand-written splitter for Kimi-K2 (tokenizer.ggml.pre
// "kimi-k2"), which llama.cpp runs instead of the model's own regex (tokenization_kimi.py):
//
//	[\p{Han}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|…|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// It is followed as llama.cpp runs it, which is what the model's GGUF files get there: runs
// of Han characters; a word of letters other than Han (marks are not letters to it), with
// one leading character that is no letter, digit or line break, and an English contraction;
// digits in groups of three; punctuation and symbols with an optional space before and line
// breaks after; then the whitespace rules the other splitters share.
type kimiK2Splitter struct{}

// isHan is llama.cpp's unicode_cpt_is_han: the CJK unified and compatibility ideographs.
func isHan(r rune) bool {
	switch {
	case r >= 0x4E00 && r <= 0x9FFF, r >= 0x3400 && r <= 0x4DBF, r >= 0xF900 && r <= 0xFAFF:
		return true
	case r >= 0x20000 && r <= 0x2A6DF, r >= 0x2A700 && r <= 0x2EBEF, r >= 0x2F800 && r <= 0x2FA1F:
		return true // extensions B to F, and the compatibility supplement
	}
	return false
}

func (kimiK2Splitter) split(s string, out []string) []string {
	word := func(i int) bool { // a letter other than Han at byte i
		r, _ := runeAt(s, i)
		return r >= 0 && classOf(r)&classLetter != 0 && !isHan(r)
	}
	runOf := func(i int, in func(int) bool) int {
		for in(i) {
			_, n := runeAt(s, i)
			i += n
		}
		return i
	}
	for pos := 0; pos < len(s); {
		r, n := runeAt(s, pos)
		c := classOf(r)
		end := -1
		switch {
		case isHan(r):
			end = runOf(pos, func(i int) bool { r, _ := runeAt(s, i); return r >= 0 && isHan(r) })
		case word(pos), !isCRLF(r) && c&(classLetter|classNumber) == 0 && word(pos+n):
			end = pos
			if !word(pos) {
				end += n // the leading character
			}
			end = runOf(end, word)
			if ce := contractionEnd(s, end); ce >= 0 {
				end = ce
			}
		case c&classNumber != 0:
			end = pos
			for k := 0; k < 3 && classAt(s, end)&classNumber != 0; k++ {
				_, n2 := runeAt(s, end)
				end += n2
			}
		case r == ' ' && pos+n < len(s) && classAt(s, pos+n)&(classSpace|classLetter|classNumber) == 0,
			c&(classSpace|classLetter|classNumber) == 0:
			end = pos
			if r == ' ' {
				end++
			}
			end = runOf(end, func(i int) bool { return i < len(s) && classAt(s, i)&(classSpace|classLetter|classNumber) == 0 })
			for end < len(s) && isCRLF(rune(s[end])) {
				end++
			}
		default:
			if end = spaceRunEnd(s, pos); end < 0 {
				end = pos + n
			}
		}
		out = append(out, s[pos:end])
		pos = end
	}
	return out
}
