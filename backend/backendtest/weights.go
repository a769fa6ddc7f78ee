package backendtest

import (
	"fmt"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/tensor"
)

// The operations on weights: each is tried with every weight type, rows of odd numbers of
// blocks and batches from one token (a decode step) to 65 (past the 64 from which devices
// switch to their batched kernels).

var tokenCounts = []int{1, 3, 7, 32, 65}

// matMulShape is a weight's shape and the batches it multiplies.
type matMulShape struct {
	cols, rows int
	tokens     []int
}

// matMulShapes are the shapes a weight of typ is multiplied in: every batch size with an
// odd number of rows, fewer with the longer rows and a multiple of 16 rows (where CPUs and
// GPUs switch to kernels that take rows in groups).
func matMulShapes(typ tensor.Type) []matMulShape {
	cols := weightCols(typ)
	return []matMulShape{{cols[0], 17, tokenCounts}, {cols[1], 64, []int{1, 7, 65}}}
}

func getRowsSuite(e *env) {
	for _, typ := range weightTypes() {
		if !e.supports(typ) {
			continue
		}
		for _, cols := range weightCols(typ) {
			for _, n := range []int{1, 3, 7, 32} {
				e.run(fmt.Sprintf("%s/cols=%d,ids=%d", typ, cols, n), func(c *tcase) {
					const rows = 17
					w := c.weight("token_embd.weight", typ, []int64{int64(cols), rows}, c.weightData(typ, cols, rows, 1))
					ids := make([]int32, n)
					for i := range ids {
						ids[i] = int32(c.rng.IntN(rows))
					}
					ids[0] = rows - 1
					if n > 1 {
						ids[n-1] = 0
					}
					dst := c.output("dst", tensor.F32, cols, n, ElementErr)
					c.run(func(b backend.Backend, s side) error { return b.GetRows(dst.on(s), w[s], ids) })
				})
			}
		}
	}
}

// matMulSuite covers MatMul and MatMuls.
func matMulSuite(e *env) {
	for _, typ := range weightTypes() {
		if !e.supports(typ) {
			continue
		}
		for _, sh := range matMulShapes(typ) {
			for _, n := range sh.tokens {
				e.run(fmt.Sprintf("%s/cols=%d,rows=%d,tokens=%d", typ, sh.cols, sh.rows, n), func(c *tcase) {
					w := c.weight("blk.0.attn_output.weight", typ, []int64{int64(sh.cols), int64(sh.rows)}, c.weightData(typ, sh.cols, sh.rows, 1))
					x := c.random("x", sh.cols, n, -1, 1)
					dst := c.output("dst", tensor.F32, sh.rows, n, MatMulErr)
					c.run(func(b backend.Backend, s side) error { return b.MatMul(dst.on(s), w[s], x.on(s)) })
				})
			}
		}
		cols := weightCols(typ)[0]
		for _, n := range []int{1, 7, 65} {
			e.run(fmt.Sprintf("%s/fused,cols=%d,tokens=%d", typ, cols, n), func(c *tcase) {
				var ws []weight
				var dsts []Tensor
				for i, rows := range []int{64, 16, 24} {
					name := "blk.0.attn_" + []string{"q", "k", "v"}[i] + ".weight"
					ws = append(ws, c.weight(name, typ, []int64{int64(cols), int64(rows)}, c.weightData(typ, cols, rows, 1)))
					dsts = append(dsts, c.output("dst "+name, tensor.F32, rows, n, MatMulErr))
				}
				x := c.random("x", cols, n, -1, 1)
				c.run(func(b backend.Backend, s side) error {
					return b.MatMuls(onAll(dsts, s), weightsOn(ws, s), x.on(s))
				})
			})
		}
	}
}

// mulMatIDSuite covers MulMatID and MulMatIDs, with x one row per token (the gate and up
// projections) and one per slot (the down projection), and skipped slots.
func mulMatIDSuite(e *env) {
	const experts, k = 6, 4
	for _, typ := range weightTypes() {
		if !e.supports(typ) {
			continue
		}
		for _, n := range tokenCounts {
			for i, perSlot := range []bool{false, true} {
				cols, layout := weightCols(typ)[i], "per-token"
				if perSlot {
					layout = "per-slot"
				}
				e.run(fmt.Sprintf("%s/cols=%d,tokens=%d,x=%s", typ, cols, n, layout), func(c *tcase) {
					const rows = 17
					w := c.weight("blk.0.ffn_down_exps.weight", typ, []int64{int64(cols), rows, experts}, c.weightData(typ, cols, rows, experts))
					xRows := n
					if perSlot {
						xRows = n * k
					}
					x := c.random("x", cols, xRows, -1, 1)
					ids := c.ids("ids", k, n, c.experts(n, k, experts, 0.15))
					dst := c.output("dst", tensor.F32, rows, n*k, MatMulErr)
					c.run(func(b backend.Backend, s side) error { return b.MulMatID(dst.on(s), w[s], x.on(s), ids.on(s), k) })
				})
			}
		}
		cols := weightCols(typ)[0]
		for _, n := range []int{1, 7, 65} {
			e.run(fmt.Sprintf("%s/fused,cols=%d,tokens=%d", typ, cols, n), func(c *tcase) {
				var ws []weight
				var dsts []Tensor
				for i, rows := range []int{17, 33} {
					name := "blk.0.ffn_" + []string{"gate", "up"}[i] + "_exps.weight"
					ws = append(ws, c.weight(name, typ, []int64{int64(cols), int64(rows), experts}, c.weightData(typ, cols, rows, experts)))
					dsts = append(dsts, c.output("dst "+name, tensor.F32, rows, n*k, MatMulErr))
				}
				x := c.random("x", cols, n, -1, 1)
				ids := c.ids("ids", k, n, c.experts(n, k, experts, 0.15))
				c.run(func(b backend.Backend, s side) error {
					return b.MulMatIDs(onAll(dsts, s), weightsOn(ws, s), x.on(s), ids.on(s), k)
				})
			})
		}
	}
}

// matMulStackSuite multiplies each head's rows by that head's matrix (DeepSeek's absorbed
// attention).
func matMulStackSuite(e *env) {
	const heads, rows = 4, 17
	for _, typ := range weightTypes() {
		if !e.supports(typ) {
			continue
		}
		cols := weightCols(typ)[0]
		for _, n := range []int{1, 3, 7, 32} {
			e.run(fmt.Sprintf("%s/cols=%d,rows=%d,heads=%d,tokens=%d", typ, cols, rows, heads, n), func(c *tcase) {
				w := c.weight("blk.0.attn_k_b.weight", typ, []int64{int64(cols), rows, heads}, c.weightData(typ, cols, rows, heads))
				x := c.random("x", cols, n*heads, -1, 1)
				dst := c.output("dst", tensor.F32, rows, n*heads, MatMulErr)
				c.run(func(b backend.Backend, s side) error { return b.MatMulStack(dst.on(s), w[s], x.on(s)) })
			})
		}
	}
}

func onAll(xs []Tensor, s side) []backend.Tensor {
	out := make([]backend.Tensor, len(xs))
	for i, x := range xs {
		out[i] = x.on(s)
	}
	return out
}

func weightsOn(ws []weight, s side) []backend.Weight {
	out := make([]backend.Weight, len(ws))
	for i, w := range ws {
		out[i] = w[s]
	}
	return out
}
