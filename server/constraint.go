package server

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/moerun/moerun/grammar"
	"github.com/moerun/moerun/tokenizer"
)

// tokenTexts is what a grammar constraint needs of the vocabulary, built once per server:
// every token's text (control tokens' included, as llama.cpp's grammar sampler reads them),
// the same as a grammar.Vocab for whole-vocabulary masks, and the end-of-generation tokens.
type tokenTexts struct {
	pieces [][]byte
	vocab  *grammar.Vocab
	eog    []int32
	nul    []int32 // tokens whose text starts with a NUL byte, which llama.cpp never allows
}

func newTokenTexts(v *tokenizer.Vocab) *tokenTexts {
	t := &tokenTexts{pieces: make([][]byte, v.Len())}
	for id := range t.pieces {
		t.pieces[id] = []byte(v.Piece(int32(id), true))
		if v.IsEOG(int32(id)) {
			t.eog = append(t.eog, int32(id))
		}
		if p := t.pieces[id]; len(p) > 0 && p[0] == 0 {
			t.nul = append(t.nul, int32(id))
		}
	}
	t.vocab = grammar.NewVocab(t.pieces)
	return t
}

// answerPhase is where a constrained generation is: the grammar constrains the answer, not
// the reasoning a thinking model writes before it (llama.cpp's chat parsers put an
// optional reasoning block before the response format's grammar).
type answerPhase int

const (
	phaseStart     answerPhase = iota // nothing yet: the reasoning may open, or the answer start
	phaseReasoning                    // inside the reasoning: anything goes until it closes
	phaseAwaiting                     // a lazy grammar's free text, until its trigger appears
	phaseAnswer                       // the grammar decides
)

// grammarConstraint keeps a generation's answer to a grammar: a moe.Constraint over the
// vocabulary's token texts. As llama.cpp's grammar sampler, an end-of-generation token is
// allowed only where the grammar can end, and a token without text never. Whitespace
// between a reasoning block and the answer is free.
type grammarConstraint struct {
	m     *grammar.Matcher
	texts *tokenTexts

	open, close string // the reasoning's tags; open "" when it cannot be opened
	// trigger makes the grammar lazy, as llama.cpp's tool-call grammars for tool_choice
	// auto: the answer is free text until trigger appears in it, and the grammar then
	// takes the text from the trigger on; "" applies it from the answer's start.
	trigger string
	phase   answerPhase
	tail    []byte // the end of the reasoning's (or the free text's) text, to find close (trigger) in
	started bool   // the answer has begun: no more free whitespace
}

// newGrammarConstraint constrains the answer to g (from trigger on, if not ""). open and
// close are the reasoning's tags ("" when the model writes none); inReasoning says the
// prompt already opened it.
func newGrammarConstraint(g *grammar.Grammar, texts *tokenTexts, open, close string, inReasoning bool, trigger string) *grammarConstraint {
	c := &grammarConstraint{m: g.NewMatcher(), texts: texts, open: open, close: close, trigger: trigger, started: true}
	c.phase = c.answerStart()
	switch {
	case inReasoning && close != "":
		c.phase = phaseReasoning
	case open != "" && close != "":
		c.phase = phaseStart
	}
	return c
}

// answerStart is the phase the answer begins in: free text first for a lazy grammar.
func (c *grammarConstraint) answerStart() answerPhase {
	if c.trigger != "" {
		return phaseAwaiting
	}
	return phaseAnswer
}

// triggered reports whether the free text so far and piece hold the trigger, and returns
// the text from it on, which the grammar must take.
func (c *grammarConstraint) triggered(piece []byte) ([]byte, bool) {
	text := append(slices.Clip(c.tail), piece...)
	at := bytes.Index(text, []byte(c.trigger))
	if at < 0 {
		return nil, false
	}
	return text[at:], true
}

// keepTail keeps of text only what may still begin tag.
func keepTail(text []byte, tag string) []byte {
	if keep := len(tag) - 1; len(text) > keep {
		return append(text[:0], text[len(text)-keep:]...)
	}
	return text
}

func isEOG(texts *tokenTexts, token int32) bool {
	for _, e := range texts.eog {
		if e == token {
			return true
		}
	}
	return false
}

// opens reports whether piece opens the reasoning (whitespace before the tag allowed).
func (c *grammarConstraint) opens(piece []byte) bool {
	return c.phase == phaseStart && bytes.HasPrefix(bytes.TrimLeft(piece, " \t\r\n"), []byte(c.open))
}

// answerBytes is what of piece the grammar must take: leading whitespace before the answer
// begins is dropped.
func (c *grammarConstraint) answerBytes(piece []byte) []byte {
	if c.started {
		return piece
	}
	return bytes.TrimLeft(piece, " \t\r\n")
}

// Allows implements moe.Constraint.
func (c *grammarConstraint) Allows(token int32) bool {
	phase := c.phase
	if phase == phaseReasoning {
		return true
	}
	if isEOG(c.texts, token) {
		// Free text may end; a grammar only where it is complete.
		return phase == phaseAwaiting || phase == phaseStart && c.trigger != "" || phase == phaseAnswer && c.started && c.m.CanEnd()
	}
	if int(token) >= len(c.texts.pieces) {
		return false
	}
	piece := c.texts.pieces[token]
	if len(piece) == 0 || piece[0] == 0 {
		return false
	}
	if c.opens(piece) {
		return true
	}
	if phase == phaseStart {
		phase = c.answerStart()
	}
	if phase == phaseAwaiting {
		rest, hit := c.triggered(piece)
		return !hit || c.m.Allows(rest)
	}
	rest := c.answerBytes(piece)
	return len(rest) == 0 || c.m.Allows(rest)
}

// Mask implements moe.Constraint: the grammar's whole-vocabulary walk, or token by token
// in the few steps where the reasoning may open, whitespace is free or a lazy grammar's
// trigger is being written.
func (c *grammarConstraint) Mask(allowed []bool) error {
	switch {
	case c.phase == phaseReasoning:
		for t := range allowed {
			allowed[t] = true
		}
		return nil
	case c.phase == phaseStart || c.phase == phaseAwaiting || !c.started || len(allowed) != c.texts.vocab.Len():
		for t := range allowed {
			allowed[t] = c.Allows(int32(t))
		}
		return c.m.Err()
	}
	c.m.AllowedTokens(c.texts.vocab, allowed)
	for _, t := range c.texts.nul {
		allowed[t] = false
	}
	canEnd := c.m.CanEnd()
	for _, e := range c.texts.eog {
		if int(e) < len(allowed) {
			allowed[e] = canEnd
		}
	}
	return c.m.Err()
}

// Accept implements moe.Constraint.
func (c *grammarConstraint) Accept(token int32) error {
	if isEOG(c.texts, token) {
		return nil
	}
	var piece []byte
	if int(token) < len(c.texts.pieces) {
		piece = c.texts.pieces[token]
	}
	if c.phase == phaseStart {
		if c.opens(piece) {
			c.phase = phaseReasoning
			piece = bytes.TrimLeft(piece, " \t\r\n")[len(c.open):]
		} else {
			c.phase = c.answerStart()
		}
	}
	if c.phase == phaseReasoning {
		c.tail = append(c.tail, piece...)
		at := bytes.Index(c.tail, []byte(c.close))
		if at < 0 {
			c.tail = keepTail(c.tail, c.close)
			return nil
		}
		piece = bytes.Clone(c.tail[at+len(c.close):])
		c.phase, c.tail, c.started = c.answerStart(), nil, false
	}
	if c.phase == phaseAwaiting {
		rest, hit := c.triggered(piece)
		if !hit {
			c.tail = keepTail(append(c.tail, piece...), c.trigger)
			return nil
		}
		piece = bytes.Clone(rest)
		c.phase, c.tail, c.started = phaseAnswer, nil, true
	}
	rest := c.answerBytes(piece)
	if len(rest) == 0 {
		return nil
	}
	if !c.m.AcceptBytes(rest) {
		if err := c.m.Err(); err != nil {
			return err
		}
		return fmt.Errorf("the output left the grammar at %q", rest)
	}
	c.started = true
	return nil
}
