package mmap

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// PageUse is how a mapping's pages are held: the bytes resident (mapped into this process:
// the pages read or written so far) and, of those, the bytes mapped with PMD-sized pages
// (2 MiB on x86-64): page-cache folios of a file mapping, transparent huge pages of
// anonymous memory.
type PageUse struct {
	Resident, Huge int64
}

// pageUseIn reads a /proc/PID/smaps listing and sums the Rss field, and the FilePmdMapped
// and AnonHugePages fields (each area has at most one of them non-zero), of the memory
// areas lying inside [start, end). An area that straddles the range's edges does
// not count; mappings made by Open never do.
func pageUseIn(r io.Reader, start, end uintptr) (PageUse, error) {
	var use PageUse
	inside := false
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		key, value, isField := strings.Cut(text, ":")
		if isField && !strings.Contains(key, " ") {
			var sum *int64
			switch key {
			case "Rss":
				sum = &use.Resident
			case "FilePmdMapped", "AnonHugePages":
				sum = &use.Huge
			}
			if !inside || sum == nil {
				continue
			}
			kb, err := kilobytes(value)
			if err != nil {
				return PageUse{}, fmt.Errorf("smaps line %d: %w", line, err)
			}
			if *sum += kb << 10; *sum < 0 {
				return PageUse{}, fmt.Errorf("smaps line %d: sizes add up past 8 EiB", line)
			}
			continue
		}
		lo, hi, err := areaRange(text)
		if err != nil {
			return PageUse{}, fmt.Errorf("smaps line %d: %w", line, err)
		}
		inside = lo >= start && hi <= end
	}
	if err := sc.Err(); err != nil {
		return PageUse{}, fmt.Errorf("smaps: %w", err)
	}
	return use, nil
}

// areaRange parses the "start-end" that opens an area's header line
// ("7f0c4a000000-7f0c4c000000 r--s 00000000 fe:01 1234  /models/m.gguf").
func areaRange(header string) (lo, hi uintptr, err error) {
	first, _, _ := strings.Cut(header, " ")
	a, b, ok := strings.Cut(first, "-")
	if !ok {
		return 0, 0, fmt.Errorf("%q is neither an area header nor a field", header)
	}
	l, errA := strconv.ParseUint(a, 16, 64)
	h, errB := strconv.ParseUint(b, 16, 64)
	if errA != nil || errB != nil || h < l {
		return 0, 0, fmt.Errorf("bad address range %q", first)
	}
	return uintptr(l), uintptr(h), nil
}

// kilobytes parses a field value such as "  2048 kB".
func kilobytes(value string) (int64, error) {
	number, unit, _ := strings.Cut(strings.TrimSpace(value), " ")
	n, err := strconv.ParseInt(number, 10, 64)
	if err != nil || n < 0 || n > 1<<40 || unit != "kB" {
		return 0, fmt.Errorf("bad size %q (want a count of kB)", strings.TrimSpace(value))
	}
	return n, nil
}
