//go:build cuda

package main

import (
	"fmt"
	"time"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/backend/cuda"
	"github.com/moerun/moerun/tensor"
)

// gpuAPI names the GPU API of this build, as llama-bench's backends field does.
const gpuAPI = "CUDA"

// cudaBackend adds the summary the commands print.
type cudaBackend struct{ *cuda.Backend }

func (b cudaBackend) Busy() time.Duration { return b.Stats().Time }

func (b cudaBackend) Summary() string {
	s := b.Stats()
	return fmt.Sprintf("%.0f MiB of weights; %d GPU ops in %d CUDA graph launches (%d replayed, %d captured anew, %d into a kept graph), %.1f ms issuing and waiting (%.1f MiB in, %.1f MiB out, %.1f MiB of host-held weights in for op offload), %d ops through the host (weights without a CUDA kernel, recurrent state)",
		float64(b.Resident())/(1<<20), s.Ops, s.GraphLaunches, s.GraphReplays, s.GraphsBuilt, s.GraphUpdates, float64(s.Time.Microseconds())/1e3,
		float64(s.CopyInBytes)/(1<<20), float64(s.CopyOutBytes)/(1<<20), float64(s.StagedBytes)/(1<<20), s.HostOps)
}

// openGPUs opens every GPU the driver sees; weights of types without a CUDA kernel are
// computed on the pool.
func openGPUs(pool *tensor.Pool) ([]gpuBackend, error) {
	n, err := cuda.Count()
	if err != nil {
		return nil, err
	}
	var gpus []gpuBackend
	for i := range n {
		b, err := cuda.New(i, cuda.Options{Host: pool})
		if err != nil {
			for _, g := range gpus {
				g.Close()
			}
			return nil, err
		}
		gpus = append(gpus, cudaBackend{b})
	}
	if len(gpus) == 0 {
		return nil, fmt.Errorf("the CUDA driver sees no GPU")
	}
	return gpus, nil
}

// gpuInventory lists the GPUs for place and fit.
func gpuInventory() ([]backend.Device, error) { return cuda.Devices() }
