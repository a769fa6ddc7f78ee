package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"reflect"
	"slices"
	"strings"

	"github.com/moerun/moerun/grammar"
	"github.com/moerun/moerun/moe"
	"github.com/moerun/moerun/tokenizer"
)

// Limits on what one request may ask for.
const (
	maxStops       = 16 // OpenAI allows 4; llama-server any number
	maxTopLogprobs = 20 // OpenAI's limit for chat
	// maxMessages bounds the work before a slot is taken: every message is decoded,
	// rendered by the template and tokenized (590k empty messages in a 16 MB body held
	// gigabytes for minutes).
	maxMessages = 10000
)

// commonFields are the generation fields the chat and completions requests share: OpenAI's
// names, and llama-server's extensions (top_k, min_p, repeat_penalty, …). Pointers tell
// "absent" from zero.
type commonFields struct {
	Model               string          `json:"model"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	NPredict            *int            `json:"n_predict"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	TopK                *int            `json:"top_k"`
	MinP                *float64        `json:"min_p"`
	PresencePenalty     *float64        `json:"presence_penalty"`
	FrequencyPenalty    *float64        `json:"frequency_penalty"`
	RepeatPenalty       *float64        `json:"repeat_penalty"`
	RepeatLastN         *int            `json:"repeat_last_n"`
	Seed                *int64          `json:"seed"`
	Stop                json.RawMessage `json:"stop"`
	N                   *int            `json:"n"`
	Stream              bool            `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	IgnoreEOS bool `json:"ignore_eos"`
	// CachePrompt (llama-server's, default true) lets the request reuse the prefix of its
	// prompt that the slot's KV cache already holds.
	CachePrompt *bool `json:"cache_prompt"`
	grammarFields
}

type chatRequest struct {
	commonFields
	Messages          []json.RawMessage `json:"messages"`
	Logprobs          bool              `json:"logprobs"`
	TopLogprobs       *int              `json:"top_logprobs"`
	Tools             json.RawMessage   `json:"tools"`
	ToolChoice        json.RawMessage   `json:"tool_choice"`
	ParallelToolCalls *bool             `json:"parallel_tool_calls"`
	// ChatTemplateKwargs are extra template variables (llama-server's), over the server's.
	ChatTemplateKwargs json.RawMessage `json:"chat_template_kwargs"`
	// ReasoningEffort is OpenAI's: "none" turns thinking off, any other value reaches the
	// template as reasoning_effort (gpt-oss's reads it).
	ReasoningEffort *string `json:"reasoning_effort"`
	// The reasoning budget (llama-server's): tokens the reasoning may take, -1 for the
	// server's --reasoning-budget; thinking_budget_tokens is read when the first is absent.
	ReasoningBudgetTokens  *int    `json:"reasoning_budget_tokens"`
	ThinkingBudgetTokens   *int    `json:"thinking_budget_tokens"`
	ReasoningBudgetMessage *string `json:"reasoning_budget_message"`
	// ReasoningControl (llama-server's) lets POST /v1/chat/completions/control end the
	// reasoning while the completion runs.
	ReasoningControl bool `json:"reasoning_control"`
}

type completionRequest struct {
	commonFields
	Prompt   json.RawMessage `json:"prompt"`
	Logprobs *int            `json:"logprobs"`
	Echo     bool            `json:"echo"`
	Suffix   *string         `json:"suffix"`
	BestOf   *int            `json:"best_of"`
}

// job is a validated request, ready for a slot.
type job struct {
	prompt       []int32
	sampler      moe.SamplerParams
	maxTokens    int // -1: until an end-of-generation token or a full context
	stops        []string
	logprobs     bool
	topLogprobs  int
	ignoreEOS    bool
	stream       bool
	includeUsage bool
	cachePrompt  bool             // reuse the slot's cached prefix of the prompt
	promptText   string           // a chat request's rendered conversation
	tools        bool             // the request gave tools: tool calls are parsed out of the text
	argTypes     argTypes         // the tools' parameter types
	preserved    []int32          // control tokens to write out, the tags the output parser reads
	thinking     bool             // the prompt opened the model's reasoning (it ends with <think>)
	budget       int              // tokens the reasoning may take; -1: no limit
	budgetMsg    string           // written before the closing tag a spent budget forces
	id           string           // a chat completion's id, by which a control request finds it
	control      bool             // reasoning_control: a control request may end the reasoning
	grammar      *grammar.Grammar // the output's constraint (grammar, json_schema, response_format); nil: none
	forcedCall   bool             // grammar is a required tool call's
	trigger      string           // grammar is lazy: it applies from this text on (auto tool calls)
}

// jsonKind names what a Go type decodes from, in JSON's terms, for error messages.
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		if t == reflect.TypeFor[json.RawMessage]() {
			return "a JSON value"
		}
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "a JSON value"
}

// decodeBody reads a JSON request body into v. A body over the limit is 413, anything
// that is not a JSON object of the right field types is 400 naming the field.
func decodeBody(r io.Reader, v any) *apiError {
	data, err := io.ReadAll(r)
	if err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			return &apiError{Status: http.StatusRequestEntityTooLarge, Type: typeInvalidRequest,
				Message: fmt.Sprintf("the request body is larger than %d bytes", mbe.Limit)}
		}
		return badRequest("", "reading the request body: %v", err)
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		return badRequest("", "the request body must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		if te := (*json.UnmarshalTypeError)(nil); errors.As(err, &te) {
			field := strings.TrimPrefix(te.Field, "commonFields.") // the embedded struct is not the client's
			return badRequest(field, "field %q must be %s, not a JSON %s", field, jsonKind(te.Type), te.Value)
		}
		return badRequest("", "the request body is not valid JSON: %v", err)
	}
	if dec.More() {
		return badRequest("", "the request body has data after the JSON object")
	}
	return nil
}

// decodeJob decodes a request with the shared fields and validates them.
func (s *Server) decodeJob(body io.Reader, req interface {
	common(j *job, s *Server) *apiError
}) (*job, *apiError) {
	if err := decodeBody(body, req); err != nil {
		return nil, err
	}
	j := &job{cachePrompt: s.promptCache, budget: -1}
	if err := req.common(j, s); err != nil {
		return nil, err
	}
	return j, nil
}

// common validates the shared fields into j; the server's defaults fill what the request
// leaves out.
func (c *commonFields) common(j *job, s *Server) *apiError {
	p := s.sampling
	setF := func(dst *float32, v *float64, name string, lo, hi float64) *apiError {
		if v == nil {
			return nil
		}
		if *v < lo || *v > hi || math.IsNaN(*v) {
			return badRequest(name, "%s %g is outside [%g, %g]", name, *v, lo, hi)
		}
		*dst = float32(*v)
		return nil
	}
	for _, f := range []struct {
		dst    *float32
		v      *float64
		name   string
		lo, hi float64
	}{
		{&p.Temperature, c.Temperature, "temperature", 0, 100},
		{&p.TopP, c.TopP, "top_p", 0, 1},
		{&p.MinP, c.MinP, "min_p", 0, 1},
		{&p.PresencePenalty, c.PresencePenalty, "presence_penalty", -2, 2},
		{&p.FrequencyPenalty, c.FrequencyPenalty, "frequency_penalty", -2, 2},
		{&p.RepeatPenalty, c.RepeatPenalty, "repeat_penalty", math.SmallestNonzeroFloat32, 100},
	} {
		if err := setF(f.dst, f.v, f.name, f.lo, f.hi); err != nil {
			return err
		}
	}
	if c.TopK != nil {
		if *c.TopK < 0 {
			return badRequest("top_k", "top_k %d is negative (0 keeps every token)", *c.TopK)
		}
		p.TopK = *c.TopK
	}
	if c.RepeatLastN != nil {
		if *c.RepeatLastN < -1 {
			return badRequest("repeat_last_n", "repeat_last_n %d: use -1 for the whole context or a count >= 0", *c.RepeatLastN)
		}
		p.PenaltyLastN = *c.RepeatLastN
	}
	if c.Seed != nil {
		switch s := *c.Seed; {
		case s == -1:
			p.Seed = moe.RandomSeed
		case s < 0 || s >= moe.RandomSeed:
			return badRequest("seed", "seed %d: use -1 (random) or 0..%d", s, uint32(moe.RandomSeed-1))
		default:
			p.Seed = uint32(s)
		}
	}
	if err := p.Validate(); err != nil {
		return badRequest("", "%v", err)
	}
	j.sampler = p
	var aerr *apiError
	if j.grammar, aerr = c.constraint(s.grammars.parse); aerr != nil {
		return aerr
	}

	j.maxTokens = s.maxTokens
	for _, m := range []struct {
		v    *int
		name string
	}{{c.MaxTokens, "max_tokens"}, {c.MaxCompletionTokens, "max_completion_tokens"}, {c.NPredict, "n_predict"}} {
		if m.v == nil {
			continue
		}
		if *m.v < -1 || *m.v == 0 && m.name != "n_predict" {
			return badRequest(m.name, "%s %d: want a positive count (or omit it to stop at the end of the text or context)", m.name, *m.v)
		}
		j.maxTokens = *m.v
	}
	if c.N != nil && *c.N != 1 {
		return badRequest("n", "n %d: only one choice per request is supported", *c.N)
	}
	stops, err := decodeStops(c.Stop)
	if err != nil {
		return err
	}
	j.stops = stops
	j.ignoreEOS = c.IgnoreEOS
	if c.CachePrompt != nil {
		j.cachePrompt = j.cachePrompt && *c.CachePrompt
	}
	j.stream = c.Stream
	if c.StreamOptions != nil {
		if !c.Stream {
			return badRequest("stream_options", "stream_options is only allowed with stream: true")
		}
		j.includeUsage = c.StreamOptions.IncludeUsage
	}
	return nil
}

// checkTopLogprobs checks how many alternatives per token a request asks for.
func checkTopLogprobs(param string, n int) *apiError {
	if n < 0 || n > maxTopLogprobs {
		return badRequest(param, "%s %d is outside [0, %d]", param, n, maxTopLogprobs)
	}
	return nil
}

// decodeStops reads stop: null, a string, or an array of strings.
func decodeStops(raw json.RawMessage) ([]string, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		raw = json.RawMessage(`[` + string(raw) + `]`)
	}
	var stops []string
	if err := json.Unmarshal(raw, &stops); err != nil {
		return nil, badRequest("stop", "stop must be a string or an array of strings")
	}
	if len(stops) > maxStops {
		return nil, badRequest("stop", "stop has %d sequences; at most %d are allowed", len(stops), maxStops)
	}
	for _, s := range stops {
		if s == "" {
			return nil, badRequest("stop", "stop sequences must not be empty")
		}
	}
	return stops, nil
}

// decodeChat validates a chat request and renders its messages with the model's chat
// template.
func (s *Server) decodeChat(body io.Reader) (*job, *apiError) {
	var req chatRequest
	j, err := s.decodeJob(body, &req)
	if err != nil {
		return nil, err
	}
	if req.TopLogprobs != nil {
		if err := checkTopLogprobs("top_logprobs", *req.TopLogprobs); err != nil {
			return nil, err
		}
		if !req.Logprobs {
			return nil, badRequest("top_logprobs", "top_logprobs needs logprobs: true")
		}
		j.topLogprobs = *req.TopLogprobs
	}
	j.logprobs = req.Logprobs
	if len(req.Messages) == 0 {
		return nil, badRequest("messages", "messages must be a non-empty array")
	}
	if len(req.Messages) > maxMessages {
		return nil, badRequest("messages", "%d messages: at most %d per request", len(req.Messages), maxMessages)
	}
	msgs := make([]any, len(req.Messages))
	for i, raw := range req.Messages {
		m, err := decodeMessage(raw)
		if err != nil {
			return nil, badRequest(fmt.Sprintf("messages[%d]", i), "messages[%d]: %v", i, err)
		}
		if s.harmony {
			harmonyMessage(m)
		}
		if s.objectArgs {
			parseArguments(m)
		}
		msgs[i] = m
	}
	tools, forcedName, forced, aerr := decodeTools(req.Tools, req.ToolChoice)
	if aerr != nil {
		return nil, aerr
	}
	if forced {
		if j.grammar != nil {
			return nil, badRequest("tool_choice", "a required tool call and a response format or grammar cannot both constrain the output")
		}
		parallel := req.ParallelToolCalls != nil && *req.ParallelToolCalls
		if j.grammar, aerr = s.callGrammar(req.Tools, forcedName, parallel); aerr != nil {
			return nil, aerr
		}
		j.forcedCall = true
	} else if tools != nil && j.grammar == nil && !s.harmony {
		// As llama.cpp's tool_choice auto: the calls' grammar waits for the call syntax to
		// begin, so that a call the model writes is a well-formed one. Tools whose schemas
		// have no grammar keep the calls free, as before.
		parallel := req.ParallelToolCalls != nil && *req.ParallelToolCalls
		if g, aerr := s.callGrammar(req.Tools, "", parallel); aerr == nil {
			j.grammar, j.trigger = g, s.syntax.callOpen
			if s.syntax.sectionOpen != "" {
				j.trigger = s.syntax.sectionOpen
			}
		}
	}
	j.tools, j.argTypes = tools != nil, toolArgTypes(tools)
	if j.budget, j.budgetMsg, aerr = s.reasoningBudget(&req); aerr != nil {
		return nil, aerr
	}
	j.control = req.ReasoningControl
	vars, aerr := s.templateVars(req.ChatTemplateKwargs, req.ReasoningEffort)
	if aerr != nil {
		return nil, aerr
	}
	text, rerr := s.template.Render(tokenizer.ChatInput{
		Messages:            msgs,
		Tools:               tools,
		Vars:                vars,
		AddGenerationPrompt: true,
		BOSToken:            s.vocab.Piece(s.vocab.BOS, true),
		EOSToken:            s.vocab.Piece(s.vocab.EOS, true),
	})
	if rerr != nil { // templates raise_exception on conversations they do not accept
		return nil, badRequest("messages", "%v", rerr)
	}
	j.promptText = text
	j.thinking = strings.HasSuffix(strings.TrimRight(text, "\n"), "<think>")
	// A template that writes the BOS token itself must not get a second one.
	addSpecial := s.vocab.BOS < 0 || !strings.HasPrefix(text, s.vocab.Piece(s.vocab.BOS, true))
	j.prompt = s.vocab.Encode(text, addSpecial, true)
	return j, s.checkPrompt(j.prompt)
}

// reasoningBudget is a chat request's reasoning budget and message, as llama-server reads
// them: reasoning_budget_tokens, else thinking_budget_tokens; -1 (or absent) takes the
// server's.
func (s *Server) reasoningBudget(req *chatRequest) (int, string, *apiError) {
	budget, field := -1, "reasoning_budget_tokens"
	switch {
	case req.ReasoningBudgetTokens != nil:
		budget = *req.ReasoningBudgetTokens
	case req.ThinkingBudgetTokens != nil:
		budget, field = *req.ThinkingBudgetTokens, "thinking_budget_tokens"
	}
	if budget < -1 {
		return 0, "", badRequest(field, "%s %d: want -1 (the server's budget) or a number of tokens", field, budget)
	}
	if budget == -1 {
		budget = s.budget
	}
	msg := s.budgetMsg
	if req.ReasoningBudgetMessage != nil {
		msg = *req.ReasoningBudgetMessage
	}
	return budget, msg, nil
}

// templateVars are the template variables of a chat request, as llama-server sets them:
// enable_thinking (true unless turned off), the server's --chat-template-kwargs, the
// request's chat_template_kwargs over them, and reasoning_effort.
func (s *Server) templateVars(kwargs json.RawMessage, effort *string) (map[string]any, *apiError) {
	vars := map[string]any{"enable_thinking": true}
	layers := []*tokenizer.Object{s.kwargs}
	if len(kwargs) > 0 && string(kwargs) != "null" {
		v, err := tokenizer.DecodeJSON(kwargs)
		if err != nil {
			return nil, badRequest("chat_template_kwargs", "chat_template_kwargs: %v", err)
		}
		o, ok := v.(*tokenizer.Object)
		if !ok {
			return nil, badRequest("chat_template_kwargs", "chat_template_kwargs must be an object of template variables, not %s", jsonTypeName(v))
		}
		layers = append(layers, o)
	}
	for _, o := range layers {
		if o == nil {
			continue
		}
		for _, k := range o.Keys {
			vars[k] = o.Values[k]
		}
	}
	if _, ok := vars["enable_thinking"].(bool); !ok {
		return nil, badRequest("chat_template_kwargs", "chat_template_kwargs: enable_thinking must be true or false, not %s", jsonTypeName(vars["enable_thinking"]))
	}
	if effort != nil {
		if *effort == "none" {
			vars["enable_thinking"] = false
		} else if *effort != "" {
			vars["reasoning_effort"] = *effort
		}
	}
	return vars, nil
}

// jsonTypeName names the type of a DecodeJSON value in JSON's terms.
func jsonTypeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	case *tokenizer.Object:
		return "an object"
	}
	return "a number"
}

// harmonyMessage hands an assistant turn's reasoning_content to gpt-oss's template as the
// "thinking" it reads, and drops the content of a turn that has both reasoning and tool
// calls, as llama.cpp's chat code prepares messages for this format. A null content (what
// OpenAI clients send beside tool calls) is dropped too: the template tests it with `in`,
// which a null cannot take (llama.cpp patches that test out of the template).
func harmonyMessage(m *tokenizer.Object) {
	if content, has := m.Values["content"]; has && content == nil {
		dropKey(m, "content")
	}
	reasoning, ok := m.Values["reasoning_content"].(string)
	if !ok {
		return
	}
	if _, has := m.Values["thinking"]; !has {
		m.Keys = append(m.Keys, "thinking")
	}
	m.Values["thinking"] = reasoning
	if calls, ok := m.Values["tool_calls"].([]any); ok && len(calls) > 0 {
		dropKey(m, "content")
	}
}

// dropKey removes key from m, if it is there.
func dropKey(m *tokenizer.Object, key string) {
	delete(m.Values, key)
	m.Keys = slices.DeleteFunc(m.Keys, func(k string) bool { return k == key })
}

// decodeTools checks a request's tools (OpenAI's function tools) and tool_choice, and
// returns the tools for the template (nil without tools or with tool_choice "none") and,
// for a call the request requires (tool_choice "required", or a named function), the
// name it must call ("" for any of the tools) with forced set.
func decodeTools(raw, choice json.RawMessage) (tools []any, name string, forced bool, aerr *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, "", false, nil
	}
	v, err := tokenizer.DecodeJSON(raw)
	if err != nil {
		return nil, "", false, badRequest("tools", "tools: %v", err)
	}
	tools, ok := v.([]any)
	if !ok {
		return nil, "", false, badRequest("tools", "tools must be an array of {\"type\": \"function\", \"function\": {\"name\", …}}")
	}
	names := map[string]bool{}
	for i, t := range tools {
		var fn *tokenizer.Object
		o, ok := t.(*tokenizer.Object)
		if ok {
			fn, _ = o.Values["function"].(*tokenizer.Object)
		}
		if !ok || o.Values["type"] != "function" || fn == nil {
			return nil, "", false, badRequest(fmt.Sprintf("tools[%d]", i), "tools[%d]: want {\"type\": \"function\", \"function\": {…}}", i)
		}
		name, _ := fn.Values["name"].(string)
		if name == "" {
			return nil, "", false, badRequest(fmt.Sprintf("tools[%d]", i), "tools[%d]: the function needs a \"name\"", i)
		}
		names[name] = true
	}
	switch c := strings.TrimSpace(string(choice)); c {
	case "", "null", `"auto"`:
	case `"none"`:
		return nil, "", false, nil
	case `"required"`:
		forced = true
	default:
		var named struct {
			Type     string `json:"type"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		if json.Unmarshal(choice, &named) != nil || named.Type != "function" || named.Function.Name == "" {
			return nil, "", false, badRequest("tool_choice", "tool_choice %s: want \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": …}}", c)
		}
		if !names[named.Function.Name] {
			return nil, "", false, badRequest("tool_choice", "tool_choice names %q, which is not among the tools", named.Function.Name)
		}
		name, forced = named.Function.Name, true
	}
	if len(tools) == 0 {
		if forced {
			return nil, "", false, badRequest("tool_choice", "tool_choice requires a call, but the request has no tools")
		}
		return nil, "", false, nil
	}
	return tools, name, forced, nil
}

// messageRoles are the roles of OpenAI's chat messages (developer is the newer name of
// system; function the older of tool).
var messageRoles = []string{"system", "developer", "user", "assistant", "tool", "function"}

// decodeMessage checks one chat message and flattens content given as an array of text
// parts into one string, the parts joined by newlines as llama.cpp joins them.
func decodeMessage(raw json.RawMessage) (*tokenizer.Object, error) {
	v, err := tokenizer.DecodeJSON(raw)
	if err != nil {
		return nil, err
	}
	m, ok := v.(*tokenizer.Object)
	if !ok {
		return nil, errors.New("a message must be an object")
	}
	role, ok := m.Values["role"].(string)
	if !ok || role == "" {
		return nil, errors.New(`a message needs a "role" string`)
	}
	if !slices.Contains(messageRoles, role) {
		return nil, fmt.Errorf("role %q: want one of %s", role, strings.Join(messageRoles, ", "))
	}
	switch content := m.Values["content"].(type) {
	case string, nil:
	case []any:
		var b strings.Builder
		for k, part := range content {
			p, ok := part.(*tokenizer.Object)
			if !ok || p.Values["type"] != "text" {
				return nil, fmt.Errorf("content[%d]: only text parts ({\"type\": \"text\", \"text\": …}) are supported", k)
			}
			text, ok := p.Values["text"].(string)
			if !ok {
				return nil, fmt.Errorf("content[%d]: a text part needs a \"text\" string", k)
			}
			if b.Len() > 0 { // llama.cpp joins text parts with newlines
				b.WriteByte('\n')
			}
			b.WriteString(text)
		}
		m.Values["content"] = b.String()
	default:
		return nil, errors.New(`"content" must be a string, an array of text parts, or null`)
	}
	return m, nil
}

// decodeCompletion validates a completions request and tokenizes its prompt: a string, or
// an array of token ids (a one-element array of either is accepted too).
func (s *Server) decodeCompletion(body io.Reader) (*job, *apiError) {
	var req completionRequest
	j, err := s.decodeJob(body, &req)
	if err != nil {
		return nil, err
	}
	switch {
	case req.Echo:
		return nil, badRequest("echo", "echo is not supported")
	case req.Suffix != nil && *req.Suffix != "":
		return nil, badRequest("suffix", "suffix is not supported")
	case req.BestOf != nil && *req.BestOf != 1:
		return nil, badRequest("best_of", "best_of %d: only 1 is supported", *req.BestOf)
	}
	if req.Logprobs != nil {
		if err := checkTopLogprobs("logprobs", *req.Logprobs); err != nil {
			return nil, err
		}
		j.logprobs, j.topLogprobs = true, *req.Logprobs
	}
	prompt, err := s.decodePrompt(req.Prompt)
	if err != nil {
		return nil, err
	}
	j.prompt = prompt
	return j, s.checkPrompt(j.prompt)
}

func (s *Server) decodePrompt(raw json.RawMessage) ([]int32, *apiError) {
	var text string
	if json.Unmarshal(raw, &text) == nil {
		return s.vocab.Encode(text, true, true), nil
	}
	var ids []int32
	if json.Unmarshal(raw, &ids) == nil {
		return ids, s.checkTokens("prompt", ids)
	}
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) == nil && len(list) == 1 {
		return s.decodePrompt(list[0])
	}
	if len(list) > 1 {
		return nil, badRequest("prompt", "prompt has %d entries: one prompt per request is supported", len(list))
	}
	return nil, badRequest("prompt", "prompt must be a string or an array of token ids")
}

// checkTokens rejects ids outside the vocabulary.
func (s *Server) checkTokens(param string, ids []int32) *apiError {
	for i, id := range ids {
		if id < 0 || int(id) >= s.vocab.Len() {
			return badRequest(param, "%s[%d]: %d is not a token id of this model (0..%d)", param, i, id, s.vocab.Len()-1)
		}
	}
	return nil
}

// checkPrompt refuses empty prompts and prompts a slot cannot hold, rather than truncating
// them.
func (s *Server) checkPrompt(prompt []int32) *apiError {
	if len(prompt) == 0 {
		return badRequest("prompt", "the prompt is empty")
	}
	if len(prompt) >= s.slotSize {
		return &apiError{Status: http.StatusBadRequest, Type: typeContextSize, Param: "prompt",
			Message: fmt.Sprintf("the request exceeds the available context size: the prompt is %d tokens and a slot holds %d; shorten it or raise -c (or lower -np)", len(prompt), s.slotSize)}
	}
	return nil
}
