package grammar

import (
	"testing"
	"time"
)

var fuzzParseSeeds = []string{
	JSON,
	ServerJSONObject,
	`root ::= "a"*`,
	"root ::= expr\nexpr ::= term ((\"+\"|\"-\") term)*\nterm ::= [0-9]+ | \"(\" expr \")\"",
	`root ::= ( [x]* )*`,
	`root ::= [^\x00-\x1F"\\]{2,5} . "\u00e9\U0001F600"`,
	"root ::= (((((([^x]*){0,99}){0,99}){0,99}){0,99}){0,99}){0,99}",
	"root ::= a\na ::= b\nb ::= \"x\" | a",
	`root ::= "a"{3,5000} # comment`,
	"root ::= (\n  \"a\" |\n  \"b\"\n)+ \"\\n\"",
	`root ::= <[12]> "x"`,
	"root ::= x\nx ::= \"a\" x \"b\" | \"a\" x \"c\" | \"d\"",
}

// FuzzParse: hostile grammar text never panics and stays within time; a
// grammar that parses can be matched against its own text.
func FuzzParse(f *testing.F) {
	for _, s := range fuzzParseSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		start := time.Now()
		g, err := Parse(text)
		if err != nil {
			if _, ok := err.(*ParseError); !ok {
				t.Fatalf("error %v is %T, want *ParseError", err, err)
			}
			return
		}
		m := g.NewMatcher()
		for i := 0; i < len(text) && i < 256; i++ {
			if !m.AcceptBytes([]byte{text[i]}) {
				break
			}
		}
		_ = m.CanEnd()
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("took %v", d)
		}
	})
}

var fuzzMatchGrammars = []string{
	JSON,
	ServerJSONObject,
	"root ::= expr\nexpr ::= term ((\"+\"|\"-\") term)*\nterm ::= [0-9]+ | \"(\" expr \")\"",
	`root ::= ... "abc" ...`,
	`root ::= [^é]* "é" [α-ω]? "😀"*`,
	`root ::= ( [x]* )*`,
	"root ::= x\nx ::= \"a\" x \"b\" | \"a\" x \"c\" | \"d\"",
	`root ::= ("0x" [A-F0-9]{2} " "?){3,5}`,
	`root ::= [\u0080-\uFFFF\U00010000-\U0010FFFF]+ | [^\u0800-\U0010FFFF]+`,
}

// FuzzMatch: for a grammar from a small set and random bytes, feeding the
// bytes whole, one at a time, or split in two gives the same answer; Allows
// agrees with AcceptBytes on a clone; AllowedTokens agrees with Allows.
func FuzzMatch(f *testing.F) {
	f.Add(uint8(0), []byte(`{"a": [1, "é😀"]}`), uint8(3))
	f.Add(uint8(1), []byte("1+(2-3)"), uint8(2))
	f.Add(uint8(2), []byte("🔵🟠✅abc❌🟠🔵"), uint8(5))
	f.Add(uint8(3), []byte("xèé"), uint8(2))
	f.Add(uint8(3), []byte("é\xce\xb1😀😀"), uint8(1))
	f.Add(uint8(5), []byte("aaaad"), uint8(1))
	f.Add(uint8(6), []byte("0xFF 0x12 0xAB"), uint8(4))
	f.Add(uint8(7), []byte("\xe2\x82\xac\xf0\x9f"), uint8(4))
	f.Fuzz(func(t *testing.T, which uint8, input []byte, split uint8) {
		if len(input) > 512 {
			return
		}
		g, err := Parse(fuzzMatchGrammars[int(which)%len(fuzzMatchGrammars)])
		if err != nil {
			t.Fatal(err)
		}
		base := g.NewMatcher()
		// Walk a prefix first so the checks start from varied positions.
		cut := int(split) % (len(input) + 1)
		if !base.AcceptBytes(input[:cut]) {
			return
		}
		rest := input[cut:]

		whole := base.Clone()
		wholeOK := whole.AcceptBytes(rest)

		bytewise := base.Clone()
		bytewiseOK := true
		for _, b := range rest {
			if !bytewise.AcceptBytes([]byte{b}) {
				bytewiseOK = false
				break
			}
		}
		if wholeOK != bytewiseOK {
			t.Fatalf("%q then %q: whole %v, byte by byte %v", input[:cut], rest, wholeOK, bytewiseOK)
		}
		if wholeOK && whole.CanEnd() != bytewise.CanEnd() {
			t.Fatalf("%q then %q: CanEnd whole %v, byte by byte %v", input[:cut], rest, whole.CanEnd(), bytewise.CanEnd())
		}
		half := len(rest) / 2
		halves := base.Clone()
		if halvesOK := halves.AcceptBytes(rest[:half]) && halves.AcceptBytes(rest[half:]); halvesOK != wholeOK {
			t.Fatalf("%q then %q: whole %v, in two halves %v", input[:cut], rest, wholeOK, halvesOK)
		}
		if len(rest) > 0 {
			probe := base.Clone()
			if allows := base.Allows(rest); allows != wholeOK {
				t.Fatalf("%q then %q: Allows %v, AcceptBytes %v", input[:cut], rest, allows, wholeOK)
			}
			if probe.Allows(rest) != wholeOK {
				t.Fatalf("%q then %q: Allows on a clone disagrees", input[:cut], rest)
			}
		}

		// Every prefix and suffix of rest as a token, plus a few fixed ones.
		var pieces [][]byte
		for i := 0; i <= len(rest) && i < 64; i++ {
			pieces = append(pieces, rest[:i], rest[i:])
		}
		pieces = append(pieces, []byte("{"), []byte(`"`), []byte("é"), []byte{0xC3}, []byte("abc"), []byte(" "))
		v := NewVocab(pieces)
		allowed := make([]bool, v.Len())
		base.AllowedTokens(v, allowed)
		for id, p := range pieces {
			if want := base.Allows(p); allowed[id] != want {
				t.Fatalf("after %q, token %q: AllowedTokens %v, Allows %v", input[:cut], p, allowed[id], want)
			}
		}
	})
}
