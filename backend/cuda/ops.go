//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"slices"
	"unsafe"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/backend/cuda/kernels"
	"github.com/moerun/moerun/tensor"
	"gorgonia.org/cu"
)

// The operations of backend.Ops. Their operands are tensors in the backend's device memory;
// each operation checks them, then queues its kernels on the stream. A weight of a type
// with no CUDA kernel is the host backend's, and its operations run there on copies of
// their operands (onHost), as do the recurrent state's operations and attention over heads
// larger than its kernel takes: they must run where their state or cache is.

// Supports reports what the backend runs: the weight operations on the types with CUDA
// kernels and, through the host, on every other type the CPU computes; the operations
// between them on F32 values; set-rows and attention on F32, F16 and Q8_0 caches; and,
// through the host, the recurrent state's operations. Any other (operation, type) is
// false, and the runtime runs it on a device that has it.
func (b *Backend) Supports(op backend.Op, t tensor.Type) bool {
	switch op {
	case backend.OpGetRows, backend.OpMatMul, backend.OpMulMatID, backend.OpMatMulStack:
		return kernels.Supported(t) || b.host.Supports(op, t)
	case backend.OpCopy, backend.OpRMSNorm, backend.OpL2Norm, backend.OpAdd, backend.OpMul, backend.OpScale,
		backend.OpUnary, backend.OpSwiGLU, backend.OpAddID, backend.OpWeightedSum, backend.OpRoPE, backend.OpRoute,
		backend.OpLayerNorm, backend.OpHadamard:
		return t == tensor.F32
	case backend.OpMapIDs:
		return t == tensor.I32
	case backend.OpSetRows:
		return kernels.SetRows(t) != ""
	case backend.OpAttention:
		_, ok := kernels.AttentionCache(t)
		return ok
	case backend.OpIndexerScores:
		_, ok := kernels.AttentionCache(t)
		return ok || b.host.Supports(op, t)
	case backend.OpCausalConv, backend.OpGatedDeltaRule:
		return t == tensor.F32
	}
	return false
}

// GetRows decodes rows ids of a 2-D weight into dst on the GPU (the embedding lookup).
func (b *Backend) GetRows(dst backend.Tensor, w backend.Weight, ids []int32) error {
	cw, err := b.weightOf(w)
	if err != nil {
		return err
	}
	if cw.host != nil {
		return b.onHost([]backend.Tensor{dst}, nil, func(out, _ []backend.Tensor) error { return b.host.GetRows(out[0], cw.host, ids) })
	}
	d, err := b.contiguous(dst, tensor.F32, "get-rows")
	if err != nil {
		return err
	}
	if err := cw.m.CheckGetRows(dst.Elements(), ids); err != nil {
		return fmt.Errorf("tensor %s: %w", cw.name, err)
	}
	if len(ids) == 0 {
		return nil // a launch needs a grid of at least one block
	}
	return b.run("get-rows of "+cw.name, func() error {
		if err := b.send(&b.route, ids); err != nil {
			return err
		}
		return b.readStaged(cw, func() error {
			return b.launch(b.getrows[cw.m.Type()], min(len(ids), kernels.MaxGridX), 1, kernels.GetRowsBlockX, 1,
				uint64(cw.ptr), uint64(b.route.ptr), uint64(d), uint64(cw.m.Cols()), uint64(len(ids)), uint64(cw.rowBytes))
		})
	})
}

// MatMul is ggml_mul_mat on the GPU (see matMul).
func (b *Backend) MatMul(dst backend.Tensor, w backend.Weight, x backend.Tensor) error {
	cw, err := b.weightOf(w)
	if err != nil {
		return err
	}
	if cw.host != nil {
		return b.onHost([]backend.Tensor{dst}, []backend.Tensor{x}, func(out, in []backend.Tensor) error {
			return b.host.MatMul(out[0], cw.host, in[0])
		})
	}
	d, xp, err := b.productOperands(dst, x, "mul-mat")
	if err != nil {
		return err
	}
	tokens, err := cw.m.CheckMatMul(dst.Elements(), x.Elements())
	if err != nil {
		return fmt.Errorf("tensor %s: %w", cw.name, err)
	}
	if tokens == 0 {
		return nil
	}
	return b.run("mul-mat of "+cw.name, func() error {
		xp, err := b.activations(xp, x, cw)
		if err != nil {
			return err
		}
		return b.matMul(d, cw, xp, tokens)
	})
}

// MatMuls runs MatMul for each weight in turn: the GPU has no fused launch.
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
	return b.MulMatIDs([]backend.Tensor{dst}, []backend.Weight{w}, x, ids, k)
}

// MulMatIDs is MulMatID for several stacks with the same routing. The ids stay on the
// device: group_pairs turns them into the work list there, once for all the stacks, so
// nothing waits for them. An id outside the stack (which the CPU reports) belongs to no
// group there, its slot's outputs zero like an unused one's: the device cannot report it
// without a wait.
func (b *Backend) MulMatIDs(dsts []backend.Tensor, ws []backend.Weight, x, ids backend.Tensor, k int) error {
	if len(dsts) != len(ws) {
		return fmt.Errorf("%s: mul-mat-id: %d outputs for %d expert stacks", b.dev.Name, len(dsts), len(ws))
	}
	ip, err := b.contiguous(ids, tensor.I32, "mul-mat-id")
	if err != nil {
		return err
	}
	grouped := false
	for i, w := range ws {
		cw, err := b.weightOf(w)
		if err != nil {
			return err
		}
		if cw.host != nil {
			err := b.onHost(dsts[i:i+1], []backend.Tensor{x, ids}, func(out, in []backend.Tensor) error {
				return b.host.MulMatID(out[0], cw.host, in[0], in[1], k)
			})
			if err != nil {
				return err
			}
			continue
		}
		if err := b.mulMatIDOf(dsts[i], cw, x, ip, ids.Elements(), k, !grouped, true, "mul-mat-id"); err != nil {
			return err
		}
		grouped = true
	}
	return nil
}

// mulMatIDOf queues ggml_mul_mat_id of GPU-resident cw by the n expert ids at ids (device
// memory, k per token): the work list built from them unless group is false (the previous
// stack of the same routing built it), dst zeroed first if some slots may be unused, then
// the kernel.
func (b *Backend) mulMatIDOf(dst backend.Tensor, cw *weight, x backend.Tensor, ids cu.DevicePtr, n, k int, group, unused bool, op string) error {
	d, xp, err := b.productOperands(dst, x, op)
	if err != nil {
		return err
	}
	// The shapes only: the ids are on the device (zeros pass the range check).
	b.zeroIDs = slices.Grow(b.zeroIDs[:0], n)[:n]
	clear(b.zeroIDs)
	shared, err := cw.m.CheckMulMatID(dst.Elements(), x.Elements(), b.zeroIDs, k)
	if err != nil {
		return fmt.Errorf("tensor %s: %w", cw.name, err)
	}
	if n == 0 {
		return nil
	}
	return b.run(op+" of "+cw.name, func() error {
		if group {
			if err := b.groupPairs(ids, n, cw.m.Experts()); err != nil {
				return err
			}
		}
		if unused {
			if err := b.memset32(d, 0, int64(dst.Elements())); err != nil {
				return err
			}
		}
		xp, err := b.activations(xp, x, cw)
		if err != nil {
			return err
		}
		return b.mulMatID(d, cw, xp, n, k, shared)
	})
}

// MatMulStack multiplies row i of x by matrix i mod Experts of w. The GPU runs it as
// MulMatID with those ids (k = Experts, one x row per slot): the products are
// ggml_mul_mat_id's, so for float weights (F32, F16, BF16) they may differ from
// ggml_mul_mat's (and the CPU backend's MatMulStack) in the last bits, the sums being taken
// in another order. A weight without a CUDA kernel goes to the host backend's MatMulStack,
// which for those (quantized) types is MulMatID's arithmetic anyway (see
// tensor.Pool.MatMulStack).
func (b *Backend) MatMulStack(dst backend.Tensor, w backend.Weight, x backend.Tensor) error {
	cw, err := b.weightOf(w)
	if err != nil {
		return err
	}
	if cw.host != nil {
		return b.onHost([]backend.Tensor{dst}, []backend.Tensor{x}, func(out, in []backend.Tensor) error {
			return b.host.MatMulStack(out[0], cw.host, in[0])
		})
	}
	e := cw.m.Experts()
	if x.Rows%e != 0 {
		return fmt.Errorf("%s: mul-mat-stack: %d rows over %d matrices of %s", b.dev.Name, x.Rows, e, cw.name)
	}
	ids := b.stack(x.Rows, e)
	err = b.do(func() error { return b.send(&b.stackDev, ids) })
	if err != nil {
		return fmt.Errorf("%s: mul-mat-stack: %w", b.dev.Name, err)
	}
	return b.mulMatIDOf(dst, cw, x, b.stackDev.ptr, len(ids), e, true, false, "mul-mat-stack")
}

// stack returns ids 0, 1, …, experts-1 repeated over rows rows, in a slice it reuses.
func (b *Backend) stack(rows, experts int) []int32 {
	b.stackIDs = slices.Grow(b.stackIDs[:0], rows)[:rows]
	for i := range b.stackIDs {
		b.stackIDs[i] = int32(i % experts)
	}
	return b.stackIDs
}

// productOperands is the device addresses of a product's output and input, contiguous F32
// tensors of this backend.
func (b *Backend) productOperands(dst, x backend.Tensor, op string) (cu.DevicePtr, cu.DevicePtr, error) {
	d, err := b.contiguous(dst, tensor.F32, op)
	if err != nil {
		return 0, 0, err
	}
	xp, err := b.contiguous(x, tensor.F32, op)
	return d, xp, err
}

// activations returns the activations x (at xp) of a product with cw as mmv reads them:
// at a 16-byte aligned address and, for a quantized weight type, rounded as the CPU matmul
// quantizes them (kernels.ActivationKind); x itself where that changes nothing, else a
// copy queued into the backend's scratch.
func (b *Backend) activations(xp cu.DevicePtr, x backend.Tensor, cw *weight) (cu.DevicePtr, error) {
	kind, quantize := kernels.ActivationKind(cw.m.Type())
	if !quantize && xp%16 == 0 {
		return xp, nil
	}
	n := x.Bytes()
	if err := b.x.reserve(n, b.settle); err != nil {
		return 0, err
	}
	if !quantize {
		return b.x.ptr, b.copyOnDevice(b.x.ptr, xp, n)
	}
	// Rows of the weight's columns (a multiple of its block, so of the activations' block;
	// the caller checked that x holds whole rows).
	cols := cw.m.Cols()
	blocks := x.Elements() / kernels.ActivationBlock(kind)
	return b.x.ptr, b.launchWarpRows(kernels.QuantizeActF32, blocks, uint64(b.x.ptr), uint64(xp), uint64(cols),
		uint64(x.Elements()/cols), kind)
}

// onHost runs an operation on the host backend, on host copies of its operands: each
// tensor of ins and outs (tensors of this backend; the zero Tensor stays absent) is
// mirrored by a host tensor of the same shape and stride over a copy of its bytes; the
// inputs, and the outputs that are strided (their gaps must survive) or also inputs, are
// copied out and waited for; op runs on the mirrors; the outputs are copied back. It is how
// the weights without a CUDA kernel are computed, and the operations without a kernel that
// must run where their state or cache is (the recurrent state's, attention over large
// heads).
func (b *Backend) onHost(outs, ins []backend.Tensor, op func(outs, ins []backend.Tensor) error) error {
	mirror := func(xs []backend.Tensor) ([]backend.Tensor, error) {
		hs := make([]backend.Tensor, len(xs))
		for i, x := range xs {
			if !x.Valid() {
				continue
			}
			if _, err := b.address(x, "a host-run operation"); err != nil {
				return nil, err
			}
			buf, err := b.host.Alloc(x.Bytes())
			if err != nil {
				return nil, err
			}
			hs[i] = x
			hs[i].Buf, hs[i].Off = buf, 0
		}
		return hs, nil
	}
	hostOuts, err := mirror(outs)
	if err != nil {
		return err
	}
	hostIns, err := mirror(ins)
	if err != nil {
		return err
	}
	for i, x := range ins {
		if x.Valid() {
			if err := b.span(x, hostIns[i].Buf.Host(), false); err != nil {
				return err
			}
		}
	}
	for i, x := range outs {
		if !x.Contiguous() || slices.Contains(ins, x) {
			if err := b.span(x, hostOuts[i].Buf.Host(), false); err != nil {
				return err
			}
		}
	}
	if err := b.Synchronize(); err != nil {
		return err
	}
	if err := op(hostOuts, hostIns); err != nil {
		return err
	}
	b.stats.HostOps++
	for i, x := range outs {
		if err := b.span(x, hostOuts[i].Buf.Host(), true); err != nil {
			return err
		}
	}
	return nil
}

// span queues a copy of the bytes x spans in its buffer (from its first row's start to
// its last row's end) into host, or from host when in.
func (b *Backend) span(x backend.Tensor, host []byte, in bool) error {
	if len(host) == 0 {
		return nil
	}
	p := x.Buf.(*buffer).ptr + cu.DevicePtr(x.Off)
	if in {
		b.stats.CopyInBytes += int64(len(host))
		return b.copying("copy in", func() error { return b.copyIn(p, host) })
	}
	b.stats.CopyOutBytes += int64(len(host))
	return b.copying("copy out", func() error { return b.copyOut(host, p) })
}

// Copy copies src into dst (F32, the same shape; either may be a strided view).
func (b *Backend) Copy(dst, src backend.Tensor) error {
	if dst.Rows != src.Rows || dst.Cols != src.Cols || dst.Type != src.Type || src.Type != tensor.F32 {
		return fmt.Errorf("%s: copy: %s into %s, want f32 tensors of one shape", b.dev.Name, src, dst)
	}
	d, err := b.address(dst, "copy")
	if err != nil {
		return err
	}
	s, err := b.address(src, "copy")
	if err != nil || src.Elements() == 0 {
		return err
	}
	return b.run("copy", func() error {
		return b.launchRows(kernels.CopyF32, src.Rows, uint64(d), uint64(s), uint64(src.Cols), uint64(src.Rows),
			uint64(dst.Stride/4), uint64(src.Stride/4))
	})
}

// launchRows queues one of ops.cuh's kernels with a block per row (up to kernels.MaxGridX).
func (b *Backend) launchRows(name string, rows int, args ...uint64) error {
	return b.launch(b.op[name], min(rows, kernels.MaxGridX), 1, kernels.OpBlockX, 1, args...)
}

// launchThreadRows queues one of ops.cuh's kernels that give each row a thread.
func (b *Backend) launchThreadRows(name string, rows int, args ...uint64) error {
	return b.launch(b.op[name], min(ceilDiv(rows, kernels.OpBlockX), kernels.MaxGridX), 1, kernels.OpBlockX, 1, args...)
}

// launchWarpRows queues one of ops.cuh's row kernels, a warp per row.
func (b *Backend) launchWarpRows(name string, rows int, args ...uint64) error {
	return b.launch(b.op[name], min(ceilDiv(rows, kernels.OpRowsPerBlock), kernels.MaxGridX), 1, kernels.OpBlockX, 1, args...)
}

// f64 passes a float parameter to a kernel, which declares it double (exactly the float's
// value).
func f64(v float32) uint64 { return math.Float64bits(float64(v)) }

// f32Operand is the device address of an F32 tensor of this backend and the distance
// between its rows in elements.
func (b *Backend) f32Operand(x backend.Tensor, op backend.Op) (cu.DevicePtr, uint64, error) {
	p, err := b.address(x, op.String())
	if err == nil && x.Type != tensor.F32 {
		err = fmt.Errorf("%s: %s of a %s tensor, want f32", b.dev.Name, op, x.Type)
	}
	return p, uint64(x.Stride / 4), err
}

// elementwise checks the operands of an element-wise operation (F32 tensors of this
// backend, each input of dst's shape, the last one possibly a single row that broadcast
// repeats) and queues kernel name over them. Its parameters are dst and the inputs, params,
// cols and rows, then the row stride of dst and of each input (0 for a repeated row).
func (b *Backend) elementwise(op backend.Op, name string, dst backend.Tensor, ins []backend.Tensor, broadcast bool, params ...uint64) error {
	d, ds, err := b.f32Operand(dst, op)
	if err != nil {
		return err
	}
	ptrs, strides := []uint64{uint64(d)}, []uint64{ds}
	for i, x := range ins {
		oneRow := broadcast && i == len(ins)-1 && x.Rows == 1
		if x.Cols != dst.Cols || x.Rows != dst.Rows && !oneRow {
			return fmt.Errorf("%s: %s: %s into %s", b.dev.Name, op, x, dst)
		}
		p, s, err := b.f32Operand(x, op)
		if err != nil {
			return err
		}
		if oneRow {
			s = 0
		}
		ptrs, strides = append(ptrs, uint64(p)), append(strides, s)
	}
	if dst.Elements() == 0 {
		return nil
	}
	args := append(append(append(ptrs, params...), uint64(dst.Cols), uint64(dst.Rows)), strides...)
	return b.run(op.String(), func() error { return b.launchRows(name, dst.Rows, args...) })
}

// Add sets dst = a + b; b has a's rows or one row, repeated.
func (b *Backend) Add(dst, x, y backend.Tensor) error {
	return b.elementwise(backend.OpAdd, kernels.AddF32, dst, []backend.Tensor{x, y}, true)
}

// Mul sets dst = a·b; b has a's rows or one row, repeated.
func (b *Backend) Mul(dst, x, y backend.Tensor) error {
	return b.elementwise(backend.OpMul, kernels.MulF32, dst, []backend.Tensor{x, y}, true)
}

// Scale sets dst = x·s.
func (b *Backend) Scale(dst, x backend.Tensor, s float32) error {
	return b.elementwise(backend.OpScale, kernels.ScaleF32, dst, []backend.Tensor{x}, false, f64(s))
}

// ScaleRows multiplies row t of x by s[t] (one column, contiguous).
func (b *Backend) ScaleRows(dst, x, s backend.Tensor) error {
	sp, err := b.contiguous(s, tensor.F32, "scale")
	if err != nil {
		return err
	}
	if s.Elements() != x.Rows {
		return fmt.Errorf("%s: scale: %d factors for %d rows", b.dev.Name, s.Elements(), x.Rows)
	}
	return b.elementwise(backend.OpScale, kernels.ScaleRowsF32, dst, []backend.Tensor{x}, false, uint64(sp))
}

// unaryKernels are Unary's kernels.
var unaryKernels = map[backend.Unary]string{backend.Sigmoid: kernels.SigmoidF32, backend.Softplus: kernels.SoftplusF32,
	backend.SiLU: kernels.SiLUF32}

// Unary applies f element-wise.
func (b *Backend) Unary(dst, x backend.Tensor, f backend.Unary) error {
	name, ok := unaryKernels[f]
	if !ok {
		return fmt.Errorf("%s: unary: unknown function %d", b.dev.Name, f)
	}
	return b.elementwise(backend.OpUnary, name, dst, []backend.Tensor{x}, false)
}

// SwiGLU sets dst = silu(gate)·up.
func (b *Backend) SwiGLU(dst, gate, up backend.Tensor) error {
	return b.elementwise(backend.OpSwiGLU, kernels.SwiGLUF32, dst, []backend.Tensor{gate, up}, false)
}

// SwiGLUOAI is gpt-oss's clamped SwiGLU.
func (b *Backend) SwiGLUOAI(dst, gate, up backend.Tensor, alpha, limit float32) error {
	return b.elementwise(backend.OpSwiGLU, kernels.SwiGLUOAIF32, dst, []backend.Tensor{gate, up}, false, f64(alpha), f64(limit))
}

// RMSNorm normalises each row of x into dst, times w (one row) unless w is absent.
func (b *Backend) RMSNorm(dst, x, w backend.Tensor, eps float32) error {
	var wp cu.DevicePtr
	if w.Valid() {
		var err error
		if wp, err = b.contiguous(w, tensor.F32, "rms-norm"); err != nil {
			return err
		}
		if w.Elements() != x.Cols {
			return fmt.Errorf("%s: rms-norm: weights of %d for rows of %d", b.dev.Name, w.Elements(), x.Cols)
		}
	}
	d, ds, err := b.f32Operand(dst, backend.OpRMSNorm)
	if err != nil {
		return err
	}
	xp, xs, err := b.f32Operand(x, backend.OpRMSNorm)
	if err != nil {
		return err
	}
	if dst.Rows != x.Rows || dst.Cols != x.Cols {
		return fmt.Errorf("%s: rms-norm: %s into %s", b.dev.Name, x, dst)
	}
	if x.Elements() == 0 {
		return nil
	}
	return b.run("rms-norm", func() error {
		return b.launchWarpRows(kernels.RMSNormF32, x.Rows, uint64(d), uint64(xp), uint64(wp), f64(eps),
			uint64(x.Cols), uint64(x.Rows), ds, xs)
	})
}

// L2Norm scales each row of x in place to unit L2 norm, the norm clamped below at eps.
func (b *Backend) L2Norm(x backend.Tensor, eps float32) error {
	xp, xs, err := b.f32Operand(x, backend.OpL2Norm)
	if err != nil || x.Elements() == 0 {
		return err
	}
	return b.run("l2-norm", func() error {
		return b.launchWarpRows(kernels.L2NormF32, x.Rows, uint64(xp), f64(eps), uint64(x.Cols), uint64(x.Rows), xs)
	})
}

// LayerNorm is tensor.LayerNorm on each row of x in place (see kernels.LayerNormF32): the
// CPU's bits.
func (b *Backend) LayerNorm(x, w, bias backend.Tensor, eps float32) error {
	xp, xs, err := b.f32Operand(x, backend.OpLayerNorm)
	if err != nil {
		return err
	}
	if w.Elements() != x.Cols || bias.Elements() != x.Cols {
		return fmt.Errorf("%s: layer-norm: %s by %s plus %s: want one row of %d each", b.dev.Name, x, w, bias, x.Cols)
	}
	wp, err := b.contiguous(w, tensor.F32, "layer-norm")
	if err != nil {
		return err
	}
	bp, err := b.contiguous(bias, tensor.F32, "layer-norm")
	if err != nil || x.Elements() == 0 {
		return err
	}
	return b.run("layer-norm", func() error {
		return b.launchThreadRows(kernels.LayerNormF32, x.Rows, uint64(xp), uint64(wp), uint64(bp), f64(eps), uint64(x.Cols), uint64(x.Rows), xs)
	})
}

// Hadamard is tensor.Hadamard on each row of x in place (see kernels.HadamardF32): the
// CPU's bits.
func (b *Backend) Hadamard(x backend.Tensor) error {
	xp, xs, err := b.f32Operand(x, backend.OpHadamard)
	if err != nil {
		return err
	}
	if x.Cols&(x.Cols-1) != 0 {
		return fmt.Errorf("%s: hadamard: %s: rows of %d, not a power of two", b.dev.Name, x, x.Cols)
	}
	if x.Elements() == 0 {
		return nil
	}
	return b.run("hadamard", func() error {
		return b.launchThreadRows(kernels.HadamardF32, x.Rows, uint64(xp), uint64(x.Cols), uint64(x.Rows), xs)
	})
}

// AddID adds to each slot's row of x the row of bias its expert id selects. The ids are
// the router's, on the device: one outside the rows of bias is skipped, not reported (the
// check would need them on the host).
func (b *Backend) AddID(x, bias, ids backend.Tensor) error {
	xp, xs, err := b.f32Operand(x, backend.OpAddID)
	if err != nil {
		return err
	}
	bp, bs, err := b.f32Operand(bias, backend.OpAddID)
	if err != nil {
		return err
	}
	ip, err := b.contiguous(ids, tensor.I32, "add-id")
	if err != nil {
		return err
	}
	if bias.Cols != x.Cols || ids.Elements() != x.Rows {
		return fmt.Errorf("%s: add-id: rows of %s by %s from %s", b.dev.Name, x, ids, bias)
	}
	if x.Elements() == 0 {
		return nil
	}
	return b.run("add-id", func() error {
		return b.launchRows(kernels.AddIDF32, x.Rows, uint64(xp), uint64(bp), uint64(ip), uint64(x.Cols), uint64(x.Rows),
			uint64(bias.Rows), xs, bs)
	})
}

// MapIDs sets dst[i] to table[ids[i]], -1 where ids[i] is -1 or beyond the table.
func (b *Backend) MapIDs(dst, ids, table backend.Tensor) error {
	d, err := b.contiguous(dst, tensor.I32, "map-ids")
	if err != nil {
		return err
	}
	ip, err := b.contiguous(ids, tensor.I32, "map-ids")
	if err != nil {
		return err
	}
	tp, err := b.contiguous(table, tensor.I32, "map-ids")
	if err != nil {
		return err
	}
	n := dst.Elements()
	if ids.Elements() != n || table.Rows != 1 {
		return fmt.Errorf("%s: map-ids: %s from %s by the table %s", b.dev.Name, dst, ids, table)
	}
	if n == 0 {
		return nil
	}
	return b.run("map-ids", func() error {
		return b.launch(b.op[kernels.MapIDsI32], min(ceilDiv(n, kernels.OpBlockX), kernels.MaxGridX), 1, kernels.OpBlockX, 1,
			uint64(d), uint64(ip), uint64(tp), uint64(n), uint64(table.Cols))
	})
}

// WeightedSum sets dst[t] to the sum over slots j of y[t·k+j]·w[t·k+j], in slot order.
func (b *Backend) WeightedSum(dst, y, w backend.Tensor, k int) error {
	d, err := b.contiguous(dst, tensor.F32, "weighted-sum")
	if err != nil {
		return err
	}
	yp, err := b.contiguous(y, tensor.F32, "weighted-sum")
	if err != nil {
		return err
	}
	wp, err := b.contiguous(w, tensor.F32, "weighted-sum")
	if err != nil {
		return err
	}
	n, cols := dst.Rows, dst.Cols
	if k <= 0 || y.Cols != cols || y.Rows != n*k || w.Elements() != n*k {
		return fmt.Errorf("%s: weighted-sum: %s weighted by %s into %s, %d slots", b.dev.Name, y, w, dst, k)
	}
	if dst.Elements() == 0 {
		return nil
	}
	return b.run("weighted-sum", func() error {
		return b.launchRows(kernels.WeightedSumF32, n, uint64(d), uint64(yp), uint64(wp), uint64(k), uint64(cols), uint64(n))
	})
}

// RoPE rotates x in place (rows of rowLen values, the rows of token t at pos[t]). The
// angles are tensor.RoPE's own, computed on the host (so bit for bit the CPU's) and copied
// in; the rotation is the kernel's, the CPU's arithmetic.
func (b *Backend) RoPE(x backend.Tensor, rowLen int, r *tensor.RoPE, pos []int32) error {
	xp, err := b.contiguous(x, tensor.F32, "rope")
	if err != nil {
		return err
	}
	n := x.Elements()
	if rowLen <= 0 || n%rowLen != 0 || len(pos) == 0 || n/rowLen%len(pos) != 0 || r.Dims <= 0 || r.Dims%2 != 0 ||
		r.Offset < 0 || r.Offset+r.Dims > rowLen || r.Mode != tensor.RoPENormal && r.Mode != tensor.RoPENeoX ||
		r.FreqFactors != nil && len(r.FreqFactors) < r.Dims/2 {
		return fmt.Errorf("%s: rope: rows of %d over %s at %d positions, %d dims at offset %d, mode %d", b.dev.Name, rowLen, x,
			len(pos), r.Dims, r.Offset, r.Mode)
	}
	rows := n / rowLen
	neox := uint64(0)
	if r.Mode == tensor.RoPENeoX {
		neox = 1
	}
	return b.run("rope", func() error {
		table, err := b.ropeTable(r, pos)
		if err != nil {
			return err
		}
		return b.launchRows(kernels.RoPEF32, rows, uint64(xp), uint64(table), uint64(rowLen), uint64(rows),
			uint64(rows/len(pos)), uint64(r.Dims/2), uint64(r.Offset), neox)
	})
}

// ropeAngles are the cosines and sines of one RoPE at the positions pos, in device memory:
// computed for the first layer that asks, reused by the others.
type ropeAngles struct {
	rope  tensor.RoPE
	pos   []int32
	table []float32
	dev   deviceBuffer
}

// ropeTables is how many sets of angles the backend keeps, as the CPU backend does: every
// layer of a model shares one, or two where sliding-window layers have their own base.
const ropeTables = 4

// ropeTable returns the device address of r's angles at pos, computing and copying them in
// unless a kept set matches. A set is overwritten only by a copy queued after the kernels
// that read it. New positions of a kept RoPE overwrite its own set, so that a decode step
// copies its angles to the same place as the step before and its CUDA graph replays.
func (b *Backend) ropeTable(r *tensor.RoPE, pos []int32) (cu.DevicePtr, error) {
	slot := -1
	for i := range b.angles {
		if a := &b.angles[i]; a.rope.SameAngles(r) {
			if slices.Equal(a.pos, pos) {
				return a.dev.ptr, nil
			}
			slot = i
		}
	}
	if slot < 0 {
		if len(b.angles) < ropeTables {
			b.angles = append(b.angles, ropeAngles{})
		}
		slot = b.nextRoPE % len(b.angles)
		b.nextRoPE++
	}
	a := &b.angles[slot]
	a.rope, a.pos = *r, append(a.pos[:0], pos...)
	a.rope.FreqFactors = slices.Clone(r.FreqFactors) // SameAngles compares them later
	a.table = slices.Grow(a.table[:0], len(pos)*r.Dims)[:len(pos)*r.Dims]
	r.Angles(a.table, pos)
	n := int64(len(a.table)) * 4
	if err := a.dev.reserve(n, b.settle); err != nil {
		return 0, err
	}
	b.stats.CopyInBytes += n
	return a.dev.ptr, b.copyIn(a.dev.ptr, unsafe.Slice((*byte)(unsafe.Pointer(&a.table[0])), n))
}

// SetRows converts rows of src (F32) into rows first.. of the cache dst (F32, F16 or
// Q8_0), as tensor.QuantizeActivations.
func (b *Backend) SetRows(dst backend.Tensor, first int, src backend.Tensor) error {
	if src.Cols != dst.Cols || first < 0 || first+src.Rows > dst.Rows {
		return fmt.Errorf("%s: set-rows: %s at row %d of %s", b.dev.Name, src, first, dst)
	}
	name := kernels.SetRows(dst.Type)
	if name == "" || dst.Type == tensor.Q8_0 && dst.Cols%32 != 0 {
		return fmt.Errorf("%s: set-rows into %s: want an f32, f16 or q8_0 cache", b.dev.Name, dst)
	}
	sp, ss, err := b.f32Operand(src, backend.OpSetRows)
	if err != nil {
		return err
	}
	d, err := b.address(dst, "set-rows")
	if err != nil || src.Elements() == 0 {
		return err
	}
	return b.run("set-rows", func() error {
		// The kernel reads the first row from device memory (see set_rows_f32).
		b.words = append(b.words[:0], int32(first))
		if err := b.send(&b.route, b.words); err != nil {
			return err
		}
		return b.launchRows(name, src.Rows, uint64(d), uint64(b.route.ptr), uint64(sp), uint64(src.Cols), uint64(src.Rows), uint64(dst.Stride), ss)
	})
}

// Attention is flash attention of q over the cache's first kvLen positions (see
// kernels.AttentionF32), a warp per (token, query head); heads larger than the kernel
// takes run on the host (onHost). tensor.AttnPrecise, and tensor.AttnGGML for the batches
// ggml runs its tiled kernel on (p.Batch counts the whole batch), get float32 queries; AttnGGML below them gets ggml-cpu's
// per-row numerics (queries converted to the K cache's dot-product type, an F16 V summed in
// F16), as package tensor's kernels do.
func (b *Backend) Attention(dst, q backend.Tensor, heads int, pos []int32, k, v, sinks backend.Tensor, kvLen int, p tensor.AttnParams) error {
	dk, dv := q.Cols, dst.Cols
	kType, kOK := kernels.AttentionCache(k.Type)
	vType, vOK := kernels.AttentionCache(v.Type)
	if dk <= 0 || dv <= 0 || k.Cols%dk != 0 || v.Cols%dv != 0 || kvLen < 0 || k.Rows <= 0 || v.Rows != k.Rows || p.Window < 0 {
		return fmt.Errorf("%s: attention: queries %s into %s over caches %s and %s, %d positions", b.dev.Name, q, dst, k, v, kvLen)
	}
	// A cache of fewer rows than positions is a ring (position j at row j mod its rows).
	if err := tensor.CheckRing(pos, kvLen, p.Window, k.Rows); err != nil {
		return fmt.Errorf("%s: %w", b.dev.Name, err)
	}
	kvHeads := k.Cols / dk
	if heads <= 0 || heads%kvHeads != 0 || v.Cols/dv != kvHeads || q.Rows != len(pos)*heads || dst.Rows != q.Rows {
		return fmt.Errorf("%s: attention: %d query heads of %d tokens (%s) over %d K heads and %d V heads", b.dev.Name, heads, len(pos), q, kvHeads, v.Cols/dv)
	}
	// The kernels attend whole ranges of positions; a sparse choice (p.Keep) runs on the host.
	if !kOK || !vOK || dk > kernels.AttentionMaxDim || dv > kernels.AttentionMaxDim || p.Keep != nil {
		held := min(kvLen, k.Rows)
		return b.onHost([]backend.Tensor{dst}, []backend.Tensor{q, k.Slice(0, held), v.Slice(0, held), sinks}, func(out, in []backend.Tensor) error {
			return b.host.Attention(out[0], in[0], heads, pos, in[1], in[2], in[3], kvLen, p)
		})
	}
	d, err := b.contiguous(dst, tensor.F32, "attention")
	if err != nil {
		return err
	}
	qp, err := b.contiguous(q, tensor.F32, "attention")
	if err != nil {
		return err
	}
	kp, err := b.address(k, "attention")
	if err != nil {
		return err
	}
	vp, err := b.address(v, "attention")
	if err != nil {
		return err
	}
	var sp cu.DevicePtr
	if sinks.Valid() {
		if sp, err = b.contiguous(sinks, tensor.F32, "attention"); err != nil {
			return err
		}
		if sinks.Elements() != heads {
			return fmt.Errorf("%s: attention: %d sinks for %d heads", b.dev.Name, sinks.Elements(), heads)
		}
	}
	if q.Rows == 0 {
		return nil
	}
	ggml := uint64(0)
	if p.Numerics == tensor.AttnGGML && !tensor.TiledAttention(max(len(pos), p.Batch), tensor.KV{Type: k.Type, Dim: dk}, tensor.KV{Type: v.Type, Dim: dv}) {
		ggml = 1
	}
	return b.run("attention", func() error {
		// The kernel reads the cache's length after the positions (see attention_f32).
		b.words = append(append(b.words[:0], pos...), int32(kvLen))
		if err := b.send(&b.route, b.words); err != nil {
			return err
		}
		return b.launchWarpRows(kernels.AttentionF32, q.Rows, uint64(d), uint64(qp), uint64(kp), uint64(vp), uint64(sp),
			uint64(b.route.ptr), uint64(heads), uint64(kvHeads), uint64(dk), uint64(dv), kType, vType,
			uint64(k.Stride), uint64(v.Stride), f64(p.Scale), uint64(p.Window), uint64(len(pos)), ggml, uint64(k.Rows))
	})
}

// CausalConv is the depthwise causal convolution over the rows of x (see
// kernels.CausalConvF32), the state updated in place: the CPU's bits.
func (b *Backend) CausalConv(dst, x, state, w backend.Tensor) error {
	taps, channels := w.Rows, w.Cols
	if taps < 1 || x.Cols != channels || dst.Cols != channels || dst.Rows != x.Rows || state.Elements() != (taps-1)*channels {
		return fmt.Errorf("%s: causal-conv: %s into %s, state %s, kernel %s (taps × channels)", b.dev.Name, x, dst, state, w)
	}
	var ptrs [4]cu.DevicePtr
	for i, t := range []backend.Tensor{dst, x, state, w} {
		p, err := b.contiguous(t, tensor.F32, "causal-conv")
		if err != nil {
			return err
		}
		ptrs[i] = p
	}
	if x.Rows == 0 {
		return nil
	}
	return b.run("causal-conv", func() error {
		return b.launchThreadRows(kernels.CausalConvF32, channels,
			uint64(ptrs[0]), uint64(ptrs[1]), uint64(ptrs[2]), uint64(ptrs[3]), uint64(channels), uint64(taps), uint64(x.Rows))
	})
}

// IndexerScores runs the lightning indexer over the cache of keys on the GPU, a warp per
// (token, position); keys of a type or size the kernel lacks run on the host.
func (b *Backend) IndexerScores(dst, q backend.Tensor, heads int, pos []int32, keys, w backend.Tensor, kvLen int) error {
	dim := q.Cols
	kType, ok := kernels.AttentionCache(keys.Type)
	if heads <= 0 || keys.Cols != dim || kvLen < 0 || kvLen > keys.Rows || q.Rows != len(pos)*heads || w.Rows != len(pos) || w.Cols != heads ||
		dst.Rows != len(pos) || dst.Cols != kvLen {
		return fmt.Errorf("%s: indexer-scores: %s by keys %s and weights %s into %s, %d heads of %d tokens, %d positions", b.dev.Name, q, keys, w, dst, heads, len(pos), kvLen)
	}
	if !ok || dim > kernels.AttentionMaxDim {
		return b.onHost([]backend.Tensor{dst}, []backend.Tensor{q, keys.Slice(0, kvLen), w}, func(out, in []backend.Tensor) error {
			return b.host.IndexerScores(out[0], in[0], heads, pos, in[1], in[2], kvLen)
		})
	}
	d, err := b.contiguous(dst, tensor.F32, "indexer-scores")
	if err != nil {
		return err
	}
	qp, err := b.contiguous(q, tensor.F32, "indexer-scores")
	if err != nil {
		return err
	}
	wp, err := b.contiguous(w, tensor.F32, "indexer-scores")
	if err != nil {
		return err
	}
	kp, err := b.address(keys, "indexer-scores")
	if err != nil {
		return err
	}
	if dst.Elements() == 0 {
		return nil
	}
	return b.run("indexer-scores", func() error {
		if err := b.send(&b.route, pos); err != nil {
			return err
		}
		return b.launchWarpRows(kernels.IndexerScoresF32, dst.Elements(), uint64(d), uint64(qp), uint64(wp), uint64(kp),
			uint64(b.route.ptr), uint64(heads), uint64(dim), uint64(kvLen), kType, uint64(keys.Stride), uint64(len(pos)))
	})
}

// GatedDeltaRule is Gated DeltaNet's recurrence for decay.Rows tokens (see
// kernels.GatedDeltaRuleF32), the states updated in place; heads larger than the kernel
// takes run on the host (onHost).
func (b *Backend) GatedDeltaRule(o, qkv, decay, beta, states backend.Tensor, r tensor.DeltaRule) error {
	n := decay.Rows
	if r.Dim <= 0 || r.KHeads <= 0 || r.VHeads <= 0 || r.VHeads%r.KHeads != 0 || r.Stride < 0 || n < 0 {
		return fmt.Errorf("%s: gated-delta-rule: %+v over %d tokens", b.dev.Name, r, n)
	}
	if r.Dim > kernels.DeltaMaxDim {
		return b.onHost([]backend.Tensor{o, states}, []backend.Tensor{qkv, decay, beta, states}, func(out, in []backend.Tensor) error {
			return b.host.GatedDeltaRule(out[0], in[0], in[1], in[2], out[1], r)
		})
	}
	kd, last := r.KHeads*r.Dim, (n-1)*r.Stride
	if n > 0 && (qkv.Elements() < last+2*kd+r.VHeads*r.Dim || decay.Elements() < n*r.VHeads || beta.Elements() < n*r.VHeads ||
		o.Elements() < n*r.VHeads*r.Dim) || states.Elements() != r.VHeads*r.Dim*r.Dim {
		return fmt.Errorf("%s: gated-delta-rule: %s, %s, %s, %s and %s too short for %d tokens of %+v", b.dev.Name, o, qkv, decay, beta, states, n, r)
	}
	var ptrs [5]cu.DevicePtr
	for i, t := range []backend.Tensor{o, qkv, decay, beta, states} {
		p, err := b.contiguous(t, tensor.F32, "gated-delta-rule")
		if err != nil {
			return err
		}
		ptrs[i] = p
	}
	if n == 0 {
		return nil
	}
	q := uint64(ptrs[1])
	return b.run("gated-delta-rule", func() error {
		return b.launchWarpRows(kernels.GatedDeltaRuleF32, r.VHeads*r.Dim, uint64(ptrs[0]), q, q+4*uint64(kd), q+8*uint64(kd),
			uint64(ptrs[2]), uint64(ptrs[3]), uint64(ptrs[4]), uint64(n), uint64(r.Dim), uint64(r.KHeads), uint64(r.VHeads),
			boolArg(r.Grouped), uint64(r.Stride), f64(1/float32(math.Sqrt(float64(r.Dim)))))
	})
}

// boolArg passes a flag to a kernel, which declares it a 64-bit integer.
func boolArg(v bool) uint64 {
	if v {
		return 1
	}
	return 0
}

// Route is the MoE router for each row of logits (see kernels.RouteF32): ids (I32) and
// weights receive r.Used slots per token.
func (b *Backend) Route(ids, weights, logits, bias backend.Tensor, r tensor.RouterConfig) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("%s: route: %w", b.dev.Name, err)
	}
	lp, err := b.contiguous(logits, tensor.F32, "route")
	if err != nil {
		return err
	}
	ip, err := b.contiguous(ids, tensor.I32, "route")
	if err != nil {
		return err
	}
	wp, err := b.contiguous(weights, tensor.F32, "route")
	if err != nil {
		return err
	}
	var bp cu.DevicePtr
	if bias.Valid() {
		if bp, err = b.contiguous(bias, tensor.F32, "route"); err != nil {
			return err
		}
	}
	n, e, k := logits.Rows, r.Experts, r.Used
	if logits.Cols != e || ids.Elements() != n*k || weights.Elements() != n*k || bias.Valid() && bias.Elements() != e {
		return fmt.Errorf("%s: route: logits %s, ids %s, weights %s for %d experts, %d used", b.dev.Name, logits, ids, weights, e, k)
	}
	if n == 0 {
		return nil
	}
	groups := max(r.Groups, 1)
	norm := uint64(0)
	if r.NormWeights {
		norm = 1
	}
	return b.run("route", func() error {
		if err := b.routeScratch.reserve(int64(n)*int64(kernels.RouteScratchWords(e, groups))*4, b.settle); err != nil {
			return err
		}
		return b.launch(b.op[kernels.RouteF32], min(ceilDiv(n, kernels.OpBlockX), kernels.MaxGridX), 1, kernels.OpBlockX, 1,
			uint64(ip), uint64(wp), uint64(lp), uint64(bp), uint64(b.routeScratch.ptr), uint64(e), uint64(k), uint64(r.Gating),
			norm, f64(r.Scale), uint64(groups), uint64(r.GroupsUsed), uint64(max(r.SER.MinExperts, 0)), f64(r.SER.Threshold), uint64(n))
	})
}
