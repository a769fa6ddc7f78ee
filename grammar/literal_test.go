package grammar

import "testing"

// TestLiteral: a literal of any text, control characters and bytes of UTF-8 included,
// parses and matches exactly that text.
func TestLiteral(t *testing.T) {
	for _, text := range []string{"plain", "a\tb\x01c\"d\\e\nf\rg\x7f", "<｜tool▁sep｜>", "{\"k\": [1, 2]}"} {
		g, err := Parse("root ::= " + Literal(text))
		if err != nil {
			t.Fatalf("%q: %v", text, err)
		}
		m := g.NewMatcher()
		if !m.AcceptBytes([]byte(text)) || !m.CanEnd() {
			t.Errorf("%q: the literal does not match its text", text)
		}
		if m := g.NewMatcher(); m.AcceptBytes([]byte(text + "x")) {
			t.Errorf("%q: the literal matches more than its text", text)
		}
	}
}
