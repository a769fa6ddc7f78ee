package tensor

import (
	"fmt"
	"os"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// physicalCores counts the cores among the CPUs this process may run on: CPUs that are
// hyper-threads of one core list the same siblings in sysfs. Without sysfs (some
// containers) it falls back to the number of usable logical CPUs.
func physicalCores() int {
	var allowed unix.CPUSet
	if err := unix.SchedGetaffinity(0, &allowed); err != nil {
		return runtime.NumCPU()
	}
	cores := map[string]bool{}
	for cpu := 0; allowed.Count() > 0; cpu++ {
		if !allowed.IsSet(cpu) {
			continue
		}
		allowed.Clear(cpu)
		siblings, err := os.ReadFile(fmt.Sprintf("/sys/devices/system/cpu/cpu%d/topology/thread_siblings_list", cpu))
		if err != nil {
			return runtime.NumCPU()
		}
		cores[strings.TrimSpace(string(siblings))] = true
	}
	if len(cores) == 0 {
		return runtime.NumCPU()
	}
	return len(cores)
}
