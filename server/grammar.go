package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/moerun/moerun/grammar"
	"github.com/moerun/moerun/grammar/jsonschema"
	"github.com/moerun/moerun/tokenizer"
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

// forcedTool is what a required call's grammar needs of a tool.
type forcedTool struct {
	Function struct {
		Name       string          `json:"name"`
		Parameters json.RawMessage `json:"parameters"`
	} `json:"function"`
}

// callGrammar is the grammar of a required tool call (tool_choice "required", or name) in
// the model's call syntax: after the reasoning, if any, one call (more with parallel, one
// per line), in the family's tags and form (see callForm): Hermes JSON (Qwen3, Qwen2.5)
// and DeepSeek's, whose arguments follow the tool's parameters schema as llama.cpp's
// converter makes it, Qwen3-Coder's XML (Qwen3.5 too) and GLM's key/value pairs (see
// xmlCallRules), and gpt-oss's harmony messages (see harmonyCallRules). A template that
// writes none of them is refused rather than not honoured.
func (s *Server) callGrammar(rawTools json.RawMessage, name string, parallel bool) (*grammar.Grammar, *apiError) {
	if !s.harmony && s.syntax.callOpen == "" {
		return nil, badRequest("tool_choice", "a required tool call is constrained in the Hermes, XML, GLM, DeepSeek and harmony call syntaxes; this model's template writes none of them: use \"auto\"")
	}
	var all []forcedTool
	if err := json.Unmarshal(rawTools, &all); err != nil {
		return nil, badRequest("tools", "tools: %v", err)
	}
	var tools []forcedTool
	for _, t := range all {
		if name == "" || t.Function.Name == name {
			tools = append(tools, t)
		}
	}
	if s.harmony {
		return parseCallGrammar(harmonyCallRules(tools))
	}
	var calls string
	var aerr *apiError
	switch s.syntax.form {
	case jsonForm:
		calls, aerr = hermesCallRules(tools)
	case xmlForm:
		calls, aerr = xmlCallRules(tools, false)
	case glmForm:
		calls, aerr = xmlCallRules(tools, true)
	case deepseekForm:
		calls, aerr = deepseekCallRules(tools, strings.Contains(s.template.Source, "```json"))
	}
	if aerr != nil {
		return nil, aerr
	}
	root := `moerun-call`
	if parallel {
		root += ` ("\n" moerun-call)*`
	}
	if s.syntax.sectionOpen != "" {
		root = grammar.Literal(s.syntax.sectionOpen) + " " + root + " " + grammar.Literal(s.syntax.sectionClose)
	}
	return parseCallGrammar(calls+"root ::= "+root+"\n", nil)
}

// parseCallGrammar parses a forced call's grammar, which must parse: a failure is moerun's.
func parseCallGrammar(text string, aerr *apiError) (*grammar.Grammar, *apiError) {
	if aerr != nil {
		return nil, aerr
	}
	g, err := grammar.Parse(text)
	if err != nil {
		return nil, internalError(fmt.Errorf("the grammar of the forced call does not parse: %w", err))
	}
	return g, nil
}

// harmonyCallRules is the grammar of gpt-oss's required call: an optional analysis message,
// then a commentary message to functions.NAME whose body is JSON following the tool's
// parameters schema. It ends with the arguments: the <|call|> after them is one of the
// vocabulary's end-of-generation tokens, which the grammar allows once it is complete. One
// call per turn, as harmony ends the turn at a call.
func harmonyCallRules(tools []forcedTool) (string, *apiError) {
	var b strings.Builder
	var alternatives []string
	for i, t := range tools {
		args, aerr := schemaRules(&b, t, fmt.Sprintf("moerun-tool%d-", i))
		if aerr != nil {
			return "", aerr
		}
		header := harmonyChannelTag + "commentary to=functions." + t.Function.Name + " " + harmonyConstrainTag + "json" + harmonyMessageTag
		alternatives = append(alternatives, grammar.Literal(header)+" "+args)
	}
	b.WriteString("moerun-call ::= " + strings.Join(alternatives, " | ") + "\n")
	b.WriteString("moerun-analysis ::= " + grammar.Literal(harmonyChannelTag+"analysis"+harmonyMessageTag) + ` ([^<] | "<" [^|])* ` +
		grammar.Literal(harmonyEndTag+harmonyStartTag+"assistant") + "\n")
	b.WriteString("root ::= moerun-analysis? moerun-call\n")
	return b.String(), nil
}

// schemaRules writes the rules of a tool's parameters schema (converted by
// grammar/jsonschema) to b, renamed apart with prefix, and returns the name of their root.
func schemaRules(b *strings.Builder, t forcedTool, prefix string) (string, *apiError) {
	params := t.Function.Parameters
	if isNull(params) {
		params = json.RawMessage(`{"type": "object"}`)
	}
	converted, err := jsonschema.Convert(params)
	if err != nil {
		return "", badRequest("tools", "tools: %s's parameters schema: %v", t.Function.Name, err)
	}
	b.WriteString(prefixRules(converted, prefix))
	b.WriteString("\n")
	return prefix + "root", nil
}

// hermesCallRules defines moerun-call-body as a Hermes call, {"name": NAME, "arguments":
// ARGS}, ARGS following the tool's parameters schema (converted by grammar/jsonschema).
func hermesCallRules(tools []forcedTool) (string, *apiError) {
	var bodies []json.RawMessage
	for _, t := range tools {
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
		return "", badRequest("tools", "tools: a parameters schema: %v", err)
	}
	// The converted grammar's root is one call's body; a schema that refers back to its
	// own root ("$ref": "#") would then refer to the calls.
	if len(rootName.FindAllString(gbnfLiterals.ReplaceAllString(converted, `""`), -1)) != 1 {
		return "", badRequest("tools", "tools: a parameters schema that refers to its own root cannot be forced")
	}
	return strings.Replace(converted, "root ::=", "moerun-call-body ::=", 1) +
		"\nmoerun-call ::= \"<tool_call>\\n\" moerun-call-body \"\\n</tool_call>\"\n", nil
}

// deepseekCallRules defines moerun-call as DeepSeek's call of one of the tools: V3's and
// R1's function<｜tool▁sep｜>NAME and the arguments in a json code block, or V3.1's
// NAME<｜tool▁sep｜>ARGS, between <｜tool▁call▁begin｜> and <｜tool▁call▁end｜>; each tool's
// arguments follow its parameters schema (converted by grammar/jsonschema, its rules
// renamed apart).
func deepseekCallRules(tools []forcedTool, codeBlock bool) (string, *apiError) {
	var b strings.Builder
	var alternatives []string
	for i, t := range tools {
		args, aerr := schemaRules(&b, t, fmt.Sprintf("moerun-tool%d-", i))
		if aerr != nil {
			return "", aerr
		}
		if codeBlock {
			alternatives = append(alternatives, grammar.Literal(deepseekCallBegin+"function"+deepseekSep+t.Function.Name+"\n```json\n")+" "+args+" "+grammar.Literal("\n```"+deepseekCallEnd))
		} else {
			alternatives = append(alternatives, grammar.Literal(deepseekCallBegin+t.Function.Name+deepseekSep)+" "+args+" "+grammar.Literal(deepseekCallEnd))
		}
	}
	b.WriteString("moerun-call ::= " + strings.Join(alternatives, " | ") + "\n")
	return b.String(), nil
}

// gbnfIdent is a rule name in GBNF.
var gbnfIdent = regexp.MustCompile(`[A-Za-z][A-Za-z0-9-]*`)

// prefixRules renames every rule of a GBNF text, where it is defined and where it is used,
// by prefixing its name: grammars joined into one then keep their rules apart.
func prefixRules(text, prefix string) string {
	defined := map[string]bool{}
	for _, line := range strings.Split(text, "\n") {
		if name, _, ok := strings.Cut(line, "::="); ok {
			defined[strings.TrimSpace(name)] = true
		}
	}
	rename := func(segment string) string {
		return gbnfIdent.ReplaceAllStringFunc(segment, func(id string) string {
			if defined[id] {
				return prefix + id
			}
			return id
		})
	}
	// Literals and character classes are left as they are.
	var b strings.Builder
	last := 0
	for _, at := range gbnfLiterals.FindAllStringIndex(text, -1) {
		b.WriteString(rename(text[last:at[0]]))
		b.WriteString(text[at[0]:at[1]])
		last = at[1]
	}
	b.WriteString(rename(text[last:]))
	return b.String()
}

// xmlCallRules defines moerun-call as a call of one of the tools in Qwen3-Coder's XML form
// (Qwen3.5's too), <tool_call>\n<function=NAME>\n then <parameter=KEY>\nVALUE\n</parameter>\n
// pairs, </function>\n</tool_call>, or with glm in GLM's, <tool_call>NAME\n then
// <arg_key>KEY</arg_key>\n<arg_value>VALUE</arg_value>\n pairs, </tool_call>: each parameter
// of the schema in its order, the required ones always, the others maybe. A value is what
// the forms write: an enum of strings one of them, a string raw text without "</" (which
// would end it) within its minLength and maxLength, any other type JSON of that type;
// numbers' bounds and nested schemas are not enforced.
func xmlCallRules(tools []forcedTool, glm bool) (string, *apiError) {
	var b strings.Builder
	var alternatives []string
	for i, t := range tools {
		props, required, aerr := schemaProperties(t.Function.Parameters)
		if aerr != nil {
			return "", aerr
		}
		head, tail := "<tool_call>\n<function="+t.Function.Name+">\n", "</function>\n</tool_call>"
		if glm {
			head, tail = "<tool_call>"+t.Function.Name+"\n", "</tool_call>"
		}
		seq := []string{grammar.Literal(head)}
		for j, key := range props.Keys {
			open, close := "<parameter="+key+">\n", "\n</parameter>\n"
			if glm {
				open, close = "<arg_key>"+key+"</arg_key>\n<arg_value>", "</arg_value>\n"
			}
			rule := fmt.Sprintf("moerun-tool%d-param%d", i, j)
			fmt.Fprintf(&b, "%s ::= %s %s %s\n", rule, grammar.Literal(open), xmlValue(props.Values[key]), grammar.Literal(close))
			if !required[key] {
				rule += "?"
			}
			seq = append(seq, rule)
		}
		alternatives = append(alternatives, strings.Join(append(seq, grammar.Literal(tail)), " "))
	}
	b.WriteString("moerun-call ::= " + strings.Join(alternatives, " | ") + "\n")
	b.WriteString(xmlValueRules)
	return b.String(), nil
}

// schemaProperties reads a parameters schema's properties, in order, and its required keys.
func schemaProperties(params json.RawMessage) (*tokenizer.Object, map[string]bool, *apiError) {
	props := &tokenizer.Object{Values: map[string]any{}}
	required := map[string]bool{}
	if isNull(params) {
		return props, required, nil
	}
	v, err := tokenizer.DecodeJSON(params)
	if err != nil {
		return nil, nil, badRequest("tools", "tools: a parameters schema: %v", err)
	}
	schema, ok := v.(*tokenizer.Object)
	if !ok {
		return nil, nil, badRequest("tools", "tools: a parameters schema must be an object")
	}
	if p, ok := schema.Values["properties"].(*tokenizer.Object); ok {
		props = p
	}
	if list, ok := schema.Values["required"].([]any); ok {
		for _, k := range list {
			if key, ok := k.(string); ok {
				required[key] = true
			}
		}
	}
	return props, required, nil
}

// xmlValue is the grammar of one parameter's value in the XML form (see xmlCallRules).
func xmlValue(schema any) string {
	s, _ := schema.(*tokenizer.Object)
	if s == nil {
		return "moerun-xml-text"
	}
	if enum, ok := s.Values["enum"].([]any); ok && len(enum) > 0 {
		var alts []string
		for _, e := range enum {
			text, ok := e.(string)
			if !ok {
				return "moerun-json-value"
			}
			alts = append(alts, grammar.Literal(text))
		}
		return "(" + strings.Join(alts, " | ") + ")"
	}
	switch s.Values["type"] {
	case "string", nil:
		// A length bound holds the text to characters other than "<" (GBNF's repetition
		// counts go up to 2000, beyond which the bound is left out).
		lo, hasLo := schemaCount(s.Values["minLength"])
		hi, hasHi := schemaCount(s.Values["maxLength"])
		switch {
		case hasHi && hi <= 2000 && (!hasLo || lo <= hi):
			return fmt.Sprintf("[^<]{%d,%d}", lo, hi)
		case hasLo && lo > 0 && lo <= 2000:
			return fmt.Sprintf("[^<]{%d} moerun-xml-text", lo)
		}
		return "moerun-xml-text"
	case "integer":
		return `"-"? moerun-json-integral-part`
	case "number":
		return "moerun-json-number"
	case "boolean":
		return `("true" | "false")`
	case "null":
		return `"null"`
	case "object":
		return "moerun-json-object"
	case "array":
		return "moerun-json-array"
	}
	return "moerun-json-value"
}

// schemaCount reads a JSON schema count (minLength, maxLength): a non-negative integer.
func schemaCount(v any) (int, bool) {
	switch n := v.(type) {
	case int:
		return n, n >= 0
	case float64:
		return int(n), n >= 0 && n == float64(int(n)) && n < 1<<31
	}
	return 0, false
}

// xmlValueRules are the values of the XML form: raw text that cannot end it, and JSON as
// llama-server's json_object grammar writes it (grammar.ServerJSONObject, its rules
// renamed apart; moerun-json-value and the rest).
var xmlValueRules = "moerun-xml-text ::= ([^<] | \"<\" [^/])*\n" + prefixRules(grammar.ServerJSONObject, "moerun-json-")
