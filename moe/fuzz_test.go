package moe

import (
	"bytes"
	"os"
	"strings"
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
	orig := readFuzzSource(f, quantModel("q4_k"))
	keys := []string{"block_count", "attention.head_count", "attention.head_count_kv", "attention.key_length",
		"attention.value_length", "expert_count", "expert_used_count", "rope.dimension_count", "context_length",
		"expert_group_count", "expert_group_used_count"}
	f.Fuzz(func(t *testing.T, blocks, heads, headsKV, keyLen, valueLen, experts, used, rot, ctx, groups, groupsUsed uint32) {
		set := map[string]uint32{}
		for i, v := range []uint32{blocks, heads, headsKV, keyLen, valueLen, experts, used, rot, ctx, groups, groupsUsed} {
			set[keys[i]] = v
		}
		loadAndRun(t, orig, set)
	})
}

// loadAndRun gives orig the integer metadata keys set ("{arch}." omitted), then places,
// loads and runs it: it must be refused with an error or run. The new metadata replaces
// the original's in a copy of the File, whose tensors stay the original's bytes: the
// header's own parsing is gguf's FuzzNewReader's, and rewriting the whole file took half
// of each execution.
func loadAndRun(t *testing.T, orig *gguf.File, set map[string]uint32) {
	arch := orig.Metadata.Arch() + "."
	var kvs []gguf.KV
	for _, kv := range orig.Metadata.All() {
		if _, ok := set[strings.TrimPrefix(kv.Key, arch)]; !ok || !strings.HasPrefix(kv.Key, arch) {
			kvs = append(kvs, kv)
		}
	}
	for k, v := range set {
		kvs = append(kvs, gguf.KV{Key: arch + k, Value: gguf.NewValue(v)})
	}
	md, err := gguf.NewMetadata(kvs...)
	if err != nil {
		t.Fatal(err)
	}
	file := *orig
	file.Metadata = md
	pool := tensor.NewPool(1)
	defer pool.Close()
	host := cpu.New(cpu.Options{Pool: pool})
	plan, err := placement.Place(placement.Model{Name: "fuzz", Metadata: file.Metadata, Tensors: file.Tensors}, placement.DefaultRules(), []backend.Device{host.Device()})
	if err != nil {
		return
	}
	m, err := Load(&file, plan, []backend.Backend{host})
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
}

// readFuzzSource reads a fixture into memory for a fuzz target.
func readFuzzSource(f *testing.F, path string) *gguf.File {
	src, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	orig, err := gguf.NewReader(bytes.NewReader(src), int64(len(src)))
	if err != nil {
		f.Fatal(err)
	}
	return orig
}
