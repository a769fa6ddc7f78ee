package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"

	"github.com/moerun/moerun/tensor"
)

// TensorSpec declares a tensor to write: its data must follow in this order.
type TensorSpec struct {
	Name  string
	Type  tensor.Type
	Shape []int64 // GGUF order
}

// Layout is where a header puts everything: computed once, used to write the header, to
// stream the data and to size sparse files.
type Layout struct {
	Alignment  int64
	DataOffset int64
	Tensors    []TensorInfo // with Offset, Size and FileOffset filled in
	FileSize   int64        // data offset plus every tensor padded to the alignment
	header     []byte
}

// NewLayout validates metadata and tensor specs exactly as the reader will and lays the
// file out as llama.cpp's writer does: tensors in the given order, each padded to the
// alignment (general.alignment if present, else 32).
func NewLayout(md Metadata, specs []TensorSpec) (*Layout, error) {
	l := &Layout{Alignment: defaultAlign}
	if v, ok := md.Get(alignmentKey); ok {
		a, isU32 := v.x.(uint32)
		if !isU32 || a == 0 || a&(a-1) != 0 {
			return nil, fmt.Errorf("%s must be a uint32 power of two, got %s %v", alignmentKey, v.TypeName(), v)
		}
		l.Alignment = int64(a)
	}
	for _, kv := range md.All() {
		if partialAnywhere(kv.Value) {
			return nil, fmt.Errorf("metadata %s: only the head of this array was read (gguf.Options.ArrayLimit), so it cannot be written", kv.Key)
		}
	}
	seen := make(map[string]bool, len(specs))
	var off int64
	for _, s := range specs {
		switch {
		case s.Name == "" || len(s.Name) > maxNameLen:
			return nil, fmt.Errorf("tensor name %q must be 1 to %d bytes", s.Name, maxNameLen)
		case seen[s.Name]:
			return nil, fmt.Errorf("duplicate tensor name %q", s.Name)
		case len(s.Shape) > maxDims:
			return nil, fmt.Errorf("tensor %s has %d dimensions; ggml allows at most %d", s.Name, len(s.Shape), maxDims)
		case !s.Type.Valid():
			return nil, fmt.Errorf("tensor %s: %v", s.Name, &tensor.UnknownTypeError{ID: uint32(s.Type)})
		}
		seen[s.Name] = true
		size, err := s.Type.Bytes(s.Shape)
		if err != nil {
			return nil, fmt.Errorf("tensor %s: %w", s.Name, err)
		}
		l.Tensors = append(l.Tensors, TensorInfo{Name: s.Name, Type: s.Type, Shape: append([]int64{}, s.Shape...), Offset: off, Size: size})
		if off+alignUp(size, l.Alignment) < off {
			return nil, errors.New("total tensor data overflows int64")
		}
		off += alignUp(size, l.Alignment)
	}
	l.header = encodeHeader(md, l.Tensors)
	l.DataOffset = int64(len(l.header))
	if len(specs) > 0 {
		l.DataOffset = alignUp(l.DataOffset, l.Alignment)
	}
	for i := range l.Tensors {
		l.Tensors[i].FileOffset = l.DataOffset + l.Tensors[i].Offset
	}
	l.FileSize = l.DataOffset + off
	return l, nil
}

// partialAnywhere reports whether a value or any array nested in it was read partially.
func partialAnywhere(v Value) bool {
	if v.Partial() {
		return true
	}
	if nested, ok := v.x.([]Value); ok {
		for _, e := range nested {
			if partialAnywhere(e) {
				return true
			}
		}
	}
	return false
}

func encodeHeader(md Metadata, tensors []TensorInfo) []byte {
	e := encoder{buf: make([]byte, 0, 4096)}
	e.buf = append(e.buf, magic...)
	e.u32(versionLatest)
	e.u64(uint64(len(tensors)))
	e.u64(uint64(md.Len()))
	for _, kv := range md.All() {
		e.str(kv.Key)
		e.u32(uint32(kv.Value.typ))
		e.value(kv.Value)
	}
	for _, t := range tensors {
		e.str(t.Name)
		e.u32(uint32(len(t.Shape)))
		for _, d := range t.Shape {
			e.u64(uint64(d))
		}
		e.u32(uint32(t.Type))
		e.u64(uint64(t.Offset))
	}
	return e.buf
}

type encoder struct{ buf []byte }

func (e *encoder) u32(v uint32) { e.buf = binary.LittleEndian.AppendUint32(e.buf, v) }
func (e *encoder) u64(v uint64) { e.buf = binary.LittleEndian.AppendUint64(e.buf, v) }
func (e *encoder) str(s string) { e.u64(uint64(len(s))); e.buf = append(e.buf, s...) }

// value writes a value's payload (its type tag is written by the caller).
func (e *encoder) value(v Value) {
	if v.typ == TypeArray {
		e.u32(uint32(v.elem))
		e.u64(uint64(v.Len()))
		// Elements carry no type tag of their own; a nested array starts with its element type.
		for i := range v.Len() {
			e.value(v.Index(i))
		}
		return
	}
	le := binary.LittleEndian
	switch x := v.x.(type) {
	case uint8:
		e.buf = append(e.buf, x)
	case int8:
		e.buf = append(e.buf, byte(x))
	case bool:
		e.buf = append(e.buf, boolByte(x))
	case uint16:
		e.buf = le.AppendUint16(e.buf, x)
	case int16:
		e.buf = le.AppendUint16(e.buf, uint16(x))
	case uint32:
		e.u32(x)
	case int32:
		e.u32(uint32(x))
	case float32:
		e.u32(math.Float32bits(x))
	case uint64:
		e.u64(x)
	case int64:
		e.u64(uint64(x))
	case float64:
		e.u64(math.Float64bits(x))
	case string:
		e.str(x)
	}
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// Writer streams a GGUF v3 file: the header first, then each tensor's data in declaration
// order, so a model never has to be held in memory.
type Writer struct {
	w      *bufio.Writer
	layout *Layout
	next   int   // index of the next tensor to write
	pos    int64 // bytes written so far
	err    error
}

// NewWriter lays out the file and writes its header to w.
func NewWriter(w io.Writer, md Metadata, specs []TensorSpec) (*Writer, error) {
	l, err := NewLayout(md, specs)
	if err != nil {
		return nil, err
	}
	wr := &Writer{w: bufio.NewWriterSize(w, 1<<20), layout: l}
	wr.write(l.header)
	wr.pad(l.DataOffset)
	return wr, wr.err
}

// Layout is the file's layout.
func (w *Writer) Layout() *Layout { return w.layout }

func (w *Writer) write(b []byte) {
	if w.err == nil {
		var n int
		n, w.err = w.w.Write(b)
		w.pos += int64(n)
	}
}

var zeros [4096]byte

func (w *Writer) pad(to int64) {
	for w.err == nil && w.pos < to {
		w.write(zeros[:min(int64(len(zeros)), to-w.pos)])
	}
}

// WriteTensor copies the named tensor's data, exactly its size in bytes, from r; a short
// reader is an error. Tensors must come in the order they were declared.
func (w *Writer) WriteTensor(name string, r io.Reader) error {
	if w.err != nil {
		return w.err
	}
	if w.next >= len(w.layout.Tensors) {
		return fmt.Errorf("tensor %s: all %d declared tensors are already written", name, len(w.layout.Tensors))
	}
	t := w.layout.Tensors[w.next]
	if t.Name != name {
		return fmt.Errorf("tensor %s written out of order: %s comes next", name, t.Name)
	}
	n, err := io.Copy(w.w, io.LimitReader(r, t.Size))
	w.pos += n
	if err != nil {
		w.err = fmt.Errorf("tensor %s: %w", name, err)
		return w.err
	}
	if n != t.Size {
		w.err = fmt.Errorf("tensor %s: got %d bytes of data, want %d", name, n, t.Size)
		return w.err
	}
	w.pad(t.Offset + alignUp(t.Size, w.layout.Alignment) + w.layout.DataOffset)
	w.next++
	return w.err
}

// Close flushes the file and checks that every declared tensor was written.
func (w *Writer) Close() error {
	if w.err != nil {
		return w.err
	}
	if w.next != len(w.layout.Tensors) {
		return fmt.Errorf("only %d of %d tensors written (next: %s)", w.next, len(w.layout.Tensors), w.layout.Tensors[w.next].Name)
	}
	return w.w.Flush()
}

// WriteSparse creates a GGUF file at path holding the header and extended to the full file
// size without writing any tensor data: on file systems with sparse files it costs only the
// header's blocks, so full-size layouts of 400 GB models are free. The data reads as zeros.
func WriteSparse(path string, md Metadata, specs []TensorSpec) (*Layout, error) {
	l, err := NewLayout(md, specs)
	if err != nil {
		return nil, err
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	_, err = f.Write(l.header)
	if err == nil {
		err = f.Truncate(l.FileSize)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("writing sparse %s: %w", path, err)
	}
	return l, nil
}
