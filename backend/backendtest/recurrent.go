package backendtest

import (
	"fmt"
	"math"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/tensor"
)

// The Gated DeltaNet layer's operations (Qwen3-Next, Qwen3.5): the causal convolution and
// the delta rule, each checked on its output and on the state it carries to the next batch.

// causalConvSuite convolves batches shorter and longer than the kernel's history.
func causalConvSuite(e *env) {
	if !e.supports(tensor.F32) {
		return
	}
	const taps = 4
	for _, channels := range []int{7, 96, 1000} {
		for _, n := range []int{1, 2, 3, 7, 65} {
			e.run(fmt.Sprintf("channels=%d,taps=%d,tokens=%d", channels, taps, n), func(c *tcase) {
				x := c.random("x", channels, n, -1, 1)
				w := c.random("w", channels, taps, -1, 1)
				state := c.random("state", taps-1, channels, -1, 1)
				dst := c.output("dst", tensor.F32, channels, n, ElementErr)
				c.check(state, ElementErr)
				c.run(func(b backend.Backend, s side) error { return b.CausalConv(dst.on(s), x.on(s), state.on(s), w.on(s)) })
			})
		}
	}
}

// gatedDeltaRuleSuite runs the recurrence with as many value heads as key heads and more
// (tiled as Qwen3.5's and grouped as Qwen3-Next's), the query, key and value blocks at the start of wider rows (the gate's columns follow
// them), inputs in test-backend-ops's ranges.
func gatedDeltaRuleSuite(e *env) {
	if !e.supports(tensor.F32) {
		return
	}
	for _, r := range []tensor.DeltaRule{{Dim: 16, KHeads: 2, VHeads: 2}, {Dim: 32, KHeads: 1, VHeads: 4}, {Dim: 128, KHeads: 2, VHeads: 4},
		{Dim: 32, KHeads: 2, VHeads: 6, Grouped: true}} {
		for _, n := range []int{1, 3, 7, 33} {
			e.run(fmt.Sprintf("dim=%d,k-heads=%d,v-heads=%d,grouped=%v,tokens=%d", r.Dim, r.KHeads, r.VHeads, r.Grouped, n), func(c *tcase) {
				kd, vd := r.KHeads*r.Dim, r.VHeads*r.Dim
				r.Stride = 2*kd + vd + 8
				rows := c.uniform(n*r.Stride, -1, 1)
				for t := range n {
					row := rows[t*r.Stride:]
					for h := range 2 * r.KHeads { // the queries' and keys' heads, L2-normalised
						l2Normalise(row[h*r.Dim : (h+1)*r.Dim])
					}
					for i := 2 * kd; i < 2*kd+vd; i++ {
						row[i] = -0.3 + (row[i]+1)/2*5.3
					}
				}
				qkv := c.values("qkv", r.Stride, n, rows)
				decay := c.random("decay", r.VHeads, n, -20, -1e-4)
				beta := c.random("beta", r.VHeads, n, 0, 1)
				states := c.random("states", r.Dim*r.Dim, r.VHeads, -1, 1)
				o := c.output("o", tensor.F32, vd, n, ElementErr)
				c.check(states, ElementErr)
				c.run(func(b backend.Backend, s side) error {
					return b.GatedDeltaRule(o.on(s), qkv.on(s), decay.on(s), beta.on(s), states.on(s), r)
				})
			})
		}
	}
}

func l2Normalise(x []float32) {
	var sum float64
	for _, v := range x {
		sum += float64(v) * float64(v)
	}
	s := float32(1 / math.Sqrt(sum))
	for i := range x {
		x[i] *= s
	}
}
