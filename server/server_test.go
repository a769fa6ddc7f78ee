package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/moerun/moerun/moe"
)

const chatBody = `{"model":"tiny","messages":[{"role":"user","content":"hello"}],"max_tokens":12,"seed":7}`

// TestServeRoutes checks every route's status code and, for errors, the error body.
func TestServeRoutes(t *testing.T) {
	ts := newTestServer(t, func(c *Config) { c.APIKeys = []string{"other", "sekrit"}; c.MaxBodyBytes = 4096 })
	auth := []string{"Authorization", "Bearer sekrit"}
	long := strings.Repeat("hello world ", 200) // far more than a 256-token slot
	for _, tc := range []struct {
		name, method, path, body string
		header                   []string
		status                   int
		errType, param           string // for errors
	}{
		{"health needs no key", "GET", "/health", "", nil, 200, "", ""},
		{"v1 health needs no key", "GET", "/v1/health", "", nil, 200, "", ""},
		{"X-Api-Key", "GET", "/v1/models", "", []string{"X-Api-Key", "sekrit"}, 200, "", ""},
		{"the other key", "GET", "/v1/models", "", []string{"Authorization", "Bearer other"}, 200, "", ""},
		{"models", "GET", "/v1/models", "", auth, 200, "", ""},
		{"models alias", "GET", "/models", "", auth, 200, "", ""},
		{"chat", "POST", "/v1/chat/completions", chatBody, auth, 200, "", ""},
		{"chat alias", "POST", "/chat/completions", chatBody, auth, 200, "", ""},
		{"completions", "POST", "/v1/completions", `{"prompt":"the cat","max_tokens":4}`, auth, 200, "", ""},
		{"completions with ids", "POST", "/v1/completions", `{"prompt":[1,2,3],"max_tokens":4}`, auth, 200, "", ""},
		{"tokenize", "POST", "/tokenize", `{"content":"hello"}`, auth, 200, "", ""},
		{"detokenize", "POST", "/detokenize", `{"tokens":[374]}`, auth, 200, "", ""},
		{"metrics", "GET", "/metrics", "", auth, 200, "", ""},

		{"no key", "POST", "/v1/chat/completions", chatBody, nil, 401, typeAuthentication, ""},
		{"wrong key", "GET", "/v1/models", "", []string{"Authorization", "Bearer nope"}, 401, typeAuthentication, ""},
		{"metrics need the key", "GET", "/metrics", "", nil, 401, typeAuthentication, ""},
		{"the scheme is case-insensitive", "GET", "/v1/models", "", []string{"Authorization", "bearer sekrit"}, 200, "", ""},
		{"a bare key is no credential", "GET", "/v1/models", "", []string{"Authorization", "sekrit"}, 401, typeAuthentication, ""},
		{"another scheme", "GET", "/v1/models", "", []string{"Authorization", "Basic sekrit"}, 401, typeAuthentication, ""},
		{"unknown routes need the key", "GET", "/v2/whatever", "", nil, 401, typeAuthentication, ""},
		{"a wrong method needs the key", "GET", "/v1/chat/completions", "", nil, 401, typeAuthentication, ""},
		{"unknown route", "GET", "/v2/whatever", "", auth, 404, typeNotFound, ""},
		{"wrong method", "GET", "/v1/chat/completions", "", auth, 405, typeInvalidRequest, ""},
		{"not JSON", "POST", "/v1/chat/completions", `hello`, auth, 400, typeInvalidRequest, ""},
		{"broken JSON", "POST", "/v1/chat/completions", `{"messages":`, auth, 400, typeInvalidRequest, ""},
		{"trailing data", "POST", "/v1/chat/completions", chatBody + `{}`, auth, 400, typeInvalidRequest, ""},
		{"wrong field type", "POST", "/v1/chat/completions", `{"messages":[],"max_tokens":"ten"}`, auth, 400, typeInvalidRequest, "max_tokens"},
		{"no messages", "POST", "/v1/chat/completions", `{"messages":[]}`, auth, 400, typeInvalidRequest, "messages"},
		{"message without role", "POST", "/v1/chat/completions", `{"messages":[{"content":"hi"}]}`, auth, 400, typeInvalidRequest, "messages[0]"},
		{"unknown role", "POST", "/v1/chat/completions", `{"messages":[{"role":"wizard","content":"hi"}]}`, auth, 400, typeInvalidRequest, "messages[0]"},
		{"messages not an array", "POST", "/v1/chat/completions", `{"messages":"hello"}`, auth, 400, typeInvalidRequest, "messages"},
		{"image part", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, auth, 400, typeInvalidRequest, "messages[0]"},
		{"temperature range", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"temperature":-1}`, auth, 400, typeInvalidRequest, "temperature"},
		{"seed range", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"seed":4294967295}`, auth, 400, typeInvalidRequest, "seed"},
		{"n above 1", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"n":2}`, auth, 400, typeInvalidRequest, "n"},
		{"zero max_tokens", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":0}`, auth, 400, typeInvalidRequest, "max_tokens"},
		{"stop of numbers", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"stop":[1]}`, auth, 400, typeInvalidRequest, "stop"},
		{"top_logprobs without logprobs", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"top_logprobs":2}`, auth, 400, typeInvalidRequest, "top_logprobs"},
		{"stream_options without stream", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"stream_options":{"include_usage":true}}`, auth, 400, typeInvalidRequest, "stream_options"},
		{"prompt over the slot", "POST", "/v1/completions", `{"prompt":"` + strings.Repeat("hello ", 300) + `"}`, auth, 400, typeContextSize, "prompt"},
		{"chat over the slot", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"` + strings.Repeat("hi ", 300) + `"}]}`, auth, 400, typeContextSize, "prompt"},
		{"body too large", "POST", "/v1/completions", `{"prompt":"` + long + long + `"}`, auth, 413, typeInvalidRequest, ""},
		{"empty prompt", "POST", "/v1/completions", `{"prompt":""}`, auth, 400, typeInvalidRequest, "prompt"},
		{"two prompts", "POST", "/v1/completions", `{"prompt":["a","b"]}`, auth, 400, typeInvalidRequest, "prompt"},
		{"token id out of range", "POST", "/v1/completions", `{"prompt":[1,99999]}`, auth, 400, typeInvalidRequest, "prompt"},
		{"echo", "POST", "/v1/completions", `{"prompt":"a","echo":true}`, auth, 400, typeInvalidRequest, "echo"},
		{"tokenize without content", "POST", "/tokenize", `{}`, auth, 400, typeInvalidRequest, "content"},
		{"detokenize bad id", "POST", "/detokenize", `{"tokens":[-1]}`, auth, 400, typeInvalidRequest, "tokens"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := call(t, ts, tc.method, tc.path, tc.body, tc.header...)
			if status != tc.status {
				t.Fatalf("status %d, want %d: %s", status, tc.status, body)
			}
			if tc.errType == "" {
				return
			}
			e := decode[errorBody](t, body).Error
			if e.Type != tc.errType || e.Code != tc.status || e.Message == "" {
				t.Errorf("error %+v, want type %s and code %d with a message", e, tc.errType, tc.status)
			}
			if got := ""; e.Param != nil || tc.param != "" {
				if e.Param != nil {
					got = *e.Param
				}
				if got != tc.param {
					t.Errorf("param %q, want %q (%s)", got, tc.param, e.Message)
				}
			}
		})
	}
}

// streamText sends a streaming request and joins the text of its chunks; it checks the
// stream's framing: one finish reason, at the end, and usage in its own last chunk when
// asked for.
func streamText(t *testing.T, ts interface {
	Client() *http.Client
}, url, body string, chat bool) (text, finish string, u *usage) {
	t.Helper()
	resp, err := ts.Client().Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var b strings.Builder
	for i, ev := range sseEvents(t, resp.Body) {
		if finish != "" && u == nil {
			if cr := decode[chatResponse](t, ev); cr.Usage != nil && len(cr.Choices) == 0 {
				u = cr.Usage
				continue
			}
			t.Fatalf("event %d after the finish: %s", i, ev)
		}
		if chat {
			c := decode[chatResponse](t, ev)
			if c.Object != "chat.completion.chunk" || len(c.Choices) != 1 {
				t.Fatalf("event %d: %s", i, ev)
			}
			if d := c.Choices[0].Delta; d.Content != nil {
				b.WriteString(*d.Content)
			}
			if i == 0 && c.Choices[0].Delta.Role != "assistant" {
				t.Errorf("the first delta has role %q", c.Choices[0].Delta.Role)
			}
			if f := c.Choices[0].FinishReason; f != nil {
				finish = *f
			}
			continue
		}
		c := decode[completionResponse](t, ev)
		if c.Object != "text_completion" || len(c.Choices) != 1 {
			t.Fatalf("event %d: %s", i, ev)
		}
		b.WriteString(c.Choices[0].Text)
		if f := c.Choices[0].FinishReason; f != nil {
			finish = *f
		}
	}
	if finish == "" {
		t.Fatal("the stream has no finish reason")
	}
	return b.String(), finish, u
}

// TestServeStreamMatchesNonStream: the same seed gives the same text streamed or not,
// with and without stop sequences, for chat and completions; the usage chunk counts the
// same tokens as the non-streamed response.
func TestServeStreamMatchesNonStream(t *testing.T) {
	ts := newTestServer(t, nil)
	_, plain := call(t, ts, "POST", "/v1/completions", `{"prompt":"the cat","max_tokens":24,"seed":3}`)
	full := decode[completionResponse](t, plain).Choices[0].Text
	if len(full) < 6 {
		t.Fatalf("generated only %q", full)
	}
	stop := midStop(t, full)
	for _, tc := range []struct {
		path, body string
		chat       bool
	}{
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hello"}],"max_tokens":20,"seed":11,"temperature":1.2%s}`, true},
		{"/v1/completions", `{"prompt":"the cat","max_tokens":24,"seed":3%s}`, false},
		{"/v1/completions", `{"prompt":"the cat","max_tokens":24,"seed":3,"stop":` + unicodeEscaped(stop) + `%s}`, false},
	} {
		status, b := call(t, ts, "POST", tc.path, fmt.Sprintf(tc.body, ""))
		if status != 200 {
			t.Fatalf("%s: %d %s", tc.path, status, b)
		}
		var want, wantFinish string
		var wantUsage *usage
		if tc.chat {
			r := decode[chatResponse](t, b)
			want, wantFinish, wantUsage = r.Choices[0].Message.Content, *r.Choices[0].FinishReason, r.Usage
		} else {
			r := decode[completionResponse](t, b)
			want, wantFinish, wantUsage = r.Choices[0].Text, *r.Choices[0].FinishReason, r.Usage
		}
		got, finish, u := streamText(t, ts, ts.URL+tc.path, fmt.Sprintf(tc.body, `,"stream":true,"stream_options":{"include_usage":true}`), tc.chat)
		if got != want || finish != wantFinish {
			t.Errorf("%s %s:\nstreamed     %q (%s)\nnon-streamed %q (%s)", tc.path, tc.body, got, finish, want, wantFinish)
		}
		if u == nil || *u != *wantUsage {
			t.Errorf("%s: streamed usage %+v, want %+v", tc.path, u, wantUsage)
		}
	}
	// The stop sequence cut the text just before its first occurrence.
	_, b := call(t, ts, "POST", "/v1/completions", `{"prompt":"the cat","max_tokens":24,"seed":3,"stop":`+unicodeEscaped(stop)+`}`)
	r := decode[completionResponse](t, b)
	if want := full[:strings.Index(full, stop)]; r.Choices[0].Text != want || *r.Choices[0].FinishReason != "stop" {
		t.Errorf("with stop %q: %q (%s), want %q (stop)", stop, r.Choices[0].Text, *r.Choices[0].FinishReason, want)
	}
}

// midStop picks two ASCII letters from the second half of text as a stop sequence.
func midStop(t *testing.T, text string) string {
	isLetter := func(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }
	for i := len(text) / 2; i+1 < len(text); i++ {
		if isLetter(text[i]) && isLetter(text[i+1]) {
			return text[i : i+2]
		}
	}
	t.Fatalf("no two letters in a row in the second half of %q", text)
	return ""
}

// unicodeEscaped is s as a JSON string with every character escaped.
func unicodeEscaped(s string) string {
	var b bytes.Buffer
	b.WriteByte('"')
	for _, r := range s {
		fmt.Fprintf(&b, `\u%04x`, r)
	}
	b.WriteByte('"')
	return b.String()
}

// TestServeMatchesGenerate: a completion is what moe's own generation loop produces for
// the same prompt, sampler and seed.
func TestServeMatchesGenerate(t *testing.T) {
	model, vocab := loaded()
	ts := newTestServer(t, nil)
	_, b := call(t, ts, "POST", "/v1/completions", `{"prompt":"the cat","max_tokens":16,"seed":42,"temperature":0.9,"top_k":20,"top_p":0.9,"min_p":0.02,"presence_penalty":0.5,"frequency_penalty":0.3}`)
	got := decode[completionResponse](t, b)

	opts := moe.DefaultContextOptions()
	opts.Size = 256
	ctx, err := model.NewContext(opts)
	if err != nil {
		t.Fatal(err)
	}
	p := moe.DefaultSampler()
	p.Temperature, p.TopK, p.TopP, p.MinP, p.PresencePenalty, p.FrequencyPenalty, p.Seed = 0.9, 20, 0.9, 0.02, 0.5, 0.3, 42
	sampler, err := moe.NewSampler(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int32
	_, err = ctx.Generate(vocab.Encode("the cat", true, true), moe.GenerateOptions{MaxTokens: 16, Sampler: sampler, IsEOG: vocab.IsEOG,
		Token: func(id int32, _ []float32) error { ids = append(ids, id); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	// JSON carries the text with each invalid UTF-8 byte replaced, as the server sends it.
	want := decode[string](t, must(json.Marshal(vocab.Decode(ids, false, false))))
	if got.Choices[0].Text != want || got.Usage.CompletionTokens != len(ids) {
		t.Errorf("server %q (%d tokens), moe.Generate %q (%d tokens)", got.Choices[0].Text, got.Usage.CompletionTokens, want, len(ids))
	}
}

// TestServeLogprobs: log-probabilities are the log-softmax of the logits: greedy picks the
// top alternative, the alternatives are sorted, and the chosen token's value is recomputed
// from the model's logits for the first token.
func TestServeLogprobs(t *testing.T) {
	model, vocab := loaded()
	ts := newTestServer(t, nil)
	_, b := call(t, ts, "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hello"}],"max_tokens":5,"temperature":0,"logprobs":true,"top_logprobs":3}`)
	r := decode[chatResponse](t, b)
	lps := r.Choices[0].Logprobs
	if lps == nil || len(lps.Content) != r.Usage.CompletionTokens {
		t.Fatalf("logprobs %+v for %d tokens", lps, r.Usage.CompletionTokens)
	}
	for i, tok := range lps.Content {
		if len(tok.TopLogprobs) != 3 || tok.TopLogprobs[0].Token != tok.Token || tok.TopLogprobs[0].Logprob != tok.Logprob {
			t.Errorf("token %d: greedy %q (%g) is not the top alternative %+v", i, tok.Token, tok.Logprob, tok.TopLogprobs)
		}
		for k := 1; k < len(tok.TopLogprobs); k++ {
			if tok.TopLogprobs[k].Logprob > tok.TopLogprobs[k-1].Logprob {
				t.Errorf("token %d: alternatives out of order %+v", i, tok.TopLogprobs)
			}
		}
	}
	// The first token's value from the logits directly.
	opts := moe.DefaultContextOptions()
	opts.Size = 256
	ctx, err := model.NewContext(opts)
	if err != nil {
		t.Fatal(err)
	}
	_, prompt := call(t, ts, "POST", "/tokenize", `{"content":"<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n","add_special":true}`)
	ids := decode[struct{ Tokens []int32 }](t, prompt).Tokens
	logits, err := ctx.Eval(ids, false)
	if err != nil {
		t.Fatal(err)
	}
	best := moe.Greedy(logits)
	var sum float64
	for _, l := range logits {
		sum += math.Exp(float64(l - logits[best]))
	}
	want := -math.Log(sum)
	if got := float64(lps.Content[0].Logprob); math.Abs(got-want) > 1e-5 || lps.Content[0].Token != vocab.Piece(best, true) {
		t.Errorf("first token %q logprob %g, want %q %g", lps.Content[0].Token, got, vocab.Piece(best, true), want)
	}
}

// TestServeQueueAndDisconnect: with one slot and no queue, a second request is refused
// with 503 while the first streams; when the first client goes away the slot is free at
// once and a new request succeeds.
func TestServeQueueAndDisconnect(t *testing.T) {
	ts := newTestServer(t, func(c *Config) { c.Slots, c.QueueSize = 1, 0 })
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/completions", strings.NewReader(`{"prompt":"the cat","max_tokens":-1,"ignore_eos":true,"stream":true}`))
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := resp.Body.Read(make([]byte, 1)); err != nil { // the stream is under way
		t.Fatal(err)
	}
	status, body := call(t, ts, "POST", "/v1/completions", `{"prompt":"a","max_tokens":2}`)
	if e := decode[errorBody](t, body).Error; status != 503 || e.Type != typeUnavailable {
		t.Fatalf("busy server answered %d %s", status, body)
	}
	cancel()
	resp.Body.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		status, body = call(t, ts, "POST", "/v1/completions", `{"prompt":"a","max_tokens":2}`)
		if status == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slot was not freed after the client left: %d %s", status, body)
		}
		runtime.Gosched()
	}
}

// TestServeMetrics: the counters move with requests, and the routing counters add up to
// the tokens times the experts each token uses.
func TestServeMetrics(t *testing.T) {
	ts := newTestServer(t, nil)
	call(t, ts, "POST", "/v1/completions", `{"prompt":"the cat","max_tokens":4,"ignore_eos":true}`)
	call(t, ts, "GET", "/nowhere", "")
	_, b := call(t, ts, "GET", "/metrics", "")
	values := map[string]float64{}
	selected := map[string]float64{} // by layer
	layerTokens := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var name string
		var v float64
		if _, err := fmt.Sscanf(line, "%s %g", &name, &v); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		values[name] = v
		if rest, ok := strings.CutPrefix(name, `moerun_expert_selected_total{layer="`); ok {
			selected[rest[:strings.IndexByte(rest, '"')]] += v
		}
		if rest, ok := strings.CutPrefix(name, `moerun_expert_layer_tokens_total{layer="`); ok {
			layerTokens[rest[:strings.IndexByte(rest, '"')]] = v
		}
	}
	for name, want := range map[string]float64{
		`moerun_requests_total{route="/v1/completions",status="200"}`: 1,
		`moerun_requests_total{route="other",status="404"}`:           1,
		"moerun_generated_tokens_total":                               4,
		"moerun_slots":                                                2,
		"moerun_requests_processing":                                  0,
		"moerun_requests_queued":                                      0,
	} {
		if values[name] != want {
			t.Errorf("%s = %g, want %g", name, values[name], want)
		}
	}
	if values["moerun_prompt_tokens_total"] < 1 || values["moerun_generation_tokens_per_second"] <= 0 {
		t.Errorf("prompt tokens %g, generation speed %g", values["moerun_prompt_tokens_total"], values["moerun_generation_tokens_per_second"])
	}
	// The prompt and every generated token but the last were evaluated; each token picks 4
	// experts.
	evaluated := values["moerun_prompt_tokens_total"] + values["moerun_generated_tokens_total"] - 1
	if len(layerTokens) != 4 {
		t.Fatalf("routing counters for %d layers, want 4", len(layerTokens))
	}
	// The last layer runs its experts only for tokens whose logits are wanted: the
	// prompt's last and each decode step's.
	for l, n := range layerTokens {
		want := evaluated
		if l == "3" {
			want = values["moerun_generated_tokens_total"]
		}
		if n != want || selected[l] != 4*n {
			t.Errorf("layer %s: %g tokens, %g selections; want %g and %g", l, n, selected[l], want, 4*want)
		}
	}
}

func TestServeStopHelpers(t *testing.T) {
	stops := []string{"abc", "xy"}
	for _, tc := range []struct {
		text       string
		find, hold int
	}{
		{"hello", -1, 0},
		{"hello a", -1, 1},
		{"hello ab", -1, 2},
		{"hello x", -1, 1},
		{"hello abc", 6, 0},
		{"xy then abc", 0, 0},
		{"a", -1, 1},
	} {
		if got := findStop(tc.text, stops, 0); got != tc.find {
			t.Errorf("findStop(%q) = %d, want %d", tc.text, got, tc.find)
		}
		if got := partialStop(tc.text, stops); got != tc.hold {
			t.Errorf("partialStop(%q) = %d, want %d", tc.text, got, tc.hold)
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestServeLoading(t *testing.T) {
	ts := httptest.NewServer(Loading())
	defer ts.Close()
	status, body := call(t, ts, "GET", "/health", "")
	if e := decode[errorBody](t, body).Error; status != 503 || e.Type != typeUnavailable || e.Message != "loading model" {
		t.Errorf("while loading: %d %s", status, body)
	}
}

// TestServeDefaults: the server's sampling and length defaults apply where a request is
// silent, and the request's own fields win.
func TestServeDefaults(t *testing.T) {
	greedy := moe.DefaultSampler()
	greedy.Temperature = 0
	ts := newTestServer(t, func(c *Config) { c.Sampling, c.MaxTokens = greedy, 3 })
	for range 2 { // greedy: the same text every time, whatever the random seed
		_, b := call(t, ts, "POST", "/v1/completions", `{"prompt":"the cat","ignore_eos":true}`)
		_, want := call(t, ts, "POST", "/v1/completions", `{"prompt":"the cat","ignore_eos":true,"temperature":0,"max_tokens":3}`)
		got, w := decode[completionResponse](t, b), decode[completionResponse](t, want)
		if got.Usage.CompletionTokens != 3 || got.Choices[0].Text != w.Choices[0].Text {
			t.Errorf("defaults gave %q (%d tokens), want %q (3)", got.Choices[0].Text, got.Usage.CompletionTokens, w.Choices[0].Text)
		}
	}
	_, b := call(t, ts, "POST", "/v1/completions", `{"prompt":"the cat","ignore_eos":true,"max_tokens":5}`)
	if n := decode[completionResponse](t, b).Usage.CompletionTokens; n != 5 {
		t.Errorf("max_tokens 5 gave %d tokens", n)
	}
}
