package moe

import (
	"fmt"
	"slices"
	"unsafe"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/tensor"
)

// The forward passes compute on device tensors (backend.Tensor), each operation on one
// device: an operation with a weight on the device that holds the weight, an element-wise
// one on the device of its destination or first input. An operand on another device is
// copied there first (a crossing, the only place values move), so a layer whose weights
// share a device keeps its values there and a plan that moves the routed experts to the
// CPU costs two crossings per MoE layer: the normed input and the routing over, the
// experts' sum back.
//
// The helpers below keep the first error in c.err and do nothing once it is set, so that a
// forward pass reads as a sequence of operations (like llama.cpp's graph builders) and
// checks for an error once per block.

// value is an activation: a device tensor that the forward pass computes.
type value = backend.Tensor

// param is a small weight read as float32 (a norm's weights, a bias, attention sinks, a
// convolution kernel) on the device the plan gave it. The zero param is absent.
type param struct {
	t   value
	dev int
}

func (p param) valid() bool { return p.t.Valid() }

// deviceMemory is a pass's working memory on one device.
type deviceMemory struct {
	pass  arena // values that live through one forward pass (the residual stream, logits)
	layer arena // values of one layer
}

// fail records err as the pass's error unless one is recorded already.
func (c *pass) fail(err error) {
	if err != nil && c.err == nil {
		c.err = err
	}
}

// backendOf is the backend of device index dev.
func (c *pass) backendOf(dev int) backend.Backend { return c.m.backends[dev] }

// submit starts the work queued on device dev, where its backend holds work back until a
// wait (backend.Submitter), so that it runs while the pass computes on another device.
func (c *pass) submit(dev int) {
	if s, ok := c.backendOf(dev).(backend.Submitter); ok && c.err == nil {
		c.fail(s.Submit())
	}
}

// devOf is the index of the device holding x.
func (c *pass) devOf(x value) int {
	name := x.Device()
	for i, b := range c.m.names {
		if b == name {
			return i
		}
	}
	c.fail(fmt.Errorf("a value on %q, which is none of the model's devices", name))
	return 0
}

// alloc is a new F32 (or I32) value of rows×cols on dev, for the current layer.
func (c *pass) alloc(dev int, t tensor.Type, cols, rows int) value {
	return c.take(&c.mem[dev].layer, dev, t, cols, rows)
}

// allocPass is alloc for a value that lives through the forward pass.
func (c *pass) allocPass(dev int, cols, rows int) value {
	return c.take(&c.mem[dev].pass, dev, tensor.F32, cols, rows)
}

func (c *pass) take(a *arena, dev int, t tensor.Type, cols, rows int) value {
	if c.err != nil {
		return value{}
	}
	x, err := a.take(c.backendOf(dev), t, cols, rows)
	c.fail(err)
	return x
}

// to returns x on dev: x itself, or a copy made there (a crossing).
func (c *pass) to(dev int, x value) value {
	if c.err != nil || !x.Valid() || x.Device() == c.m.names[dev] {
		return x
	}
	y := c.copyTo(&c.mem[dev].layer, dev, x)
	c.arrive(x, y)
	return y
}

// toAll moves the values xs point to onto dev, as to does, with one wait for the device
// they come from (a crossing of several values costs one synchronisation).
func (c *pass) toAll(dev int, xs ...*value) {
	var from, to value
	for _, x := range xs {
		if c.err != nil || !x.Valid() || x.Device() == c.m.names[dev] {
			continue
		}
		from = *x
		*x = c.copyTo(&c.mem[dev].layer, dev, *x)
		to = *x
	}
	if from.Valid() {
		c.arrive(from, to)
	}
}

// arrive waits, after a copy of x out of a device into host memory (y), until it has
// arrived; a copy into a device is ordered with that device's operations and needs no
// wait.
func (c *pass) arrive(x, y value) {
	if c.err == nil && x.Buf.Host() == nil && y.Valid() && y.Buf.Host() != nil {
		c.fail(c.backendOf(c.devOf(x)).Synchronize())
	}
}

// copyTo copies x into a new value of arena a on dev. A copy out of a device into host
// memory has arrived only after the caller's arrive.
func (c *pass) copyTo(a *arena, dev int, x value) value {
	y := c.take(a, dev, x.Type, x.Cols, x.Rows)
	if c.err == nil && !x.Contiguous() {
		// Only contiguous tensors cross: make x so on its own device first, which every
		// device must be able to do.
		from := c.devOf(x)
		if !c.backendOf(from).Supports(backend.OpCopy, x.Type) {
			c.fail(fmt.Errorf("%s cannot copy a strided %s to make it cross", c.m.names[from], x))
			return y
		}
		cont := c.alloc(from, x.Type, x.Cols, x.Rows)
		c.fail(c.backendOf(from).Copy(cont, x))
		x = cont
	}
	if c.err == nil {
		c.fail(backend.Copy(c.backendOf(dev), y, c.backendOf(c.devOf(x)), x, &c.staging))
	}
	return y
}

// read copies x (F32) to the host into dst, waiting for it.
func (c *pass) read(dst []float32, x value) { c.readAll([][]float32{dst}, []value{x}) }

// readAll copies each of xs (F32) to the host into the dst of its index, waiting once per
// device for all of them.
func (c *pass) readAll(dsts [][]float32, xs []value) {
	var waits []backend.Backend
	for i, x := range xs {
		if c.err != nil {
			return
		}
		b := c.backendOf(c.devOf(x))
		if !x.Contiguous() || x.Type != tensor.F32 || len(dsts[i]) != x.Elements() {
			c.fail(fmt.Errorf("read of %s into %d floats", x, len(dsts[i])))
			return
		}
		c.fail(b.Get(float32Bytes(dsts[i]), x))
		if !slices.Contains(waits, b) {
			waits = append(waits, b)
		}
	}
	for _, b := range waits {
		c.fail(b.Synchronize())
	}
}

// readIDs copies an I32 value to the host into dst, waiting for it.
func (c *pass) readIDs(dst []int32, x value) {
	if c.err != nil {
		return
	}
	b := c.backendOf(c.devOf(x))
	c.fail(b.Get(int32Bytes(dst), x))
	c.fail(b.Synchronize())
}

// getRows looks rows ids of w up (the embedding) into a value of the pass.
func (c *pass) getRows(w weight, ids []int32) value {
	x := c.allocPass(w.dev, w.w.Cols(), len(ids))
	if c.err == nil {
		c.fail(w.on.GetRows(x, w.w, ids))
	}
	return x
}

// matmul is w·x on w's device.
func (c *pass) matmul(w weight, x value) value { return c.product(x, value{}, 0, w) }

// product is w·x (ids absent) or w's experts by ids times x, on the device that runs it
// (runsOn: w's, or the op offload GPU for a large batch).
func (c *pass) product(x, ids value, k int, w weight) value {
	// Not in c.outs, which may hold a caller's results still.
	c.single = c.appendProducts(c.single[:0], x, ids, k, []weight{w})
	return c.single[0]
}

// project multiplies x by each weight, as one operation where the weights share a device
// (the input converted once, no wait between them): a layer's q, k and v projections. The
// results are in a slice the next call reuses.
func (c *pass) project(x value, ws ...weight) []value { return c.products(x, value{}, 0, ws) }

// mulMatIDs is project for stacks of experts with the same routing (ids, k slots per
// token): one output row per (token, slot). With op offload, only the experts c.routed
// marks are staged.
func (c *pass) mulMatIDs(x, ids value, k int, ws ...weight) []value {
	return c.products(x, ids, k, ws)
}

// products runs project (ids absent) or mulMatIDs: the weights' products fused on the
// device that runs them where that is one device (and the weights it stages fit its
// staging memory together), else one by one on each weight's device.
func (c *pass) products(x, ids value, k int, ws []weight) []value {
	c.outs = c.outs[:0]
	tokens, op := batchOf(x, ids)
	if dev := c.runsOn(ws[0], op, tokens); c.allRunOn(dev, op, tokens, ws) && c.fitStaging(dev, ws) {
		c.outs = c.appendProducts(c.outs, x, ids, k, ws)
		return c.outs
	}
	for i := range ws {
		c.outs = c.appendProducts(c.outs, x, ids, k, ws[i:i+1])
	}
	return c.outs
}

// batchOf is the batch size by which a product of x (by ids, when valid) may be offloaded
// (its tokens), and the product's operation.
func batchOf(x, ids value) (int, backend.Op) {
	if ids.Valid() {
		return ids.Rows, backend.OpMulMatID
	}
	return x.Rows, backend.OpMatMul
}

// appendProducts runs the products of ws, which run on one device, as one operation
// there and appends their results to outs.
func (c *pass) appendProducts(outs []value, x, ids value, k int, ws []weight) []value {
	tokens, op := batchOf(x, ids)
	rows := x.Rows
	var routed []bool
	if ids.Valid() {
		rows, routed = ids.Elements(), c.routed
	}
	dev := c.runsOn(ws[0], op, tokens)
	x, ids = c.to(dev, x), c.to(dev, ids)
	c.fused = c.fused[:0]
	first := len(outs)
	var staged int64
	for _, w := range ws {
		c.fused = append(c.fused, c.resident(dev, w, &staged, routed))
		outs = append(outs, c.alloc(dev, tensor.F32, w.w.Rows(), rows))
	}
	on := c.backendOf(dev)
	switch {
	case c.err != nil:
	case ids.Valid() && len(ws) == 1:
		c.fail(on.MulMatID(outs[first], c.fused[0], x, ids, k))
	case ids.Valid():
		c.fail(on.MulMatIDs(outs[first:], c.fused, x, ids, k))
	case len(ws) == 1:
		c.fail(on.MatMul(outs[first], c.fused[0], x))
	default:
		c.fail(on.MatMuls(outs[first:], c.fused, x))
	}
	return outs
}

// allRunOn reports whether every weight of ws runs op over tokens on dev.
func (c *pass) allRunOn(dev int, op backend.Op, tokens int, ws []weight) bool {
	for _, w := range ws {
		if c.runsOn(w, op, tokens) != dev {
			return false
		}
	}
	return true
}

// matMulStack is ggml_mul_mat of a stack of matrices: row i of x by matrix i mod the
// stack's size.
func (c *pass) matMulStack(w weight, x value) value {
	x = c.to(w.dev, x)
	y := c.alloc(w.dev, tensor.F32, w.w.Rows(), x.Rows)
	if c.err == nil {
		c.fail(w.on.MatMulStack(y, w.w, x))
	}
	return y
}

// on is the device that runs op on values of type t, preferring dev: dev where its backend
// supports op, else the first device that does (the host, which runs everything), as
// ggml's scheduler runs an op its GPU backend lacks on the CPU. Weight operations do not
// come here: a device that holds a weight runs its products (Load checks it).
func (c *pass) on(dev int, op backend.Op, t tensor.Type) int {
	if c.m.backends[dev].Supports(op, t) {
		return dev
	}
	for i, b := range c.m.backends {
		if b.Supports(op, t) {
			return i
		}
	}
	c.fail(fmt.Errorf("no device runs %s on %s", op, t))
	return dev
}

// target is where an operation that writes x in place runs: x's device when it runs op,
// else a copy of x on a device that does; done then copies the result back into x.
func (c *pass) target(x value, op backend.Op) (int, value) {
	dev := c.devOf(x)
	if run := c.on(dev, op, tensor.F32); run != dev {
		return run, c.to(run, x)
	}
	return dev, x
}

// done copies y, the result target's copy of x holds, back into x (nothing when y is x).
func (c *pass) done(x, y value) {
	if c.err != nil || y == x {
		return
	}
	if x.Contiguous() {
		c.fail(backend.Copy(c.backendOf(c.devOf(x)), x, c.backendOf(c.devOf(y)), y, &c.staging))
		c.arrive(y, x)
		return
	}
	dev := c.devOf(x)
	c.fail(c.backendOf(dev).Copy(x, c.to(dev, y)))
}

// operand is a, an input of an operation whose destination dst runs as d on dev: d itself
// where a is dst (an operation in place), else a on dev.
func (c *pass) operand(dev int, a, dst, d value) value {
	if a == dst {
		return d
	}
	return c.to(dev, a)
}

// rmsNorm is a new value: x's rows RMS-normalised and multiplied by w, on w's device.
func (c *pass) rmsNorm(x value, w param, eps float32) value {
	dev := c.on(w.dev, backend.OpRMSNorm, tensor.F32)
	x = c.to(dev, x)
	y := c.alloc(dev, tensor.F32, x.Cols, x.Rows)
	c.rmsNormTo(y, x, w, eps)
	return y
}

// rmsNormTo is rmsNorm into dst (which may be x, and strided) on dst's device.
func (c *pass) rmsNormTo(dst, x value, w param, eps float32) {
	dev, d := c.target(dst, backend.OpRMSNorm)
	x, wt := c.operand(dev, x, dst, d), c.to(dev, w.t)
	if c.err == nil {
		c.fail(c.backendOf(dev).RMSNorm(d, x, wt, eps))
	}
	c.done(dst, d)
}

// l2Norm normalises x's rows in place.
func (c *pass) l2Norm(x value, eps float32) {
	dev, d := c.target(x, backend.OpL2Norm)
	if c.err == nil {
		c.fail(c.backendOf(dev).L2Norm(d, eps))
	}
	c.done(x, d)
}

// layerNorm normalises x's rows in place, then scales them by w and adds b.
func (c *pass) layerNorm(x value, w, b param, eps float32) {
	dev, d := c.target(x, backend.OpLayerNorm)
	wt, bt := c.to(dev, w.t), c.to(dev, b.t)
	if c.err == nil {
		c.fail(c.backendOf(dev).LayerNorm(d, wt, bt, eps))
	}
	c.done(x, d)
}

// hadamard rotates x's rows in place by the Walsh-Hadamard matrix.
func (c *pass) hadamard(x value) {
	dev, d := c.target(x, backend.OpHadamard)
	if c.err == nil {
		c.fail(c.backendOf(dev).Hadamard(d))
	}
	c.done(x, d)
}

// scale multiplies x by s in place.
func (c *pass) scale(x value, s float32) {
	dev, d := c.target(x, backend.OpScale)
	if c.err == nil {
		c.fail(c.backendOf(dev).Scale(d, d, s))
	}
	c.done(x, d)
}

// add sets dst = a + b (b: as many rows or one), on dst's device.
func (c *pass) add(dst, a, b value) {
	dev, d := c.target(dst, backend.OpAdd)
	a, b = c.operand(dev, a, dst, d), c.operand(dev, b, dst, d)
	if c.err == nil {
		c.fail(c.backendOf(dev).Add(d, a, b))
	}
	c.done(dst, d)
}

// addParam adds a bias to x in place, when there is one.
func (c *pass) addParam(x value, bias param) {
	if bias.valid() {
		c.add(x, x, bias.t)
	}
}

// mul sets dst = a ⊙ b (b: as many rows or one), on dst's device.
func (c *pass) mul(dst, a, b value) {
	dev, d := c.target(dst, backend.OpMul)
	a, b = c.operand(dev, a, dst, d), c.operand(dev, b, dst, d)
	if c.err == nil {
		c.fail(c.backendOf(dev).Mul(d, a, b))
	}
	c.done(dst, d)
}

// scaleRows multiplies row t of x by s[t] in place.
func (c *pass) scaleRows(x, s value) {
	dev, d := c.target(x, backend.OpScale)
	s = c.to(dev, s)
	if c.err == nil {
		c.fail(c.backendOf(dev).ScaleRows(d, d, s))
	}
	c.done(x, d)
}

// unary applies f to x in place.
func (c *pass) unary(x value, f backend.Unary) {
	dev, d := c.target(x, backend.OpUnary)
	if c.err == nil {
		c.fail(c.backendOf(dev).Unary(d, d, f))
	}
	c.done(x, d)
}

// swiGLU sets gate = silu(gate) ⊙ up (or gpt-oss's clamped form).
func (c *pass) swiGLU(gate, up value, clamped bool) {
	dev, g := c.target(gate, backend.OpSwiGLU)
	up = c.to(dev, up)
	if c.err == nil {
		if clamped {
			c.fail(c.backendOf(dev).SwiGLUOAI(g, g, up, oaiAlpha, oaiLimit))
		} else {
			c.fail(c.backendOf(dev).SwiGLU(g, g, up))
		}
	}
	c.done(gate, g)
}

// copyValue copies src into dst (either may be strided) on dst's device.
func (c *pass) copyValue(dst, src value) {
	dev, d := c.target(dst, backend.OpCopy)
	src = c.to(dev, src)
	if c.err == nil {
		c.fail(c.backendOf(dev).Copy(d, src))
	}
	c.done(dst, d)
}

// contiguous is a contiguous copy of a strided view, on its device.
func (c *pass) contiguous(x value) value {
	y := c.alloc(c.devOf(x), x.Type, x.Cols, x.Rows)
	c.copyValue(y, x)
	return y
}

// rope rotates x (rows of rowLen values, the heads of each token being evaluated) in place
// at the tokens' positions.
func (c *pass) rope(r *tensor.RoPE, x value, rowLen int) {
	dev, d := c.target(x, backend.OpRoPE)
	if c.err == nil {
		c.fail(c.backendOf(dev).RoPE(d, rowLen, r, c.pos))
	}
	c.done(x, d)
}

// float32Bytes and int32Bytes view a slice's memory as bytes, for copies to the host.
func float32Bytes(s []float32) []byte { return sliceBytes(s) }
func int32Bytes(s []int32) []byte     { return sliceBytes(s) }

func sliceBytes[T int32 | float32](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*4)
}
