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

// cache fills cache[2i], cache[2i+1] with the cos and sin of pair i at position pos
// (ggml_rope_cache_init: the angle advances by one float32 multiplication per pair). Where
// a multiply feeds an add, ggml's build (GCC, -ffp-contract=fast) fuses one of them; the
// fused one is the one that gives ggml's bits in TestRoPEMatchesGGML.
func (r *RoPE) cache(cache []float32, pos int32) {
	thetaScale := float32(math.Pow(float64(r.Base), float64(-2/float32(r.Dims))))
	low, high := r.corrDims()
	mscale := r.AttnFactor
	if r.ExtFactor != 0 {
		mscale *= fma32(0.1, log32(1/r.FreqScale), 1)
	}
	theta := float32(pos)
	for i := 0; i < r.Dims; i += 2 {
		extrap := theta
		if r.FreqFactors != nil {
			extrap = theta / r.FreqFactors[i/2]
		}
		angle := r.FreqScale * extrap // interpolation
		if r.ExtFactor != 0 {
			y := (float32(i/2) - low) / max(0.001, high-low)
			mix := (1 - min(1, max(0, y))) * r.ExtFactor
			angle = fma32(angle, 1-mix, float32(extrap*mix))
		}
		cache[i] = cos32(angle) * mscale
		cache[i+1] = sin32(angle) * mscale
		theta *= thetaScale
	}
}

// Apply rotates, in place, every row of x (rows of rowLen elements: the heads of each
// token, one token after the other) for the positions pos, one per token:
// len(x) = len(pos) × heads × rowLen. Elements outside [Offset, Offset+Dims) are unchanged.
func (r *RoPE) Apply(x []float32, rowLen int, pos []int32) {
	r.check(rowLen)
	if len(pos) == 0 && len(x) == 0 {
		return
	}
	if len(pos) == 0 || len(x)%(len(pos)*rowLen) != 0 {
		panic(fmt.Sprintf("tensor.RoPE: %d elements are not rows of %d for %d positions", len(x), rowLen, len(pos)))
	}
	perToken := len(x) / len(pos)
	var buf [maxRoPEDims]float32
	cache := buf[:r.Dims]
	for t, p := range pos {
		r.cache(cache, p)
		for h := t * perToken; h < (t+1)*perToken; h += rowLen {
			r.rotate(x[h+r.Offset:h+r.Offset+r.Dims], cache)
		}
	}
}

// rotate turns the pairs of one head's window by the angles in cache: x0·cos − x1·sin and
// x0·sin + x1·cos, the first product of each fused as in ggml's build.
func (r *RoPE) rotate(x, cache []float32) {
	half := r.Dims / 2
	for i := 0; i < half; i++ {
		cos, sin := cache[2*i], cache[2*i+1]
		var a, b *float32
		if r.Mode == RoPENormal {
			a, b = &x[2*i], &x[2*i+1]
		} else {
			a, b = &x[i], &x[i+half]
		}
		x0, x1 := *a, *b
		*a = fma32(x0, cos, -float32(x1*sin))
		*b = fma32(x0, sin, float32(x1*cos))
	}
}
