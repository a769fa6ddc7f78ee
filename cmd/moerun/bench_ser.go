package main

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/moerun/moerun/moe"
)

// Smart expert reduction in `moerun bench`: -ser takes a list of KMIN,T pairs, as
// ik_llama.cpp's llama-bench (6,0.5,4,1 is two settings; repeats append; its default,
// -1,0, is off), and every test runs with each. What SER costs in quality is measured on
// the same rows: a fixed English text is evaluated once without SER and once with the
// row's setting, and the row gets the text's perplexity under that setting, the mean
// Kullback-Leibler divergence of its next-token distributions from those without SER, and
// how often the most likely next token stays the same (llama-perplexity's
// --kl-divergence statistics). A speed gain then reads next to its price.

// benchSER is one -ser setting; label is how ik_llama.cpp's llama-bench writes it.
type benchSER struct {
	label string
	ser   moe.SER
}

// parseSERList reads every occurrence of bench's -ser into settings: KMIN,T pairs with
// KMIN ≥ -1 (-1 or 0: off, as a T of 0) and T ≥ 0.
func parseSERList(occurrences []string) ([]benchSER, error) {
	var out []benchSER
	for _, occ := range occurrences {
		items := strings.Split(occ, ",")
		if len(items)%2 != 0 {
			return nil, badInput("-ser %q: want pairs KMIN,T such as 6,0.5 or 6,0.5,4,1 (-1,0 is off)", occ)
		}
		for i := 0; i < len(items); i += 2 {
			kmin, err1 := strconv.Atoi(strings.TrimSpace(items[i]))
			t, err2 := strconv.ParseFloat(strings.TrimSpace(items[i+1]), 32)
			if err1 != nil || err2 != nil || kmin < -1 || t < 0 || math.IsNaN(t) || math.IsInf(t, 0) {
				return nil, badInput("-ser %q: %q,%q is not a pair KMIN,T with KMIN ≥ -1 and T ≥ 0", occ, items[i], items[i+1])
			}
			s := moe.SER{MinExperts: max(kmin, 0), Threshold: float32(t)}
			out = append(out, benchSER{label: strconv.Itoa(kmin) + "," + strconv.FormatFloat(t, 'g', -1, 32), ser: s})
		}
	}
	return out, nil
}

// serQualityText is what the quality columns are measured on: plain English prose with
// some numbers and names, so that a real model's routing sees ordinary text.
const serQualityText = `The harbour town woke slowly. By six the bakery on Mill Street had its shutters up, and the smell of rye bread drifted down to the quay, where two fishing boats were unloading crates of cod and mackerel. A ferry left for the islands at half past seven, carrying about forty passengers, a van of vegetables and a dog that refused to stay in the car. The harbour master, who had kept the same logbook for nineteen years, noted the wind from the south-west at fifteen knots and a falling barometer. Rain was expected by the afternoon, and the school had already cancelled its sailing lesson. In the library, a retired engineer was explaining to a student why the old lighthouse used a rotating lens instead of a brighter lamp: a beam that sweeps the sea can be seen farther and tells ships exactly where they are.`

// serQualityMaxTokens bounds the text's tokens (and so the quality run's context).
const serQualityMaxTokens = 256

// serQuality is a row's quality against no SER on serQualityText (JSON field ser_quality).
type serQuality struct {
	Tokens  int     `json:"tokens"`       // tokens evaluated (predictions: one fewer)
	PPL     float64 `json:"ppl"`          // perplexity with the row's setting
	BasePPL float64 `json:"base_ppl"`     // perplexity without SER
	MeanKLD float64 `json:"mean_kld"`     // mean KL(no SER ‖ SER) per position, in nats
	SameTop float64 `json:"same_top_pct"` // positions whose most likely token is unchanged, in %
}

// qualityTokens are serQualityText's tokens for this model.
func (r *benchRunner) qualityTokens() ([]int32, error) {
	ids := r.vocab.Encode(serQualityText, true, false)
	if len(ids) < 2 {
		return nil, fmt.Errorf("-ser quality: the model's vocabulary gives %d tokens for the text, too few to score", len(ids))
	}
	return ids[:min(len(ids), serQualityMaxTokens)], nil
}

// serQuality evaluates serQualityText with cfg's placement and threads, without SER
// (once per placement and thread count) and with cfg's setting, and compares the two.
func (r *benchRunner) serQuality(cfg benchConfig) (*serQuality, error) {
	tokens, err := r.qualityTokens()
	if err != nil {
		return nil, err
	}
	rules := cfg.rules
	rules.CtxSize = len(tokens)
	sims, err := cfg.flags.simGPUs()
	if err != nil {
		return nil, err
	}
	m := openMachine(r.stderr, cfg.threads, rules, sims)
	defer m.Close()
	place := runCmd{Model: r.cmd.Model, Attention: r.cmd.Attention, placementFlags: cfg.flags}
	model, plan, err := m.load(r.cmd.Model, r.f, rules)
	if err != nil {
		return nil, err
	}
	eval := func(ser moe.SER) ([]float32, error) {
		ctx, err := place.contextOn(model, plan, rules, ser)
		if err != nil {
			return nil, err
		}
		logits, err := ctx.Eval(tokens, true)
		if err != nil {
			return nil, fmt.Errorf("-ser quality run: %w", err)
		}
		return slices.Clone(logits), nil
	}
	key := fmt.Sprintf("%+v/%d", cfg.flags, cfg.threads)
	base, ok := r.serBase[key]
	if !ok {
		if base, err = eval(moe.SER{}); err != nil {
			return nil, err
		}
		if r.serBase == nil {
			r.serBase = map[string][]float32{}
		}
		r.serBase[key] = base
	}
	with := base
	if cfg.ser.ser.Enabled() {
		if with, err = eval(cfg.ser.ser); err != nil {
			return nil, err
		}
	}
	return compareLogits(tokens, base, with), nil
}

// compareLogits scores every position's next-token distribution of with against base
// (both len(tokens) rows of logits): perplexities of the text's next tokens, mean KL
// divergence KL(base ‖ with) and the share of unchanged argmaxes, in float64.
func compareLogits(tokens []int32, base, with []float32) *serQuality {
	n := len(tokens)
	vocab := len(base) / n
	var nllBase, nllWith, kld float64
	same := 0
	for i := range n {
		b, w := base[i*vocab:(i+1)*vocab], with[i*vocab:(i+1)*vocab]
		lseB, lseW := logSumExp(b), logSumExp(w)
		for j := range vocab {
			p := math.Exp(float64(b[j]) - lseB)
			if p > 0 {
				kld += p * ((float64(b[j]) - lseB) - (float64(w[j]) - lseW))
			}
		}
		if argmax(b) == argmax(w) {
			same++
		}
		if i+1 < n {
			next := tokens[i+1]
			nllBase += lseB - float64(b[next])
			nllWith += lseW - float64(w[next])
		}
	}
	return &serQuality{
		Tokens:  n,
		PPL:     math.Exp(nllWith / float64(n-1)),
		BasePPL: math.Exp(nllBase / float64(n-1)),
		MeanKLD: kld / float64(n),
		SameTop: 100 * float64(same) / float64(n),
	}
}

// logSumExp is log Σ exp(x), shifted by the maximum so that it neither overflows nor
// underflows.
func logSumExp(x []float32) float64 {
	m := float64(x[argmax(x)])
	var s float64
	for _, v := range x {
		s += math.Exp(float64(v) - m)
	}
	return m + math.Log(s)
}

// argmax is the index of the largest value, the first of equals.
func argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}
