package gguf

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestArrayLimit reads the real Qwen3 vocabulary with only the heads of long arrays kept and
// compares everything else with a full read.
func TestArrayLimit(t *testing.T) {
	const path = "../testdata/vocab/ggml-vocab-qwen3.gguf"
	full, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer full.Close()
	head, err := OpenWith(path, Options{ArrayLimit: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer head.Close()
	if head.DataOffset() != full.DataOffset() || !cmp.Equal(head.Tensors, full.Tensors) || head.Metadata.Len() != full.Metadata.Len() {
		t.Fatal("layout differs")
	}
	for i, kv := range head.Metadata.All() {
		want := full.Metadata.All()[i].Value
		if kv.Value.Len() != want.Len() || kv.Value.TypeName() != want.TypeName() {
			t.Errorf("%s: %d %s, full read %d %s", kv.Key, kv.Value.Len(), kv.Value.TypeName(), want.Len(), want.TypeName())
		}
		if kv.Value.Summary(8) != want.Summary(8) {
			t.Errorf("%s: summary %s, full %s", kv.Key, kv.Value.Summary(8), want.Summary(8))
		}
		if kv.Value.Partial() != (want.Type() == TypeArray && want.Len() > 8) {
			t.Errorf("%s: partial %v", kv.Key, kv.Value.Partial())
		}
	}
	tokens, _ := head.Metadata.Get("tokenizer.ggml.tokens")
	if tokens.Len() != 151936 || !tokens.Partial() {
		t.Fatalf("tokens: %d partial %v", tokens.Len(), tokens.Partial())
	}
	if _, err := head.Metadata.Strings("tokenizer.ggml.tokens"); err == nil || !strings.Contains(err.Error(), "ArrayLimit") {
		t.Errorf("Strings on a partial array: %v", err)
	}
	if _, err := head.Metadata.Ints("tokenizer.ggml.token_type"); err == nil {
		t.Error("Ints on a partial array succeeded")
	}
	if _, err := NewLayout(head.Metadata, nil); err == nil || !strings.Contains(err.Error(), "cannot be written") {
		t.Errorf("writing partial metadata: %v", err)
	}
}

func TestArrayLimitNested(t *testing.T) {
	data := writeFile(t, sampleMetadata(t), sampleSpecs)
	f, err := NewReaderWith(bytes.NewReader(data), int64(len(data)), Options{ArrayLimit: 1})
	if err != nil {
		t.Fatal(err)
	}
	nested, _ := f.Metadata.Get("test.nested")
	if nested.Len() != 2 || !nested.Partial() || nested.Index(0).Len() != 3 || !nested.Index(0).Partial() {
		t.Errorf("nested: %s", nested.Summary(-1))
	}
	if got := nested.Summary(-1); got != "[[1, … (3 total)], … (2 total)]" {
		t.Errorf("summary %s", got)
	}
	defer func() {
		if recover() == nil {
			t.Error("Index past the head did not panic")
		}
	}()
	nested.Index(1)
}
