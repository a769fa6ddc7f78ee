package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// OpenAI's Responses API (POST /v1/responses, /v1/responses/input_tokens), which Codex CLI
// and the openai client's responses.create speak and llama-server serves. As there, a
// request is turned into the chat request it means (server_chat_convert_responses_to_chatcmpl)
// and runs as one; the answer is a response object whose output holds reasoning, message and
// function_call items, and a stream is the Responses event sequence (response.created …
// response.completed), each event named by its type and numbered. Stored responses
// (previous_response_id) are not kept, as in llama-server.

// responsesRequest is a Responses request; the fields it shares with chat requests pass
// through unchanged.
type responsesRequest struct {
	Input        json.RawMessage `json:"input"`
	Instructions *string         `json:"instructions"`
	Tools        []struct {
		Type        string          `json:"type"`
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"tools"`
	ToolChoice      json.RawMessage `json:"tool_choice"`
	MaxOutputTokens *int            `json:"max_output_tokens"`
	Temperature     *float64        `json:"temperature"`
	TopP            *float64        `json:"top_p"`
	Stream          bool            `json:"stream"`
	Reasoning       *struct {
		Effort string `json:"effort"`
	} `json:"reasoning"`
	PreviousResponseID string          `json:"previous_response_id"`
	ChatTemplateKwargs json.RawMessage `json:"chat_template_kwargs"`
	// Text.Format is the Responses API's response format: {"type": "text"},
	// {"type": "json_object"} or {"type": "json_schema", "name", "schema", "strict"}.
	Text *struct {
		Format *struct {
			Type   string          `json:"type"`
			Schema json.RawMessage `json:"schema"`
		} `json:"format"`
	} `json:"text"`
}

// responsesItem is one input item, of any type.
type responsesItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments *string         `json:"arguments"`
	Output    json.RawMessage `json:"output"`
}

// toChat turns the request into the chat request it means.
func (q *responsesRequest) toChat() (map[string]any, *apiError) {
	if q.PreviousResponseID != "" {
		return nil, badRequest("previous_response_id", "previous_response_id: moerun does not store responses; send the whole conversation as input")
	}
	var msgs []map[string]any
	if q.Instructions != nil {
		msgs = append(msgs, map[string]any{"role": "system", "content": *q.Instructions})
	}
	var text string
	switch {
	case len(q.Input) == 0 || string(q.Input) == "null":
		return nil, badRequest("input", "input is required: a string or an array of input items")
	case json.Unmarshal(q.Input, &text) == nil:
		msgs = append(msgs, map[string]any{"role": "user", "content": text})
	default:
		var items []responsesItem
		if err := json.Unmarshal(q.Input, &items); err != nil {
			return nil, badRequest("input", "input must be a string or an array of input items")
		}
		for i, it := range items {
			var err *apiError
			if msgs, err = appendResponsesItem(msgs, it, fmt.Sprintf("input[%d]", i)); err != nil {
				return nil, err
			}
		}
	}
	chat := map[string]any{"messages": msgs, "stream": q.Stream}
	var tools []any
	for i, t := range q.Tools {
		if t.Type != "function" || t.Name == "" {
			return nil, badRequest(fmt.Sprintf("tools[%d]", i), "tools[%d]: only function tools ({\"type\": \"function\", \"name\", \"parameters\"}) are supported", i)
		}
		fn := map[string]any{"name": t.Name, "description": t.Description}
		if len(t.Parameters) > 0 {
			fn["parameters"] = t.Parameters
		}
		tools = append(tools, map[string]any{"type": "function", "function": fn})
	}
	if len(tools) > 0 {
		chat["tools"] = tools
	}
	if len(q.ToolChoice) > 0 {
		chat["tool_choice"] = q.ToolChoice
	}
	if q.MaxOutputTokens != nil {
		chat["max_tokens"] = *q.MaxOutputTokens
	}
	if q.Temperature != nil {
		chat["temperature"] = *q.Temperature
	}
	if q.TopP != nil {
		chat["top_p"] = *q.TopP
	}
	if q.Reasoning != nil && q.Reasoning.Effort != "" {
		chat["reasoning_effort"] = q.Reasoning.Effort
	}
	if len(q.ChatTemplateKwargs) > 0 {
		chat["chat_template_kwargs"] = q.ChatTemplateKwargs
	}
	if q.Text != nil && q.Text.Format != nil {
		switch f := q.Text.Format; f.Type {
		case "", "text":
		case "json_object":
			chat["response_format"] = map[string]any{"type": "json_object"}
		case "json_schema":
			if isNull(f.Schema) {
				return nil, badRequest("text.format.schema", "text.format: a json_schema format needs its schema")
			}
			chat["response_format"] = map[string]any{"type": "json_schema", "json_schema": map[string]any{"schema": f.Schema}}
		default:
			return nil, badRequest("text.format.type", "text.format type must be \"text\", \"json_object\" or \"json_schema\", not %q", f.Type)
		}
	}
	return chat, nil
}

// appendResponsesItem adds one input item to the chat messages: messages by role (input or
// output text), function calls and reasoning joined to the assistant turn before them,
// function call outputs as tool messages.
func appendResponsesItem(msgs []map[string]any, it responsesItem, field string) ([]map[string]any, *apiError) {
	var last map[string]any
	if n := len(msgs); n > 0 && msgs[n-1]["role"] == "assistant" {
		last = msgs[n-1]
	}
	assistant := func() map[string]any {
		if last == nil {
			last = map[string]any{"role": "assistant", "content": ""}
			msgs = append(msgs, last)
		}
		return last
	}
	switch {
	case it.Type == "function_call":
		if it.CallID == "" || it.Name == "" || it.Arguments == nil {
			return nil, badRequest(field, "%s: a function_call needs call_id, name and arguments", field)
		}
		m := assistant()
		calls, _ := m["tool_calls"].([]any)
		m["tool_calls"] = append(calls, map[string]any{"id": it.CallID, "type": "function",
			"function": map[string]any{"name": it.Name, "arguments": *it.Arguments}})
	case it.Type == "function_call_output":
		out, err := responsesText(it.Output, field+".output")
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, map[string]any{"role": "tool", "tool_call_id": it.CallID, "content": out})
	case it.Type == "reasoning":
		var parts []struct {
			Text string `json:"text"`
		}
		if json.Unmarshal(it.Content, &parts) == nil && len(parts) > 0 {
			assistant()["reasoning_content"] = parts[0].Text
		}
	case it.Type == "message" || it.Type == "":
		if it.Role != "user" && it.Role != "assistant" && it.Role != "system" && it.Role != "developer" {
			return nil, badRequest(field+".role", "%s.role %q: want user, assistant, system or developer", field, it.Role)
		}
		text, err := responsesText(it.Content, field+".content")
		if err != nil {
			return nil, err
		}
		if it.Role == "assistant" {
			m := assistant()
			m["content"] = m["content"].(string) + text
		} else {
			msgs = append(msgs, map[string]any{"role": it.Role, "content": text})
		}
	default:
		return nil, badRequest(field+".type", "%s.type %q: moerun takes message, function_call, function_call_output and reasoning items", field, it.Type)
	}
	return msgs, nil
}

// responsesText reads content: a string, or parts of input_text or output_text, joined.
func responsesText(raw json.RawMessage, field string) (string, *apiError) {
	var text string
	if json.Unmarshal(raw, &text) == nil {
		return text, nil
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", badRequest(field, "%s must be a string or an array of text parts", field)
	}
	var b bytes.Buffer
	for i, p := range parts {
		if p.Type != "input_text" && p.Type != "output_text" || p.Text == nil {
			return "", badRequest(field, "%s[%d]: only input_text and output_text parts are supported, not %q", field, i, p.Type)
		}
		b.WriteString(*p.Text)
	}
	return b.String(), nil
}

// responses is POST /v1/responses.
func (s *Server) responses(w http.ResponseWriter, r *http.Request, log *requestLog) *apiError {
	j, aerr := s.decodeAs(r, &responsesRequest{})
	if aerr != nil {
		return aerr
	}
	return s.respond(w, r, log, j, &responsesFormat{s: s, j: j, id: newID("resp_"), created: time.Now().Unix(), textParser: textParser{s.outputParser(j)}})
}

// inputTokens is POST /v1/responses/input_tokens: the prompt's length, without generating.
func (s *Server) inputTokens(w http.ResponseWriter, r *http.Request, _ *requestLog) *apiError {
	j, aerr := s.decodeAs(r, &responsesRequest{})
	if aerr != nil {
		return aerr
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "response.input_tokens", "input_tokens": len(j.prompt)})
	return nil
}

// responsesFormat shapes a generation as a response object and its event stream.
type responsesFormat struct {
	textParser
	s       *Server
	j       *job
	id      string
	created int64
	seq     int // the next event's sequence_number
	started bool
	output  []map[string]any // the items so far, as the final response lists them
	open    string           // "reasoning" or "message" while one streams, else ""
	text    string           // the open item's text so far
	// streamed is the call being streamed in parts (see callPart), the last output item.
	streamed toolCall
}

// outputItem is a finished reasoning or message output item.
func outputItem(kind, id, text string) map[string]any {
	if kind == "reasoning" {
		return map[string]any{"type": "reasoning", "id": id, "summary": []any{}, "status": "completed",
			"content": []any{map[string]any{"type": "reasoning_text", "text": text}}}
	}
	return map[string]any{"type": "message", "id": id, "status": "completed", "role": "assistant",
		"content": []any{textPart(text)}}
}

func textPart(text string) map[string]any {
	return map[string]any{"type": "output_text", "text": text, "annotations": []any{}}
}

func callItem(c toolCall, status string) map[string]any {
	return map[string]any{"type": "function_call", "id": "fc_" + c.ID, "call_id": c.ID, "name": c.Function.Name,
		"arguments": c.Function.Arguments, "status": status}
}

// response is the response object: its output, status and usage.
func (f *responsesFormat) response(status string, res *result) map[string]any {
	r := map[string]any{"id": f.id, "object": "response", "created_at": f.created, "status": status, "model": f.s.name,
		"output": f.output}
	if f.output == nil {
		r["output"] = []any{}
	}
	if res != nil {
		r["usage"] = map[string]any{"input_tokens": res.promptTokens, "output_tokens": res.completionTokens,
			"total_tokens": res.promptTokens + res.completionTokens, "input_tokens_details": map[string]int{"cached_tokens": res.cachedTokens}}
		if res.finishReason == "length" {
			r["status"], r["incomplete_details"] = "incomplete", map[string]string{"reason": "max_output_tokens"}
		}
	}
	return r
}

func (f *responsesFormat) whole(res result) any {
	p := f.all(res.text)
	if p.reasoning != "" {
		f.output = append(f.output, outputItem("reasoning", newID("rs_"), p.reasoning))
	}
	if p.content != "" {
		f.output = append(f.output, outputItem("message", newID("msg_"), p.content))
	}
	for _, c := range p.calls {
		f.output = append(f.output, callItem(c, "completed"))
	}
	r := f.response("completed", &res)
	r["completed_at"] = time.Now().Unix()
	return r
}

// event is the next event of the stream, named by its type and numbered.
func (f *responsesFormat) event(typ string, fields map[string]any) sseEvent {
	fields["type"], fields["sequence_number"] = typ, f.seq
	f.seq++
	return sseEvent{typ, fields}
}

// events turns a parsed piece into stream events: an item starts when the kind of text
// changes and ends when another begins; each call is a whole function_call item.
func (f *responsesFormat) events(p parsed) []sseEvent {
	var ev []sseEvent
	if !f.started {
		f.started = true
		ev = append(ev, f.event("response.created", map[string]any{"response": f.response("in_progress", nil)}),
			f.event("response.in_progress", map[string]any{"response": f.response("in_progress", nil)}))
	}
	text := func(kind, s string) {
		if s == "" {
			return
		}
		if f.open != kind {
			ev = append(ev, f.closeItem()...)
			prefix := map[string]string{"reasoning": "rs_", "message": "msg_"}[kind]
			item := outputItem(kind, newID(prefix), "")
			item["status"], item["content"] = "in_progress", []any{}
			f.output = append(f.output, item)
			f.open, f.text = kind, ""
			ev = append(ev, f.event("response.output_item.added", map[string]any{"output_index": len(f.output) - 1, "item": item}))
			if kind == "message" {
				ev = append(ev, f.event("response.content_part.added", map[string]any{"item_id": item["id"], "output_index": len(f.output) - 1,
					"content_index": 0, "part": textPart("")}))
			}
		}
		f.text += s
		delta := map[string]string{"reasoning": "response.reasoning_text.delta", "message": "response.output_text.delta"}[kind]
		ev = append(ev, f.event(delta, map[string]any{"item_id": f.output[len(f.output)-1]["id"], "output_index": len(f.output) - 1,
			"content_index": 0, "delta": s}))
	}
	text("reasoning", p.reasoning)
	text("message", p.content)
	for _, c := range p.calls {
		ev = append(ev, f.closeItem()...)
		f.output = append(f.output, callItem(c, "in_progress"))
		at := len(f.output) - 1
		ev = append(ev,
			f.event("response.output_item.added", map[string]any{"output_index": at, "item": callItem(c, "in_progress")}),
			f.event("response.function_call_arguments.delta", map[string]any{"item_id": "fc_" + c.ID, "output_index": at, "delta": c.Function.Arguments}),
			f.event("response.function_call_arguments.done", map[string]any{"item_id": "fc_" + c.ID, "output_index": at, "arguments": c.Function.Arguments}))
		f.output[at] = callItem(c, "completed")
		ev = append(ev, f.event("response.output_item.done", map[string]any{"output_index": at, "item": f.output[at]}))
	}
	for _, part := range p.parts {
		at := len(f.output) - 1
		c := &f.streamed
		switch {
		case part.first:
			ev = append(ev, f.closeItem()...)
			*c = toolCall{ID: part.id}
			c.Function.Name = part.name
			f.output = append(f.output, callItem(*c, "in_progress"))
			ev = append(ev, f.event("response.output_item.added", map[string]any{"output_index": at + 1, "item": callItem(*c, "in_progress")}))
		case part.last:
			f.output[at] = callItem(*c, "completed")
			ev = append(ev,
				f.event("response.function_call_arguments.done", map[string]any{"item_id": "fc_" + c.ID, "output_index": at, "arguments": c.Function.Arguments}),
				f.event("response.output_item.done", map[string]any{"output_index": at, "item": f.output[at]}))
		default:
			c.Function.Arguments += part.args
			ev = append(ev, f.event("response.function_call_arguments.delta", map[string]any{"item_id": "fc_" + c.ID, "output_index": at, "delta": part.args}))
		}
	}
	return ev
}

// closeItem ends the reasoning or message item being streamed, if any.
func (f *responsesFormat) closeItem() []sseEvent {
	if f.open == "" {
		return nil
	}
	at := len(f.output) - 1
	id := f.output[at]["id"].(string)
	done := outputItem(f.open, id, f.text)
	f.output[at] = done
	var ev []sseEvent
	if f.open == "message" {
		ev = append(ev, f.event("response.output_text.done", map[string]any{"item_id": id, "output_index": at, "content_index": 0, "text": f.text}),
			f.event("response.content_part.done", map[string]any{"item_id": id, "output_index": at, "content_index": 0, "part": textPart(f.text)}))
	} else {
		ev = append(ev, f.event("response.reasoning_text.done", map[string]any{"item_id": id, "output_index": at, "content_index": 0, "text": f.text}))
	}
	f.open, f.text = "", ""
	return append(ev, f.event("response.output_item.done", map[string]any{"output_index": at, "item": done}))
}

func (f *responsesFormat) delta(text string, _ []tokenLogprob) any {
	return anyEvents(f.events(f.piece(text)))
}

func (f *responsesFormat) finish(res result) any {
	ev := append(f.events(f.end()), f.closeItem()...)
	r := f.response("completed", &res)
	typ := "response.completed"
	if r["status"] == "incomplete" {
		typ = "response.incomplete"
	}
	return append(ev, f.event(typ, map[string]any{"response": r}))
}

// usage is never asked for: the last event carries it.
func (f *responsesFormat) usage(result) any { return nil }
