package backendtest_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/backend/backendtest"
	"github.com/moerun/moerun/backend/sim"
	"github.com/moerun/moerun/tensor"
)

// The suite is checked on broken backends, each run in a child process (the suite fails
// the test it is given, which must not fail this one): it must fail them, for the reason
// the backend is broken.

const brokenEnv = "BACKENDTEST_BROKEN"

// broken is a simulated GPU with one defect.
type broken struct {
	*sim.Backend
	defect string
}

// Supports: "nothing" supports no operation.
func (b broken) Supports(op backend.Op, t tensor.Type) bool {
	return b.defect != "nothing" && b.Backend.Supports(op, t)
}

// MatMul: "mul-mat" is 5% off.
func (b broken) MatMul(dst backend.Tensor, w backend.Weight, x backend.Tensor) error {
	if err := b.Backend.MatMul(dst, w, x); err != nil || b.defect != "mul-mat" {
		return err
	}
	return b.Backend.Scale(dst, dst, 1.05)
}

// L2Norm: "stray-write" also writes the element after its tensor.
func (b broken) L2Norm(x backend.Tensor, eps float32) error {
	if err := b.Backend.L2Norm(x, eps); err != nil || b.defect != "stray-write" {
		return err
	}
	after := backend.Tensor{Buf: x.Buf, Off: x.Off + x.Bytes(), Type: tensor.F32, Cols: 1, Rows: 1, Stride: 4}
	return b.Backend.Copy(after, x.Columns(0, 1).Slice(0, 1))
}

// Add: "unwritten" leaves the last row of dst alone.
func (b broken) Add(dst, x, y backend.Tensor) error {
	if b.defect != "unwritten" || dst.Rows < 2 || y.Rows == 1 {
		return b.Backend.Add(dst, x, y)
	}
	return b.Backend.Add(dst.Slice(0, dst.Rows-1), x.Slice(0, x.Rows-1), y.Slice(0, y.Rows-1))
}

// Attention: "foreign" accepts a V cache of another backend by copying it over silently.
func (b broken) Attention(dst, q backend.Tensor, heads int, pos []int32, k, v, sinks backend.Tensor, kvLen int, p tensor.AttnParams) error {
	if b.defect == "foreign" && v.Buf != nil && v.Buf.Host() != nil {
		return nil
	}
	return b.Backend.Attention(dst, q, heads, pos, k, v, sinks, kvLen, p)
}

// TestBrokenChild is the child process's test.
func TestBrokenChild(t *testing.T) {
	defect := os.Getenv(brokenEnv)
	if defect == "" {
		t.Skip("run by TestBroken")
	}
	pool := tensor.NewPool(1)
	t.Cleanup(pool.Close)
	backendtest.Run(t, func(t *testing.T) backend.Backend {
		return broken{sim.New(0, 1<<30, pool), defect}
	}, backendtest.Options{})
}

func TestBroken(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the suite in child processes")
	}
	for _, c := range []struct {
		defect string
		run    string // the subtests of the child's suite that show it
		want   string // in the child's output
	}{
		{"nothing", "", "supports none of the"},
		{"mul-mat", "mul-mat/q4_0/", "NMSE"},
		{"stray-write", "l2-norm/", "changed 4 bytes of x that are no output's"},
		{"unwritten", "add/", "NaN at row"},
		{"foreign", "api/foreign-operands/attention", "tensor operand 3 on the reference: no error"},
	} {
		t.Run(c.defect, func(t *testing.T) {
			run := "^TestBrokenChild$"
			if c.run != "" {
				run += "/" + c.run
			}
			cmd := exec.Command(os.Args[0], "-test.run="+run, "-test.count=1")
			cmd.Env = append(os.Environ(), brokenEnv+"="+c.defect)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed a backend with the defect %q:\n%s", c.defect, out)
			}
			if !strings.Contains(string(out), c.want) {
				t.Errorf("the suite failed, but not with %q:\n%s", c.want, tail(string(out), 3000))
			}
		})
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
