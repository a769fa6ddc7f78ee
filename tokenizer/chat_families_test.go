package tokenizer

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// The chat templates of Qwen3.5 (llama.cpp's models/templates/Qwen3.5-4B.jinja), GLM-4.5/4.6
// (GLM-4.6.jinja) and GLM-4.7-Flash (GLM-4.7-Flash.jinja), copied unchanged from llama.cpp
// commit 3f545bec to testdata/chat, render the conversations below byte for byte as
// llama.cpp's chat layer renders them. The expected strings were printed, on 2026-11-22, by a
// throwaway C++ program linked against that commit's libllama-common, which passed the
// same conversations (as common_chat_msg, the tool as common_chat_tool, enable_thinking and
// add_generation_prompt as the case says) to common_chat_templates_init and
// common_chat_templates_apply and printed the prompt or the exception. Python's Jinja2
// 3.1.6, set up as Hugging Face's apply_chat_template, renders the same strings from the
// messages below.
//
// The messages are given as llama.cpp hands them to these templates: a message's
// reasoning in "reasoning_content" (absent when empty), content "" (not null) beside tool
// calls, tool-call arguments parsed into an object, the tool's name in "name". llama.cpp
// always sets enable_thinking (true unless thinking is off), and sets add_generation_prompt
// only when it is true, which the templates read as false. (It also joins a message's text
// parts with "\n" into one string before these templates see them.)
var familyConversations = []struct {
	name, messages   string
	tools            bool
	generationPrompt bool
	thinking         bool
}{
	{name: "system_user", messages: `[` + familySystem + `, ` + familyHi + `]`, generationPrompt: true, thinking: true},
	{name: "system_user_no_thinking", messages: `[` + familySystem + `, ` + familyHi + `]`, generationPrompt: true},
	{name: "conversation", generationPrompt: true, thinking: true, messages: `[` + familySystem + `, ` + familyHi + `,
		{"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Name a prime."}]`},
	{name: "conversation_no_generation_prompt", thinking: true, messages: `[` + familySystem + `, ` + familyHi + `,
		{"role": "assistant", "content": "Hello."}]`},
	// Reasoning is kept only for the turns after the last user message.
	{name: "reasoning", thinking: true, messages: `[{"role": "user", "content": "2+2?"},
		{"role": "assistant", "content": "4", "reasoning_content": "Simple sum."}, {"role": "user", "content": "3+3?"},
		{"role": "assistant", "content": "6", "reasoning_content": "Add three."}]`},
	{name: "reasoning_no_thinking", generationPrompt: true, messages: `[{"role": "user", "content": "2+2?"},
		{"role": "assistant", "content": "4", "reasoning_content": "Simple sum."}, {"role": "user", "content": "3+3?"}]`},
	// Without reasoning_content, the templates take the reasoning out of <think>…</think>
	// in the content.
	{name: "inline_think", thinking: true, messages: `[{"role": "user", "content": "2+2?"},
		{"role": "assistant", "content": "<think>\nPonder.\n</think>\n\n4"}]`},
	{name: "tool_call", tools: true, generationPrompt: true, thinking: true,
		messages: `[{"role": "system", "content": "Use tools."}, ` + familyAsk + `, ` + familyCall + `, ` + familyResult + `]`},
	{name: "tool_call_answered", tools: true, thinking: true,
		messages: `[` + familyAsk + `, ` + familyCall + `, ` + familyResult + `, {"role": "assistant", "content": "21 degrees."}]`},
	// Arguments that are lists or objects are written as JSON; consecutive tool results
	// share one turn.
	{name: "two_tool_calls", tools: true, generationPrompt: true, thinking: true, messages: `[` + familyAsk + `,
		{"role": "assistant", "content": "Checking both.", "tool_calls": [
		 {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}, "id": "call_1"},
		 {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Rome", "days": 1, "hours": [9, 18], "opts": {"rain": true, "note": "a \"b\"\n"}}}, "id": "call_2"}]},
		` + familyResult + `, {"role": "tool", "content": "sunny", "name": "get_weather", "tool_call_id": "call_2"}]`},
	// Scalar arguments: Qwen3.5 writes them with Python's str (True, None), the GLM
	// templates as JSON. Floats that C++'s default six significant digits shorten are left
	// out: llama.cpp prints them so (1.0 as "1", 48.8566144 as "48.8566") where Python and
	// this package write the shortest repr ("1.0", "48.8566144"). (The null argument's
	// renders were printed by Python's Jinja2; the C++ program above predates it.)
	{name: "scalar_arguments", tools: true, thinking: true, messages: `[` + familyAsk + `,
		{"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "get_weather",
		 "arguments": {"city": "Oslo", "metric": true, "wind": false, "scale": 1.5, "ratio": 0.25, "big": 1e20, "days": -3, "note": null}}, "id": "call_1"}]}]`},
	{name: "system_only", generationPrompt: true, thinking: true, messages: `[` + familySystem + `]`},
	{name: "late_system", generationPrompt: true, thinking: true, messages: `[` + familyHi + `, ` + familySystem + `]`},
}

const (
	familySystem = `{"role": "system", "content": "You are terse."}`
	familyHi     = `{"role": "user", "content": "Hi!"}`
	familyAsk    = `{"role": "user", "content": "Weather in Paris?"}`
	familyCall   = `{"role": "assistant", "content": "", "reasoning_content": "Need the weather.",
		"tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}, "id": "call_1"}]}`
	familyResult = `{"role": "tool", "content": "{\"temp\": 21}", "name": "get_weather", "tool_call_id": "call_1"}`
	// familyTools is the tool list as llama.cpp's common_chat_tools_to_json_oaicompat writes it.
	familyTools = `[{"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city (°C)",
		"parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city name"},
		"unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}, "days": {"type": "integer"}}, "required": ["city"]}}}]`
)

// testChatFamily renders every conversation with testdata/chat/<file>.chat_template.jinja
// and compares with want, or, for the conversations in raises, checks that the template
// raised that message.
func testChatFamily(t *testing.T, file, bos, eos string, want, raises map[string]string) {
	t.Helper()
	src, err := os.ReadFile("testdata/chat/" + file + ".chat_template.jinja")
	if err != nil {
		t.Fatal(err)
	}
	tpl, err := ParseTemplate(string(src))
	if err != nil {
		t.Fatal(err)
	}
	if len(want)+len(raises) != len(familyConversations) {
		t.Fatalf("%d expected outcomes for %d conversations", len(want)+len(raises), len(familyConversations))
	}
	for _, c := range familyConversations {
		t.Run(c.name, func(t *testing.T) {
			in := ChatInput{
				Messages:            mustDecode(t, []byte(c.messages)).([]any),
				AddGenerationPrompt: c.generationPrompt,
				BOSToken:            bos,
				EOSToken:            eos,
				Vars:                map[string]any{"enable_thinking": c.thinking},
			}
			if c.tools {
				in.Tools = mustDecode(t, []byte(familyTools)).([]any)
			}
			got, err := tpl.Render(in)
			if msg, ok := raises[c.name]; ok {
				if !errors.Is(err, ErrRaised) || !strings.Contains(err.Error(), msg) {
					t.Fatalf("rendered %q, %v; want the template to raise %q", got, err, msg)
				}
				return
			}
			w, ok := want[c.name]
			if !ok {
				t.Fatal("no expected rendering")
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != w {
				t.Errorf("got\n%q\nwant\n%q", got, w)
			}
		})
	}
}

// TestChatQwen35: Qwen3.5 opens the assistant's turn with <think> (an empty think block
// when thinking is off) and writes tool calls as <function=…><parameter=…> XML; it raises
// on a conversation without a user message and on a system message after the first.
func TestChatQwen35(t *testing.T) {
	testChatFamily(t, "qwen35", "<|endoftext|>", "<|im_end|>", map[string]string{
		"system_user": qwen35Greeting + `<|im_start|>assistant
<think>
`,
		"system_user_no_thinking": qwen35Greeting + `<|im_start|>assistant
<think>

</think>

`,
		"conversation": qwen35Greeting + `<|im_start|>assistant
Hello.<|im_end|>
<|im_start|>user
Name a prime.<|im_end|>
<|im_start|>assistant
<think>
`,
		"conversation_no_generation_prompt": qwen35Greeting + `<|im_start|>assistant
<think>

</think>

Hello.<|im_end|>
`,
		"reasoning": qwen35Sums + `<think>
Add three.
</think>

6<|im_end|>
`,
		"reasoning_no_thinking": qwen35Sums + `<think>

</think>

`,
		"inline_think": `<|im_start|>user
2+2?<|im_end|>
<|im_start|>assistant
<think>
Ponder.
</think>

4<|im_end|>
`,
		"tool_call": qwen35Tools + `

Use tools.<|im_end|>
` + qwen35CallTurns + `<|im_start|>assistant
<think>
`,
		"tool_call_answered": qwen35Tools + `<|im_end|>
` + qwen35CallTurns + `<|im_start|>assistant
<think>

</think>

21 degrees.<|im_end|>
`,
		"two_tool_calls": qwen35Tools + `<|im_end|>
` + qwen35AskPlain + `Checking both.

<tool_call>
<function=get_weather>
<parameter=city>
Paris
</parameter>
<parameter=unit>
celsius
</parameter>
</function>
</tool_call>
<tool_call>
<function=get_weather>
<parameter=city>
Rome
</parameter>
<parameter=days>
1
</parameter>
<parameter=hours>
[9, 18]
</parameter>
<parameter=opts>
{"rain": true, "note": "a \"b\"\n"}
</parameter>
</function>
</tool_call><|im_end|>
<|im_start|>user
<tool_response>
{"temp": 21}
</tool_response>
<tool_response>
sunny
</tool_response><|im_end|>
<|im_start|>assistant
<think>
`,
		"scalar_arguments": qwen35Tools + `<|im_end|>
` + qwen35AskPlain + `<tool_call>
<function=get_weather>
<parameter=city>
Oslo
</parameter>
<parameter=metric>
True
</parameter>
<parameter=wind>
False
</parameter>
<parameter=scale>
1.5
</parameter>
<parameter=ratio>
0.25
</parameter>
<parameter=big>
1e+20
</parameter>
<parameter=days>
-3
</parameter>
<parameter=note>
None
</parameter>
</function>
</tool_call><|im_end|>
`,
	}, map[string]string{
		"system_only": "No user query found in messages.",
		"late_system": "System message must be at the beginning.",
	})
}

const qwen35Tools = `<|im_start|>system
# Tools

You have access to the following functions:

<tools>
{"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city (°C)", "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city name"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}, "days": {"type": "integer"}}, "required": ["city"]}}}
</tools>

If you choose to call a function ONLY reply in the following format with NO suffix:

<tool_call>
<function=example_function_name>
<parameter=example_parameter_1>
value_1
</parameter>
<parameter=example_parameter_2>
This is the value for the second parameter
that can span
multiple lines
</parameter>
</function>
</tool_call>

<IMPORTANT>
Reminder:
- Function calls MUST follow the specified format: an inner <function=...></function> block must be nested within <tool_call></tool_call> XML tags
- Required parameters MUST be specified
- You may provide optional reasoning for your function call in natural language BEFORE the function call, but NOT after
- If there is no function call available, answer the question like normal with your current knowledge and do not tell the user about function calls
</IMPORTANT>`

const qwen35CallTurns = `<|im_start|>user
Weather in Paris?<|im_end|>
<|im_start|>assistant
<think>
Need the weather.
</think>

<tool_call>
<function=get_weather>
<parameter=city>
Paris
</parameter>
<parameter=days>
2
</parameter>
</function>
</tool_call><|im_end|>
<|im_start|>user
<tool_response>
{"temp": 21}
</tool_response><|im_end|>
`

const qwen35Sums = `<|im_start|>user
2+2?<|im_end|>
<|im_start|>assistant
4<|im_end|>
<|im_start|>user
3+3?<|im_end|>
<|im_start|>assistant
`

const qwen35AskPlain = `<|im_start|>user
Weather in Paris?<|im_end|>
<|im_start|>assistant
<think>

</think>

`

const qwen35Greeting = `<|im_start|>system
You are terse.<|im_end|>
<|im_start|>user
Hi!<|im_end|>
`

// TestChatGLM46: GLM-4.5/4.6 mark every earlier assistant turn with an empty think block
// and, with thinking off, append /nothink to each user message.
func TestChatGLM46(t *testing.T) {
	testChatFamily(t, "glm46", "", "<|endoftext|>", map[string]string{
		"system_user": `[gMASK]<sop><|system|>
You are terse.<|user|>
Hi!<|assistant|>`,
		"system_user_no_thinking": `[gMASK]<sop><|system|>
You are terse.<|user|>
Hi!/nothink<|assistant|>
<think></think>`,
		"conversation": `[gMASK]<sop><|system|>
You are terse.<|user|>
Hi!<|assistant|>
<think></think>
Hello.<|user|>
Name a prime.<|assistant|>`,
		"conversation_no_generation_prompt": `[gMASK]<sop><|system|>
You are terse.<|user|>
Hi!<|assistant|>
<think></think>
Hello.`,
		"reasoning": `[gMASK]<sop><|user|>
2+2?<|assistant|>
<think></think>
4<|user|>
3+3?<|assistant|>
<think>Add three.</think>
6`,
		"reasoning_no_thinking": `[gMASK]<sop><|user|>
2+2?/nothink<|assistant|>
<think></think>
4<|user|>
3+3?/nothink<|assistant|>
<think></think>`,
		"inline_think": `[gMASK]<sop><|user|>
2+2?<|assistant|>
<think>Ponder.</think>
4`,
		"tool_call": `[gMASK]<sop>` + glm46Tools + `<|system|>
Use tools.` + glm46CallTurns + `<|assistant|>`,
		"tool_call_answered": `[gMASK]<sop>` + glm46Tools + glm46CallTurns + `<|assistant|>
<think></think>
21 degrees.`,
		"two_tool_calls": `[gMASK]<sop>` + glm46Tools + `<|user|>
Weather in Paris?<|assistant|>
<think></think>
Checking both.
<tool_call>get_weather
<arg_key>city</arg_key>
<arg_value>Paris</arg_value>
<arg_key>unit</arg_key>
<arg_value>celsius</arg_value>
</tool_call>
<tool_call>get_weather
<arg_key>city</arg_key>
<arg_value>Rome</arg_value>
<arg_key>days</arg_key>
<arg_value>1</arg_value>
<arg_key>hours</arg_key>
<arg_value>[9, 18]</arg_value>
<arg_key>opts</arg_key>
<arg_value>{"rain": true, "note": "a \"b\"\n"}</arg_value>
</tool_call><|observation|>
<tool_response>
{"temp": 21}
</tool_response>
<tool_response>
sunny
</tool_response><|assistant|>`,
		"scalar_arguments": `[gMASK]<sop>` + glm46Tools + `<|user|>
Weather in Paris?<|assistant|>
<think></think>
<tool_call>get_weather
<arg_key>city</arg_key>
<arg_value>Oslo</arg_value>
<arg_key>metric</arg_key>
<arg_value>true</arg_value>
<arg_key>wind</arg_key>
<arg_value>false</arg_value>
<arg_key>scale</arg_key>
<arg_value>1.5</arg_value>
<arg_key>ratio</arg_key>
<arg_value>0.25</arg_value>
<arg_key>big</arg_key>
<arg_value>1e+20</arg_value>
<arg_key>days</arg_key>
<arg_value>-3</arg_value>
<arg_key>note</arg_key>
<arg_value>null</arg_value>
</tool_call>`,
		"system_only": `[gMASK]<sop><|system|>
You are terse.<|assistant|>`,
		"late_system": `[gMASK]<sop><|user|>
Hi!<|system|>
You are terse.<|assistant|>`,
	}, nil)
}

// glmToolsIntro opens the system turn in which both GLM templates list the tools.
const glmToolsIntro = `<|system|>
# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city (°C)", "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city name"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}, "days": {"type": "integer"}}, "required": ["city"]}}}
</tools>

For each function call, output the function name and arguments within the following XML format:
`

const glm46Tools = glmToolsIntro + `<tool_call>{function-name}
<arg_key>{arg-key-1}</arg_key>
<arg_value>{arg-value-1}</arg_value>
<arg_key>{arg-key-2}</arg_key>
<arg_value>{arg-value-2}</arg_value>
...
</tool_call>`

const glm46CallTurns = `<|user|>
Weather in Paris?<|assistant|>
<think>Need the weather.</think>
<tool_call>get_weather
<arg_key>city</arg_key>
<arg_value>Paris</arg_value>
<arg_key>days</arg_key>
<arg_value>2</arg_value>
</tool_call><|observation|>
<tool_response>
{"temp": 21}
</tool_response>`

// TestChatGLM47Flash: GLM-4.7-Flash writes the same turns without newlines, marking an
// assistant turn without reasoning with a bare </think>.
func TestChatGLM47Flash(t *testing.T) {
	testChatFamily(t, "glm47_flash", "", "<|endoftext|>", map[string]string{
		"system_user":                       `[gMASK]<sop><|system|>You are terse.<|user|>Hi!<|assistant|><think>`,
		"system_user_no_thinking":           `[gMASK]<sop><|system|>You are terse.<|user|>Hi!<|assistant|></think>`,
		"conversation":                      `[gMASK]<sop><|system|>You are terse.<|user|>Hi!<|assistant|></think>Hello.<|user|>Name a prime.<|assistant|><think>`,
		"conversation_no_generation_prompt": `[gMASK]<sop><|system|>You are terse.<|user|>Hi!<|assistant|></think>Hello.`,
		"reasoning":                         `[gMASK]<sop><|user|>2+2?<|assistant|></think>4<|user|>3+3?<|assistant|><think>Add three.</think>6`,
		"reasoning_no_thinking":             `[gMASK]<sop><|user|>2+2?<|assistant|></think>4<|user|>3+3?<|assistant|></think>`,
		"inline_think":                      `[gMASK]<sop><|user|>2+2?<|assistant|><think>Ponder.</think>4`,
		"tool_call":                         `[gMASK]<sop>` + glm47FlashTools + `<|system|>Use tools.` + glm47FlashCallTurns + `<|assistant|><think>`,
		"tool_call_answered":                `[gMASK]<sop>` + glm47FlashTools + glm47FlashCallTurns + `<|assistant|></think>21 degrees.`,
		"two_tool_calls":                    `[gMASK]<sop>` + glm47FlashTools + `<|user|>Weather in Paris?<|assistant|></think>Checking both.<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value><arg_key>unit</arg_key><arg_value>celsius</arg_value></tool_call><tool_call>get_weather<arg_key>city</arg_key><arg_value>Rome</arg_value><arg_key>days</arg_key><arg_value>1</arg_value><arg_key>hours</arg_key><arg_value>[9, 18]</arg_value><arg_key>opts</arg_key><arg_value>{"rain": true, "note": "a \"b\"\n"}</arg_value></tool_call><|observation|><tool_response>{"temp": 21}</tool_response><tool_response>sunny</tool_response><|assistant|><think>`,
		"scalar_arguments":                  `[gMASK]<sop>` + glm47FlashTools + `<|user|>Weather in Paris?<|assistant|></think><tool_call>get_weather<arg_key>city</arg_key><arg_value>Oslo</arg_value><arg_key>metric</arg_key><arg_value>true</arg_value><arg_key>wind</arg_key><arg_value>false</arg_value><arg_key>scale</arg_key><arg_value>1.5</arg_value><arg_key>ratio</arg_key><arg_value>0.25</arg_value><arg_key>big</arg_key><arg_value>1e+20</arg_value><arg_key>days</arg_key><arg_value>-3</arg_value><arg_key>note</arg_key><arg_value>null</arg_value></tool_call>`,
		"system_only":                       `[gMASK]<sop><|system|>You are terse.<|assistant|><think>`,
		"late_system":                       `[gMASK]<sop><|user|>Hi!<|system|>You are terse.<|assistant|><think>`,
	}, nil)
}

const glm47FlashTools = glmToolsIntro + `<tool_call>{function-name}<arg_key>{arg-key-1}</arg_key><arg_value>{arg-value-1}</arg_value><arg_key>{arg-key-2}</arg_key><arg_value>{arg-value-2}</arg_value>...</tool_call>`

const glm47FlashCallTurns = `<|user|>Weather in Paris?<|assistant|><think>Need the weather.</think><tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value><arg_key>days</arg_key><arg_value>2</arg_value></tool_call><|observation|><tool_response>{"temp": 21}</tool_response>`

// TestChatItemsFilter: value|items gives a mapping's pairs in JSON order, a dict literal's
// in the template's order (what Python's Jinja2 prints is in the comments), no pairs for
// none or undefined, and an error for anything but a mapping. The first mapping has many
// keys out of sorted order, so that a render walking the Go map (in a random rotation, at
// the least) rarely passes by chance.
func TestChatItemsFilter(t *testing.T) {
	x := mustDecode(t, []byte(`{"z": 1, "a": [2], "m": {"b": "c"}, "k": null, "y": 0, "b": 0, "x": 0, "c": 0, "w": 0, "d": 0}`))
	for _, c := range []struct{ src, want string }{
		{"{% for k, v in x|items %}{{ k }}={{ v | tojson }};{% endfor %}", `z=1;a=[2];m={"b": "c"};k=null;y=0;b=0;x=0;c=0;w=0;d=0;`}, // Python: same
		{"{% for k, v in x.m|items %}{{ k }}{{ v }}{% endfor %}.", "bc."},                                                            // Python: bc.
		{"{{ x|items|list|length }}", "10"},                          // Python: 10
		{"{% for k, v in x.k|items %}{{ k }}{% endfor %}.", "."},     // llama.cpp: . (Python raises)
		{"{% for k, v in nothing|items %}{{ k }}{% endfor %}.", "."}, // Python: .
		// Dict literals: keys in order of first appearance, each with its last value.
		{"{% for k, v in {'b': 1, 'a': 2, 'b': 3}|items %}{{ k }}{{ v }}{% endfor %}.", "b3a2."},             // Python: b3a2.
		{"{% set d = [{'b': 1, 'a': 2}] %}{% for k, v in d[0]|items %}{{ k }}{{ v }}{% endfor %}.", "b1a2."}, // Python: b1a2.
	} {
		got, err := render(t, c.src, ChatInput{Vars: map[string]any{"x": x}})
		if err != nil || got != c.want {
			t.Errorf("%s: got %q, %v; want %q", c.src, got, err, c.want)
		}
	}
	if got, err := render(t, "{% for k, v in [1, 2]|items %}{% endfor %}", ChatInput{}); err == nil {
		t.Errorf("items of a list rendered %q, want an error", got)
	}
}
