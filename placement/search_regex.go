package placement

import (
	"fmt"
	"strconv"
	"strings"
)

// blocksPattern is an -ot pattern matching the routed-expert tensors of exactly the given
// blocks (sorted, distinct): blk\.(3|[4-9]|1[0-2])\.ffn_(up|down|gate|gate_up)_(ch|)exps.
// It uses only alternation and character classes: llama.cpp splits -ot values on every
// comma, so a {m,n} quantifier would break the flag.
func blocksPattern(blocks []int) string {
	var alts []string
	for i := 0; i < len(blocks); {
		j := i
		for j+1 < len(blocks) && blocks[j+1] == blocks[j]+1 {
			j++
		}
		alts = append(alts, rangeRegex(blocks[i], blocks[j])...)
		i = j + 1
	}
	return fmt.Sprintf(`blk\.(%s)%s`, strings.Join(alts, "|"), expsRegex)
}

// rangeRegex lists regex alternatives that together match the decimal numbers lo..hi
// (0 ≤ lo ≤ hi, written without leading zeros) and nothing else.
func rangeRegex(lo, hi int) []string {
	a, b := strconv.Itoa(lo), strconv.Itoa(hi)
	if len(a) < len(b) { // split where the number of digits changes
		top := strings.Repeat("9", len(a))
		next, _ := strconv.Atoi(top)
		return append(sameLengthRange(a, top), rangeRegex(next+1, hi)...)
	}
	return sameLengthRange(a, b)
}

// sameLengthRange matches the numbers a..b of equal length, digit by digit.
func sameLengthRange(a, b string) []string {
	switch {
	case a == b:
		return []string{a}
	case len(a) == 1:
		return []string{digitClass(a[0], b[0])}
	case a[0] == b[0]:
		var out []string
		for _, rest := range sameLengthRange(a[1:], b[1:]) {
			out = append(out, a[:1]+rest)
		}
		return out
	}
	n := len(a) - 1
	zeros, nines := strings.Repeat("0", n), strings.Repeat("9", n)
	anyDigits := strings.Repeat("[0-9]", n)
	var out []string
	first, last := a[0], b[0]
	if a[1:] != zeros { // the partial first decade
		for _, rest := range sameLengthRange(a[1:], nines) {
			out = append(out, a[:1]+rest)
		}
		first++
	}
	tail := []string(nil)
	if b[1:] != nines { // the partial last decade
		for _, rest := range sameLengthRange(zeros, b[1:]) {
			tail = append(tail, b[:1]+rest)
		}
		last--
	}
	if first <= last {
		out = append(out, digitClass(first, last)+anyDigits)
	}
	return append(out, tail...)
}

func digitClass(lo, hi byte) string {
	if lo == hi {
		return string(lo)
	}
	return "[" + string(lo) + "-" + string(hi) + "]"
}
