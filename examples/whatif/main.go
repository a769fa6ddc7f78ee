// Command whatif turns routing statistics into an expert-placement what-if: would putting the
// most-routed experts in VRAM beat llama.cpp's whole-layer placement? It plans Qwen3-30B-A3B
// (a built-in layout) on a laptop RTX 4060 with the experts of the first 37 blocks in RAM,
// records a skewed routing with moe.ExpertStats — here drawn from a Zipf distribution so the
// example needs no real model; `moerun run --expert-stats FILE` records a real one — and
// asks placement.ExpertWhatIf. The same comes out of
// `moerun place ... --predict --expert-stats FILE`.
//
//	go run ./examples/whatif
package main

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"os"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/gguf/synth"
	"github.com/moerun/moerun/moe"
	"github.com/moerun/moerun/placement"
	"github.com/moerun/moerun/tensor"
)

const gib = 1 << 30

func main() {
	if err := whatIf(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func whatIf(w io.Writer) error {
	plan, err := planQwen3()
	if err != nil {
		return err
	}
	stats, err := skewedRouting(plan.Model.Layers, plan.Model.Experts, plan.Model.ExpertsUsed, 4096)
	if err != nil {
		return err
	}
	gpu, err := placement.LookupGPUModel("rtx4060-laptop")
	if err != nil {
		return err
	}
	hw := placement.Hardware{
		CPU:  placement.CPUSpec{Threads: 8, RAMChannels: 2, RAMSpeed: 5600},
		GPUs: []placement.GPUSpec{{Model: gpu.Name, Bandwidth: gpu.Bandwidth, TFLOPS: gpu.TFLOPS}},
	}
	wi, err := placement.ExpertWhatIf(plan, hw, stats, placement.PredictOptions{})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "whole layers (llama.cpp): tg %.1f tokens/s\n", wi.LayerTG)
	fmt.Fprintf(w, "hottest experts in VRAM:  tg %.1f tokens/s (%+.0f%%), %d experts serve %.0f%% of expert reads\n",
		wi.Spare.TG, 100*wi.Spare.Gain, wi.Spare.Experts, 100*wi.Spare.Coverage)
	fmt.Fprintf(w, "recommendation: %s\n", wi.Recommend)
	return nil
}

// planQwen3 is `moerun place --preset qwen3-30b-a3b --gpu 8GiB --ram 64GiB -ngl 99
// --n-cpu-moe 37 -ctk q8_0 -ctv q8_0 -c 32768`.
func planQwen3() (*placement.Plan, error) {
	preset, err := synth.Build("qwen3-30b-a3b:q4_k_m", synth.Options{})
	if err != nil {
		return nil, err
	}
	layout, err := preset.Layout()
	if err != nil {
		return nil, err
	}
	rules := placement.DefaultRules()
	rules.GPULayers = 99
	ncmoe, err := placement.NCPUMoEItem("--n-cpu-moe", "37")
	if err != nil {
		return nil, err
	}
	rules.Items = append(rules.Items, ncmoe)
	rules.CtxSize = 32768
	rules.CacheK, rules.CacheV = tensor.Q8_0, tensor.Q8_0
	return placement.Place(placement.Model{Name: "qwen3-30b-a3b", Metadata: preset.Metadata, Tensors: layout.Tensors},
		rules, []backend.Device{backend.GPU(0, 8*gib), backend.CPU(64 * gib)})
}

// skewedRouting records tokens routed to `used` distinct experts per layer, drawn from a
// Zipf distribution over a per-layer shuffle of the experts (so each layer has its own hot
// experts), and reads the statistics back through their JSON schema, as a file from
// `moerun run --expert-stats` would be read.
func skewedRouting(layers, experts, used, tokens int) (*placement.RoutingStats, error) {
	rng := rand.New(rand.NewPCG(1, 2)) // fixed seed: the example prints the same every time
	rec := moe.NewExpertStats(layers, experts, func(int) bool { return true })
	ids := make([]int32, used)
	weights := make([]float32, used)
	for l := 0; l < layers; l++ {
		order := rng.Perm(experts)
		zipf := rand.NewZipf(rng, 1.2, 4, uint64(experts-1))
		for range tokens {
			seen := map[int32]bool{}
			for k := 0; k < used; {
				id := int32(order[zipf.Uint64()])
				if !seen[id] {
					seen[id], ids[k], weights[k] = true, id, 1/float32(used)
					k++
				}
			}
			rec.Record(l, ids, weights)
		}
	}
	var doc bytes.Buffer
	if err := rec.WriteJSON(&doc, "qwen3-30b-a3b"); err != nil {
		return nil, err
	}
	return placement.ReadRoutingStats(&doc)
}
