package placement

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/tensor"
)

// Objective is what the fit search maximises.
type Objective int

// The objectives.
const (
	ObjectiveTG       Objective = iota // decode tokens/s
	ObjectivePP                        // prompt tokens/s
	ObjectiveBalanced                  // requests/s for a prompt of Prompt tokens and Generate new ones
)

var objectiveNames = [...]string{"tg", "pp", "balanced"}

func (o Objective) String() string { return objectiveNames[o] }

// ParseObjective reads tg, pp or balanced.
func ParseObjective(s string) (Objective, error) {
	for i, n := range objectiveNames {
		if s == n {
			return Objective(i), nil
		}
	}
	return 0, fmt.Errorf("unknown objective %q: use tg, pp or balanced", s)
}

// SearchOptions steer the fit search.
type SearchOptions struct {
	Objective Objective
	// Prompt and Generate describe the request ObjectiveBalanced optimises: the time to
	// process Prompt tokens and then generate Generate tokens. 0 means 4096 and 512.
	Prompt, Generate int
	// CacheTypes are the KV cache types tried (-ctk and -ctv alike); nil tries f16 and q8_0.
	CacheTypes []tensor.Type
	// UBatches are the ubatch sizes tried; nil tries 512, 1024, 2048 and 4096.
	UBatches []int
	Predict  PredictOptions
	// RunnerUps is how many alternatives to keep besides the best: 0 means 4, a negative
	// number none.
	RunnerUps int
}

// Flag is one command-line flag of a candidate, in llama.cpp's short spelling.
type Flag struct{ Name, Value string }

// Candidate is one placement the search evaluated.
type Candidate struct {
	Flags      []Flag // exactly the flags evaluated (besides the user's own rules), llama.cpp spelling
	Rules      Rules
	Plan       *Plan
	Prediction *Prediction
	Score      float64 // the objective's value
	// CPUExperts is the number of MoE blocks whose routed experts stay in RAM, of MoELayers.
	CPUExperts, MoELayers int
	Direction             string // "first" or "last" blocks' experts in RAM; "" for none or all
	GPULayers             int    // -ngl: NGLAll or a count
	CacheType             tensor.Type
	UBatch                int
	cpuBlocks             []int // the MoE blocks whose experts are in RAM
}

// Summary says in a few words what the candidate is.
func (c *Candidate) Summary() string {
	var parts []string
	switch {
	case c.GPULayers != NGLAll && c.MoELayers == 0: // a dense model: only -ngl to choose
		parts = append(parts, fmt.Sprintf("%d layers on the GPUs", c.GPULayers))
	case c.GPULayers != NGLAll:
		parts = append(parts, fmt.Sprintf("%d layers on the GPUs, every expert in RAM", c.GPULayers))
	case c.CPUExperts == 0:
		parts = append(parts, "everything in VRAM")
	case c.CPUExperts == c.MoELayers:
		parts = append(parts, "every expert layer in RAM")
	default:
		parts = append(parts, fmt.Sprintf("%d of %d expert layers in RAM (%s)", c.CPUExperts, c.MoELayers, c.Direction))
	}
	parts = append(parts, "KV "+c.CacheType.String(), fmt.Sprintf("ubatch %d", c.UBatch))
	return strings.Join(parts, ", ")
}

// SweepPoint is the prediction for one number of expert layers in RAM, with the best
// candidate's other settings (see Search).
type SweepPoint struct {
	CPUExperts int
	Fits       bool
	TG, PP     float64 // 0 when it does not fit
	Problems   []string
}

// SearchResult is the outcome of Search.
type SearchResult struct {
	Best      *Candidate // nil when nothing fits
	RunnerUps []*Candidate
	Sweep     []SweepPoint
	MoELayers int
	Evaluated int // placements computed
	Elapsed   time.Duration
	Failure   string // why nothing fits, when Best is nil
	Notes     []string
}

// searcher carries one search.
type searcher struct {
	m         Model
	base      Rules
	devs      []backend.Device
	hw        Hardware
	opts      SearchOptions
	moeBlocks []int     // blocks with routed experts, in order
	nLayers   int       // layer index space: blocks (NextN included) + the output layer
	gpus      []int     // model GPUs, in order (their index among the devices)
	split     []float32 // -ts pinned for several GPUs
	byGPU     [][]int   // per model GPU, its MoE blocks (layer map with every layer offloaded)
	evaluated atomic.Int64
}

// Search looks for the fastest placement that fits: whole layers on the GPUs or in RAM
// (-ngl), the routed experts of the first or the last blocks of each GPU in RAM
// (--n-cpu-moe, -ot), the KV cache type and the ubatch size — the placements a llama.cpp
// user can write. base holds the user's fixed settings (context, slots, margins); the search
// sets -ngl, the overrides, -ts, -ctk/-ctv and -ub/-b. Every candidate is a Plan from
// Place, so a returned placement always fits as Place sees it.
func Search(m Model, base Rules, devs []backend.Device, hw Hardware, opts SearchOptions) (*SearchResult, error) {
	start := time.Now()
	if base.CtxSize <= 0 {
		return nil, usagef("fit needs a context size (-c N)")
	}
	if len(base.Items) > 0 || base.GPULayers != NGLAuto || len(base.TensorSplit) > 0 {
		return nil, usagef("fit chooses -ngl, -ot, --cpu-moe, --n-cpu-moe and -ts itself: leave them out")
	}
	base.KeepMargin = true // its plans run with --fit off but must leave fit's margin free
	s := &searcher{m: m, base: base, devs: devs, hw: hw, opts: withSearchDefaults(opts)}
	if err := s.prepare(); err != nil {
		return nil, err
	}
	res := &SearchResult{MoELayers: len(s.moeBlocks)}
	type combo struct {
		kv tensor.Type
		ub int
	}
	var combos []combo
	for _, kv := range s.opts.CacheTypes {
		if kv.BlockSize() > 1 && base.FlashAttn == FlashOff {
			res.Notes = append(res.Notes, fmt.Sprintf("KV cache %s skipped: it needs flash attention, which -fa off disables", kv))
			continue
		}
		for _, ub := range s.opts.UBatches {
			combos = append(combos, combo{kv, ub})
		}
	}
	found := make([][]*Candidate, len(combos))
	failures := make([]string, len(combos))
	err := parallel(0, len(combos), func(i int) (err error) {
		found[i], failures[i], err = s.searchCombo(combos[i].kv, combos[i].ub)
		return err
	})
	if err != nil {
		return nil, err
	}
	var all []*Candidate
	for i := range combos {
		all = append(all, found[i]...)
		if len(found[i]) == 0 && res.Failure == "" {
			res.Failure = failures[i]
		}
	}
	slices.SortStableFunc(all, s.better)
	for _, c := range all {
		if res.Best != nil && (len(res.RunnerUps) >= s.opts.RunnerUps || slices.ContainsFunc(append(res.RunnerUps, res.Best), c.dominatedBy)) {
			continue
		}
		final, err := s.confirm(c)
		if err != nil {
			return nil, err
		}
		switch {
		case final == nil:
		case res.Best == nil:
			res.Best = final
		default:
			res.RunnerUps = append(res.RunnerUps, final)
		}
	}
	if res.Best != nil {
		res.Failure = ""
		sweep, err := s.sweep(res.Best)
		if err != nil {
			return nil, err
		}
		res.Sweep = sweep
	} else if res.Failure == "" {
		res.Failure = "no placement was tried"
	}
	res.Evaluated = int(s.evaluated.Load())
	res.Elapsed = time.Since(start)
	return res, nil
}

func withSearchDefaults(o SearchOptions) SearchOptions {
	if o.Prompt <= 0 {
		o.Prompt = 4096
	}
	if o.Generate <= 0 {
		o.Generate = 512
	}
	if len(o.CacheTypes) == 0 {
		o.CacheTypes = []tensor.Type{tensor.F16, tensor.Q8_0}
	}
	if len(o.UBatches) == 0 {
		o.UBatches = []int{512, 1024, 2048, 4096}
	}
	if o.RunnerUps == 0 {
		o.RunnerUps = 4
	}
	return o
}

// prepare places the model once with every layer offloaded and every expert in RAM, to
// learn its MoE blocks, the GPUs' layer ranges, and that the hardware is described enough.
func (s *searcher) prepare() error {
	r := s.base
	r.Fit = false
	r.GPULayers = NGLAll
	r.Items = []Item{CPUMoEItem("--cpu-moe")}
	plan, err := Place(s.m, r, s.devs)
	if err != nil {
		return err
	}
	s.evaluated.Add(1)
	if _, err := Predict(plan, s.hw, s.opts.Predict); err != nil {
		return err
	}
	seen := map[int]bool{}
	for _, t := range plan.Tensors {
		if t.Class == gguf.ClassRoutedExpert && t.Layer >= 0 && t.Device != "" && !seen[t.Layer] {
			seen[t.Layer] = true
			s.moeBlocks = append(s.moeBlocks, t.Layer)
		}
	}
	slices.Sort(s.moeBlocks)
	s.nLayers = len(plan.Layers) - 1 // blocks and the output layer (not the input layer)
	for _, name := range plan.Settings.ModelDevices {
		i := slices.IndexFunc(s.devs, func(d backend.Device) bool { return d.Name == name })
		if s.devs[i].FreeBytes <= 0 {
			return usagef("fit needs the free memory of %s: give --gpu SIZE, --gpus or --gpu-model", name)
		}
		s.gpus = append(s.gpus, i)
	}
	s.byGPU = make([][]int, len(s.gpus))
	counts := make([]float32, len(s.gpus))
	for _, l := range plan.Layers {
		if l.Index == -2 {
			continue
		}
		g := slices.IndexFunc(s.gpus, func(d int) bool { return s.devs[d].Name == l.Device })
		if g < 0 {
			continue
		}
		counts[g]++
		if seen[l.Index] {
			s.byGPU[g] = append(s.byGPU[g], l.Index)
		}
	}
	if len(s.gpus) > 1 { // pin the layer split, so the printed flags do not depend on free memory
		s.split = counts
	}
	return nil
}

// choice is one point of the search space.
type choice struct {
	ngl       int   // NGLAll or a count
	cpuBlocks []int // MoE blocks whose experts are in RAM (sorted)
	direction string
	kv        tensor.Type
	ub        int
}

// flags writes a choice as llama.cpp flags.
func (s *searcher) flags(c choice) []Flag {
	f := []Flag{{"-c", strconv.Itoa(s.base.CtxSize)}}
	if c.ngl == NGLAll {
		f = append(f, Flag{"-ngl", "999"})
	} else {
		f = append(f, Flag{"-ngl", strconv.Itoa(c.ngl)})
	}
	switch n := len(c.cpuBlocks); {
	case n == 0:
	case n == len(s.moeBlocks):
		f = append(f, Flag{"--cpu-moe", ""})
	case slices.Equal(c.cpuBlocks, s.moeBlocks[:n]):
		f = append(f, Flag{"--n-cpu-moe", strconv.Itoa(c.cpuBlocks[n-1] + 1)})
	default:
		f = append(f, Flag{"-ot", blocksPattern(c.cpuBlocks) + "=CPU"})
	}
	if len(s.split) > 0 {
		parts := make([]string, len(s.split))
		for i, v := range s.split {
			parts[i] = strconv.Itoa(int(v))
		}
		f = append(f, Flag{"-ts", strings.Join(parts, ",")})
	}
	// The rest only when it differs from llama.cpp's defaults, but always when the user
	// fixed it, so the command line is complete.
	def := DefaultRules()
	if c.kv != def.CacheK {
		f = append(f, Flag{"-ctk", c.kv.String()}, Flag{"-ctv", c.kv.String()})
	}
	if c.kv.BlockSize() > 1 || s.base.FlashAttn == FlashOn {
		f = append(f, Flag{"-fa", "on"})
	}
	if batch := max(s.base.Batch, c.ub); batch != def.Batch {
		f = append(f, Flag{"-b", strconv.Itoa(batch)})
	}
	if c.ub != def.UBatch {
		f = append(f, Flag{"-ub", strconv.Itoa(c.ub)})
	}
	return f
}

// applyFlags sets rules from flags with the same parsers the command line uses.
func applyFlags(r *Rules, flags []Flag) error {
	for _, f := range flags {
		var err error
		switch f.Name {
		case "-c":
			r.CtxSize, err = Stoi(f.Value)
		case "-ngl":
			r.GPULayers, err = ParseGPULayers(f.Name, f.Value)
		case "--cpu-moe":
			r.Items = append(r.Items, CPUMoEItem(f.Name))
		case "--n-cpu-moe":
			var it Item
			it, err = NCPUMoEItem(f.Name, f.Value)
			r.Items = append(r.Items, it)
		case "-ot":
			var items []Item
			items, err = ParseOverrideTensor(f.Name, f.Value)
			r.Items = append(r.Items, items...)
		case "-ts":
			r.TensorSplit, err = ParseTensorSplit(f.Name, f.Value)
		case "-ctk":
			r.CacheK, err = ParseCacheType(f.Name, f.Value)
		case "-ctv":
			r.CacheV, err = ParseCacheType(f.Name, f.Value)
		case "-fa":
			r.FlashAttn, err = ParseFlashAttn(f.Name, f.Value)
		case "-b":
			r.Batch, err = Stoi(f.Value)
		case "-ub":
			r.UBatch, err = Stoi(f.Value)
		default:
			err = fmt.Errorf("fit does not write %s", f.Name)
		}
		if err != nil {
			return fmt.Errorf("%s %s: %w", f.Name, f.Value, err)
		}
	}
	return nil
}

// evaluate places and predicts one choice (with llama.cpp's --fit off: the flags pin
// everything it could change).
func (s *searcher) evaluate(c choice) (*Candidate, error) {
	cand := &Candidate{Flags: s.flags(c), CPUExperts: len(c.cpuBlocks), MoELayers: len(s.moeBlocks), Direction: c.direction,
		GPULayers: c.ngl, CacheType: c.kv, UBatch: c.ub, cpuBlocks: c.cpuBlocks}
	if cand.CPUExperts == 0 || cand.CPUExperts == cand.MoELayers {
		cand.Direction = ""
	}
	return s.evaluateFlags(cand, false)
}

func (s *searcher) evaluateFlags(cand *Candidate, fit bool) (*Candidate, error) {
	r := s.base
	r.Items = nil
	r.Fit = fit && s.base.Fit
	if err := applyFlags(&r, cand.Flags); err != nil {
		return nil, err
	}
	plan, err := Place(s.m, r, s.devs)
	s.evaluated.Add(1)
	if err != nil {
		return nil, err
	}
	pred, err := Predict(plan, s.hw, s.opts.Predict)
	if err != nil {
		return nil, err
	}
	cand.Rules, cand.Plan, cand.Prediction = r, plan, pred
	cand.Score = s.score(pred)
	return cand, nil
}

// score is the objective's value; 0 for a placement that does not fit.
func (s *searcher) score(p *Prediction) float64 {
	if !p.Fits {
		return 0
	}
	switch s.opts.Objective {
	case ObjectivePP:
		return p.PP
	case ObjectiveBalanced:
		if p.PP <= 0 || p.TG <= 0 {
			return 0
		}
		return 1 / (float64(s.opts.Prompt)/p.PP + float64(s.opts.Generate)/p.TG)
	}
	return p.TG
}

// better orders candidates best first: by the objective, where scores within 1% count as
// equal, then by the other speed (prompt speed for tg, decode speed otherwise), then f16 KV,
// the smaller ubatch, experts of the first blocks (the simpler --n-cpu-moe flag), fewer
// flags. A tg objective thus takes the 7× faster prompt of a larger ubatch over 0.5% of
// decode speed.
func (s *searcher) better(a, b *Candidate) int {
	switch ka, kb := scoreBucket(a.Score), scoreBucket(b.Score); {
	case ka != kb:
		return kb - ka
	case !sameSpeed(s.secondary(a), s.secondary(b)):
		return cmp.Compare(s.secondary(b), s.secondary(a))
	case a.CacheType != b.CacheType:
		return cmpBool(a.CacheType == tensor.F16, b.CacheType == tensor.F16)
	case a.UBatch != b.UBatch:
		return a.UBatch - b.UBatch
	case a.Direction != b.Direction:
		return cmpBool(a.Direction != "last", b.Direction != "last")
	}
	return len(a.Flags) - len(b.Flags)
}

// scoreBucket puts scores into 1% wide buckets (on a log scale), so that comparing buckets
// is a consistent order that ignores differences below the model's precision.
func scoreBucket(score float64) int {
	if score <= 0 {
		return math.MinInt32
	}
	return int(math.Floor(math.Log(score) / math.Log1p(0.01)))
}

// sameSpeed reports whether two predicted speeds differ only by rounding: placements
// that do the same work in another order (the experts of the first or of the last blocks
// in RAM, under routing the same in every layer) sum their times in another order.
func sameSpeed(a, b float64) bool {
	return math.Abs(a-b) <= 1e-9*max(math.Abs(a), math.Abs(b))
}

// secondary is the speed that breaks ties of the objective.
func (s *searcher) secondary(c *Candidate) float64 {
	if s.opts.Objective == ObjectiveTG {
		return c.Prediction.PP
	}
	return c.Prediction.TG
}

// cmpBool orders true first.
func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return -1
	}
	return 1
}

// dominatedBy reports whether o is predicted at least as fast as c in both decode and
// prompt speed (within 0.5%): c is then no alternative worth showing next to o.
func (c *Candidate) dominatedBy(o *Candidate) bool {
	notAbove := func(a, b float64) bool { return a <= b*1.005 }
	return notAbove(c.Prediction.TG, o.Prediction.TG) && notAbove(c.Prediction.PP, o.Prediction.PP)
}

// fitsGPU reports whether model GPU g keeps its margin free in a plan.
func (s *searcher) fitsGPU(p *Plan, g int) bool {
	name := s.devs[s.gpus[g]].Name
	for _, d := range p.Devices {
		if d.Device.Name == name {
			fits, known := d.Fits()
			return !known || fits
		}
	}
	return true
}

func (s *searcher) fitsGPUs(p *Plan) bool {
	for g := range s.gpus {
		if !s.fitsGPU(p, g) {
			return false
		}
	}
	return true
}

// searchCombo finds, for one KV type and ubatch, the fastest placement of each kind that
// fits: everything in VRAM; else the fewest expert layers in RAM, taking the first or the
// last blocks of each GPU; else every expert in RAM and as many layers on the GPUs as fit.
func (s *searcher) searchCombo(kv tensor.Type, ub int) ([]*Candidate, string, error) {
	base := choice{ngl: NGLAll, kv: kv, ub: ub}
	if len(s.gpus) == 0 {
		base.ngl = 0
		c, err := s.evaluate(base)
		if err != nil {
			return nil, "", err
		}
		return keepFitting(c)
	}
	all, err := s.evaluate(base)
	if err != nil {
		return nil, "", err
	}
	if all.Prediction.Fits || len(s.moeBlocks) == 0 {
		if all.Prediction.Fits {
			return []*Candidate{all}, "", nil
		}
		return s.searchLayers(choice{kv: kv, ub: ub})
	}
	cpuAll := base
	cpuAll.cpuBlocks = s.moeBlocks
	allIn, err := s.evaluate(cpuAll)
	if err != nil {
		return nil, "", err
	}
	if !s.fitsGPUs(allIn.Plan) {
		return s.searchLayers(cpuAll)
	}
	if !allIn.Prediction.Fits { // the GPUs fit, so RAM is what overflows: more RAM only grows
		return nil, strings.Join(allIn.Prediction.Problems, "; "), nil
	}
	var out []*Candidate
	for _, dir := range []string{"first", "last"} {
		c, err := s.searchExperts(base, dir)
		if err != nil {
			return nil, "", err
		}
		if c != nil {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		out = append(out, allIn)
	}
	return out, "", nil
}

func keepFitting(c *Candidate) ([]*Candidate, string, error) {
	if c.Prediction.Fits {
		return []*Candidate{c}, "", nil
	}
	return nil, strings.Join(c.Prediction.Problems, "; "), nil
}

// searchExperts finds, GPU by GPU, the fewest of its MoE blocks whose experts must stay in
// RAM (its first or last ones) for it to fit, by bisection: a GPU's memory only shrinks as
// more of its experts move out.
func (s *searcher) searchExperts(base choice, dir string) (*Candidate, error) {
	keep := make([]int, len(s.gpus)) // per GPU, blocks whose experts are in RAM
	for g := range keep {
		keep[g] = len(s.byGPU[g])
	}
	at := func(keep []int) choice {
		c := base
		c.direction = dir
		c.cpuBlocks = nil
		for g, blocks := range s.byGPU {
			if dir == "first" {
				c.cpuBlocks = append(c.cpuBlocks, blocks[:keep[g]]...)
			} else {
				c.cpuBlocks = append(c.cpuBlocks, blocks[len(blocks)-keep[g]:]...)
			}
		}
		slices.Sort(c.cpuBlocks)
		return c
	}
	for g := range s.gpus {
		lo, hi := 0, keep[g] // hi fits (all of its experts in RAM fit, checked by the caller)
		for lo < hi {
			mid := (lo + hi) / 2
			trial := slices.Clone(keep)
			trial[g] = mid
			c, err := s.evaluate(at(trial))
			if err != nil {
				return nil, err
			}
			if s.fitsGPU(c.Plan, g) {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		keep[g] = hi
	}
	// The GPUs were sized one at a time; a change on one (the op-offload staging buffer)
	// can tip another, so move more experts out until the whole plan fits.
	for {
		c, err := s.evaluate(at(keep))
		if err != nil {
			return nil, err
		}
		if c.Prediction.Fits {
			return c, nil
		}
		over := -1
		for g := range s.gpus {
			if !s.fitsGPU(c.Plan, g) {
				over = g
				break
			}
		}
		if over < 0 || keep[over] == len(s.byGPU[over]) {
			return nil, nil // RAM overflows, or the GPU has no experts left to move out
		}
		keep[over]++
	}
}

// searchLayers keeps every expert in RAM and finds the most layers the GPUs hold (-ngl),
// by bisection: fewer offloaded layers only free VRAM.
func (s *searcher) searchLayers(base choice) ([]*Candidate, string, error) {
	lo, hi := 0, s.nLayers // lo fits on the GPUs (nothing offloaded)
	var best *Candidate
	eval := func(n int) (*Candidate, error) {
		c := base
		c.ngl = n
		if len(s.moeBlocks) > 0 {
			c.cpuBlocks = s.moeBlocks
		}
		return s.evaluate(c)
	}
	for lo < hi {
		mid := (lo + hi + 1) / 2
		c, err := eval(mid)
		if err != nil {
			return nil, "", err
		}
		if s.fitsGPUs(c.Plan) {
			lo, best = mid, c
		} else {
			hi = mid - 1
		}
	}
	if best == nil {
		c, err := eval(lo)
		if err != nil {
			return nil, "", err
		}
		best = c
	}
	return keepFitting(best)
}

// confirm places a winning candidate again with the user's --fit setting, as the printed
// flags would run, and keeps it only if that plan fits too.
func (s *searcher) confirm(c *Candidate) (*Candidate, error) {
	final := *c
	if _, err := s.evaluateFlags(&final, true); err != nil {
		return nil, err
	}
	if !final.Prediction.Fits {
		return nil, nil
	}
	return &final, nil
}

// sweep predicts the best candidate's settings for every number of expert layers in RAM,
// moving blocks out in the best placement's own order (its blocks in RAM first, in its
// direction, then the others), so that the point at its count is the best placement itself:
// for one GPU and the first blocks, that is --n-cpu-moe N.
func (s *searcher) sweep(best *Candidate) ([]SweepPoint, error) {
	if len(s.gpus) == 0 || best.GPULayers != NGLAll {
		return nil, nil
	}
	inRAM := slices.Clone(best.cpuBlocks)
	var rest []int
	for _, b := range s.moeBlocks {
		if !slices.Contains(inRAM, b) {
			rest = append(rest, b)
		}
	}
	if best.Direction == "last" {
		slices.Reverse(inRAM)
		slices.Reverse(rest)
	}
	order := append(inRAM, rest...)
	out := make([]SweepPoint, len(order)+1)
	eval := func(from, to int) error {
		return parallel(from, to, func(n int) error {
			blocks := slices.Clone(order[:n])
			slices.Sort(blocks)
			c, err := s.evaluate(choice{ngl: NGLAll, cpuBlocks: blocks, direction: best.Direction, kv: best.CacheType, ub: best.UBatch})
			if err != nil {
				return err
			}
			p := c.Prediction
			out[n] = SweepPoint{CPUExperts: n, Fits: p.Fits, TG: p.TG, PP: p.PP, Problems: p.Problems}
			return nil
		})
	}
	// Below the best count only the point next to it is placed: fewer layers in RAM keep a
	// superset of its experts in VRAM, so if it does not fit, they do not either.
	first := max(0, best.CPUExperts-1)
	if err := eval(first, len(out)); err != nil {
		return nil, err
	}
	if out[first].Fits { // several GPUs: another order may fit with fewer
		return out, eval(0, first)
	}
	for n := range first {
		out[n] = SweepPoint{CPUExperts: n, Problems: []string{fmt.Sprintf("more VRAM than with %d expert layers in RAM, which does not fit", first)}}
	}
	return out, nil
}

// parallel calls f(i) for i in [from, to) on up to GOMAXPROCS goroutines (Place is pure, so
// candidates are independent) and joins their errors.
func parallel(from, to int, f func(i int) error) error {
	errs := make([]error, max(0, to-from))
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(1, runtime.GOMAXPROCS(0)))
	for i := from; i < to; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i-from] = f(i)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
