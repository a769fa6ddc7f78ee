// Command plan places a model from Go, as `moerun place` does, and prints the memory each
// device needs: Qwen3-30B-A3B (a built-in layout, no file needed) on an 8 GiB GPU with the
// routed experts of the first 37 blocks in 64 GiB of RAM and a q8_0 KV cache.
//
//	go run ./examples/plan
package main

import (
	"fmt"
	"io"
	"log"
	"os"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/gguf/synth"
	"github.com/moerun/moerun/placement"
	"github.com/moerun/moerun/tensor"
)

const gib = 1 << 30

func main() {
	if err := plan(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func plan(w io.Writer) error {
	// The model: a preset's layout (a GGUF file's header works the same way: gguf.Open,
	// then placement.Model{Name, f.Metadata, f.Tensors}).
	preset, err := synth.Build("qwen3-30b-a3b:q4_k_m", synth.Options{})
	if err != nil {
		return err
	}
	layout, err := preset.Layout()
	if err != nil {
		return err
	}
	model := placement.Model{Name: "qwen3-30b-a3b", Metadata: preset.Metadata, Tensors: layout.Tensors}

	// The flags: -ngl 99 --n-cpu-moe 37 -c 32768 -ctk q8_0 -ctv q8_0, parsed with
	// llama.cpp's own rules.
	rules := placement.DefaultRules()
	rules.GPULayers = 99
	ncmoe, err := placement.NCPUMoEItem("--n-cpu-moe", "37")
	if err != nil {
		return err
	}
	rules.Items = append(rules.Items, ncmoe)
	rules.CtxSize = 32768
	rules.CacheK, rules.CacheV = tensor.Q8_0, tensor.Q8_0

	// The devices: one GPU with 8 GiB free and the host's 64 GiB.
	devices := []backend.Device{backend.GPU(0, 8*gib), backend.CPU(64 * gib)}

	p, err := placement.Place(model, rules, devices)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%-6s %10s %10s %10s %10s  %s\n", "DEVICE", "WEIGHTS", "KV", "COMPUTE~", "TOTAL", "FITS")
	for _, d := range p.Devices {
		fits, _ := d.Fits()
		fmt.Fprintf(w, "%-6s %10s %10s %10s %10s  %v\n", d.Device.Name,
			mib(d.Weights), mib(d.KV), mib(d.Compute), mib(d.Total), fits)
	}
	return nil
}

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }
