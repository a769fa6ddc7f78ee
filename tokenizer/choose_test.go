package tokenizer

import (
	"strings"
	"testing"
)

// ChatML's rendering of llama.cpp's check conversation, written out by hand from the
// format (common/chat.cpp's CHATML_TEMPLATE_SRC at 3f545bec renders the same).
const chatMLCheck = "<|im_start|>user\ntest<|im_end|>\n<|im_start|>assistant\n"

func TestChooseChatTemplate(t *testing.T) {
	check := func(c ChosenTemplate) string {
		t.Helper()
		msg := &Object{Keys: []string{"role", "content"}, Values: map[string]any{"role": "user", "content": "test"}}
		out, err := c.Render(ChatInput{Messages: []any{msg}, AddGenerationPrompt: true})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	const own = "{% for m in messages %}[{{ m.role }}] {{ m.content }}{% endfor %}"
	for _, tc := range []struct {
		name, explicit, model string
		want                  string // the check conversation's rendering
		warning               string // in Warning; "" for none
		err                   string // in the error; "" for none
	}{
		{name: "the model's", model: own, want: "[user] test"},
		{name: "explicit over the model's", explicit: own, model: chatML, want: "[user] test"},
		{name: "chatml by name", explicit: "chatml", model: own, want: chatMLCheck},
		{name: "no template", want: chatMLCheck},
		{name: "the model's is named chatml", model: "chatml", want: chatMLCheck},
		{name: "the model's does not parse", model: "{% for m in messages %}", want: chatMLCheck,
			warning: "the model's chat template cannot render a one-message conversation"},
		{name: "the model's raises", model: "{{ raise_exception('Only system and user roles') }}", want: chatMLCheck,
			warning: "Only system and user roles"},
		{name: "explicit does not parse", explicit: "{% if %}", model: own, err: "the chat template given"},
		{name: "explicit raises", explicit: "{{ raise_exception('no') }}", model: own, err: "rendering a one-message conversation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ChooseChatTemplate(tc.explicit, tc.model, "<s>", "</s>")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := check(c); got != tc.want {
				t.Errorf("renders %q, want %q", got, tc.want)
			}
			if tc.warning == "" && c.Warning != "" || !strings.Contains(c.Warning, tc.warning) {
				t.Errorf("warning %q, want one containing %q", c.Warning, tc.warning)
			}
			if c.Warning != "" && !strings.Contains(c.Warning, "--chat-template") {
				t.Errorf("warning %q does not say how to choose another template", c.Warning)
			}
		})
	}
}
