package server

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strings"
)

// chatSyntax is how a model family writes its reasoning and its tool calls in the text it
// generates, as llama.cpp's chat parsers read them (common/chat.cpp). moerun knows the
// Hermes form the Qwen3 and Qwen3.5 families use: reasoning between <think> and </think>,
// each call a JSON object {"name", "arguments"} between <tool_call> and </tool_call>.
type chatSyntax struct {
	thinkOpen, thinkClose string // "" when the family writes no reasoning tags
	callOpen, callClose   string // "" when it has no tool-call syntax moerun knows
}

// hermesSyntax is Qwen3's (and Qwen3.5's, Qwen2.5's, Hermes 2 Pro's).
var hermesSyntax = chatSyntax{thinkOpen: "<think>", thinkClose: "</think>", callOpen: "<tool_call>", callClose: "</tool_call>"}

// syntaxOf is the syntax a chat template's model writes, recognised from the template as
// llama.cpp recognises formats: a template that writes <tool_call> is Hermes; one that
// writes only <think> has reasoning tags and no known tool calls.
func syntaxOf(template string) chatSyntax {
	var s chatSyntax
	if strings.Contains(template, "<think>") {
		s.thinkOpen, s.thinkClose = hermesSyntax.thinkOpen, hermesSyntax.thinkClose
	}
	if strings.Contains(template, "<tool_call>") {
		s.callOpen, s.callClose = hermesSyntax.callOpen, hermesSyntax.callClose
	}
	return s
}

// toolCall is one call the model made, as OpenAI's API returns it.
type toolCall struct {
	Index    int    `json:"index"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"` // a JSON object, as text
	} `json:"function"`
}

// parsed is what a piece of generated text holds once split.
type parsed struct {
	reasoning, content string
	calls              []toolCall
}

func (p *parsed) empty() bool { return p.reasoning == "" && p.content == "" && len(p.calls) == 0 }

// chatParser splits generated text, as it arrives, into reasoning, content and tool calls.
// Text that may be the start of a tag is held back until the next piece decides it; a
// tool call is handed over whole once its closing tag arrives. Whitespace that follows a
// closing tag is dropped, as llama.cpp trims the parts.
type chatParser struct {
	syn  chatSyntax
	mode parseMode
	held string // a suffix that may begin a tag (or whitespace before one)
	call strings.Builder
	// beforeCall is the whitespace that preceded the open call, given back as content if
	// the call never ends.
	beforeCall string
	calls      int  // tool calls found so far
	trimNext   bool // drop the whitespace at the start of the next text
}

type parseMode int

const (
	inContent parseMode = iota
	inThought
	inCall
)

// newChatParser starts a parser; thinking says the prompt already opened the reasoning
// (a template whose generation prompt ends with <think>).
func newChatParser(syn chatSyntax, thinking bool) *chatParser {
	p := &chatParser{syn: syn}
	if thinking && syn.thinkOpen != "" {
		p.mode, p.trimNext = inThought, true
	}
	return p
}

// add takes the next piece of generated text.
func (p *chatParser) add(text string) parsed {
	var out parsed
	buf := p.held + text
	p.held = ""
	for buf != "" {
		switch p.mode {
		case inContent:
			open, at := p.firstOpening(buf)
			if at < 0 {
				keep := heldPrefix(buf, p.syn.thinkOpen, p.syn.callOpen)
				p.text(&out.content, buf[:len(buf)-keep])
				p.held, buf = buf[len(buf)-keep:], ""
				continue
			}
			before := strings.TrimRightFunc(buf[:at], isSpace)
			p.text(&out.content, before)
			if open == p.syn.thinkOpen {
				p.mode = inThought
			} else {
				p.mode, p.beforeCall = inCall, buf[len(before):at]
			}
			buf, p.trimNext = buf[at+len(open):], true
		case inThought:
			at := strings.Index(buf, p.syn.thinkClose)
			if at < 0 {
				keep := heldPrefix(buf, p.syn.thinkClose)
				p.text(&out.reasoning, buf[:len(buf)-keep])
				p.held, buf = buf[len(buf)-keep:], ""
				continue
			}
			p.text(&out.reasoning, strings.TrimRightFunc(buf[:at], isSpace))
			buf, p.mode, p.trimNext = buf[at+len(p.syn.thinkClose):], inContent, true
		case inCall:
			// The closing tag may have begun in an earlier piece: look in the whole call.
			p.call.WriteString(buf)
			call := p.call.String()
			at := strings.Index(call, p.syn.callClose)
			if at < 0 {
				buf = ""
				continue
			}
			p.call.Reset()
			p.call.WriteString(call[:at])
			buf, p.mode, p.trimNext = call[at+len(p.syn.callClose):], inContent, true
			out.calls = append(out.calls, p.finishCall())
		}
	}
	return out
}

// flush ends the text: held-back text is what it is, and an unfinished tool call is
// returned as content, as written (llama.cpp keeps what it cannot parse).
func (p *chatParser) flush() parsed {
	var out parsed
	switch p.mode {
	case inThought:
		out.reasoning = strings.TrimRightFunc(p.held, isSpace)
	case inCall:
		out.content = p.beforeCall + p.syn.callOpen + p.call.String()
	default:
		out.content = strings.TrimRightFunc(p.held, isSpace)
	}
	p.held = ""
	return out
}

// text appends s to dst, dropping whitespace right after a tag.
func (p *chatParser) text(dst *string, s string) {
	if p.trimNext {
		s = strings.TrimLeftFunc(s, isSpace)
		if s == "" {
			return
		}
		p.trimNext = false
	}
	*dst += s
}

// firstOpening finds the earliest opening tag in s.
func (p *chatParser) firstOpening(s string) (string, int) {
	tag, at := "", -1
	for _, t := range []string{p.syn.thinkOpen, p.syn.callOpen} {
		if t == "" {
			continue
		}
		if i := strings.Index(s, t); i >= 0 && (at < 0 || i < at) {
			tag, at = t, i
		}
	}
	return tag, at
}

// finishCall reads the text between the call tags: {"name": …, "arguments": {…}}. Text that
// is not such an object is still returned as a call, its arguments the text as written, so
// that the client sees what the model said.
func (p *chatParser) finishCall() toolCall {
	raw := strings.TrimSpace(p.call.String())
	p.call.Reset()
	c := toolCall{Index: p.calls, ID: callID(), Type: "function"}
	p.calls++
	var body struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if err := json.Unmarshal([]byte(raw), &body); err != nil || body.Name == "" {
		c.Function.Arguments = raw
		return c
	}
	c.Function.Name = body.Name
	c.Function.Arguments = "{}"
	if len(body.Arguments) > 0 {
		var text string
		if json.Unmarshal(body.Arguments, &text) == nil { // arguments given as a JSON string already
			c.Function.Arguments = text
		} else {
			c.Function.Arguments = string(body.Arguments)
		}
	}
	return c
}

// heldPrefix is the length of the end of s to hold back: the longest end that begins one
// of the tags, and the whitespace before it (dropped if a tag follows).
func heldPrefix(s string, tags ...string) int {
	keep := 0
	for _, t := range tags {
		if t == "" {
			continue
		}
		for n := min(len(t)-1, len(s)); n > keep; n-- {
			if strings.HasSuffix(s, t[:n]) {
				keep = n
				break
			}
		}
	}
	return len(s) - len(strings.TrimRightFunc(s[:len(s)-keep], isSpace))
}

func isSpace(r rune) bool { return r == ' ' || r == '\n' || r == '\t' || r == '\r' }

// callID is a tool call's id: "call_" and 24 random hex digits.
func callID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "call_" + hex.EncodeToString(b[:])
}
