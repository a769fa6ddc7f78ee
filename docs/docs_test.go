// Package docs_test keeps the documentation true: it runs every shell session shown in
// docs/*.md and examples/**/README.md that is marked runnable and compares its output, and
// it checks that the flag reference (docs/flags.md) lists exactly the flags each command's
// --help shows.
//
// The convention for a runnable session is a ```console fence (```sh fences are never run):
//
//	```console
//	$ moerun place --preset qwen3-30b-a3b --gpu 8GiB
//	model    preset qwen3-30b-a3b (qwen3moe): ...
//	...
//	verdict: fits: ...
//	```
//
// A line starting with "$ " is a command (a trailing '\' continues it on the next line); the
// lines up to the next command are its expected output, stdout and stderr together. In the
// expected output a line that is exactly "..." stands for any number of lines, and "..."
// inside a line for any text within that line; trailing spaces are ignored. A command must
// exit 0 unless its output ends with "[exit N]". Commands run with sh, with a freshly built
// moerun first on PATH, in a temporary directory shared by all the sessions of one
// Markdown file (so a guide can write a file in one block and read it in the next), in which
// testdata/ links to the repository's testdata/.
package docs_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

// repoRoot is the module root, one level above this package.
var repoRoot = func() string {
	root, err := filepath.Abs("..")
	if err != nil {
		panic(err)
	}
	return root
}()

// moerunBin is the path of the moerun binary built once for the whole test run.
var moerunBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "moerun-docs-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	moerunBin = filepath.Join(dir, "moerun")
	build := exec.Command(goTool(), "build", "-o", moerunBin, "./cmd/moerun")
	build.Dir = repoRoot
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building moerun: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// goTool is the go command of the toolchain running the test.
func goTool() string {
	if p := filepath.Join(runtime.GOROOT(), "bin", "go"); fileExists(p) {
		return p
	}
	return "go"
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// session is one command of a console block and the output the document shows for it.
type session struct {
	file    string
	line    int // of the command, 1-based
	command string
	want    []string
	exit    int
}

// sessionTimeout bounds one documented command; they take well under a second each.
const sessionTimeout = 2 * time.Minute

var exitLine = regexp.MustCompile(`^\[exit (\d+)\]$`)

// parseSessions reads the ```console blocks of a Markdown document.
func parseSessions(file string, text []byte) ([]session, error) {
	var (
		sessions []session
		inBlock  bool
		cur      *session
		cont     bool // the previous command line ended with '\'
	)
	flush := func() {
		if cur == nil {
			return
		}
		if n := len(cur.want); n > 0 {
			if m := exitLine.FindStringSubmatch(cur.want[n-1]); m != nil {
				fmt.Sscan(m[1], &cur.exit)
				cur.want = cur.want[:n-1]
			}
		}
		sessions = append(sessions, *cur)
		cur = nil
	}
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case !inBlock && strings.HasPrefix(trimmed, "```console"):
			inBlock = true
		case !inBlock:
		case trimmed == "```":
			if cont {
				return nil, fmt.Errorf("%s:%d: command continues past the end of its block", file, n)
			}
			flush()
			inBlock = false
		case cont:
			cur.command += "\n" + line
			cont = strings.HasSuffix(line, `\`)
		case strings.HasPrefix(line, "$ "):
			flush()
			cur = &session{file: file, line: n, command: strings.TrimPrefix(line, "$ ")}
			cont = strings.HasSuffix(line, `\`)
		case cur == nil:
			return nil, fmt.Errorf("%s:%d: output before any \"$ \" command in a console block", file, n)
		default:
			cur.want = append(cur.want, line)
		}
	}
	if inBlock {
		return nil, fmt.Errorf("%s: unterminated console block", file)
	}
	return sessions, sc.Err()
}

// documents lists the Markdown files whose sessions are run.
func documents(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(filepath.Join(repoRoot, "examples"), func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && d.Name() == "README.md" {
			files = append(files, path)
		}
		return nil
	})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	sort.Strings(files)
	return files
}

// TestDocumentedSessions runs every console session and compares its output.
func TestDocumentedSessions(t *testing.T) {
	total := 0
	for _, file := range documents(t) {
		rel, _ := filepath.Rel(repoRoot, file)
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		sessions, err := parseSessions(rel, text)
		if err != nil {
			t.Fatal(err)
		}
		if len(sessions) == 0 {
			continue
		}
		total += len(sessions)
		t.Run(rel, func(t *testing.T) {
			work := t.TempDir()
			if err := os.Symlink(filepath.Join(repoRoot, "testdata"), filepath.Join(work, "testdata")); err != nil {
				t.Fatal(err)
			}
			for _, s := range sessions {
				runSession(t, work, s)
			}
		})
	}
	if total == 0 {
		t.Fatal("no console sessions found: the documents lost their runnable examples")
	}
}

func runSession(t *testing.T, work string, s session) {
	t.Helper()
	// A session that hangs (a server that never answers) fails instead of stalling the
	// test run; WaitDelay stops waiting for output a background process still holds.
	ctx, cancel := context.WithTimeout(context.Background(), sessionTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", s.command)
	cmd.WaitDelay = time.Second
	cmd.Dir = work
	cmd.Env = append(os.Environ(),
		"PATH="+filepath.Dir(moerunBin)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"XDG_CONFIG_HOME="+work, // no user hardware profile leaks into predictions
		"COLUMNS=80",
	)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	exit := 0
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("%s:%d: $ %s\ntook longer than %v; output so far:\n%s", s.file, s.line, s.command, sessionTimeout, out.String())
	case errors.As(err, &ee):
		exit = ee.ExitCode()
	case err != nil:
		t.Fatalf("%s:%d: %s: %v", s.file, s.line, s.command, err)
	}
	got := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	if out.Len() == 0 {
		got = nil
	}
	if exit != s.exit {
		t.Errorf("%s:%d: $ %s\nexit status %d, the document says %d; output:\n%s", s.file, s.line, s.command, exit, s.exit, out.String())
		return
	}
	if !matchLines(s.want, got) {
		t.Errorf("%s:%d: $ %s\noutput does not match the document.\n--- document:\n%s\n--- actual:\n%s",
			s.file, s.line, s.command, strings.Join(s.want, "\n"), out.String())
	}
}

// matchLines matches output lines against a document's lines with "..." elisions: a line
// that is exactly "..." matches any run of lines, "..." inside a line any text.
func matchLines(want, got []string) bool {
	if len(want) == 0 {
		return len(got) == 0
	}
	if strings.TrimSpace(want[0]) == "..." {
		for skip := 0; skip <= len(got); skip++ {
			if matchLines(want[1:], got[skip:]) {
				return true
			}
		}
		return false
	}
	return len(got) > 0 && matchLine(want[0], got[0]) && matchLines(want[1:], got[1:])
}

func matchLine(want, got string) bool {
	want, got = strings.TrimRight(want, " \t"), strings.TrimRight(got, " \t")
	parts := strings.Split(want, "...")
	if len(parts) == 1 {
		return want == got
	}
	if !strings.HasPrefix(got, parts[0]) {
		return false
	}
	got = got[len(parts[0]):]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(got, p)
		if i < 0 {
			return false
		}
		got = got[i+len(p):]
	}
	last := parts[len(parts)-1]
	return len(got) >= len(last) && strings.HasSuffix(got, last)
}

// TestMatchLines pins the elision rules the documents rely on, so that a broken matcher
// cannot pass every document silently.
func TestMatchLines(t *testing.T) {
	tests := []struct {
		want, got string
		match     bool
	}{
		{"a\nb", "a\nb", true},
		{"a\nb", "a\nc", false},
		{"a\n...\nd", "a\nb\nc\nd", true},
		{"a\n...\nd", "a\nd", true},
		{"a\n...\nd", "a\nb\nc", false},
		{"...", "", true},
		{"a", "", false},
		{"", "", true},
		{"x ... z", "x yyy z", true},
		{"x ... z", "x yyy", false},
		{"x...", "xabc", true},
		{"...c", "abc", true},
		{"...bc...bc", "abc", false},
		{"trailing  ", "trailing", true},
	}
	split := func(s string) []string {
		if s == "" {
			return nil
		}
		return strings.Split(s, "\n")
	}
	for _, tc := range tests {
		if got := matchLines(split(tc.want), split(tc.got)); got != tc.match {
			t.Errorf("matchLines(%q, %q) = %v, want %v", tc.want, tc.got, got, tc.match)
		}
	}
}

// TestParseSessions checks the console convention on a small document.
func TestParseSessions(t *testing.T) {
	doc := "text\n```sh\n$ not run\n```\n```console\n$ moerun a \\\n  --b\nout 1\n...\n$ moerun c\n[exit 2]\n```\n"
	got, err := parseSessions("doc.md", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("got %d sessions, want 2: %+v", len(got), got)
	}
	if got[0].command != "moerun a \\\n  --b" || got[0].line != 6 || strings.Join(got[0].want, "|") != "out 1|..." || got[0].exit != 0 {
		t.Errorf("first session = %+v", got[0])
	}
	if got[1].command != "moerun c" || len(got[1].want) != 0 || got[1].exit != 2 {
		t.Errorf("second session = %+v", got[1])
	}
	for _, bad := range []string{"```console\nout\n```\n", "```console\n$ a \\\n```\n", "```console\n$ a\n"} {
		if _, err := parseSessions("bad.md", []byte(bad)); err == nil {
			t.Errorf("parseSessions(%q) accepted a malformed block", bad)
		}
	}
}

// helpFlags runs `moerun ARGS --help` and returns the long flags it lists, without --help and
// --version ("--[no-]mmap" is listed as "mmap").
func helpFlags(t *testing.T, args ...string) map[string]bool {
	t.Helper()
	out, err := exec.Command(moerunBin, append(args, "--help")...).CombinedOutput()
	if err != nil {
		t.Fatalf("moerun %s --help: %v\n%s", strings.Join(args, " "), err, out)
	}
	flags := map[string]bool{}
	for _, m := range helpFlagLine.FindAllStringSubmatch(string(out), -1) {
		if m[1] != "help" && m[1] != "version" {
			flags[m[1]] = true
		}
	}
	return flags
}

// helpFlagLine matches a flag at the start of a kong help line: "  -c, --ctx-size=N".
// Wrapped help text that happens to start with "--" is indented further and not matched.
var helpFlagLine = regexp.MustCompile(`(?m)^ {2,6}(?:-\S, )?--(?:\[no-\])?([a-z0-9][a-z0-9.-]*)`)

// commands lists the subcommands `moerun --help` shows.
func commands(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command(moerunBin, "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("moerun --help: %v\n%s", err, out)
	}
	_, list, ok := strings.Cut(string(out), "\nCommands:\n")
	if !ok {
		t.Fatalf("moerun --help lists no commands:\n%s", out)
	}
	var cmds []string
	for _, m := range regexp.MustCompile(`(?m)^  ([a-z][a-z-]*)\s`).FindAllStringSubmatch(list, -1) {
		cmds = append(cmds, m[1])
	}
	return cmds
}

// referenceFlags reads docs/flags.md: each table there follows a line
// "<!-- flags: CMD ... -->" naming the commands whose flags it lists, one flag per row, the
// long spelling first in the row's first cell ("`--n-gpu-layers N`", "`--[no-]mmap`").
func referenceFlags(t *testing.T) map[string]map[string]bool {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(repoRoot, "docs", "flags.md"))
	if err != nil {
		t.Fatal(err)
	}
	marker := regexp.MustCompile(`^<!-- flags: ([a-z -]+) -->$`)
	firstFlag := regexp.MustCompile("^\\|\\s*`--(?:\\[no-\\])?([a-z0-9][a-z0-9.-]*)")
	ref := map[string]map[string]bool{}
	var current []string
	for _, line := range strings.Split(string(text), "\n") {
		switch m := marker.FindStringSubmatch(line); {
		case m != nil:
			current = strings.Fields(m[1])
		case strings.HasPrefix(line, "|"):
			f := firstFlag.FindStringSubmatch(line)
			if f == nil {
				continue // header, separator, or a row that is not a flag
			}
			for _, c := range current {
				if ref[c] == nil {
					ref[c] = map[string]bool{}
				}
				ref[c][f[1]] = true
			}
		case strings.TrimSpace(line) == "":
		default:
			current = nil // a table ends at the first line of prose
		}
	}
	return ref
}

// TestFlagReference checks that docs/flags.md lists every flag of every command's --help,
// and no flag a command does not have.
func TestFlagReference(t *testing.T) {
	ref := referenceFlags(t)
	cmds := commands(t)
	if len(cmds) == 0 {
		t.Fatal("no commands found in moerun --help")
	}
	for _, c := range cmds {
		help := helpFlags(t, c)
		var undocumented, unknown []string
		for f := range help {
			if !ref[c][f] {
				undocumented = append(undocumented, "--"+f)
			}
		}
		for f := range ref[c] {
			if !help[f] {
				unknown = append(unknown, "--"+f)
			}
		}
		sort.Strings(undocumented)
		sort.Strings(unknown)
		if len(undocumented) > 0 {
			t.Errorf("moerun %s --help shows flags docs/flags.md does not document for %s: %s", c, c, strings.Join(undocumented, " "))
		}
		if len(unknown) > 0 {
			t.Errorf("docs/flags.md documents flags for %s that moerun %s --help does not show: %s", c, c, strings.Join(unknown, " "))
		}
		delete(ref, c)
	}
	for c := range ref {
		t.Errorf("docs/flags.md documents flags of %q, which moerun --help does not list", c)
	}
}

// longRunning are the commands whose help example starts a server: it must exist, but is not
// run.
var longRunning = map[string]bool{"serve": true}

// TestHelpExamples checks that every command's --help gives an example, and runs it: the
// indented lines after the "Example" paragraph, as one shell script.
func TestHelpExamples(t *testing.T) {
	for _, c := range append([]string{""}, commands(t)...) { // "": moerun --help itself
		args := strings.Fields(c + " --help")
		out, err := exec.Command(moerunBin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("moerun %s --help: %v\n%s", c, err, out)
		}
		script := helpExample(string(out))
		if script == "" {
			t.Errorf("moerun %s --help gives no example (an \"Example\" paragraph followed by indented command lines; see the Help methods in cmd/moerun)", c)
			continue
		}
		if !strings.Contains(script, strings.TrimSpace("moerun "+c)) {
			t.Errorf("moerun %s --help: the example does not run moerun %s:\n%s", c, c, script)
		}
		if longRunning[c] {
			continue
		}
		work := t.TempDir()
		if err := os.Symlink(filepath.Join(repoRoot, "testdata"), filepath.Join(work, "testdata")); err != nil {
			t.Fatal(err)
		}
		runSession(t, work, session{file: "moerun " + c + " --help", line: 1, command: script, want: []string{"..."}})
	}
}

// helpExample returns the indented lines that follow the first line starting with "Example"
// in a help text.
func helpExample(help string) string {
	_, rest, ok := strings.Cut(help, "\nExample")
	if !ok {
		return ""
	}
	var lines []string
	for _, line := range strings.Split(rest, "\n")[1:] {
		switch {
		case strings.HasPrefix(line, "    "):
			lines = append(lines, strings.TrimSpace(line))
		case len(lines) > 0:
			return strings.Join(lines, "\n")
		}
	}
	return strings.Join(lines, "\n")
}

// TestSchemas checks that docs/schemas.md names every field the JSON outputs contain: each
// object key must appear, in backquotes or in the example's double quotes, in the section
// whose heading names the document's schema.
func TestSchemas(t *testing.T) {
	text, err := os.ReadFile(filepath.Join(repoRoot, "docs", "schemas.md"))
	if err != nil {
		t.Fatal(err)
	}
	sections := strings.Split(string(text), "\n## ")
	work := t.TempDir()
	stats := filepath.Join(work, "stats.json")
	machine := []string{"--gpu-model", "rtx4060-laptop", "--ram-channels", "2", "--ram-speed", "5600", "--cpu-threads", "8"}
	tests := []struct {
		schema string
		args   []string
		skip   []string // keys whose values are maps keyed by data, or documented in another section
	}{
		{"moerun.expert-stats/v1", []string{"run", "-m", filepath.Join(repoRoot, "testdata/models/tiny-qwen3moe.gguf"), "-p", "Hello", "-n", "4", "--temp", "0", "--expert-stats", stats}, nil},
		{"moerun.inspect/v1", []string{"inspect", filepath.Join(repoRoot, "testdata/models/tiny-qwen3moe.gguf"), "--json"}, []string{"metadata", "metadata_types"}},
		{"moerun.place/v1", append([]string{"place", "--preset", "qwen3-30b-a3b", "--gpu", "8GiB", "--ram", "64GiB", "-ngl", "99",
			"--n-cpu-moe", "37", "-ot", `blk\.0\.=CPU`, "--port", "8080", "--json", "--predict"}, machine...), nil},
		{"moerun.fit/v1", append([]string{"fit", "--preset", "qwen3-30b-a3b", "--ram", "64GiB", "-c", "32768", "--json"}, machine...), []string{"prediction"}},
		{"moerun.profile/v1", []string{"calibrate", "--from-run", "20", "--preset", "qwen3-30b-a3b", "--dry-run", "--json"}, nil},
	}
	for _, tc := range tests {
		var section string
		for _, s := range sections {
			if heading, _, _ := strings.Cut(s, "\n"); strings.Contains(heading, tc.schema) {
				section = s
			}
		}
		if section == "" {
			t.Errorf("docs/schemas.md has no section for %s", tc.schema)
			continue
		}
		cmd := exec.Command(moerunBin, tc.args...)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+work)
		out, err := cmd.Output()
		if err != nil {
			t.Errorf("moerun %s: %v", strings.Join(tc.args, " "), err)
			continue
		}
		if tc.schema == "moerun.expert-stats/v1" {
			if out, err = os.ReadFile(stats); err != nil {
				t.Fatal(err)
			}
		}
		var doc any
		if err := json.Unmarshal(out, &doc); err != nil {
			t.Errorf("moerun %s: not JSON: %v", strings.Join(tc.args, " "), err)
			continue
		}
		if got := doc.(map[string]any)["schema"]; got != tc.schema {
			t.Errorf("moerun %s: schema %v, want %s", strings.Join(tc.args, " "), got, tc.schema)
		}
		keys := map[string]bool{}
		collectKeys(doc, tc.skip, keys)
		var missing []string
		for k := range keys {
			named := regexp.MustCompile("`[^`\n]*\\b" + regexp.QuoteMeta(k) + "\\b[^`\n]*`|\"" + regexp.QuoteMeta(k) + "\"")
			if !named.MatchString(section) {
				missing = append(missing, k)
			}
		}
		sort.Strings(missing)
		if len(missing) > 0 {
			t.Errorf("docs/schemas.md, %s: fields the output has but the section does not name: %s", tc.schema, strings.Join(missing, " "))
		}
	}
}

// collectKeys adds every object key in v to keys, not descending into the skipped ones.
func collectKeys(v any, skip []string, keys map[string]bool) {
	switch v := v.(type) {
	case map[string]any:
		for k, child := range v {
			keys[k] = true
			if !slices.Contains(skip, k) {
				collectKeys(child, skip, keys)
			}
		}
	case []any:
		for _, child := range v {
			collectKeys(child, skip, keys)
		}
	}
}

// TestHelpExample pins how examples are found in help text.
func TestHelpExample(t *testing.T) {
	help := "Usage: moerun x\n\nText.\n\nExample (why):\n\n    echo a > f\n    moerun x f\n\nFlags:\n  -h, --help\n"
	if got, want := helpExample(help), "echo a > f\nmoerun x f"; got != want {
		t.Errorf("helpExample = %q, want %q", got, want)
	}
	if got := helpExample("Usage: moerun x\n\nNo example. Example in prose.\n\n    not this\n"); got != "" {
		t.Errorf("helpExample found %q in a help without an Example paragraph", got)
	}
}
