package cpu

import (
	"encoding/binary"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/internal/mmap"
	"github.com/moerun/moerun/tensor"
)

// mappedFile is a model file as a store reads it: its mapping's pages, ordinary reads.
type mappedFile struct{ *mmap.Mapping }

func (f mappedFile) ReadAt(p []byte, off int64) (int, error) { return f.ReadFileAt(p, off) }
func (f mappedFile) Lock(n int64) error                      { return f.Mapping.Lock(0, n) }

// storeFile writes floats 0, 1, 2, … (F32) to a file and maps it.
func storeFile(t *testing.T, values int) (mappedFile, []float32) {
	t.Helper()
	want := make([]float32, values)
	raw := make([]byte, 4*values)
	for i := range want {
		want[i] = float32(i)
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(want[i]))
	}
	path := filepath.Join(t.TempDir(), "weights")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := mmap.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return mappedFile{m}, want
}

// rowsOf reads every row of an F32 weight through the backend (GetRows).
func rowsOf(t *testing.T, b *Backend, w backend.Weight) []float32 {
	t.Helper()
	ids := make([]int32, w.Rows()*w.Experts())
	for i := range ids {
		ids[i] = int32(i)
	}
	dst := put(t, b, make([]float32, len(ids)*w.Cols()), w.Cols())
	if err := b.GetRows(dst, w, ids); err != nil {
		t.Fatal(err)
	}
	return get(t, b, dst)
}

func sameBytes(a, b []byte) bool { return unsafe.SliceData(a) == unsafe.SliceData(b) }

// A store of views keeps the caller's bytes; a copying one reads each tensor from the
// file (once per name: a tied output is the embedding's copy) into cache-line-aligned
// memory of its own, assembles shares from their pieces, and computes from the copies
// after the file is gone. Direct I/O reads the same bytes, or falls back with a warning
// where the file system refuses it (tmpfs). Locking may be refused (RLIMIT_MEMLOCK): a
// warning, nothing else.
func TestStore(t *testing.T) {
	modes := map[string]backend.Storage{"mmap": {}, "mmap+mlock": {Lock: true}, "none": {Copy: true}, "mlock": {Copy: true, Lock: true}, "dio": {Copy: true, Direct: true}}
	for name, st := range modes {
		t.Run(name, func(t *testing.T) {
			file, values := storeFile(t, 4096)
			b := New(Options{Threads: 1})
			defer b.Close()
			s, err := b.NewStore(st, 3, 4*(2*64+16*8+2*8*8))
			if err != nil {
				t.Fatal(err)
			}
			view := file.Bytes(4*256, 4*2*64)
			w, data, err := s.Load("embd", tensor.F32, []int64{64, 2}, backend.Source{Pieces: [][]byte{view}, File: file, Offset: 4 * 256})
			if err != nil {
				t.Fatal(err)
			}
			if sameBytes(data, view) == st.Copy {
				t.Errorf("the weight's bytes are the caller's: %v, with storage %+v", sameBytes(data, view), st)
			}
			if st.Copy && uintptr(unsafe.Pointer(unsafe.SliceData(data)))%copyAlign != 0 {
				t.Errorf("a copy starts at %p, not at a cache line", unsafe.SliceData(data))
			}
			tied, tiedData, err := s.Load("embd", tensor.F32, []int64{64, 2}, backend.Source{Pieces: [][]byte{view}, File: file, Offset: 4 * 256})
			if err != nil || !sameBytes(tiedData, data) {
				t.Errorf("loading embd again gives other bytes (%v)", err)
			}
			if err == nil && !slices.Equal(rowsOf(t, b, tied), values[256:256+128]) {
				t.Error("the tied weight's values differ")
			}
			// A share of a stack of 4 experts of 8×8 values, experts 1 and 3, read as one matrix.
			var pieces [][]byte
			for _, e := range []int{1, 3} {
				pieces = append(pieces, file.Bytes(int64(4*(1024+64*e)), 4*64))
			}
			var share backend.Weight
			if st.Copy {
				if share, _, err = s.Load("exps", tensor.F32, []int64{8, 16}, backend.Source{Pieces: pieces}); err != nil {
					t.Fatal(err)
				}
			} else if _, _, err := s.Load("exps", tensor.F32, []int64{8, 16}, backend.Source{Pieces: pieces}); err == nil || !strings.Contains(err.Error(), "one piece") {
				t.Errorf("a store of views took two pieces: %v", err)
			}
			s.Seal()
			for _, warning := range s.Report().Warnings {
				if !strings.Contains(warning, map[bool]string{true: "falling back to buffered reads", false: "RLIMIT_MEMLOCK"}[st.Direct]) {
					t.Errorf("warning %q", warning)
				}
			}
			r := s.Report()
			if st.Copy != (r.Copied >= 4*(128+128)) || !st.Copy && r.Copied != 0 {
				t.Errorf("the store reports %d bytes copied", r.Copied)
			}
			if !st.Copy {
				return
			}
			if err := file.Close(); err != nil { // the copies are all the weights need
				t.Fatal(err)
			}
			if got := rowsOf(t, b, w); !slices.Equal(got, values[256:256+128]) {
				t.Errorf("the copy's rows are %v…", got[:4])
			}
			want := append(slices.Clone(values[1024+64:1024+128]), values[1024+192:1024+256]...)
			if got := rowsOf(t, b, share); !slices.Equal(got, want) {
				t.Errorf("the share's rows are %v…, want %v…", got[:4], want[:4])
			}
			if err := s.Close(); err != nil {
				t.Error(err)
			}
		})
	}
}

// shortFile is a file that shrank after it was opened: reads stop short.
type shortFile struct{}

func (shortFile) Name() string                          { return "shrunk.gguf" }
func (shortFile) ReadAt(p []byte, _ int64) (int, error) { return len(p) / 2, io.EOF }
func (shortFile) Lock(int64) error                      { return errors.New("not mapped") }

// What a store cannot do is an error naming the tensor, never a short weight.
func TestStoreErrors(t *testing.T) {
	b := New(Options{Threads: 1})
	defer b.Close()
	s, err := b.NewStore(backend.Storage{Copy: true}, 1, 64)
	if err != nil {
		t.Fatal(err)
	}
	piece := make([]byte, 64)
	if _, _, err := s.Load("blk.0.w", tensor.F32, []int64{16}, backend.Source{Pieces: [][]byte{piece}, File: shortFile{}}); err == nil ||
		!strings.Contains(err.Error(), "blk.0.w") || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("a short read: %v", err)
	}
	if _, _, err := s.Load("blk.1.w", tensor.F32, []int64{64}, backend.Source{Pieces: [][]byte{make([]byte, 256)}}); err == nil || !strings.Contains(err.Error(), "reserved") {
		t.Errorf("more than reserved: %v", err)
	}
	sim := New(Options{Copy: true, Private: true, Threads: 1})
	defer sim.Close()
	if _, err := sim.NewStore(backend.Storage{}, 1, 64); err == nil || !strings.Contains(err.Error(), "memory of its own") {
		t.Errorf("a device with memory of its own opened a host store: %v", err)
	}
}
