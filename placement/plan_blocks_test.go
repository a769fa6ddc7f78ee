package placement

import (
	"errors"
	"strings"
	"testing"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/gguf"
)

// TestTensorsPastBlockCount: a file whose tensors name more blocks than block_count says is
// refused as llama.cpp refuses it (it never creates those tensors), with a ModelError
// naming the tensor, instead of indexing past the layer map.
func TestTensorsPastBlockCount(t *testing.T) {
	m := openModel(t, "../testdata/models/tiny-qwen3moe.gguf")
	var kvs []gguf.KV
	for _, kv := range m.Metadata.All() {
		if kv.Key == m.Metadata.Key("{arch}.block_count") {
			kv.Value = gguf.NewValue(uint32(2))
		}
		kvs = append(kvs, kv)
	}
	md, err := gguf.NewMetadata(kvs...)
	if err != nil {
		t.Fatal(err)
	}
	m.Metadata = md
	_, err = Place(m, DefaultRules(), []backend.Device{backend.CPU(64 << 30)})
	var me *ModelError
	if !errors.As(err, &me) || !strings.Contains(err.Error(), "is in block 2, but the metadata counts 2 blocks (qwen3moe.block_count)") {
		t.Fatalf("got %v, want a ModelError about block 2", err)
	}
}
