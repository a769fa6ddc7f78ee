package backendtest

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/tensor"
)

// routeConfig is one MoE router of a model family.
type routeConfig struct {
	name string
	cfg  tensor.RouterConfig
	bias bool // a selection bias (exp_probs_b)
}

var routeConfigs = []routeConfig{
	{"qwen3", tensor.RouterConfig{Experts: 16, Used: 4, Gating: tensor.GatingSoftmax, NormWeights: true}, false},
	{"deepseek-v2", tensor.RouterConfig{Experts: 16, Used: 4, Gating: tensor.GatingSoftmax, Scale: 16, Groups: 4, GroupsUsed: 2}, false},
	{"deepseek-v3", tensor.RouterConfig{Experts: 32, Used: 6, Gating: tensor.GatingSigmoid, NormWeights: true, Scale: 2.5,
		Groups: 8, GroupsUsed: 3}, true},
	{"gpt-oss", tensor.RouterConfig{Experts: 32, Used: 4, Gating: tensor.GatingSoftmaxWeight}, false},
	{"sqrt-softplus", tensor.RouterConfig{Experts: 16, Used: 2, Gating: tensor.GatingSqrtSoftplus, NormWeights: true}, true},
	{"ser", tensor.RouterConfig{Experts: 16, Used: 6, Gating: tensor.GatingSoftmax, NormWeights: true,
		SER: tensor.SER{MinExperts: 2, Threshold: 0.3}}, false},
	{"ser-softmax-weight", tensor.RouterConfig{Experts: 32, Used: 4, Gating: tensor.GatingSoftmaxWeight,
		SER: tensor.SER{MinExperts: 1, Threshold: 0.4}}, false},
	{"ser-groups", tensor.RouterConfig{Experts: 32, Used: 6, Gating: tensor.GatingSigmoid, NormWeights: true, Scale: 2.5,
		Groups: 8, GroupsUsed: 3, SER: tensor.SER{MinExperts: 2, Threshold: 0.7}}, true},
}

// routeSuite routes tokens whose logits are drawn away from ties — no two scores that
// decide a selection (a group's rank, an expert's rank, SER's threshold) closer than a
// thousandth of the largest — so that the expert ids must be the reference's exactly.
func routeSuite(e *env) {
	if !e.supports(tensor.F32) {
		return
	}
	for _, rc := range routeConfigs {
		for _, n := range []int{1, 7, 65} {
			e.run(fmt.Sprintf("%s/tokens=%d", rc.name, n), func(c *tcase) {
				cfg := rc.cfg
				var bias []float32
				if rc.bias {
					bias = c.uniform(cfg.Experts, -0.1, 0.1)
				}
				logits := make([]float32, 0, n*cfg.Experts)
				for range n {
					for try := 0; ; try++ {
						if try == 10000 {
							c.t.Fatal("no logits clear of ties")
						}
						row := c.uniform(cfg.Experts, -4, 4)
						if clearOfTies(cfg, row, bias) {
							logits = append(logits, row...)
							break
						}
					}
				}
				l := c.values("logits", cfg.Experts, n, logits)
				var b Tensor
				if bias != nil {
					b = c.values("bias", cfg.Experts, 1, bias)
				}
				ids := c.output("ids", tensor.I32, cfg.Used, n, 0)
				weights := c.output("weights", tensor.F32, cfg.Used, n, SoftmaxErr)
				c.run(func(be backend.Backend, s side) error {
					return be.Route(ids.on(s), weights.on(s), l.on(s), b.on(s), cfg)
				})
			})
		}
	}
}

// clearOfTies reports whether the selection of a token with these logits is decided by
// margins that no rounding changes.
func clearOfTies(cfg tensor.RouterConfig, logits, bias []float32) bool {
	e := cfg.Experts
	sel := make([]float64, e)
	switch cfg.Gating {
	case tensor.GatingSoftmax:
		top, sum := float64(slices.Max(logits)), 0.0
		for i, l := range logits {
			sel[i] = math.Exp(float64(l) - top)
			sum += sel[i]
		}
		for i := range sel {
			sel[i] /= sum
		}
	case tensor.GatingSigmoid:
		for i, l := range logits {
			sel[i] = 1 / (1 + math.Exp(-float64(l)))
		}
	case tensor.GatingSoftmaxWeight:
		for i, l := range logits {
			sel[i] = float64(l)
		}
	case tensor.GatingSqrtSoftplus:
		for i, l := range logits {
			sel[i] = math.Sqrt(math.Log1p(math.Exp(float64(l))))
		}
	}
	for i, b := range bias {
		sel[i] += float64(b)
	}
	tol := 0.0
	for _, s := range sel {
		tol = max(tol, 1e-3*math.Abs(s))
	}
	// decided reports whether the scores, ranked, are clear of each other down to rank k.
	decided := func(scores []float64, k int) bool {
		ranked := slices.Clone(scores)
		slices.SortFunc(ranked, func(a, b float64) int { return cmp.Compare(b, a) }) // best first
		for j := 0; j < k && j+1 < len(ranked); j++ {
			if !math.IsInf(ranked[j+1], -1) && ranked[j]-ranked[j+1] < tol {
				return false
			}
		}
		return true
	}
	if cfg.Groups > 1 {
		size := e / cfg.Groups
		groups := make([]float64, cfg.Groups)
		for g := range groups {
			group := slices.Clone(sel[g*size : (g+1)*size])
			slices.Sort(group)
			groups[g] = group[size-1] + group[size-2]
		}
		ranked := slices.Clone(groups)
		slices.Sort(ranked)
		cut := ranked[cfg.Groups-cfg.GroupsUsed]
		if cut-ranked[cfg.Groups-cfg.GroupsUsed-1] < tol {
			return false
		}
		for g, s := range groups {
			if s < cut {
				for i := g * size; i < (g+1)*size; i++ {
					sel[i] = math.Inf(-1)
				}
			}
		}
	}
	if !decided(sel, cfg.Used) {
		return false
	}
	if cfg.SER.Enabled() {
		ranked := slices.Clone(sel)
		slices.SortFunc(ranked, func(a, b float64) int { return cmp.Compare(b, a) }) // best first
		t, best := float64(cfg.SER.Threshold), ranked[0]
		for j := cfg.SER.MinExperts; j < cfg.Used; j++ {
			s := ranked[j]
			if cfg.Gating == tensor.GatingSoftmaxWeight {
				if math.Abs(math.Exp(s-best)-t) < 1e-3 {
					return false
				}
			} else if math.Abs(s-t*best) < tol {
				return false
			}
		}
	}
	return true
}
