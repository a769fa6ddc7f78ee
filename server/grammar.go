package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"

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

// constraint reads the fields into a grammar (parsed by parse), nil when the output is free.
// As llama-server:
// a json_schema and a grammar together are refused; response_format json_object takes its
// schema (or the request's json_schema, else any JSON value), json_schema the schema under
// json_schema.schema; "text" constrains nothing.
func (f *grammarFields) constraint(parse func(string) (*grammar.Grammar, error)) (*grammar.Grammar, *apiError) {
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
	g, err := parse(text)
	if err != nil {
		return nil, badRequest(param, "%s: %v", param, err)
	}
	return g, nil
}

// grammarCache keeps the grammars of recent requests by their text: a client that sends the
// same schema or tools with every request (a coding agent does) gets the parsed grammar
// back, and with it the transitions the earlier requests' matchers computed (see
// grammar.Matcher.Release), where a new grammar computes each again: on the tiny model the
// masks of a schema's first request take most of its sampling time.
type grammarCache struct {
	mu     sync.Mutex
	byText map[string]*grammar.Grammar
	order  []string // least recently used first
}

// grammarCacheSize bounds the cache: enough for the schemas and tool sets a few clients
// take turns with.
const grammarCacheSize = 32

// parse returns the grammar of text, parsed now or by an earlier request.
func (c *grammarCache) parse(text string) (*grammar.Grammar, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if g, ok := c.byText[text]; ok {
		c.order = append(slices.DeleteFunc(c.order, func(t string) bool { return t == text }), text)
		return g, nil
	}
	g, err := grammar.Parse(text)
	if err != nil {
		return nil, err
	}
	if c.byText == nil {
		c.byText = map[string]*grammar.Grammar{}
	}
	if len(c.order) == grammarCacheSize {
		delete(c.byText, c.order[0])
		c.order = c.order[1:]
	}
	c.byText[text] = g
	c.order = append(c.order, text)
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
		return s.parseCallGrammar(harmonyCallRules(tools))
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
	return s.parseCallGrammar(calls+"root ::= "+root+"\n", nil)
}

// parseCallGrammar parses a forced call's grammar, which must parse: a failure is moerun's.
func (s *Server) parseCallGrammar(text string, aerr *apiError) (*grammar.Grammar, *apiError) {
	if aerr != nil {
		return nil, aerr
	}
	g, err := s.grammars.parse(text)
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
	b, aerr := jsonCallRules(tools, func(t forcedTool, args string) string {
		header := harmonyChannelTag + "commentary to=functions." + t.Function.Name + " " + harmonyConstrainTag + "json" + harmonyMessageTag
		return grammar.Literal(header) + " " + args
	})
	if aerr != nil {
		return "", aerr
	}
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
	root, err := convertedRules(b, params, prefix)
	if err != nil {
		return "", badRequest("tools", "tools: %s's parameters schema: %v", t.Function.Name, err)
	}
	return root, nil
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
	b, aerr := jsonCallRules(tools, func(t forcedTool, args string) string {
		if codeBlock {
			return grammar.Literal(deepseekCallBegin+"function"+deepseekSep+t.Function.Name+"\n```json\n") + " " + args + " " + grammar.Literal("\n```"+deepseekCallEnd)
		}
		return grammar.Literal(deepseekCallBegin+t.Function.Name+deepseekSep) + " " + args + " " + grammar.Literal(deepseekCallEnd)
	})
	if aerr != nil {
		return "", aerr
	}
	return b.String(), nil
}

// jsonCallRules writes each tool's parameters rules (converted by grammar/jsonschema,
// renamed apart) and defines moerun-call as the alternatives wrap makes of each tool and
// the name of its arguments' rule.
func jsonCallRules(tools []forcedTool, wrap func(t forcedTool, args string) string) (*strings.Builder, *apiError) {
	b := &strings.Builder{}
	var alternatives []string
	for i, t := range tools {
		args, aerr := schemaRules(b, t, fmt.Sprintf("moerun-tool%d-", i))
		if aerr != nil {
			return nil, aerr
		}
		alternatives = append(alternatives, wrap(t, args))
	}
	b.WriteString("moerun-call ::= " + strings.Join(alternatives, " | ") + "\n")
	return b, nil
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
// would end it) within its minLength and maxLength, any other JSON following the
// parameter's schema (converted by grammar/jsonschema, as llama.cpp converts it: bounds,
// nested objects and references into the parameters schema's definitions hold).
func xmlCallRules(tools []forcedTool, glm bool) (string, *apiError) {
	var b strings.Builder
	var alternatives []string
	for i, t := range tools {
		top, props, required, aerr := schemaProperties(t.Function.Parameters)
		if aerr != nil {
			return "", aerr
		}
		raw, defs := rawProperties(t.Function.Parameters)
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
			value := xmlText(props.Values[key], top)
			if value == "" {
				withDefs, err := withDefinitions(raw[key], defs)
				if err == nil {
					value, err = convertedRules(&b, withDefs, rule+"-")
				}
				if err != nil {
					return "", badRequest("tools", "tools: %s's parameter %q: %v", t.Function.Name, key, err)
				}
			}
			fmt.Fprintf(&b, "%s ::= %s %s %s\n", rule, grammar.Literal(open), value, grammar.Literal(close))
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

// schemaProperties reads a parameters schema (nil when there is none), its properties, in
// order, and its required keys.
func schemaProperties(params json.RawMessage) (*tokenizer.Object, *tokenizer.Object, map[string]bool, *apiError) {
	props := &tokenizer.Object{Values: map[string]any{}}
	required := map[string]bool{}
	if isNull(params) {
		return nil, props, required, nil
	}
	v, err := tokenizer.DecodeJSON(params)
	if err != nil {
		return nil, nil, nil, badRequest("tools", "tools: a parameters schema: %v", err)
	}
	schema, ok := v.(*tokenizer.Object)
	if !ok {
		return nil, nil, nil, badRequest("tools", "tools: a parameters schema must be an object")
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
	return schema, props, required, nil
}

// xmlText is the grammar of a parameter's value that the XML form writes as raw text (see
// xmlCallRules), or "" for a value written as JSON: raw text where the schema resolves to
// a string as llama.cpp decides it (resolvesToString).
func xmlText(schema any, top *tokenizer.Object) string {
	if !resolvesToString(schema, top, map[string]bool{}) {
		return ""
	}
	s, _ := schema.(*tokenizer.Object)
	if enum, ok := s.Values["enum"].([]any); ok && len(enum) > 0 {
		var alts []string
		for _, e := range enum {
			text, ok := e.(string)
			if !ok {
				return "moerun-xml-text"
			}
			alts = append(alts, grammar.Literal(text))
		}
		return "(" + strings.Join(alts, " | ") + ")"
	}
	// A length bound holds the text to characters other than "<" (GBNF's repetition counts
	// go up to 2000, beyond which the bound is left out).
	lo, hasLo := schemaCount(s.Values["minLength"])
	hi, hasHi := schemaCount(s.Values["maxLength"])
	switch {
	case hasHi && hi <= 2000 && (!hasLo || lo <= hi):
		return fmt.Sprintf("[^<]{%d,%d}", lo, hi)
	case hasLo && lo > 0 && lo <= 2000:
		return fmt.Sprintf("[^<]{%d} moerun-xml-text", lo)
	}
	return "moerun-xml-text"
}

// resolvesToString reports whether a parameter's schema makes its value a string, as
// llama.cpp's common_schema_info::resolves_to_string decides whether the XML form writes it
// raw: through references into the parameters schema (top), a type "string" (alone or in a
// list), an alternative of oneOf/anyOf, every part of allOf, a string const or enum value,
// a string keyword (pattern, minLength, maxLength) or a string format.
func resolvesToString(schema any, top *tokenizer.Object, seen map[string]bool) bool {
	s, ok := schema.(*tokenizer.Object)
	if !ok {
		return false
	}
	if ref, ok := s.Values["$ref"].(string); ok {
		if seen[ref] {
			return false
		}
		seen[ref] = true
		target, found := refTarget(top, ref)
		return found && resolvesToString(target, top, seen)
	}
	switch t := s.Values["type"].(type) {
	case string:
		if t == "string" {
			return true
		}
	case []any:
		if slices.Contains(t, any("string")) {
			return true
		}
	}
	for _, key := range []string{"oneOf", "anyOf"} {
		alts, _ := s.Values[key].([]any)
		for _, alt := range alts {
			if resolvesToString(alt, top, seen) {
				return true
			}
		}
	}
	if parts, ok := s.Values["allOf"].([]any); ok {
		all := true
		for _, part := range parts {
			all = all && resolvesToString(part, top, seen)
		}
		if all {
			return true
		}
	}
	if _, ok := s.Values["const"].(string); ok {
		return true
	}
	if enum, ok := s.Values["enum"].([]any); ok && slices.ContainsFunc(enum, func(v any) bool { _, ok := v.(string); return ok }) {
		return true
	}
	for _, key := range []string{"pattern", "minLength", "maxLength"} {
		if _, has := s.Values[key]; has {
			return true
		}
	}
	format, _ := s.Values["format"].(string)
	switch format {
	case "date", "time", "date-time", "uri", "email", "hostname", "ipv4", "ipv6", "uuid":
		return true
	}
	return strings.HasPrefix(format, "uuid")
}

// refTarget follows a local reference ("#/$defs/name", "#/definitions/name", any
// "#/..." path of object keys) from the parameters schema.
func refTarget(top *tokenizer.Object, ref string) (any, bool) {
	path, ok := strings.CutPrefix(ref, "#")
	if !ok || top == nil {
		return nil, false
	}
	var at any = top
	for _, key := range strings.Split(strings.TrimPrefix(path, "/"), "/") {
		if key == "" {
			continue
		}
		o, ok := at.(*tokenizer.Object)
		if !ok {
			return nil, false
		}
		if at, ok = o.Values[key]; !ok {
			return nil, false
		}
	}
	return at, true
}

// rawProperties are a parameters schema's properties as JSON text, and the definitions
// ($defs, definitions) their references may point into.
func rawProperties(params json.RawMessage) (props, defs map[string]json.RawMessage) {
	var schema struct {
		Properties  map[string]json.RawMessage `json:"properties"`
		Defs        json.RawMessage            `json:"$defs"`
		Definitions json.RawMessage            `json:"definitions"`
	}
	_ = json.Unmarshal(params, &schema) // schemaProperties has read it already
	defs = map[string]json.RawMessage{}
	if schema.Defs != nil {
		defs["$defs"] = schema.Defs
	}
	if schema.Definitions != nil {
		defs["definitions"] = schema.Definitions
	}
	return schema.Properties, defs
}

// withDefinitions is a parameter's schema with the parameters schema's definitions added,
// so that its references ("#/$defs/...") resolve when it is converted alone.
func withDefinitions(schema json.RawMessage, defs map[string]json.RawMessage) (json.RawMessage, error) {
	if len(defs) == 0 {
		return schema, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(schema, &fields); err != nil {
		return nil, fmt.Errorf("its schema must be an object")
	}
	for k, v := range defs {
		if _, has := fields[k]; !has {
			fields[k] = v
		}
	}
	return json.Marshal(fields)
}

// convertedRules writes the rules of a JSON schema (converted by grammar/jsonschema) to b,
// renamed apart with prefix, and returns the name of their root.
func convertedRules(b *strings.Builder, schema json.RawMessage, prefix string) (string, error) {
	converted, err := jsonschema.Convert(schema)
	if err != nil {
		return "", err
	}
	b.WriteString(prefixRules(converted, prefix))
	b.WriteString("\n")
	return prefix + "root", nil
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

// xmlValueRules define the raw text of the XML form's values: text that cannot end them.
var xmlValueRules = "moerun-xml-text ::= ([^<] | \"<\" [^/])*\n"
