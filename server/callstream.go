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
// call's parameters make (as argsWriter writes it) as far as the text fixes it: a string
// parameter's value as it is written, any other when its closing tag comes. Each piece of
// text is read once: a coding agent's edit call can be tens of kilobytes.
type streamedCall struct {
	open  bool
	index int
	id    string
	obj   jsonObject // JSON forms
	pairs pairObject // key/value forms
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

// progress is the parts of the call whose text so far is body (without its tags; each
// call's body extends the last one's), done when its closing tag has come: nothing until the
// call can open, then its opening part and the arguments' text not handed over yet, and
// with done its last part. types are the request's tools' parameter types.
func (c *streamedCall) progress(body string, form callForm, types argTypes, index int, done bool) []callPart {
	pairForm := form == xmlForm || form == glmForm
	var parts []callPart
	if !c.open {
		var name string
		var at int
		var ok bool
		if pairForm {
			name, at, ok = pairHead(body, form, done)
		} else {
			name, at, ok = callHead(body, form)
		}
		if !ok {
			return nil
		}
		c.open, c.index, c.id = true, index, callID()
		c.obj, c.pairs = jsonObject{at: at, scanned: at, sent: at, end: -1}, pairObject{name: name, next: at, valueSent: -1}
		parts = append(parts, callPart{index: c.index, id: c.id, name: name, first: true})
	}
	var args string
	if pairForm {
		args = c.pairs.more(body, form, types[c.pairs.name], done)
	} else {
		args = c.obj.more(body, done)
	}
	if args != "" {
		parts = append(parts, callPart{index: c.index, args: args})
	}
	if done {
		parts = append(parts, callPart{index: c.index, last: true})
		*c = streamedCall{}
	}
	return parts
}

// jsonObject follows the arguments' JSON object of a call as its text grows: where it
// begins (at), how far the text is scanned and the scanner's state there, where the object
// ends once closed, and how much of it was handed over.
type jsonObject struct {
	at, scanned, end, sent int
	depth                  int
	inString, escaped      bool
}

// more is the object's text in body not handed over yet.
func (o *jsonObject) more(body string, done bool) string {
	for ; o.end < 0 && o.scanned < len(body); o.scanned++ {
		c := body[o.scanned]
		switch {
		case o.inString:
			switch {
			case o.escaped:
				o.escaped = false
			case c == '\\':
				o.escaped = true
			case c == '"':
				o.inString = false
			}
		case c == '"':
			o.inString = true
		case c == '{' || c == '[':
			o.depth++
		case c == '}' || c == ']':
			if o.depth--; o.depth == 0 {
				o.end = o.scanned + 1
			}
		}
	}
	limit := len(body)
	switch {
	case o.end >= 0:
		limit = o.end
	case done:
		limit = len(strings.TrimRightFunc(body, isSpace))
	}
	if limit <= o.sent {
		return ""
	}
	s := body[o.sent:limit]
	o.sent = limit
	return s
}

// pairHead finds a key/value call's name and where its pairs begin, ok false until the name
// is complete: after <function=NAME> (XML), or before the first <arg_key> (GLM; with done,
// a call without arguments).
func pairHead(body string, form callForm, done bool) (name string, at int, ok bool) {
	lead := len(body) - len(strings.TrimLeftFunc(body, isSpace))
	text := body[lead:]
	if form == xmlForm {
		after, found := strings.CutPrefix(text, "<function=")
		name, _, ok = strings.Cut(after, ">")
		if !found || !ok || name == "" {
			return "", 0, false
		}
		return name, lead + len("<function=") + len(name) + 1, true
	}
	name, _, pairs := strings.Cut(text, "<arg_key>")
	if !pairs && !done {
		return "", 0, false
	}
	at = lead + len(name)
	if name = strings.TrimSpace(name); name == "" || strings.ContainsAny(name, " \n\t<>{}") {
		return "", 0, false
	}
	return name, at, true
}

// pairObject follows the JSON object a key/value call's pairs make as its text grows: the
// name, whether the opening brace was handed over, where the first unfinished pair begins
// (next), how many pairs are finished, and of the unfinished one whether its key was handed
// over, how much of its string value (valueSent, -1 before its opening quote), and how far
// its closing tag was looked for.
type pairObject struct {
	name             string
	braced, keyOut   bool
	next, pairs      int
	valueSent, found int
}

// more is the object's text in body not handed over yet (see streamedCall): each finished
// pair whole, the unfinished one's key, and its value if it is a string as far as it is
// written, short of what may begin its closing tag or end inside a character; the closing
// brace with done.
func (o *pairObject) more(body string, form callForm, types map[string]string, done bool) string {
	open, close, tails := "<parameter=", "</parameter>", []string{"\n</parameter>", "</parameter>"}
	if form == glmForm {
		open, close, tails = "<arg_key>", "</arg_value>", []string{"</arg_value>"}
	}
	var b strings.Builder
	if !o.braced {
		b.WriteByte('{')
		o.braced = true
	}
	for {
		at := o.next + len(body[o.next:]) - len(strings.TrimLeftFunc(body[o.next:], isSpace))
		key, vstart, ok := pairKey(body, at, open, form)
		if !ok {
			break
		}
		if !o.keyOut {
			if o.pairs > 0 {
				b.WriteByte(',')
			}
			b.WriteString(jsonString(key) + ":")
			o.keyOut = true
		}
		// The closing tag is looked for only in text not looked at before.
		from := max(vstart, o.found-len(close)+1)
		end := strings.Index(body[from:], close)
		if end < 0 {
			o.found = len(body)
			if types[key] == "string" {
				if o.valueSent < 0 {
					b.WriteByte('"')
					o.valueSent = 0
				}
				held := heldBack(body[vstart:], tails...)
				if len(held) > o.valueSent {
					b.WriteString(escaped(held[o.valueSent:]))
					o.valueSent = len(held)
				}
			}
			break
		}
		end += from
		value := body[vstart:end]
		if form == xmlForm {
			value = strings.TrimSuffix(value, "\n")
		}
		if o.valueSent >= 0 {
			b.WriteString(escaped(value[o.valueSent:]) + `"`)
		} else {
			b.WriteString(argJSON(types, key, value))
		}
		o.next, o.pairs, o.keyOut, o.valueSent, o.found = end+len(close), o.pairs+1, false, -1, 0
	}
	if done {
		b.WriteByte('}')
	}
	return b.String()
}

// pairKey reads the key of the pair at body[at:] and where its value begins, ok false while
// either is unwritten: <parameter=KEY>\n (XML) or <arg_key>KEY</arg_key> <arg_value> (GLM).
func pairKey(body string, at int, open string, form callForm) (key string, vstart int, ok bool) {
	after, found := strings.CutPrefix(body[at:], open)
	if !found {
		return "", 0, false
	}
	sep := ">"
	if form == glmForm {
		sep = "</arg_key>"
	}
	key, rest, closed := strings.Cut(after, sep)
	if !closed || key == "" {
		return "", 0, false
	}
	vstart = len(body) - len(rest)
	if form == glmForm {
		value, opened := strings.CutPrefix(strings.TrimLeftFunc(rest, isSpace), "<arg_value>")
		if !opened {
			return "", 0, false
		}
		return key, len(body) - len(value), true
	}
	if strings.HasPrefix(rest, "\n") {
		vstart++
	}
	return key, vstart, true
}

// escaped is s as the inside of a JSON string (see jsonString): pieces of a value escaped
// one after another join into the value's escaping, as long as none ends inside a character.
func escaped(s string) string {
	q := jsonString(s)
	return q[1 : len(q)-1]
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
