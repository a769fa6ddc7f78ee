package server

import (
	"slices"
	"sync/atomic"

	"github.com/moerun/moerun/moe"
)

// reasoningBudget ends a model's reasoning after a number of tokens, as llama.cpp's
// reasoning-budget sampler (--reasoning-budget, a request's reasoning_budget_tokens): it
// watches the generated tokens for the reasoning's opening tag; once it has opened, it
// counts the tokens written inside, and when the budget is spent (and the last token ended
// a whole UTF-8 character) it forces the tokens of the budget message and the closing tag,
// one per step. A closing tag the model writes itself ends the count; a new opening tag
// starts a new one. Tags are matched as token sequences, the tags' own tokenization, as
// llama.cpp matches them. A budget below 0 never runs out: the reasoning then ends early
// only when asked (requestEnd, a request's reasoning_control).
type reasoningBudget struct {
	start  []int32   // the opening tag's tokens
	ends   [][]int32 // the closing tags' tokens (the first is the one forced)
	forced []int32   // the message's tokens, then the first closing tag's
	budget int
	pieces func(int32) string // a token's text without control tokens, for the UTF-8 check

	// endRequested is set by requestEnd, from any goroutine, and taken by the generation's
	// own at its next step.
	endRequested atomic.Bool

	state     budgetState
	midChar   bool    // the last token inside the reasoning ended inside a UTF-8 character
	remaining int     // tokens the reasoning may still take
	at        int     // the next of forced to force
	recent    []int32 // the tokens since the last match, to find a tag ending here
}

type budgetState int

const (
	budgetIdle        budgetState = iota // the reasoning has not opened
	budgetCounting                       // inside the reasoning, counting
	budgetWaitingUTF8                    // spent, but the last token cut a character
	budgetForcing                        // writing the message and the closing tag
	budgetDone                           // the reasoning closed
)

// newReasoningBudget makes a budget of n tokens over the given tags' token sequences;
// opened says the prompt already opened the reasoning (llama.cpp feeds the template's
// generation prompt through the sampler, which does the same).
func newReasoningBudget(n int, start []int32, ends [][]int32, forced []int32, pieces func(int32) string, opened bool) *reasoningBudget {
	b := &reasoningBudget{start: start, ends: ends, forced: forced, budget: n, pieces: pieces}
	if opened {
		b.open()
	}
	return b
}

// open starts counting the reasoning's tokens.
func (b *reasoningBudget) open() {
	b.state, b.remaining, b.recent, b.midChar = budgetCounting, b.budget, b.recent[:0], false
	if b.budget >= 0 && b.remaining <= 0 {
		b.force()
	}
}

func (b *reasoningBudget) force() { b.state, b.at, b.recent = budgetForcing, 0, b.recent[:0] }

// requestEnd asks the generation to end its reasoning now, as llama-server's
// /v1/chat/completions/control does: the message and the closing tag are forced from the
// next step on if the reasoning is open and counting then (not when it has not opened, has
// closed, or is already being closed), otherwise the request is dropped. Where the last
// token ended inside a UTF-8 character, the forcing waits for a token that completes it,
// as a spent budget's does (llama.cpp's manual force does not wait, and can cut a
// character in two). Safe to call from any goroutine.
func (b *reasoningBudget) requestEnd() { b.endRequested.Store(true) }

// Forcing reports whether the next token is forced: the sampler then draws from the
// forced token alone, as llama.cpp masks the logits before its chain runs. A sampler asks
// it before each draw, which is where a request to end the reasoning takes effect.
func (b *reasoningBudget) Forcing() bool {
	if b.endRequested.Load() && b.endRequested.Swap(false) && b.state == budgetCounting {
		if b.midChar { // as a spent budget: the character the last token began ends first
			b.state, b.remaining, b.recent = budgetWaitingUTF8, 0, b.recent[:0]
		} else {
			b.force()
		}
	}
	return b.state == budgetForcing && b.at < len(b.forced)
}

// Allows implements moe.Constraint.
func (b *reasoningBudget) Allows(token int32) bool {
	return !b.Forcing() || token == b.forced[b.at]
}

// Mask implements moe.Constraint.
func (b *reasoningBudget) Mask(allowed []bool) error {
	if !b.Forcing() {
		for t := range allowed {
			allowed[t] = true
		}
		return nil
	}
	clear(allowed)
	if f := b.forced[b.at]; int(f) < len(allowed) {
		allowed[f] = true
	}
	return nil
}

// Accept implements moe.Constraint.
func (b *reasoningBudget) Accept(token int32) error {
	switch b.state {
	case budgetIdle, budgetDone:
		if b.matches(token, b.start) {
			b.open()
		}
	case budgetCounting, budgetWaitingUTF8:
		if b.matches(token, b.ends...) {
			b.state = budgetDone
			return nil
		}
		whole := utf8Complete(b.pieces(token))
		b.midChar = !whole
		if b.budget < 0 && b.state == budgetCounting {
			return nil // no limit to count down to
		}
		switch {
		case b.state == budgetCounting && b.remaining > 1:
			b.remaining--
		case whole:
			b.force()
		case b.state == budgetCounting:
			b.state, b.remaining, b.recent = budgetWaitingUTF8, 0, b.recent[:0]
		}
	case budgetForcing:
		b.at++
		if b.at >= len(b.forced) {
			b.state, b.recent = budgetDone, b.recent[:0]
		}
	}
	return nil
}

// matches adds token to the recent ones and reports whether they now end with one of the
// tags; a match starts the recent tokens afresh.
func (b *reasoningBudget) matches(token int32, tags ...[]int32) bool {
	longest := 0
	for _, tag := range tags {
		longest = max(longest, len(tag))
	}
	b.recent = append(b.recent, token)
	if extra := len(b.recent) - longest; extra > 0 {
		b.recent = append(b.recent[:0], b.recent[extra:]...)
	}
	for _, tag := range tags {
		if len(tag) > 0 && len(tag) <= len(b.recent) && slices.Equal(b.recent[len(b.recent)-len(tag):], tag) {
			b.recent = b.recent[:0]
			return true
		}
	}
	return false
}

// utf8Complete reports whether a token's text ends with a whole UTF-8 character (or is
// empty), judging by its last bytes alone, as llama.cpp's common_utf8_is_complete.
func utf8Complete(piece string) bool {
	if piece == "" {
		return true
	}
	for i := 1; i <= min(4, len(piece)); i++ {
		c := piece[len(piece)-i]
		if c&0xC0 == 0x80 {
			continue // a continuation byte: the character began earlier
		}
		need := 1
		switch {
		case c >= 0xF0:
			need = 4
		case c >= 0xE0:
			need = 3
		case c >= 0xC0:
			need = 2
		}
		return i >= need
	}
	return false
}

// bothConstraints applies a reasoning budget first and then another constraint (a
// grammar), as llama.cpp's sampler applies its budget before the grammar.
type bothConstraints struct {
	budget *reasoningBudget
	then   moe.Constraint
}

func (c bothConstraints) Forcing() bool { return c.budget.Forcing() }

func (c bothConstraints) Allows(token int32) bool {
	return c.budget.Allows(token) && c.then.Allows(token)
}

// Mask implements moe.Constraint: while the budget forces a token, the other constraint is
// asked about that token alone rather than walking the vocabulary.
func (c bothConstraints) Mask(allowed []bool) error {
	if !c.budget.Forcing() {
		return c.then.Mask(allowed)
	}
	if err := c.budget.Mask(allowed); err != nil {
		return err
	}
	if f := c.budget.forced[c.budget.at]; int(f) < len(allowed) {
		allowed[f] = c.then.Allows(f)
	}
	return nil
}

func (c bothConstraints) Accept(token int32) error {
	if err := c.budget.Accept(token); err != nil {
		return err
	}
	return c.then.Accept(token)
}
