//go:build !linux

package mmap

import "errors"

func adviseHugePages([]byte) {}

func hugePageBytes([]byte) (int64, error) {
	return 0, errors.New("huge page accounting is only available on Linux")
}
