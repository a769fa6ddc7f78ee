package tokenizer

import "fmt"

// ChatMLName is the name that selects ChatML as an explicit template (llama-server's
// --chat-template chatml).
const ChatMLName = "chatml"

// chatML renders the ChatML format, which llama.cpp uses for a model without a template of
// its own: each message as <|im_start|>ROLE\nCONTENT<|im_end|>\n, then
// <|im_start|>assistant\n when a generation prompt is asked for.
const chatML = `{% for message in messages %}{{ '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}{% endfor %}` +
	`{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}`

// ChosenTemplate is the chat template chat requests use, and why.
type ChosenTemplate struct {
	*Template
	// Source is the template's text: the explicit one, the model's, or ChatML's.
	Source string
	// Warning, when not empty, says why the model's own template is not the one used.
	Warning string
}

// ChooseChatTemplate picks the template for chat requests as llama-server does. An explicit
// template (--chat-template, --chat-template-file; "chatml" names ChatML) must parse and
// render a one-message conversation: if it does not, that is the error. Without one, the
// model's tokenizer.chat_template is used; a model that has none gets ChatML, as in
// llama.cpp. Where the model's template fails that check, llama-server refuses to start;
// moerun serves with ChatML instead and says so in Warning, so that /v1/completions and a
// --chat-template given on the next start remain the user's choice rather than a dead end.
// bos and eos are the vocabulary's texts for those tokens, as templates see them.
func ChooseChatTemplate(explicit, model, bos, eos string) (ChosenTemplate, error) {
	if explicit != "" {
		src := explicit
		if src == ChatMLName {
			src = chatML
		}
		t, err := verifiedTemplate(src, bos, eos)
		if err != nil {
			return ChosenTemplate{}, fmt.Errorf("the chat template given: %w", err)
		}
		return ChosenTemplate{Template: t, Source: src}, nil
	}
	if model == "" || model == ChatMLName {
		t, err := verifiedTemplate(chatML, bos, eos)
		return ChosenTemplate{Template: t, Source: chatML}, err
	}
	t, err := verifiedTemplate(model, bos, eos)
	if err == nil {
		return ChosenTemplate{Template: t, Source: model}, nil
	}
	fallback, ferr := verifiedTemplate(chatML, bos, eos)
	return ChosenTemplate{Template: fallback, Source: chatML,
		Warning: fmt.Sprintf("the model's chat template cannot render a one-message conversation (%v); chat requests use ChatML instead (give --chat-template or --chat-template-file to choose another)", err)}, ferr
}

// verifiedTemplate parses src and renders [{"role": "user", "content": "test"}] with a
// generation prompt, the check llama.cpp's common_chat_verify_template makes.
func verifiedTemplate(src, bos, eos string) (*Template, error) {
	t, err := ParseTemplate(src)
	if err != nil {
		return nil, err
	}
	msg := &Object{Keys: []string{"role", "content"}, Values: map[string]any{"role": "user", "content": "test"}}
	if _, err := t.Render(ChatInput{Messages: []any{msg}, AddGenerationPrompt: true, BOSToken: bos, EOSToken: eos}); err != nil {
		return nil, fmt.Errorf("rendering a one-message conversation: %w", err)
	}
	return t, nil
}
