package tensor

import (
	"fmt"
	"math"
)

// RoPEMode says which elements of a head rotate together (ggml's rope mode).
type RoPEMode int

const (
	// RoPENormal rotates adjacent pairs (x[2i], x[2i+1]): GGML_ROPE_TYPE_NORMAL (llama,
	// deepseek2).
	RoPENormal RoPEMode = 0
	// RoPENeoX rotates x[i] with x[i+Dims/2]: GGML_ROPE_TYPE_NEOX (qwen2/3 MoE, gpt-oss,
	// glm4moe).
	RoPENeoX RoPEMode = 2
)

// RoPE holds the parameters of ggml_rope_ext, YaRN included. Pair i (0 <= i < Dims/2) at
// position p turns by θ = p·Base^(−2i/Dims) (divided by FreqFactors[i] if given), mixed
// between interpolation (θ·FreqScale) and extrapolation (θ) by YaRN's ramp over the
// correction dimensions from BetaFast/BetaSlow and OrigCtx, and cos/sin are scaled by
// AttnFactor (times 1 + 0.1·ln(1/FreqScale) when ExtFactor is not 0). Without YaRN, set
// FreqScale 1, ExtFactor 0 and AttnFactor 1. The values are llama.cpp's context parameters
// (see moe-architectures.md §4.2 for how it derives them from the file).
type RoPE struct {
	Mode RoPEMode
	// Dims is n_dims: how many elements of a head rotate (even, at most the head size).
	Dims int
	// Offset is where the rotated window starts within each row (ggml_rope_set_offset);
	// elements outside it are left as they are (partial RoPE).
	Offset      int
	Base        float32 // freq_base
	FreqScale   float32 // 1/YaRN factor; 1 for no scaling
	ExtFactor   float32 // YaRN extrapolation mix; 0 disables YaRN
	AttnFactor  float32 // magnitude scale of cos and sin
	BetaFast    float32 // YaRN β_fast (32 by default)
	BetaSlow    float32 // YaRN β_slow (1 by default)
	OrigCtx     int     // YaRN's original training context (n_ctx_orig)
	FreqFactors []float32
}

// maxRoPEDims bounds Dims so that a position's cos/sin table fits on the stack.
const maxRoPEDims = 1024

// check panics on parameters that no model has; they come from the model's hyper-parameters.
func (r *RoPE) check(rowLen int) {
	if r.Dims <= 0 || r.Dims%2 != 0 || r.Dims > maxRoPEDims || r.Offset < 0 || r.Offset%2 != 0 || r.Offset+r.Dims > rowLen ||
		(r.Mode != RoPENormal && r.Mode != RoPENeoX) || (r.FreqFactors != nil && len(r.FreqFactors) < r.Dims/2) {
		panic(fmt.Sprintf("tensor.RoPE: mode %d, %d dims at offset %d, %d freq factors, rows of %d", r.Mode, r.Dims, r.Offset, len(r.FreqFactors), rowLen))
	}
}

// corrDims are YaRN's correction dimensions [low, high] (ggml_rope_yarn_corr_dims): the pairs
// below low extrapolate fully, those above high interpolate fully.
func (r *RoPE) corrDims() (low, high float32) {
	dim := func(beta float32) float32 {
		ratio := float32(r.OrigCtx) / (beta * 2 * math.Pi)
		return float32(r.Dims) * log32(ratio) / (2 * log32(r.Base))
	}
	low = max(0, float32(math.Floor(float64(dim(r.BetaFast)))))
	high = min(float32(r.Dims-1), float32(math.Ceil(float64(dim(r.BetaSlow)))))
	return low, high
}

func log32(x float32) float32 { return float32(math.Log(float64(x))) }

// cache fills cos[i] and sin[i] with the cosine and sine of pair i at position pos
// (ggml_rope_cache_init: the angle advances by one float32 multiplication per pair). Where
// a multiply feeds an add, ggml's build (GCC, -ffp-contract=fast) fuses one of them; the
// fused one is the one that gives ggml's bits in TestRoPEMatchesGGML.
func (r *RoPE) cache(cos, sin []float32, pos int32) {
	thetaScale := float32(math.Pow(float64(r.Base), float64(-2/float32(r.Dims))))
	low, high := r.corrDims()
	mscale := r.AttnFactor
	if r.ExtFactor != 0 {
		mscale *= fma32(0.1, log32(1/r.FreqScale), 1)
	}
	theta := float32(pos)
	for i := range cos {
		extrap := theta
		if r.FreqFactors != nil {
			extrap = theta / r.FreqFactors[i]
		}
		angle := r.FreqScale * extrap // interpolation
		if r.ExtFactor != 0 {
			y := (float32(i) - low) / max(0.001, high-low)
			mix := (1 - min(1, max(0, y))) * r.ExtFactor
			angle = fma32(angle, 1-mix, float32(extrap*mix))
		}
		cos[i] = cos32(angle) * mscale
		sin[i] = sin32(angle) * mscale
		theta *= thetaScale
	}
}

// Apply rotates, in place, every row of x (rows of rowLen elements: the heads of each
// token, one token after the other) for the positions pos, one per token:
// len(x) = len(pos) × heads × rowLen. Elements outside [Offset, Offset+Dims) are unchanged.
func (r *RoPE) Apply(x []float32, rowLen int, pos []int32) {
	tokens := r.checkApply(x, rowLen, len(pos))
	var buf [maxRoPEDims]float32
	for t := range pos {
		r.Angles(buf[:r.Dims], pos[t:t+1])
		r.rotateToken(x, rowLen, tokens, t, buf[:r.Dims])
	}
}

// Angles fills table with what Apply turns by at the positions pos: for each position
// the Dims/2 cosines, then the Dims/2 sines, so len(table) = len(pos)·Dims. They depend
// only on the parameters SameAngles compares: the layers of a model that share them can
// compute them once per batch and rotate with ApplyAngles.
func (r *RoPE) Angles(table []float32, pos []int32) {
	half := r.Dims / 2
	if len(table) != len(pos)*r.Dims {
		panic(fmt.Sprintf("tensor.RoPE: a table of %d values for %d positions of %d dims", len(table), len(pos), r.Dims))
	}
	for t, p := range pos {
		angles := table[t*r.Dims : (t+1)*r.Dims]
		r.cache(angles[:half], angles[half:], p)
	}
}

// ApplyAngles is Apply with the angles Angles computed for the same positions, by this
// RoPE or one whose SameAngles(r) is true.
func (r *RoPE) ApplyAngles(x []float32, rowLen int, table []float32) {
	if len(table)%max(r.Dims, 1) != 0 {
		panic(fmt.Sprintf("tensor.RoPE: a table of %d values is not whole positions of %d dims", len(table), r.Dims))
	}
	tokens := r.checkApply(x, rowLen, len(table)/r.Dims)
	for t := range tokens {
		r.rotateToken(x, rowLen, tokens, t, table[t*r.Dims:(t+1)*r.Dims])
	}
}

// SameAngles says whether o turns every pair by the same angle as r at every position
// (Mode and Offset, which only say which elements turn, may differ).
func (r *RoPE) SameAngles(o *RoPE) bool {
	if r.Dims != o.Dims || r.Base != o.Base || r.FreqScale != o.FreqScale || r.ExtFactor != o.ExtFactor ||
		r.AttnFactor != o.AttnFactor || r.BetaFast != o.BetaFast || r.BetaSlow != o.BetaSlow || r.OrigCtx != o.OrigCtx ||
		len(r.FreqFactors) != len(o.FreqFactors) {
		return false
	}
	for i, f := range r.FreqFactors {
		if o.FreqFactors[i] != f {
			return false
		}
	}
	return true
}

// checkApply checks Apply's arguments for the given number of tokens and returns it.
func (r *RoPE) checkApply(x []float32, rowLen, tokens int) int {
	r.check(rowLen)
	if (tokens == 0) != (len(x) == 0) || (tokens > 0 && len(x)%(tokens*rowLen) != 0) {
		panic(fmt.Sprintf("tensor.RoPE: %d elements are not rows of %d for %d positions", len(x), rowLen, tokens))
	}
	return tokens
}

// rotateToken rotates the heads of token t of tokens in x by angles (one position's part
// of an Angles table).
func (r *RoPE) rotateToken(x []float32, rowLen, tokens, t int, angles []float32) {
	perToken := len(x) / tokens
	rotate := active.ropeNeoX
	if r.Mode == RoPENormal {
		rotate = active.ropeNormal
	}
	half := r.Dims / 2
	rotate(x[t*perToken+r.Offset:(t+1)*perToken], rowLen, perToken/rowLen, angles[:half], angles[half:])
}

// ropeNeoX and ropeNormal turn the window at the start of each of rows rows of x (rowLen
// apart; the window is 2·len(cos) elements) by the angles whose cosines and sines are cos
// and sin: x0·cos − x1·sin and x0·sin + x1·cos, where NeoX pairs x[i] with x[i+len(cos)]
// and normal x[2i] with x[2i+1]. rotateNeoX and rotateNormal are the generic level's; the
// SIMD levels have vector versions.
func rotateNeoX(x []float32, rowLen, rows int, cos, sin []float32) {
	rotatePairs(x, rowLen, rows, cos, sin, 0, len(cos), 1)
}

func rotateNormal(x []float32, rowLen, rows int, cos, sin []float32) {
	rotatePairs(x, rowLen, rows, cos, sin, 0, 1, 2)
}

// rotatePairs turns pairs first..len(cos)-1 of each row's window; pair i is the elements
// i·stride and i·stride+other. The first product of each result is fused as in ggml's build.
func rotatePairs(x []float32, rowLen, rows int, cos, sin []float32, first, other, stride int) {
	for h := range rows {
		w := x[h*rowLen : h*rowLen+2*len(cos)]
		for i := first; i < len(cos); i++ {
			a, b := &w[i*stride], &w[i*stride+other]
			x0, x1 := *a, *b
			*a = fma32(x0, cos[i], -float32(x1*sin[i]))
			*b = fma32(x0, sin[i], float32(x1*cos[i]))
		}
	}
}
