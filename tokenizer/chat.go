package tokenizer

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nikolalohinski/gonja/v2"
	"github.com/nikolalohinski/gonja/v2/builtins"
	"github.com/nikolalohinski/gonja/v2/config"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/loaders"
	"github.com/nikolalohinski/gonja/v2/logging"
)

// Template is a parsed chat template (tokenizer.chat_template), rendered as Hugging
// Face's apply_chat_template renders it: Jinja with trim_blocks and lstrip_blocks, a tojson
// that writes what Python's json.dumps writes, raise_exception and strftime_now. Templates
// come from untrusted files: they cannot read files, and any failure, including a panic
// inside the engine, is returned as an error. A Template is safe for concurrent use.
type Template struct {
	tpl *exec.Template
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

// generationTag matches {% generation %} / {% endgeneration %}, a Hugging Face extension
// that marks the assistant's text for training masks and renders as its body.
var generationTag = regexp.MustCompile(`\{%(-?)\s*(end)?generation\s*(-?)%\}`)

// ParseTemplate parses a chat template. A syntax error names the template line.
func ParseTemplate(src string) (t *Template, err error) {
	defer recoverAsError(&err, "chat template: parse")
	// The body of {% generation %} renders unchanged: keep the tags' whitespace control by
	// turning them into an always-true if.
	src = generationTag.ReplaceAllStringFunc(src, func(tag string) string {
		m := generationTag.FindStringSubmatch(tag)
		if m[2] == "end" {
			return "{%" + m[1] + " endif " + m[3] + "%}"
		}
		return "{%" + m[1] + " if true " + m[3] + "%}"
	})
	tpl, err := parse(liftConditionals(src))
	if err != nil {
		msg := cleanError(err, src)
		if !strings.Contains(msg, "Line:") {
			if line := locateParseError(src, msg); line > 0 {
				msg = fmt.Sprintf("%s (line %d)", msg, line)
			}
		}
		return nil, fmt.Errorf("chat template: %s", msg)
	}
	return &Template{tpl: tpl}, nil
}

func parse(src string) (*exec.Template, error) {
	cfg := config.New()
	cfg.TrimBlocks = true
	cfg.LeftStripBlocks = true
	return exec.NewTemplate(templateName, cfg, sourceLoader(src), environment)
}

// blockTag finds {% name … %} tags.
var blockTag = regexp.MustCompile(`(?s)\{%-?\s*(\w+)(.*?)-?%\}`)

// blockEnds closes the block statements, so that one tag can be parsed on its own.
var blockEnds = map[string]string{"if": "{% endif %}", "for": "{% endfor %}", "macro": "{% endmacro %}", "call": "{% endcall %}", "filter": "{% endfilter %}", "raw": "{% endraw %}"}

// locateParseError finds the line of the statement a positionless parse error is about
// (gonja reports some statement errors without a position): the first tag named in the
// message that fails to parse on its own.
func locateParseError(src, msg string) int {
	for _, m := range blockTag.FindAllStringSubmatchIndex(src, -1) {
		name := src[m[2]:m[3]]
		if !strings.Contains(msg, `"`+name+`"`) && !strings.Contains(msg, "'"+name+"'") {
			continue
		}
		if _, err := parse(src[m[0]:m[1]] + blockEnds[name]); err != nil {
			return strings.Count(src[:m[0]], "\n") + 1
		}
	}
	return 0
}

func init() {
	// gonja logs through logrus at debug level; a library must stay quiet.
	logging.SetEnabled(false)
}

const templateName = "chat_template"

// sourceLoader serves the template itself and refuses everything else, so that
// {% include %} and {% import %} cannot read the file system.
type sourceLoader string

func (s sourceLoader) Read(path string) (io.Reader, error) {
	if path != templateName {
		return nil, fmt.Errorf("chat templates cannot load other templates (%q)", path)
	}
	return strings.NewReader(string(s)), nil
}

func (s sourceLoader) Resolve(path string) (string, error) { return path, nil }

func (s sourceLoader) Inherit(string) (loaders.Loader, error) { return s, nil }

// gonja's parse errors quote the whole template source; keep only the message and the
// position.
func cleanError(err error, src string) string {
	msg := err.Error()
	if src != "" {
		msg = strings.ReplaceAll(msg, "'"+src+"'", "")
		msg = strings.ReplaceAll(msg, src, "")
	}
	return msg
}

func recoverAsError(err *error, what string) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("%s: internal error in the template engine: %v", what, r)
	}
}

// ErrRaised marks errors the template raised itself with raise_exception (for example
// "Conversation roles must alternate").
var ErrRaised = errors.New("template raised an exception")

// environment is gonja's default environment with Python-compatible tojson and dict
// methods that keep key order. Dict methods that mutate are left out: Hugging Face renders
// in an immutable sandbox, where they raise.
var environment = func() *exec.Environment {
	filters := exec.NewFilterSet(map[string]exec.FilterFunction{}).Update(builtins.Filters)
	if err := filters.Replace("tojson", tojsonFilter); err != nil {
		panic(err)
	}
	if err := filters.Replace("items", itemsFilter); err != nil {
		panic(err)
	}
	dict := map[string]exec.Method[map[string]any]{
		"keys": func(self map[string]any, selfValue *exec.Value, args *exec.VarArgs) (any, error) {
			return anySlice(orderedKeys(original(self, selfValue))), noArgs("keys", args)
		},
		"values": func(self map[string]any, selfValue *exec.Value, args *exec.VarArgs) (any, error) {
			var vals []any
			for _, k := range orderedKeys(original(self, selfValue)) {
				vals = append(vals, self[k])
			}
			return vals, noArgs("values", args)
		},
		"items": func(self map[string]any, selfValue *exec.Value, args *exec.VarArgs) (any, error) {
			return orderedItems(original(self, selfValue)), noArgs("items", args)
		},
	}
	for _, name := range []string{"get", "copy"} {
		if m, ok := builtins.Methods.Dict.Get(name); ok {
			dict[name] = m
		}
	}
	methods := builtins.Methods
	methods.Dict = exec.NewMethodSet(dict)
	return &exec.Environment{
		Context:           gonja.DefaultContext,
		Filters:           filters,
		Tests:             builtins.Tests,
		ControlStructures: builtins.ControlStructures,
		Methods:           methods,
	}
}()

// original returns the map the template holds: gonja hands methods a copy, whose address
// has no recorded key order.
func original(self map[string]any, selfValue *exec.Value) map[string]any {
	if m, ok := selfValue.Interface().(map[string]any); ok && len(m) == len(self) {
		return m
	}
	return self
}

func noArgs(method string, args *exec.VarArgs) error {
	if len(args.Args) > 0 || len(args.KwArgs) > 0 {
		return fmt.Errorf("%s() takes no arguments", method)
	}
	return nil
}

func anySlice(keys []string) []any {
	out := make([]any, len(keys))
	for i, k := range keys {
		out[i] = k
	}
	return out
}

// Render renders the template for a conversation.
func (t *Template) Render(in ChatInput) (out string, err error) {
	defer recoverAsError(&err, "chat template: render")
	var maps []uintptr
	defer func() { forgetOrders(maps) }()
	conv := func(v any) any { return convertJSON(v, &maps) }
	raised := ""
	now := in.Now
	if now.IsZero() {
		now = time.Now()
	}
	data := map[string]any{
		"messages":              conv(anySliceOrNil(in.Messages)),
		"tools":                 conv(anySliceOrNil(in.Tools)),
		"documents":             nil,
		"add_generation_prompt": in.AddGenerationPrompt,
		"bos_token":             in.BOSToken,
		"eos_token":             in.EOSToken,
		"raise_exception": func(_ *exec.Evaluator, args *exec.VarArgs) (any, error) {
			msg := ""
			if len(args.Args) > 0 {
				msg = args.Args[0].String()
			}
			raised = msg
			return nil, errors.New(msg)
		},
		"strftime_now": func(_ *exec.Evaluator, args *exec.VarArgs) (any, error) {
			if len(args.Args) != 1 || !args.Args[0].IsString() {
				return nil, errors.New("strftime_now takes one format string")
			}
			return strftime(now, args.Args[0].String()), nil
		},
	}
	for k, v := range in.Vars {
		data[k] = conv(v)
	}
	out, err = t.tpl.ExecuteToString(exec.NewContext(data))
	if err != nil && raised != "" {
		return "", fmt.Errorf("chat template: %w: %s", ErrRaised, raised)
	}
	if err != nil {
		return "", fmt.Errorf("chat template: %s", cleanError(err, ""))
	}
	return out, nil
}

// anySliceOrNil keeps a nil list nil: the template must see None, not an empty list.
func anySliceOrNil(l []any) any {
	if l == nil {
		return nil
	}
	return l
}

// keyOrders remembers, for the maps a render hands to the template, the order of their
// keys in the JSON they came from (Go maps have none, Python dicts do). Entries live for one
// render, while the maps are alive, so a map's address identifies it.
var keyOrders sync.Map // uintptr → []string

func forgetOrders(maps []uintptr) {
	for _, p := range maps {
		keyOrders.Delete(p)
	}
}

// orderedKeys lists a map's keys in JSON order when known, else sorted.
func orderedKeys(m map[string]any) []string {
	if keys, ok := keyOrders.Load(reflect.ValueOf(m).Pointer()); ok && len(keys.([]string)) == len(m) {
		return keys.([]string)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// convertJSON turns DecodeJSON values into what the template engine reads: objects
// become maps whose key order is recorded.
func convertJSON(v any, maps *[]uintptr) any {
	switch x := v.(type) {
	case *Object:
		m := make(map[string]any, len(x.Keys))
		for _, k := range x.Keys {
			m[k] = convertJSON(x.Values[k], maps)
		}
		p := reflect.ValueOf(m).Pointer()
		keyOrders.Store(p, x.Keys)
		*maps = append(*maps, p)
		return m
	case []any:
		l := make([]any, len(x))
		for i, e := range x {
			l[i] = convertJSON(e, maps)
		}
		return l
	}
	return v
}
