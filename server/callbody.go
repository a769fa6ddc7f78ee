package server

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/moerun/moerun/tokenizer"
)

// argTypes are the JSON-schema types of the request's tools' parameters: function name →
// parameter name → "string", "integer", …. Families that write each argument as text (GLM's
// <arg_value>, Qwen3-Coder's <parameter=…>) write a string parameter bare and everything
// else as JSON, so the type decides how a value such as 42 is read back.
type argTypes map[string]map[string]string

// toolArgTypes reads the parameter types of a request's tools (as decodeTools checked them).
func toolArgTypes(tools []any) argTypes {
	types := argTypes{}
	for _, t := range tools {
		fn, _ := t.(*tokenizer.Object).Values["function"].(*tokenizer.Object)
		name, _ := fn.Values["name"].(string)
		params, _ := fn.Values["parameters"].(*tokenizer.Object)
		if params == nil {
			continue
		}
		props, _ := params.Values["properties"].(*tokenizer.Object)
		if props == nil {
			continue
		}
		types[name] = map[string]string{}
		for _, k := range props.Keys {
			if p, ok := props.Values[k].(*tokenizer.Object); ok {
				types[name][k], _ = p.Values["type"].(string)
			}
		}
	}
	return types
}

// callForm is how a family writes a call's body between its tags:
//
//   - jsonForm, Hermes (Qwen3): {"name": "f", "arguments": {…}}
//   - xmlForm, Qwen3-Coder and Qwen3.5: <function=f>\n<parameter=k>\nv\n</parameter>\n</function>
//   - glmForm, GLM-4.5 to 4.7: f\n<arg_key>k</arg_key>\n<arg_value>v</arg_value>…
//   - deepseekForm, DeepSeek-V3 and R1: function<｜tool▁sep｜>f\n```json\n{…}\n```; V3.1:
//     f<｜tool▁sep｜>{…}
type callForm int

const (
	jsonForm callForm = iota
	xmlForm
	glmForm
	deepseekForm
)

// parseCallBody reads the text between a call's tags, written in form or, as models of
// every family sometimes write it, as Hermes JSON; it returns the function's name and its
// arguments as a JSON object's text. ok is false for text in neither.
func parseCallBody(raw string, form callForm, types argTypes) (name, args string, ok bool) {
	if strings.HasPrefix(raw, "{") {
		return parseHermesCall(raw)
	}
	switch form {
	case xmlForm:
		return parseXMLCall(raw, types)
	case glmForm:
		return parseGLMCall(raw, types)
	case deepseekForm:
		return parseDeepSeekCall(raw)
	}
	return "", "", false
}

func parseHermesCall(raw string) (name, args string, ok bool) {
	var body struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if err := json.Unmarshal([]byte(raw), &body); err != nil || body.Name == "" {
		return "", "", false
	}
	return body.Name, argumentsText(body.Arguments), true
}

// argumentsText is a call's arguments as text: {} when absent, the string's content when
// the model wrote them as a JSON string, else the JSON as written.
func argumentsText(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "{}"
	}
	var text string
	if json.Unmarshal(raw, &text) == nil {
		return text
	}
	return string(raw)
}

func parseDeepSeekCall(raw string) (name, args string, ok bool) {
	head, rest, _ := strings.Cut(raw, deepseekSep)
	if head != "function" { // V3.1: the name, then the arguments
		name, args = strings.TrimSpace(head), rest
	} else { // V3 and R1: the name on its line, the arguments in a JSON code block
		name, args, _ = strings.Cut(rest, "\n")
		args = strings.TrimSpace(args)
		args = strings.TrimPrefix(args, "```json")
		args = strings.TrimSuffix(args, "```")
	}
	if name == "" || !json.Valid([]byte(args)) {
		return "", "", false
	}
	return name, argumentsText(json.RawMessage(args)), true
}

// parseXMLCall reads Qwen3-Coder's form. A value is written between a newline after the
// opening tag and one before the closing tag.
func parseXMLCall(raw string, types argTypes) (name, args string, ok bool) {
	rest := strings.TrimPrefix(raw, "<function=")
	name, rest, found := strings.Cut(rest, ">")
	if !found || name == "" || !strings.HasSuffix(rest, "</function>") {
		return "", "", false
	}
	obj := newArgsWriter(types[name])
	ok = readArgs(strings.TrimSuffix(rest, "</function>"), obj, func(r string) (key, value, tail string, ok bool) {
		after, found := strings.CutPrefix(r, "<parameter=")
		key, body, closed := strings.Cut(after, ">")
		value, tail, ended := strings.Cut(body, "</parameter>")
		value = strings.TrimPrefix(value, "\n")
		return key, strings.TrimSuffix(value, "\n"), tail, found && closed && ended
	})
	return name, obj.close(), ok
}

// parseGLMCall reads GLM's form: the name, then key/value pairs (none for a call without
// arguments).
func parseGLMCall(raw string, types argTypes) (name, args string, ok bool) {
	name, rest, pairs := strings.Cut(raw, "<arg_key>")
	name = strings.TrimSpace(name)
	if name == "" || strings.ContainsAny(name, " \n\t<>{}") {
		return "", "", false
	}
	obj := newArgsWriter(types[name])
	if !pairs { // a call without arguments
		return name, obj.close(), true
	}
	ok = readArgs("<arg_key>"+rest, obj, func(r string) (key, value, tail string, ok bool) {
		after, found := strings.CutPrefix(r, "<arg_key>")
		key, body, closed := strings.Cut(after, "</arg_key>")
		body, opened := strings.CutPrefix(strings.TrimLeftFunc(body, isSpace), "<arg_value>")
		value, tail, ended := strings.Cut(body, "</arg_value>")
		return key, value, tail, found && closed && opened && ended
	})
	return name, obj.close(), ok
}

// readArgs reads key/value pairs from text, each read by pair, into obj until only
// whitespace is left; it reports false for text that is not such pairs.
func readArgs(text string, obj *argsWriter, pair func(string) (key, value, tail string, ok bool)) bool {
	for {
		text = strings.TrimLeftFunc(text, isSpace)
		if text == "" {
			return true
		}
		key, value, tail, ok := pair(text)
		if !ok || key == "" {
			return false
		}
		obj.add(key, value)
		text = tail
	}
}

// argsWriter writes arguments read as text into a JSON object, in the order written.
type argsWriter struct {
	b     strings.Builder
	types map[string]string
}

func newArgsWriter(types map[string]string) *argsWriter {
	w := &argsWriter{types: types}
	w.b.WriteByte('{')
	return w
}

// add writes key: value (see argJSON).
func (w *argsWriter) add(key, value string) {
	if w.b.Len() > 1 {
		w.b.WriteByte(',')
	}
	w.b.WriteString(jsonString(key))
	w.b.WriteByte(':')
	w.b.WriteString(argJSON(w.types, key, value))
}

// argJSON is a value written as text as JSON: a JSON string when its parameter is a string
// (or when it is not valid JSON), else the JSON it is, compacted.
func argJSON(types map[string]string, key, value string) string {
	if t := types[key]; t != "string" && json.Valid([]byte(value)) {
		var compact bytes.Buffer
		if json.Compact(&compact, []byte(value)) == nil {
			return compact.String()
		}
	}
	return jsonString(value)
}

// jsonString is s as a JSON string, with <, > and & as themselves (json.Marshal escapes
// them for HTML; arguments are code and markup more often than not).
func jsonString(s string) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return strings.TrimSuffix(b.String(), "\n")
}

func (w *argsWriter) close() string {
	w.b.WriteByte('}')
	return w.b.String()
}

// needsObjectArguments says whether a chat template reads a call's arguments as an object
// (GLM's iterate over them, gpt-oss's and DeepSeek-V3.1's write them with tojson): clients
// send them as JSON text, which such a template cannot use, so the server parses them
// first, as llama.cpp does for templates it finds requiring object arguments. It renders
// one call both ways: a template that writes the text as given keeps the text.
func needsObjectArguments(t *tokenizer.ChosenTemplate) bool {
	render := func(args any) (string, bool) {
		fn := &tokenizer.Object{Keys: []string{"name", "arguments"}, Values: map[string]any{"name": "probe_tool", "arguments": args}}
		call := &tokenizer.Object{Keys: []string{"id", "type", "function"}, Values: map[string]any{"id": "call_probe", "type": "function", "function": fn}}
		user := &tokenizer.Object{Keys: []string{"role", "content"}, Values: map[string]any{"role": "user", "content": "Hi"}}
		turn := &tokenizer.Object{Keys: []string{"role", "content", "tool_calls"}, Values: map[string]any{"role": "assistant", "content": "", "tool_calls": []any{call}}}
		out, err := t.Render(tokenizer.ChatInput{Messages: []any{user, turn}})
		return out, err == nil
	}
	const text = `{"probe_arg": "probe_value"}`
	if out, ok := render(text); ok && strings.Contains(out, text) {
		return false
	}
	obj := &tokenizer.Object{Keys: []string{"probe_arg"}, Values: map[string]any{"probe_arg": "probe_value"}}
	out, ok := render(obj)
	return ok && strings.Contains(out, "probe_value")
}

// parseArguments replaces the JSON text of an assistant turn's call arguments with the
// object it holds (for templates that need objects, see needsObjectArguments). Text that
// is not a JSON object is left as it is.
func parseArguments(m *tokenizer.Object) {
	calls, _ := m.Values["tool_calls"].([]any)
	for _, c := range calls {
		call, _ := c.(*tokenizer.Object)
		if call == nil {
			continue
		}
		fn, _ := call.Values["function"].(*tokenizer.Object)
		if fn == nil {
			continue
		}
		if text, ok := fn.Values["arguments"].(string); ok {
			if v, err := tokenizer.DecodeJSON([]byte(text)); err == nil {
				if obj, ok := v.(*tokenizer.Object); ok {
					fn.Values["arguments"] = obj
				}
			}
		}
	}
}
