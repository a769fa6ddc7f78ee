package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestShutdown: Shutdown ends a running stream whose grace is over with an error event and
// [DONE] (never a cut stream), and refuses new requests with 503.
func TestShutdown(t *testing.T) {
	s, ts := testServer(t, func(c *Config) { c.Slots, c.Context.Size = 1, 4096 })

	// A long stream (about a second of tokens), stopped in its course: the test takes the
	// forward pass after the first event.
	resp, err := ts.Client().Post(ts.URL+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt": "Once upon a time", "max_tokens": 4000, "ignore_eos": true, "temperature": 0, "stream": true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	body := bufio.NewReader(resp.Body)
	if _, err := body.ReadString('\n'); err != nil { // the first event: the stream is under way
		t.Fatal(err)
	}
	expired, cancel := context.WithCancel(context.Background())
	cancel() // no grace: the stream must be ended
	if err := s.Shutdown(expired); err == nil {
		t.Error("Shutdown ended a generation but returned no error")
	}
	events := sseEvents(t, body) // fails unless the stream ends with [DONE]
	last := events[len(events)-1]
	var e struct {
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(last, &e); err != nil || e.Error.Type != typeUnavailable || !strings.Contains(e.Error.Message, "shutting down") {
		t.Errorf("the stream's last event %s, want an unavailable_error about shutting down", last)
	}
	status, answer := call(t, ts, http.MethodPost, "/v1/completions", `{"prompt": "Hi", "max_tokens": 2}`)
	if status != http.StatusServiceUnavailable || !strings.Contains(string(answer), "shutting down") {
		t.Errorf("a request after Shutdown: %d %s", status, answer)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Errorf("a second Shutdown: %v", err)
	}
}

// TestShutdownWaitsForThePass: a generation inside a forward pass when its grace ends
// finishes the pass before it stops, and Shutdown returns only then: the model must not be
// released under a running pass.
func TestShutdownWaitsForThePass(t *testing.T) {
	s, ts := testServer(t, func(c *Config) { c.Slots = 1 })
	done := make(chan int, 1)
	resume := s.engine.Pause() // the request's prompt waits for the forward pass
	go func() {
		status, _ := call(t, ts, http.MethodPost, "/v1/completions", `{"prompt": "Hi", "max_tokens": 8, "temperature": 0}`)
		done <- status
	}()
	for s.metrics.processing.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	shut := make(chan error, 1)
	expired, cancel := context.WithCancel(context.Background())
	cancel()
	go func() { shut <- s.Shutdown(expired) }()
	<-s.abort.Done()
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) while a generation waited in a forward pass", err)
	case <-time.After(50 * time.Millisecond):
	}
	resume()
	if err := <-shut; err == nil {
		t.Error("Shutdown ended a generation but returned no error")
	}
	if status := <-done; status != http.StatusServiceUnavailable {
		t.Errorf("the ended request got %d, want 503", status)
	}
}

// TestShutdownWaits: with grace enough, Shutdown waits for a running request to finish
// normally and reports nothing cut off.
func TestShutdownWaits(t *testing.T) {
	s, ts := testServer(t, func(c *Config) { c.Slots = 1 })
	done := make(chan int, 1)
	resume := s.engine.Pause()
	go func() {
		status, _ := call(t, ts, http.MethodPost, "/v1/completions", `{"prompt": "Hi", "max_tokens": 8, "temperature": 0}`)
		done <- status
	}()
	for s.metrics.processing.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	time.Sleep(20 * time.Millisecond)
	resume()
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if status := <-done; status != http.StatusOK {
		t.Errorf("the running request ended with %d", status)
	}
}

// TestWithheldBody: a client that sends headers and withholds the body gets its 401 at
// once when its key is missing (the server does not wait for the body it will not read),
// and is cut off within the body timeout otherwise; /health keeps answering meanwhile.
func TestWithheldBody(t *testing.T) {
	ts := newTestServer(t, func(c *Config) { c.APIKeys = []string{"sekrit"} })
	resp, err := withheldBody(ts)
	if err != nil {
		t.Fatalf("no answer to a request without a key whose body never comes: %v", err)
	}
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("status %d, want 401", resp.StatusCode)
	}
	start := time.Now()
	if status, _ := call(t, ts, http.MethodGet, "/health", ""); status != http.StatusOK || time.Since(start) > time.Second {
		t.Errorf("/health: %d in %v", status, time.Since(start))
	}
}

// TestHealthAfterTheFileChanged: once the model file is truncated under the mapping, the
// failing request says so, /health answers 503 with the reason (it kept answering "ok"),
// and later requests get 503 at once.
func TestHealthAfterTheFileChanged(t *testing.T) {
	data, err := os.ReadFile(tinyModel)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "tiny.gguf")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	model, vocab := loadModel(path)
	var log syncLog
	ts := newTestServer(t, func(c *Config) { c.Model, c.Vocab, c.AccessLog = model, vocab, &log })
	if status, body := call(t, ts, http.MethodPost, "/v1/completions", `{"prompt": "Hi", "max_tokens": 2}`); status != http.StatusOK {
		t.Fatalf("before: %d %s", status, body)
	}
	if err := os.Truncate(path, int64(len(data)/4)); err != nil {
		t.Fatal(err)
	}
	if status, body := call(t, ts, http.MethodPost, "/v1/completions", `{"prompt": "Hello there", "max_tokens": 2}`); status != http.StatusInternalServerError || !strings.Contains(string(body), "changed on disk") {
		t.Fatalf("the request that met the truncated file: %d %s", status, body)
	}
	status, body := call(t, ts, http.MethodGet, "/health", "")
	if status != http.StatusServiceUnavailable || !strings.Contains(string(body), "changed on disk") {
		t.Errorf("/health: %d %s", status, body)
	}
	if status, body := call(t, ts, http.MethodPost, "/v1/completions", `{"prompt": "Hi", "max_tokens": 2}`); status != http.StatusServiceUnavailable || !strings.Contains(string(body), "restarted") {
		t.Errorf("a request afterwards: %d %s", status, body)
	}
	if n := strings.Count(log.String(), "can no longer serve"); n != 1 {
		t.Errorf("the access log says it %d times, want once:\n%s", n, log.String())
	}
}

// withheldBody sends a completion request's headers announcing a body it never sends, and
// reads the answer, waiting at most 2 s.
func withheldBody(ts *httptest.Server) (*http.Response, error) {
	conn, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n")
	conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err == nil {
		resp.Body.Close()
	}
	return resp, err
}

// testServer is a server of testConfig changed by edit, and its HTTP server (closed at the
// end of the test): for the tests that reach into the Server itself.
func testServer(t *testing.T, edit func(*Config)) (*Server, *httptest.Server) {
	t.Helper()
	c := testConfig()
	edit(&c)
	s, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return s, ts
}

// syncLog is an access log the test reads while the server writes it.
type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestPreSlotLimits: the work before a slot is taken is bounded. A chat request of more
// than maxMessages messages is refused; while the slots and the queue are full, a further
// POST is refused with 503 from its headers, without waiting for a body it withholds.
func TestPreSlotLimits(t *testing.T) {
	s, ts := testServer(t, func(c *Config) { c.Slots, c.QueueSize = 1, 0 })
	many := `{"messages": [` + strings.Repeat(`{"role": "user", "content": ""},`, maxMessages) + `{"role": "user", "content": "hi"}]}`
	if status, body := call(t, ts, http.MethodPost, "/v1/chat/completions", many); status != http.StatusBadRequest || !strings.Contains(string(body), "at most") {
		t.Errorf("%d messages: %d %s", maxMessages+1, status, body)
	}
	resume := s.engine.Pause()
	done := make(chan int, 1)
	go func() {
		status, _ := call(t, ts, http.MethodPost, "/v1/completions", `{"prompt": "Hi", "max_tokens": 2}`)
		done <- status
	}()
	for s.metrics.processing.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	resp, err := withheldBody(ts)
	if err != nil {
		t.Fatalf("no answer while the server is full: %v", err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a request while the slot and queue are full: %d, want 503", resp.StatusCode)
	}
	resume()
	if status := <-done; status != http.StatusOK {
		t.Errorf("the running request: %d", status)
	}
}

// TestTypeErrorsInJSONTerms: a field of the wrong type is named with what it must be in
// JSON's terms, not Go's ("expected []json.RawMessage, got JSON string").
func TestTypeErrorsInJSONTerms(t *testing.T) {
	ts := newTestServer(t, nil)
	for body, want := range map[string]string{
		`{"messages": "hello"}`:                            `field \"messages\" must be an array, not a JSON string`,
		`{"messages": [], "max_tokens": "ten"}`:            `field \"max_tokens\" must be an integer, not a JSON string`,
		`{"messages": [], "temperature": [1]}`:             `field \"temperature\" must be a number, not a JSON array`,
		`{"messages": [], "stream": 1}`:                    `field \"stream\" must be a boolean, not a JSON number`,
		`{"messages": [], "stream_options": "yes"}`:        `field \"stream_options\" must be an object, not a JSON string`,
		`{"messages": [{"role": "wizard", "content": 1}]}`: `role \"wizard\": want one of system, developer, user, assistant, tool, function`,
	} {
		status, got := call(t, ts, http.MethodPost, "/v1/chat/completions", body)
		if status != http.StatusBadRequest || !strings.Contains(string(got), want) {
			t.Errorf("%s: %d %s, want %s", body, status, got, want)
		}
	}
}

// TestManyWithheldConnections: 2,000 clients that hold their connections open, half
// with their headers unfinished and half with a POST's body withheld, do not keep
// /health from answering within 100 ms (the measured worst of 20 tries is logged). The
// withheld bodies beyond the slots and queue are answered 503 from their headers.
func TestManyWithheldConnections(t *testing.T) {
	var lim syscall.Rlimit
	n := 2000
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil && lim.Cur < uint64(2*n+256) {
		n = int(lim.Cur-256) / 2 // both ends live in this process
	}
	ts := newTestServer(t, nil)
	addr := strings.TrimPrefix(ts.URL, "http://")
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, c)
		req := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
		if i%2 == 0 {
			req = "GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: " // headers never finished
		}
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
	}
	client := &http.Client{Timeout: 5 * time.Second}
	var worst time.Duration
	for range 20 {
		start := time.Now()
		resp, err := client.Get(ts.URL + "/health")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		worst = max(worst, time.Since(start))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("/health: %d", resp.StatusCode)
		}
	}
	t.Logf("%d held connections: /health answered in at most %v", n, worst)
	if worst > 100*time.Millisecond {
		t.Errorf("/health took %v with %d held connections, want at most 100 ms", worst, n)
	}
}
