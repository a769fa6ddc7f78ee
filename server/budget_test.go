package server

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

// The reasoning budget's states, step by step, on hand-made token sequences: tags of two
// tokens (1 2 opens, 3 4 closes, 5 6 the second closing tag), a message of one token (9),
// and token 7 whose text cuts a UTF-8 character.
func TestReasoningBudgetSteps(t *testing.T) {
	pieces := func(tok int32) string {
		switch tok {
		case 7:
			return "\xe6\x97" // the first two bytes of 日
		case 5:
			return "\xa5" // its last
		}
		return "x"
	}
	newBudget := func(n int, opened bool) *reasoningBudget {
		return newReasoningBudget(n, []int32{1, 2}, [][]int32{{3, 4}, {5, 6}}, []int32{9, 3, 4}, pieces, opened)
	}
	for _, c := range []struct {
		name   string
		budget int
		opened bool
		tokens []int32 // what the model writes where nothing is forced
		want   []int32 // what comes out
	}{
		{"opens, spends the budget, forced close", 3, false, []int32{8, 1, 2, 8, 8, 8, 8, 8}, []int32{8, 1, 2, 8, 8, 8, 9, 3, 4, 8, 8}},
		{"opened by the prompt", 2, true, []int32{8, 8, 8}, []int32{8, 8, 9, 3, 4, 8}},
		{"budget 0 closes at once", 0, true, []int32{8}, []int32{9, 3, 4, 8}},
		{"budget 0 after the model opens", 0, false, []int32{1, 2, 8}, []int32{1, 2, 9, 3, 4, 8}},
		{"the model closes in time", 4, true, []int32{8, 3, 4, 8, 8, 8, 8}, []int32{8, 3, 4, 8, 8, 8, 8}},
		{"the second closing tag ends it too", 4, true, []int32{8, 5, 6, 8, 8, 8, 8}, []int32{8, 5, 6, 8, 8, 8, 8}},
		{"a split tag counts its tokens", 3, true, []int32{3, 8, 8, 8}, []int32{3, 8, 8, 9, 3, 4, 8}},
		{"waits for the character to end", 2, true, []int32{8, 7, 7, 8, 8}, []int32{8, 7, 7, 8, 9, 3, 4}},
		{"a complete token ends the wait", 2, true, []int32{8, 7, 3, 4, 8}, []int32{8, 7, 3, 9, 3, 4}},
		{"a closing tag while waiting", 2, true, []int32{8, 7, 5, 6, 8, 8}, []int32{8, 7, 5, 6, 8, 8}},
		{"opens again after closing", 1, true, []int32{8, 8, 1, 2, 8, 8}, []int32{8, 9, 3, 4, 8, 1, 2, 8, 9, 3, 4, 8}},
		{"never opened: no limit", 1, false, []int32{8, 8, 8, 8, 8}, []int32{8, 8, 8, 8, 8}},
	} {
		b := newBudget(c.budget, c.opened)
		var got []int32
		model := c.tokens
		for len(got) < len(c.want) {
			var tok int32
			if b.Forcing() {
				tok = b.forced[b.at]
				allowed := make([]bool, 10)
				if err := b.Mask(allowed); err != nil {
					t.Fatal(err)
				}
				for id, ok := range allowed {
					if ok != (int32(id) == tok) || b.Allows(int32(id)) != ok {
						t.Fatalf("%s: forcing %d, token %d allowed %v", c.name, tok, id, ok)
					}
				}
			} else {
				if len(model) == 0 {
					break
				}
				tok, model = model[0], model[1:]
				if !b.Allows(tok) {
					t.Fatalf("%s: %d refused while nothing is forced", c.name, tok)
				}
			}
			got = append(got, tok)
			if err := b.Accept(tok); err != nil {
				t.Fatal(err)
			}
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// utf8Complete judges a token's text by its own last bytes, as llama.cpp's
// common_utf8_is_complete.
func TestUTF8Complete(t *testing.T) {
	for piece, want := range map[string]bool{
		"": true, "a": true, "日": true, "a日": true, "\xe6": false, "\xe6\x97": false,
		"\x97\xa5": false, "\xf0\x9f\x98\x80": true, "\xf0\x9f\x98": false, "\x80\x80\x80\x80": false, "é": true,
	} {
		if got := utf8Complete(piece); got != want {
			t.Errorf("%q: %v, want %v", piece, got, want)
		}
	}
}

// thinkingTemplate is ChatML whose generation prompt opens the reasoning, as Qwen3.5's and
// DeepSeek-R1's do.
const thinkingTemplate = `{%- for m in messages %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
<think>
{% endif %}`

// A request's reasoning budget on the tiny model, greedy: its reasoning is the first N
// tokens the model writes without a budget, then (after the message, if any) the closing
// tag is forced and the answer follows; budget 0 closes it at once; the server's
// --reasoning-budget applies where the request gives none, and -1 keeps it.
func TestReasoningBudget(t *testing.T) {
	budget := 0
	ts := newTestServer(t, func(c *Config) { c.ChatTemplate, c.ReasoningBudget = thinkingTemplate, &budget })
	free := newTestServer(t, func(c *Config) { c.ChatTemplate = thinkingTemplate })
	ask := func(ts *httptest.Server, maxTokens int, fields string) answer {
		t.Helper()
		a, _ := chatAnswer(t, ts, fmt.Sprintf(`{"messages": [{"role": "user", "content": "Think about the sea."}],
			"max_tokens": %d, "temperature": 0%s}`, maxTokens, fields))
		return a
	}
	// A budget whose last token ends in ASCII, so that the close is forced right after it.
	n := 0
	var reasoning string
	for try := 4; try <= 16 && n == 0; try++ {
		a := ask(free, try, "")
		if r := a.Message.ReasoningContent; r != "" && r[len(r)-1] < 0x80 && !strings.Contains(r, "</think>") {
			n, reasoning = try, r
		}
	}
	if n == 0 {
		t.Fatal("no budget of 4-16 tokens ends in ASCII")
	}
	long := ask(free, n+20, "")
	if long.Message.ReasoningContent == reasoning {
		t.Fatalf("the model closes its reasoning after %d tokens by itself: the test shows nothing", n)
	}
	budgeted := ask(free, n+20, fmt.Sprintf(`, "reasoning_budget_tokens": %d`, n))
	if budgeted.Message.ReasoningContent != reasoning {
		t.Errorf("budget %d: reasoning %q, want %q", n, budgeted.Message.ReasoningContent, reasoning)
	}
	withMessage := ask(free, n+20, fmt.Sprintf(`, "thinking_budget_tokens": %d, "reasoning_budget_message": " Enough."`, n))
	if want := reasoning + " Enough."; withMessage.Message.ReasoningContent != want {
		t.Errorf("budget %d with a message: reasoning %q, want %q", n, withMessage.Message.ReasoningContent, want)
	}
	if a := ask(ts, 10, ""); a.Message.ReasoningContent != "" || a.Message.Content == "" {
		t.Errorf("server budget 0: reasoning %q, content %q; want none and an answer", a.Message.ReasoningContent, a.Message.Content)
	}
	if a := ask(ts, n+20, `, "reasoning_budget_tokens": -1`); a.Message.ReasoningContent != "" {
		t.Errorf("-1 takes the server's budget 0: reasoning %q", a.Message.ReasoningContent)
	}
	if a := ask(ts, n+20, fmt.Sprintf(`, "reasoning_budget_tokens": %d`, n)); a.Message.ReasoningContent != reasoning {
		t.Errorf("the request's budget over the server's: reasoning %q, want %q", a.Message.ReasoningContent, reasoning)
	}
	status, body := call(t, free, http.MethodPost, "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}], "reasoning_budget_tokens": -2}`)
	if status != http.StatusBadRequest || !strings.Contains(string(body), "reasoning_budget_tokens -2") {
		t.Errorf("budget -2: %d %s", status, body)
	}
}

// refuseSet is a constraint that refuses some tokens and counts its masks.
type refuseSet struct {
	refused map[int32]bool
	masks   int
}

func (r *refuseSet) Allows(t int32) bool { return !r.refused[t] }
func (r *refuseSet) Accept(int32) error  { return nil }
func (r *refuseSet) Mask(allowed []bool) error {
	r.masks++
	for t := range allowed {
		allowed[t] = !r.refused[int32(t)]
	}
	return nil
}

// A budget and a grammar together: while the budget forces a token only that token can
// come, and only if the grammar allows it (asked about it alone); otherwise the grammar's
// mask is the mask.
func TestBothConstraintsMask(t *testing.T) {
	pieces := func(int32) string { return "x" }
	then := &refuseSet{refused: map[int32]bool{5: true}}
	c := bothConstraints{budget: newReasoningBudget(0, []int32{1}, [][]int32{{3}}, []int32{3}, pieces, true), then: then}
	allowed := make([]bool, 8)
	if err := c.Mask(allowed); err != nil || !slices.Equal(allowed, []bool{false, false, false, true, false, false, false, false}) || then.masks != 0 {
		t.Errorf("forcing 3: %v (%v), %d grammar masks", allowed, err, then.masks)
	}
	then.refused[3] = true
	if err := c.Mask(allowed); err != nil || slices.Contains(allowed, true) {
		t.Errorf("forcing 3, which the grammar refuses: %v (%v)", allowed, err)
	}
	if err := c.Accept(3); err != nil || c.budget.Forcing() {
		t.Fatalf("after the forced token: forcing %v (%v)", c.budget.Forcing(), err)
	}
	if err := c.Mask(allowed); err != nil || !slices.Equal(allowed, []bool{true, true, true, false, true, false, true, true}) || then.masks != 1 {
		t.Errorf("not forcing: %v (%v), %d grammar masks", allowed, err, then.masks)
	}
}

// A request to end the reasoning (reasoning_control) forces the message and the closing tag
// from the next step on while the reasoning is open, with or without a budget; made while
// the reasoning has not opened, or after it closed, it is dropped, as llama.cpp's
// common_reasoning_budget_force leaves those states alone; made after a token that ended
// inside a UTF-8 character, it waits for one that completes a character (token 7 begins one).
func TestReasoningBudgetRequestEnd(t *testing.T) {
	pieces := func(tok int32) string {
		if tok == 7 {
			return "\xe6\x97" // the first two bytes of 日
		}
		return "x"
	}
	for _, c := range []struct {
		name   string
		budget int
		opened bool
		endAt  int     // the step before which requestEnd is called
		tokens []int32 // what the model writes where nothing is forced
		want   []int32
	}{
		{"no limit runs on", -1, true, -1, []int32{8, 8, 8, 8, 8, 8}, []int32{8, 8, 8, 8, 8, 8}},
		{"no limit, ended", -1, true, 2, []int32{8, 8, 8, 8, 8}, []int32{8, 8, 9, 3, 8, 8}},
		{"ended before the budget runs out", 10, true, 1, []int32{8, 8, 8}, []int32{8, 9, 3, 8, 8}},
		{"ended after the model opens", -1, false, 3, []int32{8, 1, 8, 8, 8}, []int32{8, 1, 8, 9, 3, 8}},
		{"dropped before the reasoning opens", -1, false, 1, []int32{8, 8, 1, 8, 8, 8}, []int32{8, 8, 1, 8, 8, 8}},
		{"dropped after it closed", -1, true, 3, []int32{8, 3, 8, 8, 8}, []int32{8, 3, 8, 8, 8}},
		{"waits for the character to end", -1, true, 2, []int32{8, 7, 7, 8, 8, 8}, []int32{8, 7, 7, 8, 9, 3, 8}},
	} {
		b := newReasoningBudget(c.budget, []int32{1}, [][]int32{{3}}, []int32{9, 3}, pieces, c.opened)
		var got []int32
		model := c.tokens
		for step := 0; len(got) < len(c.want); step++ {
			if step == c.endAt {
				b.requestEnd()
			}
			var tok int32
			if b.Forcing() {
				tok = b.forced[b.at]
			} else {
				if len(model) == 0 {
					break
				}
				tok, model = model[0], model[1:]
			}
			got = append(got, tok)
			if err := b.Accept(tok); err != nil {
				t.Fatal(err)
			}
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
