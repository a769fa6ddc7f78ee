package tensor

import (
	"fmt"
	"math"
)

// Gating is how router logits become expert probabilities; the values are llama.cpp's
// llama_expert_gating_func_type, as GGUF's {arch}.expert_gating_func stores them.
type Gating uint32

const (
	GatingSoftmax       Gating = 1 // softmax over all experts (Qwen, DeepSeek-V2)
	GatingSigmoid       Gating = 2 // independent sigmoids (DeepSeek-V3, GLM-4.5)
	GatingSoftmaxWeight Gating = 3 // select on raw logits, softmax over the selected (gpt-oss)
	GatingSqrtSoftplus  Gating = 4 // sqrt(softplus(logit))
)

func (g Gating) String() string {
	switch g {
	case GatingSoftmax:
		return "softmax"
	case GatingSigmoid:
		return "sigmoid"
	case GatingSoftmaxWeight:
		return "softmax-over-selected"
	case GatingSqrtSoftplus:
		return "sqrt-softplus"
	}
	return fmt.Sprintf("gating(%d)", uint32(g))
}

// SER is Smart Expert Reduction as ik_llama.cpp defined it (-ser Kmin,t): after top-k, the
// experts ranked Kmin or lower whose selection score is below t times the best one's are
// dropped, and the remaining weights are renormalised when the model normalises weights.
// It is off unless both values are positive.
type SER struct {
	MinExperts int
	Threshold  float32
}

// Enabled reports whether SER changes anything.
func (s SER) Enabled() bool { return s.MinExperts > 0 && s.Threshold > 0 }

// RouterConfig is one MoE layer's gating, as the model's metadata describes it.
type RouterConfig struct {
	Experts     int     // n_expert
	Used        int     // n_expert_used: experts per token (top-k)
	Gating      Gating  // how logits become probabilities
	NormWeights bool    // divide the selected weights by their sum
	Scale       float32 // expert_weights_scale, applied unless 0 or 1
	Groups      int     // expert groups; group-limited routing when > 1
	GroupsUsed  int     // groups kept per token
	SER         SER
}

// Validate checks the configuration the way llama.cpp's loader does, with messages that
// name the metadata involved.
func (c RouterConfig) Validate() error {
	switch {
	case c.Experts <= 0:
		return fmt.Errorf("expert_count is %d, want > 0", c.Experts)
	case c.Used <= 0 || c.Used > c.Experts:
		return fmt.Errorf("expert_used_count is %d, want 1..expert_count (%d)", c.Used, c.Experts)
	case c.Gating < GatingSoftmax || c.Gating > GatingSqrtSoftplus:
		return fmt.Errorf("unknown expert_gating_func %d", uint32(c.Gating))
	case c.Groups > 1 && c.Experts%c.Groups != 0:
		return fmt.Errorf("expert_count %d is not a multiple of expert_group_count %d", c.Experts, c.Groups)
	case c.Groups > 1 && (c.GroupsUsed <= 0 || c.GroupsUsed >= c.Groups):
		return fmt.Errorf("expert_group_used_count is %d, want 1..expert_group_count-1 (%d)", c.GroupsUsed, c.Groups-1)
	case c.Groups > 1 && c.Experts/c.Groups < 2:
		return fmt.Errorf("expert groups of %d experts: group scores need at least 2", c.Experts/c.Groups)
	case c.Groups > 1 && c.GroupsUsed*(c.Experts/c.Groups) < c.Used:
		return fmt.Errorf("%d groups of %d experts cannot supply %d experts per token", c.GroupsUsed, c.Experts/c.Groups, c.Used)
	case c.SER.MinExperts < 0 || c.SER.Threshold < 0 || math.IsNaN(float64(c.SER.Threshold)):
		return fmt.Errorf("-ser %d,%g: both values must be >= 0", c.SER.MinExperts, c.SER.Threshold)
	}
	return nil
}

// Router selects experts for one token at a time, reusing its buffers; one per goroutine.
type Router struct {
	cfg         RouterConfig
	probs, sel  []float32 // gating output and selection scores, per expert
	order       []int32   // the best experts (or groups), best first
	groupScores []float32
	keepGroup   []bool
}

// NewRouter validates cfg and allocates the router's buffers.
func NewRouter(cfg RouterConfig) (*Router, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Router{
		cfg: cfg, probs: make([]float32, cfg.Experts), sel: make([]float32, cfg.Experts),
		order: make([]int32, cfg.Experts), groupScores: make([]float32, max(cfg.Groups, 1)),
		keepGroup: make([]bool, max(cfg.Groups, 1)),
	}, nil
}

// Config is the router's configuration.
func (r *Router) Config() RouterConfig { return r.cfg }

// Route picks Used experts for a token, following llama.cpp's build_moe_ffn step by step:
// gating, selection bias (exp_probs_b, which steers selection but not the weights),
// group-limited selection, top-k in descending score order, weights from the unbiased
// probabilities, optional softmax over the selected, normalisation (with llama.cpp's clamp)
// and scaling. logits holds the router output for every expert (including the router's own
// bias, if any); bias is exp_probs_b or nil. ids and weights receive Used slots in slot
// order; a slot dropped by SER gets id -1 and weight 0.
func (r *Router) Route(logits, bias []float32, ids []int32, weights []float32) {
	c := r.cfg
	r.gate(logits)
	copy(r.sel, r.probs)
	if bias != nil {
		for i, b := range bias {
			r.sel[i] += b
		}
	}
	if c.Groups > 1 {
		r.limitGroups()
	}
	topIndices(r.order, r.sel, c.Used)
	for j, e := range r.order[:c.Used] {
		if c.SER.Enabled() && j >= c.SER.MinExperts && r.belowSERThreshold(r.sel[e], r.sel[r.order[0]]) {
			ids[j], weights[j] = -1, 0
			continue
		}
		ids[j], weights[j] = e, r.probs[e]
	}
	if c.Gating == GatingSoftmaxWeight {
		softmaxKept(ids[:c.Used], weights[:c.Used])
	}
	if c.NormWeights {
		var sum float64
		for _, w := range weights[:c.Used] {
			sum += float64(w)
		}
		s := max(float32(sum), 6.103515625e-5) // llama.cpp clamps to the smallest normal f16
		for j := range weights[:c.Used] {
			weights[j] /= s
		}
	}
	if c.Scale != 0 && c.Scale != 1 {
		for j := range weights[:c.Used] {
			weights[j] *= c.Scale
		}
	}
}

// belowSERThreshold decides whether SER drops an expert whose selection score is s when the
// best is best. ik_llama.cpp compares probabilities: s < t·best. With softmax-over-selected
// gating the scores are raw logits, so the same rule is applied to the probabilities they
// stand for, exp(s - best) < t.
func (r *Router) belowSERThreshold(s, best float32) bool {
	t := r.cfg.SER.Threshold
	if r.cfg.Gating == GatingSoftmaxWeight {
		return float32(math.Exp(float64(s-best))) < t
	}
	return s < t*best
}

// gate turns logits into r.probs.
func (r *Router) gate(logits []float32) {
	switch r.cfg.Gating {
	case GatingSoftmax:
		Softmax(r.probs, logits, len(logits), 1, nil)
	case GatingSigmoid:
		Sigmoid(r.probs, logits)
	case GatingSoftmaxWeight:
		copy(r.probs, logits)
	case GatingSqrtSoftplus:
		for i, x := range logits {
			r.probs[i] = float32(math.Sqrt(softplus(float64(x))))
		}
	}
}

// softplus is log(1+e^x), computed without overflow for large x as ggml does.
func softplus(x float64) float64 {
	if x > 20 {
		return x
	}
	return math.Log1p(math.Exp(x))
}

// softmaxKept replaces the weights of the kept slots (id >= 0) by their softmax.
func softmaxKept(ids []int32, weights []float32) {
	n := 0
	for j, id := range ids {
		if id >= 0 {
			weights[n] = weights[j]
			n++
		}
	}
	kept := weights[:n]
	if n > 0 {
		Softmax(kept, kept, n, 1, nil)
	}
	for j := len(ids) - 1; j >= 0; j-- { // spread the results back over their slots
		if ids[j] >= 0 {
			n--
			weights[j] = kept[n]
		} else {
			weights[j] = 0
		}
	}
}

// limitGroups keeps the GroupsUsed expert groups with the highest score — the sum of their
// two best selection scores — and sets every other expert's score to -inf.
func (r *Router) limitGroups() {
	c := r.cfg
	size := c.Experts / c.Groups
	for g := range c.Groups {
		group := r.sel[g*size : (g+1)*size]
		first, second := float32(math.Inf(-1)), float32(math.Inf(-1))
		for _, s := range group {
			if s > first {
				first, second = s, first
			} else if s > second {
				second = s
			}
		}
		r.groupScores[g] = first + second
	}
	groups := r.order[:c.GroupsUsed]
	topIndices(groups, r.groupScores[:c.Groups], c.GroupsUsed)
	clear(r.keepGroup)
	for _, g := range groups {
		r.keepGroup[g] = true
	}
	negInf := float32(math.Inf(-1))
	for g, keep := range r.keepGroup {
		if !keep {
			for i := g * size; i < (g+1)*size; i++ {
				r.sel[i] = negInf
			}
		}
	}
}

// topIndices writes to top[:k] the indices of the k highest scores, highest first; equal scores
// keep the lower index first (llama.cpp's argsort leaves ties unspecified). Insertion into a
// short sorted list: k is small (8 of 256 experts), so this is one pass over the scores.
func topIndices(top []int32, score []float32, k int) {
	n := 0
	for i, s := range score {
		if n == k && !(s > score[top[n-1]]) { // later equal scores never beat earlier ones
			continue
		}
		j := min(n, k-1)
		for j > 0 && s > score[top[j-1]] {
			top[j] = top[j-1]
			j--
		}
		top[j] = int32(i)
		n = min(n+1, k)
	}
}
