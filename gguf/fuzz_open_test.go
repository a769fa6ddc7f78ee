package gguf

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// splitSeed writes sampleSpecs as two parts the way gguf-split does (metadata in the first,
// split.no, split.count and split.tensors.count in both); mutate may change either part's
// metadata.
func splitSeed(tb testing.TB, mutate func(part int, kvs []KV) []KV) (first, second []byte) {
	parts := [][]int{{0, 1, 2}, {3, 4}}
	var out [2][]byte
	for i, idx := range parts {
		var kvs []KV
		if i == 0 {
			kvs = append(kvs, sampleMetadata(tb).All()...)
		}
		kvs = append(kvs, KV{splitNoKey, NewValue(uint16(i))}, KV{splitCountKey, NewValue(uint16(2))},
			KV{splitTensorKey, NewValue(int32(len(sampleSpecs)))})
		if mutate != nil {
			kvs = mutate(i, kvs)
		}
		md, err := NewMetadata(kvs...)
		if err != nil {
			tb.Fatal(err)
		}
		var specs []TensorSpec
		for _, j := range idx {
			specs = append(specs, sampleSpecs[j])
		}
		out[i] = writeFile(tb, md, specs)
	}
	return out[0], out[1]
}

// openFDs counts this process's open file descriptors (-1 where /proc is missing).
func openFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}

// FuzzOpen writes fuzzed bytes to a file and opens it with Open, which maps it: alone as
// model.gguf when second is empty, else as the first of two parts of a split model
// (m-00001-of-00002.gguf, second being the other). Open never panics, allocates no more
// than a small multiple of the input, and leaves no file or mapping open when it fails.
// A single file opens exactly when NewReader reads the same bytes and they do not say they
// are one part of several, with the same metadata and tensors; every tensor's mapped data
// is its bytes in the file. A split model holds the tensors of both parts, once each.
func FuzzOpen(f *testing.F) {
	f.Add(writeFile(f, sampleMetadata(f), sampleSpecs), []byte{})
	for _, c := range corruptCorpus() {
		f.Add(c.data, []byte{})
	}
	for _, mutate := range []func(part int, kvs []KV) []KV{
		nil,
		func(part int, kvs []KV) []KV { // the second part claims to be the first
			if part == 1 {
				kvs[0] = KV{splitNoKey, NewValue(uint16(0))}
			}
			return kvs
		},
		func(part int, kvs []KV) []KV { // three parts by its metadata, two by name
			kvs[len(kvs)-2] = KV{splitCountKey, NewValue(uint16(3))}
			return kvs
		},
	} {
		first, second := splitSeed(f, mutate)
		f.Add(first, second)
	}
	first, _ := splitSeed(f, nil)
	f.Add(first, first) // the same tensors in both parts

	dir := f.TempDir()
	single := filepath.Join(dir, "model.gguf")
	part1, part2 := filepath.Join(dir, "m-00001-of-00002.gguf"), filepath.Join(dir, "m-00002-of-00002.gguf")
	f.Fuzz(func(t *testing.T, data, second []byte) {
		path := single
		if len(second) > 0 {
			path = part1
			if err := os.WriteFile(part2, second, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		fds := openFDs()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		file, err := Open(path)
		runtime.ReadMemStats(&after)
		// Headers are decoded into Go values a few times the size of their encoding; a
		// count that the file cannot back must not be allocated.
		if alloc, limit := after.TotalAlloc-before.TotalAlloc, uint64(1<<20+64*(len(data)+len(second))); alloc > limit {
			t.Fatalf("Open allocated %d bytes for %d+%d bytes of files", alloc, len(data), len(second))
		}
		if err != nil {
			if err.Error() == "" {
				t.Fatal("Open failed with an empty error")
			}
			if n := openFDs(); n != fds {
				t.Fatalf("Open failed (%v) leaving %d files open, %d before", err, n, fds)
			}
			if len(second) == 0 {
				r, rerr := NewReader(bytes.NewReader(data), int64(len(data)))
				var fe *FormatError
				switch {
				case rerr != nil && !errors.As(err, &fe):
					t.Fatalf("a malformed file gave an error that is not a FormatError: %v", err)
				case rerr == nil:
					if count, cerr := r.Metadata.UintOr(splitCountKey, 1); cerr == nil && count <= 1 {
						t.Fatalf("NewReader reads what Open refuses: %v", err)
					}
				}
			}
			return
		}
		defer func() {
			if err := file.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			if n := openFDs(); n != fds {
				t.Errorf("%d files open after Close, %d before", n, fds)
			}
		}()
		files := [][]byte{data}
		if len(file.Parts) == 2 {
			files = append(files, second)
		} else if len(file.Parts) != 1 {
			t.Fatalf("%d parts", len(file.Parts))
		}
		seen := map[string]bool{}
		for i := range file.Tensors {
			ti := &file.Tensors[i]
			if seen[ti.Name] {
				t.Fatalf("tensor %s listed twice", ti.Name)
			}
			seen[ti.Name] = true
			if got, ok := file.Tensor(ti.Name); !ok || got != ti {
				t.Fatalf("Tensor(%q) does not find it", ti.Name)
			}
			if ti.Split < 0 || ti.Split >= len(files) {
				t.Fatalf("tensor %s in part %d of %d", ti.Name, ti.Split, len(files))
			}
			src := files[ti.Split]
			if ti.FileOffset < 0 || ti.Size < 0 || ti.FileOffset+ti.Size > int64(len(src)) {
				t.Fatalf("tensor %s at %d+%d outside the %d-byte part", ti.Name, ti.FileOffset, ti.Size, len(src))
			}
			view, err := file.TensorData(ti)
			if err != nil || !bytes.Equal(view, src[ti.FileOffset:ti.FileOffset+ti.Size]) {
				t.Fatalf("tensor %s: mapped data differs from the file's bytes (%v)", ti.Name, err)
			}
		}
		if len(files) == 1 {
			r, err := NewReader(bytes.NewReader(data), int64(len(data)))
			if err != nil {
				t.Fatalf("Open reads what NewReader refuses: %v", err)
			}
			if !cmp.Equal(r.Metadata.All(), file.Metadata.All(), valueCmp) || len(r.Tensors) != len(file.Tensors) {
				t.Fatal("Open and NewReader read different headers")
			}
			for i := range r.Tensors {
				a, b := r.Tensors[i], file.Tensors[i]
				if a.Name != b.Name || a.Type != b.Type || a.FileOffset != b.FileOffset || a.Size != b.Size || !slices.Equal(a.Shape, b.Shape) {
					t.Fatalf("tensor %d: NewReader %+v, Open %+v", i, a, b)
				}
			}
		}
	})
}
