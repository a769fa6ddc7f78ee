package cpu

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"sync"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/internal/mmap"
	"github.com/moerun/moerun/tensor"
)

// store keeps a model's weights as its Storage says. Views of the mapping cost nothing.
// Copies (llama.cpp's load modes none, mlock and dio, which read into buffers too) go to
// anonymous memory marked for transparent huge pages, so the kernel backs them with 2 MiB
// pages whatever page size the page cache holds the file in (decode streams these bytes
// every token; docs/guide.md, "Huge pages").
type store struct {
	b  *Backend
	st backend.Storage

	mem    []byte       // the copies, handed out from the front
	free   func() error // releases mem
	used   int
	copies map[string][]byte // by tensor name, of one range of a file: a tied output shares the embedding's copy
	files  map[string]*directFile

	mappedEnd map[backend.ModelFile]int64 // the end of the last mapped weight in each file
	warnings  []string
}

// directFile is a file opened for direct I/O (nil file: refused, so read with ordinary
// reads).
type directFile struct {
	file  *os.File
	align int
}

// copyAlign is where each copied weight starts: a cache line, as the kernels' loads like.
const copyAlign = 64

// NewStore makes a store for a model's weights. Where it copies them, memory for all of
// them is mapped and faulted in (touch) before any is read: each weight gets room for its
// alignment, and under direct I/O for the whole blocks around it.
func (b *Backend) NewStore(st backend.Storage, weights int, bytes int64) (backend.Store, error) {
	if b.closed {
		return nil, errClosed
	}
	if b.copy || b.private {
		return nil, fmt.Errorf("%s: a device with memory of its own keeps no host store", b.dev.Name)
	}
	s := &store{b: b, st: st, copies: map[string][]byte{}, files: map[string]*directFile{},
		mappedEnd: map[backend.ModelFile]int64{}, free: func() error { return nil }}
	if !st.Copy || weights == 0 {
		return s, nil
	}
	reserve := bytes + int64(weights)*copyAlign
	if st.Direct {
		reserve += int64(weights) * 3 * int64(os.Getpagesize())
	}
	mem, free, err := mmap.Anonymous(int(reserve))
	if err != nil {
		return nil, fmt.Errorf("memory for the weights: %w", err)
	}
	s.mem, s.free = mem, free
	touch(mem)
	return s, nil
}

// Load makes a weight of src's bytes: a view of its one piece, or the store's copy.
func (s *store) Load(name string, t tensor.Type, shape []int64, src backend.Source) (backend.Weight, []byte, error) {
	data, err := s.bytes(name, src)
	if err != nil {
		return nil, nil, err
	}
	m, err := tensor.NewMatrix(t, shape, data)
	if err != nil {
		return nil, nil, fmt.Errorf("tensor %s: %w", name, err)
	}
	return &weight{name: name, m: m, owner: s.b}, data, nil
}

// bytes are the bytes a weight computes on.
func (s *store) bytes(name string, src backend.Source) ([]byte, error) {
	if s.b.closed {
		return nil, errClosed
	}
	if !s.st.Copy {
		if len(src.Pieces) != 1 {
			return nil, fmt.Errorf("tensor %s: a store of views of the mapping takes one piece, not %d", name, len(src.Pieces))
		}
		if src.File != nil {
			s.mappedEnd[src.File] = max(s.mappedEnd[src.File], src.Offset+int64(len(src.Pieces[0])))
		}
		return src.Pieces[0], nil
	}
	if data, ok := s.copies[name]; ok && src.File != nil {
		return data, nil
	}
	data, err := s.read(name, src)
	if err != nil {
		return nil, err
	}
	if src.File != nil {
		s.copies[name] = data
	}
	return data, nil
}

// read copies src into the reserved memory: with direct I/O where the storage says so and
// the file system allows, with ordinary reads of the file, or from the pieces (several:
// a share of a stack of experts).
func (s *store) read(name string, src backend.Source) ([]byte, error) {
	n := 0
	for _, p := range src.Pieces {
		n += len(p)
	}
	if src.File == nil {
		data, err := s.take(n, copyAlign)
		if err != nil {
			return nil, err
		}
		err = mmap.Guard(func() {
			at := 0
			for _, p := range src.Pieces {
				at += copy(data[at:], p)
			}
		})
		if err != nil {
			return nil, fmt.Errorf("tensor %s: %w", name, err)
		}
		return data, nil
	}
	if s.st.Direct {
		if d := s.directFile(src.File.Name()); d.file != nil {
			return s.readDirect(d, name, src.Offset, n)
		}
	}
	data, err := s.take(n, copyAlign)
	if err != nil {
		return nil, err
	}
	if got, err := src.File.ReadAt(data, src.Offset); got < n {
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF // the file shrank since it was opened
		}
		return nil, fmt.Errorf("tensor %s: %w", name, err)
	}
	return data, nil
}

// take hands out n bytes of the reserved memory starting at a multiple of align (a power
// of two dividing the page size; the memory starts at a page).
func (s *store) take(n, align int) ([]byte, error) {
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

// directFile opens a file for direct I/O the first time it is asked for; where the file
// system refuses, it warns once, as llama.cpp does, and the file is read with ordinary
// reads.
func (s *store) directFile(path string) *directFile {
	if d, ok := s.files[path]; ok {
		return d
	}
	d := &directFile{}
	file, align, err := mmap.OpenDirect(path)
	switch {
	case err != nil:
		s.warnings = append(s.warnings, fmt.Sprintf("%v; falling back to buffered reads", err))
	case align > os.Getpagesize():
		file.Close()
		s.warnings = append(s.warnings, fmt.Sprintf("%s: direct I/O wants %d-byte alignment, more than a page; falling back to buffered reads", path, align))
	default:
		d.file, d.align = file, align
	}
	s.files[path] = d
	return d
}

// readDirect reads n bytes at off with direct I/O: the whole blocks around them land in
// the reserved memory, and the weight's bytes are its part of them.
func (s *store) readDirect(d *directFile, name string, off int64, n int) ([]byte, error) {
	start := off &^ int64(d.align-1)
	end := (off + int64(n) + int64(d.align) - 1) &^ int64(d.align-1)
	buf, err := s.take(int(end-start), d.align)
	if err != nil {
		return nil, err
	}
	want := int(off + int64(n) - start) // the file may end inside the last block
	for done := 0; done < want; {
		got, err := d.file.ReadAt(buf[done:], start+int64(done))
		done += got
		if done >= want {
			break
		}
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("tensor %s: direct read: %w", name, err)
	}
	at := int(off - start)
	return buf[at : at+n : at+n], nil
}

// Seal locks the weights in RAM where the storage says so: the copies' memory, or each
// mapped file from its start to the end of the last weight in it, as llama.cpp's
// mmap+mlock. The first failure is a warning, as in llama.cpp (the model still runs; its
// pages may be swapped out or evicted), and the rest is not tried.
func (s *store) Seal() {
	if !s.st.Lock {
		return
	}
	var err error
	bytes := int64(s.used)
	if s.st.Copy {
		err = mmap.Lock(s.mem[:s.used])
	} else {
		bytes = 0
		files := make([]backend.ModelFile, 0, len(s.mappedEnd))
		for f := range s.mappedEnd {
			files = append(files, f)
		}
		slices.SortFunc(files, func(a, b backend.ModelFile) int { return cmp.Compare(a.Name(), b.Name()) })
		for _, f := range files {
			bytes += s.mappedEnd[f]
			if err == nil {
				err = f.Lock(s.mappedEnd[f])
			}
		}
	}
	if err != nil {
		s.warnings = append(s.warnings, fmt.Sprintf("failed to lock %.2f MiB of weights in RAM: %v; try raising RLIMIT_MEMLOCK (ulimit -l)", float64(bytes)/(1<<20), err))
	}
}

// Report says what the store holds.
func (s *store) Report() backend.StoreReport {
	r := backend.StoreReport{Copied: int64(s.used), Warnings: s.warnings}
	r.Pages, r.PagesErr = mmap.PageUseOf(s.mem)
	return r
}

// Close releases the copies and the files opened for direct I/O.
func (s *store) Close() error {
	errs := []error{s.free()}
	for _, d := range s.files {
		if d.file != nil {
			errs = append(errs, d.file.Close())
		}
	}
	s.mem, s.copies, s.files, s.free = nil, nil, nil, func() error { return nil }
	return errors.Join(errs...)
}
