package tensor

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func route(t *testing.T, cfg RouterConfig, logits, bias []float32) ([]int32, []float32) {
	t.Helper()
	r, err := NewRouter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ids, w := make([]int32, cfg.Used), make([]float32, cfg.Used)
	r.Route(logits, bias, ids, w)
	return ids, w
}

var approx = cmpopts.EquateApprox(0, 1e-6)

func TestRouterSoftmaxNormalised(t *testing.T) {
	// Qwen3: softmax over all experts, top-2, renormalised: e^4/(e^4+e^3) and e^3/(e^4+e^3).
	ids, w := route(t, RouterConfig{Experts: 8, Used: 2, Gating: GatingSoftmax, NormWeights: true},
		[]float32{1, 2, 3, 4, 0, 0, 0, 0}, nil)
	if !cmp.Equal(ids, []int32{3, 2}) || !cmp.Equal(w, []float32{0.7310586, 0.26894142}, approx) {
		t.Errorf("ids %v weights %v", ids, w)
	}
}

func TestRouterSoftmaxUnnormalised(t *testing.T) {
	// qwen2moe / DeepSeek-V2: weights are the softmax probabilities themselves.
	logits := []float32{0, math.Ln2, 0, 0} // probabilities 1/5, 2/5, 1/5, 1/5
	ids, w := route(t, RouterConfig{Experts: 4, Used: 2, Gating: GatingSoftmax}, logits, nil)
	// Ties between experts 0, 2 and 3 go to the lowest index.
	if !cmp.Equal(ids, []int32{1, 0}) || !cmp.Equal(w, []float32{0.4, 0.2}, approx) {
		t.Errorf("ids %v weights %v", ids, w)
	}
}

func TestRouterDeepSeekV3(t *testing.T) {
	// Sigmoid gating, selection bias, 4 groups of 4 experts (keep 2), top-4, weights from the
	// unbiased sigmoids, normalised, times 2.5. Logits are chosen so sigmoid(logit) is exact
	// enough to reason about: sigmoid(0) = 0.5.
	logits := make([]float32, 16)
	bias := make([]float32, 16)
	// Group 0 (experts 0-3) holds the single best expert (10) but a weak second (0).
	bias[0], bias[1] = 0.9, -0.5
	// Group 1 (4-7): two good experts.
	bias[4], bias[5] = 0.6, 0.55
	// Group 2 (8-11): two decent ones.
	bias[8], bias[9] = 0.5, 0.5
	// Group 3 (12-15): one good, rest low.
	bias[12], bias[13] = 0.7, -0.4
	// Biased scores: g0 top2 = 1.4 + 0.5 = 1.9; g1 = 1.1 + 1.05 = 2.15; g2 = 1.0 + 1.0 = 2.0;
	// g3 = 1.2 + 0.5 = 1.7. Kept groups: 1 and 2. Top-4 among experts 4-11 by biased score:
	// 4 (1.1), 5 (1.05), 8 (1.0), 9 (1.0). Expert 0 (1.4) and 12 (1.2) are masked out.
	cfg := RouterConfig{Experts: 16, Used: 4, Gating: GatingSigmoid, NormWeights: true, Scale: 2.5, Groups: 4, GroupsUsed: 2}
	ids, w := route(t, cfg, logits, bias)
	if !cmp.Equal(ids, []int32{4, 5, 8, 9}) {
		t.Fatalf("ids %v", ids)
	}
	// Unbiased probabilities are all 0.5, so normalised weights are 1/4 each, scaled to 0.625.
	if !cmp.Equal(w, []float32{0.625, 0.625, 0.625, 0.625}, approx) {
		t.Errorf("weights %v", w)
	}
	// Without group limits the biased top-4 is 0, 12, 4, 5.
	cfg.Groups, cfg.GroupsUsed = 0, 0
	if ids, _ := route(t, cfg, logits, bias); !cmp.Equal(ids, []int32{0, 12, 4, 5}) {
		t.Errorf("ungrouped ids %v", ids)
	}
}

func TestRouterSoftmaxOverSelected(t *testing.T) {
	// gpt-oss: top-k on the raw logits, softmax over the k selected, no normalisation step.
	ids, w := route(t, RouterConfig{Experts: 5, Used: 2, Gating: GatingSoftmaxWeight},
		[]float32{0.5, 3, -1, 3 - math.Ln2, 2}, nil)
	// Selected: 1 (3) and 3 (3 - ln 2): softmax = 2/3, 1/3.
	if !cmp.Equal(ids, []int32{1, 3}) || !cmp.Equal(w, []float32{2.0 / 3, 1.0 / 3}, approx) {
		t.Errorf("ids %v weights %v", ids, w)
	}
}

func TestRouterSqrtSoftplus(t *testing.T) {
	ids, w := route(t, RouterConfig{Experts: 3, Used: 1, Gating: GatingSqrtSoftplus}, []float32{0, 30, -2}, nil)
	// softplus(30) = 30 to float precision; sqrt = 5.477226.
	if ids[0] != 1 || !cmp.Equal(w[0], float32(math.Sqrt(30)), approx) {
		t.Errorf("ids %v weights %v", ids, w)
	}
}

func TestRouterSumClamp(t *testing.T) {
	// Sigmoids of very negative logits sum to ~2e-9, below llama.cpp's clamp of 2^-14: the
	// weights are divided by the clamp, not by their sum.
	ids, w := route(t, RouterConfig{Experts: 2, Used: 2, Gating: GatingSigmoid, NormWeights: true}, []float32{-20, -21}, nil)
	want0 := float32(1/(1+math.Exp(20))) / 6.103515625e-5
	if ids[0] != 0 || !cmp.Equal(w[0], want0, cmpopts.EquateApprox(1e-5, 0)) {
		t.Errorf("ids %v weights %v, want first %g", ids, w, want0)
	}
}

func TestRouterSER(t *testing.T) {
	// Softmax probabilities 0.4, 0.3, 0.2, 0.1 (logits are their logs). Top-3 with
	// -ser 1,0.6: rank 0 always stays; rank 1 (0.3 >= 0.24) stays; rank 2 (0.2 < 0.24) goes.
	logits := []float32{float32(math.Log(0.4)), float32(math.Log(0.3)), float32(math.Log(0.2)), float32(math.Log(0.1))}
	cfg := RouterConfig{Experts: 4, Used: 3, Gating: GatingSoftmax, NormWeights: true, SER: SER{MinExperts: 1, Threshold: 0.6}}
	ids, w := route(t, cfg, logits, nil)
	if !cmp.Equal(ids, []int32{0, 1, -1}) || !cmp.Equal(w, []float32{0.4 / 0.7, 0.3 / 0.7, 0}, approx) {
		t.Errorf("with normalisation: ids %v weights %v", ids, w)
	}
	// Without normalisation (DeepSeek-V2) the kept weights stay as they were.
	cfg.NormWeights = false
	if _, w := route(t, cfg, logits, nil); !cmp.Equal(w, []float32{0.4, 0.3, 0}, approx) {
		t.Errorf("without normalisation: weights %v", w)
	}
	// -ser 3,0.6 keeps every rank below 3: no change from plain top-3.
	cfg.SER.MinExperts = 3
	if ids, _ := route(t, cfg, logits, nil); !cmp.Equal(ids, []int32{0, 1, 2}) {
		t.Errorf("Kmin = k: ids %v", ids)
	}
	// t = 1 keeps exactly Kmin experts.
	cfg.SER = SER{MinExperts: 2, Threshold: 1}
	if ids, _ := route(t, cfg, logits, nil); !cmp.Equal(ids, []int32{0, 1, -1}) {
		t.Errorf("t = 1: ids %v", ids)
	}
	// With softmax-over-selected gating a dropped slot takes no part in the softmax.
	// The threshold applies to the probabilities the logits stand for: exp(-ln 2) = 0.5 >= 0.4
	// stays, exp(-7) goes.
	cfg = RouterConfig{Experts: 4, Used: 3, Gating: GatingSoftmaxWeight, SER: SER{MinExperts: 1, Threshold: 0.4}}
	ids, w = route(t, cfg, []float32{2, 2 - math.Ln2, -5, -6}, nil)
	if !cmp.Equal(ids, []int32{0, 1, -1}) || !cmp.Equal(w, []float32{2.0 / 3, 1.0 / 3, 0}, approx) {
		t.Errorf("softmax-over-selected with SER: ids %v weights %v", ids, w)
	}
}

func TestRouterValidate(t *testing.T) {
	for _, c := range []struct {
		cfg  RouterConfig
		want string
	}{
		{RouterConfig{Experts: 0, Used: 1, Gating: GatingSoftmax}, "expert_count"},
		{RouterConfig{Experts: 8, Used: 9, Gating: GatingSoftmax}, "expert_used_count"},
		{RouterConfig{Experts: 8, Used: 2, Gating: 7}, "expert_gating_func 7"},
		{RouterConfig{Experts: 10, Used: 2, Gating: GatingSigmoid, Groups: 4, GroupsUsed: 2}, "not a multiple"},
		{RouterConfig{Experts: 16, Used: 2, Gating: GatingSigmoid, Groups: 4, GroupsUsed: 4}, "expert_group_used_count"},
		{RouterConfig{Experts: 16, Used: 6, Gating: GatingSigmoid, Groups: 4, GroupsUsed: 1}, "cannot supply 6"},
		{RouterConfig{Experts: 8, Used: 2, Gating: GatingSoftmax, SER: SER{MinExperts: -1}}, "-ser"},
	} {
		if err := c.cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
}

func TestRouterNoSteadyStateAllocs(t *testing.T) {
	r, _ := NewRouter(RouterConfig{Experts: 256, Used: 8, Gating: GatingSigmoid, NormWeights: true, Scale: 2.5, Groups: 8, GroupsUsed: 4})
	logits, bias := make([]float32, 256), make([]float32, 256)
	for i := range logits {
		logits[i] = float32(i%17) / 7
		bias[i] = float32(i%5) / 100
	}
	ids, w := make([]int32, 8), make([]float32, 8)
	if a := testing.AllocsPerRun(50, func() { r.Route(logits, bias, ids, w) }); a > 0 {
		t.Errorf("%.0f allocations per token", a)
	}
}

func BenchmarkRouteDeepSeekV3(b *testing.B) {
	r, _ := NewRouter(RouterConfig{Experts: 256, Used: 8, Gating: GatingSigmoid, NormWeights: true, Scale: 2.5, Groups: 8, GroupsUsed: 4})
	logits, bias := make([]float32, 256), make([]float32, 256)
	gen := rand.New(rand.NewPCG(3, 0))
	for i := range logits {
		logits[i] = float32(gen.Uint32()>>8)/float32(1<<22) - 2
		bias[i] = float32(gen.Uint32()>>8) / float32(1<<28)
	}
	ids, w := make([]int32, 8), make([]float32, 8)
	for b.Loop() {
		r.Route(logits, bias, ids, w)
	}
}

// TestTopIndicesMatchesSort compares the insertion selection with a stable sort on random
// scores drawn from a small set, so ties are common.
func TestTopIndicesMatchesSort(t *testing.T) {
	gen := rand.New(rand.NewPCG(9, 0))
	for trial := range 2000 {
		n := 1 + int(gen.Uint32()%40)
		k := 1 + int(gen.Uint32()%uint32(n))
		score := make([]float32, n)
		for i := range score {
			score[i] = float32(gen.Uint32() % 7)
		}
		want := make([]int32, n)
		for i := range want {
			want[i] = int32(i)
		}
		slices.SortStableFunc(want, func(a, b int32) int { return int(score[b] - score[a]) })
		got := make([]int32, k)
		topIndices(got, score, k)
		if !slices.Equal(got, want[:k]) {
			t.Fatalf("trial %d: scores %v k %d: got %v, want %v", trial, score, k, got, want[:k])
		}
	}
}
