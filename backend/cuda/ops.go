//go:build cuda

package cuda

import (
	"fmt"
	"slices"
	"unsafe"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/backend/cuda/kernels"
	"github.com/moerun/moerun/tensor"
)

// The weight operations of backend.Ops. Their operands are tensors of the embedded CPU
// backend's buffers, which are host memory: each operation takes the host values out of
// the tensors and hands them to the GPU code (matMul, mulMatID, getRows), which copies
// them in and the results back. A weight of a type with no CUDA kernel is the CPU
// backend's, and the operation is the CPU backend's too. Every other operation is the
// embedded CPU backend's own.

// Supports reports what the backend runs: the weight operations on the types with CUDA
// kernels and, through the host, on every type the CPU computes; every other operation as
// the CPU backend, which runs it.
func (b *Backend) Supports(op backend.Op, t tensor.Type) bool {
	switch op {
	case backend.OpGetRows, backend.OpMatMul, backend.OpMulMatID, backend.OpMatMulStack:
		return kernels.Supported(t) || b.Backend.Supports(op, t)
	}
	return b.Backend.Supports(op, t)
}

// GetRows decodes rows ids of a 2-D weight into dst on the GPU (the embedding lookup).
func (b *Backend) GetRows(dst backend.Tensor, w backend.Weight, ids []int32) error {
	cw, err := b.weightOf(w)
	if err != nil {
		return err
	}
	if cw.host != nil {
		b.stats.HostOps++
		return b.Backend.GetRows(dst, cw.host, ids)
	}
	d, err := b.f32(dst, "get-rows")
	if err != nil {
		return err
	}
	return b.getRows(d, cw, ids)
}

// MatMul is ggml_mul_mat on the GPU (see matMul).
func (b *Backend) MatMul(dst backend.Tensor, w backend.Weight, x backend.Tensor) error {
	cw, err := b.weightOf(w)
	if err != nil {
		return err
	}
	if cw.host != nil {
		b.stats.HostOps++
		return b.Backend.MatMul(dst, cw.host, x)
	}
	d, err := b.f32(dst, "mul-mat")
	if err != nil {
		return err
	}
	xs, err := b.f32(x, "mul-mat")
	if err != nil {
		return err
	}
	return b.matMul(d, cw, xs)
}

// MatMuls runs MatMul for each weight in turn: the GPU code has no fused launch, so x is
// copied in once per weight (as when the runtime called the weights one by one).
func (b *Backend) MatMuls(dsts []backend.Tensor, ws []backend.Weight, x backend.Tensor) error {
	if len(dsts) != len(ws) {
		return fmt.Errorf("%s: mul-mat: %d outputs for %d weights", b.dev.Name, len(dsts), len(ws))
	}
	for i, w := range ws {
		if err := b.MatMul(dsts[i], w, x); err != nil {
			return err
		}
	}
	return nil
}

// MulMatID is ggml_mul_mat_id on the GPU (see mulMatID).
func (b *Backend) MulMatID(dst backend.Tensor, w backend.Weight, x, ids backend.Tensor, k int) error {
	cw, err := b.weightOf(w)
	if err != nil {
		return err
	}
	if cw.host != nil {
		b.stats.HostOps++
		return b.Backend.MulMatID(dst, cw.host, x, ids, k)
	}
	d, err := b.f32(dst, "mul-mat-id")
	if err != nil {
		return err
	}
	xs, err := b.f32(x, "mul-mat-id")
	if err != nil {
		return err
	}
	is, err := b.i32(ids, "mul-mat-id")
	if err != nil {
		return err
	}
	return b.mulMatID(d, cw, xs, is, k)
}

// MulMatIDs runs MulMatID for each stack in turn (the ids and x copied in for each).
func (b *Backend) MulMatIDs(dsts []backend.Tensor, ws []backend.Weight, x, ids backend.Tensor, k int) error {
	if len(dsts) != len(ws) {
		return fmt.Errorf("%s: mul-mat-id: %d outputs for %d expert stacks", b.dev.Name, len(dsts), len(ws))
	}
	for i, w := range ws {
		if err := b.MulMatID(dsts[i], w, x, ids, k); err != nil {
			return err
		}
	}
	return nil
}

// MatMulStack multiplies row i of x by matrix i mod Experts of w. The GPU runs it as
// MulMatID with those ids (k = Experts, one x row per slot), as the runtime ran it on
// this backend before backends had MatMulStack: the products are ggml_mul_mat_id's, so
// for float weights (F32, F16, BF16) they may differ from ggml_mul_mat's (and the CPU
// backend's MatMulStack) in the last bits, the sums being taken in another order. A weight
// without a CUDA kernel goes to the CPU backend's MatMulStack, which for those (quantized)
// types is MulMatID's arithmetic anyway (see tensor.Pool.MatMulStack).
func (b *Backend) MatMulStack(dst backend.Tensor, w backend.Weight, x backend.Tensor) error {
	cw, err := b.weightOf(w)
	if err != nil {
		return err
	}
	if cw.host != nil {
		b.stats.HostOps++
		return b.Backend.MatMulStack(dst, cw.host, x)
	}
	d, err := b.f32(dst, "mul-mat-stack")
	if err != nil {
		return err
	}
	xs, err := b.f32(x, "mul-mat-stack")
	if err != nil {
		return err
	}
	e := cw.m.Experts()
	if x.Rows%e != 0 {
		return fmt.Errorf("%s: mul-mat-stack: %d rows over %d matrices of %s", b.dev.Name, x.Rows, e, cw.name)
	}
	return b.mulMatID(d, cw, xs, b.stack(x.Rows, e), e)
}

// stack returns ids 0, 1, …, experts-1 repeated over rows rows, in a slice it reuses.
func (b *Backend) stack(rows, experts int) []int32 {
	b.stackIDs = slices.Grow(b.stackIDs[:0], rows)[:rows]
	for i := range b.stackIDs {
		b.stackIDs[i] = int32(i % experts)
	}
	return b.stackIDs
}

// hostBytes is the memory of x, a contiguous tensor of type t in one of this backend's
// buffers (which are the embedded CPU backend's host memory), for operation op.
func (b *Backend) hostBytes(x backend.Tensor, t tensor.Type, op string) ([]byte, error) {
	if b.closed {
		return nil, errClosed
	}
	if x.Buf == nil {
		return nil, fmt.Errorf("%s: %s of a tensor on no device", b.dev.Name, op)
	}
	if x.Type != t || !x.Contiguous() || x.Rows < 0 || x.Cols < 0 {
		return nil, fmt.Errorf("%s: %s of %s, want contiguous %s", b.dev.Name, op, x, t)
	}
	if x.Off < 0 || x.Off+x.Bytes() > x.Buf.Size() {
		return nil, fmt.Errorf("%s: %s of %s outside its buffer", b.dev.Name, op, x)
	}
	// Only the CPU backend knows its buffers: an empty Get from the tensor's buffer
	// succeeds exactly when the buffer is its (and costs nothing). Its buffers are host
	// memory (Host is nil only for an empty one).
	h := x.Buf.Host()
	if h == nil && x.Buf.Size() > 0 || b.Backend.Get(nil, x.Slice(0, 0)) != nil {
		return nil, fmt.Errorf("%s: %s of a tensor on %s: copy it to %s first", b.dev.Name, op, x.Buf.Device(), b.dev.Name)
	}
	if x.Off%t.BlockBytes() != 0 {
		return nil, fmt.Errorf("%s: %s of %s at byte %d, not aligned to its elements", b.dev.Name, op, x, x.Off)
	}
	return h[x.Off : x.Off+x.Bytes()], nil
}

// f32 is the values of a contiguous F32 tensor of this backend (nil when it has none).
func (b *Backend) f32(x backend.Tensor, op string) ([]float32, error) {
	h, err := b.hostBytes(x, tensor.F32, op)
	if err != nil || len(h) == 0 {
		return nil, err
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&h[0])), len(h)/4), nil
}

// i32 is the values of a contiguous I32 tensor of this backend (nil when it has none).
func (b *Backend) i32(x backend.Tensor, op string) ([]int32, error) {
	h, err := b.hostBytes(x, tensor.I32, op)
	if err != nil || len(h) == 0 {
		return nil, err
	}
	return unsafe.Slice((*int32)(unsafe.Pointer(&h[0])), len(h)/4), nil
}
