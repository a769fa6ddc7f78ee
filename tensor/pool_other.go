//go:build !linux

package tensor

import "runtime"

// physicalCores is the number of logical CPUs where the operating system does not tell us
// which of them share a core.
func physicalCores() int { return runtime.NumCPU() }
