package moe

import (
	"bytes"
	"os"
	"testing"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/backend/cpu"
	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/placement"
	"github.com/moerun/moerun/tensor"
)

// FuzzModelMetadata gives a real model file metadata with arbitrary sizes — the values a
// damaged or malicious file controls — and loads and runs it: every inconsistency between
// the metadata and the tensors must be an error, never a panic or a runaway allocation.
func FuzzModelMetadata(f *testing.F) {
	f.Add(uint32(2), uint32(4), uint32(2), uint32(64), uint32(64), uint32(8), uint32(2), uint32(64), uint32(4096), uint32(0), uint32(0))
	f.Add(uint32(2), uint32(4), uint32(2), uint32(63), uint32(64), uint32(8), uint32(2), uint32(63), uint32(1<<30), uint32(3), uint32(1))
	f.Add(uint32(0), uint32(0), uint32(0), uint32(0), uint32(0), uint32(0), uint32(0), uint32(0), uint32(0), uint32(0), uint32(0))
	f.Add(uint32(3), uint32(1), uint32(4), uint32(2048), uint32(64), uint32(9), uint32(9), uint32(2048), uint32(1), uint32(8), uint32(8))
	src, err := os.ReadFile(quantModel("q4_k"))
	if err != nil {
		f.Fatal(err)
	}
	orig, err := gguf.NewReader(bytes.NewReader(src), int64(len(src)))
	if err != nil {
		f.Fatal(err)
	}
	keys := []string{"block_count", "attention.head_count", "attention.head_count_kv", "attention.key_length",
		"attention.value_length", "expert_count", "expert_used_count", "rope.dimension_count", "context_length",
		"expert_group_count", "expert_group_used_count"}
	f.Fuzz(func(t *testing.T, blocks, heads, headsKV, keyLen, valueLen, experts, used, rot, ctx, groups, groupsUsed uint32) {
		set := map[string]uint32{}
		for i, v := range []uint32{blocks, heads, headsKV, keyLen, valueLen, experts, used, rot, ctx, groups, groupsUsed} {
			set["qwen3moe."+keys[i]] = v
		}
		var kvs []gguf.KV
		for _, kv := range orig.Metadata.All() {
			if _, ok := set[kv.Key]; !ok {
				kvs = append(kvs, kv)
			}
		}
		for k, v := range set {
			kvs = append(kvs, gguf.KV{Key: k, Value: gguf.NewValue(v)})
		}
		md, err := gguf.NewMetadata(kvs...)
		if err != nil {
			t.Fatal(err)
		}
		var specs []gguf.TensorSpec
		for _, ti := range orig.Tensors {
			specs = append(specs, gguf.TensorSpec{Name: ti.Name, Type: ti.Type, Shape: ti.Shape})
		}
		var buf bytes.Buffer
		w, err := gguf.NewWriter(&buf, md, specs)
		if err != nil {
			t.Fatal(err)
		}
		for i := range orig.Tensors {
			if err := w.WriteTensor(orig.Tensors[i].Name, orig.TensorReader(&orig.Tensors[i])); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		file, err := gguf.NewReader(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
		if err != nil {
			return
		}
		pool := tensor.NewPool(1)
		defer pool.Close()
		host := cpu.New(cpu.Options{Pool: pool})
		plan, err := placement.Place(placement.Model{Name: "fuzz", Metadata: file.Metadata, Tensors: file.Tensors}, placement.DefaultRules(), []backend.Device{host.Device()})
		if err != nil {
			return
		}
		m, err := Load(file, plan, []backend.Backend{host}, Options{Host: pool})
		if err != nil {
			return
		}
		o := DefaultContextOptions()
		o.Size = 256
		c, err := m.NewContext(o)
		if err != nil {
			return
		}
		if _, err := c.Eval([]int32{1, 2, 3}, false); err != nil {
			t.Errorf("a model that loaded fails to run: %v", err)
		}
	})
}
