package mmap

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

func writeTemp(t *testing.T, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f.bin")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestMapAndRead(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 10000)
	m, err := Open(writeTemp(t, data))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Size() != int64(len(data)) || !bytes.Equal(m.Bytes(5, 10), data[5:15]) {
		t.Fatal("mapping does not hold the file")
	}
	if v := m.Bytes(5, 10); cap(v) != 10 {
		t.Errorf("view capacity %d lets callers grow it past its tensor", cap(v))
	}
	buf := make([]byte, 20)
	if n, err := m.ReadAt(buf, int64(len(data))-10); n != 10 || err != io.EOF {
		t.Errorf("ReadAt at the end: %d, %v", n, err)
	}
	if _, err := m.ReadAt(buf, -1); err == nil {
		t.Error("negative offset accepted")
	}
}

func TestEmptyFileAndErrors(t *testing.T) {
	m, err := Open(writeTemp(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	if m.Size() != 0 {
		t.Error("empty file has a size")
	}
	if _, err := m.ReadAt(make([]byte, 1), 0); err != io.EOF {
		t.Errorf("read of empty mapping: %v", err)
	}
	m.Close()
	if _, err := Open(t.TempDir()); err == nil {
		t.Error("mapped a directory")
	}
	if _, err := Open(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

// TestTruncatedWhileMapped shrinks the file under a live mapping: reading the vanished pages
// raises SIGBUS, which must come back as ErrFileChanged instead of killing the process.
func TestTruncatedWhileMapped(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no mmap faults without mmap")
	}
	const size = 1 << 20
	p := writeTemp(t, bytes.Repeat([]byte{7}, size))
	m, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := os.Truncate(p, 4096); err != nil {
		t.Fatal(err)
	}
	view := m.Bytes(size-8192, 8192)
	var sum int
	err = Guard(func() {
		for _, b := range view {
			sum += int(b)
		}
	})
	if !errors.Is(err, ErrFileChanged) {
		t.Fatalf("reading truncated pages: %v (sum %d)", err, sum)
	}
	if _, err := m.ReadAt(make([]byte, 100), size-100); !errors.Is(err, ErrFileChanged) {
		t.Errorf("ReadAt of truncated pages: %v", err)
	}
	// The pages that still exist read normally.
	if err := Guard(func() { sum = int(m.Bytes(0, 1)[0]) }); err != nil || sum != 7 {
		t.Errorf("reading surviving page: %v", err)
	}
}

func TestGuardPassesOtherPanics(t *testing.T) {
	defer func() {
		if r := recover(); r != "boom" {
			t.Errorf("recovered %v, want the original panic", r)
		}
	}()
	Guard(func() { panic("boom") })
}

func TestAnonymous(t *testing.T) {
	data, free, err := Anonymous(5 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) != 5<<20 || data[0] != 0 || data[len(data)-1] != 0 {
		t.Fatalf("got %d bytes, first %d, last %d; want 5 MiB of zeros", len(data), data[0], data[len(data)-1])
	}
	data[12345] = 7 // writable
	if err := free(); err != nil {
		t.Error(err)
	}
	if data, free, err := Anonymous(0); err != nil || len(data) != 0 || free() != nil {
		t.Errorf("Anonymous(0) = %d bytes, %v", len(data), err)
	}
}

// TestLockAndAnonymousPageUse locks anonymous memory (64 KiB: within any RLIMIT_MEMLOCK)
// and counts its written pages as resident.
func TestLockAndAnonymousPageUse(t *testing.T) {
	data, free, err := Anonymous(64 << 10)
	if err != nil {
		t.Fatal(err)
	}
	defer free()
	if err := Lock(data); err != nil && runtime.GOOS == "linux" {
		t.Errorf("locking 64 KiB: %v", err)
	}
	if err := Lock(nil); err != nil {
		t.Errorf("locking nothing: %v", err)
	}
	for i := range data {
		data[i] = 1
	}
	use, err := PageUseOf(data)
	if runtime.GOOS != "linux" {
		return
	}
	if err != nil || use.Resident < int64(len(data)) || use.Huge > use.Resident {
		t.Errorf("PageUseOf = %+v, %v for %d written bytes", use, err, len(data))
	}
}

// TestReadFileAt reads the file behind a mapping with ordinary reads, and locks a range.
func TestReadFileAt(t *testing.T) {
	data := bytes.Repeat([]byte("abcdefgh"), 3000)
	m, err := Open(writeTemp(t, data))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	buf := make([]byte, 100)
	if n, err := m.ReadFileAt(buf, 1001); n != 100 || err != nil || !bytes.Equal(buf, data[1001:1101]) {
		t.Errorf("ReadFileAt: %d, %v, %q", n, err, buf[:n])
	}
	if n, err := m.ReadFileAt(buf, int64(len(data))-10); n != 10 || err != io.EOF {
		t.Errorf("ReadFileAt at the end: %d, %v", n, err)
	}
	if err := m.Lock(0, m.Size()); err != nil && runtime.GOOS == "linux" {
		t.Errorf("locking %d mapped bytes: %v", m.Size(), err)
	}
}

// TestOpenDirect reads a file with direct I/O: whole aligned blocks into an aligned buffer,
// the last one short at the end of the file.
func TestOpenDirect(t *testing.T) {
	data := make([]byte, 3*65536+1000)
	for i := range data {
		data[i] = byte(i * 7)
	}
	path := writeTemp(t, data)
	f, align, err := OpenDirect(path)
	if runtime.GOOS != "linux" {
		if err == nil {
			t.Error("direct I/O opened off Linux")
		}
		return
	}
	if err != nil {
		t.Skipf("this file system refuses direct I/O: %v", err)
	}
	defer f.Close()
	if align <= 0 || align&(align-1) != 0 || align > 65536 {
		t.Fatalf("alignment %d", align)
	}
	buf, free, err := Anonymous((len(data) + align - 1) &^ (align - 1)) // page-aligned
	if err != nil {
		t.Fatal(err)
	}
	defer free()
	off := int64(2 * align)
	n, err := f.ReadAt(buf, off) // a whole number of blocks, past the end of the file
	if want := len(data) - int(off); n != want || !bytes.Equal(buf[:n], data[off:]) {
		t.Errorf("direct read from %d: %d bytes (%v), want the %d to the end", off, n, err, want)
	}
}
