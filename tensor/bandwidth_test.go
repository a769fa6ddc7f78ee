package tensor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/moerun/moerun/internal/mmap"
)

// TestStreamReadReadsEverything maps a file, truncates it and streams it: reading the
// vanished last pages must fault (an error, not a crash), which shows that every part of
// the buffer is read, on one and on two threads, by the vector loads and by the copy of the
// bytes after them.
func TestStreamReadReadsEverything(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no mmap faults without mmap")
	}
	const size = 3*streamChunk + 12345
	path := filepath.Join(t.TempDir(), "stream.bin")
	if err := os.WriteFile(path, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := mmap.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	buf := m.Bytes(0, m.Size())
	for _, threads := range []int{1, 2} {
		p := NewPool(threads)
		defer p.Close()
		if err := p.StreamRead(buf); err != nil {
			t.Fatalf("%d threads: %v", threads, err)
		}
		if err := p.StreamRead(nil); err != nil {
			t.Fatalf("%d threads, empty buffer: %v", threads, err)
		}
	}
	// Cut the last bytes (read by the copy after the vector loads), then a page of those the
	// vector loads read: a fault in either is an error.
	for _, cut := range []int{100, 8192} {
		if err := os.Truncate(path, size-int64(cut)); err != nil {
			t.Fatal(err)
		}
		for _, threads := range []int{1, 2} {
			p := NewPool(threads)
			defer p.Close()
			if err := p.StreamRead(buf); !errors.Is(err, mmap.ErrFileChanged) {
				t.Errorf("%d threads, %d bytes cut: %v", threads, cut, err)
			}
		}
	}
}

// bandwidthBytes is the buffer of the bandwidth benchmark: 1 GiB, four times the largest
// last-level cache of the machines we measure on (260 MiB on the build machine's Xeon).
const bandwidthBytes = 1 << 30

// BenchmarkMemoryBandwidth is the physical limit every mat-vec number is compared to: a
// plain streaming read of a buffer far larger than the last-level cache, in huge pages
// where the system gives them, as the model files are mapped (mmap.Anonymous). Its MB/s
// is the bandwidth.
func BenchmarkMemoryBandwidth(b *testing.B) {
	buf, free, err := mmap.Anonymous(bandwidthBytes)
	if err != nil {
		b.Fatal(err)
	}
	defer free()
	for i := 0; i < len(buf); i += 4096 {
		buf[i] = 1 // fault the pages in before timing
	}
	for _, threads := range []int{1, 2} {
		b.Run(fmt.Sprintf("threads=%d", threads), func(b *testing.B) {
			p := NewPool(threads)
			defer p.Close()
			b.SetBytes(int64(len(buf)))
			cpu := processCPU()
			for b.Loop() {
				if err := p.StreamRead(buf); err != nil {
					b.Fatal(err)
				}
			}
			reportCPU(b, cpu)
		})
	}
}

// reportCPU adds the process CPU time per operation since start (all threads together) to
// a benchmark's results, as cpu-ns/op. On a busy machine wall time includes the time the
// benchmark waited for a core; CPU time does not.
func reportCPU(b *testing.B, start time.Duration) {
	if used := processCPU() - start; used > 0 {
		b.ReportMetric(float64(used.Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}
