package server

import (
	"encoding/json"
	"regexp"
	"strings"
	"unicode/utf8"
)

// callPart is a piece of a tool call handed over while the model still writes it, as
// llama-server streams calls: the first part of a call opens it (its index, id and name),
// the next ones carry more of its arguments' JSON text, the last one closes it. The parts'
// arguments joined are the call's arguments, byte for byte those the whole call would have.
type callPart struct {
	index    int
	id, name string // the first part's
	args     string
	first    bool
	last     bool
}

// streamedCall follows a call as its text grows. In a JSON-arguments form (Hermes,
// DeepSeek's) it opens once the name and the opening brace of the arguments are written,
// then hands over the arguments' text up to where the JSON object ends. In a key/value form
// (Qwen3-Coder's XML, GLM's) it opens at the name and hands over the JSON object the whole
// call's parameters make (see pairArgs) as far as the text fixes it: a string parameter's
// value as it is written, any other when its closing tag comes.
type streamedCall struct {
	open  bool
	index int
	id    string
	args  string // the arguments' text handed over so far
}

// Heads of the JSON-arguments forms up to the arguments' opening brace: Hermes'
// {"name": NAME, "arguments": {, DeepSeek V3's function<sep>NAME\n```json\n{ and V3.1's
// NAME<sep>{. The name group is a JSON string's content (Hermes) or raw text.
var (
	hermesHead   = regexp.MustCompile(`^\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"arguments"\s*:\s*\{`)
	deepseekHead = regexp.MustCompile(`^function` + regexp.QuoteMeta(deepseekSep) + `([^\n]+)\n` + "```json" + `\s*\{`)
	deepseek31   = regexp.MustCompile(`^([^\n` + "`" + `]+?)` + regexp.QuoteMeta(deepseekSep) + `\s*\{`)
)

// callHead finds a call's name and where its arguments' object begins in the text written
// so far, ok false until both are there (or when the form streams no calls).
func callHead(body string, form callForm) (name string, at int, ok bool) {
	lead := len(body) - len(strings.TrimLeftFunc(body, isSpace))
	name, at, ok = callHeadAt(body[lead:], form)
	return name, lead + at, ok
}

func callHeadAt(body string, form callForm) (name string, at int, ok bool) {
	switch form {
	case jsonForm:
		m := hermesHead.FindStringSubmatchIndex(body)
		if m == nil {
			return "", 0, false
		}
		if err := json.Unmarshal([]byte(`"`+body[m[2]:m[3]]+`"`), &name); err != nil || name == "" {
			return "", 0, false
		}
		return name, m[1] - 1, true
	case deepseekForm:
		for _, re := range []*regexp.Regexp{deepseekHead, deepseek31} {
			if m := re.FindStringSubmatchIndex(body); m != nil {
				name = strings.TrimSpace(body[m[2]:m[3]])
				return name, m[1] - 1, name != ""
			}
		}
	}
	return "", 0, false
}

// jsonObjectEnd is the length of the JSON object s begins with, or -1 while it is not
// closed yet.
func jsonObjectEnd(s string) int {
	depth, inString, escaped := 0, false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			if depth--; depth == 0 {
				return i + 1
			}
		}
	}
	return -1
}

// progress is the parts of the call whose text so far is body (without its tags), done when
// its closing tag has come: nothing until the call can open, then its opening part and the
// arguments' text not handed over yet, and with done its last part. types are the request's
// tools' parameter types.
func (c *streamedCall) progress(body string, form callForm, types argTypes, index int, done bool) []callPart {
	var name, args string
	switch form {
	case xmlForm, glmForm:
		var ok bool
		if name, args, ok = pairArgs(body, form, types, done); !ok {
			return nil
		}
	default:
		var at int
		var ok bool
		if name, at, ok = callHead(body, form); !ok {
			return nil
		}
		args = body[at:]
		if end := jsonObjectEnd(args); end >= 0 {
			args = args[:end]
		} else if done {
			args = strings.TrimRightFunc(args, isSpace)
		}
	}
	var parts []callPart
	if !c.open {
		c.open, c.index, c.id, c.args = true, index, callID(), ""
		parts = append(parts, callPart{index: c.index, id: c.id, name: name, first: true})
	}
	if len(args) > len(c.args) && strings.HasPrefix(args, c.args) {
		parts = append(parts, callPart{index: c.index, args: args[len(c.args):]})
		c.args = args
	}
	if done {
		parts = append(parts, callPart{index: c.index, last: true})
		*c = streamedCall{}
	}
	return parts
}

// pairArgs reads a call in a key/value form as far as it is written: its name (ok once it
// is complete) and the prefix of its arguments' JSON text (as argsWriter writes it for the
// whole call) that no later text can change. A pair whose closing tag has come is written
// whole; the value being written of a string parameter as far as it goes, short of what may
// begin its closing tag or end inside a character; the object's closing brace with done.
func pairArgs(body string, form callForm, types argTypes, done bool) (name, args string, ok bool) {
	var rest string
	var pair func(string) (key, value string, complete, ok bool)
	text := strings.TrimLeftFunc(body, isSpace)
	if form == xmlForm {
		after, found := strings.CutPrefix(text, "<function=")
		if name, rest, ok = strings.Cut(after, ">"); !found || !ok || name == "" {
			return "", "", false
		}
		pair = func(r string) (string, string, bool, bool) {
			after, found := strings.CutPrefix(r, "<parameter=")
			key, body, closed := strings.Cut(after, ">")
			if !found || !closed {
				return "", "", false, false
			}
			body = strings.TrimPrefix(body, "\n")
			if value, _, ended := strings.Cut(body, "</parameter>"); ended {
				return key, strings.TrimSuffix(value, "\n"), true, true
			}
			return key, heldBack(body, "\n</parameter>", "</parameter>"), false, true
		}
	} else {
		var pairs bool
		name, rest, pairs = strings.Cut(text, "<arg_key>")
		if name = strings.TrimSpace(name); name == "" || strings.ContainsAny(name, " \n\t<>{}") || !pairs && !done {
			return "", "", false
		}
		rest = "<arg_key>" + rest
		if !pairs {
			rest = ""
		}
		pair = func(r string) (string, string, bool, bool) {
			after, found := strings.CutPrefix(r, "<arg_key>")
			key, body, closed := strings.Cut(after, "</arg_key>")
			body, opened := strings.CutPrefix(strings.TrimLeftFunc(body, isSpace), "<arg_value>")
			if !found || !closed || !opened {
				return "", "", false, false
			}
			if value, _, ended := strings.Cut(body, "</arg_value>"); ended {
				return key, value, true, true
			}
			return key, heldBack(body, "</arg_value>"), false, true
		}
	}
	var b strings.Builder
	b.WriteByte('{')
	consumed := func(r string) string { // what follows a complete pair
		if form == xmlForm {
			_, tail, _ := strings.Cut(r, "</parameter>")
			return tail
		}
		_, tail, _ := strings.Cut(r, "</arg_value>")
		return tail
	}
	for first := true; ; first = false {
		rest = strings.TrimLeftFunc(rest, isSpace)
		key, value, complete, ok := pair(rest)
		if !ok {
			break
		}
		if !first {
			b.WriteByte(',')
		}
		b.WriteString(jsonString(key) + ":")
		if complete {
			b.WriteString(argJSON(types[name], key, value))
			rest = consumed(rest)
			continue
		}
		if types[name][key] == "string" { // its value, open-ended
			b.WriteString(strings.TrimSuffix(jsonString(value), `"`))
		}
		return name, b.String(), true
	}
	if done {
		b.WriteByte('}')
	}
	return name, b.String(), true
}

// heldBack is value short of its end that may begin one of the closing tags, and of a
// character cut short.
func heldBack(value string, tags ...string) string {
	value = value[:len(value)-partialTagLen(value, tags)]
	for i := len(value) - 1; i >= 0 && i >= len(value)-3; i-- {
		if utf8.RuneStart(value[i]) {
			if !utf8.FullRuneInString(value[i:]) {
				value = value[:i]
			}
			break
		}
	}
	return value
}
