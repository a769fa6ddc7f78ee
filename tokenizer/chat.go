package tokenizer

import (
	"errors"
	"fmt"
	"time"

	"github.com/moerun/moerun/tokenizer/jinja"
)

// Template is a parsed chat template (tokenizer.chat_template), rendered as Hugging
// Face's apply_chat_template renders it: Jinja with trim_blocks and lstrip_blocks, a tojson
// that writes what Python's json.dumps writes, raise_exception and strftime_now. Templates
// come from untrusted files: they cannot read files, every render runs under the budgets
// of package jinja (errors wrapping jinja.ErrLimit), and any failure is returned as an
// error. A Template is safe for concurrent use.
type Template struct {
	tpl *jinja.Template
}

// ChatInput is what a template sees.
type ChatInput struct {
	// Messages and Tools are JSON values as DecodeJSON returns them (objects keep their key
	// order, which tojson reproduces). Tools nil means no tools (the template sees none).
	Messages []any
	Tools    []any
	// AddGenerationPrompt asks the template to open the assistant's turn.
	AddGenerationPrompt bool
	// BOSToken and EOSToken are the vocabulary's texts for them.
	BOSToken, EOSToken string
	// Vars are extra template variables (enable_thinking, …), JSON values too.
	Vars map[string]any
	// Now is the time strftime_now formats (the current time when zero).
	Now time.Time
}

// ParseTemplate parses a chat template. A syntax error names the template line.
func ParseTemplate(src string) (*Template, error) {
	tpl, err := jinja.Parse(src)
	if err != nil {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	return &Template{tpl: tpl}, nil
}

// ErrRaised marks errors the template raised itself with raise_exception (for example
// "Conversation roles must alternate").
var ErrRaised = errors.New("template raised an exception")

// raised is raise_exception's error inside a render.
type raised struct{ msg string }

func (r *raised) Error() string { return r.msg }

// Budgets that grow with the conversation: a render may build about 16 bytes and take 16
// steps per byte of input, above package jinja's defaults (64 MiB, 20M steps), so that a
// million-token conversation renders through any template that is linear in its input,
// while a hostile template on a small input still fails within a second.
const (
	bytesPerInputByte = 16
	stepsPerInputByte = 16
)

// Render renders the template for a conversation.
func (t *Template) Render(in ChatInput) (string, error) {
	now := in.Now
	if now.IsZero() {
		now = time.Now()
	}
	var c converter
	vars := map[string]any{
		"messages":              c.list(in.Messages),
		"tools":                 c.list(in.Tools),
		"documents":             nil,
		"add_generation_prompt": in.AddGenerationPrompt,
		"bos_token":             in.BOSToken,
		"eos_token":             in.EOSToken,
		"raise_exception": jinja.Func(func(args []any, _ map[string]any) (any, error) {
			msg := ""
			if len(args) > 0 {
				msg, _ = args[0].(string)
			}
			return nil, &raised{msg}
		}),
		"strftime_now": jinja.Func(func(args []any, _ map[string]any) (any, error) {
			format, ok := "", len(args) == 1
			if ok {
				format, ok = args[0].(string)
			}
			if !ok {
				return nil, errors.New("strftime_now takes one format string")
			}
			return strftime(now, format), nil
		}),
	}
	for k, v := range in.Vars {
		vars[k] = c.value(v)
	}
	limits := jinja.Limits{
		MaxBytes: jinja.DefaultMaxBytes + bytesPerInputByte*c.size,
		MaxSteps: jinja.DefaultMaxSteps + stepsPerInputByte*c.size,
	}
	out, err := t.tpl.Render(vars, limits)
	if err != nil {
		if r := (*raised)(nil); errors.As(err, &r) {
			return "", fmt.Errorf("chat template: %w: %s", ErrRaised, r.msg)
		}
		return "", fmt.Errorf("chat template: %w", err)
	}
	return out, nil
}

// converter turns DecodeJSON values into the template's (objects become ordered
// jinja.Dicts) and measures them.
type converter struct {
	size int // bytes of text, and 16 per list or object element
}

// list converts a list, keeping a nil list nil: the template must see None, not an empty
// list.
func (c *converter) list(l []any) any {
	if l == nil {
		return nil
	}
	return c.value(l)
}

func (c *converter) value(v any) any {
	switch x := v.(type) {
	case *Object:
		d := jinja.NewDict()
		for _, k := range x.Keys {
			c.size += len(k) + 16
			d.Set(k, c.value(x.Values[k]))
		}
		return d
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			c.size += 16
			out[i] = c.value(e)
		}
		return out
	case string:
		c.size += len(x)
	case int64:
		return int(x)
	}
	return v
}
