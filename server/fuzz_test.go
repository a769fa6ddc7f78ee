package server

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/moerun/moerun/grammar"
)

// FuzzDecodeRequest feeds arbitrary bodies to the chat and completions decoders (JSON
// decoding, validation, chat template, tokenization) and the control route: they must never
// panic, and a body they refuse must be refused with a 4xx.
func FuzzDecodeRequest(f *testing.F) {
	for _, seed := range []string{
		chatBody,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"stop":["a","b"],"logprobs":true,"top_logprobs":3}`,
		`{"messages":[{"role":"system","content":null},{"role":"user","content":"x"}],"stream":true,"stream_options":{"include_usage":true}}`,
		`{"prompt":"the cat","max_tokens":4,"logprobs":2,"seed":-1,"temperature":0}`,
		`{"prompt":[1,2,3],"stop":"x","n":1,"top_k":0,"min_p":1,"repeat_last_n":-1}`,
		`{"prompt":[[1,2]]}`,
		`{"messages":[{"role":"user","content":"hi"}],"max_tokens":1e400}`,
		`{"messages":{"role":"user"}}`,
		`[1,2]`,
		`{"prompt":"` + "\xff\xfe" + `"}`,
		`{"messages":[{"role":"user","content":"{{ raise_exception('x') }}"}]}`,
		`{"id":"chatcmpl-0123","action":"reasoning_end","model":"m"}`,
	} {
		f.Add([]byte(seed))
	}
	s, err := New(testConfig())
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for name, decodeFn := range map[string]func() (*job, *apiError){
			"chat":        func() (*job, *apiError) { return s.decodeChat(bytes.NewReader(body)) },
			"completions": func() (*job, *apiError) { return s.decodeCompletion(bytes.NewReader(body)) },
		} {
			j, aerr := decodeFn()
			switch {
			case aerr != nil && (aerr.Status < 400 || aerr.Status > 499 || aerr.Message == ""):
				t.Fatalf("%s: %q refused with %d %q", name, body, aerr.Status, aerr.Message)
			case aerr == nil && (len(j.prompt) == 0 || len(j.prompt) >= s.slotSize):
				t.Fatalf("%s: %q accepted with a prompt of %d tokens (slot %d)", name, body, len(j.prompt), s.slotSize)
			}
		}
		// The control route: a 400 with a message, or an answer naming no running completion.
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions/control", bytes.NewReader(body))
		if aerr := s.control(w, r, nil); aerr != nil {
			if aerr.Status != http.StatusBadRequest || aerr.Message == "" {
				t.Fatalf("control: %q refused with %d %q", body, aerr.Status, aerr.Message)
			}
		} else if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"success":false`) {
			t.Fatalf("control: %q answered %d %s", body, w.Code, w.Body)
		}
	})
}

// FuzzChatParser feeds arbitrary model output, in pieces of a size the input picks, to the
// chat parsers of the tool-call families, whole and streaming calls: they must never panic,
// and a stream's call parts must open and close each call once, in order.
func FuzzChatParser(f *testing.F) {
	for _, seed := range []string{
		"<think>\nPlan.\n</think>\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, \"}\"]}}\n</tool_call>",
		"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1",
		"<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>",
		"<tool_call>f\n<arg_key>a</arg_key>\n<arg_value>1</arg_value>\n</tool_call>",
		deepseekCallsBegin + deepseekCallBegin + "function" + deepseekSep + "f\n```json\n{\"a\": 1}\n```" + deepseekCallEnd + deepseekCallsEnd,
		deepseekCallsBegin + deepseekCallBegin + "f" + deepseekSep + "{\"a\": \"\\\"{\"}" + deepseekCallEnd,
		"<tool_call><tool_call></tool_call>{\"name\": \"\\u0066\", \"arguments\": {}}</tool_call>",
		"<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\": 1}<|call|><|start|>assistant<|channel|>final<|message|>ok",
	} {
		f.Add(seed, uint8(3))
	}
	var servers []*Server
	for _, family := range []string{"qwen3", "qwen35", "glm46", "deepseek_v3", "deepseek_v31", "gpt_oss"} {
		servers = append(servers, templateServer(f, family))
	}
	g, err := grammar.Parse(`root ::= "x"`)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, text string, size uint8) {
		n := int(size%16) + 1
		for _, s := range servers {
			for _, j := range []*job{{tools: true}, {tools: true, stream: true, grammar: g, forcedCall: true}} {
				p := textParser{s.outputParser(j)}
				var out parsed
				for i := 0; i < len(text); i += n {
					out.append(p.piece(text[i:min(i+n, len(text))]))
				}
				out.append(p.end())
				open := -1
				for _, part := range out.parts {
					switch {
					case part.first && open >= 0, !part.first && open != part.index:
						t.Fatalf("%q in pieces of %d: part %+v while call %d is open", text, n, part, open)
					case part.first:
						open = part.index
					case part.last:
						open = -1
					}
				}
				if open >= 0 {
					t.Fatalf("%q in pieces of %d: call %d never closed", text, n, open)
				}
			}
		}
	})
}
