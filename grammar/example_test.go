package grammar_test

import (
	"fmt"

	"github.com/moerun/moerun/grammar"
)

// A sampler masks the vocabulary before each token, then advances the
// matcher over the chosen token's text.
func Example() {
	g, err := grammar.Parse(`root ::= "yes" | "no" | "maybe" " later"?`)
	if err != nil {
		panic(err)
	}
	pieces := [][]byte{[]byte("y"), []byte("es"), []byte("no"), []byte("may"), []byte("be"), []byte(" later"), []byte("x")}
	vocab := grammar.NewVocab(pieces) // once per model
	m := g.NewMatcher()               // once per generation
	allowed := make([]bool, vocab.Len())

	for _, next := range []int{3, 4} { // the sampler picks "may", then "be"
		m.AllowedTokens(vocab, allowed)
		fmt.Printf("allowed %v, choose %q\n", allowed, pieces[next])
		m.AcceptBytes(pieces[next])
	}
	m.AllowedTokens(vocab, allowed)
	fmt.Printf("allowed %v, end of generation allowed: %v\n", allowed, m.CanEnd())
	// Output:
	// allowed [true false true true false false false], choose "may"
	// allowed [false false false false true false false], choose "be"
	// allowed [false false false false false true false], end of generation allowed: true
}

func ExampleParse_error() {
	_, err := grammar.Parse("root ::= value\nvalue ::= \"a\" | number\n")
	fmt.Println(err)
	// Output:
	// grammar:2:17: undefined rule "number"
}
