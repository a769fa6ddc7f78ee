package main

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// FuzzAPIKeys: serve's --api-key (comma-separated) and --api-key-file (one key per line,
// # comments) decide who may call the server. Reading them never panics; the keys are
// exactly the flag's non-blank items and then the file's non-blank, non-comment lines, each
// trimmed and never empty (and a file's never holding a line break); a flag or file that holds no key is an
// error naming it, never "no authentication".
func FuzzAPIKeys(f *testing.F) {
	file := filepath.Join(f.TempDir(), "keys.txt")
	f.Add("", []byte("sk-one\n# a comment\n\n  sk-two  \r\n"), true)
	f.Add("sk-a,sk-b", []byte("sk-c"), true)
	f.Add(" , ", []byte(""), false)
	f.Add("", []byte("# only comments\n\n"), true)
	f.Add("k", []byte("\xef\xbb\xbfsk-bom\n\tsk-tab\t\n#\n# x\n\v\f"), true)
	f.Add("", []byte("sk-no-newline"), true)
	f.Fuzz(func(t *testing.T, flag string, data []byte, useFile bool) {
		c := serveCmd{APIKey: flag}
		if useFile {
			if err := os.WriteFile(file, data, 0o600); err != nil {
				t.Fatal(err)
			}
			c.APIKeyFile = file
		}
		keys, err := c.apiKeys()

		var want []string
		for _, k := range strings.Split(flag, ",") {
			if k = strings.TrimSpace(k); k != "" {
				want = append(want, k)
			}
		}
		if flag != "" && len(want) == 0 {
			if err == nil || !strings.Contains(err.Error(), "--api-key "+strconv.Quote(flag)) {
				t.Fatalf("--api-key %q holds no key: %v, %q", flag, err, keys)
			}
			return
		}
		fileKeys := 0
		if useFile {
			sc := bufio.NewScanner(bytes.NewReader(data))
			sc.Buffer(nil, len(data)+1)
			sc.Split(scanLinesKeepCR)
			for sc.Scan() {
				if line := strings.TrimSpace(sc.Text()); line != "" && !strings.HasPrefix(line, "#") {
					want = append(want, line)
					fileKeys++
				}
			}
			if len(want) == 0 {
				if err == nil || !strings.Contains(err.Error(), "--api-key-file "+file) {
					t.Fatalf("--api-key-file holding %q: %v, %q", data, err, keys)
				}
				return
			}
		}
		if err != nil {
			t.Fatalf("--api-key %q, file %q: %v", flag, data, err)
		}
		if !slices.Equal(keys, want) {
			t.Fatalf("--api-key %q, file %q: keys %q, want %q", flag, data, keys, want)
		}
		for i, k := range keys {
			// A key from the file is one line; one from the flag is whatever it says.
			if k == "" || k != strings.TrimSpace(k) || i >= len(keys)-fileKeys && strings.Contains(k, "\n") {
				t.Fatalf("key %q", k)
			}
		}
	})
}

// scanLinesKeepCR splits at '\n' only (bufio.ScanLines also drops a '\r' before it, which
// TrimSpace does anyway) and keeps a last line without one.
func scanLinesKeepCR(data []byte, atEOF bool) (int, []byte, error) {
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		return i + 1, data[:i], nil
	}
	if atEOF && len(data) > 0 {
		return len(data), data, nil
	}
	return 0, nil, nil
}
