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
