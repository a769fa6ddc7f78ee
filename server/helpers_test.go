package server

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/backend/cpu"
	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/moe"
	"github.com/moerun/moerun/placement"
	"github.com/moerun/moerun/tensor"
	"github.com/moerun/moerun/tokenizer"
)

const tinyModel = "../testdata/models/tiny-qwen3moe.gguf"

// loaded is the tiny model, loaded once for all tests (its file stays open).
var loaded = sync.OnceValues(func() (*moe.Model, *tokenizer.Vocab) { return loadModel(tinyModel) })

// loadModel loads a model on the CPU for the tests; its file stays open.
func loadModel(path string) (*moe.Model, *tokenizer.Vocab) {
	f, err := gguf.Open(path)
	if err != nil {
		panic(err)
	}
	vocab, err := tokenizer.Load(f.Metadata)
	if err != nil {
		panic(err)
	}
	pool := tensor.NewPool(2)
	host := cpu.New(cpu.Options{Pool: pool})
	plan, err := placement.Place(placement.Model{Name: path, Metadata: f.Metadata, Tensors: f.Tensors}, placement.DefaultRules(), []backend.Device{host.Device()})
	if err != nil {
		panic(err)
	}
	model, err := moe.Load(f, plan, []backend.Backend{host})
	if err != nil {
		panic(err)
	}
	return model, vocab
}

// testConfig is a small server: two slots of 256 tokens, a queue of two.
func testConfig() Config {
	model, vocab := loaded()
	opts := moe.DefaultContextOptions()
	opts.Size = 256
	return Config{Model: model, Vocab: vocab, Name: "tiny", Slots: 2, QueueSize: 2, Context: opts}
}

func newTestServer(t testing.TB, edit func(*Config)) *httptest.Server {
	t.Helper()
	c := testConfig()
	if edit != nil {
		edit(&c)
	}
	s, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return ts
}

// call sends a request and returns the status and body.
func call(t testing.TB, ts *httptest.Server, method, path, body string, header ...string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// sseEvents reads a stream's data payloads up to [DONE] (which must come).
func sseEvents(t testing.TB, r io.Reader) []json.RawMessage {
	t.Helper()
	var events []json.RawMessage
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("stream line %q is not a data line", line)
		}
		if data == "[DONE]" {
			return events
		}
		events = append(events, json.RawMessage(data))
	}
	t.Fatalf("stream ended without [DONE] (%v)", sc.Err())
	return nil
}

func decode[T any](t testing.TB, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%v in %s", err, b)
	}
	return v
}

// qwen3Server is a server (not listening) with Qwen3's real chat template, whose syntax
// has reasoning tags and Hermes tool calls.
func qwen3Server(t *testing.T) *Server { return templateServer(t, "qwen3") }

// templateServer is a test server with the chat template of a family in
// tokenizer/testdata/chat.
func templateServer(t testing.TB, family string) *Server {
	t.Helper()
	tpl, err := os.ReadFile("../tokenizer/testdata/chat/" + family + ".chat_template.jinja")
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.ChatTemplate = string(tpl)
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// streamEvents feeds text to a format of named events in pieces of n bytes, then finishes
// it with res, and returns every event.
func streamEvents(f format, text string, n int, res result) []sseEvent {
	var events []sseEvent
	for i := 0; i < len(text); i += n {
		if ev, ok := f.delta(text[i:min(i+n, len(text))], nil).([]sseEvent); ok {
			events = append(events, ev...)
		}
	}
	return append(events, f.finish(res).([]sseEvent)...)
}

// vocabOf loads the vocabulary of a GGUF file (its file is closed when the test ends).
func vocabOf(t *testing.T, path string) *tokenizer.Vocab {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	v, err := tokenizer.Load(f.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
