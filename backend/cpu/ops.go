package cpu

import (
	"fmt"
	"slices"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/tensor"
)

// The operations: each checks that its operands are this backend's tensors of the right
// shape, then runs the tensor package's kernel. A shape error is the caller's bug, reported
// as an error naming the operation rather than a panic in a kernel.

func (b *Backend) shapeError(op string, format string, args ...any) error {
	return fmt.Errorf("%s: %s: %s", b.dev.Name, op, fmt.Sprintf(format, args...))
}

// product checks a weight operation's operands and counts it: the weight's matrix, the
// output's elements and the input's (none for the zero Tensor: get-rows has no input).
func (b *Backend) product(op backend.Op, w backend.Weight, dst, x backend.Tensor) (*tensor.Matrix, []float32, []float32, error) {
	if err := b.allow(op); err != nil {
		return nil, nil, nil, err
	}
	m, err := b.matrix(w)
	if err != nil {
		return nil, nil, nil, err
	}
	d, err := b.f32(dst, op.String())
	if err != nil {
		return nil, nil, nil, err
	}
	var xs []float32
	if x.Valid() {
		if xs, err = b.f32(x, op.String()); err != nil {
			return nil, nil, nil, err
		}
	}
	b.ops++
	return m, d, xs, nil
}

// products is product for several weights that read one input.
func (b *Backend) products(op backend.Op, ws []backend.Weight, dsts []backend.Tensor, x backend.Tensor) ([]*tensor.Matrix, [][]float32, []float32, error) {
	if err := b.allow(op); err != nil {
		return nil, nil, nil, err
	}
	ms, err := b.matrices(ws)
	if err != nil {
		return nil, nil, nil, err
	}
	ds, err := b.outputs(dsts, op.String())
	if err != nil {
		return nil, nil, nil, err
	}
	xs, err := b.f32(x, op.String())
	if err != nil {
		return nil, nil, nil, err
	}
	b.ops++
	return ms, ds, xs, nil
}

// GetRows is tensor.GetRows.
func (b *Backend) GetRows(dst backend.Tensor, w backend.Weight, ids []int32) error {
	m, d, _, err := b.product(backend.OpGetRows, w, dst, backend.Tensor{})
	if err != nil {
		return err
	}
	return weightError(w, tensor.GetRows(d, m, ids))
}

// MatMul is tensor.Pool.MatMul.
func (b *Backend) MatMul(dst backend.Tensor, w backend.Weight, x backend.Tensor) error {
	m, d, xs, err := b.product(backend.OpMatMul, w, dst, x)
	if err != nil {
		return err
	}
	return weightError(w, b.pool.MatMul(d, m, xs))
}

// MatMuls is tensor.Pool.MatMuls.
func (b *Backend) MatMuls(dsts []backend.Tensor, ws []backend.Weight, x backend.Tensor) error {
	ms, ds, xs, err := b.products(backend.OpMatMul, ws, dsts, x)
	if err != nil {
		return err
	}
	if err := b.pool.MatMuls(ds, ms, xs); err != nil {
		return fmt.Errorf("tensors %s: %w", names(ws), err)
	}
	return nil
}

// MulMatID is tensor.Pool.MulMatID.
func (b *Backend) MulMatID(dst backend.Tensor, w backend.Weight, x, ids backend.Tensor, k int) error {
	m, d, xs, err := b.product(backend.OpMulMatID, w, dst, x)
	if err != nil {
		return err
	}
	is, err := b.i32(ids, "mul-mat-id")
	if err != nil {
		return err
	}
	return weightError(w, b.pool.MulMatID(d, m, xs, is, k))
}

// MulMatIDs is tensor.Pool.MulMatIDs.
func (b *Backend) MulMatIDs(dsts []backend.Tensor, ws []backend.Weight, x, ids backend.Tensor, k int) error {
	ms, ds, xs, err := b.products(backend.OpMulMatID, ws, dsts, x)
	if err != nil {
		return err
	}
	is, err := b.i32(ids, "mul-mat-id")
	if err != nil {
		return err
	}
	if err := b.pool.MulMatIDs(ds, ms, xs, is, k); err != nil {
		return fmt.Errorf("tensors %s: %w", names(ws), err)
	}
	return nil
}

// MatMulStack is tensor.Pool.MatMulStack with row i of x on matrix i mod Experts.
func (b *Backend) MatMulStack(dst backend.Tensor, w backend.Weight, x backend.Tensor) error {
	m, d, xs, err := b.product(backend.OpMatMulStack, w, dst, x)
	if err != nil {
		return err
	}
	e := m.Experts()
	if x.Rows%e != 0 {
		return b.shapeError("mul-mat-stack", "%d rows over %d matrices of %s", x.Rows, e, w.Name())
	}
	return weightError(w, b.pool.MatMulStack(d, m, xs, b.stack(x.Rows, e), e))
}

// weightError names the weight in a kernel's error.
func weightError(w backend.Weight, err error) error {
	if err != nil {
		return fmt.Errorf("tensor %s: %w", w.Name(), err)
	}
	return nil
}

// pair is the rows of dst and x, which must have the same shape.
func (b *Backend) pair(op string, dst, x backend.Tensor) (d []float32, ds int, xs []float32, xss int, err error) {
	if dst.Rows != x.Rows || dst.Cols != x.Cols {
		return nil, 0, nil, 0, b.shapeError(op, "%s into %s", x, dst)
	}
	if d, ds, err = b.rows(dst, op); err != nil {
		return
	}
	xs, xss, err = b.rows(x, op)
	return
}

// RMSNorm is tensor.RMSNorm then tensor.Mul by w, row by row (either may be strided).
func (b *Backend) RMSNorm(dst, x, w backend.Tensor, eps float32) error {
	if err := b.allow(backend.OpRMSNorm); err != nil {
		return err
	}
	d, ds, xs, xss, err := b.pair("rms-norm", dst, x)
	if err != nil {
		return err
	}
	var ws []float32
	if w.Valid() {
		if ws, err = b.f32(w, "rms-norm"); err != nil {
			return err
		}
		if len(ws) != x.Cols {
			return b.shapeError("rms-norm", "weights of %d for rows of %d", len(ws), x.Cols)
		}
	}
	b.ops++
	cols := x.Cols
	if dst.Contiguous() && x.Contiguous() {
		tensor.RMSNorm(d, xs, cols, eps)
		if ws != nil {
			tensor.Mul(d, d, ws)
		}
		return nil
	}
	for r := range x.Rows {
		dr, xr := d[r*ds:][:cols], xs[r*xss:][:cols]
		tensor.RMSNorm(dr, xr, cols, eps)
		if ws != nil {
			tensor.Mul(dr, dr, ws)
		}
	}
	return nil
}

// L2Norm is tensor.L2Norm on each row.
func (b *Backend) L2Norm(x backend.Tensor, eps float32) error {
	if err := b.allow(backend.OpL2Norm); err != nil {
		return err
	}
	xs, stride, err := b.rows(x, "l2-norm")
	if err != nil {
		return err
	}
	b.ops++
	for r := range x.Rows {
		tensor.L2Norm(xs[r*stride:][:x.Cols], eps)
	}
	return nil
}

// LayerNorm is tensor.LayerNorm on each row.
func (b *Backend) LayerNorm(x, w, bias backend.Tensor, eps float32) error {
	if err := b.allow(backend.OpLayerNorm); err != nil {
		return err
	}
	xs, stride, err := b.rows(x, "layer-norm")
	if err != nil {
		return err
	}
	ws, err := b.f32(w, "layer-norm")
	if err != nil {
		return err
	}
	bs, err := b.f32(bias, "layer-norm")
	if err != nil {
		return err
	}
	if len(ws) != x.Cols || len(bs) != x.Cols {
		return b.shapeError("layer-norm", "%s by %s plus %s: want one row of %d each", x, w, bias, x.Cols)
	}
	b.ops++
	for r := range x.Rows {
		tensor.LayerNorm(xs[r*stride:][:x.Cols], ws, bs, eps)
	}
	return nil
}

// Hadamard is tensor.Hadamard on each row.
func (b *Backend) Hadamard(x backend.Tensor) error {
	if err := b.allow(backend.OpHadamard); err != nil {
		return err
	}
	if x.Cols&(x.Cols-1) != 0 {
		return b.shapeError("hadamard", "%s: rows of %d, not a power of two", x, x.Cols)
	}
	xs, stride, err := b.rows(x, "hadamard")
	if err != nil {
		return err
	}
	b.ops++
	for r := range x.Rows {
		tensor.Hadamard(xs[r*stride:][:x.Cols])
	}
	return nil
}

// broadcast is the elements of dst, a and b for an element-wise operation where b has a's
// rows or one row (contiguous tensors).
func (b *Backend) broadcast(o backend.Op, dst, x, y backend.Tensor) ([]float32, []float32, []float32, error) {
	if err := b.allow(o); err != nil {
		return nil, nil, nil, err
	}
	op := o.String()
	if dst.Rows != x.Rows || dst.Cols != x.Cols || y.Cols != x.Cols || y.Rows != x.Rows && y.Rows != 1 {
		return nil, nil, nil, b.shapeError(op, "%s and %s into %s", x, y, dst)
	}
	d, err := b.f32(dst, op)
	if err != nil {
		return nil, nil, nil, err
	}
	xs, err := b.f32(x, op)
	if err != nil {
		return nil, nil, nil, err
	}
	ys, err := b.f32(y, op)
	if err == nil {
		b.ops++
	}
	return d, xs, ys, err
}

// Add is tensor.Add.
func (b *Backend) Add(dst, x, y backend.Tensor) error {
	d, xs, ys, err := b.broadcast(backend.OpAdd, dst, x, y)
	if err != nil || len(xs) == 0 {
		return err
	}
	tensor.Add(d, xs, ys)
	return nil
}

// Mul is tensor.Mul.
func (b *Backend) Mul(dst, x, y backend.Tensor) error {
	d, xs, ys, err := b.broadcast(backend.OpMul, dst, x, y)
	if err != nil || len(xs) == 0 {
		return err
	}
	tensor.Mul(d, xs, ys)
	return nil
}

// same is the elements of dst and x, contiguous tensors of one shape.
func (b *Backend) same(o backend.Op, dst, x backend.Tensor) ([]float32, []float32, error) {
	if err := b.allow(o); err != nil {
		return nil, nil, err
	}
	op := o.String()
	if dst.Rows != x.Rows || dst.Cols != x.Cols {
		return nil, nil, b.shapeError(op, "%s into %s", x, dst)
	}
	d, err := b.f32(dst, op)
	if err != nil {
		return nil, nil, err
	}
	xs, err := b.f32(x, op)
	if err == nil {
		b.ops++
	}
	return d, xs, err
}

// Scale is tensor.Scale.
func (b *Backend) Scale(dst, x backend.Tensor, s float32) error {
	d, xs, err := b.same(backend.OpScale, dst, x)
	if err != nil {
		return err
	}
	tensor.Scale(d, xs, s)
	return nil
}

// ScaleRows is tensor.Scale of each row by its own factor.
func (b *Backend) ScaleRows(dst, x, s backend.Tensor) error {
	d, xs, err := b.same(backend.OpScale, dst, x)
	if err != nil {
		return err
	}
	ss, err := b.f32(s, "scale")
	if err != nil {
		return err
	}
	if len(ss) != x.Rows {
		return b.shapeError("scale", "%d factors for %d rows", len(ss), x.Rows)
	}
	for r, f := range ss {
		tensor.Scale(d[r*x.Cols:][:x.Cols], xs[r*x.Cols:][:x.Cols], f)
	}
	return nil
}

// Unary is tensor.Sigmoid, Softplus or SiLU.
func (b *Backend) Unary(dst, x backend.Tensor, f backend.Unary) error {
	d, xs, err := b.same(backend.OpUnary, dst, x)
	if err != nil || len(xs) == 0 {
		return err
	}
	switch f {
	case backend.Sigmoid:
		tensor.Sigmoid(d, xs)
	case backend.Softplus:
		tensor.Softplus(d, xs)
	case backend.SiLU:
		tensor.SiLU(d, xs, x.Cols)
	default:
		return b.shapeError("unary", "unknown function %d", f)
	}
	return nil
}

// SwiGLU is tensor.SwiGLU.
func (b *Backend) SwiGLU(dst, gate, up backend.Tensor) error {
	d, g, u, err := b.glu(backend.OpSwiGLU, dst, gate, up)
	if err != nil || len(g) == 0 {
		return err
	}
	tensor.SwiGLU(d, g, u, gate.Cols)
	return nil
}

// SwiGLUOAI is tensor.SwiGLUOAI.
func (b *Backend) SwiGLUOAI(dst, gate, up backend.Tensor, alpha, limit float32) error {
	d, g, u, err := b.glu(backend.OpSwiGLU, dst, gate, up)
	if err != nil || len(g) == 0 {
		return err
	}
	tensor.SwiGLUOAI(d, g, u, alpha, limit)
	return nil
}

func (b *Backend) glu(o backend.Op, dst, gate, up backend.Tensor) ([]float32, []float32, []float32, error) {
	if up.Rows != gate.Rows || up.Cols != gate.Cols {
		return nil, nil, nil, b.shapeError(o.String(), "gate %s and up %s", gate, up)
	}
	d, g, err := b.same(o, dst, gate)
	op := o.String()
	if err != nil {
		return nil, nil, nil, err
	}
	u, err := b.f32(up, op)
	return d, g, u, err
}

// Copy copies rows of bytes: the types must match, and either tensor may be strided.
func (b *Backend) Copy(dst, src backend.Tensor) error {
	if err := b.allow(backend.OpCopy); err != nil {
		return err
	}
	if dst.Rows != src.Rows || dst.Cols != src.Cols || dst.Type != src.Type {
		return b.shapeError("copy", "%s into %s", src, dst)
	}
	if err := b.own(dst, "copy"); err != nil {
		return err
	}
	if err := b.own(src, "copy"); err != nil {
		return err
	}
	b.ops++
	d, s := dst.Buf.(*buffer).data, src.Buf.(*buffer).data
	rb := src.RowBytes()
	for r := range int64(src.Rows) {
		copy(d[dst.Off+r*dst.Stride:][:rb], s[src.Off+r*src.Stride:][:rb])
	}
	return nil
}

// RoPE is tensor.RoPE.ApplyAngles, with the angles of (r, pos) computed once and kept for
// the next layers that ask for the same.
func (b *Backend) RoPE(x backend.Tensor, rowLen int, r *tensor.RoPE, pos []int32) error {
	if err := b.allow(backend.OpRoPE); err != nil {
		return err
	}
	xs, err := b.f32(x, "rope")
	if err != nil {
		return err
	}
	if rowLen <= 0 || len(xs)%rowLen != 0 || len(pos) == 0 || len(xs)/rowLen%len(pos) != 0 {
		return b.shapeError("rope", "rows of %d over %s at %d positions", rowLen, x, len(pos))
	}
	b.ops++
	r.ApplyAngles(xs, rowLen, b.ropeTable(r, pos))
	return nil
}

func (b *Backend) ropeTable(r *tensor.RoPE, pos []int32) []float32 {
	for i := range b.angles {
		if a := &b.angles[i]; a.rope.SameAngles(r) && slices.Equal(a.pos, pos) {
			return a.table
		}
	}
	if len(b.angles) < ropeTables {
		b.angles = append(b.angles, ropeAngles{})
	}
	a := &b.angles[b.nextRoPE%len(b.angles)]
	b.nextRoPE++
	a.rope, a.pos = *r, append(a.pos[:0], pos...)
	a.table = slices.Grow(a.table[:0], len(pos)*r.Dims)[:len(pos)*r.Dims]
	r.Angles(a.table, pos)
	return a.table
}

// SetRows is tensor.QuantizeActivations of src into rows first.. of dst.
func (b *Backend) SetRows(dst backend.Tensor, first int, src backend.Tensor) error {
	if err := b.allow(backend.OpSetRows); err != nil {
		return err
	}
	if src.Cols != dst.Cols || first < 0 || first+src.Rows > dst.Rows {
		return b.shapeError("set-rows", "%s at row %d of %s", src, first, dst)
	}
	s, err := b.f32(src, "set-rows")
	if err != nil {
		return err
	}
	d, err := b.whole(dst.Slice(first, first+src.Rows), "set-rows")
	if err != nil {
		return err
	}
	b.ops++
	return tensor.QuantizeActivations(dst.Type, s, d)
}

// cache describes a KV cache tensor (a row per position, heads rows of dim each) to the
// attention kernel, as a ring of its rows (backend.Ops.Attention).
func (b *Backend) cache(x backend.Tensor, dim int) (tensor.KV, error) {
	if err := b.own(x, "attention"); err != nil {
		return tensor.KV{}, err
	}
	hb, err := x.Type.RowBytes(int64(dim))
	if err != nil || dim <= 0 || x.Cols%dim != 0 {
		return tensor.KV{}, b.shapeError("attention", "cache %s for heads of %d", x, dim)
	}
	data := x.Buf.(*buffer).data
	end := min(x.Off+int64(x.Rows)*x.Stride, int64(len(data)))
	return tensor.KV{Type: x.Type, Data: data[x.Off:end], Dim: dim, Heads: x.Cols / dim, PosStride: int(x.Stride), HeadStride: int(hb), Cells: x.Rows}, nil
}

// Attention is tensor.Pool.Attention over the caches k and v.
func (b *Backend) Attention(dst, q backend.Tensor, heads int, pos []int32, k, v, sinks backend.Tensor, kvLen int, p tensor.AttnParams) error {
	if err := b.allow(backend.OpAttention); err != nil {
		return err
	}
	d, err := b.f32(dst, "attention")
	if err != nil {
		return err
	}
	qs, err := b.f32(q, "attention")
	if err != nil {
		return err
	}
	kc, err := b.cache(k, q.Cols)
	if err != nil {
		return err
	}
	vc, err := b.cache(v, dst.Cols)
	if err != nil {
		return err
	}
	if sinks.Valid() {
		if p.Sinks, err = b.f32(sinks, "attention"); err != nil {
			return err
		}
	}
	b.ops++
	return b.pool.Attention(d, qs, heads, pos, kc, vc, kvLen, p)
}

// IndexerScores is tensor.Pool.IndexerScores over the cache of keys.
func (b *Backend) IndexerScores(dst, q backend.Tensor, heads int, pos []int32, keys, w backend.Tensor, kvLen int) error {
	if err := b.allow(backend.OpIndexerScores); err != nil {
		return err
	}
	d, err := b.f32(dst, "indexer-scores")
	if err != nil {
		return err
	}
	qs, err := b.f32(q, "indexer-scores")
	if err != nil {
		return err
	}
	ws, err := b.f32(w, "indexer-scores")
	if err != nil {
		return err
	}
	kc, err := b.cache(keys, q.Cols)
	if err != nil {
		return err
	}
	if keys.Cols != q.Cols || dst.Cols != kvLen {
		return b.shapeError("indexer-scores", "%s by keys %s into %s for %d positions", q, keys, dst, kvLen)
	}
	b.ops++
	return b.pool.IndexerScores(d, qs, heads, pos, kc, ws, kvLen)
}

// Route is tensor.Router.Route on each row of logits.
func (b *Backend) Route(ids, weights, logits, bias backend.Tensor, cfg tensor.RouterConfig) error {
	if err := b.allow(backend.OpRoute); err != nil {
		return err
	}
	if b.router == nil || b.router.Config() != cfg {
		r, err := tensor.NewRouter(cfg)
		if err != nil {
			return err
		}
		b.router = r
	}
	ls, err := b.f32(logits, "route")
	if err != nil {
		return err
	}
	is, err := b.i32(ids, "route")
	if err != nil {
		return err
	}
	ws, err := b.f32(weights, "route")
	if err != nil {
		return err
	}
	var bs []float32
	if bias.Valid() {
		if bs, err = b.f32(bias, "route"); err != nil {
			return err
		}
	}
	n, e, k := logits.Rows, cfg.Experts, cfg.Used
	if logits.Cols != e || len(is) != n*k || len(ws) != n*k || bs != nil && len(bs) != e {
		return b.shapeError("route", "logits %s, ids %s, weights %s for %d experts, %d used", logits, ids, weights, e, k)
	}
	b.ops++
	for t := range n {
		b.router.Route(ls[t*e:(t+1)*e], bs, is[t*k:(t+1)*k], ws[t*k:(t+1)*k])
	}
	return nil
}

// AddID adds row ids[s] of y to row s of x, for each slot s with an expert.
func (b *Backend) AddID(x, y, ids backend.Tensor) error {
	if err := b.allow(backend.OpAddID); err != nil {
		return err
	}
	xs, err := b.f32(x, "add-id")
	if err != nil {
		return err
	}
	ys, err := b.f32(y, "add-id")
	if err != nil {
		return err
	}
	is, err := b.i32(ids, "add-id")
	if err != nil {
		return err
	}
	cols := x.Cols
	if y.Cols != cols || len(is) != x.Rows {
		return b.shapeError("add-id", "rows of %s by %s from %s", x, ids, y)
	}
	b.ops++
	for s, id := range is {
		if id < 0 {
			continue
		}
		if int(id) >= y.Rows {
			return b.shapeError("add-id", "expert %d of %d", id, y.Rows)
		}
		row := xs[s*cols : (s+1)*cols]
		tensor.Add(row, row, ys[int(id)*cols:(int(id)+1)*cols])
	}
	return nil
}

// MapIDs sets dst[i] to table[ids[i]], or -1 where ids[i] is -1 or beyond the table.
func (b *Backend) MapIDs(dst, ids, table backend.Tensor) error {
	if err := b.allow(backend.OpMapIDs); err != nil {
		return err
	}
	ds, err := b.i32(dst, "map-ids")
	if err != nil {
		return err
	}
	is, err := b.i32(ids, "map-ids")
	if err != nil {
		return err
	}
	ts, err := b.i32(table, "map-ids")
	if err != nil {
		return err
	}
	if len(ds) != len(is) || table.Rows != 1 {
		return b.shapeError("map-ids", "%s from %s by the table %s", dst, ids, table)
	}
	b.ops++
	for i, id := range is {
		if id < 0 || int(id) >= len(ts) {
			ds[i] = -1
			continue
		}
		ds[i] = ts[id]
	}
	return nil
}

// WeightedSum sets out[t] = ((y[t,0]·w[t,0] + y[t,1]·w[t,1]) + y[t,2]·w[t,2]) + …, each
// product rounded before it is added, as llama.cpp multiplies the expert outputs by their
// weights (ffn_moe_weighted) and then adds the slots' views in order.
func (b *Backend) WeightedSum(dst, y, w backend.Tensor, k int) error {
	if err := b.allow(backend.OpWeightedSum); err != nil {
		return err
	}
	out, err := b.f32(dst, "weighted-sum")
	if err != nil {
		return err
	}
	ys, err := b.f32(y, "weighted-sum")
	if err != nil {
		return err
	}
	ws, err := b.f32(w, "weighted-sum")
	if err != nil {
		return err
	}
	n, cols := dst.Rows, dst.Cols
	if k <= 0 || y.Cols != cols || y.Rows != n*k || len(ws) != n*k {
		return b.shapeError("weighted-sum", "%s weighted by %s into %s, %d slots", y, w, dst, k)
	}
	b.ops++
	for t := range n {
		o := out[t*cols : (t+1)*cols]
		for j := range k {
			wj := ws[t*k+j]
			row := ys[(t*k+j)*cols:][:cols]
			if j == 0 {
				tensor.Scale(o, row, wj)
			} else {
				tensor.AddScaled(o, row, wj)
			}
		}
	}
	return nil
}

// CausalConv is tensor.CausalConv.Run with the kernel w ([taps][channels]).
func (b *Backend) CausalConv(dst, x, state, w backend.Tensor) error {
	d, xs, err := b.same(backend.OpCausalConv, dst, x)
	if err != nil {
		return err
	}
	st, err := b.f32(state, "causal-conv")
	if err != nil {
		return err
	}
	ws, err := b.f32(w, "causal-conv")
	if err != nil {
		return err
	}
	conv, err := tensor.CausalConvKernel(ws, w.Rows, w.Cols)
	if err != nil {
		return err
	}
	return conv.Run(d, xs, st)
}

// GatedDeltaRule is tensor.Pool.GatedDeltaRule over the query, key and value blocks of
// qkv's rows.
func (b *Backend) GatedDeltaRule(o, qkv, decay, beta, states backend.Tensor, r tensor.DeltaRule) error {
	if err := b.allow(backend.OpGatedDeltaRule); err != nil {
		return err
	}
	os, err := b.f32(o, "gated-delta-rule")
	if err != nil {
		return err
	}
	mixed, err := b.f32(qkv, "gated-delta-rule")
	if err != nil {
		return err
	}
	ds, err := b.f32(decay, "gated-delta-rule")
	if err != nil {
		return err
	}
	bs, err := b.f32(beta, "gated-delta-rule")
	if err != nil {
		return err
	}
	ss, err := b.f32(states, "gated-delta-rule")
	if err != nil {
		return err
	}
	kd := r.KHeads * r.Dim
	if len(mixed) < 2*kd {
		return b.shapeError("gated-delta-rule", "%s for %d key heads of %d", qkv, r.KHeads, r.Dim)
	}
	b.ops++
	return b.pool.GatedDeltaRule(os, mixed, mixed[kd:], mixed[2*kd:], ds, bs, ss, decay.Rows, r)
}
