package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer the server's goroutines may write while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startServe runs `moerun serve args…` in-process and returns its base URL, a function that
// stops it and returns the exit code, and its stderr.
func startServe(t *testing.T, args ...string) (url string, stop func() int, stderr *syncBuffer) {
	t.Helper()
	type started struct {
		addr net.Addr
		stop context.CancelFunc
	}
	ready := make(chan started, 1)
	serveStarted = func(addr net.Addr, stop context.CancelFunc) { ready <- started{addr, stop} }
	t.Cleanup(func() { serveStarted = nil })
	stderr = &syncBuffer{}
	exit := make(chan int, 1)
	go func() { exit <- run(append([]string{"serve"}, args...), io.Discard, stderr) }()
	select {
	case s := <-ready:
		return "http://" + s.addr.String(), func() int { s.stop(); return <-exit }, stderr
	case code := <-exit:
		t.Fatalf("serve exited with %d before listening: %s", code, stderr)
	}
	return "", nil, nil
}

// TestServeCommand starts the server with llama-server's spellings and environment, and
// checks the slots it made, the key, the access log and a clean shutdown.
func TestServeCommand(t *testing.T) {
	t.Setenv("LLAMA_API_KEY", "k3y")
	t.Setenv("LLAMA_ARG_CTX_SIZE", "1000")
	keyFile := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(keyFile, []byte("# team keys\nfile-key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	url, stop, stderr := startServe(t, "-m", tinyQwen, "--host", "127.0.0.1", "--port", "0", "-np", "2", "-t", "1", "--jinja", "--api-key-file", keyFile, "-a", "tiny")
	get := func(path string, key string) (int, []byte) {
		req, _ := http.NewRequest("GET", url+path, nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	if status, b := get("/health", ""); status != 200 {
		t.Errorf("/health: %d %s", status, b)
	}
	if status, _ := get("/v1/models", ""); status != 401 {
		t.Errorf("/v1/models without the key from LLAMA_API_KEY: %d", status)
	}
	if status, _ := get("/v1/models", "file-key"); status != 200 {
		t.Errorf("/v1/models with the key from --api-key-file: %d", status)
	}
	status, b := get("/v1/models", "k3y")
	var models struct {
		Data []struct {
			ID   string
			Meta struct {
				NCtxSlot int `json:"n_ctx_slot"`
				NSlots   int `json:"n_slots"`
			}
		}
	}
	if err := json.Unmarshal(b, &models); err != nil || status != 200 || len(models.Data) != 1 {
		t.Fatalf("/v1/models: %d %s (%v)", status, b, err)
	}
	// -c 1000 over 2 slots: 500 rounded up to 512, as llama.cpp splits a cache.
	if m := models.Data[0]; m.ID != "tiny" || m.Meta.NSlots != 2 || m.Meta.NCtxSlot != 512 {
		t.Errorf("model %+v, want tiny (-a) with 2 slots of 512", m)
	}
	if code := stop(); code != 0 {
		t.Errorf("exit %d after SIGINT-like stop: %s", code, stderr)
	}
	log := stderr.String()
	for _, want := range []string{"loading " + tinyQwen, "2 slots of 512 tokens", "listening on http://127.0.0.1:", "serving http://127.0.0.1:", "GET /v1/models 401", "GET /v1/models 200", "accepted but ignored: --jinja"} {
		if !strings.Contains(log, want) {
			t.Errorf("stderr lacks %q:\n%s", want, log)
		}
	}
}

func TestServeBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve"}, "no model"},
		{[]string{"serve", "-m", tinyQwen, "--port", "70000"}, "--port 70000"},
		{[]string{"serve", "-m", tinyQwen, "-np", "0"}, "n_parallel"},
		{[]string{"serve", "-m", tinyQwen, "--queue-size", "-1"}, "--queue-size"},
		{[]string{"serve", "-m", "/nonexistent.gguf"}, "nonexistent"},
		{[]string{"serve", "-m", tinyQwen, "--gpu", "8GiB"}, "dry run"},
		{[]string{"serve", "-m", tinyQwen, "--api-key-file", "/nonexistent-keys"}, "nonexistent-keys"},
		{[]string{"serve", "-m", tinyQwen, "-n", "0"}, "-n 0"},
		{[]string{"serve", "-m", tinyQwen, "--seed", "4294967295"}, "-s 4294967295"},
		{[]string{"serve", "-m", tinyQwen, "--temp", "0.5", "--min-p", "2"}, "min-p"},
		// Templates are checked after serve listens (as llama-server, a taken port fails at
		// once): any free port, so that another test's server on 8080 changes nothing.
		{[]string{"serve", "-m", tinyQwen, "--port", "0", "--chat-template", "{% if %}"}, "the chat template given"},
		{[]string{"serve", "-m", tinyQwen, "--port", "0", "--chat-template", "{{ raise_exception('no users') }}"}, "no users"},
		{[]string{"serve", "-m", tinyQwen, "--chat-template", "chatml", "--chat-template-file", tinyQwen}, "keep one"},
		{[]string{"serve", "-m", tinyQwen, "--chat-template-kwargs", "[true]"}, "--chat-template-kwargs"},
		{[]string{"serve", "-m", tinyQwen, "--reasoning-budget", "-2"}, "--reasoning-budget -2"},
		{[]string{"serve", "-m", tinyQwen, "-rea", "maybe"}, "--reasoning"},
	} {
		code, _, stderr := moerun(t, tc.args...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d mentioning %q", tc.args, code, stderr, exitUsage, tc.want)
		}
	}
}

// TestServeShutdownDuringStream: SIGTERM (the signal context's stop) while a long stream
// runs: the stream ends with an error event and [DONE] once the grace is over, the process
// exits 0, and nothing crashes when the model is unmapped after it.
func TestServeShutdownDuringStream(t *testing.T) {
	shutdownGrace = 200 * time.Millisecond
	t.Cleanup(func() { shutdownGrace = 10 * time.Second })
	url, stop, stderr := startServe(t, "-m", tinyQwen, "--port", "0", "-np", "1", "-c", "8192", "-t", "1")
	resp, err := http.Post(url+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt": "Once upon a time", "max_tokens": 8000, "ignore_eos": true, "temperature": 0, "stream": true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body := bufio.NewReader(resp.Body)
	if _, err := body.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	exit := make(chan int, 1)
	go func() { exit <- stop() }()
	rest, err := io.ReadAll(body)
	if err != nil {
		t.Fatalf("the stream was cut: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(rest)), "\n\n")
	if len(lines) < 2 || lines[len(lines)-1] != "data: [DONE]" || !strings.Contains(lines[len(lines)-2], "shutting down") {
		t.Errorf("the stream ends with %q, want an error event about shutting down and [DONE]", lines[max(0, len(lines)-2):])
	}
	if code := <-exit; code != 0 {
		t.Errorf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stderr.String(), "were ended with an error") {
		t.Errorf("stderr does not say requests were ended:\n%s", stderr)
	}
}

// TestServeEmptyAPIKey: --api-key with no key in it (",") is an error, not a server
// without authentication.
func TestServeEmptyAPIKey(t *testing.T) {
	var stderr bytes.Buffer
	code := run([]string{"serve", "-m", tinyQwen, "--port", "0", "--api-key", ","}, io.Discard, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "holds no key") {
		t.Errorf("exit %d: %s", code, stderr.String())
	}
}

// The template variables every chat request starts from, as llama-server's flags set them:
// --reasoning sets enable_thinking (--reasoning-budget 0 does not: it forces the closing tag
// at once, as in llama.cpp 3f545bec), --reasoning-effort sets
// reasoning_effort, and --chat-template-kwargs go over them.
func TestServeTemplateKwargs(t *testing.T) {
	for _, c := range []struct {
		cmd  serveCmd
		want string
	}{
		{serveCmd{Reasoning: "auto", ReasoningEffort: "default", ReasoningBudget: -1}, "null"},
		{serveCmd{Reasoning: "off", ReasoningEffort: "default", ReasoningBudget: -1}, `{"enable_thinking":false}`},
		{serveCmd{Reasoning: "on", ReasoningEffort: "high", ReasoningBudget: -1}, `{"enable_thinking":true,"reasoning_effort":"high"}`},
		{serveCmd{Reasoning: "auto", ReasoningEffort: "default", ReasoningBudget: 0}, "null"},
		{serveCmd{Reasoning: "off", ReasoningEffort: "default", ReasoningBudget: -1, TemplateKwargs: `{"enable_thinking": true, "x": [1]}`},
			`{"enable_thinking":true,"x":[1]}`},
	} {
		kw, err := c.cmd.templateKwargs()
		if err != nil {
			t.Fatal(err)
		}
		got := "null"
		if kw != nil {
			var parts []string
			for _, k := range kw.Keys {
				v, _ := json.Marshal(kw.Values[k])
				parts = append(parts, fmt.Sprintf("%q:%s", k, v))
			}
			got = "{" + strings.Join(parts, ",") + "}"
		}
		if got != c.want {
			t.Errorf("%+v: %s, want %s", c.cmd, got, c.want)
		}
	}
}
