package main

import (
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/placement"
)

// TestCheckHostMemory: a plan whose host side (KV cache, compute buffers, copied weights)
// is larger than the RAM is refused with the sizes named, before anything is allocated;
// enough RAM, or RAM unknown, passes.
func TestCheckHostMemory(t *testing.T) {
	f, err := gguf.Open(tinyQwen)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rules := placement.DefaultRules()
	rules.CtxSize = 1 << 20
	m := openMachine(io.Discard, 1, rules, nil)
	defer m.Close()
	plan, err := placement.Place(placement.Model{Name: tinyQwen, Metadata: f.Metadata, Tensors: f.Tensors}, rules, m.devices())
	if err != nil {
		t.Fatal(err)
	}
	var host *placement.DeviceUse
	for i := range plan.Devices {
		if plan.Devices[i].Device.Name == m.host.Device().Name {
			host = &plan.Devices[i]
		}
	}
	if host == nil || host.KV <= 0 {
		t.Fatalf("no host KV cache in the plan: %+v", plan.Devices)
	}
	need := host.KV + host.Compute + host.Weights - host.WeightsMapped
	err = m.checkHostMemory(plan, need-1)
	if err == nil || !strings.Contains(err.Error(), "KV cache") || !strings.Contains(err.Error(), "lower -c") {
		t.Errorf("RAM one byte short: %v, want a refusal naming the KV cache", err)
	}
	// The tiny model's Q4_0 experts are repacked on x86 (AVX2 and up): those copies are
	// the cure named first.
	repacked := slices.ContainsFunc(plan.Tensors, func(u placement.TensorUse) bool { return u.Storage == placement.StorageRepacked })
	if repacked != strings.Contains(err.Error(), "--no-repack") {
		t.Errorf("repacked copies in the plan %v, refusal %v", repacked, err)
	}
	if err := m.checkHostMemory(plan, need); err != nil {
		t.Errorf("RAM just enough: %v", err)
	}
	if err := m.checkHostMemory(plan, 0); err != nil {
		t.Errorf("RAM unknown: %v", err)
	}
}
