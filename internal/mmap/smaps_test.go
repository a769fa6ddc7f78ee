package mmap

import (
	"os"
	"runtime"
	"strings"
	"testing"
)

// A /proc/self/smaps excerpt as Linux 6.18 writes it (fields trimmed): the model file in two
// areas, the second partly in huge pages, an area of another file before and one that
// straddles the range's end after, then anonymous memory partly in transparent huge pages.
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
Rss:                7168 kB
FilePmdMapped:      6144 kB
VmFlags: rd sh mr mw me ms hg
7f0000c00000-7f0001400000 r--p 00000000 00:00 0
Rss:                2048 kB
FilePmdMapped:      2048 kB
7f0002000000-7f0002800000 rw-p 00000000 00:00 0
Size:               8192 kB
Rss:                6144 kB
AnonHugePages:      4096 kB
FilePmdMapped:         0 kB
`

func TestPageUseIn(t *testing.T) {
	for _, c := range []struct {
		name       string
		start, end uintptr
		want       PageUse
	}{
		{"the model's two areas", 0x7f0000000000, 0x7f0000c00000, PageUse{Resident: (100 + 7168) << 10, Huge: 6144 << 10}},
		{"only the first area", 0x7f0000000000, 0x7f0000400000, PageUse{Resident: 100 << 10}},
		{"an area straddling the end does not count", 0x7f0000000000, 0x7f0001000000, PageUse{Resident: (100 + 7168) << 10, Huge: 6144 << 10}},
		{"nothing there", 0x1000, 0x2000, PageUse{}},
		{"anonymous memory's huge pages count", 0x7f0002000000, 0x7f0002800000, PageUse{Resident: 6144 << 10, Huge: 4096 << 10}},
	} {
		got, err := pageUseIn(strings.NewReader(smapsSample), c.start, c.end)
		if err != nil || got != c.want {
			t.Errorf("%s: %+v, %v; want %+v", c.name, got, err, c.want)
		}
	}
}

func TestPageUseInRejectsGarbage(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"7f00-7e00 r--s 0 fe:00 1 x\n", `line 1: bad address range "7f00-7e00"`},
		{"garbage\n", `line 1: "garbage" is neither`},
		{"7f00-7f10 r--s 0 fe:00 1 x\nFilePmdMapped: 12 MB\n", `line 2: bad size "12 MB"`},
		{"7f00-7f10 r--s 0 fe:00 1 x\nFilePmdMapped: -4 kB\n", `line 2: bad size`},
		{"7f00-7f10 r--s 0 fe:00 1 x\nRss: many kB\n", `line 2: bad size "many kB"`},
		{"0-zz r--s 0 fe:00 1 x\n", `bad address range "0-zz"`},
	} {
		_, err := pageUseIn(strings.NewReader(c.text), 0, ^uintptr(0))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want one containing %q", c.text, err, c.want)
		}
	}
}

// TestPageUse reads this process's own smaps: the counts are whatever the kernel chose
// (a small temporary file is rarely in huge pages), but they must be readable and
// consistent: the file read through the mapping is resident, huge pages are part of that.
func TestPageUse(t *testing.T) {
	m, err := Open(writeTemp(t, make([]byte, 3<<20+100)))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var sum byte
	for _, b := range m.Bytes(0, m.Size()) {
		sum += b
	}
	use, err := m.PageUse()
	if runtime.GOOS != "linux" {
		if err == nil {
			t.Errorf("PageUse = %+v with no error off Linux", use)
		}
		return
	}
	if _, statErr := os.Stat("/proc/self/smaps"); statErr != nil {
		t.Skip("no /proc/self/smaps here")
	}
	if err != nil || use.Resident < m.Size() || use.Resident > m.Size()+4096 || use.Huge < 0 || use.Huge > use.Resident {
		t.Errorf("PageUse = %+v, %v for a %d-byte mapping read through (sum %d)", use, err, m.Size(), sum)
	}
}

func FuzzPageUseIn(f *testing.F) {
	f.Add(smapsSample)
	f.Add("7f00-7f10 r--s 0 fe:00 1 x\nFilePmdMapped: 9223372036854775807 kB\n")
	f.Fuzz(func(t *testing.T, text string) {
		use, err := pageUseIn(strings.NewReader(text), 0, ^uintptr(0))
		if err == nil && (use.Resident < 0 || use.Huge < 0) {
			t.Errorf("negative total %+v", use)
		}
	})
}
