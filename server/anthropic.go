package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens), which
// llama-server also serves and Claude Code and the @anthropic-ai/sdk client speak. A request
// is turned into the chat request it means (the conversion llama-server makes in
// server_chat_convert_anthropic_to_oai) and runs as one; the answer is shaped as Anthropic
// shapes it: content blocks (thinking, text, tool_use), stop_reason, and for streams named
// events (message_start, content_block_start/delta/stop, message_delta, message_stop).

// anthropicRequest is a Messages request. Fields moerun does not use (metadata,
// anthropic-version's extras) are accepted and ignored.
type anthropicRequest struct {
	Model              string            `json:"model"`
	MaxTokens          *int              `json:"max_tokens"`
	System             json.RawMessage   `json:"system"`
	Messages           []json.RawMessage `json:"messages"`
	Tools              []json.RawMessage `json:"tools"`
	ToolChoice         json.RawMessage   `json:"tool_choice"`
	StopSequences      []string          `json:"stop_sequences"`
	Temperature        *float64          `json:"temperature"`
	TopP               *float64          `json:"top_p"`
	TopK               *int              `json:"top_k"`
	Stream             bool              `json:"stream"`
	Thinking           *anthropicThink   `json:"thinking"`
	ChatTemplateKwargs json.RawMessage   `json:"chat_template_kwargs"`
}

type anthropicThink struct {
	Type         string `json:"type"` // enabled, disabled
	BudgetTokens *int   `json:"budget_tokens"`
}

// anthropicThinkingBudget is the reasoning budget of thinking enabled without a
// budget_tokens, llama-server's.
const anthropicThinkingBudget = 10000

// anthropicBlock is one content block of a message, of any type.
type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	Thinking  string          `json:"thinking"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"` // a tool_result's: a string or text blocks
}

// anthropicDefaultMaxTokens is llama-server's when a request leaves max_tokens out (the API
// requires it; clients always send it).
const anthropicDefaultMaxTokens = 4096

// toChat turns the request into the OpenAI chat request it means.
func (a *anthropicRequest) toChat() (map[string]any, *apiError) {
	var msgs []any
	if len(a.System) > 0 && string(a.System) != "null" {
		text, err := anthropicText(a.System, "system")
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, map[string]any{"role": "system", "content": text})
	}
	if len(a.Messages) == 0 {
		return nil, badRequest("messages", "messages must be a non-empty array")
	}
	for i, raw := range a.Messages {
		converted, err := anthropicMessage(raw, fmt.Sprintf("messages[%d]", i))
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, converted...)
	}
	chat := map[string]any{"messages": msgs, "stream": a.Stream, "max_tokens": anthropicDefaultMaxTokens}
	if a.MaxTokens != nil {
		chat["max_tokens"] = *a.MaxTokens
	}
	if len(a.Tools) > 0 {
		var tools []any
		for i, raw := range a.Tools {
			var t struct {
				Name        string          `json:"name"`
				Description string          `json:"description"`
				InputSchema json.RawMessage `json:"input_schema"`
			}
			if err := json.Unmarshal(raw, &t); err != nil || t.Name == "" {
				return nil, badRequest(fmt.Sprintf("tools[%d]", i), "tools[%d]: want {\"name\", \"description\", \"input_schema\"}", i)
			}
			fn := map[string]any{"name": t.Name, "description": t.Description}
			if len(t.InputSchema) > 0 {
				fn["parameters"] = t.InputSchema
			}
			tools = append(tools, map[string]any{"type": "function", "function": fn})
		}
		chat["tools"] = tools
	}
	if len(a.ToolChoice) > 0 && string(a.ToolChoice) != "null" {
		var tc struct {
			Type string `json:"type"`
			Name string `json:"name"`
		}
		if err := json.Unmarshal(a.ToolChoice, &tc); err != nil {
			return nil, badRequest("tool_choice", "tool_choice must be {\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"}")
		}
		switch tc.Type {
		case "auto", "none":
			chat["tool_choice"] = tc.Type
		case "any":
			chat["tool_choice"] = "required"
		case "tool":
			chat["tool_choice"] = map[string]any{"type": "function", "function": map[string]any{"name": tc.Name}}
		default:
			return nil, badRequest("tool_choice", "tool_choice type %q: want auto, any, tool or none", tc.Type)
		}
	}
	if len(a.StopSequences) > 0 {
		chat["stop"] = a.StopSequences
	}
	for k, v := range map[string]any{"temperature": a.Temperature, "top_p": a.TopP, "top_k": a.TopK} {
		if !isNilPointer(v) {
			chat[k] = v
		}
	}
	if len(a.ChatTemplateKwargs) > 0 {
		chat["chat_template_kwargs"] = a.ChatTemplateKwargs
	}
	if a.Thinking != nil {
		switch a.Thinking.Type {
		case "enabled": // thinking is on by default; its budget is the reasoning budget
			budget := anthropicThinkingBudget
			if a.Thinking.BudgetTokens != nil {
				budget = *a.Thinking.BudgetTokens
			}
			chat["thinking_budget_tokens"] = budget
		case "disabled":
			chat["reasoning_effort"] = "none"
		default:
			return nil, badRequest("thinking", "thinking type %q: want enabled or disabled", a.Thinking.Type)
		}
	}
	return chat, nil
}

func isNilPointer(v any) bool {
	switch p := v.(type) {
	case *float64:
		return p == nil
	case *int:
		return p == nil
	}
	return v == nil
}

// anthropicText reads a system prompt or a tool result: a string or an array of text
// blocks, joined.
func anthropicText(raw json.RawMessage, field string) (string, *apiError) {
	var text string
	if json.Unmarshal(raw, &text) == nil {
		return text, nil
	}
	var blocks []anthropicBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "", badRequest(field, "%s must be a string or an array of text blocks", field)
	}
	var b strings.Builder
	for i, blk := range blocks {
		if blk.Type != "text" {
			return "", badRequest(field, "%s[%d]: only text blocks are supported here, not %q", field, i, blk.Type)
		}
		b.WriteString(blk.Text)
	}
	return b.String(), nil
}

// anthropicMessage turns one message into chat messages: a user turn's tool results become
// tool messages (before its text, which follows them in the conversation); an assistant
// turn's thinking becomes reasoning_content and its tool_use blocks tool_calls.
func anthropicMessage(raw json.RawMessage, field string) ([]any, *apiError) {
	var m struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, badRequest(field, "%s must be {\"role\", \"content\"}", field)
	}
	if m.Role != "user" && m.Role != "assistant" {
		return nil, badRequest(field+".role", "%s.role %q: want user or assistant (the system prompt is the request's \"system\")", field, m.Role)
	}
	var text string
	if json.Unmarshal(m.Content, &text) == nil {
		return []any{map[string]any{"role": m.Role, "content": text}}, nil
	}
	var blocks []anthropicBlock
	if err := json.Unmarshal(m.Content, &blocks); err != nil {
		return nil, badRequest(field+".content", "%s.content must be a string or an array of content blocks", field)
	}
	var out, parts, calls []any
	var reasoning strings.Builder
	for i, blk := range blocks {
		at := fmt.Sprintf("%s.content[%d]", field, i)
		switch blk.Type {
		case "text":
			parts = append(parts, map[string]any{"type": "text", "text": blk.Text})
		case "thinking":
			reasoning.WriteString(blk.Thinking)
		case "redacted_thinking": // encrypted by Anthropic's models: nothing a local model can read
		case "tool_use":
			input := blk.Input
			if len(input) == 0 || string(input) == "null" {
				input = json.RawMessage("{}")
			}
			var args bytes.Buffer
			if err := json.Compact(&args, input); err != nil || args.Bytes()[0] != '{' {
				return nil, badRequest(at+".input", "%s.input must be an object", at)
			}
			calls = append(calls, map[string]any{"id": blk.ID, "type": "function",
				"function": map[string]any{"name": blk.Name, "arguments": args.String()}})
		case "tool_result":
			content := ""
			if len(blk.Content) > 0 && string(blk.Content) != "null" {
				var err *apiError
				if content, err = anthropicText(blk.Content, at+".content"); err != nil {
					return nil, err
				}
			}
			out = append(out, map[string]any{"role": "tool", "tool_call_id": blk.ToolUseID, "content": content})
		default:
			return nil, badRequest(at, "%s: %q blocks are not supported (text, thinking, tool_use and tool_result are)", at, blk.Type)
		}
	}
	if len(parts) == 0 && len(calls) == 0 && reasoning.Len() == 0 {
		return out, nil
	}
	msg := map[string]any{"role": m.Role, "content": ""}
	if len(parts) > 0 {
		msg["content"] = parts
	}
	if len(calls) > 0 {
		msg["tool_calls"] = calls
	}
	if reasoning.Len() > 0 {
		msg["reasoning_content"] = reasoning.String()
	}
	return append(out, msg), nil
}

// chatMeaning is a request of another API (Anthropic's Messages, OpenAI's Responses) that
// means a chat request.
type chatMeaning interface {
	toChat() (map[string]any, *apiError)
}

// decodeAs reads a request of another API into req and returns the chat job it means.
func (s *Server) decodeAs(r *http.Request, req chatMeaning) (*job, *apiError) {
	if err := decodeBody(r.Body, req); err != nil {
		return nil, err
	}
	chat, aerr := req.toChat()
	if aerr != nil {
		return nil, aerr
	}
	body, err := json.Marshal(chat)
	if err != nil {
		return nil, internalError(err)
	}
	return s.decodeChat(bytes.NewReader(body))
}

// messages is POST /v1/messages.
func (s *Server) messages(w http.ResponseWriter, r *http.Request, log *requestLog) *apiError {
	j, aerr := s.decodeAs(r, &anthropicRequest{})
	if aerr != nil {
		return aerr
	}
	return s.respond(w, r, log, j, &anthropicFormat{s: s, j: j, id: newID("msg_"), textParser: textParser{s.outputParser(j)}})
}

// countTokens is POST /v1/messages/count_tokens: the prompt's length, without generating.
func (s *Server) countTokens(w http.ResponseWriter, r *http.Request, _ *requestLog) *apiError {
	j, aerr := s.decodeAs(r, &anthropicRequest{})
	if aerr != nil {
		return aerr
	}
	writeJSON(w, http.StatusOK, map[string]int{"input_tokens": len(j.prompt)})
	return nil
}

// anthropicError is Anthropic's error body.
func anthropicError(e *apiError) any {
	return map[string]any{"type": "error", "error": map[string]string{"type": e.Type, "message": e.Message}}
}

// sseEvent is a named server-sent event (Anthropic's streams name every event).
type sseEvent struct {
	name string
	data any
}

// textParser splits a format's generated text with the request's output parser (without
// one, the text is all content).
type textParser struct {
	parser outputParser
}

func (t textParser) piece(text string) parsed {
	if t.parser == nil {
		return parsed{content: text}
	}
	return t.parser.add(text)
}

// end is what the parser held back at the end of the text.
func (t textParser) end() parsed {
	if t.parser == nil {
		return parsed{}
	}
	return t.parser.flush()
}

// all splits a whole text.
func (t textParser) all(text string) parsed {
	p := t.piece(text)
	p.append(t.end())
	return p
}

// anyEvents is a stream's chunk of events, nil when there are none yet.
func anyEvents(ev []sseEvent) any {
	if len(ev) == 0 {
		return nil
	}
	return ev
}

// anthropicFormat shapes a generation as Messages responses and stream events.
type anthropicFormat struct {
	textParser
	s       *Server
	j       *job
	id      string
	started bool   // message_start was sent
	blocks  int    // content blocks started so far
	open    string // the type of the block being streamed ("" when none)
	calls   int
}

// anthropicBlocks are a message's content blocks: thinking, text, tool uses.
func anthropicBlocks(p parsed) []any {
	var blocks []any
	if p.reasoning != "" {
		blocks = append(blocks, map[string]any{"type": "thinking", "thinking": p.reasoning, "signature": ""})
	}
	if p.content != "" {
		blocks = append(blocks, map[string]any{"type": "text", "text": p.content})
	}
	for _, c := range p.calls {
		blocks = append(blocks, map[string]any{"type": "tool_use", "id": c.ID, "name": c.Function.Name, "input": callInput(c)})
	}
	return blocks
}

// callInput is a call's arguments as the object tool_use carries ({} if they are not one).
func callInput(c toolCall) json.RawMessage {
	var obj map[string]json.RawMessage
	if json.Unmarshal([]byte(c.Function.Arguments), &obj) != nil || obj == nil {
		return json.RawMessage("{}")
	}
	return json.RawMessage(c.Function.Arguments)
}

// stopReason is Anthropic's: end_turn (an end-of-generation token or a stop sequence, as
// llama-server reports both), tool_use, or max_tokens.
func (f *anthropicFormat) stopReason(res result, calls int) string {
	switch {
	case res.finishReason == "length":
		return "max_tokens"
	case calls > 0:
		return "tool_use"
	}
	return "end_turn"
}

func (f *anthropicFormat) usageOf(res result) map[string]int {
	return map[string]int{"input_tokens": res.promptTokens - res.cachedTokens, "cache_read_input_tokens": res.cachedTokens, "output_tokens": res.completionTokens}
}

func (f *anthropicFormat) whole(res result) any {
	p := f.all(res.text)
	return map[string]any{"id": f.id, "type": "message", "role": "assistant", "model": f.s.name, "content": anthropicBlocks(p),
		"stop_reason": f.stopReason(res, len(p.calls)), "stop_sequence": nil, "usage": f.usageOf(res)}
}

// events turns a parsed piece into stream events, starting and ending blocks as the kind
// of text changes; each call is a whole tool_use block.
func (f *anthropicFormat) events(p parsed) []sseEvent {
	var ev []sseEvent
	if !f.started {
		f.started = true
		ev = append(ev, sseEvent{"message_start", map[string]any{"type": "message_start", "message": map[string]any{
			"id": f.id, "type": "message", "role": "assistant", "model": f.s.name, "content": []any{},
			"stop_reason": nil, "stop_sequence": nil, "usage": map[string]int{"input_tokens": len(f.j.prompt), "output_tokens": 0}}}})
	}
	text := func(kind, field, s string) {
		if s == "" {
			return
		}
		if f.open != kind {
			ev = append(ev, f.closeBlock()...)
			ev = append(ev, sseEvent{"content_block_start", map[string]any{"type": "content_block_start", "index": f.blocks,
				"content_block": map[string]any{"type": kind, field: ""}}})
			f.open = kind
		}
		ev = append(ev, sseEvent{"content_block_delta", map[string]any{"type": "content_block_delta", "index": f.blocks,
			"delta": map[string]any{"type": field + "_delta", field: s}}})
	}
	text("thinking", "thinking", p.reasoning)
	text("text", "text", p.content)
	for _, c := range p.calls {
		ev = append(ev, f.closeBlock()...)
		ev = append(ev,
			sseEvent{"content_block_start", map[string]any{"type": "content_block_start", "index": f.blocks,
				"content_block": map[string]any{"type": "tool_use", "id": c.ID, "name": c.Function.Name, "input": map[string]any{}}}},
			sseEvent{"content_block_delta", map[string]any{"type": "content_block_delta", "index": f.blocks,
				"delta": map[string]any{"type": "input_json_delta", "partial_json": string(callInput(c))}}},
			sseEvent{"content_block_stop", map[string]any{"type": "content_block_stop", "index": f.blocks}})
		f.blocks++
		f.calls++
	}
	for _, part := range p.parts {
		switch {
		case part.first:
			ev = append(ev, f.closeBlock()...)
			ev = append(ev, sseEvent{"content_block_start", map[string]any{"type": "content_block_start", "index": f.blocks,
				"content_block": map[string]any{"type": "tool_use", "id": part.id, "name": part.name, "input": map[string]any{}}}})
			f.open = "tool_use"
			f.calls++
		case part.last:
			ev = append(ev, f.closeBlock()...)
		default:
			ev = append(ev, sseEvent{"content_block_delta", map[string]any{"type": "content_block_delta", "index": f.blocks,
				"delta": map[string]any{"type": "input_json_delta", "partial_json": part.args}}})
		}
	}
	return ev
}

// closeBlock ends the block being streamed, if any.
func (f *anthropicFormat) closeBlock() []sseEvent {
	if f.open == "" {
		return nil
	}
	ev := sseEvent{"content_block_stop", map[string]any{"type": "content_block_stop", "index": f.blocks}}
	f.open = ""
	f.blocks++
	return []sseEvent{ev}
}

func (f *anthropicFormat) delta(text string, _ []tokenLogprob) any {
	return anyEvents(f.events(f.piece(text)))
}

func (f *anthropicFormat) finish(res result) any {
	ev := append(f.events(f.end()), f.closeBlock()...)
	return append(ev,
		sseEvent{"message_delta", map[string]any{"type": "message_delta",
			"delta": map[string]any{"stop_reason": f.stopReason(res, f.calls), "stop_sequence": nil}, "usage": f.usageOf(res)}},
		sseEvent{"message_stop", map[string]any{"type": "message_stop"}})
}

// usage is never asked for: Anthropic's streams carry it in message_delta.
func (f *anthropicFormat) usage(res result) any { return nil }
