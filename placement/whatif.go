package placement

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/gguf"
)

// RoutingStats are measured routing frequencies: per MoE layer, how many tokens were routed
// and how often each expert was selected (the moerun.expert-stats/v1 document the runtime
// records; see moe.ExpertStats).
type RoutingStats struct {
	Model  string
	Layers map[int]*LayerRouting // by block index
}

// LayerRouting is one layer's record.
type LayerRouting struct {
	Tokens   uint64
	Dropped  uint64   // top-k slots SER removed
	Selected []uint64 // per expert: tokens that routed to it
}

// RoutingStatsSchema names the routing statistics document.
const RoutingStatsSchema = "moerun.expert-stats/v1"

// maxRoutingStatsBytes caps the document read: DeepSeek-V3's (58 layers × 256 experts) is
// about 2 MB.
const maxRoutingStatsBytes = 64 << 20

// maxExperts bounds the experts of a layer in a statistics file.
const maxExperts = 1 << 16

type routingDoc struct {
	Schema string `json:"schema"`
	Model  string `json:"model"`
	Layers []struct {
		Layer   *int   `json:"layer"`
		Tokens  uint64 `json:"tokens"`
		Dropped uint64 `json:"dropped_slots"`
		Experts []struct {
			Expert    *int    `json:"expert"`
			Selected  uint64  `json:"selected"`
			WeightSum float64 `json:"weight_sum"`
		} `json:"experts"`
	} `json:"layers"`
}

// ReadRoutingStats reads and checks a moerun.expert-stats/v1 document: every layer once,
// every expert of a layer once and numbered 0..n-1, no expert selected by more tokens than
// the layer saw.
func ReadRoutingStats(r io.Reader) (*RoutingStats, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxRoutingStatsBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxRoutingStatsBytes {
		return nil, fmt.Errorf("expert statistics: larger than %d MiB", maxRoutingStatsBytes>>20)
	}
	var doc routingDoc
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("expert statistics: %w", err)
	}
	if doc.Schema != RoutingStatsSchema {
		return nil, fmt.Errorf("expert statistics: schema %q, want %q", doc.Schema, RoutingStatsSchema)
	}
	s := &RoutingStats{Model: doc.Model, Layers: map[int]*LayerRouting{}}
	for i, l := range doc.Layers {
		switch {
		case l.Layer == nil || *l.Layer < 0 || *l.Layer > 4096:
			return nil, fmt.Errorf("expert statistics: layers[%d]: missing or out-of-range layer index", i)
		case s.Layers[*l.Layer] != nil:
			return nil, fmt.Errorf("expert statistics: layer %d is listed twice", *l.Layer)
		case len(l.Experts) == 0 || len(l.Experts) > maxExperts:
			return nil, fmt.Errorf("expert statistics: layer %d lists %d experts", *l.Layer, len(l.Experts))
		}
		lr := &LayerRouting{Tokens: l.Tokens, Dropped: l.Dropped, Selected: make([]uint64, len(l.Experts))}
		seen := make([]bool, len(l.Experts))
		for _, e := range l.Experts {
			switch {
			case e.Expert == nil || *e.Expert < 0 || *e.Expert >= len(l.Experts):
				return nil, fmt.Errorf("expert statistics: layer %d: expert ids must be 0..%d", *l.Layer, len(l.Experts)-1)
			case seen[*e.Expert]:
				return nil, fmt.Errorf("expert statistics: layer %d: expert %d is listed twice", *l.Layer, *e.Expert)
			case e.Selected > l.Tokens:
				return nil, fmt.Errorf("expert statistics: layer %d: expert %d selected %d times in %d tokens", *l.Layer, *e.Expert, e.Selected, l.Tokens)
			case math.IsNaN(e.WeightSum) || math.IsInf(e.WeightSum, 0):
				return nil, fmt.Errorf("expert statistics: layer %d: expert %d: weight_sum is not a finite number", *l.Layer, *e.Expert)
			}
			seen[*e.Expert] = true
			lr.Selected[*e.Expert] = e.Selected
		}
		s.Layers[*l.Layer] = lr
	}
	return s, nil
}

// probabilities are a layer's per-expert routing probabilities per token (they sum to the
// experts used, less SER's dropped slots); nil when the layer was not recorded or saw no
// tokens.
func (s *RoutingStats) probabilities(layer int) []float64 {
	if s == nil {
		return nil
	}
	l := s.Layers[layer]
	if l == nil || l.Tokens == 0 {
		return nil
	}
	ps := make([]float64, len(l.Selected))
	for e, n := range l.Selected {
		ps[e] = float64(n) / float64(l.Tokens)
	}
	return ps
}

// check matches the statistics to a plan's model: layers that route, its expert count.
func (s *RoutingStats) check(plan *Plan) error {
	moe := map[int]bool{}
	for _, t := range plan.Tensors {
		if t.Class == gguf.ClassRoutedExpert && t.Layer >= 0 {
			moe[t.Layer] = true
		}
	}
	for il, l := range s.Layers {
		switch {
		case !moe[il]:
			return fmt.Errorf("expert statistics: layer %d has no routed experts in %s", il, plan.Model.Name)
		case len(l.Selected) != plan.Model.Experts:
			return fmt.Errorf("expert statistics: layer %d lists %d experts, the model has %d", il, len(l.Selected), plan.Model.Experts)
		}
	}
	return nil
}

// WhatIf compares a plan's whole-layer expert placement with expert-granular placement of
// the same VRAM: the experts most often routed to in VRAM, the rest in RAM.
type WhatIf struct {
	LayerTG float64 // the plan as it is (whole ffn_*_exps tensors)
	// Equal is the expert-granular placement in exactly the VRAM the plan's routed experts
	// use on each GPU. Spare adds the VRAM each GPU leaves free beyond its margin, less
	// what whole layers could use of it (whole multiples of an expert layer): the part only
	// single experts can fill.
	Equal, Spare Granular
	// Hot is Spare's VRAM spent by one selector per GPU: each layer's HotK most routed
	// experts (-ot 'exps@hot:K=GPU' --hot-stats FILE), which is also what --expert-cache K
	// is predicted to do there. HotK is 0 where not one expert a layer fits.
	Hot  Granular
	HotK int
	// Skew is the mean over layers of the routing share of each layer's hottest tenth of
	// experts (0.1 when routing is uniform).
	Skew      float64
	Recommend string   // "expert-granular" or "layer"
	Why       string   // the reason, in words
	Llama     []string // the plan's own expert placement as llama.cpp flags: all llama.cpp can express
	Notes     []string
}

// Granular is one expert-granular placement.
type Granular struct {
	Budget   int64   // VRAM for routed experts
	Experts  int     // experts placed in VRAM
	Coverage float64 // share of routed-expert reads served from VRAM
	TG       float64
	Gain     float64  // TG / LayerTG − 1
	Rules    []string // moerun -ot rules with expert selectors
}

// minGain is the predicted gain below which whole layers stay the advice: the routing shows
// too little static skew for the extra crossings and the selector rules to pay.
const minGain = 0.03

// ExpertWhatIf predicts the gain of putting the most-routed experts in VRAM instead of whole
// layers, for a plan that fits.
func ExpertWhatIf(plan *Plan, hw Hardware, stats *RoutingStats, opts PredictOptions) (*WhatIf, error) {
	if stats == nil || len(stats.Layers) == 0 {
		return nil, fmt.Errorf("expert what-if: the statistics hold no layer")
	}
	opts.Routing = stats
	e, err := newEstimator(plan, hw, opts)
	if err != nil {
		return nil, err
	}
	if !plan.checkFits() {
		return nil, fmt.Errorf("expert what-if: the placement does not fit, so there is nothing to compare with")
	}
	w := &WhatIf{LayerTG: 1 / e.decode().Seconds}
	g := newGranularModel(e)
	if len(g.layers) == 0 {
		return nil, fmt.Errorf("expert what-if: the model has no routed experts")
	}
	w.Skew = g.skew()
	w.Equal = g.place(false, w.LayerTG)
	w.Spare = g.place(true, w.LayerTG)
	if len(g.gpus) > 0 {
		w.Hot, w.HotK = g.hot(true, w.LayerTG)
	}
	w.Llama = expertFlags(plan)
	best := w.Spare
	switch {
	case len(g.gpus) == 0:
		w.Recommend, w.Why = "layer", "no GPU: every expert is in RAM either way"
	case best.Gain < minGain:
		w.Recommend = "layer"
		w.Why = fmt.Sprintf("predicted gain %+.1f%% is below %.0f%%: the routing shows little static skew (hottest tenth of experts get %.0f%% of the routing), "+
			"so whole layers stay the better use of VRAM", 100*best.Gain, 100*minGain, 100*w.Skew)
	default:
		w.Recommend = "expert-granular"
		w.Why = fmt.Sprintf("each layer's hottest tenth of experts gets %.0f%% of its routing; the hottest experts in VRAM serve %.0f%% of expert reads (whole layers: %.0f%%)",
			100*w.Skew, 100*best.Coverage, 100*g.layerCoverage())
	}
	if n := g.wholeLayersFree(); n > 0 {
		w.Notes = append(w.Notes, fmt.Sprintf("the placement leaves VRAM for %d more whole expert layer(s): place those first (moerun fit does); "+
			"the comparison uses only the VRAM whole layers cannot", n))
	}
	w.Notes = append(w.Notes,
		"llama.cpp cannot express expert-granular placement: -ot places whole tensors, and each ffn_*_exps tensor holds all experts of its layer; "+
			"its best is whole layers (the flags under 'llama.cpp'), where routing statistics change nothing for decode speed",
		"the expert rules use moerun's expert selector PATTERN@EXPERTS=DEVICE (experts as 3+17+40-42), which place, fit, run, serve and bench accept",
		"every layer with experts on both sides is counted with 2 device crossings per token, and prompt processing is taken as unchanged")
	return w, nil
}

// granularModel holds what the expert-granular greedy needs.
type granularModel struct {
	e          *estimator
	layers     []expertLayer
	gpus       []string           // the model's GPUs, in plan order
	gpuExperts map[string]int64   // VRAM the plan's routed experts use, per GPU
	spare      map[string]int64   // free VRAM beyond the margin, per GPU
	baseCPU    float64            // the plan's CPU expert bytes per token
	baseGPU    map[string]float64 // the plan's GPU expert bytes per token, per GPU
	layerSize  float64            // the largest expert layer's bytes
}

// expertLayer is one MoE layer: its device (the layer map's, which runs its attention), the
// size of one expert and each expert's routing probability.
type expertLayer struct {
	index  int
	device string
	size   float64 // bytes of one expert (gate + up + down and their biases)
	probs  []float64
	onCPU  bool // the plan keeps (some of) its experts in RAM
}

func newGranularModel(e *estimator) *granularModel {
	plan := e.plan
	g := &granularModel{e: e, baseGPU: map[string]float64{}, gpuExperts: map[string]int64{}, spare: map[string]int64{}}
	bytesByLayer := map[int]int64{}
	cpuLayer := map[int]bool{}
	for _, t := range plan.Tensors {
		if t.Class != gguf.ClassRoutedExpert || t.Layer < 0 || t.Device == "" {
			continue
		}
		bytesByLayer[t.Layer] += t.Bytes
		share := e.expertShare()
		if e.kind[t.Device] == backend.KindCPU {
			cpuLayer[t.Layer] = true
			g.baseCPU += float64(t.Bytes) * share
		} else {
			g.gpuExperts[t.Device] += t.Bytes
			g.baseGPU[t.Device] += float64(t.Bytes) * share
		}
	}
	for _, d := range plan.Devices {
		if d.Device.Kind != backend.KindGPU || !d.InModel {
			continue
		}
		g.gpus = append(g.gpus, d.Device.Name)
		if c := d.Capacity(); c > 0 {
			g.spare[d.Device.Name] = max(0, c-d.Total-d.Margin)
		}
	}
	experts := plan.Model.Experts
	for _, l := range plan.Layers {
		b, ok := bytesByLayer[l.Index]
		if !ok || l.Index < 0 || experts <= 0 {
			continue
		}
		probs := e.stats.probabilities(l.Index)
		if probs == nil { // not recorded: uniform
			probs = make([]float64, experts)
			for i := range probs {
				probs[i] = e.expertShare()
			}
		}
		g.layers = append(g.layers, expertLayer{index: l.Index, device: l.Device, size: float64(b) / float64(experts), probs: probs, onCPU: cpuLayer[l.Index]})
		g.layerSize = max(g.layerSize, float64(b))
	}
	return g
}

// wholeLayersFree counts the whole expert layers the GPUs' spare VRAM would hold.
func (g *granularModel) wholeLayersFree() int {
	n := 0
	for _, dev := range g.gpus {
		if g.layerSize > 0 {
			n += int(float64(g.spare[dev]) / g.layerSize)
		}
	}
	return n
}

// room is each GPU's VRAM for experts: what the plan's experts use there, and with spare
// the free VRAM beyond the margin that whole layers cannot use.
func (g *granularModel) room(spare bool) map[string]float64 {
	room := map[string]float64{}
	for _, dev := range g.gpus {
		room[dev] = float64(g.gpuExperts[dev])
		if spare && g.layerSize > 0 {
			room[dev] += math.Mod(float64(g.spare[dev]), g.layerSize)
		}
	}
	return room
}

// skew is the mean share of routing that each layer's hottest tenth of experts gets.
func (g *granularModel) skew() float64 {
	sum := 0.0
	for _, l := range g.layers {
		sum += topShare(l.probs, max(1, len(l.probs)/10))
	}
	return sum / float64(len(g.layers))
}

// topShare is the share of the routing probabilities ps that the n most likely experts
// take (0 when ps sums to nothing).
func topShare(ps []float64, n int) float64 {
	ps = slices.Clone(ps)
	slices.SortFunc(ps, func(a, b float64) int { return cmp.Compare(b, a) })
	var top, all float64
	for i, p := range ps {
		all += p
		if i < n {
			top += p
		}
	}
	if all == 0 {
		return 0
	}
	return top / all
}

// layerCoverage is the share of expert reads the plan itself serves from VRAM.
func (g *granularModel) layerCoverage() float64 {
	all := g.baseCPU
	for _, b := range g.baseGPU {
		all += b
	}
	if all == 0 {
		return 0
	}
	return 1 - g.baseCPU/all
}

// candidate is one expert for the greedy.
type candidate struct {
	layer, expert int
	p             float64
}

// place fills each GPU's room with the most-routed experts (on their layer's GPU when it has
// room, else the first GPU that has) and predicts the resulting speed. Experts no token
// routed to stay in RAM: they would cost VRAM and save nothing.
func (g *granularModel) place(spare bool, layerTG float64) Granular {
	room := g.room(spare)
	var out Granular
	for _, r := range room {
		out.Budget += int64(r)
	}
	if len(g.gpus) == 0 {
		out.TG = layerTG
		return out
	}
	var cands []candidate
	for li, l := range g.layers {
		for e, p := range l.probs {
			if p > 0 {
				cands = append(cands, candidate{li, e, p})
			}
		}
	}
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].p > cands[j].p })
	onGPU := make([][]string, len(g.layers)) // per layer, per expert: device or ""
	for i := range onGPU {
		onGPU[i] = make([]string, len(g.layers[i].probs))
	}
	for _, c := range cands {
		l := &g.layers[c.layer]
		dev := l.device
		if room[dev] < l.size {
			dev = ""
			for _, gd := range g.gpus {
				if room[gd] >= l.size {
					dev = gd
					break
				}
			}
		}
		if dev == "" {
			continue
		}
		room[dev] -= l.size
		onGPU[c.layer][c.expert] = dev
	}
	out = g.evaluate(onGPU, out.Budget, layerTG)
	out.Rules = g.rules(onGPU)
	return out
}

// evaluate predicts the speed of the experts onGPU puts in VRAM (per layer, per expert: a
// GPU or ""), within budget bytes: the plan's time with the expert reads moved, and the
// crossings that layers split between devices add.
func (g *granularModel) evaluate(onGPU [][]string, budget int64, layerTG float64) Granular {
	out := Granular{Budget: budget}
	cpuBytes, gpuBytes, all := 0.0, map[string]float64{}, 0.0
	for li, l := range g.layers {
		for e, p := range l.probs {
			all += p * l.size
			dev := onGPU[li][e]
			if dev == "" {
				cpuBytes += p * l.size
				continue
			}
			gpuBytes[dev] += p * l.size
			out.Experts++
		}
	}
	if all > 0 {
		out.Coverage = 1 - cpuBytes/all
	}
	t := 1 / layerTG
	t += (cpuBytes - g.baseCPU) / g.e.m.cpuBW
	for _, dev := range g.gpus {
		bw, _ := g.e.rates(dev, backend.KindGPU)
		t += (gpuBytes[dev] - g.baseGPU[dev]) / bw
	}
	t += float64(g.crossingChange(onGPU)) * crossingTime
	out.TG = 1 / t
	out.Gain = out.TG/layerTG - 1
	return out
}

// hot is the placement one selector per GPU writes: each layer's K most routed experts in
// VRAM on its layer's GPU, K the most that every GPU's room (as place's) holds for all its
// layers. It is -ot 'exps@hot:K=GPU' with --hot-stats, and what --expert-cache K is
// predicted to do in the same VRAM. Layers the plan keeps on the CPU stay there.
func (g *granularModel) hot(spare bool, layerTG float64) (Granular, int) {
	room := g.room(spare)
	var budget int64
	for _, r := range room {
		budget += int64(r)
	}
	need := map[string]float64{} // bytes of one expert of every layer, per GPU
	for _, l := range g.layers {
		if slices.Contains(g.gpus, l.device) {
			need[l.device] += l.size
		}
	}
	k := -1
	for dev, n := range need {
		if n > 0 {
			if kd := int(room[dev] / n); k < 0 || kd < k {
				k = kd
			}
		}
	}
	onGPU := make([][]string, len(g.layers))
	for li, l := range g.layers {
		onGPU[li] = make([]string, len(l.probs))
		if k <= 0 || need[l.device] == 0 {
			continue
		}
		ids := make([]int, len(l.probs))
		for i := range ids {
			ids[i] = i
		}
		slices.SortStableFunc(ids, func(a, b int) int { return cmp.Compare(l.probs[b], l.probs[a]) })
		for _, e := range ids[:min(k, len(ids))] {
			if l.probs[e] > 0 {
				onGPU[li][e] = l.device
			}
		}
	}
	out := g.evaluate(onGPU, budget, layerTG)
	if k > 0 {
		for _, dev := range slices.Sorted(maps.Keys(need)) {
			out.Rules = append(out.Rules, fmt.Sprintf(`%s%s@hot:%d=%s`, g.layersOn(dev), expsRegex, k, dev))
		}
		out.Rules = append(out.Rules, expsRegex+"=CPU")
	}
	return out, max(k, 0)
}

// layersOn is a pattern prefix that matches the blocks of g's layers on dev: none where
// every layer is there.
func (g *granularModel) layersOn(dev string) string {
	var ids []string
	for _, l := range g.layers {
		if l.device == dev {
			ids = append(ids, strconv.Itoa(l.index))
		}
	}
	if len(ids) == len(g.layers) {
		return ""
	}
	return `blk\.(` + strings.Join(ids, "|") + `)`
}

// crossingChange is how many more hand-overs per token the granular placement makes than
// the plan: 2 for every layer that gains CPU experts, −2 for one that loses them all.
func (g *granularModel) crossingChange(onGPU [][]string) int {
	n := 0
	for i, l := range g.layers {
		cpu := slices.Contains(onGPU[i], "")
		switch {
		case cpu && !l.onCPU:
			n += 2
		case !cpu && l.onCPU:
			n -= 2
		}
	}
	return n
}

// rules writes the granular placement as override rules: one per layer and GPU naming its
// experts (a whole layer needs no selector), then every other expert to the CPU.
func (g *granularModel) rules(onGPU [][]string) []string {
	var out []string
	for i, l := range g.layers {
		byDev := map[string][]int{}
		for e, dev := range onGPU[i] {
			if dev != "" {
				byDev[dev] = append(byDev[dev], e)
			}
		}
		for _, dev := range g.gpus {
			ids := byDev[dev]
			switch {
			case len(ids) == 0:
			case len(ids) == len(l.probs):
				out = append(out, fmt.Sprintf(`blk\.%d%s=%s`, l.index, expsRegex, dev))
			default:
				out = append(out, fmt.Sprintf(`blk\.%d%s@%s=%s`, l.index, expsRegex, expertList(ids), dev))
			}
		}
	}
	return append(out, expsRegex+"=CPU")
}

// expertList writes sorted expert ids with runs as ranges: 3+17+40-42.
func expertList(ids []int) string {
	slices.Sort(ids)
	var parts []string
	for i := 0; i < len(ids); {
		j := i
		for j+1 < len(ids) && ids[j+1] == ids[j]+1 {
			j++
		}
		if j > i+1 {
			parts = append(parts, strconv.Itoa(ids[i])+"-"+strconv.Itoa(ids[j]))
		} else {
			for k := i; k <= j; k++ {
				parts = append(parts, strconv.Itoa(ids[k]))
			}
		}
		i = j + 1
	}
	return strings.Join(parts, "+")
}

// expertFlags are the plan's rules that placed routed experts, as llama.cpp flags.
func expertFlags(plan *Plan) []string {
	placed := make([]bool, len(plan.Rules))
	for _, t := range plan.Tensors {
		if t.Class == gguf.ClassRoutedExpert && t.Rule >= 0 {
			placed[t.Rule] = true
		}
	}
	var out []string
	for i, r := range plan.Rules {
		if placed[i] {
			out = append(out, r.Item.Origin())
		}
	}
	return out
}
