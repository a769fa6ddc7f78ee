package moe

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime"
	"slices"
	"sync"

	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/internal/mmap"
	"github.com/moerun/moerun/placement"
)

// weightSource hands the binder each weight's bytes as the plan's load mode says. Where
// the plan maps the file (llama.cpp's load modes auto, mmap and mmap+mlock) they are views
// into the mapping: no copy. Under none, mlock and dio (--no-mmap, --mlock, -dio) the
// host's weights are read into memory of the model's own, which llama.cpp reads into
// buffers too; moerun's is anonymous memory marked for transparent huge pages, so the
// kernel backs it with 2 MiB pages whatever page size the page cache holds the file in
// (decode streams these bytes every token; docs/guide.md, "Huge pages"). Weights that other
// devices hold are read through the mapping: their backends copy them into device memory.
type weightSource struct {
	f      *gguf.File
	host   string // the host's device name
	copy   bool   // read the host's weights into mem
	lock   bool   // lock the host's weights in RAM: the copies (mlock) or the views (mmap+mlock)
	direct bool   // read with direct I/O (dio)

	mem    []byte       // the copies, handed out from the front
	free   func() error // releases mem
	used   int
	copies map[string][]byte // by tensor name: a tied output shares the embedding's copy
	files  map[int]*directFile

	mappedEnd map[int]int64 // by part: the end of the last mapped weight the host uses
	warnings  []string      // what the user should know: a failed lock, direct I/O refused
}

// directFile is a part of the model opened for direct I/O (nil file: refused, so read with
// ordinary reads).
type directFile struct {
	file  *os.File
	align int
}

// copyAlign is where each copied weight starts: a cache line, as the kernels' loads like.
const copyAlign = 64

// newWeightSource prepares the weights' bytes for plan; host is the host's device name.
// Where the host's weights are copied, memory for all of them is mapped and faulted in
// (touch) before any is read; the host's small tensors that the binder reads as float32
// vectors (norms, biases) get room there too, unused.
func newWeightSource(f *gguf.File, plan *placement.Plan, host string) (*weightSource, error) {
	s := &weightSource{f: f, host: host, copy: !plan.Settings.Mmap, lock: plan.Settings.Locked,
		direct: plan.Settings.LoadMode == placement.LoadDirectIO, copies: map[string][]byte{}, files: map[int]*directFile{}, mappedEnd: map[int]int64{},
		free: func() error { return nil }}
	if !s.copy {
		return s, nil
	}
	reserve, seen := 0, map[string]bool{}
	for _, u := range plan.Tensors {
		name := u.Name
		if u.Tied {
			name = "token_embd.weight"
		}
		if u.Experts != nil {
			name = fmt.Sprintf("%s@%d", name, u.Experts[0]) // a share of a stack split by expert
		}
		if u.Device != host || seen[name] {
			continue
		}
		seen[name] = true
		reserve += int(u.Bytes) + copyAlign
		if s.direct {
			reserve += 3 * os.Getpagesize() // whole blocks around the tensor, aligned
		}
	}
	mem, free, err := mmap.Anonymous(reserve)
	if err != nil {
		return nil, fmt.Errorf("memory for the weights (load mode %s): %w", plan.Settings.LoadMode, err)
	}
	s.mem, s.free = mem, free
	touch(mem)
	return s, nil
}

// bytes returns the bytes of tensor ti, which the plan entry u puts on a device.
func (s *weightSource) bytes(ti *gguf.TensorInfo, u *placement.TensorUse) ([]byte, error) {
	if u.Device != s.host || !s.copy {
		if u.Device == s.host {
			s.mappedEnd[ti.Split] = max(s.mappedEnd[ti.Split], ti.FileOffset+ti.Size)
		}
		return s.f.TensorData(ti)
	}
	if data, ok := s.copies[ti.Name]; ok {
		return data, nil
	}
	data, err := s.read(ti)
	if err != nil {
		return nil, err
	}
	s.copies[ti.Name] = data
	return data, nil
}

// share returns the bytes of one share of a stack of experts that the plan splits by
// expert (entry u), and the experts they hold, in order. The host's share under a mapping
// is a view of the whole stack (nil experts: numbered as in the file), whose other
// experts' pages are never read; any other share holds its experts' slices alone, side by
// side: in the host's copies (read through the mapping, not with the load mode's reads),
// or in memory that the device's backend copies from.
func (s *weightSource) share(ti *gguf.TensorInfo, u *placement.TensorUse) ([]byte, []int, error) {
	if u.Device == s.host && !s.copy {
		data, err := s.bytes(ti, u)
		return data, nil, err
	}
	if len(ti.Shape) != 3 || ti.Shape[2] <= 0 {
		return nil, nil, fmt.Errorf("tensor %s: the plan splits it by expert, and it is not a stack of experts (shape %v)", ti.Name, ti.Shape)
	}
	experts := int(ti.Shape[2])
	for i, e := range u.Experts {
		if e < 0 || e >= experts || i > 0 && e <= u.Experts[i-1] {
			return nil, nil, fmt.Errorf("tensor %s: the plan's share on %s lists experts %v: not ascending ids below %d", ti.Name, u.Device, u.Experts, experts)
		}
	}
	whole, err := s.f.TensorData(ti)
	if err != nil {
		return nil, nil, err
	}
	size := len(whole) / experts
	var out []byte
	if u.Device == s.host {
		if out, err = s.take(size*len(u.Experts), copyAlign); err != nil {
			return nil, nil, err
		}
	} else {
		out = make([]byte, size*len(u.Experts))
	}
	err = mmap.Guard(func() {
		for i, e := range u.Experts {
			copy(out[i*size:(i+1)*size], whole[e*size:(e+1)*size])
		}
	})
	if err != nil {
		return nil, nil, fmt.Errorf("tensor %s: %w", ti.Name, err)
	}
	return out, u.Experts, nil
}

// lockAll locks the host's weights in RAM once every weight is bound, where the load mode
// says so: the copies' memory, or each mapped file from its start to the end of the last
// weight the host uses in it, as llama.cpp's mmap+mlock. The first failure is a warning, as
// in llama.cpp (the model still runs; its pages may be swapped out or evicted), and the
// rest is not tried.
func (s *weightSource) lockAll() {
	if !s.lock {
		return
	}
	var err error
	bytes := int64(s.used)
	switch {
	case s.copy:
		err = mmap.Lock(s.mem[:s.used])
	default:
		bytes = 0
		for _, part := range slices.Sorted(maps.Keys(s.mappedEnd)) {
			bytes += s.mappedEnd[part]
			if err == nil {
				err = s.f.LockData(part, s.mappedEnd[part])
			}
		}
	}
	if err != nil {
		s.warnings = append(s.warnings, fmt.Sprintf("failed to lock %.2f MiB of weights in RAM: %v; try raising RLIMIT_MEMLOCK (ulimit -l)", float64(bytes)/(1<<20), err))
	}
}

// read copies tensor ti into the reserved memory.
func (s *weightSource) read(ti *gguf.TensorInfo) ([]byte, error) {
	if s.direct {
		if d := s.directFile(ti.Split); d.file != nil {
			return s.readDirect(d, ti)
		}
	}
	data, err := s.take(int(ti.Size), copyAlign)
	if err != nil {
		return nil, err
	}
	return data, s.f.ReadTensor(ti, data)
}

// take hands out n bytes of the reserved memory starting at a multiple of align (a power
// of two dividing the page size; the memory starts at a page).
func (s *weightSource) take(n, align int) ([]byte, error) {
	start := (s.used + align - 1) &^ (align - 1)
	if start+n > len(s.mem) {
		return nil, fmt.Errorf("the weights need more than the %d bytes reserved for them", len(s.mem))
	}
	s.used = start + n
	return s.mem[start : start+n : start+n], nil
}

// touch faults every page of mem in, spread over the CPUs: reads that fault as they copy
// took 3-11 s for 3.2 GiB of huge pages on the build machine, touching first and then
// reading 1.1-1.6 s (0.9-1.6 s in small pages); the kernel's zeroing of the pages is most
// of it, and it runs on as many cores as fault.
func touch(mem []byte) {
	const page = 4096 // the smallest page size: touching each such page faults in all
	workers := min(runtime.GOMAXPROCS(0), max(1, len(mem)>>28))
	share := (len(mem)/workers + page - 1) &^ (page - 1)
	var wg sync.WaitGroup
	for lo := 0; lo < len(mem); lo += share {
		part := mem[lo:min(lo+share, len(mem))]
		wg.Go(func() {
			for i := 0; i < len(part); i += page {
				part[i] = 0
			}
		})
	}
	wg.Wait()
}

// directFile opens part i for direct I/O the first time it is asked for; where the file
// system refuses, it warns once, as llama.cpp does, and the part is read with ordinary reads.
func (s *weightSource) directFile(i int) *directFile {
	if d, ok := s.files[i]; ok {
		return d
	}
	d := &directFile{}
	file, align, err := mmap.OpenDirect(s.f.Parts[i].Path)
	switch {
	case err != nil:
		s.warnings = append(s.warnings, fmt.Sprintf("%v; falling back to buffered reads", err))
	case align > os.Getpagesize():
		file.Close()
		s.warnings = append(s.warnings, fmt.Sprintf("%s: direct I/O wants %d-byte alignment, more than a page; falling back to buffered reads", s.f.Parts[i].Path, align))
	default:
		d.file, d.align = file, align
	}
	s.files[i] = d
	return d
}

// readDirect reads ti with direct I/O: the whole blocks around its bytes land in the
// reserved memory, and the view is the tensor's part of them.
func (s *weightSource) readDirect(d *directFile, ti *gguf.TensorInfo) ([]byte, error) {
	start := ti.FileOffset &^ int64(d.align-1)
	end := (ti.FileOffset + ti.Size + int64(d.align) - 1) &^ int64(d.align-1)
	buf, err := s.take(int(end-start), d.align)
	if err != nil {
		return nil, err
	}
	want := int(ti.FileOffset + ti.Size - start) // the file may end inside the last block
	for done := 0; done < want; {
		n, err := d.file.ReadAt(buf[done:], start+int64(done))
		done += n
		if done >= want {
			break
		}
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("tensor %s: direct read: %w", ti.Name, err)
	}
	off := int(ti.FileOffset - start)
	return buf[off : off+int(ti.Size) : off+int(ti.Size)], nil
}

// pageUse is how the kernel holds the copies (zero without them).
func (s *weightSource) pageUse() (mmap.PageUse, error) { return mmap.PageUseOf(s.mem) }

// close releases the copies and the files opened for direct I/O.
func (s *weightSource) close() error {
	errs := []error{s.free()}
	for _, d := range s.files {
		if d.file != nil {
			errs = append(errs, d.file.Close())
		}
	}
	s.mem, s.copies, s.files = nil, nil, nil
	return errors.Join(errs...)
}
