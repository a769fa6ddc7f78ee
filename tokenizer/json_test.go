package tokenizer

import "testing"

// TestDecodeJSONTrailingData: anything after the value but white space is refused, invalid
// JSON included ("[1] ]" was accepted).
func TestDecodeJSONTrailingData(t *testing.T) {
	for _, s := range []string{"[1] ]", "[1] x", "{} }", "1 2", `"a" "b"`} {
		if _, err := DecodeJSON([]byte(s)); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
	for _, s := range []string{"[1]", " {} \n", "1"} {
		if _, err := DecodeJSON([]byte(s)); err != nil {
			t.Errorf("%q: %v", s, err)
		}
	}
}
