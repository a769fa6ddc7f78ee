package backend

import (
	"strings"
	"testing"

	"github.com/moerun/moerun/tensor"
)

func TestDryRunDevices(t *testing.T) {
	g := GPU(1, 8<<30)
	if g.Name != "CUDA1" || g.Kind != KindGPU || g.FreeBytes != 8<<30 || g.HostBuffer != "CUDA_Host" || !g.OffloadsOps || g.MapsHostMemory {
		t.Errorf("GPU: %+v", g)
	}
	c := CPU(64 << 30)
	if c.Name != "CPU" || c.Kind != KindCPU || !c.MapsHostMemory || c.TotalBytes != 64<<30 {
		t.Errorf("CPU: %+v", c)
	}
	if KindGPU.String() != "gpu" || Kind(7).String() != "kind(7)" {
		t.Error("kind names")
	}
}

// CanRepack follows ggml-cpu's repack.cpp: a layout for the type and a row count that is a
// multiple of the layout's interleave.
func TestCanRepack(t *testing.T) {
	d := Device{Repack: map[tensor.Type]int{tensor.Q4_0: 8, tensor.Q8_0: 4}}
	for _, c := range []struct {
		typ  tensor.Type
		rows int64
		want bool
	}{{tensor.Q4_0, 128, true}, {tensor.Q4_0, 12, false}, {tensor.Q8_0, 12, true}, {tensor.Q4_K, 128, false}, {tensor.F16, 8, false}} {
		if got := d.CanRepack(c.typ, c.rows); got != c.want {
			t.Errorf("%s with %d rows: %v", c.typ, c.rows, got)
		}
	}
	for typ, rows := range CPU(0).Repack { // whatever this machine has, the table is sane
		if rows != 4 && rows != 8 || !typ.Valid() {
			t.Errorf("host repack %s: %d", typ, rows)
		}
	}
}

func TestValidate(t *testing.T) {
	ok := []Device{GPU(0, 1<<30), CPU(0)}
	if err := Validate(ok); err != nil {
		t.Error(err)
	}
	for _, c := range []struct {
		devs []Device
		want string
	}{
		{[]Device{GPU(0, 1)}, "exactly one CPU"},
		{[]Device{CPU(0), CPU(0)}, "listed twice"},
		{[]Device{CPU(0), {Name: "X", FreeBytes: 2, TotalBytes: 1}}, "free of"},
		{[]Device{CPU(-1)}, "negative"},
		{[]Device{CPU(0), {}}, "no name"},
	} {
		if err := Validate(c.devs); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.devs, err, c.want)
		}
	}
	if got := strings.Join(Names([]Device{GPU(1, 1), CPU(0), GPU(0, 1)}), ","); got != "CPU,CUDA0,CUDA1" {
		t.Errorf("names %s", got)
	}
}
