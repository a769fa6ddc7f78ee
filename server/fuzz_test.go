package server

import (
	"bytes"
	"testing"
)

// FuzzDecodeRequest feeds arbitrary bodies to the chat and completions decoders (JSON
// decoding, validation, chat template, tokenization): they must never panic, and a body
// they refuse must be refused with a 4xx.
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
	})
}
