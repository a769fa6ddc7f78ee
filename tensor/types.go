// Package tensor owns ggml's element types (the type table GGUF files refer to by id)
// and, later, the kernels that compute on them.
package tensor

import (
	"fmt"
	"math"
	"math/bits"
	"strings"
)

// Type is a ggml element type, numbered exactly as GGUF stores it (enum ggml_type).
type Type uint32

// The ggml types. Ids 4, 5, 31-33 and 36-38 belonged to formats ggml has removed; files
// that use them are rejected like any other unknown id.
const (
	F32     Type = 0
	F16     Type = 1
	Q4_0    Type = 2
	Q4_1    Type = 3
	Q5_0    Type = 6
	Q5_1    Type = 7
	Q8_0    Type = 8
	Q8_1    Type = 9
	Q2_K    Type = 10
	Q3_K    Type = 11
	Q4_K    Type = 12
	Q5_K    Type = 13
	Q6_K    Type = 14
	Q8_K    Type = 15
	IQ2_XXS Type = 16
	IQ2_XS  Type = 17
	IQ3_XXS Type = 18
	IQ1_S   Type = 19
	IQ4_NL  Type = 20
	IQ3_S   Type = 21
	IQ2_S   Type = 22
	IQ4_XS  Type = 23
	I8      Type = 24
	I16     Type = 25
	I32     Type = 26
	I64     Type = 27
	F64     Type = 28
	IQ1_M   Type = 29
	BF16    Type = 30
	TQ1_0   Type = 34
	TQ2_0   Type = 35
	MXFP4   Type = 39
	NVFP4   Type = 40
	Q1_0    Type = 41
	Q2_0    Type = 42
)

// TypeInfo describes how a type lays out its elements: BlockSize elements are stored in
// BlockBytes bytes, and a row (ne0 elements) must hold a whole number of blocks.
type TypeInfo struct {
	Name       string // ggml's name, e.g. "q4_K"
	BlockSize  int64  // elements per block
	BlockBytes int64  // bytes per block
	Quantized  bool   // true for block formats (and the Q8 activation formats)
}

// typeTable is ggml's type_traits table at the llama.cpp commit our fixtures come from.
var typeTable = map[Type]TypeInfo{
	F32:     {"f32", 1, 4, false},
	F16:     {"f16", 1, 2, false},
	Q4_0:    {"q4_0", 32, 18, true},
	Q4_1:    {"q4_1", 32, 20, true},
	Q5_0:    {"q5_0", 32, 22, true},
	Q5_1:    {"q5_1", 32, 24, true},
	Q8_0:    {"q8_0", 32, 34, true},
	Q8_1:    {"q8_1", 32, 36, true},
	Q2_K:    {"q2_K", 256, 84, true},
	Q3_K:    {"q3_K", 256, 110, true},
	Q4_K:    {"q4_K", 256, 144, true},
	Q5_K:    {"q5_K", 256, 176, true},
	Q6_K:    {"q6_K", 256, 210, true},
	Q8_K:    {"q8_K", 256, 292, true},
	IQ2_XXS: {"iq2_xxs", 256, 66, true},
	IQ2_XS:  {"iq2_xs", 256, 74, true},
	IQ3_XXS: {"iq3_xxs", 256, 98, true},
	IQ1_S:   {"iq1_s", 256, 50, true},
	IQ4_NL:  {"iq4_nl", 32, 18, true},
	IQ3_S:   {"iq3_s", 256, 110, true},
	IQ2_S:   {"iq2_s", 256, 82, true},
	IQ4_XS:  {"iq4_xs", 256, 136, true},
	I8:      {"i8", 1, 1, false},
	I16:     {"i16", 1, 2, false},
	I32:     {"i32", 1, 4, false},
	I64:     {"i64", 1, 8, false},
	F64:     {"f64", 1, 8, false},
	IQ1_M:   {"iq1_m", 256, 56, true},
	BF16:    {"bf16", 1, 2, false},
	TQ1_0:   {"tq1_0", 256, 54, true},
	TQ2_0:   {"tq2_0", 256, 66, true},
	MXFP4:   {"mxfp4", 32, 17, true},
	NVFP4:   {"nvfp4", 64, 36, true},
	Q1_0:    {"q1_0", 128, 18, true},
	Q2_0:    {"q2_0", 64, 18, true},
}

// UnknownTypeError reports a type id that ggml does not define (or no longer supports).
type UnknownTypeError struct{ ID uint32 }

func (e *UnknownTypeError) Error() string {
	return fmt.Sprintf("unknown ggml type id %d", e.ID)
}

// TypeFromID validates a type id read from a file.
func TypeFromID(id uint32) (Type, error) {
	if _, ok := typeTable[Type(id)]; !ok {
		return 0, &UnknownTypeError{ID: id}
	}
	return Type(id), nil
}

// Types lists every known type in id order.
func Types() []Type {
	out := make([]Type, 0, len(typeTable))
	for id := Type(0); len(out) < len(typeTable); id++ {
		if _, ok := typeTable[id]; ok {
			out = append(out, id)
		}
	}
	return out
}

// ParseType finds a type by its ggml name, ignoring case ("Q4_K", "q4_k", "bf16").
func ParseType(name string) (Type, error) {
	for _, t := range Types() {
		if strings.EqualFold(typeTable[t].Name, name) {
			return t, nil
		}
	}
	return 0, fmt.Errorf("unknown ggml type name %q", name)
}

// Info returns the type's table entry. It panics on a Type that did not come from
// TypeFromID, ParseType or the constants: that is a programming error, not bad input.
func (t Type) Info() TypeInfo {
	info, ok := typeTable[t]
	if !ok {
		panic(fmt.Sprintf("tensor: invalid Type %d", uint32(t)))
	}
	return info
}

// Valid reports whether t is a known type.
func (t Type) Valid() bool {
	_, ok := typeTable[t]
	return ok
}

// String returns ggml's name for the type, or "type(N)" for an unknown id.
func (t Type) String() string {
	if info, ok := typeTable[t]; ok {
		return info.Name
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// BlockSize is the number of elements in one block.
func (t Type) BlockSize() int64 { return t.Info().BlockSize }

// BlockBytes is the number of bytes one block takes.
func (t Type) BlockBytes() int64 { return t.Info().BlockBytes }

// RowBytes is the size in bytes of a row of ne0 elements. A row that does not hold a whole
// number of blocks cannot be stored in this type, and is an error.
func (t Type) RowBytes(ne0 int64) (int64, error) {
	info := t.Info()
	if ne0 < 0 {
		return 0, fmt.Errorf("row of %d elements: negative length", ne0)
	}
	if ne0%info.BlockSize != 0 {
		return 0, fmt.Errorf("row of %d elements is not a multiple of %s's block size %d", ne0, info.Name, info.BlockSize)
	}
	n, ok := mulCheck(ne0/info.BlockSize, info.BlockBytes)
	if !ok {
		return 0, fmt.Errorf("row of %d %s elements: size overflows", ne0, info.Name)
	}
	return n, nil
}

// Elements multiplies a shape's dimensions, failing on negative dimensions and overflow.
func Elements(shape []int64) (int64, error) {
	n := int64(1)
	for i, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("dimension %d is negative (%d)", i, d)
		}
		var ok bool
		if n, ok = mulCheck(n, d); !ok {
			return 0, fmt.Errorf("shape %v: element count overflows int64", shape)
		}
	}
	return n, nil
}

// Bytes is the size in bytes of a tensor of this type and shape (shape in GGUF order:
// shape[0] is the row length), stored densely as ggml does.
func (t Type) Bytes(shape []int64) (int64, error) {
	if len(shape) == 0 {
		return t.RowBytes(1)
	}
	row, err := t.RowBytes(shape[0])
	if err != nil {
		return 0, err
	}
	rows, err := Elements(shape[1:])
	if err != nil {
		return 0, err
	}
	n, ok := mulCheck(row, rows)
	if !ok {
		return 0, fmt.Errorf("tensor of shape %v and type %s: size overflows int64", shape, t)
	}
	return n, nil
}

// BitsPerWeight is the storage cost of one element, e.g. 4.5 for q4_0.
func (t Type) BitsPerWeight() float64 {
	info := t.Info()
	return float64(info.BlockBytes*8) / float64(info.BlockSize)
}

// mulCheck multiplies two non-negative int64 values, reporting overflow.
func mulCheck(a, b int64) (int64, bool) {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > math.MaxInt64 {
		return 0, false
	}
	return int64(lo), true
}
