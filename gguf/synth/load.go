package synth

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
)

// ExpertLoad is how unevenly a random model's routers spread tokens over the experts.
// Random router weights route almost uniformly, where a trained model keeps some experts
// busier than others; a placement that keeps the busy experts in VRAM can only be measured
// on a model that has some.
//
// The non-uniform load draws each MoE layer's expert loads from a gamma distribution of
// shape Shape (the symmetric Dirichlet's parameter), each layer its own draw, so that every
// layer has its own hot experts. One shape fits all three figures that a public measurement
// of Qwen3-30B-A3B's routing gives for each workload
// (https://mcp-tool-shop-org.github.io/gpu-container/handbook/derisk/, llama-imatrix's
// per-expert counts, 128 experts, 8 used): the experts needed for 90% of the selections,
// 1 − normalised entropy, and the top expert's share. Shape 0.7 gives 67, 0.114 and 5.2%
// for the diverse workload's 65, 0.111 and 4.3%; shape 0.5 gives 58, 0.147 and 6.3% for
// the narrow (Python) one's 58, 0.154 and 6.3% (expected sorted loads, 128 experts).
type ExpertLoad struct {
	Shape float64 // 0: uniform
}

// ParseExpertLoad reads `uniform` or `gamma:SHAPE` (SHAPE > 0; smaller is more uneven).
func ParseExpertLoad(s string) (ExpertLoad, error) {
	if s == "" || s == "uniform" {
		return ExpertLoad{}, nil
	}
	shape, ok := strings.CutPrefix(s, "gamma:")
	if !ok {
		return ExpertLoad{}, fmt.Errorf("expert load %q: want uniform or gamma:SHAPE (e.g. gamma:0.7)", s)
	}
	k, err := strconv.ParseFloat(shape, 64)
	if err != nil || !(k >= minLoadShape && k <= maxLoadShape) {
		return ExpertLoad{}, fmt.Errorf("expert load %q: the gamma shape must be a number from %g to %g", s, minLoadShape, maxLoadShape)
	}
	return ExpertLoad{Shape: k}, nil
}

// The gamma shapes ParseExpertLoad accepts: below 0.05 a layer's load sits on a handful of
// experts, more than maxSelectRate lets the routers give; above 100 the loads are uniform
// to within a tenth.
const (
	minLoadShape = 0.05
	maxLoadShape = 100.0
)

func (l ExpertLoad) String() string {
	if l.Shape == 0 {
		return "uniform"
	}
	return "gamma:" + strconv.FormatFloat(l.Shape, 'g', -1, 64)
}

// maxSelectRate caps how often one expert may be picked. Each router row is scaled, not
// shifted (the hidden states of a random model have no direction to shift along), so an
// expert's logit is a centred normal and beats a positive threshold less than half the
// time. maxUniformRate bounds the share of experts a token uses for an uneven load to be
// possible: with a quarter, the busiest experts may still be picked 1.8 times as often as
// the uniform rate (Qwen3-30B-A3B uses 8 of 128, a sixteenth).
const (
	maxSelectRate  = 0.45
	maxUniformRate = 0.25
)

// CheckExpertLoad reports whether the model's routers can carry the load: a MoE model
// whose tokens use at most a quarter of its experts, or any model with the uniform load.
func (m *Model) CheckExpertLoad(l ExpertLoad) error {
	c := &m.Preset.Config
	if l.Shape == 0 {
		return nil
	}
	if c.Experts == 0 {
		return fmt.Errorf("expert load %s: %s has no experts", l, m.Preset.Name)
	}
	if float64(c.ExpertsUsed) > maxUniformRate*float64(c.Experts) {
		return fmt.Errorf("expert load %s: a token uses %d of %s's %d experts, more than a quarter, which leaves no room for uneven loads; use uniform", l, c.ExpertsUsed, m.Preset.Name, c.Experts)
	}
	return nil
}

// routerScales is the factor each of a router's experts rows is multiplied by for the
// layer's drawn load (routerRates, scalesFor). The rng is the layer's own (routerRNG).
func (l ExpertLoad) routerScales(experts, used int, rng *rand.Rand) []float64 {
	return scalesFor(l.routerRates(experts, used, rng))
}

// routerRates draws a layer's expert loads and returns how often each expert is to be
// picked per token (they sum to used; none above maxSelectRate).
func (l ExpertLoad) routerRates(experts, used int, rng *rand.Rand) []float64 {
	rates := make([]float64, experts)
	total := 0.0
	for e := range rates {
		rates[e] = gammaSample(l.Shape, rng)
		total += rates[e]
	}
	for e := range rates {
		rates[e] *= float64(used) / total
	}
	capRates(rates, maxSelectRate)
	return rates
}

// scalesFor returns row scales with which the top-used of the experts' independent centred
// normal logits, scale_e·z_e, picks expert e at rates[e] (Σ rates = used). The
// approximation: the used-th largest logit is about one fixed threshold t for every token,
// so e is picked when z_e > t/scale_e, at rate 1 − Φ(t/scale_e); with Σ rates = used any t
// works. The scales are normalised to a root mean square of 1, keeping the router's gain.
func scalesFor(rates []float64) []float64 {
	scales := make([]float64, len(rates))
	sumSq := 0.0
	for e, r := range rates {
		r = max(r, 1e-6) // a never-picked expert: its row is small, not zero
		scales[e] = 1 / (math.Sqrt2 * math.Erfinv(1-2*r))
		sumSq += scales[e] * scales[e]
	}
	rms := math.Sqrt(sumSq / float64(len(rates)))
	for e := range scales {
		scales[e] /= rms
	}
	return scales
}

// capRates lowers the rates above limit to it and raises the others in proportion so that
// their sum stays the same (a few rounds: raising can push another over).
func capRates(rates []float64, limit float64) {
	for range len(rates) {
		over, rest := 0.0, 0.0
		for _, r := range rates {
			if r > limit {
				over += r - limit
			} else {
				rest += r
			}
		}
		if over <= 1e-12 || rest == 0 {
			return
		}
		for e, r := range rates {
			if r > limit {
				rates[e] = limit
			} else {
				rates[e] = r * (1 + over/rest)
			}
		}
	}
}

// gammaSample draws from the gamma distribution of shape k and scale 1 (Marsaglia and
// Tsang's method; below shape 1 through shape k+1 times U^(1/k)).
func gammaSample(k float64, rng *rand.Rand) float64 {
	if k < 1 {
		return gammaSample(k+1, rng) * math.Pow(1-rng.Float64(), 1/k)
	}
	d := k - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := rng.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := 1 - rng.Float64()
		if math.Log(u) < 0.5*x*x+d-d*v+d*math.Log(v) {
			return d * v
		}
	}
}

// routerRNG is the random stream of one router's loads: from the seed and the tensor's
// name, so that each layer draws its own and the same seed gives the same file.
func routerRNG(seed uint64, name string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(name))
	return rand.New(rand.NewPCG(seed, h.Sum64()^0x6c6f6164)) // "load"
}
