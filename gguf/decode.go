package gguf

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"unsafe"

	"github.com/moerun/moerun/tensor"
)

// FormatError reports a malformed file: what is wrong and the byte offset where it was found.
type FormatError struct {
	Path   string // the file, when known (split models have several)
	Offset int64
	Msg    string
	Err    error // an underlying I/O error, if that is what went wrong
}

func (e *FormatError) Error() string {
	where := "gguf"
	if e.Path != "" {
		where = e.Path
	}
	return fmt.Sprintf("%s: invalid GGUF at byte %d: %s", where, e.Offset, e.Msg)
}

func (e *FormatError) Unwrap() error { return e.Err }

// Format limits. ggml refuses tensor names of 64 bytes or more and more than 4 dimensions.
const (
	magic          = "GGUF"
	maxNameLen     = 63
	maxDims        = 4
	maxNesting     = 16 // arrays of arrays deeper than this are surely hostile
	defaultAlign   = 32
	readWindow     = 64 << 10
	minTensorInfo  = 8 + 4 + 4 + 8 // name length, n_dims, type, offset
	minKV          = 8 + 1 + 4 + 1 // key length, one key byte, type, smallest value
	versionLatest  = 3
	alignmentKey   = "general.alignment"
	splitCountKey  = "split.count"
	splitNoKey     = "split.no"
	splitTensorKey = "split.tensors.count"
)

// decoder reads the little-endian header through a window over an io.ReaderAt, checking
// every length against the bytes that remain so a hostile count cannot make it allocate
// more than the file could hold.
type decoder struct {
	r     io.ReaderAt
	size  int64
	path  string
	off   int64  // absolute offset of the next byte to decode
	win   []byte // file bytes [winAt, winAt+len(win))
	winAt int64
	arena []byte // backing store for short strings, see intern
	limit int64  // Options.ArrayLimit
}

func (d *decoder) fail(at int64, format string, args ...any) error {
	return &FormatError{Path: d.path, Offset: at, Msg: fmt.Sprintf(format, args...)}
}

func (d *decoder) remaining() int64 { return d.size - d.off }

// next returns the following n bytes (valid until the next call) and advances past them.
func (d *decoder) next(n int64, what string) ([]byte, error) {
	if n > d.remaining() {
		return nil, d.fail(d.off, "unexpected end of file reading %s (need %d bytes, %d left)", what, n, d.remaining())
	}
	if d.off < d.winAt || d.off+n > d.winAt+int64(len(d.win)) {
		if err := d.fill(n, what); err != nil {
			return nil, err
		}
	}
	start := d.off - d.winAt
	d.off += n
	return d.win[start : start+n], nil
}

func (d *decoder) fill(n int64, what string) error {
	want := max(n, readWindow)
	want = min(want, d.remaining())
	if int64(cap(d.win)) < want {
		d.win = make([]byte, want)
	}
	d.win = d.win[:want]
	got, err := d.r.ReadAt(d.win, d.off)
	if int64(got) < n {
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return &FormatError{Path: d.path, Offset: d.off, Msg: fmt.Sprintf("reading %s: %v", what, err), Err: err}
	}
	d.win, d.winAt = d.win[:got], d.off
	return nil
}

func (d *decoder) u32(what string) (uint32, error) {
	b, err := d.next(4, what)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b), nil
}

func (d *decoder) u64(what string) (uint64, error) {
	b, err := d.next(8, what)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

// count reads a 64-bit element count and checks that the rest of the file could hold that
// many elements of at least minSize bytes each. The field is named what+detail; the two are
// joined only when there is an error to report, as this runs for every string.
func (d *decoder) count(what, detail string, minSize int64) (int64, error) {
	at := d.off
	b, err := d.next(8, what)
	if err != nil {
		return 0, err
	}
	n := binary.LittleEndian.Uint64(b)
	if n > math.MaxInt64 || (minSize > 0 && int64(n) > d.remaining()/minSize) {
		return 0, d.fail(at, "%s%s is %d, more than the remaining %d bytes of the file can hold", what, detail, n, d.remaining())
	}
	return int64(n), nil
}

func (d *decoder) str(what string) (string, error) {
	n, err := d.count(what, " length", 1)
	if err != nil {
		return "", err
	}
	b, err := d.next(n, what)
	if err != nil {
		return "", err
	}
	return d.intern(b), nil
}

// intern copies short strings into shared chunks, one allocation per chunk instead of one
// per string: a vocabulary holds a quarter of a million of them. Chunks are append-only,
// so the strings pointing into them never change.
func (d *decoder) intern(b []byte) string {
	const maxChunk = 256 << 10
	if len(b) == 0 || len(b) > maxChunk/16 {
		return string(b)
	}
	if cap(d.arena)-len(d.arena) < len(b) {
		// Chunks double from 4 KiB: a small header (a tiny model, a fuzzed input) does not
		// pay for a vocabulary's worth of memory.
		d.arena = make([]byte, 0, max(min(max(2*cap(d.arena), 4<<10), maxChunk), len(b)))
	}
	start := len(d.arena)
	d.arena = append(d.arena, b...)
	return unsafe.String(&d.arena[start], len(b))
}

func (d *decoder) valueType(what string) (ValueType, error) {
	at := d.off
	t, err := d.u32(what)
	if err != nil {
		return 0, err
	}
	if !ValueType(t).valid() {
		return 0, d.fail(at, "%s: unknown metadata value type %d", what, t)
	}
	return ValueType(t), nil
}

// value decodes a value of type t, recursing into arrays.
func (d *decoder) value(t ValueType, what string, depth int) (Value, error) {
	if t != TypeArray {
		x, err := d.array(t, 1, what)
		if err != nil {
			return Value{}, err
		}
		return Value{typ: t, x: reflect.ValueOf(x).Index(0).Interface()}, nil
	}
	if depth >= maxNesting {
		return Value{}, d.fail(d.off, "%s: arrays nested more than %d deep", what, maxNesting)
	}
	elem, err := d.valueType(what + " element type")
	if err != nil {
		return Value{}, err
	}
	n, err := d.count(what, " element count", elem.minSize())
	if err != nil {
		return Value{}, err
	}
	var total int
	if d.limit > 0 && n > d.limit {
		total, n = int(n), d.limit
	}
	var v Value
	if elem == TypeArray {
		vs := make([]Value, n)
		for i := range vs {
			if vs[i], err = d.value(TypeArray, fmt.Sprintf("%s[%d]", what, i), depth+1); err != nil {
				return Value{}, err
			}
		}
		v = Value{typ: TypeArray, elem: TypeArray, x: vs}
	} else {
		x, err := d.array(elem, n, what)
		if err != nil {
			return Value{}, err
		}
		v = Value{typ: TypeArray, elem: elem, x: x}
	}
	if total > 0 {
		v.total = total
		return v, d.skipValues(elem, int64(total)-n, what, depth+1)
	}
	return v, nil
}

// skipValues moves past n encoded values of type elem without keeping them, checking their
// lengths as decoding would.
func (d *decoder) skipValues(elem ValueType, n int64, what string, depth int) error {
	switch elem {
	case TypeString:
		for range n {
			l, err := d.count(what, " length", 1)
			if err != nil {
				return err
			}
			if err := d.skip(l, what); err != nil {
				return err
			}
		}
	case TypeArray:
		if depth >= maxNesting {
			return d.fail(d.off, "%s: arrays nested more than %d deep", what, maxNesting)
		}
		for range n {
			inner, err := d.valueType(what + " element type")
			if err != nil {
				return err
			}
			c, err := d.count(what, " element count", inner.minSize())
			if err != nil {
				return err
			}
			if err := d.skipValues(inner, c, what, depth+1); err != nil {
				return err
			}
		}
	default:
		return d.skip(n*elem.size(), what) // n was checked against the bytes left
	}
	return nil
}

func (d *decoder) skip(n int64, what string) error {
	if n > d.remaining() {
		return d.fail(d.off, "unexpected end of file reading %s (need %d bytes, %d left)", what, n, d.remaining())
	}
	d.off += n
	return nil
}

// array decodes n scalars of type elem into a typed slice ([]uint32, []string, …).
func (d *decoder) array(elem ValueType, n int64, what string) (any, error) {
	le := binary.LittleEndian
	switch elem {
	case TypeUint8:
		return fixedArray(d, n, 1, what, func(b []byte) uint8 { return b[0] })
	case TypeInt8:
		return fixedArray(d, n, 1, what, func(b []byte) int8 { return int8(b[0]) })
	case TypeBool:
		// ggml treats any non-zero byte as true.
		return fixedArray(d, n, 1, what, func(b []byte) bool { return b[0] != 0 })
	case TypeUint16:
		return fixedArray(d, n, 2, what, le.Uint16)
	case TypeInt16:
		return fixedArray(d, n, 2, what, func(b []byte) int16 { return int16(le.Uint16(b)) })
	case TypeUint32:
		return fixedArray(d, n, 4, what, le.Uint32)
	case TypeInt32:
		return fixedArray(d, n, 4, what, func(b []byte) int32 { return int32(le.Uint32(b)) })
	case TypeFloat32:
		return fixedArray(d, n, 4, what, func(b []byte) float32 { return math.Float32frombits(le.Uint32(b)) })
	case TypeUint64:
		return fixedArray(d, n, 8, what, le.Uint64)
	case TypeInt64:
		return fixedArray(d, n, 8, what, func(b []byte) int64 { return int64(le.Uint64(b)) })
	case TypeFloat64:
		return fixedArray(d, n, 8, what, func(b []byte) float64 { return math.Float64frombits(le.Uint64(b)) })
	default: // TypeString
		out := make([]string, n)
		for i := range out {
			var err error
			if out[i], err = d.str(what); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
}

// fixedArray decodes n values of size bytes each, a window's worth at a time.
func fixedArray[T any](d *decoder, n, size int64, what string, conv func([]byte) T) ([]T, error) {
	out := make([]T, n)
	perWindow := max(readWindow/size, 1)
	for i := int64(0); i < n; {
		k := min(n-i, perWindow)
		b, err := d.next(k*size, what)
		if err != nil {
			return nil, err
		}
		for j := int64(0); j < k; j++ {
			out[i+j] = conv(b[j*size : (j+1)*size])
		}
		i += k
	}
	return out, nil
}

// header is what one GGUF file's header says.
type header struct {
	version    uint32
	alignment  int64
	dataOffset int64
	metadata   Metadata
	tensors    []TensorInfo
}

// decodeHeader parses and validates a whole header: magic, version, metadata, tensor infos,
// and every tensor's placement inside the file.
func decodeHeader(r io.ReaderAt, size int64, path string, opts Options) (*header, error) {
	d := &decoder{r: r, size: size, path: path, limit: int64(max(opts.ArrayLimit, 0))}
	h := &header{}
	b, err := d.next(4, "magic")
	if err != nil {
		return nil, err
	}
	if string(b) != magic {
		return nil, d.fail(0, "bad magic %q, want %q (not a GGUF file)", b, magic)
	}
	if h.version, err = d.u32("version"); err != nil {
		return nil, err
	}
	switch {
	case h.version&0xFFFF == 0 && h.version != 0:
		return nil, d.fail(4, "version field reads %#x: this looks like a big-endian GGUF file, which moerun does not support; convert it to little-endian", h.version)
	case h.version == 1:
		return nil, d.fail(4, "GGUF version 1 is no longer supported (llama.cpp dropped it too); re-convert the model")
	case h.version < 2 || h.version > versionLatest:
		return nil, d.fail(4, "unsupported GGUF version %d (supported: 2 and 3)", h.version)
	}
	nTensors, err := d.count("tensor count", "", minTensorInfo)
	if err != nil {
		return nil, err
	}
	nKV, err := d.count("metadata key-value count", "", minKV)
	if err != nil {
		return nil, err
	}
	if err := h.decodeMetadata(d, nKV); err != nil {
		return nil, err
	}
	if err := h.decodeTensorInfos(d, nTensors); err != nil {
		return nil, err
	}
	h.dataOffset = d.off
	if nTensors > 0 {
		h.dataOffset = alignUp(d.off, h.alignment)
	}
	if h.dataOffset > size {
		return nil, d.fail(d.off, "data section would start at byte %d, past the end of the %d-byte file", h.dataOffset, size)
	}
	return h, h.checkTensorPlacement(d)
}

func (h *header) decodeMetadata(d *decoder, n int64) error {
	h.alignment = defaultAlign
	h.metadata.index = make(map[string]int, n)
	h.metadata.kvs = make([]KV, 0, n)
	for i := int64(0); i < n; i++ {
		at := d.off
		key, err := d.str(fmt.Sprintf("metadata key %d", i))
		if err != nil {
			return err
		}
		if key == "" {
			return d.fail(at, "metadata key %d is empty", i)
		}
		if _, dup := h.metadata.index[key]; dup {
			return d.fail(at, "duplicate metadata key %q", key)
		}
		t, err := d.valueType("type of " + key)
		if err != nil {
			return err
		}
		v, err := d.value(t, key, 0)
		if err != nil {
			return err
		}
		if key == alignmentKey {
			align, ok := v.x.(uint32)
			if !ok {
				return d.fail(at, "%s must be a uint32, found %s", alignmentKey, v.TypeName())
			}
			if align == 0 || align&(align-1) != 0 {
				return d.fail(at, "%s is %d, not a power of two", alignmentKey, align)
			}
			h.alignment = int64(align)
		}
		h.metadata.index[key] = len(h.metadata.kvs)
		h.metadata.kvs = append(h.metadata.kvs, KV{Key: key, Value: v})
	}
	return nil
}

func (h *header) decodeTensorInfos(d *decoder, n int64) error {
	h.tensors = make([]TensorInfo, n)
	seen := make(map[string]int, n)
	for i := range h.tensors {
		t := &h.tensors[i]
		at := d.off
		name, err := d.str(fmt.Sprintf("tensor %d name", i))
		if err != nil {
			return err
		}
		if name == "" {
			return d.fail(at, "tensor %d has an empty name", i)
		}
		if len(name) > maxNameLen {
			return d.fail(at, "tensor %d name is %d bytes long; ggml allows at most %d", i, len(name), maxNameLen)
		}
		if j, dup := seen[name]; dup {
			return d.fail(at, "duplicate tensor name %q (tensors %d and %d)", name, j, i)
		}
		seen[name] = i
		t.Name = name
		if err := decodeShapeAndType(d, t); err != nil {
			return err
		}
		off, err := d.u64("offset of tensor " + name)
		if err != nil {
			return err
		}
		if off > math.MaxInt64 {
			return d.fail(d.off-8, "tensor %q offset %d is out of range", name, off)
		}
		t.Offset = int64(off)
	}
	return nil
}

func decodeShapeAndType(d *decoder, t *TensorInfo) error {
	at := d.off
	nDims, err := d.u32("dimension count of tensor " + t.Name)
	if err != nil {
		return err
	}
	if nDims > maxDims {
		return d.fail(at, "tensor %q has %d dimensions; ggml allows at most %d", t.Name, nDims, maxDims)
	}
	t.Shape = make([]int64, nDims)
	for j := range t.Shape {
		dimAt := d.off
		ne, err := d.u64(fmt.Sprintf("dimension %d of tensor %s", j, t.Name))
		if err != nil {
			return err
		}
		if ne > math.MaxInt64 {
			return d.fail(dimAt, "tensor %q dimension %d is %d, out of range", t.Name, j, ne)
		}
		t.Shape[j] = int64(ne)
	}
	typeAt := d.off
	id, err := d.u32("type of tensor " + t.Name)
	if err != nil {
		return err
	}
	if t.Type, err = tensor.TypeFromID(id); err != nil {
		return d.fail(typeAt, "tensor %q: %v", t.Name, err)
	}
	if t.Size, err = t.Type.Bytes(t.Shape); err != nil {
		return d.fail(at, "tensor %q: %v", t.Name, err)
	}
	return nil
}

// checkTensorPlacement checks every tensor's data against alignment, the file's end and the
// other tensors, and fills in the absolute offsets.
func (h *header) checkTensorPlacement(d *decoder) error {
	dataSize := d.size - h.dataOffset
	for i := range h.tensors {
		t := &h.tensors[i]
		if t.Offset%h.alignment != 0 {
			return d.fail(h.dataOffset, "tensor %q offset %d is not a multiple of the alignment %d", t.Name, t.Offset, h.alignment)
		}
		if t.Offset > dataSize || t.Size > dataSize-t.Offset {
			return d.fail(h.dataOffset, "tensor %q (bytes %d..%d of the data section) extends past the end of the file (data section is %d bytes); the file is truncated or corrupt",
				t.Name, t.Offset, t.Offset+t.Size, dataSize)
		}
		t.FileOffset = h.dataOffset + t.Offset
	}
	// Tensors may be stored in any order; sort by offset and compare each non-empty tensor
	// with the furthest-reaching one before it.
	order := make([]int, len(h.tensors))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(h.tensors[a].Offset, h.tensors[b].Offset) })
	reach := -1 // index of the tensor whose data ends furthest so far
	for _, i := range order {
		cur := &h.tensors[i]
		if cur.Size == 0 {
			continue
		}
		if reach >= 0 {
			prev := &h.tensors[reach]
			if cur.Offset < prev.Offset+prev.Size {
				return d.fail(h.dataOffset, "tensors %q (bytes %d..%d) and %q (bytes %d..%d) overlap",
					prev.Name, prev.Offset, prev.Offset+prev.Size, cur.Name, cur.Offset, cur.Offset+cur.Size)
			}
		}
		if reach < 0 || cur.Offset+cur.Size > h.tensors[reach].Offset+h.tensors[reach].Size {
			reach = i
		}
	}
	return nil
}

func alignUp(n, align int64) int64 { return (n + align - 1) / align * align }
