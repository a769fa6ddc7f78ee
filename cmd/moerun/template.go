package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/moerun/moerun/tokenizer"
)

// templateCmd renders a model's chat template, as Hugging Face's apply_chat_template does.
type templateCmd struct {
	Model              string   `short:"m" required:"" help:"GGUF model file whose tokenizer.chat_template to render."`
	Messages           string   `required:"" help:"JSON file with the conversation: an array of {\"role\", \"content\", …} messages."`
	Tools              string   `help:"JSON file with the tools: an array of OpenAI-style tool definitions."`
	NoGenerationPrompt bool     `name:"no-generation-prompt" help:"Do not open the assistant's turn at the end."`
	Var                []string `help:"Extra template variable name=value; the value is read as JSON when it is JSON (true, 3, \"x\", {...}), else as a string. Repeatable." placeholder:"NAME=VALUE"`
}

// Help is the command's detailed help: what to know first, and an example that docs/docs_test.go runs.
func (*templateCmd) Help() string {
	return "Example (a one-message conversation):\n" +
		"\n" +
		"    echo '[{\"role\": \"user\", \"content\": \"Hi\"}]' > chat.json\n" +
		"    moerun template -m testdata/models/tiny-qwen3moe.gguf --messages chat.json"
}

func (c *templateCmd) Run(e *env) error {
	v, err := loadVocab(c.Model)
	if err != nil {
		return err
	}
	if v.ChatTemplate == "" {
		return badInput("%s has no chat template (tokenizer.chat_template)", c.Model)
	}
	tpl, err := tokenizer.ParseTemplate(v.ChatTemplate)
	if err != nil {
		return badInput("%s: %v", c.Model, err)
	}
	in := tokenizer.ChatInput{
		AddGenerationPrompt: !c.NoGenerationPrompt,
		BOSToken:            v.Piece(v.BOS, true),
		EOSToken:            v.Piece(v.EOS, true),
		Vars:                map[string]any{},
	}
	if in.Messages, err = readJSONArray(c.Messages, "--messages"); err != nil {
		return err
	}
	if c.Tools != "" {
		if in.Tools, err = readJSONArray(c.Tools, "--tools"); err != nil {
			return err
		}
	}
	for _, kv := range c.Var {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			return badInput("--var %q: want name=value", kv)
		}
		parsed, err := tokenizer.DecodeJSON([]byte(value))
		if err != nil {
			parsed = value
		}
		in.Vars[name] = parsed
	}
	out, err := tpl.Render(in)
	if err != nil {
		return badInput("%s: %v", c.Model, err)
	}
	_, err = fmt.Fprint(e.stdout, out)
	return err
}

func readJSONArray(path, flag string) ([]any, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	v, err := tokenizer.DecodeJSON(b)
	if err != nil {
		return nil, badInput("%s %s: %v", flag, path, err)
	}
	arr, ok := v.([]any)
	if !ok {
		return nil, badInput("%s %s: want a JSON array", flag, path)
	}
	return arr, nil
}
