package grammar

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

// accepts reports whether g matches s completely.
func accepts(g *Grammar, s string) bool {
	m := g.NewMatcher()
	return m.AcceptBytes([]byte(s)) && m.CanEnd()
}

// acceptsByteByByte feeds s one byte per call.
func acceptsByteByByte(g *Grammar, s string) bool {
	m := g.NewMatcher()
	for i := 0; i < len(s); i++ {
		if !m.AcceptBytes([]byte{s[i]}) {
			return false
		}
	}
	return m.CanEnd()
}

func mustParse(t testing.TB, text string) *Grammar {
	t.Helper()
	g, err := Parse(text)
	if err != nil {
		t.Fatalf("Parse(%q): %v", text, err)
	}
	return g
}

// TestLlamaIntegration runs llama.cpp's grammar integration cases: each
// passing string is matched completely, each failing one is not, whether fed
// whole or a byte at a time.
func TestLlamaIntegration(t *testing.T) {
	var data struct {
		Cases []struct {
			Name, Grammar string
			Pass, Fail    []string
		}
	}
	loadJSON(t, "testdata/llama-integration.json", &data)
	if len(data.Cases) < 12 {
		t.Fatalf("only %d cases loaded", len(data.Cases))
	}
	for _, c := range data.Cases {
		t.Run(c.Name, func(t *testing.T) {
			g := mustParse(t, c.Grammar)
			for _, s := range c.Pass {
				if !accepts(g, s) || !acceptsByteByByte(g, s) {
					t.Errorf("refuses %q", s)
				}
			}
			for _, s := range c.Fail {
				if accepts(g, s) || acceptsByteByByte(g, s) {
					t.Errorf("accepts %q", s)
				}
			}
		})
	}
}

// TestLlamaIntegrationFailures: llama.cpp's cases that must not build.
func TestLlamaIntegrationFailures(t *testing.T) {
	for _, text := range []string{
		"\n        rot ::= expr\n        expr ::= term (\"+\" term)*\n        term ::= number\n        number ::= [0-9]+",
		"root ::= expr\n        expr ::= term (\"+\" term)*\n        term ::= numero\n        number ::= [0-9]+",
		`root ::= "a" | root "a"`,
		"\n        root ::= asdf\n        asdf ::= \"a\" | asdf \"a\"\n        ",
		"\n        root ::= asdf\n        asdf ::= \"a\" | foo \"b\"\n        foo ::= \"c\" | asdf \"d\" | \"e\"",
		"\n        root ::= asdf\n        asdf ::= \"a\" | foo \"b\"\n        foo ::= \"c\" | empty asdf \"d\" | \"e\"\n        empty ::= \"blah\" | ",
		"\n        foobar ::= \"foobar\"\n    ",
	} {
		if _, err := Parse(text); err == nil {
			t.Errorf("Parse(%q) succeeded", text)
		}
	}
}

func TestHandComputed(t *testing.T) {
	g := mustParse(t, `root ::= "ab" | "a" [0-9]* "c"`)
	m := g.NewMatcher()
	if m.CanEnd() {
		t.Fatal("CanEnd before any input")
	}
	if !m.AcceptBytes([]byte("a")) || m.CanEnd() {
		t.Fatal("after a: want accepted, not complete")
	}
	// Both alternatives are alive: b ends the first, digits or c the second.
	for _, s := range []string{"b", "1", "c", "12c"} {
		if !m.Allows([]byte(s)) {
			t.Errorf("after a, Allows(%q) = false", s)
		}
	}
	for _, s := range []string{"x", "bb", "1b", "", "c1"} {
		if m.Allows([]byte(s)) {
			t.Errorf("after a, Allows(%q) = true", s)
		}
	}
	if !m.AcceptBytes([]byte("b")) || !m.CanEnd() {
		t.Fatal("ab: want complete")
	}
	if m.Allows([]byte("c")) || m.AcceptBytes([]byte("c")) {
		t.Fatal("nothing may follow a complete ab")
	}
	if !m.CanEnd() {
		t.Fatal("a refused AcceptBytes changed the matcher")
	}

	// Optional trailing part: complete, yet more is allowed.
	g = mustParse(t, `root ::= [0-9]+ ("." [0-9]+)?`)
	m = g.NewMatcher()
	m.AcceptBytes([]byte("12"))
	if !m.CanEnd() || !m.Allows([]byte(".5")) || !m.Allows([]byte("3")) || !m.Allows([]byte(".")) || m.Allows([]byte("x")) {
		t.Fatal("12: want complete, with ., .5 and 3 allowed and x not")
	}
	m.AcceptBytes([]byte("."))
	if m.CanEnd() {
		t.Fatal("12. is not complete")
	}
}

func TestPartialUTF8(t *testing.T) {
	g := mustParse(t, `root ::= "é" "😀" [^é]`)
	e, smile := []byte("é"), []byte("😀")
	m := g.NewMatcher()
	if !m.AcceptBytes(e[:1]) {
		t.Fatal("first byte of é refused")
	}
	if m.CanEnd() {
		t.Fatal("CanEnd inside a code point")
	}
	c := m.Clone()
	if !m.AcceptBytes(e[1:]) {
		t.Fatal("second byte of é refused")
	}
	// The clone kept the partial code point: a different completion is wrong.
	if c.AcceptBytes([]byte{0xA8}) { // è
		t.Fatal("clone accepted è")
	}
	if !c.AcceptBytes(e[1:]) {
		t.Fatal("clone refused the rest of é")
	}
	// Split the 4-byte emoji over three calls.
	for _, part := range [][]byte{smile[:1], smile[1:3], smile[3:]} {
		if !m.AcceptBytes(part) {
			t.Fatalf("part % x of 😀 refused", part)
		}
	}
	// [^é]: a lead byte that can only complete to é is refused, one that
	// can complete to something else is allowed.
	if !m.Allows([]byte{0xC3}) {
		t.Error("0xC3 can still become è; refused")
	}
	if m.Allows([]byte("é")) {
		t.Error("é allowed by [^é]")
	}
	if !m.AcceptBytes([]byte("è")) || !m.CanEnd() {
		t.Error("è refused or incomplete")
	}

	// A partial sequence that cannot complete to anything allowed is refused.
	g = mustParse(t, `root ::= "a" | "é"`)
	m = g.NewMatcher()
	if m.Allows([]byte{0xE2}) || m.AcceptBytes([]byte{0xE2}) {
		t.Error("0xE2 (3-byte lead) allowed where only a or é may come")
	}
	if !m.Allows([]byte{0xC3}) {
		t.Error("0xC3 refused where é may come")
	}
}

func TestMalformedUTF8(t *testing.T) {
	g := mustParse(t, `root ::= .*`)
	for _, s := range []string{"\x80", "\xC0\x80", "\xC1\xBF", "\xE0\x80\x80", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xF5\x80\x80\x80", "\xFF", "\xC3a"} {
		m := g.NewMatcher()
		if m.AcceptBytes([]byte(s)) {
			t.Errorf("accepted malformed % x", s)
		}
		if m.Allows([]byte(s)) {
			t.Errorf("allowed malformed % x", s)
		}
	}
	for _, s := range []string{"\x00", "\x7F", "\u0080", "\u07FF", "\u0800", "\uFFFF", "\U00010000", "\U0010FFFF"} {
		if !accepts(g, s) || !acceptsByteByByte(g, s) {
			t.Errorf("refused well-formed %q", s)
		}
	}
}

func TestCloneIndependence(t *testing.T) {
	g := mustParse(t, `root ::= "a" ("b" | "c") "d"`)
	m := g.NewMatcher()
	m.AcceptBytes([]byte("a"))
	c := m.Clone()
	if !m.AcceptBytes([]byte("bd")) || !m.CanEnd() {
		t.Fatal("abd refused")
	}
	if c.CanEnd() || !c.Allows([]byte("cd")) || c.Allows([]byte("d")) {
		t.Fatal("clone moved with the original")
	}
	if !c.AcceptBytes([]byte("c")) || m.Allows([]byte("d")) {
		t.Fatal("original moved with the clone")
	}
	if !c.AcceptBytes([]byte("d")) || !c.CanEnd() {
		t.Fatal("acd refused")
	}
}

func TestEmptyInput(t *testing.T) {
	g := mustParse(t, `root ::= "a"?`)
	m := g.NewMatcher()
	if !m.CanEnd() {
		t.Error("an optional grammar is complete before input")
	}
	if m.Allows(nil) || m.Allows([]byte{}) {
		t.Error("an empty piece is allowed")
	}
	if !m.AcceptBytes(nil) || !m.CanEnd() {
		t.Error("AcceptBytes(nil) should succeed and change nothing")
	}
	v := NewVocab([][]byte{{}, []byte("a"), []byte("b"), nil})
	allowed := make([]bool, v.Len())
	m.AllowedTokens(v, allowed)
	if want := []bool{false, true, false, false}; !equalBools(allowed, want) {
		t.Errorf("AllowedTokens = %v, want %v", allowed, want)
	}
}

func equalBools(a, b []bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestStackLimit: a grammar whose stacks double with every character hits
// MaxStacks; the character is refused and Err says why.
func TestStackLimit(t *testing.T) {
	g := mustParse(t, "root ::= x\nx ::= \"a\" x \"b\" | \"a\" x \"c\" | \"d\"")
	m := g.NewMatcher()
	n := 0
	for ; n < 64 && m.AcceptBytes([]byte("a")); n++ {
	}
	t.Logf("refused after %d a's: %v", n, m.Err())
	if n == 64 {
		t.Fatal("64 a's accepted; the stacks should have outgrown MaxStacks")
	}
	if n < 10 {
		t.Fatalf("refused after only %d a's", n)
	}
	if err := m.Err(); err == nil || !strings.Contains(err.Error(), "parse stacks") {
		t.Fatalf("Err() = %v, want the stack limit", err)
	}
	// The matcher is still usable where it stopped.
	if !m.AcceptBytes([]byte("d"+strings.Repeat("b", n))) || !m.CanEnd() {
		t.Error("could not finish after hitting the limit")
	}
}

// TestLongGeneration follows deep nesting far past the cache's soft bounds:
// the cache is trimmed and matching stays correct.
func TestLongGeneration(t *testing.T) {
	g := mustParse(t, JSON)
	m := g.NewMatcher()
	depth := 1000
	text := `{"a":` + strings.Repeat(`[`, depth) + strings.Repeat(`]`, depth) + `}`
	for i := 0; i < len(text); i++ {
		if !m.AcceptBytes([]byte{text[i]}) {
			t.Fatalf("refused byte %d of deeply nested JSON", i)
		}
		if len(m.table.states) > 2*tableSoftStates+100 {
			t.Fatalf("cache holds %d states", len(m.table.states))
		}
	}
	if !m.CanEnd() || m.Err() != nil {
		t.Fatalf("CanEnd %v, Err %v", m.CanEnd(), m.Err())
	}
}

// TestAllowedTokensMatchesAllows compares the trie walk with Allows, piece by
// piece, at several positions of several grammars.
func TestAllowedTokensMatchesAllows(t *testing.T) {
	pieces := syntheticPieces(20000, 7)
	for _, extra := range []string{"{", "{\"", "\"", "\":", " ", "\n", "}", "]", "1", "-", "true", "é", "\xC3", "\xE2\x82", "\\u00", "a\"", "ab"} {
		pieces = append(pieces, []byte(extra))
	}
	v := NewVocab(pieces)
	check := func(name string, m *Matcher) {
		t.Helper()
		allowed := make([]bool, v.Len())
		m.AllowedTokens(v, allowed)
		n := 0
		for id, p := range pieces {
			if want := m.Allows(p); allowed[id] != want {
				t.Fatalf("%s: token %d %q: AllowedTokens %v, Allows %v", name, id, p, allowed[id], want)
			}
			if allowed[id] {
				n++
			}
		}
		t.Logf("%s: %d of %d allowed", name, n, len(pieces))
	}
	g := mustParse(t, JSON)
	for _, prefix := range []string{"", "{", `{"ke`, `{"key": `, `{"key": 12`, "{\"key\": \"va\xC3", `{"key": [1, {"x": tr`, `{"a": 1}`} {
		m := g.NewMatcher()
		if !m.AcceptBytes([]byte(prefix)) {
			t.Fatalf("JSON refused %q", prefix)
		}
		check("JSON after "+prefix, m)
	}
	g = mustParse(t, "root ::= [^é]* \"é\" ...")
	m := g.NewMatcher()
	check("any then é", m)
	m.AcceptBytes([]byte("abé"))
	check("any then é, after abé", m)
}

// syntheticPieces makes n deterministic token texts of 1–10 bytes, mixing
// ASCII words, punctuation, JSON-ish fragments and multi-byte UTF-8
// (including pieces cut inside a code point, as byte-level BPE vocabularies
// have).
func syntheticPieces(n int, seed uint64) [][]byte {
	r := seed*2654435761 + 1
	next := func(k int) int {
		r ^= r << 13
		r ^= r >> 7
		r ^= r << 17
		return int(r % uint64(k))
	}
	alphabet := []rune("etaoinshrdlucmfwypvbgkjqxzETAOINSHRD0123456789 \"{}[]:,.-+\\\n\tébü€中文ключ😀")
	pieces := make([][]byte, 0, n)
	for len(pieces) < n {
		size := 1 + next(10)
		var b []byte
		for len(b) < size {
			c := alphabet[next(len(alphabet))]
			if next(3) > 0 {
				c = alphabet[next(26)] // mostly lower-case letters
			}
			b = utf8.AppendRune(b, c)
		}
		if len(b) > size {
			b = b[:size] // may cut a code point, like byte-level tokens
		}
		pieces = append(pieces, b)
	}
	return pieces
}

// TestLargeAlternation: thousands of alternatives (as a JSON schema enum
// produces) stay within the limits.
func TestLargeAlternation(t *testing.T) {
	var b strings.Builder
	b.WriteString("root ::= ")
	for i := range 5000 {
		if i > 0 {
			b.WriteString(" | ")
		}
		b.WriteString(`"item` + itoa(i) + `"`)
	}
	g := mustParse(t, b.String())
	for _, s := range []string{"item0", "item4999", "item123"} {
		if !accepts(g, s) {
			t.Errorf("refuses %q", s)
		}
	}
	for _, s := range []string{"item5000", "item", "item01"} {
		if accepts(g, s) {
			t.Errorf("accepts %q", s)
		}
	}
}

// TestConcurrentMatchers shares one Grammar and one Vocab between goroutines,
// each with its own matcher or clone (run with -race).
func TestConcurrentMatchers(t *testing.T) {
	g := mustParse(t, JSON)
	v := NewVocab(syntheticPieces(2000, 5))
	base := g.NewMatcher()
	base.AcceptBytes([]byte(`{"a": `))
	done := make(chan bool)
	for w := range 4 {
		go func() {
			m := g.NewMatcher()
			if w%2 == 1 {
				m = base.Clone()
			}
			allowed := make([]bool, v.Len())
			ok := true
			for _, piece := range []string{`{"a": `, `"x`, `y"`, `}`} {
				if w%2 == 1 && piece == `{"a": ` {
					continue
				}
				m.AllowedTokens(v, allowed)
				ok = ok && m.AcceptBytes([]byte(piece))
			}
			done <- ok && m.CanEnd()
		}()
	}
	for range 4 {
		if !<-done {
			t.Error("a goroutine's matcher did not finish the text")
		}
	}
}

// A released matcher's cache serves the next matcher of the grammar: it starts with the
// states the first went through, and answers as a fresh grammar's matcher does. A matcher
// that hit a limit leaves nothing behind.
func TestMatcherRelease(t *testing.T) {
	src := `root ::= "{" ( [a-z]+ ":" [0-9]+ ( "," [a-z]+ ":" [0-9]+ )* )? "}"`
	g := mustParse(t, src)
	pieces := [][]byte{[]byte("{"), []byte("ab"), []byte(":"), []byte("12"), []byte(","), []byte("}"), []byte("x:"), []byte("é")}
	vocab := NewVocab(pieces)
	text := []byte("{ab:12,cd:3}")

	first := g.NewMatcher()
	if !first.AcceptBytes(text) {
		t.Fatal("the text does not match")
	}
	states := len(first.table.states)
	first.Release()
	second := g.NewMatcher()
	if got := len(second.table.states); got != states {
		t.Errorf("the next matcher starts with %d states, want the released %d", got, states)
	}
	fresh := mustParse(t, src).NewMatcher()
	for i := 0; i <= len(text); i++ {
		want, got := make([]bool, vocab.Len()), make([]bool, vocab.Len())
		fresh.AllowedTokens(vocab, want)
		second.AllowedTokens(vocab, got)
		if !slices.Equal(got, want) || second.CanEnd() != fresh.CanEnd() {
			t.Fatalf("after %q: allowed %v, fresh %v", text[:i], got, want)
		}
		if i < len(text) && (!second.AcceptBytes(text[i:i+1]) || !fresh.AcceptBytes(text[i:i+1])) {
			t.Fatalf("byte %d refused", i)
		}
	}

	limited := g.NewMatcher()
	limited.table.fail(errLimit)
	limited.Release()
	if m := g.NewMatcher(); m.Err() != nil {
		t.Errorf("a matcher got the cache of one that hit a limit: %v", m.Err())
	}
}

// Matchers of one grammar taken, used and released on many goroutines at once each get
// their own cache (run with -race).
func TestMatcherReleaseConcurrent(t *testing.T) {
	g := mustParse(t, `root ::= [a-z]+ ("," [a-z]+)*`)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				m := g.NewMatcher()
				text := strings.Repeat(string(rune('a'+(w+i)%26)), 1+i%5) + ",xy"
				if !m.AcceptBytes([]byte(text)) || !m.CanEnd() {
					t.Errorf("goroutine %d: %q refused", w, text)
				}
				m.Release()
			}
		}()
	}
	wg.Wait()
}
