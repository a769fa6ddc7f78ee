package gguf

import (
	"bytes"
	"errors"
	"io"
	"math"
	"strings"
	"testing"

	"github.com/moerun/moerun/tensor"
)

// rawTensor is a tensor info written as-is, valid or not.
type rawTensor struct {
	name string
	dims []uint64
	typ  uint32
	off  uint64
}

// rawFile hand-assembles a GGUF file so every field can be made wrong. kv writes the
// key-value section (the count is given separately so it can lie).
func rawFile(version uint32, nTensors, nKV uint64, kv func(e *encoder), tensors []rawTensor, dataBytes int) []byte {
	e := &encoder{}
	e.buf = append(e.buf, magic...)
	e.u32(version)
	e.u64(nTensors)
	e.u64(nKV)
	if kv != nil {
		kv(e)
	}
	for _, t := range tensors {
		e.str(t.name)
		e.u32(uint32(len(t.dims)))
		for _, d := range t.dims {
			e.u64(d)
		}
		e.u32(t.typ)
		e.u64(t.off)
	}
	for len(e.buf)%32 != 0 {
		e.buf = append(e.buf, 0)
	}
	return append(e.buf, make([]byte, dataBytes)...)
}

func oneKV(key string, typ ValueType, payload func(e *encoder)) func(e *encoder) {
	return func(e *encoder) {
		e.str(key)
		e.u32(uint32(typ))
		payload(e)
	}
}

func f32Tensor(name string, n, off uint64) rawTensor {
	return rawTensor{name, []uint64{n}, uint32(tensor.F32), off}
}

type corruptCase struct {
	name string
	data []byte
	want string // a phrase the error message must contain
}

func corruptCorpus() []corruptCase {
	ok := []rawTensor{f32Tensor("a", 8, 0)}
	nested := func(e *encoder) {
		e.str("deep")
		e.u32(uint32(TypeArray))
		for range 20 {
			e.u32(uint32(TypeArray))
			e.u64(1)
		}
		e.u32(uint32(TypeUint8))
		e.u64(0)
	}
	return []corruptCase{
		{"empty", nil, "end of file reading magic"},
		{"bad magic", append([]byte("GGUX"), make([]byte, 60)...), "bad magic"},
		{"version 0", rawFile(0, 0, 0, nil, nil, 0), "unsupported GGUF version 0"},
		{"version 1", rawFile(1, 0, 0, nil, nil, 0), "version 1 is no longer supported"},
		{"version 4", rawFile(4, 0, 0, nil, nil, 0), "unsupported GGUF version 4"},
		{"big endian", rawFile(0x03000000, 0, 0, nil, nil, 0), "big-endian"},
		{"huge tensor count", rawFile(3, 1<<62, 0, nil, nil, 0), "tensor count is 4611686018427387904"},
		{"tensor count past int64", rawFile(3, math.MaxUint64, 0, nil, nil, 0), "tensor count"},
		{"huge kv count", rawFile(3, 0, 1<<40, nil, nil, 0), "metadata key-value count"},
		{"huge key length", rawFile(3, 0, 1, func(e *encoder) { e.u64(1 << 62) }, nil, 64), "metadata key 0 length"},
		{"empty key", rawFile(3, 0, 1, oneKV("", TypeUint8, func(e *encoder) { e.buf = append(e.buf, 1) }), nil, 0), "key 0 is empty"},
		{"duplicate key", rawFile(3, 0, 2, func(e *encoder) {
			oneKV("k", TypeUint8, func(e *encoder) { e.buf = append(e.buf, 1) })(e)
			oneKV("k", TypeUint8, func(e *encoder) { e.buf = append(e.buf, 1) })(e)
		}, nil, 0), `duplicate metadata key "k"`},
		{"unknown value type", rawFile(3, 0, 1, oneKV("k", 13, func(e *encoder) { e.u32(0) }), nil, 0), "unknown metadata value type 13"},
		{"unknown array type", rawFile(3, 0, 1, oneKV("k", TypeArray, func(e *encoder) { e.u32(99); e.u64(0) }), nil, 0), "unknown metadata value type 99"},
		{"huge array", rawFile(3, 0, 1, oneKV("k", TypeArray, func(e *encoder) { e.u32(uint32(TypeUint32)); e.u64(1 << 40) }), nil, 64), "element count is 1099511627776"},
		{"huge string array", rawFile(3, 0, 1, oneKV("k", TypeArray, func(e *encoder) { e.u32(uint32(TypeString)); e.u64(1 << 60) }), nil, 64), "element count"},
		{"huge string", rawFile(3, 0, 1, oneKV("k", TypeString, func(e *encoder) { e.u64(math.MaxUint64) }), nil, 64), "k length"},
		{"deep nesting", rawFile(3, 0, 1, nested, nil, 0), "nested more than 16 deep"},
		{"alignment int32", rawFile(3, 0, 1, oneKV(alignmentKey, TypeInt32, func(e *encoder) { e.u32(32) }), nil, 0), "must be a uint32"},
		{"alignment 0", rawFile(3, 0, 1, oneKV(alignmentKey, TypeUint32, func(e *encoder) { e.u32(0) }), nil, 0), "not a power of two"},
		{"alignment 48", rawFile(3, 0, 1, oneKV(alignmentKey, TypeUint32, func(e *encoder) { e.u32(48) }), nil, 0), "not a power of two"},
		{"name too long", rawFile(3, 1, 0, nil, []rawTensor{f32Tensor(strings.Repeat("n", 64), 8, 0)}, 32), "64 bytes long"},
		{"duplicate tensor", rawFile(3, 2, 0, nil, []rawTensor{f32Tensor("a", 8, 0), f32Tensor("a", 8, 32)}, 64), `duplicate tensor name "a"`},
		{"five dims", rawFile(3, 1, 0, nil, []rawTensor{{"a", []uint64{1, 1, 1, 1, 1}, 0, 0}}, 32), "5 dimensions"},
		{"negative dim", rawFile(3, 1, 0, nil, []rawTensor{{"a", []uint64{1 << 63}, 0, 0}}, 32), "out of range"},
		{"removed type", rawFile(3, 1, 0, nil, []rawTensor{{"a", []uint64{32}, 4, 0}}, 32), "unknown ggml type id 4"},
		{"unknown type", rawFile(3, 1, 0, nil, []rawTensor{{"a", []uint64{32}, 99, 0}}, 32), "unknown ggml type id 99"},
		{"partial block", rawFile(3, 1, 0, nil, []rawTensor{{"a", []uint64{33}, uint32(tensor.Q4_0), 0}}, 32), "not a multiple of q4_0's block size 32"},
		{"element overflow", rawFile(3, 1, 0, nil, []rawTensor{{"a", []uint64{1 << 40, 1 << 40}, 0, 0}}, 32), "overflows"},
		{"misaligned", rawFile(3, 1, 0, nil, []rawTensor{f32Tensor("a", 8, 4)}, 64), "not a multiple of the alignment 32"},
		{"overlap", rawFile(3, 2, 0, nil, []rawTensor{f32Tensor("a", 16, 0), f32Tensor("b", 8, 32)}, 96), "overlap"},
		{"overlap out of order", rawFile(3, 3, 0, nil, []rawTensor{f32Tensor("c", 8, 64), f32Tensor("a", 32, 0), f32Tensor("b", 8, 96)}, 160), `"a" (bytes 0..128) and "c"`},
		{"past end", rawFile(3, 1, 0, nil, []rawTensor{f32Tensor("a", 8, 1<<20)}, 32), "extends past the end of the file"},
		{"data missing", rawFile(3, 1, 0, nil, ok, 16), "extends past the end of the file"},
		{"offset past int64", rawFile(3, 1, 0, nil, []rawTensor{f32Tensor("a", 8, 1<<63)}, 32), "out of range"},
		{"truncated infos", rawFile(3, 2, 0, nil, ok, 0), "end of file"},
	}
}

func TestCorruptInputs(t *testing.T) {
	for _, c := range corruptCorpus() {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewReader(bytes.NewReader(c.data), int64(len(c.data)))
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("got %v, want a *FormatError", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not say %q", err, c.want)
			}
			if fe.Offset < 0 || fe.Offset > int64(len(c.data)) {
				t.Errorf("error offset %d outside the %d-byte file", fe.Offset, len(c.data))
			}
		})
	}
}

// TestTruncatedEverywhere cuts a valid file at every byte: every cut before the end of the
// last tensor's data is a FormatError, every cut after it (in the final padding) still reads.
func TestTruncatedEverywhere(t *testing.T) {
	data := writeFile(t, sampleMetadata(t), sampleSpecs)
	l, err := NewLayout(sampleMetadata(t), sampleSpecs)
	if err != nil {
		t.Fatal(err)
	}
	var end int64
	for _, ti := range l.Tensors {
		end = max(end, ti.FileOffset+ti.Size)
	}
	for n := 0; n <= len(data); n++ {
		_, err := NewReader(bytes.NewReader(data[:n]), int64(n))
		var fe *FormatError
		switch {
		case int64(n) < end && !errors.As(err, &fe):
			t.Fatalf("cut at %d of %d: got %v, want a FormatError", n, len(data), err)
		case int64(n) >= end && err != nil:
			t.Fatalf("cut at %d (after all tensor data ends at %d): %v", n, end, err)
		}
	}
}

// failingReader returns an I/O error past a point, as a failing disk would.
type failingReader struct {
	data  []byte
	after int64
}

func (r failingReader) ReadAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) > r.after {
		return 0, errors.New("input/output error")
	}
	return copy(p, r.data[off:]), nil
}

func TestReadErrorIsReported(t *testing.T) {
	data := writeFile(t, sampleMetadata(t), sampleSpecs)
	_, err := NewReader(failingReader{data, 100}, int64(len(data)))
	var fe *FormatError
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), "input/output error") || fe.Err == nil {
		t.Errorf("got %v", err)
	}
	if errors.Is(err, io.EOF) {
		t.Error("an I/O error must not look like EOF")
	}
}
