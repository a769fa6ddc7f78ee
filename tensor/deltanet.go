package tensor

import (
	"fmt"
	"math"
)

// DeltaRule gives the shapes of a gated delta rule (Pool.GatedDeltaRule): Gated DeltaNet's
// recurrence (Qwen3-Next, Qwen3.5), as ggml_gated_delta_net computes it.
type DeltaRule struct {
	Dim    int // head size of queries, keys and values; each state is Dim×Dim
	KHeads int // query/key heads; value head h reads query/key head h mod KHeads
	VHeads int // value heads, one state each
	// Stride is the number of elements from one token's queries (keys, values) to the
	// next token's: the rows may be views into a wider per-token row.
	Stride int
}

// GatedDeltaRule runs n tokens through the gated delta rule. For token t and value head h,
// with q and k the (already L2-normalised) query and key of head h mod KHeads, v its
// value, g = exp(decay[t][h]) and b = beta[t][h], the head's state S (key dimension i,
// value dimension j) becomes
//
//	S ← g·S;  S ← S + k·(b·(v − Sᵀk))ᵀ
//
// and o[t][h] = Sᵀq/√Dim. q, k and v hold token t's heads at t·Stride (KHeads, KHeads and
// VHeads rows of Dim values), decay and beta are [n][VHeads], o is [n][VHeads][Dim].
// states holds the VHeads states, each stored transposed as ggml stores it (row j is
// column j of S), and is updated in place. Value heads run in parallel.
func (p *Pool) GatedDeltaRule(o, q, k, v, decay, beta, states []float32, n int, r DeltaRule) error {
	if r.Dim <= 0 || r.KHeads <= 0 || r.VHeads <= 0 || r.VHeads%r.KHeads != 0 || r.Stride < 0 || n < 0 {
		return fmt.Errorf("gated delta rule: head size %d, %d key heads, %d value heads, stride %d, %d tokens", r.Dim, r.KHeads, r.VHeads, r.Stride, n)
	}
	if n == 0 {
		return nil
	}
	last := (n - 1) * r.Stride
	if len(q) < last+r.KHeads*r.Dim || len(k) < last+r.KHeads*r.Dim || len(v) < last+r.VHeads*r.Dim ||
		len(decay) < n*r.VHeads || len(beta) < n*r.VHeads || len(o) < n*r.VHeads*r.Dim || len(states) != r.VHeads*r.Dim*r.Dim {
		return fmt.Errorf("gated delta rule: slices too short for %d tokens of %+v", n, r)
	}
	if err := p.lock(); err != nil {
		return err
	}
	defer p.mu.Unlock()
	j := &deltaJob{o: o, q: q, k: k, v: v, decay: decay, beta: beta, states: states, n: n, r: r,
		scale: 1 / float32(math.Sqrt(float64(r.Dim)))}
	return p.run(j, r.VHeads)
}

type deltaJob struct {
	o, q, k, v, decay, beta, states []float32
	n                               int
	r                               DeltaRule
	scale                           float32
}

// unit runs value head h over every token.
func (j *deltaJob) unit(_, h int) {
	r := j.r
	dim := r.Dim
	s := j.states[h*dim*dim : (h+1)*dim*dim]
	kh := (h % r.KHeads) * dim
	for t := range j.n {
		base := t * r.Stride
		q := j.q[base+kh : base+kh+dim]
		k := j.k[base+kh : base+kh+dim]
		v := j.v[base+h*dim : base+(h+1)*dim]
		g := float32(math.Exp(float64(j.decay[t*r.VHeads+h])))
		b := j.beta[t*r.VHeads+h]
		o := j.o[(t*r.VHeads+h)*dim:][:dim]
		// Row j of the transposed state depends only on itself: decay it, take its delta
		// against the key, add the key times the delta and read it against the query,
		// in two passes while it is in cache.
		for jj := range dim {
			row := s[jj*dim : (jj+1)*dim]
			delta := (v[jj] - decayDot(row, k, g)) * b
			o[jj] = axpyDot(row, k, q, delta) * j.scale
		}
	}
}

// decayDot and axpyDot are the state update's two passes over a row; the SIMD build
// installs vector versions with the same bits (each lane the same multiplies and adds,
// unfused, as here).
var decayDot, axpyDot = decayDotGo, axpyDotGo

// decayDotGo multiplies row by g in place and returns its dot product with k, summed in
// eight interleaved lanes (as a vector unit would) to keep the additions independent.
func decayDotGo(row, k []float32, g float32) float32 {
	var acc [8]float32
	i := 0
	for ; i+8 <= len(row); i += 8 {
		r, kk := row[i:i+8:i+8], k[i:i+8:i+8]
		for l := range 8 {
			r[l] *= g
			acc[l] += r[l] * kk[l]
		}
	}
	for ; i < len(row); i++ {
		row[i] *= g
		acc[0] += row[i] * k[i]
	}
	return sumLanes8(&acc)
}

// axpyDotGo adds k·delta to row in place and returns the updated row's dot product with q.
func axpyDotGo(row, k, q []float32, delta float32) float32 {
	var acc [8]float32
	i := 0
	for ; i+8 <= len(row); i += 8 {
		r, kk, qq := row[i:i+8:i+8], k[i:i+8:i+8], q[i:i+8:i+8]
		for l := range 8 {
			r[l] += kk[l] * delta
			acc[l] += r[l] * qq[l]
		}
	}
	for ; i < len(row); i++ {
		row[i] += k[i] * delta
		acc[0] += row[i] * q[i]
	}
	return sumLanes8(&acc)
}

func sumLanes8(a *[8]float32) float32 {
	return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]))
}
