//go:build cuda

package cuda

import (
	"fmt"
	"unsafe"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/backend/cuda/kernels"
	"github.com/moerun/moerun/tensor"
)

// The weight operations of the device API. The backend's values are host memory (see
// Backend), so each takes its operands' host slices and runs the GPU kernel on them with a
// copy in and out, or, for a weight whose type has no kernel, the CPU's operation.

// hostF32 is a contiguous F32 value's elements.
func hostF32(x backend.Tensor, op string) ([]float32, error) {
	h, err := hostBytes(x, tensor.F32, op)
	if err != nil || len(h) == 0 {
		return nil, err
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&h[0])), len(h)/4), nil
}

// hostI32 is a contiguous I32 value's elements.
func hostI32(x backend.Tensor, op string) ([]int32, error) {
	h, err := hostBytes(x, tensor.I32, op)
	if err != nil || len(h) == 0 {
		return nil, err
	}
	return unsafe.Slice((*int32)(unsafe.Pointer(&h[0])), len(h)/4), nil
}

func hostBytes(x backend.Tensor, t tensor.Type, op string) ([]byte, error) {
	if x.Buf == nil || x.Buf.Host() == nil {
		return nil, fmt.Errorf("%s of %s: not a value in host memory", op, x)
	}
	if x.Type != t || !x.Contiguous() {
		return nil, fmt.Errorf("%s of %s: want contiguous %s", op, x, t)
	}
	return x.Buf.Host()[x.Off : x.Off+x.Bytes()], nil
}

// GetRows decodes rows of a weight into dst.
func (b *Backend) GetRows(dst backend.Tensor, w backend.Weight, ids []int32) error {
	cw, err := b.weightOf(w)
	if err != nil {
		return err
	}
	if cw.host != nil {
		b.stats.HostOps++
		return b.Backend.GetRows(dst, cw.host, ids)
	}
	d, err := hostF32(dst, "get-rows")
	if err != nil {
		return err
	}
	return b.decodeRows(d, cw, ids)
}

// MatMul is ggml_mul_mat.
func (b *Backend) MatMul(dst backend.Tensor, w backend.Weight, x backend.Tensor) error {
	cw, err := b.weightOf(w)
	if err != nil {
		return err
	}
	if cw.host != nil {
		b.stats.HostOps++
		return b.Backend.MatMul(dst, cw.host, x)
	}
	d, err := hostF32(dst, "mul-mat")
	if err != nil {
		return err
	}
	xs, err := hostF32(x, "mul-mat")
	if err != nil {
		return err
	}
	return b.matMul(d, cw, xs)
}

// MatMuls runs MatMul for each weight.
func (b *Backend) MatMuls(dsts []backend.Tensor, ws []backend.Weight, x backend.Tensor) error {
	if len(dsts) != len(ws) {
		return fmt.Errorf("%s: %d outputs for %d weights", b.dev.Name, len(dsts), len(ws))
	}
	for i, w := range ws {
		if err := b.MatMul(dsts[i], w, x); err != nil {
			return err
		}
	}
	return nil
}

// MulMatID is ggml_mul_mat_id.
func (b *Backend) MulMatID(dst backend.Tensor, w backend.Weight, x, ids backend.Tensor, k int) error {
	cw, err := b.weightOf(w)
	if err != nil {
		return err
	}
	if cw.host != nil {
		b.stats.HostOps++
		return b.Backend.MulMatID(dst, cw.host, x, ids, k)
	}
	d, err := hostF32(dst, "mul-mat-id")
	if err != nil {
		return err
	}
	xs, err := hostF32(x, "mul-mat-id")
	if err != nil {
		return err
	}
	is, err := hostI32(ids, "mul-mat-id")
	if err != nil {
		return err
	}
	return b.mulMatID(d, cw, xs, is, k)
}

// MulMatIDs runs MulMatID for each weight.
func (b *Backend) MulMatIDs(dsts []backend.Tensor, ws []backend.Weight, x, ids backend.Tensor, k int) error {
	if len(dsts) != len(ws) {
		return fmt.Errorf("%s: %d outputs for %d weights", b.dev.Name, len(dsts), len(ws))
	}
	for i, w := range ws {
		if err := b.MulMatID(dsts[i], w, x, ids, k); err != nil {
			return err
		}
	}
	return nil
}

// MatMulStack multiplies row i of x by matrix i mod Experts. The GPU runs it as its
// mul_mat_id with each row its own slot; float weights then round in the kernel's order
// rather than in ggml_mul_mat's, which differs in the last bits.
func (b *Backend) MatMulStack(dst backend.Tensor, w backend.Weight, x backend.Tensor) error {
	cw, err := b.weightOf(w)
	if err != nil {
		return err
	}
	if cw.host != nil {
		b.stats.HostOps++
		return b.Backend.MatMulStack(dst, cw.host, x)
	}
	d, err := hostF32(dst, "mul-mat-stack")
	if err != nil {
		return err
	}
	xs, err := hostF32(x, "mul-mat-stack")
	if err != nil {
		return err
	}
	e := cw.m.Experts()
	if x.Rows%e != 0 {
		return fmt.Errorf("%s: mul-mat-stack: %d rows over %d matrices of %s", b.dev.Name, x.Rows, e, cw.name)
	}
	b.stackIDs = b.stackIDs[:0]
	for i := range x.Rows {
		b.stackIDs = append(b.stackIDs, int32(i%e))
	}
	return b.mulMatID(d, cw, xs, b.stackIDs, e)
}

// Supports: the weights' products for every type (a type without a kernel runs on the
// host), everything else as the CPU backend that runs it.
func (b *Backend) Supports(op backend.Op, t tensor.Type) bool {
	switch op {
	case backend.OpGetRows, backend.OpMatMul, backend.OpMulMatID, backend.OpMatMulStack:
		if kernels.Supported(t) {
			return true
		}
	}
	return b.Backend.Supports(op, t)
}
