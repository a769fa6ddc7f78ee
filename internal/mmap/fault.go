package mmap

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"unsafe"
)

// live records the address ranges of open mappings, so that Guard turns only faults inside
// a mapping into errors and lets genuine bugs (wild pointers) crash as they should.
var live struct {
	sync.Mutex
	ranges map[*Mapping][2]uintptr
}

func register(m *Mapping) {
	if len(m.data) == 0 || !m.mapped {
		return
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(m.data)))
	live.Lock()
	defer live.Unlock()
	if live.ranges == nil {
		live.ranges = make(map[*Mapping][2]uintptr)
	}
	live.ranges[m] = [2]uintptr{start, start + uintptr(len(m.data))}
}

func unregister(m *Mapping) {
	live.Lock()
	defer live.Unlock()
	delete(live.ranges, m)
}

// owner returns the mapping holding addr, if any.
func owner(addr uintptr) *Mapping {
	live.Lock()
	defer live.Unlock()
	for m, r := range live.ranges {
		if addr >= r[0] && addr < r[1] {
			return m
		}
	}
	return nil
}

// Guard runs fn with faults on mapped memory turned into ErrFileChanged instead of a crash.
// SetPanicOnFault is per goroutine, so every goroutine that reads mapped weights must do its
// reading inside Guard. Other panics are passed on unchanged.
func Guard(fn func()) (err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			fault, isFault := r.(interface{ Addr() uintptr })
			if _, isRuntime := r.(runtime.Error); isRuntime && isFault {
				if m := owner(fault.Addr()); m != nil {
					err = fmt.Errorf("%s: %w (fault at address %#x)", m.name, ErrFileChanged, fault.Addr())
					return
				}
			}
			panic(r)
		}
	}()
	fn()
	return nil
}
