package jsonschema

import (
	"math"
	"strconv"
	"strings"
)

// unbounded is the "no upper bound" count for repetitions. It is the largest
// C int because llama.cpp uses that value as its sentinel, so an explicit
// maxItems of 2147483647 means "no maximum" there and here alike.
const unbounded = math.MaxInt32

// repetition renders item repeated between minCount and maxCount times
// (maxCount == unbounded: no upper bound). With a separator the items are
// joined by it, so "a, b, c" becomes item ("," item){n-1,m-1}. The shapes
// (?, *, +, {n,m}) are chosen to give llama.cpp's exact text.
func repetition(item string, minCount, maxCount int, separator string) string {
	hasMax := maxCount != unbounded
	if maxCount == 0 {
		return ""
	}
	if minCount == 0 && maxCount == 1 {
		return item + "?"
	}
	if separator == "" {
		switch {
		case minCount == 1 && !hasMax:
			return item + "+"
		case minCount == 0 && !hasMax:
			return item + "*"
		}
		upper := ""
		if hasMax {
			upper = strconv.Itoa(maxCount)
		}
		return item + "{" + strconv.Itoa(minCount) + "," + upper + "}"
	}
	restMin := 0
	if minCount > 0 {
		restMin = minCount - 1
	}
	restMax := maxCount
	if hasMax {
		restMax = maxCount - 1
	}
	result := item + " " + repetition("("+separator+" "+item+")", restMin, restMax, "")
	if minCount == 0 {
		result = "(" + result + ")?"
	}
	return result
}

// Integer ranges. A bound of math.MinInt64 / math.MaxInt64 means "absent",
// as in llama.cpp; callers keep real bounds strictly inside that interval.

// writeIntRange writes grammar alternatives matching exactly the decimal
// integers in [lo, hi] (without leading zeros), digit position by digit
// position. digitsLeft caps the digits an open-ended range may still use
// (16 in total, as for plain integers); topLevel is false inside a number
// whose leading digit is already written, where zeros may lead.
func writeIntRange(out *strings.Builder, lo, hi int64, digitsLeft int, topLevel bool) {
	hasLo := lo != math.MinInt64
	hasHi := hi != math.MaxInt64

	digitClass := func(from, to byte) {
		out.WriteByte('[')
		out.WriteByte(from)
		if from != to {
			out.WriteByte('-')
			out.WriteByte(to)
		}
		out.WriteByte(']')
	}
	anyDigits := func(minDigits, maxDigits int) {
		out.WriteString("[0-9]")
		if minDigits == maxDigits && minDigits == 1 {
			return
		}
		out.WriteByte('{')
		out.WriteString(strconv.Itoa(minDigits))
		if maxDigits != minDigits {
			out.WriteByte(',')
			if maxDigits != unbounded {
				out.WriteString(strconv.Itoa(maxDigits))
			}
		}
		out.WriteByte('}')
	}
	// sameLength matches the numbers from..to, both written with the same
	// number of digits: the shared prefix literally, then a split on the
	// first differing digit.
	var sameLength func(from, to string)
	sameLength = func(from, to string) {
		i := 0
		for i < len(from) && i < len(to) && from[i] == to[i] {
			i++
		}
		if i > 0 {
			out.WriteString(`"` + from[:i] + `"`)
		}
		if i >= len(from) || i >= len(to) {
			return
		}
		if i > 0 {
			out.WriteByte(' ')
		}
		tail := len(from) - i - 1
		if tail == 0 {
			out.WriteString("[" + from[i:i+1] + "-" + to[i:i+1] + "]")
			return
		}
		fromTail, toTail := from[i+1:], to[i+1:]
		zeros, nines := strings.Repeat("0", tail), strings.Repeat("9", tail)
		toDone := false
		out.WriteByte('(')
		if fromTail == zeros {
			digitClass(from[i], to[i]-1)
			out.WriteByte(' ')
			anyDigits(tail, tail)
		} else {
			out.WriteString("[" + from[i:i+1] + "] (")
			sameLength(fromTail, nines)
			out.WriteByte(')')
			if from[i] < to[i]-1 {
				out.WriteString(" | ")
				if toTail == nines {
					digitClass(from[i]+1, to[i])
					toDone = true
				} else {
					digitClass(from[i]+1, to[i]-1)
				}
				out.WriteByte(' ')
				anyDigits(tail, tail)
			}
		}
		if !toDone {
			out.WriteString(" | ")
			digitClass(to[i], to[i])
			out.WriteByte(' ')
			sameLength(zeros, toTail)
		}
		out.WriteByte(')')
	}

	if hasLo && hasHi {
		if lo < 0 && hi < 0 {
			out.WriteString(`"-" (`)
			writeIntRange(out, -hi, -lo, digitsLeft, true)
			out.WriteByte(')')
			return
		}
		if lo < 0 {
			out.WriteString(`"-" (`)
			writeIntRange(out, 0, -lo, digitsLeft, true)
			out.WriteString(") | ")
			lo = 0
		}
		loText, hiText := strconv.FormatInt(lo, 10), strconv.FormatInt(hi, 10)
		for digits := len(loText); digits < len(hiText); digits++ {
			sameLength(loText, strings.Repeat("9", digits))
			loText = "1" + strings.Repeat("0", digits)
			out.WriteString(" | ")
		}
		sameLength(loText, hiText)
		return
	}

	fewer := max(digitsLeft-1, 1)
	if hasLo {
		switch {
		case lo < 0:
			out.WriteString(`"-" (`)
			writeIntRange(out, math.MinInt64, -lo, digitsLeft, false)
			out.WriteString(") | [0] | [1-9] ")
			anyDigits(0, digitsLeft-1)
		case lo == 0:
			if topLevel {
				out.WriteString("[0] | [1-9] ")
				anyDigits(0, fewer)
			} else {
				anyDigits(1, digitsLeft)
			}
		case lo <= 9:
			c := byte('0' + lo)
			start := byte('0')
			if topLevel {
				start = '1'
			}
			if c > start {
				digitClass(start, c-1)
				out.WriteByte(' ')
				anyDigits(1, fewer)
				out.WriteString(" | ")
			}
			digitClass(c, '9')
			out.WriteByte(' ')
			anyDigits(0, fewer)
		default:
			loText := strconv.FormatInt(lo, 10)
			length := len(loText)
			c := loText[0]
			if c > '1' {
				start := byte('0')
				if topLevel {
					start = '1'
				}
				digitClass(start, c-1)
				out.WriteByte(' ')
				anyDigits(length, fewer)
				out.WriteString(" | ")
			}
			digitClass(c, c)
			out.WriteString(" (")
			rest, _ := strconv.ParseInt(loText[1:], 10, 64)
			writeIntRange(out, rest, math.MaxInt64, fewer, false)
			out.WriteByte(')')
			if c < '9' {
				out.WriteString(" | ")
				digitClass(c+1, '9')
				out.WriteByte(' ')
				anyDigits(length-1, fewer)
			}
		}
		return
	}

	// Only an upper bound (the caller guarantees at least one bound).
	if hi >= 0 {
		if topLevel {
			out.WriteString(`"-" [1-9] `)
			anyDigits(0, fewer)
			out.WriteString(" | ")
		}
		writeIntRange(out, 0, hi, digitsLeft, true)
	} else {
		out.WriteString(`"-" (`)
		writeIntRange(out, -hi, math.MaxInt64, digitsLeft, false)
		out.WriteByte(')')
	}
}
