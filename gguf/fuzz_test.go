package gguf

import (
	"bytes"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzNewReader feeds arbitrary bytes to the reader. It must never panic or allocate beyond
// what the input could describe; what it accepts must be self-consistent: every tensor lies
// inside the input, and re-encoding the parsed header gives a file that parses the same.
func FuzzNewReader(f *testing.F) {
	f.Add(writeFile(f, sampleMetadata(f), sampleSpecs))
	for _, c := range corruptCorpus() {
		f.Add(c.data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := NewReader(bytes.NewReader(data), int64(len(data)))
		// Reading only the heads of arrays must validate exactly as much as a full read.
		heads, headErr := NewReaderWith(bytes.NewReader(data), int64(len(data)), Options{ArrayLimit: 2})
		if (err == nil) != (headErr == nil) {
			t.Fatalf("full read: %v; with ArrayLimit: %v", err, headErr)
		}
		if err == nil {
			for i, kv := range heads.Metadata.All() {
				if want := file.Metadata.All()[i].Value; kv.Value.Len() != want.Len() || kv.Value.Summary(2) != want.Summary(2) {
					t.Fatalf("%s: %s with ArrayLimit, %s in full", kv.Key, kv.Value.Summary(2), want.Summary(2))
				}
			}
		}
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("error is not a FormatError: %v", err)
			}
			return
		}
		var specs []TensorSpec
		for i := range file.Tensors {
			ti := &file.Tensors[i]
			if ti.FileOffset < 0 || ti.FileOffset+ti.Size > int64(len(data)) {
				t.Fatalf("tensor %s at %d+%d outside the %d-byte input", ti.Name, ti.FileOffset, ti.Size, len(data))
			}
			view, err := file.TensorData(ti)
			if err != nil {
				t.Fatalf("tensor %s: %v", ti.Name, err)
			}
			if read := make([]byte, ti.Size); file.ReadTensor(ti, read) != nil || !bytes.Equal(read, view) {
				t.Fatalf("tensor %s: ReadTensor differs from TensorData", ti.Name)
			}
			specs = append(specs, TensorSpec{ti.Name, ti.Type, ti.Shape})
		}
		l, err := NewLayout(file.Metadata, specs)
		if err != nil {
			t.Fatalf("accepted header cannot be re-encoded: %v", err)
		}
		again, err := NewReader(bytes.NewReader(l.header), l.DataOffset)
		if err != nil && len(specs) == 0 {
			t.Fatalf("re-encoded header does not parse: %v", err)
		}
		if err == nil && !cmp.Equal(file.Metadata.All(), again.Metadata.All(), valueCmp) {
			t.Fatalf("metadata changed through re-encoding")
		}
	})
}
