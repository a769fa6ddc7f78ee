//go:build !linux

package mmap

import (
	"errors"
	"os"
)

// OpenDirect fails: direct I/O is implemented for Linux only.
func OpenDirect(name string) (*os.File, int, error) {
	return nil, 0, &os.PathError{Op: "open for direct I/O", Path: name, Err: errors.New("not supported on this platform")}
}
