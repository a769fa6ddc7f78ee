package placement

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"regexp"
	"strings"
	"text/tabwriter"
)

// FitSchema names the JSON document of moerun fit (docs/schemas.md).
const FitSchema = "moerun.fit/v1"

// FitResult is what moerun fit prints: the search's result with the context it ran in.
type FitResult struct {
	*SearchResult
	Model    string // the model as the user named it: a path, or "preset NAME"
	LlamaArg string // what llama-server's -m gets in the printed command
	// MoerunArgs is the model and the machine in moerun place's spelling: the file or
	// --preset NAME, and the hardware and device flags the search ran with.
	MoerunArgs string
	// UserFlags are the user's own fixed llama.cpp options (-np, --no-mmap, …), quoted,
	// which both printed commands repeat.
	UserFlags string
	Objective Objective
	Prompt    int
	Generate  int
	Context   int
	WhatIf    *WhatIf // with routing statistics, for the best placement
}

// longFlags are moerun's long spellings of the flags fit writes.
var longFlags = map[string]string{
	"-c": "--ctx-size", "-ngl": "--n-gpu-layers", "-ot": "--override-tensor", "-ts": "--tensor-split",
	"-ctk": "--cache-type-k", "-ctv": "--cache-type-v", "-fa": "--flash-attn", "-b": "--batch-size", "-ub": "--ubatch-size",
	"--cpu-moe": "--cpu-moe", "--n-cpu-moe": "--n-cpu-moe",
}

// LlamaCommand is the llama-server command line of a candidate, ready to paste.
func (r *FitResult) LlamaCommand(c *Candidate) string {
	return strings.Join(nonEmpty("llama-server -m", ShellQuote(r.LlamaArg), joinFlags(c.Flags, false), r.UserFlags), " ")
}

// MoerunCommand is the same placement in moerun's long spelling on the same machine, as
// moerun place takes it: it shows the plan and the prediction again.
func (r *FitResult) MoerunCommand(c *Candidate) string {
	return strings.Join(nonEmpty("moerun place", r.MoerunArgs, joinFlags(c.Flags, true), r.UserFlags, "--predict"), " ")
}

func nonEmpty(parts ...string) []string {
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}

func joinFlags(flags []Flag, long bool) string {
	var parts []string
	for _, f := range flags {
		name := f.Name
		if long {
			name = longFlags[name]
		}
		parts = append(parts, name)
		if f.Value != "" {
			parts = append(parts, ShellQuote(f.Value))
		}
	}
	return strings.Join(parts, " ")
}

var shellSafe = regexp.MustCompile(`^[A-Za-z0-9_./:=,+@%-]+$`)

// ShellQuote quotes a word for POSIX shells when it needs it.
func ShellQuote(s string) string {
	if shellSafe.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// WriteText writes the fit report for a terminal.
func (r *FitResult) WriteText(w io.Writer) error {
	ew := &errWriter{w: w}
	fmt.Fprintf(ew, "model      %s, context %d, objective %s", r.Model, r.Context, r.Objective)
	if r.Objective == ObjectiveBalanced {
		fmt.Fprintf(ew, " (requests of %d prompt + %d generated tokens)", r.Prompt, r.Generate)
	}
	fmt.Fprintf(ew, "\nsearched   %d placements in %.2f s\n", r.Evaluated, r.Elapsed.Seconds())
	if r.Best == nil {
		fmt.Fprintf(ew, "\nNOTHING FITS: %s\n", r.Failure)
		r.writeNotes(ew)
		return ew.err
	}
	b := r.Best
	b.Prediction.Machine.writeText(ew)
	fmt.Fprintf(ew, "\nBEST       tg ≈ %.1f tokens/s, pp ≈ %s — %s\n", b.Prediction.TG, ppText(b.Prediction.PP), b.Summary())
	fmt.Fprintf(ew, "  llama.cpp  %s\n", r.LlamaCommand(b))
	fmt.Fprintf(ew, "  moerun     %s\n", r.MoerunCommand(b))
	fmt.Fprintf(ew, "  memory     %s\n", memoryLine(b.Plan))
	if len(r.RunnerUps) > 0 {
		fmt.Fprintf(ew, "\nALTERNATIVES (faster at one speed, slower at the other)\n")
		tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "  TG\tPP\tPLACEMENT\tFLAGS\n")
		for _, c := range r.RunnerUps {
			fmt.Fprintf(tw, "  %.1f\t%s\t%s\t%s\n", c.Prediction.TG, ppText(c.Prediction.PP), c.Summary(), joinFlags(c.Flags, false))
		}
		tw.Flush()
	}
	r.writeSweep(ew)
	r.WhatIf.writeText(ew)
	r.writeNotes(ew)
	return ew.err
}

func ppText(pp float64) string {
	if pp <= 0 {
		return "?"
	}
	return fmt.Sprintf("%.0f", pp)
}

// memoryLine says how full each device is.
func memoryLine(p *Plan) string {
	var parts []string
	for _, d := range p.Devices {
		if !d.InModel && d.Total == 0 {
			continue
		}
		s := d.Device.Name + " " + humanBytes(d.Total)
		if c := d.Capacity(); c > 0 {
			s += " of " + humanBytes(c)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ") + " (estimated compute buffers included)"
}

func (r *FitResult) writeSweep(w io.Writer) {
	if len(r.Sweep) == 0 {
		return
	}
	b := r.Best
	fmt.Fprintf(w, "\nEXPERT LAYERS IN RAM (KV %s, ubatch %d; layers move out in the best placement's order)\n", b.CacheType, b.UBatch)
	fmt.Fprintf(w, "  %7s  %6s  %6s\n", "N", "TG", "PP")
	for i := 0; i < len(r.Sweep); i++ {
		pt := r.Sweep[i]
		if !pt.Fits {
			j := i
			for j+1 < len(r.Sweep) && !r.Sweep[j+1].Fits {
				j++
			}
			label := fmt.Sprint(i)
			if j > i {
				label = fmt.Sprintf("%d-%d", i, j)
			}
			fmt.Fprintf(w, "  %7s  %6s  %6s  does not fit: %s\n", label, "-", "-", strings.Join(r.Sweep[j].Problems, "; "))
			i = j
			continue
		}
		mark := ""
		if pt.CPUExperts == b.CPUExperts {
			mark = "  ← best"
		}
		fmt.Fprintf(w, "  %7d  %6.1f  %6s%s\n", pt.CPUExperts, pt.TG, ppText(pt.PP), mark)
	}
}

func (r *FitResult) writeNotes(w io.Writer) {
	notes := append([]string(nil), r.Notes...)
	if r.Best != nil {
		notes = append(notes, r.Best.Prediction.Notes...)
	}
	if len(notes) == 0 {
		return
	}
	fmt.Fprintf(w, "\nNOTES\n")
	for _, n := range notes {
		fmt.Fprintf(w, "  - %s\n", n)
	}
}

// The moerun.fit/v1 document.
type jsonFitDoc struct {
	Schema    string          `json:"schema"`
	Model     string          `json:"model"`
	Objective string          `json:"objective"`
	Request   jsonRequest     `json:"request"`
	Context   int             `json:"context"`
	Search    jsonSearch      `json:"search"`
	Best      *jsonCandidate  `json:"best"`
	RunnerUps []jsonCandidate `json:"runner_ups"`
	Sweep     []jsonSweep     `json:"sweep"`
	Failure   string          `json:"failure"`
	WhatIf    *jsonWhatIf     `json:"expert_what_if"`
	Notes     []string        `json:"notes"`
}

type jsonRequest struct {
	Prompt   int `json:"prompt_tokens"`
	Generate int `json:"generated_tokens"`
}

type jsonSearch struct {
	Placements int     `json:"placements"`
	Seconds    float64 `json:"seconds"`
}

type jsonCandidate struct {
	Summary    string          `json:"summary"`
	TG         float64         `json:"tg_tps"`
	PP         *float64        `json:"pp_tps"`
	Score      float64         `json:"score"`
	CPUExperts int             `json:"cpu_expert_layers"`
	MoELayers  int             `json:"moe_layers"`
	Direction  string          `json:"direction"`
	GPULayers  string          `json:"gpu_layers"`
	CacheType  string          `json:"cache_type"`
	UBatch     int             `json:"ubatch"`
	Flags      []string        `json:"flags"`
	Llama      string          `json:"llama_command"`
	Moerun     string          `json:"moerun_command"`
	Devices    []jsonFitDevice `json:"devices"`
	Prediction *jsonPrediction `json:"prediction"`
}

type jsonFitDevice struct {
	Name     string `json:"name"`
	Total    int64  `json:"total_bytes"`
	Capacity int64  `json:"capacity_bytes"`
	Margin   int64  `json:"margin_bytes"`
}

type jsonSweep struct {
	CPUExperts int      `json:"cpu_expert_layers"`
	Fits       bool     `json:"fits"`
	TG         *float64 `json:"tg_tps"`
	PP         *float64 `json:"pp_tps"`
	Problems   []string `json:"problems"`
}

func (r *FitResult) candidateJSON(c *Candidate) jsonCandidate {
	j := jsonCandidate{Summary: c.Summary(), TG: c.Prediction.TG, Score: c.Score, CPUExperts: c.CPUExperts, MoELayers: c.MoELayers,
		Direction: c.Direction, GPULayers: nglText(c.GPULayers), CacheType: c.CacheType.String(), UBatch: c.UBatch,
		Llama: r.LlamaCommand(c), Moerun: r.MoerunCommand(c), Devices: []jsonFitDevice{}, Prediction: c.Prediction.toJSON()}
	if c.Prediction.PP > 0 {
		pp := c.Prediction.PP
		j.PP = &pp
	}
	for _, f := range c.Flags {
		j.Flags = append(j.Flags, f.Name)
		if f.Value != "" {
			j.Flags = append(j.Flags, f.Value)
		}
	}
	for _, d := range c.Plan.Devices {
		if d.InModel || d.Total > 0 {
			j.Devices = append(j.Devices, jsonFitDevice{d.Device.Name, d.Total, d.Capacity(), d.Margin})
		}
	}
	return j
}

// WriteJSON writes the moerun.fit/v1 document.
func (r *FitResult) WriteJSON(w io.Writer) error {
	doc := jsonFitDoc{Schema: FitSchema, Model: r.Model, Objective: r.Objective.String(), Request: jsonRequest{r.Prompt, r.Generate},
		Context: r.Context, Search: jsonSearch{r.Evaluated, r.Elapsed.Seconds()}, RunnerUps: []jsonCandidate{}, Sweep: []jsonSweep{},
		Failure: r.Failure, WhatIf: r.WhatIf.toJSON(), Notes: nonNil(r.Notes)}
	if r.Best != nil {
		b := r.candidateJSON(r.Best)
		doc.Best = &b
	}
	for _, c := range r.RunnerUps {
		doc.RunnerUps = append(doc.RunnerUps, r.candidateJSON(c))
	}
	for _, pt := range r.Sweep {
		js := jsonSweep{CPUExperts: pt.CPUExperts, Fits: pt.Fits, Problems: nonNil(pt.Problems)}
		if pt.Fits {
			tg, pp := pt.TG, pt.PP
			js.TG = &tg
			if pp > 0 {
				js.PP = &pp
			}
		}
		doc.Sweep = append(doc.Sweep, js)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(doc)
}

// Plot geometry.
const (
	plotW, plotH       = 640, 320
	plotLeft, plotTop  = 60, 64
	plotRight, plotBot = 60, 50
)

// WriteSVG plots predicted decode and prompt speed against the number of expert layers in
// RAM (the sweep), each on its own axis; counts that do not fit are shaded and get no
// point, and the best placement is marked.
func (r *FitResult) WriteSVG(w io.Writer) error {
	ew := &errWriter{w: w}
	width, height := plotW+plotLeft+plotRight, plotH+plotTop+plotBot
	fmt.Fprintf(ew, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n", width, height, width, height)
	fmt.Fprintf(ew, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(ew, `<text x="10" y="18" font-size="14" font-weight="bold">%s</text>`+"\n", esc(fmt.Sprintf("%s — predicted speed by expert layers in RAM", r.Model)))
	if r.Best == nil || len(r.Sweep) == 0 {
		fmt.Fprintf(ew, `<text x="10" y="40">%s</text>`+"\n</svg>\n", esc("nothing to plot: "+orDash(r.Failure)))
		return ew.err
	}
	b := r.Best
	fmt.Fprintf(ew, `<text x="10" y="36">%s</text>`+"\n", esc(fmt.Sprintf("context %d; best: %s", r.Context, b.Summary())))
	n := len(r.Sweep) - 1
	var maxTG, maxPP float64
	for _, pt := range r.Sweep {
		if pt.Fits {
			maxTG, maxPP = max(maxTG, pt.TG), max(maxPP, pt.PP)
		}
	}
	maxTG, maxPP = niceCeil(maxTG), niceCeil(maxPP)
	x := func(i int) float64 { return plotLeft + float64(plotW)*float64(i)/float64(max(n, 1)) }
	y := func(v, top float64) float64 { return plotTop + plotH - float64(plotH)*v/top }
	half := (x(1) - x(0)) / 2
	for i := 0; i <= n; i++ { // shade each run of counts that do not fit
		if r.Sweep[i].Fits {
			continue
		}
		j := i
		for j < n && !r.Sweep[j+1].Fits {
			j++
		}
		x0, x1 := max(x(i)-half, x(0)), min(x(j)+half, x(n))
		fmt.Fprintf(ew, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#eeeeee"/>`, x0, plotTop, x1-x0, plotH)
		i = j
	}
	fmt.Fprintf(ew, "\n"+`<text x="%.1f" y="%d" fill="#888">does not fit</text>`+"\n", x(0)+4, plotTop+14)
	fmt.Fprintf(ew, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#333"/>`+"\n", plotLeft, plotTop, plotW, plotH)
	for k := 0; k <= 4; k++ { // axes labels
		yy := plotTop + plotH - plotH*k/4
		fmt.Fprintf(ew, `<text x="%d" y="%d" text-anchor="end" fill="#3465a4">%.4g</text>`, plotLeft-4, yy+4, maxTG*float64(k)/4)
		fmt.Fprintf(ew, `<text x="%d" y="%d" fill="#cc6600">%.4g</text>`+"\n", plotLeft+plotW+4, yy+4, maxPP*float64(k)/4)
	}
	for i := 0; i <= n; i += max(1, n/10) {
		fmt.Fprintf(ew, `<text x="%.1f" y="%d" text-anchor="middle">%d</text>`, x(i), plotTop+plotH+14, i)
	}
	fmt.Fprintf(ew, "\n"+`<text x="%d" y="%d" text-anchor="middle">expert layers in RAM (of %d)</text>`+"\n", plotLeft+plotW/2, plotTop+plotH+32, n)
	fmt.Fprintf(ew, `<text x="%d" y="%d" fill="#3465a4">tg (tokens/s)</text><text x="%d" y="%d" text-anchor="end" fill="#cc6600">pp (tokens/s)</text>`+"\n",
		plotLeft, plotTop-6, plotLeft+plotW, plotTop-6)
	for _, series := range []struct {
		colour string
		top    float64
		value  func(SweepPoint) float64
	}{{"#3465a4", maxTG, func(p SweepPoint) float64 { return p.TG }}, {"#cc6600", maxPP, func(p SweepPoint) float64 { return p.PP }}} {
		var pts []string
		for i, pt := range r.Sweep {
			if pt.Fits && series.value(pt) > 0 && series.top > 0 {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(i), y(series.value(pt), series.top)))
			}
		}
		fmt.Fprintf(ew, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", series.colour, strings.Join(pts, " "))
	}
	if b.CPUExperts <= n {
		fmt.Fprintf(ew, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#4e9a06" stroke-dasharray="4 3"/>`, x(b.CPUExperts), plotTop, x(b.CPUExperts), plotTop+plotH)
		fmt.Fprintf(ew, `<text x="%.1f" y="%d" fill="#4e9a06">best</text>`+"\n", x(b.CPUExperts)+3, plotTop+plotH-6)
	}
	fmt.Fprintln(ew, "</svg>")
	return ew.err
}

// niceCeil rounds up to 1, 2 or 5 times a power of ten, for axis tops.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}
