// Package gguf reads and writes GGUF model files: the header (metadata and tensor infos)
// is parsed and validated up front, and tensor data is handed out as bounds-checked views
// into a read-only memory mapping, never copied.
package gguf

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"

	"github.com/moerun/moerun/internal/mmap"
	"github.com/moerun/moerun/tensor"
)

// ErrFileChanged is returned when mapped tensor data can no longer be read because the file
// was truncated or replaced on disk after it was opened.
var ErrFileChanged = mmap.ErrFileChanged

// TensorInfo describes one tensor as the header declares it.
type TensorInfo struct {
	Name       string
	Type       tensor.Type
	Shape      []int64 // GGUF order: Shape[0] is the row length (ggml's ne0)
	Offset     int64   // offset within its file's data section, as stored
	Size       int64   // bytes of data
	Split      int     // which file of a split model holds it (0 for single files)
	FileOffset int64   // absolute offset of the data within that file
}

// Elements is the number of elements in the tensor.
func (t *TensorInfo) Elements() int64 {
	n, _ := tensor.Elements(t.Shape) // validated when the header was read
	return n
}

// Part is one file of a (possibly split) model.
type Part struct {
	Path       string // "" for a File made by NewReader
	Size       int64
	Version    uint32
	Alignment  int64
	DataOffset int64
	Tensors    int // how many tensors this part holds

	r       io.ReaderAt
	mapping *mmap.Mapping // nil when reading through a plain io.ReaderAt
}

// File is a parsed model. Metadata comes from the first part, as llama.cpp takes it;
// tensors from all parts, in file order.
type File struct {
	Metadata Metadata
	Tensors  []TensorInfo
	Parts    []*Part

	byName map[string]int
}

// Version is the GGUF version of the first part.
func (f *File) Version() uint32 { return f.Parts[0].Version }

// Alignment is the data alignment of the first part.
func (f *File) Alignment() int64 { return f.Parts[0].Alignment }

// DataOffset is where the first part's data section starts.
func (f *File) DataOffset() int64 { return f.Parts[0].DataOffset }

// Size is the total size of all parts in bytes.
func (f *File) Size() int64 {
	var n int64
	for _, p := range f.Parts {
		n += p.Size
	}
	return n
}

// Tensor finds a tensor by name.
func (f *File) Tensor(name string) (*TensorInfo, bool) {
	i, ok := f.byName[name]
	if !ok {
		return nil, false
	}
	return &f.Tensors[i], true
}

// TensorData returns a tensor's bytes. For an opened file this is a view into the read-only
// mapping (no copy; valid until Close; reading it may fault if the file is truncated
// meanwhile, so read it inside a guard such as the one backend workers use). For a File
// made by NewReader the bytes are read into a new slice.
func (f *File) TensorData(t *TensorInfo) ([]byte, error) {
	p, err := f.partOf(t)
	if err != nil {
		return nil, err
	}
	if p.mapping != nil {
		return p.mapping.Bytes(t.FileOffset, t.Size), nil
	}
	buf := make([]byte, t.Size)
	if _, err := p.r.ReadAt(buf, t.FileOffset); err != nil && !(errors.Is(err, io.EOF) && len(buf) == 0) {
		return nil, fmt.Errorf("tensor %s: %w", t.Name, err)
	}
	return buf, nil
}

// ReadTensor reads a tensor's bytes into dst, which holds exactly t.Size bytes, with
// ordinary reads of its part (Part.ReadAt).
func (f *File) ReadTensor(t *TensorInfo, dst []byte) error {
	if int64(len(dst)) != t.Size {
		return fmt.Errorf("tensor %s: %d bytes, buffer of %d", t.Name, t.Size, len(dst))
	}
	p, err := f.partOf(t)
	if err != nil {
		return err
	}
	if n, err := p.ReadAt(dst, t.FileOffset); n < len(dst) {
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF // the file shrank since it was opened
		}
		return fmt.Errorf("tensor %s: %w", t.Name, err)
	}
	return nil
}

// Name is the part's path. Name, ReadAt and Lock are what a backend's weight store reads
// a part with (backend.ModelFile).
func (p *Part) Name() string { return p.Path }

// ReadAt reads the part's bytes at off. For an opened file it reads the file (pread), not
// the mapping: a caller keeping its own copy leaves the mapping's pages unmapped, so they
// do not count as its memory a second time.
func (p *Part) ReadAt(dst []byte, off int64) (int, error) {
	if p.mapping != nil {
		return p.mapping.ReadFileAt(dst, off)
	}
	return p.r.ReadAt(dst, off)
}

// Lock keeps the part's first n bytes in RAM (mlock on its mapping), as llama.cpp's
// mmap+mlock load mode locks each file from its start to the end of the last tensor it
// uses. One call per part: locking tensor by tensor would split the mapping at each
// tensor's edges and with it the huge pages there.
func (p *Part) Lock(n int64) error {
	if n < 0 || n > p.Size {
		return fmt.Errorf("%s: %d bytes to lock, the file has %d", p.Path, n, p.Size)
	}
	if p.mapping == nil {
		return fmt.Errorf("%s: not memory-mapped", p.Path)
	}
	return p.mapping.Lock(0, n)
}

// partOf returns the part holding t, checking that t's bytes lie inside it.
func (f *File) partOf(t *TensorInfo) (*Part, error) {
	if t.Split < 0 || t.Split >= len(f.Parts) {
		return nil, fmt.Errorf("tensor %s: split %d out of range", t.Name, t.Split)
	}
	p := f.Parts[t.Split]
	if t.FileOffset < 0 || t.Size < 0 || t.FileOffset > p.Size-t.Size {
		return nil, fmt.Errorf("tensor %s: bytes %d..%d lie outside the %d-byte file", t.Name, t.FileOffset, t.FileOffset+t.Size, p.Size)
	}
	return p, nil
}

// TensorReader returns a reader over a tensor's bytes (works for mapped and unmapped files).
func (f *File) TensorReader(t *TensorInfo) *io.SectionReader {
	return io.NewSectionReader(f.Parts[t.Split].r, t.FileOffset, t.Size)
}

// PageUse is how the kernel maps the model's files right now, summed over the parts (see
// mmap.Mapping.PageUse). It fails for a File made by NewReader and where the platform cannot
// tell.
func (f *File) PageUse() (mmap.PageUse, error) {
	var total mmap.PageUse
	for _, p := range f.Parts {
		if p.mapping == nil {
			return mmap.PageUse{}, errors.New("model file is not memory-mapped")
		}
		use, err := p.mapping.PageUse()
		if err != nil {
			return mmap.PageUse{}, err
		}
		total.Resident += use.Resident
		total.Huge += use.Huge
	}
	return total, nil
}

// Close releases the mappings. Views from TensorData must not be used afterwards.
func (f *File) Close() error {
	var errs []error
	for _, p := range f.Parts {
		if p.mapping != nil {
			errs = append(errs, p.mapping.Close())
			p.mapping = nil
		}
	}
	return errors.Join(errs...)
}

// Options tune how a file is read.
type Options struct {
	// ArrayLimit, when positive, keeps only the first ArrayLimit elements of longer
	// metadata arrays (the rest are checked and skipped): for tools that need the tensor
	// layout and the scalars but not a 150k-entry vocabulary. Such arrays report their
	// full Len and Partial() == true; their element accessors return an error.
	ArrayLimit int
}

// NewReader parses a single GGUF file from r, which holds size bytes. Tensor data is read
// through r on demand. A part of a split model reads as itself alone; use Open to get the
// whole model.
func NewReader(r io.ReaderAt, size int64) (*File, error) {
	return NewReaderWith(r, size, Options{})
}

// NewReaderWith is NewReader with options.
func NewReaderWith(r io.ReaderAt, size int64, opts Options) (*File, error) {
	p, h, err := readPart(r, size, "", opts)
	if err != nil {
		return nil, err
	}
	f := &File{Metadata: h.metadata}
	return f, f.addPart(p, h)
}

func readPart(r io.ReaderAt, size int64, path string, opts Options) (*Part, *header, error) {
	h, err := decodeHeader(r, size, path, opts)
	if err != nil {
		return nil, nil, err
	}
	return &Part{Path: path, Size: size, Version: h.version, Alignment: h.alignment,
		DataOffset: h.dataOffset, Tensors: len(h.tensors), r: r}, h, nil
}

func (f *File) addPart(p *Part, h *header) error {
	if f.byName == nil {
		f.byName = make(map[string]int, len(h.tensors))
	}
	idx := len(f.Parts)
	f.Parts = append(f.Parts, p)
	for _, t := range h.tensors {
		if _, dup := f.byName[t.Name]; dup {
			return &FormatError{Path: p.Path, Offset: p.DataOffset, Msg: fmt.Sprintf("tensor %q appears in more than one split file", t.Name)}
		}
		t.Split = idx
		f.byName[t.Name] = len(f.Tensors)
		f.Tensors = append(f.Tensors, t)
	}
	return nil
}

// Open maps and parses a GGUF file. For a split model (llama.cpp's gguf-split naming,
// NAME-00001-of-00004.gguf) any part may be given: all parts are opened and checked, and the
// File holds every tensor. Nothing of the tensor data is read.
func Open(path string) (*File, error) {
	return OpenWith(path, Options{})
}

// OpenWith is Open with options.
func OpenWith(path string, opts Options) (*File, error) {
	first, h, err := openPart(path, opts)
	if err != nil {
		return nil, err
	}
	count, err := h.metadata.UintOr(splitCountKey, 1)
	if err != nil {
		first.mapping.Close()
		return nil, &FormatError{Path: path, Msg: err.Error()}
	}
	if count <= 1 {
		f := &File{Metadata: h.metadata}
		f.addPart(first, h) // a single header cannot hold duplicate names: decodeHeader checked
		return f, nil
	}
	first.mapping.Close()
	return openSplit(path, int(count), opts)
}

func openPart(path string, opts Options) (*Part, *header, error) {
	m, err := mmap.Open(path)
	if err != nil {
		return nil, nil, err
	}
	m.Prefetch(headerPrefetch)
	p, h, err := readPart(m, m.Size(), path, opts)
	if err != nil {
		m.Close()
		return nil, nil, err
	}
	p.mapping = m
	return p, h, nil
}

// headerPrefetch covers the header of any real model (DeepSeek-V3's, with its 129k-token
// vocabulary, is about 5 MB) without reading far into the weights.
const headerPrefetch = 16 << 20

var splitName = regexp.MustCompile(`^(.*)-(\d{5})-of-(\d{5})\.gguf$`)

// SplitPaths lists the file names of a split model from the name of any of its parts.
func SplitPaths(path string) ([]string, error) {
	part, count, err := splitParts(path)
	if err != nil {
		return nil, err
	}
	paths := make([]string, count)
	for i := range paths {
		paths[i] = part(i)
	}
	return paths, nil
}

// splitParts reads a split model's part count from the name of one of its parts, and
// returns how to name part i (from 0). Opening names the parts one at a time, so that a
// name claiming 99,999 parts costs nothing before the second is found missing.
func splitParts(path string) (func(i int) string, int, error) {
	m := splitName.FindStringSubmatch(filepath.Base(path))
	if m == nil {
		return nil, 0, fmt.Errorf("%s: split model file names must end in -NNNNN-of-NNNNN.gguf", path)
	}
	count, _ := strconv.Atoi(m[3])
	if count < 1 {
		return nil, 0, fmt.Errorf("%s: split count 0 in file name", path)
	}
	dir := filepath.Dir(path)
	return func(i int) string {
		return filepath.Join(dir, fmt.Sprintf("%s-%05d-of-%05d.gguf", m[1], i+1, count))
	}, count, nil
}

func openSplit(path string, count int, opts Options) (*File, error) {
	partPath, named, err := splitParts(path)
	if err != nil {
		return nil, err
	}
	if named != count {
		return nil, fmt.Errorf("%s: %s says %d parts but the file name says %d", path, splitCountKey, count, named)
	}
	var f *File
	for i := range count {
		p := partPath(i)
		part, h, err := openPart(p, opts)
		if err != nil {
			if f != nil {
				f.Close()
			}
			if errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("split model part %d of %d is missing: %w", i+1, count, err)
			}
			return nil, err
		}
		if f == nil {
			f = &File{Metadata: h.metadata}
		}
		err = f.addPart(part, h)
		if err == nil {
			err = checkSplitPart(h.metadata, p, i, count)
		}
		if err != nil {
			part.mapping.Close()
			f.Close()
			return nil, err
		}
	}
	total, err := f.Metadata.Int(splitTensorKey)
	if err == nil && total != int64(len(f.Tensors)) {
		err = fmt.Errorf("%s says %d tensors but the %d parts hold %d; a part is from another model or corrupt", splitTensorKey, total, count, len(f.Tensors))
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", partPath(0), err)
	}
	return f, nil
}

func checkSplitPart(md Metadata, path string, idx, count int) error {
	no, err := md.Uint(splitNoKey)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if no != uint64(idx) {
		return fmt.Errorf("%s: %s is %d but the file name says part %d", path, splitNoKey, no, idx+1)
	}
	if c, err := md.UintOr(splitCountKey, uint64(count)); err != nil || c != uint64(count) {
		return fmt.Errorf("%s: %s is %d, want %d like the other parts", path, splitCountKey, c, count)
	}
	return nil
}
