//go:build linux

package mmap

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// OpenDirect opens a file for direct I/O (O_DIRECT: reads bypass the page cache, so a model
// read once into memory does not also fill the cache). Every read must start at a file
// offset and a buffer address that are multiples of align and cover a multiple of align
// bytes (a read may end at the end of the file). align is what the kernel reports for the
// file (statx's DIO alignment, Linux 6.1 and later), else the page size. File systems
// without direct I/O (tmpfs) refuse.
func OpenDirect(name string) (f *os.File, align int, err error) {
	fd, err := unix.Open(name, unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, 0, &os.PathError{Op: "open for direct I/O", Path: name, Err: err}
	}
	align = os.Getpagesize()
	var st unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_DIOALIGN, &st); err == nil && st.Mask&unix.STATX_DIOALIGN != 0 {
		if st.Dio_mem_align == 0 || st.Dio_offset_align == 0 {
			unix.Close(fd)
			return nil, 0, &os.PathError{Op: "open for direct I/O", Path: name, Err: errors.New("the file system does not support direct I/O for this file")}
		}
		align = int(max(st.Dio_mem_align, st.Dio_offset_align))
	}
	return os.NewFile(uintptr(fd), name), align, nil
}
