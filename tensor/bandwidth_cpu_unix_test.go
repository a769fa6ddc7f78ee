//go:build unix

package tensor

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user and system) the process has used so far. On a shared
// machine it shows what an operation cost while it actually ran, which wall time does not.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
