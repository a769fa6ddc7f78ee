// Package e2e drives `moerun serve` with the official openai and @anthropic-ai/sdk npm
// clients (client.mjs, anthropic.mjs, structured.mjs, whose outputs ajv validates).
// It needs Node.js and npm: without them the test is skipped, except under CI=true, where
// it fails.
package e2e

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const model = "../../testdata/models/tiny-qwen3moe.gguf"

// need returns the path of a program the test cannot run without.
func need(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		unavailable(t, "%s is not installed: %v", name, err)
	}
	return path
}

// unavailable skips the test, or fails it in CI, where the tools must be present.
func unavailable(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format+" (the test fails instead when CI=true)", args...)
}

func TestServeOpenAIClient(t *testing.T) {
	node, npm := need(t, "node"), need(t, "npm")
	_, errOpenAI := os.Stat("node_modules/openai/package.json")
	_, errAnthropic := os.Stat("node_modules/@anthropic-ai/sdk/package.json")
	_, errAjv := os.Stat("node_modules/ajv/package.json")
	if errOpenAI != nil || errAnthropic != nil || errAjv != nil {
		out, err := exec.Command(npm, "ci", "--no-audit", "--no-fund").CombinedOutput()
		if err != nil {
			unavailable(t, "npm ci (installs the pinned openai and @anthropic-ai/sdk clients and ajv): %v\n%s", err, out)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "moerun")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/moerun/moerun/cmd/moerun").CombinedOutput(); err != nil {
		t.Fatalf("building moerun: %v\n%s", err, out)
	}

	base := startServe(t, bin, "-np", "2", "-c", "1024")
	client := exec.CommandContext(ctx, node, "client.mjs")
	client.Env = append(os.Environ(), "OPENAI_BASE_URL="+base+"/v1", "OPENAI_API_KEY=e2e-key")
	out, err := client.CombinedOutput()
	if err != nil {
		t.Fatalf("client.mjs: %v\n%s", err, out)
	}
	t.Logf("%s", out)
	anthropic := exec.CommandContext(ctx, node, "anthropic.mjs")
	anthropic.Env = append(os.Environ(), "ANTHROPIC_BASE_URL="+base, "ANTHROPIC_API_KEY=e2e-key")
	if out, err = anthropic.CombinedOutput(); err != nil {
		t.Fatalf("anthropic.mjs: %v\n%s", err, out)
	}
	t.Logf("%s", out)
	runExample(ctx, t, node, base)

	// Constrained output under Qwen3's template (whose Hermes call syntax a required call
	// needs; its tool prompt is long, hence one slot of 4096).
	qwen3 := startServe(t, bin, "-np", "1", "-c", "4096", "--chat-template-file", "../../tokenizer/testdata/chat/qwen3.chat_template.jinja")
	structured := exec.CommandContext(ctx, node, "structured.mjs")
	structured.Env = append(os.Environ(), "OPENAI_BASE_URL="+qwen3+"/v1", "OPENAI_API_KEY=e2e-key")
	if out, err = structured.CombinedOutput(); err != nil {
		t.Fatalf("structured.mjs: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// startServe starts `moerun serve` on the tiny model with the given flags (and a port of
// its own, two threads, the key e2e-key) and returns its base URL; the server is stopped
// with SIGINT when the test ends, which must make it exit cleanly, and its log is shown if
// the test failed.
func startServe(t *testing.T, bin string, flags ...string) string {
	t.Helper()
	args := append([]string{"serve", "-m", model, "--port", "0", "-t", "2", "--api-key", "e2e-key"}, flags...)
	// Not bound to the test's context, whose end would kill it before the clean stop.
	srv := exec.Command(bin, args...)
	stderr, err := srv.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	accessLog := make(chan string, 1) // the server's stderr, once it has closed it
	t.Cleanup(func() {
		srv.Process.Signal(syscall.SIGINT)
		kill := time.AfterFunc(30*time.Second, func() { srv.Process.Kill() })
		defer kill.Stop()
		log := <-accessLog // all reads from the pipe end before Wait
		if err := srv.Wait(); err != nil {
			t.Errorf("moerun %s after SIGINT: %v", strings.Join(args, " "), err)
		}
		if t.Failed() {
			t.Logf("server log (%s):\n%s", strings.Join(flags, " "), log)
		}
	})
	lines := bufio.NewScanner(stderr)
	var base string
	var log strings.Builder
	for base == "" && lines.Scan() {
		log.WriteString(lines.Text() + "\n")
		if _, url, ok := strings.Cut(lines.Text(), "moerun: serving "); ok {
			base = url
		}
	}
	go func() { // keep reading, so the server never blocks on a full pipe
		for lines.Scan() {
			log.WriteString(lines.Text() + "\n")
		}
		accessLog <- log.String()
	}()
	if base == "" {
		t.Fatalf("moerun %s did not start", strings.Join(args, " "))
	}
	return base
}

// runExample runs examples/openai-node/chat.mjs, the Node example of the docs, against the
// server with the client installed here: a copy of the script in a temporary directory
// whose node_modules links to this one's (Node resolves packages from the script's
// directory up).
func runExample(ctx context.Context, t *testing.T, node, base string) {
	t.Helper()
	script, err := os.ReadFile("../../examples/openai-node/chat.mjs")
	if err != nil {
		t.Fatal(err)
	}
	modules, err := filepath.Abs("node_modules")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "chat.mjs"), script, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(modules, filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	example := exec.CommandContext(ctx, node, "chat.mjs")
	example.Dir = dir
	example.Env = append(os.Environ(), "MOERUN_URL="+base+"/v1", "MOERUN_API_KEY=e2e-key")
	out, err := example.CombinedOutput()
	if err != nil {
		t.Fatalf("examples/openai-node/chat.mjs: %v\n%s", err, out)
	}
	// The reply of a random-weight model is noise; the last line is the usage the stream
	// reported: 16 tokens generated, as the script asks.
	if !strings.Contains(string(out), "[tiny-qwen3moe: ") || !strings.Contains(string(out), " prompt tokens, 16 generated]") {
		t.Errorf("examples/openai-node/chat.mjs printed %q", out)
	}
}
