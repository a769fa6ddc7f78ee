package server

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
)

// chatSyntax is how a model family writes its reasoning and its tool calls in the text it
// generates, as llama.cpp's chat parsers read them (common/chat.cpp and its autoparser).
// Reasoning sits between two tags (<think>, </think>); each call between two others, its
// body in the family's form (see parseCallBody): Hermes JSON and Qwen3-Coder's XML (Qwen3,
// Qwen3.5), GLM-4.5's <arg_key>/<arg_value> pairs (all three between <tool_call> and
// </tool_call>), or DeepSeek's, whose calls a section marker pair also wraps. gpt-oss's
// harmony format is not tag-based: see harmonyParser.
type chatSyntax struct {
	thinkOpen, thinkClose string // "" when the family writes no reasoning tags
	callOpen, callClose   string // "" when it has no tool-call syntax moerun knows
	// sectionOpen and sectionClose wrap a turn's calls (DeepSeek's); they carry nothing
	// and are dropped.
	sectionOpen, sectionClose string
	form                      callForm // how a call's body is written
}

// hermesSyntax is Qwen3's (and Qwen3.5's, Qwen2.5's, Hermes 2 Pro's, GLM-4.5's).
var hermesSyntax = chatSyntax{thinkOpen: "<think>", thinkClose: "</think>", callOpen: "<tool_call>", callClose: "</tool_call>"}

// DeepSeek-V3's and R1's call markers (special tokens of their vocabulary).
const (
	deepseekCallsBegin = "<｜tool▁calls▁begin｜>"
	deepseekCallsEnd   = "<｜tool▁calls▁end｜>"
	deepseekCallBegin  = "<｜tool▁call▁begin｜>"
	deepseekCallEnd    = "<｜tool▁call▁end｜>"
	deepseekSep        = "<｜tool▁sep｜>"
)

// syntaxOf is the syntax a chat template's model writes, recognised from the template as
// llama.cpp recognises formats: the tags the template itself writes.
func syntaxOf(template string) chatSyntax {
	var s chatSyntax
	if strings.Contains(template, "<think>") {
		s.thinkOpen, s.thinkClose = hermesSyntax.thinkOpen, hermesSyntax.thinkClose
	}
	switch {
	case strings.Contains(template, deepseekCallBegin):
		s.callOpen, s.callClose = deepseekCallBegin, deepseekCallEnd
		s.sectionOpen, s.sectionClose = deepseekCallsBegin, deepseekCallsEnd
		s.form = deepseekForm
	case strings.Contains(template, "<tool_call>"):
		s.callOpen, s.callClose = hermesSyntax.callOpen, hermesSyntax.callClose
		switch {
		case strings.Contains(template, "<arg_key>"):
			s.form = glmForm
		case strings.Contains(template, "<function="):
			s.form = xmlForm
		}
	}
	return s
}

// tags are the syntax's tags, for the tokenizer to write out (see Server.preserved).
func (s chatSyntax) tags() []string {
	var tags []string
	for _, t := range []string{s.thinkOpen, s.thinkClose, s.callOpen, s.callClose, s.sectionOpen, s.sectionClose} {
		if t != "" {
			tags = append(tags, t)
		}
	}
	if s.callOpen == deepseekCallBegin {
		tags = append(tags, deepseekSep)
	}
	return tags
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

// parsed is what a piece of generated text holds once split: whole tool calls, or (when the
// parser streams calls) the parts of calls being written.
type parsed struct {
	reasoning, content string
	calls              []toolCall
	parts              []callPart
}

// append adds the parts of q, which followed p in the text.
func (p *parsed) append(q parsed) {
	p.reasoning += q.reasoning
	p.content += q.content
	p.calls = append(p.calls, q.calls...)
	p.parts = append(p.parts, q.parts...)
}

func (p *parsed) empty() bool {
	return p.reasoning == "" && p.content == "" && len(p.calls) == 0 && len(p.parts) == 0
}

// chatParser splits generated text, as it arrives, into reasoning, content and tool calls.
// Text that may be the start of a tag is held back until the next piece decides it; a
// tool call is handed over whole once its closing tag arrives, or with streaming set in
// parts as it is written (see streamedCall). Whitespace that follows a
// closing tag is dropped, as llama.cpp trims the parts.
type chatParser struct {
	syn   chatSyntax
	types argTypes // the request's tools' parameter types, for calls whose values are text
	mode  parseMode
	held  string // a suffix that may begin a tag (or whitespace before one)
	call  strings.Builder
	// searched is how much of the call's text was looked through for its closing tag.
	searched int
	// beforeCall is the whitespace that preceded the open call, given back as content if
	// the call never ends.
	beforeCall string
	calls      int  // tool calls found so far
	trimNext   bool // drop the whitespace at the start of the next text
	// streaming, when set, hands calls over in parts while they are written: only where a
	// grammar holds the call to its syntax, so that a call begun is a call.
	streaming *streamedCall
}

type parseMode int

const (
	inContent parseMode = iota
	inThought
	inCall
)

// newChatParser starts a parser; thinking says the prompt already opened the reasoning
// (a template whose generation prompt ends with <think>).
func newChatParser(syn chatSyntax, thinking bool, types argTypes) *chatParser {
	p := &chatParser{syn: syn, types: types}
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
				keep := heldPrefix(buf, p.syn.thinkOpen, p.syn.callOpen, p.syn.sectionOpen, p.syn.sectionClose)
				p.text(&out.content, buf[:len(buf)-keep])
				p.held, buf = buf[len(buf)-keep:], ""
				continue
			}
			before := strings.TrimRightFunc(buf[:at], isSpace)
			p.text(&out.content, before)
			switch open {
			case p.syn.thinkOpen:
				p.mode = inThought
			case p.syn.callOpen:
				p.mode, p.beforeCall = inCall, buf[len(before):at]
			} // a section marker is dropped
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
			// The closing tag may have begun in an earlier piece: look from where it could
			// have begun, not through the whole call again (an edit call can be long).
			p.call.WriteString(buf)
			call := p.call.String()
			from := max(0, p.searched-len(p.syn.callClose)+1)
			at := strings.Index(call[from:], p.syn.callClose)
			p.searched = len(call)
			if at >= 0 {
				at += from
			}
			if at < 0 {
				if p.streaming != nil {
					// Hold back what may begin the closing tag.
					body := call[:len(call)-partialTagLen(call, []string{p.syn.callClose})]
					out.parts = append(out.parts, p.streaming.progress(body, p.syn.form, p.types, p.calls, false)...)
				}
				buf = ""
				continue
			}
			p.call.Reset()
			p.searched = 0
			buf, p.mode = call[at+len(p.syn.callClose):], inContent
			var parts []callPart
			if p.streaming != nil { // nothing if the call never opened: then it is parsed whole
				parts = p.streaming.progress(call[:at], p.syn.form, p.types, p.calls, true)
			}
			if len(parts) > 0 {
				out.parts, p.trimNext = append(out.parts, parts...), true
				p.calls++
			} else if c, ok := p.finishCall(call[:at]); ok {
				out.calls, p.trimNext = append(out.calls, c), true
			} else { // not a call after all: the text, as written
				p.trimNext = false
				p.text(&out.content, p.beforeCall+p.syn.callOpen+call[:at+len(p.syn.callClose)])
			}
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
		if p.streaming != nil && p.streaming.open { // cut short (max_tokens): closed as it is
			out.parts = p.streaming.progress(p.call.String(), p.syn.form, p.types, p.calls, true)
			p.calls++
			break
		}
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

// firstOpening finds the earliest opening tag (or section marker) in s.
func (p *chatParser) firstOpening(s string) (string, int) {
	at, tag := firstOf(s, []string{p.syn.thinkOpen, p.syn.callOpen, p.syn.sectionOpen, p.syn.sectionClose})
	return tag, at
}

// finishCall reads the text between a call's tags (see parseCallBody); ok is false for
// text in none of the forms, which is then content, as llama.cpp keeps what it cannot
// parse.
func (p *chatParser) finishCall(body string) (c toolCall, ok bool) {
	name, args, ok := parseCallBody(strings.TrimSpace(body), p.syn.form, p.types)
	if !ok {
		return toolCall{}, false
	}
	c = toolCall{Index: p.calls, ID: callID(), Type: "function"}
	c.Function.Name, c.Function.Arguments = name, args
	p.calls++
	return c, true
}

// heldPrefix is the length of the end of s to hold back: the longest end that begins one
// of the tags, and the whitespace before it (dropped if a tag follows).
func heldPrefix(s string, tags ...string) int {
	keep := partialTagLen(s, tags)
	return len(s) - len(strings.TrimRightFunc(s[:len(s)-keep], isSpace))
}

func isSpace(r rune) bool { return r == ' ' || r == '\n' || r == '\t' || r == '\r' }

// callID is a tool call's id: "call_" and 24 random hex digits.
func callID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "call_" + hex.EncodeToString(b[:])
}
