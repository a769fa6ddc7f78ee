package server

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/moerun/moerun/grammar"
)

// streamingJob is a streamed chat job whose call a grammar constrains (tool_choice
// required), the jobs whose calls stream in parts, with the types of get_weather's
// parameters.
func streamingJob(t *testing.T) *job {
	t.Helper()
	return &job{tools: true, stream: true, grammar: grammarForTests(t), forcedCall: true, argTypes: weatherTypes}
}

// grammarForTests is any grammar: the parser only asks whether a job has one.
func grammarForTests(t testing.TB) *grammar.Grammar {
	t.Helper()
	g, err := grammar.Parse(`root ::= "x"`)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

var weatherTypes = argTypes{"get_weather": {"city": "string", "days": "integer", "note": "string"}}

// A call in a JSON-arguments form streams in parts whatever the pieces the text comes in:
// one opening part with the name, then the arguments a few bytes at a time, then the last
// part at the closing tag; the arguments joined are the whole call's, byte for byte.
func TestStreamedCallParts(t *testing.T) {
	for _, c := range []struct{ family, text string }{
		{"qwen3", "<think>\nPlan.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par\\\"is}\", \"days\": [1, {\"a\": 2}]}}\n</tool_call>"},
		{"deepseek_v3", deepseekCallsBegin + deepseekCallBegin + "function" + deepseekSep + "get_weather\n```json\n{\"city\": \"Par\\\"is}\", \"days\": [1, {\"a\": 2}]}\n```" + deepseekCallEnd + deepseekCallsEnd},
		{"deepseek_v31", deepseekCallsBegin + deepseekCallBegin + "get_weather" + deepseekSep + "{\"city\": \"Par\\\"is}\", \"days\": [1, {\"a\": 2}]}" + deepseekCallEnd + deepseekCallsEnd},
		// Key/value forms: a string value streams as it is written (newlines, quotes, a
		// multi-byte character cut between pieces, text like a closing tag's start), an
		// integer when its closing tag comes.
		{"qwen35", "<tool_call>\n<function=get_weather>\n<parameter=city>\nSão \"Paulo\"\n</par\nt 日本\n</parameter>\n<parameter=days>\n 3 \n</parameter>\n<parameter=note>\n\n</parameter>\n</function>\n</tool_call>"},
		// gpt-oss: the call's message as written (the <|call|> that ends it is an
		// end-of-generation token, not text).
		{"gpt_oss", "<|channel|>analysis<|message|>Plan.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|> {\"city\": \"Par\\\"is}\", \"days\": [1, {\"a\": 2}]} "},
		{"glm46", "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>São \"Paulo\"</arg\n日本</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>"},
	} {
		s := templateServer(t, c.family)
		whole := textParser{s.outputParser(&job{tools: true, argTypes: weatherTypes})}.all(c.text)
		if len(whole.calls) != 1 || len(whole.parts) != 0 {
			t.Fatalf("%s: the whole text parses to %+v", c.family, whole)
		}
		want := whole.calls[0]
		for _, n := range []int{1, 3, 7, len(c.text)} {
			p := textParser{s.outputParser(streamingJob(t))}
			var parts []callPart
			for i := 0; i < len(c.text); i += n {
				got := p.piece(c.text[i:min(i+n, len(c.text))])
				if len(got.calls) > 0 {
					t.Fatalf("%s, pieces of %d: a whole call %+v in a stream", c.family, n, got.calls)
				}
				parts = append(parts, got.parts...)
			}
			parts = append(parts, p.end().parts...)
			var args strings.Builder
			argParts := 0
			for i, part := range parts {
				switch {
				case i == 0 && (!part.first || part.name != want.Function.Name || part.id == ""),
					i > 0 && part.first,
					i == len(parts)-1 && !part.last,
					i < len(parts)-1 && part.last,
					part.index != 0:
					t.Fatalf("%s, pieces of %d: part %d of %d is %+v", c.family, n, i, len(parts), part)
				}
				if part.args != "" {
					args.WriteString(part.args)
					argParts++
				}
			}
			if args.String() != want.Function.Arguments || !json.Valid([]byte(args.String())) {
				t.Errorf("%s, pieces of %d: arguments %q, want %q", c.family, n, args.String(), want.Function.Arguments)
			}
			if n == 1 && argParts < 10 {
				t.Errorf("%s, byte by byte: the arguments came in %d parts: not streamed", c.family, argParts)
			}
		}
	}
}

// A stream whose call is cut short (max_tokens) closes the call with the arguments written
// so far, as llama-server does; text before a call can open stays content.
func TestStreamedCallCutShort(t *testing.T) {
	s := qwen3Server(t)
	p := textParser{s.outputParser(streamingJob(t))}
	got := p.piece("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, 2")
	got.append(p.end())
	var args string
	for _, part := range got.parts {
		args += part.args
	}
	if len(got.parts) < 3 || !got.parts[0].first || !got.parts[len(got.parts)-1].last || args != `{"a": [1, 2` {
		t.Errorf("cut short: %+v", got.parts)
	}
	p = textParser{s.outputParser(streamingJob(t))}
	got = p.piece("<tool_call>\n{\"nam")
	got.append(p.end())
	if len(got.parts) != 0 || got.content != "<tool_call>\n{\"nam" {
		t.Errorf("a call that never opened: %+v", got)
	}
}

// The three streaming APIs hand a call's parts over in their own shapes; what a client
// assembles from them is the whole call.
func TestStreamedCallEvents(t *testing.T) {
	s := qwen3Server(t)
	text := "Running it.\n<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"command\": \"ls -la /tmp\", \"timeout\": 5}}\n</tool_call>"
	wantArgs := `{"command": "ls -la /tmp", "timeout": 5}`

	// OpenAI chat: the first delta has id, type and name, the next ones arguments only.
	j := streamingJob(t)
	f := &chatFormat{s: s, j: j, first: true, parser: s.outputParser(j)}
	var id, name, args string
	deltas := 0
	for i := 0; i < len(text); i += 3 {
		c := f.delta(text[i:min(i+3, len(text))], nil)
		if c == nil {
			continue
		}
		for _, tc := range c.(chatResponse).Choices[0].Delta.ToolCalls {
			if tc.Index != 0 || (tc.ID != "") != (id == "") {
				t.Fatalf("chat: delta %+v after id %q", tc, id)
			}
			if tc.ID != "" {
				id, name = tc.ID, tc.Function.Name
			}
			args += tc.Function.Arguments
			deltas++
		}
	}
	last := f.finish(result{finishReason: "stop"}).(chatResponse)
	if name != "bash" || args != wantArgs || deltas < 5 || *last.Choices[0].FinishReason != "tool_calls" {
		t.Errorf("chat: %s(%s) in %d deltas, finish %s", name, args, deltas, *last.Choices[0].FinishReason)
	}

	// Anthropic: a tool_use block whose input_json_delta pieces join to its input.
	j = streamingJob(t)
	var partial string
	var blocks []string
	for _, e := range streamEvents(&anthropicFormat{s: s, j: j, id: "msg_1", textParser: textParser{s.outputParser(j)}}, text, 3, result{finishReason: "stop"}) {
		d := e.data.(map[string]any)
		switch e.name {
		case "content_block_start":
			blocks = append(blocks, d["content_block"].(map[string]any)["type"].(string))
		case "content_block_delta":
			if pj, ok := d["delta"].(map[string]any)["partial_json"]; ok {
				partial += pj.(string)
			}
		case "message_delta":
			if r := d["delta"].(map[string]any)["stop_reason"]; r != "tool_use" {
				t.Errorf("anthropic: stop reason %v", r)
			}
		}
	}
	if partial != wantArgs || strings.Join(blocks, ",") != "text,tool_use" {
		t.Errorf("anthropic: blocks %v, input %s", blocks, partial)
	}

	// Responses: a function_call item whose argument deltas join to the done event's
	// arguments and the item's.
	j = streamingJob(t)
	var deltaArgs, doneArgs string
	var item map[string]any
	for _, e := range streamEvents(&responsesFormat{s: s, j: j, id: "resp_1", textParser: textParser{s.outputParser(j)}}, text, 3, result{finishReason: "stop"}) {
		d := e.data.(map[string]any)
		switch e.name {
		case "response.function_call_arguments.delta":
			deltaArgs += d["delta"].(string)
		case "response.function_call_arguments.done":
			doneArgs = d["arguments"].(string)
		case "response.output_item.done":
			if it := d["item"].(map[string]any); it["type"] == "function_call" {
				item = it
			}
		}
	}
	if deltaArgs != wantArgs || doneArgs != wantArgs || item == nil || item["arguments"] != wantArgs || item["name"] != "bash" || item["status"] != "completed" {
		t.Errorf("responses: deltas %s, done %s, item %v", deltaArgs, doneArgs, item)
	}
}

// BenchmarkStreamedCall streams a coding agent's edit call, 40 KB of file content in a
// string parameter, in pieces of 4 bytes as tokens come: each piece should cost the same
// however long the call already is.
func BenchmarkStreamedCall(b *testing.B) {
	content := strings.Repeat("\tfmt.Println(\"x\") // \"quoted\" and </ tags\n", 1000)
	for _, c := range []struct{ family, text string }{
		{"qwen3", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": " + jsonString(content) + "}}\n</tool_call>"},
		{"qwen35", "<tool_call>\n<function=get_weather>\n<parameter=city>\n" + content + "\n</parameter>\n</function>\n</tool_call>"},
	} {
		s := templateServer(b, c.family)
		b.Run(c.family, func(b *testing.B) {
			for b.Loop() {
				j := &job{tools: true, stream: true, grammar: grammarForTests(b), forcedCall: true, argTypes: weatherTypes}
				p := textParser{s.outputParser(j)}
				for i := 0; i < len(c.text); i += 4 {
					p.piece(c.text[i:min(i+4, len(c.text))])
				}
				p.end()
			}
		})
	}
}
