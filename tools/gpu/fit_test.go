// Package gpu holds tools/gpu/check.sh, the prepared run of every GPU check; this test keeps
// the run possible as the repository grows.
package gpu

import (
	"os/exec"
	"strings"
	"testing"
)

// TestRunFits: the tracked files the GPU run needs, plus the room its binaries take, must
// stay under what the device call carries (check.sh fit says how much and fails when not).
func TestRunFits(t *testing.T) {
	out, err := exec.Command("bash", "check.sh", "fit").CombinedOutput()
	if err != nil {
		t.Fatalf("check.sh fit: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "of the 64.0 MiB the device call carries") {
		t.Fatalf("check.sh fit printed no size:\n%s", out)
	}
	t.Log(strings.TrimSpace(string(out)))
}
