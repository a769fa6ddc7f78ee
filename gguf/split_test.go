package gguf

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeSplit writes sampleSpecs as a split model the way llama.cpp's gguf-split does: all
// metadata in the first part, and split.no (u16), split.count (u16) and
// split.tensors.count (i32) in every part. perPart says which tensors go where.
func writeSplit(t *testing.T, dir string, perPart [][]int, mutate func(part int, kvs []KV) []KV) []string {
	t.Helper()
	count := len(perPart)
	base := filepath.Join(dir, "model")
	var paths []string
	for i, idx := range perPart {
		kvs := []KV{}
		if i == 0 {
			kvs = append(kvs, sampleMetadata(t).All()...)
		}
		kvs = append(kvs,
			KV{splitNoKey, NewValue(uint16(i))},
			KV{splitCountKey, NewValue(uint16(count))},
			KV{splitTensorKey, NewValue(int32(len(sampleSpecs)))})
		if mutate != nil {
			kvs = mutate(i, kvs)
		}
		md, err := NewMetadata(kvs...)
		if err != nil {
			t.Fatal(err)
		}
		var specs []TensorSpec
		for _, j := range idx {
			specs = append(specs, sampleSpecs[j])
		}
		p := fmt.Sprintf("%s-%05d-of-%05d.gguf", base, i+1, count)
		if err := os.WriteFile(p, writeFile(t, md, specs), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	return paths
}

func TestSplitModel(t *testing.T) {
	dir := t.TempDir()
	paths := writeSplit(t, dir, [][]int{{0, 1}, {2}, {3, 4}}, nil)
	for _, open := range paths { // any part opens the whole model
		f, err := Open(open)
		if err != nil {
			t.Fatal(err)
		}
		if len(f.Parts) != 3 || len(f.Tensors) != len(sampleSpecs) {
			t.Fatalf("%d parts, %d tensors", len(f.Parts), len(f.Tensors))
		}
		if f.Metadata.Arch() != "qwen3moe" {
			t.Errorf("metadata not taken from the first part: arch %q", f.Metadata.Arch())
		}
		for i, spec := range sampleSpecs {
			ti, ok := f.Tensor(spec.Name)
			if !ok || ti.Name != f.Tensors[i].Name {
				t.Fatalf("tensor %s missing or out of order", spec.Name)
			}
			data, err := f.TensorData(ti)
			if err != nil || !bytes.Equal(data, tensorBytes(TensorInfo{Name: ti.Name, Size: ti.Size})) {
				t.Errorf("%s (split %d): wrong data, %v", ti.Name, ti.Split, err)
			}
			read := make([]byte, ti.Size)
			if err := f.ReadTensor(ti, read); err != nil || !bytes.Equal(read, data) {
				t.Errorf("%s (split %d): ReadTensor differs from TensorData, %v", ti.Name, ti.Split, err)
			}
		}
		if err := f.ReadTensor(&f.Tensors[0], make([]byte, f.Tensors[0].Size+1)); err == nil || !strings.Contains(err.Error(), "buffer of") {
			t.Errorf("ReadTensor into a buffer of the wrong size: %v", err)
		}
		past := f.Tensors[0]
		past.FileOffset = f.Parts[0].Size
		if err := f.ReadTensor(&past, make([]byte, past.Size)); err == nil || !strings.Contains(err.Error(), "outside") {
			t.Errorf("ReadTensor past the end of the file: %v", err)
		}
		if f.Tensors[2].Split != 1 || f.Tensors[4].Split != 2 {
			t.Errorf("split indexes %d %d", f.Tensors[2].Split, f.Tensors[4].Split)
		}
		f.Close()
	}
	got, err := SplitPaths(paths[1])
	if err != nil || !equalStrings(got, paths) {
		t.Errorf("SplitPaths = %v, %v", got, err)
	}
}

func equalStrings(a, b []string) bool { return strings.Join(a, "\n") == strings.Join(b, "\n") }

func TestSplitModelErrors(t *testing.T) {
	replace := func(key string, v Value) func(int, []KV) []KV {
		return func(part int, kvs []KV) []KV {
			if part != 1 {
				return kvs
			}
			for i := range kvs {
				if kvs[i].Key == key {
					kvs[i].Value = v
				}
			}
			return kvs
		}
	}
	for _, c := range []struct {
		name    string
		perPart [][]int
		mutate  func(int, []KV) []KV
		remove  int // part to delete, or -1
		want    string
	}{
		{"missing part", [][]int{{0, 1}, {2}, {3, 4}}, nil, 2, "part 3 of 3 is missing"},
		{"wrong split.no", [][]int{{0, 1}, {2}, {3, 4}}, replace(splitNoKey, NewValue(uint16(2))), -1, "split.no is 2 but the file name says part 2"},
		{"duplicate tensor", [][]int{{0, 1}, {1, 2}, {3, 4}}, nil, -1, "appears in more than one split file"},
		{"lost tensor", [][]int{{0, 1}, {2}, {4}}, nil, -1, "says 5 tensors but the 3 parts hold 4"},
	} {
		t.Run(c.name, func(t *testing.T) {
			paths := writeSplit(t, t.TempDir(), c.perPart, c.mutate)
			if c.remove >= 0 {
				os.Remove(paths[c.remove])
			}
			f, err := Open(paths[0])
			if err == nil {
				f.Close()
				t.Fatal("opened a broken split model")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not say %q", err, c.want)
			}
		})
	}
	bad := filepath.Join(t.TempDir(), "model.gguf")
	md, _ := NewMetadata(KV{splitCountKey, NewValue(uint16(2))})
	os.WriteFile(bad, writeFile(t, md, nil), 0o644)
	if _, err := Open(bad); err == nil || !strings.Contains(err.Error(), "-NNNNN-of-NNNNN.gguf") {
		t.Errorf("split without a split file name: %v", err)
	}
}
