package gguf

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
)

// ValueType is a GGUF metadata value type, numbered as the format stores it.
type ValueType uint32

// The 13 GGUF metadata value types.
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

var valueTypeNames = [...]string{"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool", "string", "array", "uint64", "int64", "float64"}

func (t ValueType) String() string {
	if int(t) < len(valueTypeNames) {
		return valueTypeNames[t]
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

func (t ValueType) valid() bool { return int(t) < len(valueTypeNames) }

// size is the encoded size of a scalar of this type; strings and arrays have no fixed size.
func (t ValueType) size() int64 {
	switch t {
	case TypeUint8, TypeInt8, TypeBool:
		return 1
	case TypeUint16, TypeInt16:
		return 2
	case TypeUint32, TypeInt32, TypeFloat32:
		return 4
	case TypeUint64, TypeInt64, TypeFloat64:
		return 8
	}
	return 0
}

// minSize is the fewest bytes one encoded value of this type can take; it bounds how many
// array elements the remaining bytes of a file can possibly hold.
func (t ValueType) minSize() int64 {
	switch t {
	case TypeString:
		return 8 // the length prefix
	case TypeArray:
		return 12 // element type + count
	}
	return t.size()
}

func (t ValueType) isInteger() bool {
	switch t {
	case TypeUint8, TypeInt8, TypeUint16, TypeInt16, TypeUint32, TypeInt32, TypeUint64, TypeInt64:
		return true
	}
	return false
}

// Value is one metadata value. Scalars hold the Go type of their GGUF type (uint8 … float64,
// bool, string); arrays hold a slice of it, or []Value for arrays of arrays.
type Value struct {
	typ   ValueType
	elem  ValueType // element type when typ == TypeArray
	x     any
	total int // the array's length in the file when only its head was read (Options.ArrayLimit)
}

// Scalar is the set of Go types that map one-to-one onto GGUF scalar types.
type Scalar interface {
	uint8 | int8 | uint16 | int16 | uint32 | int32 | uint64 | int64 | float32 | float64 | bool | string
}

func scalarType(x any) ValueType {
	switch x.(type) {
	case uint8:
		return TypeUint8
	case int8:
		return TypeInt8
	case uint16:
		return TypeUint16
	case int16:
		return TypeInt16
	case uint32:
		return TypeUint32
	case int32:
		return TypeInt32
	case uint64:
		return TypeUint64
	case int64:
		return TypeInt64
	case float32:
		return TypeFloat32
	case float64:
		return TypeFloat64
	case bool:
		return TypeBool
	}
	return TypeString
}

// NewValue makes a scalar value; its GGUF type follows the Go type (uint32 → uint32, …).
func NewValue[T Scalar](v T) Value {
	return Value{typ: scalarType(v), x: v}
}

// NewArray makes an array value of scalars. The slice is copied.
func NewArray[T Scalar](vs []T) Value {
	var zero T
	return Value{typ: TypeArray, elem: scalarType(zero), x: append([]T{}, vs...)}
}

// NewArrayOfArrays makes an array whose elements are arrays (GGUF allows nesting).
func NewArrayOfArrays(vs []Value) (Value, error) {
	for i, v := range vs {
		if v.typ != TypeArray {
			return Value{}, fmt.Errorf("element %d is %s, not an array", i, v.TypeName())
		}
	}
	return Value{typ: TypeArray, elem: TypeArray, x: append([]Value{}, vs...)}, nil
}

// Type is the value's GGUF type.
func (v Value) Type() ValueType { return v.typ }

// ElemType is the element type of an array (TypeArray for arrays of arrays).
func (v Value) ElemType() ValueType { return v.elem }

// Len is the number of elements of an array (as the file declares it, even when only its
// head was read), or 1 for a scalar.
func (v Value) Len() int {
	if v.typ != TypeArray {
		return 1
	}
	if v.total > 0 {
		return v.total
	}
	return v.kept()
}

// kept is how many elements of an array are held in memory.
func (v Value) kept() int { return reflect.ValueOf(v.x).Len() }

// Partial reports whether only the head of this array was read (see Options.ArrayLimit):
// its elements past the head are not available.
func (v Value) Partial() bool { return v.total > 0 }

func (v Value) partialError() error {
	return fmt.Errorf("array of %d elements was opened with only its first %d read (gguf.Options.ArrayLimit); open the file without the limit", v.total, v.kept())
}

// Any returns the underlying Go value: a scalar, a slice of scalars, or []Value.
func (v Value) Any() any { return v.x }

// Uint returns an integer value of any width or signedness as uint64; negative values and
// non-integers are errors.
func (v Value) Uint() (uint64, error) {
	switch x := v.x.(type) {
	case uint8:
		return uint64(x), nil
	case uint16:
		return uint64(x), nil
	case uint32:
		return uint64(x), nil
	case uint64:
		return x, nil
	case int8, int16, int32, int64:
		i, _ := v.Int()
		if i < 0 {
			return 0, fmt.Errorf("value %d is negative, want an unsigned integer", i)
		}
		return uint64(i), nil
	}
	return 0, v.mismatch("an unsigned integer")
}

// Int returns an integer value of any width or signedness as int64; a uint64 above
// MaxInt64 and non-integers are errors.
func (v Value) Int() (int64, error) {
	switch x := v.x.(type) {
	case int8:
		return int64(x), nil
	case int16:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case int64:
		return x, nil
	case uint8, uint16, uint32:
		u, _ := v.Uint()
		return int64(u), nil
	case uint64:
		if x > math.MaxInt64 {
			return 0, fmt.Errorf("value %d does not fit in int64", x)
		}
		return int64(x), nil
	}
	return 0, v.mismatch("an integer")
}

// Float returns a float32 or float64 value, or an integer value converted, as float64.
func (v Value) Float() (float64, error) {
	switch x := v.x.(type) {
	case float32:
		return float64(x), nil
	case float64:
		return x, nil
	}
	if v.typ.isInteger() {
		if i, err := v.Int(); err == nil {
			return float64(i), nil
		}
		u, _ := v.Uint()
		return float64(u), nil
	}
	return 0, v.mismatch("a number")
}

// Bool returns a boolean value.
func (v Value) Bool() (bool, error) {
	if b, ok := v.x.(bool); ok {
		return b, nil
	}
	return false, v.mismatch("a bool")
}

// Str returns a string value.
func (v Value) Str() (string, error) {
	if s, ok := v.x.(string); ok {
		return s, nil
	}
	return "", v.mismatch("a string")
}

// Strings returns an array of strings.
func (v Value) Strings() ([]string, error) {
	if v.Partial() {
		return nil, v.partialError()
	}
	if s, ok := v.x.([]string); ok {
		return s, nil
	}
	return nil, v.mismatch("an array of strings")
}

// Ints returns an array of integers of any width as []int64.
func (v Value) Ints() ([]int64, error) {
	if v.typ != TypeArray || !v.elem.isInteger() {
		return nil, v.mismatch("an array of integers")
	}
	if v.Partial() {
		return nil, v.partialError()
	}
	out := make([]int64, v.Len())
	for i := range out {
		var err error
		if out[i], err = v.Index(i).Int(); err != nil {
			return nil, fmt.Errorf("element %d: %w", i, err)
		}
	}
	return out, nil
}

// Floats returns an array of numbers as []float64.
func (v Value) Floats() ([]float64, error) {
	if v.typ != TypeArray || !(v.elem.isInteger() || v.elem == TypeFloat32 || v.elem == TypeFloat64) {
		return nil, v.mismatch("an array of numbers")
	}
	if v.Partial() {
		return nil, v.partialError()
	}
	out := make([]float64, v.Len())
	for i := range out {
		out[i], _ = v.Index(i).Float()
	}
	return out, nil
}

// Bools returns an array of booleans.
func (v Value) Bools() ([]bool, error) {
	if v.Partial() {
		return nil, v.partialError()
	}
	if b, ok := v.x.([]bool); ok {
		return b, nil
	}
	return nil, v.mismatch("an array of bools")
}

// Index returns element i of an array as a Value. It panics if v is not an array or i is
// out of range, like indexing a slice; for a partial array the range is its head.
func (v Value) Index(i int) Value {
	if v.typ != TypeArray {
		panic("gguf: Index of a non-array value")
	}
	if v.Partial() && i >= v.kept() {
		panic(fmt.Sprintf("gguf: element %d of an array read only up to element %d", i, v.kept()-1))
	}
	if nested, ok := v.x.([]Value); ok {
		return nested[i]
	}
	return Value{typ: v.elem, x: reflect.ValueOf(v.x).Index(i).Interface()}
}

func (v Value) mismatch(want string) error {
	return fmt.Errorf("value is %s, want %s", v.TypeName(), want)
}

// TypeName spells the type as "uint32" or "array[string]".
func (v Value) TypeName() string {
	if v.typ != TypeArray {
		return v.typ.String()
	}
	if v.elem == TypeArray {
		return "array[array]"
	}
	return "array[" + v.elem.String() + "]"
}

// String formats the value for people: strings quoted, arrays in full. Use Summary for a
// short form of long arrays.
func (v Value) String() string { return v.Summary(-1) }

// Summary formats the value, showing at most maxItems elements of an array followed by
// "… (N total)"; maxItems < 0 shows everything.
func (v Value) Summary(maxItems int) string {
	if v.typ != TypeArray {
		return formatScalar(v.x)
	}
	n := v.Len()
	shown := min(n, v.kept())
	if maxItems >= 0 && shown > maxItems {
		shown = maxItems
	}
	var b strings.Builder
	b.WriteByte('[')
	for i := 0; i < shown; i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(v.Index(i).Summary(maxItems))
	}
	if shown < n {
		if shown > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "… (%d total)", n)
	}
	b.WriteByte(']')
	return b.String()
}

func formatScalar(x any) string {
	switch x := x.(type) {
	case string:
		return strconv.Quote(x)
	case float32:
		return strconv.FormatFloat(float64(x), 'g', -1, 32)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	}
	return fmt.Sprint(x)
}
