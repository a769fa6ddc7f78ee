package server

import (
	"strings"
)

// gpt-oss's harmony format writes a turn as messages, each a header and a body:
//
//	<|channel|>analysis<|message|>REASONING<|end|>
//	<|start|>assistant<|channel|>final<|message|>ANSWER
//	<|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>{ARGS}
//
// The channel says what the body is: analysis is reasoning, final (and commentary
// addressed to no one, a preamble) is content, and a message addressed to functions.NAME
// (in the header, before or after the channel) is a call of NAME. A body ends at <|end|>,
// <|call|>, <|return|> or the next header. llama.cpp reads the format the same way
// (common/chat.cpp's gpt-oss parser).
const (
	harmonyStartTag     = "<|start|>"
	harmonyChannelTag   = "<|channel|>"
	harmonyMessageTag   = "<|message|>"
	harmonyConstrainTag = "<|constrain|>"
	harmonyEndTag       = "<|end|>"
	harmonyCallTag      = "<|call|>"
	harmonyReturnTag    = "<|return|>"
)

// harmonyFinal opens the final answer, which a response format's grammar constrains;
// harmonyAnalysis the reasoning, which a reasoning budget counts.
const (
	harmonyFinal    = harmonyChannelTag + "final" + harmonyMessageTag
	harmonyAnalysis = harmonyChannelTag + "analysis" + harmonyMessageTag
)

// harmonyTags are the format's tokens, for the tokenizer to write out.
var harmonyTags = []string{harmonyStartTag, harmonyChannelTag, harmonyMessageTag, harmonyConstrainTag, harmonyEndTag, harmonyCallTag, harmonyReturnTag}

// harmonyBodyEnds end a message's body.
var harmonyBodyEnds = []string{harmonyEndTag, harmonyCallTag, harmonyReturnTag, harmonyStartTag, harmonyChannelTag}

// harmonyParser splits generated harmony text into reasoning, content and tool calls as it
// arrives: bodies of reasoning and content stream, a call is handed over when its body
// ends. Text that does not begin with a header is content, as written.
type harmonyParser struct {
	state  harmonyState
	header strings.Builder // the header read so far
	held   string          // the end of a body that may begin a tag
	body   strings.Builder // a call's arguments so far
	name   string          // the function a call's body is for
	calls  int
	// reasoning says whether analysis goes to reasoning (--reasoning-format); without, it
	// is content.
	reasoning bool
	// stream hands calls over in parts as they are written (a call's arguments are its
	// message as written, so every prefix is final but trailing whitespace); sent is how
	// much of the open call's arguments was handed over, id its id.
	stream bool
	sent   int
	id     string
}

type harmonyState int

const (
	inHeader harmonyState = iota
	inReasoning
	inAnswer
	inArguments
	inPlainText // the text is not harmony: all content
)

func newHarmonyParser(reasoning bool) *harmonyParser { return &harmonyParser{reasoning: reasoning} }

func (p *harmonyParser) add(text string) parsed {
	var out parsed
	buf := p.held + text
	p.held = ""
	for buf != "" {
		switch p.state {
		case inPlainText:
			out.content += buf
			buf = ""
		case inHeader:
			p.header.WriteString(buf)
			buf = ""
			h := p.header.String()
			if !isHeaderStart(h) {
				p.header.Reset()
				p.state, buf = inPlainText, h
				continue
			}
			at := strings.Index(h, harmonyMessageTag)
			if at < 0 {
				continue
			}
			p.header.Reset()
			p.startBody(h[:at])
			if p.state == inArguments && p.stream {
				p.id, p.sent = callID(), 0
				out.parts = append(out.parts, callPart{index: p.calls, id: p.id, name: p.name, first: true})
			}
			buf = h[at+len(harmonyMessageTag):]
		default:
			at, tag := firstOf(buf, harmonyBodyEnds)
			if at < 0 {
				keep := partialTagLen(buf, harmonyBodyEnds) // whitespace is the body's
				p.bodyText(&out, buf[:len(buf)-keep])
				p.held, buf = buf[len(buf)-keep:], ""
				continue
			}
			p.bodyText(&out, buf[:at])
			p.endBody(&out)
			buf = buf[at:]
			if tag == harmonyEndTag || tag == harmonyCallTag || tag == harmonyReturnTag {
				buf = buf[len(tag):]
			}
		}
	}
	return out
}

// flush ends the text: a header never finished is content, as written; a call whose body
// did not end is still a call (the turn ended with <|call|>, which is not part of the text).
func (p *harmonyParser) flush() parsed {
	var out parsed
	switch p.state {
	case inHeader:
		out.content = p.header.String()
		p.header.Reset()
	case inReasoning, inAnswer, inArguments:
		p.bodyText(&out, p.held)
		p.endBody(&out)
	}
	p.held = ""
	return out
}

// isHeaderStart says whether h (a header so far) can still be a header: it begins with
// <|start|> or <|channel|>, or with the beginning of one.
func isHeaderStart(h string) bool {
	for _, tag := range []string{harmonyStartTag, harmonyChannelTag} {
		if strings.HasPrefix(h, tag) || strings.HasPrefix(tag, h) {
			return true
		}
	}
	return false
}

// startBody reads a header: its channel and recipient.
func (p *harmonyParser) startBody(header string) {
	channel, recipient := "", ""
	for _, field := range strings.FieldsFunc(strings.NewReplacer(harmonyStartTag, " ", harmonyChannelTag, " channel=", harmonyConstrainTag, " ").Replace(header), isSpace) {
		switch {
		case strings.HasPrefix(field, "channel="):
			channel = strings.TrimPrefix(field, "channel=")
		case strings.HasPrefix(field, "to="):
			recipient = strings.TrimPrefix(field, "to=")
		}
	}
	switch {
	case strings.HasPrefix(recipient, "functions."):
		p.state, p.name = inArguments, strings.TrimPrefix(recipient, "functions.")
	case channel == "analysis" && p.reasoning:
		p.state = inReasoning
	default:
		p.state = inAnswer
	}
}

func (p *harmonyParser) bodyText(out *parsed, s string) {
	switch p.state {
	case inReasoning:
		out.reasoning += s
	case inAnswer:
		out.content += s
	case inArguments:
		p.body.WriteString(s)
		if p.stream {
			p.handOver(out, strings.TrimSpace(p.body.String()))
		}
	}
}

// handOver hands over what of args (the open call's arguments as they stand, which extend
// what was handed over before) was not yet.
func (p *harmonyParser) handOver(out *parsed, args string) {
	if len(args) > p.sent {
		out.parts = append(out.parts, callPart{index: p.calls, args: args[p.sent:]})
		p.sent = len(args)
	}
}

// endBody ends a message: a call's arguments become a call.
func (p *harmonyParser) endBody(out *parsed) {
	if p.state == inArguments {
		args := strings.TrimSpace(p.body.String())
		if args == "" {
			args = "{}"
		}
		if p.stream {
			p.handOver(out, args)
			out.parts = append(out.parts, callPart{index: p.calls, last: true})
		} else {
			c := toolCall{Index: p.calls, ID: callID(), Type: "function"}
			c.Function.Name, c.Function.Arguments = p.name, args
			out.calls = append(out.calls, c)
		}
		p.calls++
		p.body.Reset()
	}
	p.state = inHeader
}

// firstOf finds the earliest of tags in s ("" is none).
func firstOf(s string, tags []string) (int, string) {
	at, tag := -1, ""
	for _, t := range tags {
		if t == "" {
			continue
		}
		if i := strings.Index(s, t); i >= 0 && (at < 0 || i < at) {
			at, tag = i, t
		}
	}
	return at, tag
}

// partialTagLen is the length of the longest end of s that begins one of tags.
func partialTagLen(s string, tags []string) int {
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
	return keep
}
