// Package mmap maps files read-only and turns the faults that a mapping can raise
// (the file was truncated or replaced on disk, or its storage failed) into errors.
package mmap

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// ErrFileChanged is returned when mapped memory can no longer be read, which in practice
// means the file was truncated or replaced after it was mapped.
var ErrFileChanged = errors.New("model file changed on disk (truncated or replaced while mapped); reopen it")

// Mapping is a read-only view of a whole file. Data stays valid until Close.
type Mapping struct {
	data   []byte // the mapped bytes (nil for an empty file)
	file   *os.File
	name   string
	mapped bool // false when the platform has no mmap and data was read instead
}

// Open maps the named file read-only. An empty file gives an empty mapping.
func Open(name string) (*Mapping, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s: not a regular file", name)
	}
	m := &Mapping{file: f, name: name}
	if st.Size() > 0 {
		if m.data, m.mapped, err = mapFile(f, st.Size()); err != nil {
			f.Close()
			return nil, fmt.Errorf("mmap %s: %w", name, err)
		}
		if m.mapped {
			adviseHugePages(m.data)
		}
	}
	register(m)
	return m, nil
}

// Anonymous returns n bytes of zeroed memory mapped like the model files (marked for huge
// pages, see adviseHugePages), so that a measurement over it — a bandwidth probe,
// calibrate's expert weights — sees the page size the weights get. free releases it; the
// bytes must not be used afterwards. Where the platform has no mmap it is a plain slice.
func Anonymous(n int) (data []byte, free func() error, err error) {
	if n <= 0 {
		return nil, func() error { return nil }, nil
	}
	data, mapped, err := mapAnonymous(n)
	if err != nil {
		return nil, nil, fmt.Errorf("mapping %d bytes: %w", n, err)
	}
	if !mapped {
		return data, func() error { return nil }, nil
	}
	adviseHugePages(data)
	return data, func() error { return unmap(data) }, nil
}

// PageUseOf is how the kernel maps memory Anonymous returned (or a part of it) right now:
// the bytes written so far and, of those, the bytes in transparent huge pages. It fails
// where the platform cannot tell.
func PageUseOf(data []byte) (PageUse, error) {
	if len(data) == 0 {
		return PageUse{}, nil
	}
	return pageUse(data)
}

// Lock keeps data's pages in RAM (mlock), reading in those not yet there. It fails where
// the process may not lock that much (RLIMIT_MEMLOCK; ulimit -l) or the platform cannot.
func Lock(data []byte) error {
	if len(data) == 0 {
		return nil
	}
	return lock(data)
}

// Name is the path the mapping was opened from.
func (m *Mapping) Name() string { return m.name }

// Size is the file size at the time it was mapped.
func (m *Mapping) Size() int64 { return int64(len(m.data)) }

// Bytes returns the view [off, off+n) with its capacity capped so callers cannot grow it.
// The caller must have checked the range against Size.
func (m *Mapping) Bytes(off, n int64) []byte {
	return m.data[off : off+n : off+n]
}

// Prefetch asks the kernel to start reading [0, n) in the background (MADV_WILLNEED), so a
// header on a cold disk or network file system arrives in one burst instead of readahead
// window by window. It is only a hint: failures are ignored.
func (m *Mapping) Prefetch(n int64) {
	if m.mapped && n > 0 {
		_ = willNeed(m.data[:min(n, int64(len(m.data)))])
	}
}

// PageUse is how the kernel maps the file right now: the bytes read so far (resident) and,
// of those, the bytes in huge pages. It fails where the platform cannot tell or the file was
// read into memory instead of mapped.
func (m *Mapping) PageUse() (PageUse, error) {
	if !m.mapped || len(m.data) == 0 {
		return PageUse{}, fmt.Errorf("%s: not memory-mapped", m.name)
	}
	return pageUse(m.data)
}

// ReadAt implements io.ReaderAt over the mapping, reporting a fault as ErrFileChanged.
func (m *Mapping) ReadAt(p []byte, off int64) (n int, err error) {
	if off < 0 {
		return 0, fmt.Errorf("%s: negative offset %d", m.name, off)
	}
	if off >= int64(len(m.data)) {
		return 0, io.EOF
	}
	err = Guard(func() { n = copy(p, m.data[off:]) })
	if err == nil && n < len(p) {
		err = io.EOF
	}
	return n, err
}

// Lock keeps the mapping's bytes [off, off+n) in RAM (mlock), reading in the pages not yet
// there (see the package's Lock). The caller must have checked the range against Size.
func (m *Mapping) Lock(off, n int64) error {
	if !m.mapped {
		return fmt.Errorf("%s: not memory-mapped", m.name)
	}
	return Lock(m.data[off : off+n])
}

// ReadFileAt reads from the file with ordinary reads (pread), not through the mapping, so
// the mapping's pages stay unmapped: for a caller that keeps its own copy of the bytes.
func (m *Mapping) ReadFileAt(p []byte, off int64) (int, error) { return m.file.ReadAt(p, off) }

// Close unmaps the file. Views returned by Bytes must not be used afterwards.
func (m *Mapping) Close() error {
	var err error
	unregister(m)
	if m.mapped && m.data != nil {
		err = unmap(m.data)
	}
	m.data = nil
	if cerr := m.file.Close(); err == nil {
		err = cerr
	}
	return err
}
