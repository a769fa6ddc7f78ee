package gguf

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// FuzzSplitPaths: SplitPaths turns the name of any part of a split model
// (NAME-00002-of-00003.gguf) into every part's name. It never panics; it fails, naming the
// path, unless the name ends in -NNNNN-of-NNNNN.gguf with a count of at least 1; otherwise
// it lists count names in the path's directory, numbered 1 to count, each of which lists
// the same names again, and the part given is among them when its number is in range.
func FuzzSplitPaths(f *testing.F) {
	for _, s := range []string{
		"Qwen3-235B-A22B-Q4_K_M-00001-of-00003.gguf", "models/DeepSeek-V3-Q2_K-00002-of-00005.gguf",
		"/abs/dir/m-00003-of-00003.gguf", "m-00004-of-00003.gguf", "m-00000-of-00000.gguf", "m-00001-of-00001.gguf",
		"-00001-of-00002.gguf", "m-1-of-2.gguf", "m-00001-of-00002.GGUF", "m-00001-of-00002.gguf/", "a/./b/../m-00001-of-00002.gguf",
		"model.gguf", "", "m-００００１-of-00002.gguf",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, path string) {
		paths, err := SplitPaths(path)
		if err != nil {
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error %q does not name %q", err, path)
			}
			return
		}
		base := filepath.Base(path)
		n := len(base)
		if n < len("-00001-of-00001.gguf") || !strings.HasSuffix(base, ".gguf") {
			t.Fatalf("%q accepted", path)
		}
		idx, err1 := strconv.Atoi(base[n-19 : n-14])
		count, err2 := strconv.Atoi(base[n-10 : n-5])
		if err1 != nil || err2 != nil || base[n-20] != '-' || base[n-14:n-10] != "-of-" || count < 1 {
			t.Fatalf("%q accepted", path)
		}
		if len(paths) != count {
			t.Fatalf("%q: %d paths", path, len(paths))
		}
		dir, name := filepath.Dir(path), base[:n-20]
		for i, p := range paths {
			if want := filepath.Join(dir, fmt.Sprintf("%s-%05d-of-%05d.gguf", name, i+1, count)); p != want {
				t.Fatalf("%q: part %d is %q, want %q", path, i+1, p, want)
			}
		}
		if idx >= 1 && idx <= count && paths[idx-1] != filepath.Join(dir, base) {
			t.Fatalf("%q: part %d is %q", path, idx, paths[idx-1])
		}
		// Any part lists the same parts (the first and last stand for all: a count of 99999
		// would make checking every one slow).
		for _, p := range []string{paths[0], paths[count-1]} {
			if again, err := SplitPaths(p); err != nil || !slices.Equal(again, paths) {
				t.Fatalf("%q lists %d parts but %q lists %d (%v)", path, count, p, len(again), err)
			}
		}
	})
}

// TestSplitPartsCountsWithoutNaming: reading the part count of a name that claims 99,999
// parts, in a long directory path, names none of them (Open names each part as it opens
// it, so a missing second part stops it; naming all first took about 400 MB for a 4 KB
// path).
func TestSplitPartsCountsWithoutNaming(t *testing.T) {
	dir := t.TempDir()
	for len(dir) < 2000 {
		dir = filepath.Join(dir, strings.Repeat("d", 200))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Skip(err) // a file system without such long paths
	}
	_, count, err := splitParts(filepath.Join(dir, "m-00001-of-99999.gguf"))
	if err != nil || count != 99999 {
		t.Fatalf("count %d, %v", count, err)
	}
	allocs := testing.AllocsPerRun(5, func() { _, _, _ = splitParts(filepath.Join(dir, "m-00001-of-99999.gguf")) })
	if allocs > 20 {
		t.Errorf("%v allocations to read a part count", allocs)
	}
}
