package grammar

import "testing"

// benchPositions are points in a JSON response at which a sampler masks the
// vocabulary: the start, before a key, inside a key, before a value, inside
// a number, inside a string value (most tokens allowed), and nested.
var benchPositions = []struct{ name, prefix string }{
	{"start", ``},
	{"object", `{`},
	{"key", `{"na`},
	{"value", `{"name": `},
	{"number", `{"name": 12`},
	{"string", `{"name": "Ada Lovel`},
	{"nested", `{"a": [{"b": [1, {"c": "x", "d": `},
}

// vocabPieces is a vocabulary-sized list: 150,000 synthetic token texts of
// 1–10 bytes, mixed ASCII and UTF-8.
func vocabPieces() [][]byte { return syntheticPieces(150000, 1) }

// BenchmarkAllowedTokens measures one full-vocabulary mask at each position:
// warm, with the transition cache filled, as during generation once a position
// has been seen; cold, from a fresh cache each time (a clone), the cost at a
// position whose states were never seen.
func BenchmarkAllowedTokens(b *testing.B) {
	v := NewVocab(vocabPieces())
	g := mustParse(b, JSON)
	allowed := make([]bool, v.Len())
	for _, cache := range []string{"warm", "cold"} {
		for _, p := range benchPositions {
			b.Run(cache+"/"+p.name, func(b *testing.B) {
				m := g.NewMatcher()
				if !m.AcceptBytes([]byte(p.prefix)) {
					b.Fatalf("JSON refused %q", p.prefix)
				}
				m.AllowedTokens(v, allowed)
				b.ResetTimer()
				for b.Loop() {
					if cache == "cold" {
						m.Clone().AllowedTokens(v, allowed)
					} else {
						m.AllowedTokens(v, allowed)
					}
				}
			})
		}
	}
}

// BenchmarkAllowsLoop is the naive mask, Allows on every piece, for
// comparison with the trie walk.
func BenchmarkAllowsLoop(b *testing.B) {
	pieces := vocabPieces()
	g := mustParse(b, JSON)
	m := g.NewMatcher()
	m.AcceptBytes([]byte(`{"name": "Ada Lovel`))
	for b.Loop() {
		for _, p := range pieces {
			m.Allows(p)
		}
	}
}

func BenchmarkNewVocab(b *testing.B) {
	pieces := vocabPieces()
	for b.Loop() {
		NewVocab(pieces)
	}
}

func BenchmarkParseJSON(b *testing.B) {
	for b.Loop() {
		if _, err := Parse(JSON); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAcceptJSON follows a 1 KiB JSON response in 4-byte pieces from a
// fresh matcher: the per-token cost of advancing, cold cache included.
func BenchmarkAcceptJSON(b *testing.B) {
	g := mustParse(b, JSON)
	var text []byte
	text = append(text, `{"items": [`...)
	for i := 0; len(text) < 1000; i++ {
		if i > 0 {
			text = append(text, ", "...)
		}
		text = append(text, `{"id": 12345, "name": "caf\u00e9 ünïcode", "ok": true}`...)
	}
	text = append(text, "]}"...)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		m := g.NewMatcher()
		for i := 0; i < len(text); i += 4 {
			if !m.AcceptBytes(text[i:min(i+4, len(text))]) {
				b.Fatalf("refused at byte %d", i)
			}
		}
		if !m.CanEnd() {
			b.Fatal("incomplete")
		}
	}
}
