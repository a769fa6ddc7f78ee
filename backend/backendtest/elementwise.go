package backendtest

import (
	"fmt"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/tensor"
)

// The element-wise and row operations, on F32 rows of odd and regular lengths.

type shape struct{ cols, rows int }

func (s shape) String() string { return fmt.Sprintf("%dx%d", s.rows, s.cols) }

// rowShapes are the shapes the row operations are tried with.
var rowShapes = func() []shape {
	var out []shape
	for _, cols := range []int{1, 7, 64, 1000} {
		for _, rows := range []int{1, 3, 65} {
			out = append(out, shape{cols, rows})
		}
	}
	return out
}()

// layout says which of a row operation's tensors are strided views (columns of wider
// rows) or whether the output is the input.
type layout int

const (
	contiguous layout = iota
	stridedIn
	stridedOut
	stridedBoth
	inPlace
)

func (l layout) String() string {
	return [...]string{"contiguous", "strided-in", "strided-out", "strided", "in-place"}[l]
}

// in is an input of sh, a view of columns of wider rows where strided.
func (c *tcase) in(name string, sh shape, strided bool, lo, hi float32) Tensor {
	if !strided {
		return c.random(name, sh.cols, sh.rows, lo, hi)
	}
	return c.random(name, sh.cols+5, sh.rows, lo, hi).Columns(3, sh.cols)
}

// out is an output of sh, a view of columns of wider rows where strided.
func (c *tcase) out(name string, sh shape, strided bool, maxErr float64) Tensor {
	if !strided {
		return c.output(name, tensor.F32, sh.cols, sh.rows, maxErr)
	}
	x := c.blank(name, tensor.F32, sh.cols+6, sh.rows).Columns(2, sh.cols)
	c.check(x, maxErr)
	return x
}

func rmsNormSuite(e *env) {
	if !e.supports(tensor.F32) {
		return
	}
	for _, sh := range rowShapes {
		for _, weighted := range []bool{false, true} {
			for _, l := range []layout{contiguous, stridedIn, stridedOut, stridedBoth, inPlace} {
				e.run(fmt.Sprintf("%v/weighted=%v/%v", sh, weighted, l), func(c *tcase) {
					x := c.in("x", sh, l == stridedIn || l == stridedBoth, -1, 1)
					var w Tensor
					if weighted {
						w = c.random("w", sh.cols, 1, -2, 2)
					}
					dst := x
					if l == inPlace {
						c.check(x, ElementErr)
					} else {
						dst = c.out("dst", sh, l == stridedOut || l == stridedBoth, ElementErr)
					}
					c.run(func(b backend.Backend, s side) error { return b.RMSNorm(dst.on(s), x.on(s), w.on(s), 1e-6) })
				})
			}
		}
	}
}

// rowsOf is an input x of sh's shape holding vals: contiguous, or strided, a view of the
// columns 3.. of wider rows (the others random).
func rowsOf(c *tcase, sh shape, vals []float32, strided bool) Tensor {
	if !strided {
		return c.values("x", sh.cols, sh.rows, vals)
	}
	width := sh.cols + 5
	wide := c.uniform(width*sh.rows, -1, 1)
	for r := range sh.rows {
		copy(wide[r*width+3:], vals[r*sh.cols:(r+1)*sh.cols])
	}
	return c.values("x", width, sh.rows, wide).Columns(3, sh.cols)
}

func l2NormSuite(e *env) {
	if !e.supports(tensor.F32) {
		return
	}
	for _, sh := range rowShapes {
		for _, strided := range []bool{false, true} {
			e.run(fmt.Sprintf("%v/strided=%v", sh, strided), func(c *tcase) {
				vals := c.uniform(sh.cols*sh.rows, -1, 1)
				if sh.rows >= 3 { // a row of zeros, a row whose norm is below eps
					clear(vals[sh.cols : 2*sh.cols])
					for i := 2 * sh.cols; i < 3*sh.cols; i++ {
						vals[i] *= 1e-8
					}
				}
				x := rowsOf(c, sh, vals, strided)
				c.check(x, ElementErr)
				c.run(func(b backend.Backend, s side) error { return b.L2Norm(x.on(s), 1e-6) })
			})
		}
	}
}

// layerNormSuite normalises rows in place, contiguous and as a strided view of wider rows,
// a constant row among them (its variance 0, eps alone under the root).
func layerNormSuite(e *env) {
	if !e.supports(tensor.F32) {
		return
	}
	for _, sh := range rowShapes {
		for _, strided := range []bool{false, true} {
			e.run(fmt.Sprintf("%v/strided=%v", sh, strided), func(c *tcase) {
				vals := c.uniform(sh.cols*sh.rows, -2, 3)
				if sh.rows >= 2 {
					for i := sh.cols; i < 2*sh.cols; i++ {
						vals[i] = 0.75
					}
				}
				x := rowsOf(c, sh, vals, strided)
				w, bias := c.random("w", sh.cols, 1, -1, 1), c.random("b", sh.cols, 1, -1, 1)
				c.check(x, ElementErr)
				c.run(func(b backend.Backend, s side) error { return b.LayerNorm(x.on(s), w.on(s), bias.on(s), 1e-6) })
			})
		}
	}
}

// hadamardSuite rotates rows of every power of two from 1 to 512 in place, contiguous and
// as a strided view.
func hadamardSuite(e *env) {
	if !e.supports(tensor.F32) {
		return
	}
	for cols := 1; cols <= 512; cols *= 2 {
		for _, strided := range []bool{false, true} {
			e.run(fmt.Sprintf("cols=%d/strided=%v", cols, strided), func(c *tcase) {
				const rows = 3
				width, from := cols, 0
				if strided {
					width, from = cols+4, 2
				}
				x := c.random("x", width, rows, -1, 1).Columns(from, cols)
				c.check(x, ElementErr)
				c.run(func(b backend.Backend, s side) error { return b.Hadamard(x.on(s)) })
			})
		}
	}
}

// binarySuite covers Add and Mul: b with a's rows or one row, dst separate or a.
func binarySuite(e *env, f func(b backend.Backend, dst, x, y backend.Tensor) error) {
	if !e.supports(tensor.F32) {
		return
	}
	for _, sh := range rowShapes {
		for _, broadcast := range []bool{false, true} {
			for _, l := range []layout{contiguous, inPlace} {
				e.run(fmt.Sprintf("%v/broadcast=%v/%v", sh, broadcast, l), func(c *tcase) {
					a := c.random("a", sh.cols, sh.rows, -1, 1)
					bRows := sh.rows
					if broadcast {
						bRows = 1
					}
					y := c.random("b", sh.cols, bRows, -1, 1)
					dst := a
					if l == inPlace {
						c.check(a, ElementErr)
					} else {
						dst = c.output("dst", tensor.F32, sh.cols, sh.rows, ElementErr)
					}
					c.run(func(b backend.Backend, s side) error { return f(b, dst.on(s), a.on(s), y.on(s)) })
				})
			}
		}
	}
}

func addSuite(e *env) {
	binarySuite(e, func(b backend.Backend, dst, x, y backend.Tensor) error { return b.Add(dst, x, y) })
}

func mulSuite(e *env) {
	binarySuite(e, func(b backend.Backend, dst, x, y backend.Tensor) error { return b.Mul(dst, x, y) })
}

// unaryCases runs f(dst, x, y) for x in [lo, hi) of every row shape, dst separate from x
// or x itself; y is the second input second makes for the shape, or the zero Tensor.
func unaryCases(e *env, name string, lo, hi float32, second func(c *tcase, sh shape) Tensor,
	f func(b backend.Backend, dst, x, y backend.Tensor) error) {
	for _, sh := range rowShapes {
		for _, l := range []layout{contiguous, inPlace} {
			e.run(fmt.Sprintf("%s/%v/%v", name, sh, l), func(c *tcase) {
				x := c.random("x", sh.cols, sh.rows, lo, hi)
				var y Tensor
				if second != nil {
					y = second(c, sh)
				}
				dst := x
				if l == inPlace {
					c.check(x, ElementErr)
				} else {
					dst = c.output("dst", tensor.F32, sh.cols, sh.rows, ElementErr)
				}
				c.run(func(b backend.Backend, s side) error { return f(b, dst.on(s), x.on(s), y.on(s)) })
			})
		}
	}
}

// scaleSuite covers Scale and ScaleRows.
func scaleSuite(e *env) {
	if !e.supports(tensor.F32) {
		return
	}
	unaryCases(e, "scale", -1, 1, nil, func(b backend.Backend, dst, x, _ backend.Tensor) error {
		return b.Scale(dst, x, 0.3717)
	})
	factors := func(c *tcase, sh shape) Tensor { return c.random("s", 1, sh.rows, -2, 2) }
	unaryCases(e, "scale-rows", -1, 1, factors, func(b backend.Backend, dst, x, s backend.Tensor) error {
		return b.ScaleRows(dst, x, s)
	})
}

func unarySuite(e *env) {
	if !e.supports(tensor.F32) {
		return
	}
	// Beyond ±20, where Softplus passes its input through and the sigmoids saturate.
	for _, f := range []struct {
		name string
		f    backend.Unary
	}{{"sigmoid", backend.Sigmoid}, {"softplus", backend.Softplus}, {"silu", backend.SiLU}} {
		unaryCases(e, f.name, -25, 25, nil, func(b backend.Backend, dst, x, _ backend.Tensor) error {
			return b.Unary(dst, x, f.f)
		})
	}
}

// swiGLUSuite covers SwiGLU and SwiGLUOAI (with inputs past its clamp); the output may
// be the gate.
func swiGLUSuite(e *env) {
	if !e.supports(tensor.F32) {
		return
	}
	up := func(c *tcase, sh shape) Tensor { return c.random("up", sh.cols, sh.rows, -10, 10) }
	unaryCases(e, "swiglu", -10, 10, up, func(b backend.Backend, dst, gate, up backend.Tensor) error {
		return b.SwiGLU(dst, gate, up)
	})
	unaryCases(e, "swiglu-oai", -10, 10, up, func(b backend.Backend, dst, gate, up backend.Tensor) error {
		return b.SwiGLUOAI(dst, gate, up, 1.702, 7)
	})
}

// copySuite copies tensors of every type between contiguous and strided views (and, for
// F32, out of a Rowwise view); the copy must be exact.
func copySuite(e *env) {
	for _, typ := range tensor.Types() {
		if !e.supports(typ) {
			continue
		}
		bs := int(typ.BlockSize())
		colsList := []int{7, 64}
		if bs > 1 {
			colsList = []int{bs, 3 * bs}
		}
		for _, cols := range colsList {
			for _, rows := range []int{1, 3, 65} {
				for _, l := range []layout{contiguous, stridedIn, stridedOut, stridedBoth} {
					e.run(fmt.Sprintf("%s/%dx%d/%v", typ, rows, cols, l), func(c *tcase) {
						c.exact = true
						var src, dst Tensor
						if l == stridedIn || l == stridedBoth {
							src = c.tensor("src", typ, cols+2*bs, rows, c.encoded(typ, (cols+2*bs)*rows)).Columns(bs, cols)
						} else {
							src = c.tensor("src", typ, cols, rows, c.encoded(typ, cols*rows))
						}
						if l == stridedOut || l == stridedBoth {
							dst = c.blank("dst", typ, cols+3*bs, rows).Columns(2*bs, cols)
							c.check(dst, 0)
						} else {
							dst = c.output("dst", typ, cols, rows, 0)
						}
						c.run(func(b backend.Backend, s side) error { return b.Copy(dst.on(s), src.on(s)) })
					})
				}
			}
		}
		if typ == tensor.F32 {
			// Rows picked out of a longer row (an interleaved projection's halves), made
			// contiguous.
			for _, rows := range []int{1, 3, 65} {
				e.run(fmt.Sprintf("%s/%dx%d/rowwise", typ, rows, 7), func(c *tcase) {
					c.exact = true
					const cols, stride = 7, 10
					src := c.random("src", stride*rows, 1, -1, 1).Rowwise(cols, stride, 2)
					dst := c.output("dst", typ, cols, rows, 0)
					c.run(func(b backend.Backend, s side) error { return b.Copy(dst.on(s), src.on(s)) })
				})
			}
		}
	}
}

// addIDSuite adds each slot's expert's bias row, skipped slots left alone.
func addIDSuite(e *env) {
	if !e.supports(tensor.F32) {
		return
	}
	const experts, k = 8, 4
	for _, cols := range []int{7, 64, 1000} {
		for _, n := range []int{1, 7, 65} {
			e.run(fmt.Sprintf("cols=%d,tokens=%d", cols, n), func(c *tcase) {
				x := c.random("x", cols, n*k, -1, 1)
				bias := c.random("b", cols, experts, -1, 1)
				ids := c.ids("ids", k, n, c.experts(n, k, experts, 0.15))
				c.check(x, ElementErr)
				c.run(func(b backend.Backend, s side) error { return b.AddID(x.on(s), bias.on(s), ids.on(s)) })
			})
		}
	}
}

// mapIDsSuite turns router ids into a device's indices of a split stack: ids in the table,
// ids beyond it and skipped slots (-1).
func mapIDsSuite(e *env) {
	if !e.supports(tensor.I32) {
		return
	}
	const experts, k = 16, 4
	for _, n := range []int{1, 7, 300} {
		for _, tableLen := range []int{experts, experts / 2} {
			e.run(fmt.Sprintf("tokens=%d,table=%d", n, tableLen), func(c *tcase) {
				table := make([]int32, tableLen)
				for i := range table {
					table[i] = int32(c.rng.IntN(experts+1)) - 1
				}
				ids := c.ids("ids", k, n, c.experts(n, k, experts, 0.15))
				tab := c.ids("table", tableLen, 1, table)
				dst := c.output("dst", tensor.I32, k, n, 0)
				c.run(func(b backend.Backend, s side) error { return b.MapIDs(dst.on(s), ids.on(s), tab.on(s)) })
			})
		}
	}
}

// weightedSumSuite sums each token's slots, weighted.
func weightedSumSuite(e *env) {
	if !e.supports(tensor.F32) {
		return
	}
	for _, cols := range []int{7, 1000} {
		for _, n := range []int{1, 7, 65} {
			for _, k := range []int{1, 4, 8} {
				e.run(fmt.Sprintf("cols=%d,tokens=%d,k=%d", cols, n, k), func(c *tcase) {
					y := c.random("y", cols, n*k, -1, 1)
					w := c.random("w", k, n, 0, 1)
					dst := c.output("dst", tensor.F32, cols, n, ElementErr)
					c.run(func(b backend.Backend, s side) error { return b.WeightedSum(dst.on(s), y.on(s), w.on(s), k) })
				})
			}
		}
	}
}
