package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/moerun/moerun/grammar"
	"github.com/moerun/moerun/grammar/jsonschema"
)

// grammarFields are the ways a request constrains its output, as llama-server reads them: a
// GBNF grammar, a JSON schema (llama-server's json_schema), or OpenAI's response_format
// (json_object, with an optional schema, or json_schema).
type grammarFields struct {
	Grammar        string          `json:"grammar"`
	JSONSchema     json.RawMessage `json:"json_schema"`
	ResponseFormat json.RawMessage `json:"response_format"`
}

// isNull reports whether a raw JSON value is absent or null.
func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

// constraint reads the fields into a grammar, nil when the output is free. As llama-server:
// a json_schema and a grammar together are refused; response_format json_object takes its
// schema (or the request's json_schema, else any JSON value), json_schema the schema under
// json_schema.schema; "text" constrains nothing.
func (f *grammarFields) constraint() (*grammar.Grammar, *apiError) {
	schema := f.JSONSchema
	if !isNull(schema) && f.Grammar != "" {
		return nil, badRequest("grammar", "a request takes json_schema or grammar, not both")
	}
	if !isNull(f.ResponseFormat) {
		var rf struct {
			Type       string          `json:"type"`
			Schema     json.RawMessage `json:"schema"`
			JSONSchema *struct {
				Schema json.RawMessage `json:"schema"`
			} `json:"json_schema"`
		}
		if err := json.Unmarshal(f.ResponseFormat, &rf); err != nil {
			return nil, badRequest("response_format", "response_format must be an object with a type: %v", err)
		}
		switch rf.Type {
		case "", "text":
		case "json_object":
			if !isNull(rf.Schema) || isNull(schema) {
				schema = rf.Schema
				if isNull(schema) {
					schema = json.RawMessage(`{}`)
				}
			}
		case "json_schema":
			schema = json.RawMessage(`{}`)
			if rf.JSONSchema != nil && !isNull(rf.JSONSchema.Schema) {
				schema = rf.JSONSchema.Schema
			}
		default:
			return nil, badRequest("response_format", "response_format type must be \"text\", \"json_object\" or \"json_schema\", not %q", rf.Type)
		}
	}
	text, param := f.Grammar, "grammar"
	if !isNull(schema) {
		converted, err := jsonschema.Convert(schema)
		if err != nil {
			return nil, badRequest("json_schema", "json_schema: %v", err)
		}
		text, param = converted, "json_schema"
	}
	if text == "" {
		return nil, nil
	}
	g, err := grammar.Parse(text)
	if err != nil {
		return nil, badRequest(param, "%s: %v", param, err)
	}
	return g, nil
}

// gbnfLiterals are a GBNF text's string literals and character classes, and rootName a
// rule named root (defined or referred to) in what is left.
var (
	gbnfLiterals = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]`)
	rootName     = regexp.MustCompile(`(?m)(?:^|[^\w-])root(?:[^\w-]|$)`)
)

// callGrammar is the grammar of a required tool call (tool_choice "required", or name) in
// the model's call syntax: after the reasoning, if any, one call (more with parallel), each
// "<tool_call>\n" + {"name": NAME, "arguments": ARGS} + "\n</tool_call>" with ARGS
// following the tool's parameters schema, as llama.cpp constrains Hermes-style calls. The
// other call syntaxes (Qwen3.5's and Qwen3-Coder's XML, GLM's, DeepSeek's, gpt-oss's) have
// no grammar here yet: such a request is refused rather than not honoured.
func (s *Server) callGrammar(rawTools json.RawMessage, name string, parallel bool) (*grammar.Grammar, *apiError) {
	if s.harmony || s.syntax.callOpen != hermesSyntax.callOpen || s.syntax.form != jsonForm {
		return nil, badRequest("tool_choice", "a required tool call is constrained only in the Hermes JSON call syntax (Qwen3's, Qwen2.5's) so far; this model writes its calls otherwise: use \"auto\"")
	}
	var tools []struct {
		Function struct {
			Name       string          `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		} `json:"function"`
	}
	if err := json.Unmarshal(rawTools, &tools); err != nil {
		return nil, badRequest("tools", "tools: %v", err)
	}
	var bodies []json.RawMessage
	for _, t := range tools {
		if name != "" && t.Function.Name != name {
			continue
		}
		params := t.Function.Parameters
		if isNull(params) {
			params = json.RawMessage(`{"type": "object"}`)
		}
		quoted, _ := json.Marshal(t.Function.Name)
		bodies = append(bodies, json.RawMessage(`{"type": "object", "properties": {"name": {"const": `+string(quoted)+
			`}, "arguments": `+string(params)+`}, "required": ["name", "arguments"]}`))
	}
	schema := bodies[0]
	if len(bodies) > 1 {
		schema, _ = json.Marshal(map[string]any{"anyOf": bodies})
	}
	converted, err := jsonschema.Convert(schema)
	if err != nil {
		return nil, badRequest("tools", "tools: a parameters schema: %v", err)
	}
	// The converted grammar's root is one call's body; a schema that refers back to its
	// own root ("$ref": "#") would then refer to the calls.
	if len(rootName.FindAllString(gbnfLiterals.ReplaceAllString(converted, `""`), -1)) != 1 {
		return nil, badRequest("tools", "tools: a parameters schema that refers to its own root cannot be forced")
	}
	calls := `root ::= moerun-call`
	if parallel {
		calls += ` ("\n" moerun-call)*`
	}
	text := strings.Replace(converted, "root ::=", "moerun-call-body ::=", 1) + "\n" + calls +
		"\nmoerun-call ::= \"<tool_call>\\n\" moerun-call-body \"\\n</tool_call>\"\n"
	g, err := grammar.Parse(text)
	if err != nil {
		return nil, internalError(fmt.Errorf("the grammar of the forced call does not parse: %w", err))
	}
	return g, nil
}
