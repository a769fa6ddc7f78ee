package mmap

import (
	"os"
	"runtime"
	"strings"
	"testing"
)

// A /proc/self/smaps excerpt as Linux 6.18 writes it (fields trimmed): the model file in two
// areas, the second partly in huge pages, an area of another file before and one that
// straddles the range's end after.
const smapsSample = `55d0c0000000-55d0c0021000 r--p 00000000 fe:00 91 /usr/bin/moerun
Size:                132 kB
FilePmdMapped:         0 kB
VmFlags: rd mr mw me sd
7f0000000000-7f0000400000 r--s 00000000 fe:00 4242 /models/m: one.gguf
Size:               4096 kB
Rss:                 100 kB
FilePmdMapped:         0 kB
THPeligible:           1
VmFlags: rd sh mr mw me ms hg
7f0000400000-7f0000c00000 r--s 00400000 fe:00 4242 /models/m: one.gguf
Size:               8192 kB
FilePmdMapped:      6144 kB
VmFlags: rd sh mr mw me ms hg
7f0000c00000-7f0001400000 r--p 00000000 00:00 0
FilePmdMapped:      2048 kB
`

func TestPmdMappedIn(t *testing.T) {
	for _, c := range []struct {
		name       string
		start, end uintptr
		want       int64
	}{
		{"the model's two areas", 0x7f0000000000, 0x7f0000c00000, 6144 << 10},
		{"only the first area", 0x7f0000000000, 0x7f0000400000, 0},
		{"an area straddling the end does not count", 0x7f0000000000, 0x7f0001000000, 6144 << 10},
		{"nothing there", 0x1000, 0x2000, 0},
	} {
		got, err := pmdMappedIn(strings.NewReader(smapsSample), c.start, c.end)
		if err != nil || got != c.want {
			t.Errorf("%s: %d, %v; want %d", c.name, got, err, c.want)
		}
	}
}

func TestPmdMappedInRejectsGarbage(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"7f00-7e00 r--s 0 fe:00 1 x\n", `line 1: bad address range "7f00-7e00"`},
		{"garbage\n", `line 1: "garbage" is neither`},
		{"7f00-7f10 r--s 0 fe:00 1 x\nFilePmdMapped: 12 MB\n", `line 2: bad size "12 MB"`},
		{"7f00-7f10 r--s 0 fe:00 1 x\nFilePmdMapped: -4 kB\n", `line 2: bad size`},
		{"0-zz r--s 0 fe:00 1 x\n", `bad address range "0-zz"`},
	} {
		_, err := pmdMappedIn(strings.NewReader(c.text), 0, ^uintptr(0))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want one containing %q", c.text, err, c.want)
		}
	}
}

// TestHugePageBytes reads this process's own smaps: the count is whatever the kernel chose
// (a small temporary file is rarely in huge pages), but it must be readable and no larger
// than the mapping.
func TestHugePageBytes(t *testing.T) {
	m, err := Open(writeTemp(t, make([]byte, 3<<20)))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	n, err := m.HugePageBytes()
	if runtime.GOOS != "linux" {
		if err == nil {
			t.Errorf("HugePageBytes = %d with no error off Linux", n)
		}
		return
	}
	if _, statErr := os.Stat("/proc/self/smaps"); statErr != nil {
		t.Skip("no /proc/self/smaps here")
	}
	if err != nil || n < 0 || n > m.Size() {
		t.Errorf("HugePageBytes = %d, %v for a %d-byte mapping", n, err, m.Size())
	}
}

func FuzzPmdMappedIn(f *testing.F) {
	f.Add(smapsSample)
	f.Add("7f00-7f10 r--s 0 fe:00 1 x\nFilePmdMapped: 9223372036854775807 kB\n")
	f.Fuzz(func(t *testing.T, text string) {
		n, err := pmdMappedIn(strings.NewReader(text), 0, ^uintptr(0))
		if err == nil && n < 0 {
			t.Errorf("negative total %d", n)
		}
	})
}
