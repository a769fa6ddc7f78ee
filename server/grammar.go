package server

import (
	"bytes"
	"encoding/json"

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
