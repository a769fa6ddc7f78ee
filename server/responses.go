package server

import (
	"github.com/moerun/moerun/tokenizer"
)

// OpenAI's response shapes (chat.completion, chat.completion.chunk, text_completion).

type usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		// CachedTokens are the prompt tokens the slot's KV cache already held.
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func usageOf(r result) *usage {
	u := &usage{PromptTokens: r.promptTokens, CompletionTokens: r.completionTokens, TotalTokens: r.promptTokens + r.completionTokens}
	u.PromptTokensDetails.CachedTokens = r.cachedTokens
	return u
}

// timings are llama-server's extension: where the time went, in milliseconds.
type timings struct {
	CacheN             int     `json:"cache_n"`  // prompt tokens the slot's cache held
	PromptN            int     `json:"prompt_n"` // prompt tokens evaluated
	PromptMS           float64 `json:"prompt_ms"`
	PromptPerSecond    float64 `json:"prompt_per_second"`
	PredictedN         int     `json:"predicted_n"`
	PredictedMS        float64 `json:"predicted_ms"`
	PredictedPerSecond float64 `json:"predicted_per_second"`
}

func timingsOf(r result) *timings {
	evaluated := r.promptTokens - r.cachedTokens
	t := timings{CacheN: r.cachedTokens, PromptN: evaluated, PromptMS: ms(r.promptTime.Seconds()), PredictedN: r.completionTokens, PredictedMS: ms(r.genTime.Seconds())}
	if r.promptTime > 0 {
		t.PromptPerSecond = float64(evaluated) / r.promptTime.Seconds()
	}
	if r.genTime > 0 {
		t.PredictedPerSecond = float64(r.completionTokens) / r.genTime.Seconds()
	}
	return &t
}

func ms(s float64) float64 { return 1000 * s }

type chatMessage struct {
	Role             string     `json:"role,omitempty"`
	Content          string     `json:"content"`
	ReasoningContent string     `json:"reasoning_content,omitempty"`
	ToolCalls        []toolCall `json:"tool_calls,omitempty"`
}

type chatDelta struct {
	Role             string          `json:"role,omitempty"`
	Content          *string         `json:"content,omitempty"`
	ReasoningContent *string         `json:"reasoning_content,omitempty"`
	ToolCalls        []toolCallDelta `json:"tool_calls,omitempty"`
}

// toolCallDelta is a tool call's piece in a stream's delta, as OpenAI streams calls: the
// first piece of a call carries its id, type and name, later ones only more arguments.
type toolCallDelta struct {
	Index    int    `json:"index"`
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type chatChoice struct {
	Index        int           `json:"index"`
	Message      *chatMessage  `json:"message,omitempty"`
	Delta        *chatDelta    `json:"delta,omitempty"`
	Logprobs     *chatLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
}

// response is a chat.completion(.chunk) or a text_completion: C is the choice type.
type response[C any] struct {
	ID      string   `json:"id"`
	Object  string   `json:"object"`
	Created int64    `json:"created"`
	Model   string   `json:"model"`
	Choices []C      `json:"choices"`
	Usage   *usage   `json:"usage,omitempty"`
	Timings *timings `json:"timings,omitempty"`
}

type (
	chatResponse       = response[chatChoice]
	completionResponse = response[completionChoice]
)

// chatLogprobs is {"content": [...]}, one entry per token.
type chatLogprobs struct {
	Content []chatTokenLogprob `json:"content"`
}

type chatTokenLogprob struct {
	Token       string           `json:"token"`
	Logprob     float32          `json:"logprob"`
	Bytes       []int            `json:"bytes"`
	TopLogprobs []chatTopLogprob `json:"top_logprobs"`
}

type chatTopLogprob struct {
	Token   string  `json:"token"`
	Logprob float32 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

func pieceBytes(piece string) []int {
	b := make([]int, len(piece))
	for i := range len(piece) {
		b[i] = int(piece[i])
	}
	return b
}

func chatLogprobsOf(v *tokenizer.Vocab, lps []tokenLogprob) *chatLogprobs {
	out := &chatLogprobs{Content: make([]chatTokenLogprob, len(lps))}
	for i, lp := range lps {
		piece := v.Piece(lp.id, true)
		e := chatTokenLogprob{Token: piece, Logprob: lp.logprob, Bytes: pieceBytes(piece), TopLogprobs: make([]chatTopLogprob, len(lp.top))}
		for k, c := range lp.top {
			p := v.Piece(c.id, true)
			e.TopLogprobs[k] = chatTopLogprob{Token: p, Logprob: c.logprob, Bytes: pieceBytes(p)}
		}
		out.Content[i] = e
	}
	return out
}

type completionChoice struct {
	Index        int                 `json:"index"`
	Text         string              `json:"text"`
	Logprobs     *completionLogprobs `json:"logprobs"`
	FinishReason *string             `json:"finish_reason"`
}

// completionLogprobs is the legacy completions shape: parallel arrays.
type completionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float32            `json:"token_logprobs"`
	TopLogprobs   []map[string]float32 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

// completionLogprobsOf lays out lps; offset is where their text starts in the completion.
func completionLogprobsOf(v *tokenizer.Vocab, lps []tokenLogprob, offset int) *completionLogprobs {
	out := &completionLogprobs{Tokens: []string{}, TokenLogprobs: []float32{}, TopLogprobs: []map[string]float32{}, TextOffset: []int{}}
	for _, lp := range lps {
		piece := v.Piece(lp.id, true)
		top := make(map[string]float32, len(lp.top))
		for _, c := range lp.top {
			top[v.Piece(c.id, true)] = c.logprob
		}
		out.Tokens = append(out.Tokens, piece)
		out.TokenLogprobs = append(out.TokenLogprobs, lp.logprob)
		out.TopLogprobs = append(out.TopLogprobs, top)
		out.TextOffset = append(out.TextOffset, offset)
		offset += len(piece)
	}
	return out
}

// chatFormat shapes chat.completion responses and chat.completion.chunk events. With a
// parser, the generated text is split into reasoning_content, content and tool_calls, as
// llama-server splits it.
type chatFormat struct {
	s      *Server
	j      *job
	base   chatResponse
	first  bool         // no chunk has been sent yet: the next carries the role
	parser outputParser // nil: the text is all content
	held   []tokenLogprob
	calls  int // tool calls sent so far
}

func (f *chatFormat) logprobs(lps []tokenLogprob) *chatLogprobs {
	if !f.j.logprobs {
		return nil
	}
	return chatLogprobsOf(f.s.vocab, lps)
}

// finishReason is "tool_calls" once the model called a tool.
func (f *chatFormat) finishReason(res result) *string {
	if f.calls > 0 && res.finishReason == "stop" {
		r := "tool_calls"
		return &r
	}
	return &res.finishReason
}

func (f *chatFormat) whole(res result) any {
	m := &chatMessage{Role: "assistant", Content: res.text}
	if f.parser != nil {
		// The calls the end of the text completes count too: gpt-oss's last call ends at
		// <|call|>, an end-of-generation token that is not part of the text.
		p := textParser{f.parser}.all(res.text)
		m.Content, m.ReasoningContent, m.ToolCalls = p.content, p.reasoning, p.calls
		f.calls = len(m.ToolCalls)
	}
	r := f.base
	r.Object = "chat.completion"
	r.Choices = []chatChoice{{Message: m, Logprobs: f.logprobs(res.logprobs), FinishReason: f.finishReason(res)}}
	r.Usage, r.Timings = usageOf(res), timingsOf(res)
	return r
}

func (f *chatFormat) chunk(c chatChoice) chatResponse {
	r := f.base
	r.Object, r.Choices = "chat.completion.chunk", []chatChoice{c}
	return r
}

// delta is the chunk for newly generated text, or nil when the parser holds all of it
// back (its log-probabilities go with the next chunk).
func (f *chatFormat) delta(text string, lps []tokenLogprob) any {
	d := &chatDelta{Content: &text}
	if f.parser != nil {
		d = f.parsedDelta(f.parser.add(text))
		if d == nil {
			f.held = append(f.held, lps...)
			return nil
		}
		lps, f.held = append(f.held, lps...), nil
	}
	if f.first {
		d.Role, f.first = "assistant", false
	}
	return f.chunk(chatChoice{Delta: d, Logprobs: f.logprobs(lps)})
}

// parsedDelta is the delta of one parsed piece, nil for one with nothing to send.
func (f *chatFormat) parsedDelta(p parsed) *chatDelta {
	d := &chatDelta{}
	for _, c := range p.calls {
		td := toolCallDelta{Index: c.Index, ID: c.ID, Type: c.Type}
		td.Function.Name, td.Function.Arguments = c.Function.Name, c.Function.Arguments
		d.ToolCalls = append(d.ToolCalls, td)
	}
	f.calls += len(p.calls)
	for _, part := range p.parts {
		switch {
		case part.first:
			td := toolCallDelta{Index: part.index, ID: part.id, Type: "function"}
			td.Function.Name = part.name
			d.ToolCalls = append(d.ToolCalls, td)
			f.calls++
		case part.args == "":
		case len(d.ToolCalls) > 0 && d.ToolCalls[len(d.ToolCalls)-1].Index == part.index:
			d.ToolCalls[len(d.ToolCalls)-1].Function.Arguments += part.args
		default:
			td := toolCallDelta{Index: part.index}
			td.Function.Arguments = part.args
			d.ToolCalls = append(d.ToolCalls, td)
		}
	}
	if p.content != "" {
		d.Content = &p.content
	}
	if p.reasoning != "" {
		d.ReasoningContent = &p.reasoning
	}
	if d.Content == nil && d.ReasoningContent == nil && len(d.ToolCalls) == 0 {
		return nil
	}
	return d
}

func (f *chatFormat) finish(res result) any {
	d := &chatDelta{}
	if f.parser != nil {
		if rest := f.parsedDelta(f.parser.flush()); rest != nil {
			d = rest
		}
	}
	if f.first { // nothing was generated: the role still opens the message
		if d.Content == nil {
			empty := ""
			d.Content = &empty
		}
		d.Role = "assistant"
	}
	r := f.chunk(chatChoice{Delta: d, Logprobs: f.logprobs(f.held), FinishReason: f.finishReason(res)})
	r.Timings = timingsOf(res)
	return r
}

func (f *chatFormat) usage(res result) any {
	r := f.chunk(chatChoice{})
	r.Choices, r.Usage = []chatChoice{}, usageOf(res)
	return r
}

// completionFormat shapes text_completion responses and events.
type completionFormat struct {
	s      *Server
	j      *job
	base   completionResponse
	offset int // bytes of text streamed so far, for logprobs' text_offset
}

func (f *completionFormat) choice(text string, lps []tokenLogprob, finish *string) completionResponse {
	c := completionChoice{Text: text, FinishReason: finish}
	if f.j.logprobs {
		c.Logprobs = completionLogprobsOf(f.s.vocab, lps, f.offset)
	}
	r := f.base
	r.Choices = []completionChoice{c}
	return r
}

func (f *completionFormat) whole(res result) any {
	r := f.choice(res.text, res.logprobs, &res.finishReason)
	r.Usage, r.Timings = usageOf(res), timingsOf(res)
	return r
}

func (f *completionFormat) delta(text string, lps []tokenLogprob) any {
	r := f.choice(text, lps, nil)
	f.offset += len(text)
	return r
}

func (f *completionFormat) finish(res result) any {
	r := f.choice("", nil, &res.finishReason)
	r.Timings = timingsOf(res)
	return r
}

func (f *completionFormat) usage(res result) any {
	r := f.base
	r.Choices, r.Usage = []completionChoice{}, usageOf(res)
	return r
}
