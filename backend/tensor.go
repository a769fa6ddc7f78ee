package backend

import (
	"fmt"

	"github.com/moerun/moerun/tensor"
)

// Tensor is a view of a buffer: Rows rows of Cols elements of Type, the first at byte Off,
// each Stride bytes after the previous one (ggml's ne0, ne1 and nb1; a tensor with more
// dimensions is viewed as its rows). The zero Tensor stands for an absent operand.
type Tensor struct {
	Buf    Buffer
	Off    int64
	Type   tensor.Type
	Cols   int
	Rows   int
	Stride int64
}

// NewTensor is a contiguous tensor of rows rows of cols elements at byte off of buf.
func NewTensor(buf Buffer, off int64, t tensor.Type, cols, rows int) (Tensor, error) {
	rb, err := RowBytes(t, cols)
	if err != nil {
		return Tensor{}, err
	}
	x := Tensor{Buf: buf, Off: off, Type: t, Cols: cols, Rows: rows, Stride: rb}
	if off < 0 || cols < 0 || rows < 0 || off+x.Bytes() > buf.Size() {
		return Tensor{}, fmt.Errorf("a %s tensor of %d×%d at byte %d does not fit in a buffer of %d bytes", t, rows, cols, off, buf.Size())
	}
	return x, nil
}

// Valid reports whether the tensor is present (not the zero Tensor).
func (x Tensor) Valid() bool { return x.Buf != nil }

// Device is the name of the device holding the tensor ("" for the zero Tensor).
func (x Tensor) Device() string {
	if x.Buf == nil {
		return ""
	}
	return x.Buf.Device()
}

// RowBytes is the size of one row.
func (x Tensor) RowBytes() int64 {
	n, _ := RowBytes(x.Type, x.Cols)
	return n
}

// RowBytes is the size of a row of cols elements of type t (t.RowBytes, without the type
// table's lookup for F32 and I32: activations, whose sizes every operation checks).
func RowBytes(t tensor.Type, cols int) (int64, error) {
	if (t == tensor.F32 || t == tensor.I32) && cols >= 0 {
		return 4 * int64(cols), nil
	}
	return t.RowBytes(int64(cols))
}

// Contiguous reports whether the rows follow each other without gaps.
func (x Tensor) Contiguous() bool { return x.Rows <= 1 || x.Stride == x.RowBytes() }

// Bytes is the extent of the view in its buffer, from Off to the end of its last row.
func (x Tensor) Bytes() int64 {
	if x.Rows == 0 {
		return 0
	}
	return int64(x.Rows-1)*x.Stride + x.RowBytes()
}

// Elements is Rows·Cols.
func (x Tensor) Elements() int { return x.Rows * x.Cols }

// Slice is the view of rows [from, to).
func (x Tensor) Slice(from, to int) Tensor {
	if from < 0 || to < from || to > x.Rows {
		panic(fmt.Sprintf("backend: rows [%d, %d) of a tensor of %d rows", from, to, x.Rows))
	}
	x.Off += int64(from) * x.Stride
	x.Rows = to - from
	return x
}

// Columns is the view of columns [from, from+n) of every row (a strided view unless it
// is every column). from must start a block of the type.
func (x Tensor) Columns(from, n int) Tensor {
	bs := int(x.Type.BlockSize())
	if from < 0 || n < 0 || from+n > x.Cols || from%bs != 0 {
		panic(fmt.Sprintf("backend: columns [%d, %d) of a %s tensor of %d columns", from, from+n, x.Type, x.Cols))
	}
	off, _ := x.Type.RowBytes(int64(from))
	x.Off += off
	x.Cols = n
	return x
}

// Reshape views a contiguous tensor as rows of cols elements (the same elements).
func (x Tensor) Reshape(cols int) Tensor {
	if !x.Contiguous() || cols <= 0 || x.Elements()%cols != 0 {
		panic(fmt.Sprintf("backend: reshape of a %d×%d tensor (contiguous %v) to rows of %d", x.Rows, x.Cols, x.Contiguous(), cols))
	}
	rows := x.Elements() / cols
	x.Cols, x.Rows = cols, rows
	x.Stride = x.RowBytes()
	return x
}

// Rowwise views the rows of a contiguous tensor as rows of cols elements that start every
// stride elements (cols ≤ stride): ggml_view_2d over the elements, the way the halves of
// an interleaved projection are picked.
func (x Tensor) Rowwise(cols, stride, offset int) Tensor {
	if !x.Contiguous() || cols <= 0 || stride < cols || offset < 0 || offset+cols > stride || x.Elements()%stride != 0 || x.Type != tensor.F32 && x.Type != tensor.I32 {
		panic(fmt.Sprintf("backend: rows of %d every %d from %d over a %d×%d %s tensor", cols, stride, offset, x.Rows, x.Cols, x.Type))
	}
	es := x.Type.BlockBytes()
	x.Off += int64(offset) * es
	x.Rows = x.Elements() / stride
	x.Cols = cols
	x.Stride = int64(stride) * es
	return x
}

func (x Tensor) String() string {
	return fmt.Sprintf("%s %d×%d on %s", x.Type, x.Rows, x.Cols, x.Device())
}
