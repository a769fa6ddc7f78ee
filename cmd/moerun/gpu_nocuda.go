//go:build !cuda

package main

import (
	"errors"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/tensor"
)

// gpuAPI names the GPU API of this build; there is none.
const gpuAPI = ""

var errNoGPUBuild = errors.New("this build has no GPU support; build with `make cuda`")

// openGPUs has nothing to open in a build without the cuda tag.
func openGPUs(*tensor.Pool) ([]gpuBackend, error) { return nil, errNoGPUBuild }

// gpuInventory lists no GPUs: place and fit then describe the machine from their flags.
func gpuInventory() ([]backend.Device, error) { return nil, errNoGPUBuild }
