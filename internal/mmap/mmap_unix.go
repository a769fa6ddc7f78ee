//go:build unix

package mmap

import (
	"os"

	"golang.org/x/sys/unix"
)

func mapFile(f *os.File, size int64) ([]byte, bool, error) {
	data, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, false, err
	}
	return data, true, nil
}

func mapAnonymous(n int) ([]byte, bool, error) {
	data, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	return data, err == nil, err
}

func unmap(data []byte) error { return unix.Munmap(data) }

func willNeed(data []byte) error { return unix.Madvise(data, unix.MADV_WILLNEED) }

func lock(data []byte) error { return unix.Mlock(data) }
