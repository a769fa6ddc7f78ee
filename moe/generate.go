package moe

import (
	"fmt"
	"time"
)

// GenerateOptions steer Generate.
type GenerateOptions struct {
	// MaxTokens is how many tokens to generate (-n); a negative value means until an
	// end-of-generation token or until the context is full.
	MaxTokens int
	// Sampler picks each token; nil means greedy (the largest logit, the lowest id on
	// ties). Generate feeds it the prompt and every token for its penalties.
	Sampler *Sampler
	// IsEOG reports end-of-generation tokens, which stop generation without being
	// emitted; nil means none do (llama.cpp's --ignore-eos).
	IsEOG func(id int32) bool
	// PromptLogits, if set, receives the logits after the prompt (valid during the call).
	PromptLogits func(logits []float32) error
	// Token receives each generated token as soon as it is sampled.
	Token func(id int32) error
}

// GenerateStats are the counts and times of a generation, for the speeds llama.cpp prints.
type GenerateStats struct {
	PromptTokens int
	PromptTime   time.Duration // evaluating the prompt
	Generated    int           // tokens emitted
	DecodeSteps  int           // single-token evaluations (Generated minus the last)
	DecodeTime   time.Duration // those evaluations and the sampling between them
}

// PromptSpeed and DecodeSpeed are in tokens per second (0 when nothing was timed).
func (s GenerateStats) PromptSpeed() float64 { return speed(s.PromptTokens, s.PromptTime) }
func (s GenerateStats) DecodeSpeed() float64 { return speed(s.DecodeSteps, s.DecodeTime) }

func speed(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// Generate evaluates the prompt at the context's next positions and then generates tokens
// one at a time, each sampled from the logits of the one before, until MaxTokens, an
// end-of-generation token, an error from a callback, or a full context (an error wrapping
// ErrContextFull, returned with the statistics so far).
func (c *Context) Generate(prompt []int32, o GenerateOptions) (st GenerateStats, err error) {
	st.PromptTokens = len(prompt)
	start := time.Now()
	logits, err := c.Eval(prompt, false)
	if err != nil {
		return st, err
	}
	st.PromptTime = time.Since(start)
	if o.Sampler != nil {
		for _, t := range prompt {
			o.Sampler.Accept(t)
		}
	}
	if o.PromptLogits != nil {
		if err := o.PromptLogits(logits); err != nil {
			return st, err
		}
	}
	start = time.Now()
	defer func() { st.DecodeTime = time.Since(start) }()
	var next [1]int32 // the token to evaluate, without allocating a slice per step
	for o.MaxTokens < 0 || st.Generated < o.MaxTokens {
		id := Greedy(logits)
		if o.Sampler != nil {
			id = o.Sampler.Sample(logits)
			o.Sampler.Accept(id)
		}
		if o.IsEOG != nil && o.IsEOG(id) {
			break
		}
		st.Generated++
		if o.Token != nil {
			if err := o.Token(id); err != nil {
				return st, err
			}
		}
		if st.Generated == o.MaxTokens {
			break // the last token needs no evaluation
		}
		if c.Len() == c.Size() {
			return st, fmt.Errorf("%w after %d generated tokens (%d positions; raise -c)", ErrContextFull, st.Generated, c.Size())
		}
		next[0] = id
		if logits, err = c.Eval(next[:], false); err != nil {
			return st, err
		}
		st.DecodeSteps++
	}
	return st, nil
}
