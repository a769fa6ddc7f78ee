package tokenizer

import (
	"os"
	"testing"
	"time"
)

// TestChatGPTOSS renders gpt-oss's harmony template (llama.cpp's
// models/templates/openai-gpt-oss-120b.jinja, copied to testdata/chat) and compares with
// what llama.cpp's chat layer (common_chat_templates_apply, commit 3f545bec) rendered for
// the same conversations on 2026-11-22. The messages are given as llama.cpp hands them to
// the template: reasoning_content copied to "thinking" (and the content of a tool-call
// message dropped), tool-call arguments parsed into an object, the tool's name in "name".
func TestChatGPTOSS(t *testing.T) {
	src, err := os.ReadFile("testdata/chat/gpt_oss.chat_template.jinja")
	if err != nil {
		t.Fatal(err)
	}
	tpl, err := ParseTemplate(string(src))
	if err != nil {
		t.Fatal(err)
	}
	// system is the system turn the template writes itself, before the conversation.
	system := func(effort string, tools bool) string {
		s := "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n" +
			"Knowledge cutoff: 2024-06\nCurrent date: 2026-11-22\n\nReasoning: " + effort + "\n\n" +
			"# Valid channels: analysis, commentary, final. Channel must be included for every message."
		if tools {
			s += "\nCalls to these tools must go to the commentary channel: 'functions'."
		}
		return s + "<|end|>"
	}
	const weatherTool = `[{"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city",
		"parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city name"},
		"unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}, "days": {"type": "integer"}}, "required": ["city"]}}}]`
	const namespace = "# Tools\n\n## functions\n\nnamespace functions {\n\n// Get the current weather in a city\n" +
		"type get_weather = (_: {\n// The city name\ncity: string,\nunit?: \"celsius\" | \"fahrenheit\",\ndays?: number,\n}) => any;\n\n" +
		"} // namespace functions"
	// The tool-call turns after the user's question, as given and as rendered.
	const callTurns = `{"role": "assistant", "reasoning_content": "Need the weather.", "thinking": "Need the weather.",
		 "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}, "id": "call_1"}]},
		{"role": "tool", "content": "{\"temp\": 21}", "name": "get_weather", "tool_call_id": "call_1"}`
	const renderedCall = "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\", \"days\": 2}<|call|>" +
		"<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>\"{\\\"temp\\\": 21}\"<|end|>"
	const ask, renderedAsk = `{"role": "user", "content": "Weather in Paris?"}`, "<|start|>user<|message|>Weather in Paris?<|end|>"
	for _, c := range []struct {
		name, messages, tools string
		noGenerationPrompt    bool
		vars                  map[string]any
		want                  string
	}{
		{name: "system and user", messages: `[{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi!"}]`,
			want: system("medium", false) + "<|start|>developer<|message|># Instructions\n\nYou are terse.\n\n<|end|>" +
				"<|start|>user<|message|>Hi!<|end|><|start|>assistant"},
		{name: "conversation", messages: `[{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi!"},
			{"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Name a prime."}]`,
			want: system("medium", false) + "<|start|>developer<|message|># Instructions\n\nYou are terse.\n\n<|end|>" +
				"<|start|>user<|message|>Hi!<|end|><|start|>assistant<|channel|>final<|message|>Hello.<|end|>" +
				"<|start|>user<|message|>Name a prime.<|end|><|start|>assistant"},
		// Reasoning of earlier turns is not rendered; reasoning_effort reaches the system turn.
		{name: "reasoning dropped", messages: `[{"role": "user", "content": "2+2?"},
			{"role": "assistant", "content": "4", "reasoning_content": "Simple sum.", "thinking": "Simple sum."}, {"role": "user", "content": "3+3?"}]`,
			vars: map[string]any{"reasoning_effort": "high"},
			want: system("high", false) + "<|start|>user<|message|>2+2?<|end|><|start|>assistant<|channel|>final<|message|>4<|end|>" +
				"<|start|>user<|message|>3+3?<|end|><|start|>assistant"},
		// A pending tool call keeps its reasoning (analysis channel) before the call.
		{name: "tool call", tools: weatherTool,
			messages: `[{"role": "system", "content": "Use tools."}, ` + ask + `, ` + callTurns + `]`,
			want: system("medium", true) + "<|start|>developer<|message|># Instructions\n\nUse tools.\n\n" + namespace + "<|end|>" +
				renderedAsk + "<|start|>assistant<|channel|>analysis<|message|>Need the weather.<|end|>" + renderedCall + "<|start|>assistant"},
		// Once a final answer follows, the tool call's reasoning is dropped. Without a
		// generation prompt the template ends the last turn with <|return|>; llama.cpp's
		// chat layer then replaces that one with <|end|> for inference (llama.cpp issue
		// 15417), after the template, so the template itself renders <|return|>.
		{name: "tool call answered", tools: weatherTool, noGenerationPrompt: true,
			messages: `[` + ask + `, ` + callTurns + `, {"role": "assistant", "content": "21 degrees."}]`,
			want: system("medium", true) + "<|start|>developer<|message|>" + namespace + "<|end|>" + renderedAsk + renderedCall +
				"<|start|>assistant<|channel|>final<|message|>21 degrees.<|return|>"},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := ChatInput{
				Messages:            mustDecode(t, []byte(c.messages)).([]any),
				AddGenerationPrompt: !c.noGenerationPrompt,
				BOSToken:            "<|startoftext|>",
				EOSToken:            "<|return|>",
				Vars:                map[string]any{"enable_thinking": true},
				Now:                 time.Date(2026, 11, 22, 15, 0, 0, 0, time.UTC),
			}
			for k, v := range c.vars {
				in.Vars[k] = v
			}
			if c.tools != "" {
				in.Tools = mustDecode(t, []byte(c.tools)).([]any)
			}
			got, err := tpl.Render(in)
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Errorf("got\n%q\nwant\n%q", got, c.want)
			}
		})
	}
}

// TestConditionalInsideExpression: a parenthesized conditional inside an expression, as
// gpt-oss's template writes it, renders as Jinja renders it (Python's values in the
// comments), evaluating only the chosen branch.
func TestConditionalInsideExpression(t *testing.T) {
	for _, c := range []struct {
		src, want string
		vars      map[string]any
	}{
		{`{{- (x if x is defined else "json") + "!" }}`, "json!", nil},
		{`{{- (x if x is defined else "json") + "!" }}`, "xml!", map[string]any{"x": "xml"}},
		{`{{ ("ok" if true else raise_exception("evaluated")) | upper }}`, "OK", nil},
		{`{{ [1, (2 if n > 1 else 3)] | tojson }}`, "[1, 3]", map[string]any{"n": int64(1)}},
		{`{{ "a if b else c" ~ ("x" if n else "y") }}`, "a if b else cy", map[string]any{"n": false}},
		{`{{ ((1 if n else 2) * 10) }}`, "10", map[string]any{"n": true}},
	} {
		got, err := render(t, c.src, ChatInput{Vars: c.vars})
		if err != nil || got != c.want {
			t.Errorf("%s: got %q, %v; want %q", c.src, got, err, c.want)
		}
	}
}
