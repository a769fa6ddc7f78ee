//go:build !linux

package mmap

import "errors"

func adviseHugePages([]byte) {}

func pageUse([]byte) (PageUse, error) {
	return PageUse{}, errors.New("page accounting is only available on Linux")
}
