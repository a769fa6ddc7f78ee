package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/moerun/moerun/grammar"
	"github.com/moerun/moerun/tokenizer"
)

// TestGrammarCompletions: a GBNF grammar confines a completion to its sentences, greedy
// and sampled, and the generation ends where the grammar does.
func TestGrammarCompletions(t *testing.T) {
	ts := newTestServer(t, nil)
	g, _ := json.Marshal(`root ::= ("yes" | "no" | "maybe") "!"`)
	for seed := range 8 {
		text, finish := completeText(t, ts, fmt.Sprintf(`{"prompt": "Is it?", "max_tokens": 20, "temperature": %d, "seed": %d, "grammar": %s}`, min(seed, 1), seed, g))
		if !slices.Contains([]string{"yes!", "no!", "maybe!"}, text) || finish != "stop" {
			t.Errorf("seed %d: %q, finish %q", seed, text, finish)
		}
	}
}

// completeText posts a completion request and returns its text and finish reason.
func completeText(t *testing.T, ts *httptest.Server, body string) (text, finish string) {
	t.Helper()
	status, got := call(t, ts, http.MethodPost, "/v1/completions", body)
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, got)
	}
	var r struct {
		Choices []struct {
			Text         string `json:"text"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(got, &r); err != nil {
		t.Fatal(err)
	}
	return r.Choices[0].Text, r.Choices[0].FinishReason
}

// record is what TestJSONSchemaOutputs' schema describes.
type record struct {
	OK    *bool   `json:"ok"`
	Color *string `json:"color"`
	Count *int64  `json:"count"`
	Name  *string `json:"name"`
}

// TestJSONSchemaOutputs: under a JSON schema (as json_schema, and as OpenAI's
// response_format), every output of the tiny model for 50 seeds is JSON that the schema
// accepts: the required properties with their types, an enum's values, a bounded string.
func TestJSONSchemaOutputs(t *testing.T) {
	ts := newTestServer(t, nil)
	schema := `{"type": "object", "properties": {"ok": {"type": "boolean"}, "color": {"enum": ["red", "green", "blue"]},
		"count": {"type": "integer", "minimum": 0, "maximum": 99}, "name": {"type": "string", "maxLength": 6}},
		"required": ["ok", "color", "count", "name"], "additionalProperties": false}`
	for seed := range 50 {
		field := `"json_schema": ` + schema
		if seed%2 == 1 {
			field = `"response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": ` + schema + `}}`
		}
		text, finish := completeText(t, ts, fmt.Sprintf(`{"prompt": "A record:", "max_tokens": 200, "temperature": 1, "seed": %d, %s}`, seed, field))
		var rec record
		dec := json.NewDecoder(strings.NewReader(text))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&rec); err != nil || dec.More() {
			t.Errorf("seed %d: %q is not one record: %v (finish %s)", seed, text, err, finish)
			continue
		}
		switch {
		case rec.OK == nil || rec.Color == nil || rec.Count == nil || rec.Name == nil:
			t.Errorf("seed %d: %q lacks a required property", seed, text)
		case !slices.Contains([]string{"red", "green", "blue"}, *rec.Color):
			t.Errorf("seed %d: color %q is not in the enum", seed, *rec.Color)
		case *rec.Count < 0 || *rec.Count > 99:
			t.Errorf("seed %d: count %d is outside [0, 99]", seed, *rec.Count)
		case len([]rune(*rec.Name)) > 6:
			t.Errorf("seed %d: name %q is longer than 6", seed, *rec.Name)
		}
	}
}

// TestResponseFormatJSONObject: response_format json_object makes a chat's answer a JSON
// object.
func TestResponseFormatJSONObject(t *testing.T) {
	ts := newTestServer(t, nil)
	for seed := range 5 {
		c, _ := chatAnswer(t, ts, fmt.Sprintf(`{"messages": [{"role": "user", "content": "Give me JSON"}],
			"max_tokens": 300, "temperature": 1, "seed": %d, "response_format": {"type": "json_object"},
			"chat_template_kwargs": {"enable_thinking": false}}`, seed))
		var obj map[string]any
		if c.FinishReason == "stop" && json.Unmarshal([]byte(c.Message.Content), &obj) != nil {
			t.Errorf("seed %d: %q is not a JSON object", seed, c.Message.Content)
		}
		t.Logf("seed %d: finish %s, reasoning %d bytes, content %.80q", seed, c.FinishReason, len(c.Message.ReasoningContent), c.Message.Content)
	}
}

// TestGrammarRequestErrors: what llama-server refuses is a 400 naming the field.
func TestGrammarRequestErrors(t *testing.T) {
	ts := newTestServer(t, nil)
	for _, c := range []struct{ fields, want string }{
		{`"grammar": "root ::= \"a\"", "json_schema": {}`, "json_schema or grammar, not both"},
		{`"grammar": "root ::= undefined-rule"`, "grammar: "},
		{`"grammar": "start ::= \"a\""`, "root"},
		{`"response_format": {"type": "xml"}`, `\"json_object\" or \"json_schema\", not \"xml\"`},
		{`"response_format": "json"`, "response_format must be an object"},
		{`"json_schema": {"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}}`, "json_schema: "},
	} {
		status, body := call(t, ts, http.MethodPost, "/v1/completions", `{"prompt": "x", "max_tokens": 2, `+c.fields+`}`)
		if status != http.StatusBadRequest || !strings.Contains(string(body), c.want) {
			t.Errorf("%s: %d %s, want 400 with %q", c.fields, status, body, c.want)
		}
	}
}

// TestGrammarConstraintPhases: with reasoning tags, anything goes until the reasoning
// closes, whitespace before the answer is free, then the grammar decides; Mask agrees with
// Allows for every token in every phase, and an end-of-generation token is allowed only
// where the grammar can end.
func TestGrammarConstraintPhases(t *testing.T) {
	g, err := grammar.Parse(`root ::= "{" [a-z]* "}"`)
	if err != nil {
		t.Fatal(err)
	}
	pieces := []string{"<think>", "</think>", "hmm", "\n\n", "{", "ab", "}", " {", "x}", "<eos>", "", "</th", "ink>\n{",
		"<ca", "ll>", "<call>x", "<call>{", "</call>"}
	texts := &tokenTexts{eog: []int32{9}}
	for _, p := range pieces {
		texts.pieces = append(texts.pieces, []byte(p))
	}
	texts.vocab = grammar.NewVocab(texts.pieces)
	id := func(p string) int32 { return int32(slices.Index(pieces, p)) }
	c := newGrammarConstraint(g, texts, "<think>", "</think>", false, "")
	check := func(step string, want ...string) {
		t.Helper()
		allowed := make([]bool, len(pieces))
		if err := c.Mask(allowed); err != nil {
			t.Fatal(err)
		}
		var got []string
		for tok, ok := range allowed {
			if ok != c.Allows(int32(tok)) {
				t.Errorf("%s: Mask and Allows disagree on %q", step, pieces[tok])
			}
			if ok {
				got = append(got, pieces[tok])
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: allowed %q, want %q", step, got, want)
		}
	}
	accept := func(p string) {
		t.Helper()
		if err := c.Accept(id(p)); err != nil {
			t.Fatalf("accept %q: %v", p, err)
		}
	}
	check("start", "<think>", "{")
	accept("<think>")
	check("reasoning", pieces...)
	accept("hmm")
	accept("</th")
	accept("ink>\n{") // the tag closes across tokens; the answer begins after it
	check("inside the answer", "hmm", "ab", "}", "x}")
	accept("x}")
	check("complete", "<eos>")

	c = newGrammarConstraint(g, texts, "<think>", "</think>", true, "")
	accept("hmm")
	accept("</think>")
	check("after the reasoning", "\n\n", "{", " {")
	accept("\n\n")
	accept(" {")
	check("answer begun", "hmm", "ab", "}", "x}")
	if err := c.Accept(id("{")); err == nil {
		t.Error("a token outside the grammar was accepted")
	}

	// Without reasoning tags (a completion) the grammar applies from the first token.
	c = newGrammarConstraint(g, texts, "", "", false, "")
	check("completion", "{")

	// A lazy grammar (tool_choice auto's calls): free text, an end included, until the
	// trigger appears, even across tokens; a token that completes the trigger with text the
	// grammar refuses is refused.
	call, err := grammar.Parse(`root ::= "<call>" [a-z]+ "</call>"`)
	if err != nil {
		t.Fatal(err)
	}
	c = newGrammarConstraint(call, texts, "", "", false, "<call>")
	free := slices.DeleteFunc(slices.Clone(pieces), func(p string) bool { return p == "" || p == "<call>{" })
	check("free text", free...)
	accept("hmm")
	accept("<ca")
	check("the trigger half written", free...)
	accept("ll>")
	check("after the trigger", "hmm", "ab")
	accept("ab")
	check("inside the call", "hmm", "ab", "</call>")
	accept("</call>")
	check("the call complete", "<eos>")
}

// TestForcedToolCall: tool_choice "required" and a named function make the tiny model's
// answer a call in its template's syntax (Qwen3's Hermes JSON, Qwen3.5's XML, GLM-4.6's
// key/value pairs, DeepSeek-V3's and V3.1's, gpt-oss's harmony), parsed back
// into tool_calls whose arguments keep the tool's parameters (their types, enums and string
// lengths, numbers' bounds), for every seed; what cannot be forced is a 400.
func TestForcedToolCall(t *testing.T) {
	// (gpt-oss's template needs every tool to have a description.)
	tools := `[{"type": "function", "function": {"name": "get_weather", "description": "The weather", "parameters": {"type": "object",
			"properties": {"city": {"type": "string", "maxLength": 12}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
			"required": ["city", "days"], "additionalProperties": false}}},
		{"type": "function", "function": {"name": "shell", "description": "Run a command", "parameters": {"type": "object",
			"properties": {"cmd": {"enum": ["ls", "pwd"]}}, "required": ["cmd"], "additionalProperties": false}}}]`
	var ts *httptest.Server
	for _, family := range []struct {
		template string
		// analysis: gpt-oss's grammar lets an analysis message (unbounded, unconstrained
		// text) come first, where the random model may ramble on to max_tokens.
		analysis bool
	}{{"qwen3", false}, {"qwen35", false}, {"glm46", false}, {"deepseek_v3", false}, {"deepseek_v31", false}, {"gpt_oss", true}} {
		src, err := os.ReadFile("../tokenizer/testdata/chat/" + family.template + ".chat_template.jinja")
		if err != nil {
			t.Fatal(err)
		}
		// The templates write the tools out at length: over 700 tokens of prompt.
		ts = newTestServer(t, func(c *Config) { c.ChatTemplate, c.Context.Size = string(src), 2048 })
		for _, c := range []struct {
			choice string
			names  []string
		}{{`"required"`, []string{"get_weather", "shell"}}, {`{"type": "function", "function": {"name": "shell"}}`, []string{"shell"}}} {
			calls := 0
			for seed := range 10 {
				fn, ok := forcedCall(t, ts, tools, c.choice, seed, family.analysis)
				if !ok {
					continue
				}
				calls++
				var args map[string]any
				if !slices.Contains(c.names, fn.Name) || json.Unmarshal([]byte(fn.Arguments), &args) != nil {
					t.Errorf("%s, %s, seed %d: call %s(%s)", family.template, c.choice, seed, fn.Name, fn.Arguments)
					continue
				}
				bad := false
				switch fn.Name {
				case "get_weather":
					city, ok := args["city"].(string)
					days, isNum := args["days"].(float64)
					bad = !ok || len([]rune(city)) > 12 || !isNum || days != float64(int(days)) || len(args) != 2 || days < 1 || days > 7
				case "shell":
					bad = (args["cmd"] != "ls" && args["cmd"] != "pwd") || len(args) != 1
				}
				if bad {
					t.Errorf("%s, seed %d: %s(%s) breaks its parameters", family.template, seed, fn.Name, fn.Arguments)
				}
			}
			if calls < 5 {
				t.Errorf("%s, %s: %d calls in 10 seeds", family.template, c.choice, calls)
			}
		}
	}
	for _, c := range []struct{ fields, want string }{
		{`"tools": ` + tools + `, "tool_choice": {"type": "function", "function": {"name": "rm"}}`, "not among the tools"},
		{`"tool_choice": "required"`, ""}, // no tools: nothing to force, as before
		{`"tools": ` + tools + `, "tool_choice": "required", "response_format": {"type": "json_object"}`, "cannot both constrain"},
		{`"tools": ` + tools + `, "tool_choice": "sometimes"`, `want \"auto\"`},
	} {
		status, body := call(t, ts, http.MethodPost, "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}], "max_tokens": 2, `+c.fields+`}`)
		if c.want == "" {
			if status != http.StatusOK {
				t.Errorf("%s: %d %s", c.fields, status, body)
			}
			continue
		}
		if status != http.StatusBadRequest || !strings.Contains(string(body), c.want) {
			t.Errorf("%s: %d %s, want 400 with %q", c.fields, status, body, c.want)
		}
	}
	// A template without a call syntax cannot force one.
	plain := newTestServer(t, func(cfg *Config) { cfg.ChatTemplate = "chatml" })
	status, body := call(t, plain, http.MethodPost, "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}], "tools": `+tools+`, "tool_choice": "required"}`)
	if status != http.StatusBadRequest || !strings.Contains(string(body), "writes none of them") {
		t.Errorf("a forced call under ChatML: %d %s", status, body)
	}
}

// The XML and GLM forms' JSON values follow their parameter's schema as llama.cpp converts
// it: bounds, nested objects, and references into the parameters schema's definitions.
func TestXMLCallValues(t *testing.T) {
	tools := []forcedTool{{}}
	tools[0].Function.Name = "go"
	tools[0].Function.Parameters = json.RawMessage(`{"type": "object", "$defs": {"place": {"type": "object",
		"properties": {"x": {"type": "integer", "minimum": 0, "maximum": 9}}, "required": ["x"], "additionalProperties": false}},
		"properties": {"to": {"$ref": "#/$defs/place"}, "n": {"type": "integer", "exclusiveMinimum": 0}}, "required": ["to", "n"]}`)
	for _, glm := range []bool{false, true} {
		rules, aerr := xmlCallRules(tools, glm)
		if aerr != nil {
			t.Fatal(aerr)
		}
		g, err := grammar.Parse(rules + "root ::= moerun-call\n")
		if err != nil {
			t.Fatalf("%v\n%s", err, rules)
		}
		call := func(to, n string) string {
			if glm {
				return "<tool_call>go\n<arg_key>to</arg_key>\n<arg_value>" + to + "</arg_value>\n<arg_key>n</arg_key>\n<arg_value>" + n + "</arg_value>\n</tool_call>"
			}
			return "<tool_call>\n<function=go>\n<parameter=to>\n" + to + "\n</parameter>\n<parameter=n>\n" + n + "\n</parameter>\n</function>\n</tool_call>"
		}
		for _, c := range []struct {
			to, n string
			want  bool
		}{
			{`{"x": 3}`, "2", true},
			{`{"x": 10}`, "2", false}, // past the referenced schema's maximum
			{`{"x": 3, "y": 1}`, "2", false},
			{`{}`, "2", false},
			{`{"x": 3}`, "0", false}, // not above the exclusive minimum
			{`"somewhere"`, "1", false},
		} {
			m := g.NewMatcher()
			if got := m.AcceptBytes([]byte(call(c.to, c.n))) && m.CanEnd(); got != c.want {
				t.Errorf("glm %v: to %s, n %s: accepted %v, want %v", glm, c.to, c.n, got, c.want)
			}
		}
	}
	tools[0].Function.Parameters = json.RawMessage(`{"type": "object", "properties": {"p": {"type": "object", "properties": {"q": {"$ref": "#/nowhere"}}}}}`)
	if _, aerr := xmlCallRules(tools, false); aerr == nil || !strings.Contains(aerr.Message, `parameter "p"`) {
		t.Errorf("a reference the converter cannot follow: %v", aerr)
	}
}

// forcedCall asks ts for a chat answer that must call a tool and returns the one call, or
// reports the failure and false; with analysis, an answer still in its free reasoning at
// max_tokens is no failure (but no call either). The tiny model's Qwen3 vocabulary has no
// token for DeepSeek's call markers, which it then writes byte by byte: hence room for 600
// tokens.
func forcedCall(t *testing.T, ts *httptest.Server, tools, choice string, seed int, analysis bool) (fn struct{ Name, Arguments string }, ok bool) {
	t.Helper()
	ch, body := chatAnswer(t, ts, fmt.Sprintf(`{"messages": [{"role": "user", "content": "Weather in Paris?"}],
		"tools": %s, "tool_choice": %s, "max_tokens": 600, "temperature": 1, "seed": %d,
		"chat_template_kwargs": {"enable_thinking": false}}`, tools, choice, seed))
	if analysis && ch.FinishReason == "length" && ch.Message.ReasoningContent != "" && ch.Message.Content == "" && len(ch.Message.ToolCalls) == 0 {
		return fn, false
	}
	if ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) != 1 {
		t.Errorf("%s, seed %d: finish %q, %d calls: %s", choice, seed, ch.FinishReason, len(ch.Message.ToolCalls), body)
		return fn, false
	}
	return struct{ Name, Arguments string }{ch.Message.ToolCalls[0].Function.Name, ch.Message.ToolCalls[0].Function.Arguments}, true
}

// answer is what the constrained-output tests read of a chat completion's choice.
type answer struct {
	Message struct {
		Content          string     `json:"content"`
		ReasoningContent string     `json:"reasoning_content"`
		ToolCalls        []toolCall `json:"tool_calls"`
	} `json:"message"`
	FinishReason string `json:"finish_reason"`
}

// chatAnswer posts a chat completion request and returns its choice and the whole body.
func chatAnswer(t *testing.T, ts *httptest.Server, request string) (answer, []byte) {
	t.Helper()
	status, body := call(t, ts, http.MethodPost, "/v1/chat/completions", request)
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, body)
	}
	var r struct {
		Choices []answer `json:"choices"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	return r.Choices[0], body
}

// TestAutoCallsAreLazy: with tools and tool_choice auto, a chat request gets its family's
// call grammar as a lazy one, waiting for the call syntax to begin (the section marker for
// DeepSeek); none without tools, with tool_choice none, or under a template without a call
// syntax.
func TestAutoCallsAreLazy(t *testing.T) {
	tools := `[{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object", "properties": {"a": {"type": "string"}}}}}]`
	for _, c := range []struct {
		template, fields, trigger string
	}{
		{"qwen3", `"tools": ` + tools, "<tool_call>"},
		{"qwen35", `"tools": ` + tools, "<tool_call>"},
		{"deepseek_v3", `"tools": ` + tools, deepseekCallsBegin},
		{"qwen3", `"tools": ` + tools + `, "tool_choice": "none"`, ""},
		{"qwen3", `"stream": false`, ""},
		{"chatml", `"tools": ` + tools, ""},
	} {
		cfg := testConfig()
		cfg.ChatTemplate, cfg.Context.Size = "chatml", 2048
		if c.template != "chatml" {
			src, err := os.ReadFile("../tokenizer/testdata/chat/" + c.template + ".chat_template.jinja")
			if err != nil {
				t.Fatal(err)
			}
			cfg.ChatTemplate = string(src)
		}
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		j, aerr := s.decodeChat(strings.NewReader(`{"messages": [{"role": "user", "content": "x"}], ` + c.fields + `}`))
		if aerr != nil {
			t.Fatalf("%s, %s: %v", c.template, c.fields, aerr)
		}
		if j.trigger != c.trigger || (j.grammar != nil) != (c.trigger != "") {
			t.Errorf("%s, %s: trigger %q, grammar %v; want trigger %q", c.template, c.fields, j.trigger, j.grammar != nil, c.trigger)
		}
	}
}

// resolvesToString decides as llama.cpp's common_schema_info::resolves_to_string which
// parameters the XML form writes raw.
func TestResolvesToString(t *testing.T) {
	top, err := tokenizer.DecodeJSON([]byte(`{"$defs": {"s": {"type": "string"}, "n": {"type": "number"}, "loop": {"$ref": "#/$defs/loop"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	for schema, want := range map[string]bool{
		`{"type": "string"}`: true, `{"type": ["null", "string"]}`: true, `{"type": "integer"}`: false, `{}`: false, `true`: false,
		`{"$ref": "#/$defs/s"}`: true, `{"$ref": "#/$defs/n"}`: false, `{"$ref": "#/$defs/loop"}`: false, `{"$ref": "#/$defs/none"}`: false,
		`{"anyOf": [{"type": "number"}, {"type": "string"}]}`: true, `{"oneOf": [{"type": "number"}]}`: false,
		`{"allOf": [{"type": "string"}, {"minLength": 2}]}`: true, `{"allOf": [{"type": "string"}, {"type": "number"}]}`: false,
		`{"const": "x"}`: true, `{"const": 1}`: false, `{"enum": [1, "a"]}`: true, `{"enum": [1, 2]}`: false,
		`{"pattern": "^a"}`: true, `{"maxLength": 3}`: true, `{"format": "uuid4"}`: true, `{"format": "date-time"}`: true, `{"format": "int32"}`: false,
	} {
		v, err := tokenizer.DecodeJSON([]byte(schema))
		if err != nil {
			t.Fatal(err)
		}
		if got := resolvesToString(v, top.(*tokenizer.Object), map[string]bool{}); got != want {
			t.Errorf("%s: %v, want %v", schema, got, want)
		}
	}
}

// The grammar cache gives a repeated text its grammar back (and so the transitions its
// released matchers computed), keeps the most recently used, and does not keep bad text.
func TestGrammarCache(t *testing.T) {
	var c grammarCache
	text := func(i int) string { return fmt.Sprintf(`root ::= "%d"`, i) }
	first, err := c.parse(text(0))
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < grammarCacheSize; i++ {
		if _, err := c.parse(text(i)); err != nil {
			t.Fatal(err)
		}
	}
	if again, _ := c.parse(text(0)); again != first {
		t.Error("a cached text parsed again")
	}
	second, _ := c.parse(text(1))
	c.parse(text(grammarCacheSize)) // evicts the least recently used: text(2)
	if again, _ := c.parse(text(1)); again != second {
		t.Error("a recently used grammar was evicted")
	}
	if len(c.byText) != grammarCacheSize || len(c.order) != grammarCacheSize {
		t.Errorf("%d grammars, %d in order; want %d", len(c.byText), len(c.order), grammarCacheSize)
	}
	if _, ok := c.byText[text(2)]; ok {
		t.Error("the least recently used grammar was kept")
	}
	if _, err := c.parse(`root ::= (`); err == nil || len(c.byText) != grammarCacheSize {
		t.Errorf("a bad grammar: %v, %d cached", err, len(c.byText))
	}
}
