//go:build cuda

package cuda

import (
	"unsafe"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/tensor"
)

// The conformance tests compare products on host slices; these helpers put the slices in
// values of a backend (rows of the weight's width, or one row when the length does not
// divide, so that a shape error stays an error), run the operation and read the result
// back.

func value[T float32 | int32](b backend.Backend, v []T, cols int) (backend.Tensor, error) {
	t := tensor.F32
	if _, ok := any(v).([]int32); ok {
		t = tensor.I32
	}
	rows := 1
	if cols > 0 && len(v)%cols == 0 {
		rows = len(v) / cols
	} else {
		cols = len(v)
	}
	buf, err := b.Alloc(int64(4 * max(len(v), 1)))
	if err != nil {
		return backend.Tensor{}, err
	}
	x, err := backend.NewTensor(buf, 0, t, cols, rows)
	if err != nil || len(v) == 0 {
		return x, err
	}
	return x, b.Set(x, unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v)))
}

func readBack(b backend.Backend, dst []float32, x backend.Tensor) error {
	if len(dst) == 0 {
		return nil
	}
	if err := b.Get(unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), 4*len(dst)), x); err != nil {
		return err
	}
	return b.Synchronize()
}

func matMul(b backend.Backend, dst []float32, w backend.Weight, x []float32) error {
	xt, err := value(b, x, w.Cols())
	if err != nil {
		return err
	}
	dt, err := value(b, dst, w.Rows())
	if err != nil {
		return err
	}
	if err := b.MatMul(dt, w, xt); err != nil {
		return err
	}
	return readBack(b, dst, dt)
}

func mulMatID(b backend.Backend, dst []float32, w backend.Weight, x []float32, ids []int32, k int) error {
	xt, err := value(b, x, w.Cols())
	if err != nil {
		return err
	}
	it, err := value(b, ids, k)
	if err != nil {
		return err
	}
	dt, err := value(b, dst, w.Rows())
	if err != nil {
		return err
	}
	if err := b.MulMatID(dt, w, xt, it, k); err != nil {
		return err
	}
	return readBack(b, dst, dt)
}

func getRows(b backend.Backend, dst []float32, w backend.Weight, ids []int32) error {
	dt, err := value(b, dst, w.Cols())
	if err != nil {
		return err
	}
	if err := b.GetRows(dt, w, ids); err != nil {
		return err
	}
	return readBack(b, dst, dt)
}
