package synth

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// pickRates simulates tokens top-used routings of independent standard normal logits
// scaled by scales and returns how often each expert was picked per token.
func pickRates(scales []float64, used, tokens int, rng *rand.Rand) []float64 {
	picked := make([]float64, len(scales))
	logits := make([]float64, len(scales))
	order := make([]int, len(scales))
	for range tokens {
		for e, s := range scales {
			logits[e] = s * rng.NormFloat64()
			order[e] = e
		}
		slices.SortFunc(order, func(a, b int) int {
			if logits[a] > logits[b] {
				return -1
			}
			return 1
		})
		for _, e := range order[:used] {
			picked[e]++
		}
	}
	for e := range picked {
		picked[e] /= float64(tokens)
	}
	return picked
}

// loadFigures are the public measurement's three figures of a layer's selections (see
// ExpertLoad): the experts needed for 90% of them, 1 − normalised entropy, the top share.
func loadFigures(rates []float64) (cover90 int, concentration, top float64) {
	p := slices.Clone(rates)
	slices.SortFunc(p, func(a, b float64) int {
		if a > b {
			return -1
		}
		return 1
	})
	total := 0.0
	for _, r := range p {
		total += r
	}
	sum, entropy := 0.0, 0.0
	for i, r := range p {
		r /= total
		if sum < 0.9 {
			cover90 = i + 1
		}
		sum += r
		if r > 0 {
			entropy -= r * math.Log(r)
		}
	}
	return cover90, 1 - entropy/math.Log(float64(len(p))), p[0] / total
}

// TestRouterScalesGiveTheLoad checks the approximation scalesFor rests on: routing
// simulated with its scales picks each expert at about the rate asked, and the figures of
// the public measurement come out of a Qwen3-30B-A3B-shaped router (128 experts, 8 used)
// as the gamma shapes were chosen to give them, averaged over layers.
func TestRouterScalesGiveTheLoad(t *testing.T) {
	const experts, used, layers, tokens = 128, 8, 8, 20000
	for _, tc := range []struct {
		shape         float64
		cover90       float64 // the source's figures
		concentration float64
		top           float64
	}{
		{0.7, 65, 0.111, 0.043}, // diverse workload
		{0.5, 58, 0.154, 0.063}, // narrow (Python)
	} {
		load := ExpertLoad{Shape: tc.shape}
		rng := rand.New(rand.NewPCG(1, 2))
		var cover, conc, top, worst float64
		for range layers {
			rates := load.routerRates(experts, used, rng)
			got := pickRates(scalesFor(rates), used, tokens, rng)
			distance := 0.0 // total variation between the asked and the simulated picks
			for e := range rates {
				distance += math.Abs(got[e]-rates[e]) / (2 * used)
			}
			worst = max(worst, distance)
			c, k, p := loadFigures(got)
			cover += float64(c) / layers
			conc += k / layers
			top += p / layers
		}
		t.Logf("%s: simulated 90%% cover %.1f (source %g), concentration %.3f (%g), top %.3f (%g); worst total variation from the asked rates %.3f",
			load, cover, tc.cover90, conc, tc.concentration, top, tc.top, worst)
		if worst > 0.08 {
			t.Errorf("%s: a layer's simulated picks are %.3f (total variation) from the rates asked", load, worst)
		}
		if math.Abs(cover-tc.cover90) > 8 || math.Abs(conc-tc.concentration) > 0.05 || math.Abs(top-tc.top) > 0.03 {
			t.Errorf("%s: simulated figures %.1f, %.3f, %.3f; the source's %g, %g, %g", load, cover, conc, top, tc.cover90, tc.concentration, tc.top)
		}
	}
}

func TestParseExpertLoad(t *testing.T) {
	for in, want := range map[string]float64{"": 0, "uniform": 0, "gamma:0.7": 0.7, "gamma:5e-2": 0.05, "gamma:100": 100} {
		got, err := ParseExpertLoad(in)
		if err != nil || got.Shape != want {
			t.Errorf("ParseExpertLoad(%q) = %v, %v; want shape %g", in, got, err, want)
		}
	}
	for _, in := range []string{"gamma", "gamma:", "gamma:0", "gamma:-1", "gamma:NaN", "gamma:inf", "gamma:0.01", "gamma:101", "zipf:1", "Uniform"} {
		if _, err := ParseExpertLoad(in); err == nil {
			t.Errorf("ParseExpertLoad(%q) accepted", in)
		}
	}
}

func FuzzParseExpertLoad(f *testing.F) {
	for _, s := range []string{"uniform", "gamma:0.7", "gamma:1e300", "gamma:0x1p-3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseExpertLoad(s)
		if err != nil {
			return
		}
		if l.Shape != 0 && !(l.Shape >= minLoadShape && l.Shape <= maxLoadShape) {
			t.Fatalf("%q gave shape %g", s, l.Shape)
		}
		back, err := ParseExpertLoad(l.String())
		if err != nil || back != l {
			t.Fatalf("%q: %v does not read back (%v, %v)", s, l, back, err)
		}
	})
}
