//go:build !unix

package mmap

import (
	"errors"
	"io"
	"os"
)

// Without mmap the file is read into memory: correct, but it costs RAM for the whole file.
func mapFile(f *os.File, size int64) ([]byte, bool, error) {
	data := make([]byte, size)
	if _, err := io.ReadFull(io.NewSectionReader(f, 0, size), data); err != nil {
		return nil, false, err
	}
	return data, false, nil
}

func mapAnonymous(n int) ([]byte, bool, error) { return make([]byte, n), false, nil }

func unmap([]byte) error { return nil }

func willNeed([]byte) error { return nil }

func lock([]byte) error { return errors.New("locking memory is not supported on this platform") }
