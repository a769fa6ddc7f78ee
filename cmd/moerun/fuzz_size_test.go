package main

import (
	"math/big"
	"strconv"
	"strings"
	"testing"
)

// sizeUnits are parseSize's units and their sizes in bytes, as its help text states them.
var sizeUnits = map[string]int64{
	"B": 1, "K": 1 << 10, "KiB": 1 << 10, "M": 1 << 20, "MiB": 1 << 20, "G": 1 << 30, "GiB": 1 << 30,
	"T": 1 << 40, "TiB": 1 << 40, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
}

// FuzzParseSize: parseSize reads --gpu, --gpus, --ram and --device-mem sizes. It never
// panics; an error names the flag and quotes the text; a size is at least one byte and never
// above 4 EiB, and it is the text's number times its unit (to float64 precision, rounded
// down), as read exactly from the text. A text that is a decimal number and a known unit
// whose product lies in range is accepted.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"8GiB", "24GiB", "64GiB", "512GiB", "8G", "8192MiB", "1.5TB", " 16 GiB ", "0.5B",
		"24", "8X", "GiB", ".", "1.2.3G", "0G", "-1G", "4096TiB", "8e3MiB", "1e400B", "0x10G", "\u00a08G\u2003"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := parseSize("--gpu", s)
		want, ok := exactSize(s)
		if err != nil {
			if msg := err.Error(); !strings.Contains(msg, "--gpu "+strconv.Quote(s)) {
				t.Fatalf("error %q does not name the flag and quote %q", msg, s)
			}
			if ok && want.Cmp(big.NewRat(1<<62, 1)) < 0 && want.Cmp(big.NewRat(1, 1)) >= 0 {
				t.Fatalf("%q (%s bytes) rejected: %v", s, want.FloatString(3), err)
			}
			return
		}
		if n < 1 || n > 1<<62 {
			t.Fatalf("%q: %d bytes", s, n)
		}
		if !ok {
			t.Fatalf("%q accepted as %d bytes but is not a number and a unit", s, n)
		}
		// float64 keeps 53 bits: allow its rounding, then the truncation to whole bytes.
		diff := new(big.Rat).Sub(want, new(big.Rat).SetInt64(n))
		slack := new(big.Rat).Add(big.NewRat(1, 1), new(big.Rat).Mul(want, big.NewRat(1, 1<<50)))
		if diff.Abs(diff).Cmp(slack) > 0 {
			t.Fatalf("%q: %d bytes, want %s", s, n, want.FloatString(3))
		}
		// What was accepted reads back the same when written in bytes.
		if back, err := parseSize("--gpu", strconv.FormatInt(n, 10)+"B"); n > 0 && n < 1<<53 && (err != nil || back != n) {
			t.Fatalf("%q: %d bytes, but %dB reads as %d, %v", s, n, n, back, err)
		}
	})
}

// exactSize reads a size as the help text describes it: a decimal number (digits with at
// most one point), optional space, a unit; spaces around. It returns the exact product.
func exactSize(s string) (*big.Rat, bool) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.TrimSpace(t[i:])
	mul, ok := sizeUnits[unit]
	if !ok || strings.Count(num, ".") > 1 || strings.Trim(num, ".") == "" {
		return nil, false
	}
	if strings.HasSuffix(num, ".") {
		num += "0" // "5." is a number too
	}
	r, ok := new(big.Rat).SetString("0" + num) // and ".5"
	if !ok {
		return nil, false
	}
	return r.Mul(r, new(big.Rat).SetInt64(mul)), true
}
