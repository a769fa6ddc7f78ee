package server

import (
	"encoding/json"
	"regexp"
	"strings"
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

// streamedCall follows a call in a JSON-arguments form (Hermes, DeepSeek's) as its text
// grows: it opens once the name and the opening brace of the arguments are written, then
// hands over the arguments' text up to where the JSON object ends.
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
// arguments' text not handed over yet, and with done its last part.
func (c *streamedCall) progress(body string, form callForm, index int, done bool) []callPart {
	name, at, ok := callHead(body, form)
	if !ok {
		return nil
	}
	var parts []callPart
	if !c.open {
		c.open, c.index, c.id, c.args = true, index, callID(), ""
		parts = append(parts, callPart{index: c.index, id: c.id, name: name, first: true})
	}
	args := body[at:]
	if end := jsonObjectEnd(args); end >= 0 {
		args = args[:end]
	} else if done {
		args = strings.TrimRightFunc(args, isSpace)
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
