package placement

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/moerun/moerun/gguf"
)

// TextOptions choose the optional parts of the text report.
type TextOptions struct {
	Tensors bool // list every tensor with the rule that placed it
}

// mapClasses are the layer map's columns, in order.
var mapClasses = []struct {
	class gguf.Class
	title string
}{
	{gguf.ClassAttention, "ATTENTION"}, {gguf.ClassNorm, "NORMS"}, {gguf.ClassRouter, "ROUTER"},
	{gguf.ClassDenseFFN, "DENSE FFN"}, {gguf.ClassSharedExpert, "SHARED EXP"}, {gguf.ClassRoutedExpert, "ROUTED EXP"},
}

// WriteText writes the report for a terminal: summary and verdict, the device table, the
// layer map, the rule table with its warnings, notes, and with opts.Tensors every tensor.
func (p *Plan) WriteText(w io.Writer, opts TextOptions) error {
	ew := &errWriter{w: w}
	p.writeSummary(ew)
	p.writeDevices(ew)
	p.writeLayerMap(ew)
	p.writeRules(ew)
	if opts.Tensors {
		p.writeTensors(ew)
	}
	p.Prediction.writeText(ew)
	p.writeNotes(ew)
	return ew.err
}

// errWriter keeps the first write error so the report code can stay linear.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(b []byte) (int, error) {
	if e.err != nil {
		return len(b), nil
	}
	n, err := e.w.Write(b)
	e.err = err
	return n, nil
}

func (p *Plan) writeSummary(w io.Writer) {
	m, c, s := p.Model, p.Context, p.Settings
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	name := m.Name
	if name == "" {
		name = "(model)"
	}
	fmt.Fprintf(tw, "model\t%s (%s): %d blocks", name, m.Arch, m.Layers)
	if m.NextN > 0 {
		fmt.Fprintf(tw, " + %d NextN", m.NextN)
	}
	if m.Experts > 0 {
		fmt.Fprintf(tw, ", %d experts (%d used)", m.Experts, m.ExpertsUsed)
	}
	fmt.Fprintf(tw, ", %d tensors, %s\n", m.Tensors, humanBytes(m.Bytes))
	fmt.Fprintf(tw, "rules\t%s", p.Semantics)
	if p.Semantics == Mainline {
		fmt.Fprint(tw, " (as of commit 3f545bec)")
	}
	fmt.Fprintln(tw)
	cache := "unified"
	if !c.Unified {
		cache = fmt.Sprintf("%d streams of %d", c.NStream, c.NCtxSeq)
	}
	fa := "off"
	if c.FlashAttn {
		fa = "on"
	}
	fmt.Fprintf(tw, "context\t%d tokens (%s, %d sequences), batch %d, ubatch %d, flash attention %s", c.NCtx, cache, c.NSeq, c.NBatch, c.NUBatch, fa)
	if c.SWACells > 0 {
		// llama_kv_cache_iswa's "creating SWA KV cache, size = N cells": the window and a
		// ubatch, or the whole context with --swa-full.
		fmt.Fprintf(tw, ", sliding-window cache %d cells", c.SWACells)
	}
	var indexer int64
	for _, l := range p.Layers {
		indexer += l.IndexerBytes
	}
	if indexer > 0 {
		// llama_kv_cache_dsa's "creating indexer KV cache": its keys are in the KV column.
		fmt.Fprintf(tw, ", lightning-indexer keys %s of the KV cache", humanBytes(indexer))
	}
	fmt.Fprintln(tw)
	devs := "CPU only"
	if len(s.ModelDevices) > 0 {
		devs = strings.Join(s.ModelDevices, ", ")
		if len(s.ModelDevices) > 1 {
			devs += " (-sm " + s.SplitMode.String() + ")"
		}
	}
	fmt.Fprintf(tw, "layers\t-ngl %s: %d of %d layers (blocks + output) on %s\n", nglText(s.GPULayersFlag), s.GPULayers, m.Layers+m.NextN+1, devs)
	load := "mmap: CPU weights are used in place from the file"
	if !s.Mmap {
		load = "no mmap: weights are read into memory"
	}
	if s.Locked {
		load += ", locked in RAM (mlock)"
	}
	fmt.Fprintf(tw, "loading\t%s (load mode %s)\n", load, s.LoadMode)
	if p.Fit.Enabled {
		fit := p.Fit.Status
		if len(p.Fit.Changes) > 0 {
			fit += ": " + strings.Join(p.Fit.Changes, "; ")
		}
		fmt.Fprintf(tw, "fit\t%s\n", fit)
		if len(p.Fit.Changes) > 0 {
			fmt.Fprintf(tw, "\tas flags: %s\n", p.Fit.Args)
		}
	} else {
		fmt.Fprintf(tw, "fit\toff\n")
	}
	tw.Flush()
}

func (p *Plan) writeDevices(w io.Writer) {
	fmt.Fprintf(w, "\nMEMORY (compute buffers are an estimate, marked ~)\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "  DEVICE\tCAPACITY\tWEIGHTS\tKV CACHE\tCOMPUTE~\tTOTAL\tFREE AFTER\t\n")
	for _, d := range p.Devices {
		if !d.InModel && d.Total == 0 {
			continue
		}
		capacity, free := "?", "?"
		if c := d.Capacity(); c > 0 {
			capacity, free = humanBytes(c), humanBytes(c-d.Total)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", d.Device.Name, capacity, humanBytes(d.Weights), humanBytes(d.KV),
			humanBytes(d.Compute), humanBytes(d.Total), free, deviceStatus(&d))
	}
	tw.Flush()
	for _, d := range p.Devices {
		if d.WeightsMapped > 0 {
			fmt.Fprintf(w, "  %s: %s of the weights are used in place from the file mapping\n", d.Device.Name, humanBytes(d.WeightsMapped))
		}
	}
	fmt.Fprintf(w, "\nverdict: %s\n", p.Verdict())
}

func deviceStatus(d *DeviceUse) string {
	fits, known := d.Fits()
	switch {
	case !known:
		return "  unknown capacity"
	case fits:
		return "  ok"
	case d.Total <= d.Capacity():
		return "  TIGHT (inside the " + humanBytes(d.Margin) + " margin)"
	}
	return "  OVER by " + humanBytes(d.Total-d.Capacity())
}

// Verdict is the one-line answer: does it fit, and what to do if not.
func (p *Plan) Verdict() string {
	var over, tight, ok []string
	for _, d := range p.Devices {
		fits, known := d.Fits()
		switch {
		case !known || d.Total == 0 && !d.InModel:
		case fits:
			ok = append(ok, fmt.Sprintf("%s %s of %s", d.Device.Name, humanBytes(d.Total), humanBytes(d.Capacity())))
		case d.Total <= d.Capacity():
			tight = append(tight, d.Device.Name)
		default:
			over = append(over, fmt.Sprintf("%s needs %s more", d.Device.Name, humanBytes(d.Total-d.Capacity()+d.Margin)))
		}
	}
	switch {
	case len(over) > 0:
		return "does NOT fit: " + strings.Join(over, ", ") + " (counting the margin). " + p.idleRules() + p.advice()
	case len(tight) > 0:
		return "fits, but " + strings.Join(tight, ", ") + " would keep less than the margin llama.cpp's --fit aims to leave free"
	case len(ok) == 0:
		return "no device reports its memory: nothing to check (give --gpu and --ram)"
	}
	return "fits: " + strings.Join(ok, ", ")
}

// idleRules names the rules that matched no tensor, first: a misspelt -ot is the likeliest
// reason a plan the user meant to fit does not.
func (p *Plan) idleRules() string {
	var idle []string
	for _, r := range p.Rules {
		if r.Matched == 0 && r.IgnoredReason == "" && len(r.Patterns) > 0 {
			idle = append(idle, r.Item.Origin())
		}
	}
	if len(idle) == 0 {
		return ""
	}
	return strings.Join(idle, ", ") + " matched no tensor. "
}

// advice suggests a cure for a plan that does not fit: for a GPU that is over, the one
// Place planned and verified; for the host, the usual ones.
func (p *Plan) advice() string {
	if p.gpuAdvice != "" {
		return p.gpuAdvice
	}
	return "Give more RAM, lower -c, or use a smaller quantization."
}

func (p *Plan) writeLayerMap(w io.Writer) {
	fmt.Fprintf(w, "\nLAYER MAP (device of each tensor class; KV is where the layer's cache lives, which -ot never moves)\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "  LAYER")
	for _, c := range mapClasses {
		fmt.Fprintf(tw, "\t%s", c.title)
	}
	fmt.Fprint(tw, "\tOTHER\tKV\tWEIGHTS\n")
	for _, l := range p.Layers {
		label := l.Label()
		if l.Kind != "" && l.Kind != "attention" {
			label += " (" + l.Kind + ")"
		}
		fmt.Fprintf(tw, "  %s", label)
		for _, c := range mapClasses {
			cell := l.Classes[c.class.String()]
			if c.class == gguf.ClassRoutedExpert {
				cell = l.RoutedCell()
			}
			fmt.Fprintf(tw, "\t%s", orDash(cell))
		}
		var other []string
		for _, c := range []gguf.Class{gguf.ClassEmbedding, gguf.ClassOutput, gguf.ClassOther} {
			if d := l.Classes[c.String()]; d != "" {
				other = append(other, c.String()+" "+d)
			}
		}
		kv := "-"
		if l.KVDevice != "" {
			kv = l.KVDevice + " " + humanBytes(l.KVBytes)
		}
		fmt.Fprintf(tw, "\t%s\t%s\t%s\n", orDash(strings.Join(other, ", ")), kv, layerBytes(l.Bytes))
	}
	tw.Flush()
}

func layerBytes(b map[string]int64) string {
	names := sortedKeys(b)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = n + " " + humanBytes(b[n])
	}
	return orDash(strings.Join(parts, ", "))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (p *Plan) writeRules(w io.Writer) {
	if len(p.Rules) == 0 {
		fmt.Fprintf(w, "\nRULES: none (-ot, --cpu-moe, --n-cpu-moe); every tensor follows the layer map\n")
		return
	}
	fmt.Fprintf(w, "\nRULES (in llama.cpp's order: environment, then the command line; the first matching rule wins)\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  #\tRULE\tTARGET\tMATCHES\tPLACES\tMOVES\n")
	for i, r := range p.Rules {
		target := r.Item.Target
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%d\t%d (%s)\t%d (%s)\n", i+1, r.Item.Origin(), target, r.Matched, r.Decided, humanBytes(r.DecidedBytes), r.Moved, humanBytes(r.MovedBytes))
	}
	tw.Flush()
	for i, r := range p.Rules {
		if r.IgnoredReason != "" {
			fmt.Fprintf(w, "  rule %d: ignored: %s\n", i+1, r.IgnoredReason)
		}
		for _, m := range r.Warnings {
			fmt.Fprintf(w, "  rule %d: warning: %s\n", i+1, m)
		}
		for _, m := range r.Info {
			fmt.Fprintf(w, "  rule %d: %s\n", i+1, m)
		}
	}
}

func (p *Plan) writeTensors(w io.Writer) {
	fmt.Fprintf(w, "\nTENSORS (%d)\n", len(p.Tensors))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  NAME\tCLASS\tTYPE\tSHAPE\tBYTES\tDEVICE\tBUFFER\tHOW\tDECIDED BY\n")
	for _, t := range p.Tensors {
		name := t.Name
		if t.Tied {
			name += " (as output)"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, t.Class, t.Type, formatShape(t.Shape), humanBytes(t.Bytes),
			orDash(t.Device), orDash(t.Buffer), t.Storage, t.Reason)
	}
	tw.Flush()
}

func formatShape(shape []int64) string {
	parts := make([]string, len(shape))
	for i, d := range shape {
		parts[i] = fmt.Sprint(d)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func (p *Plan) writeNotes(w io.Writer) {
	if len(p.Warnings) > 0 {
		fmt.Fprintf(w, "\nWARNINGS\n")
		for _, m := range p.Warnings {
			fmt.Fprintf(w, "  - %s\n", m)
		}
	}
	if len(p.Notes) > 0 {
		fmt.Fprintf(w, "\nNOTES\n")
		for _, m := range p.Notes {
			fmt.Fprintf(w, "  - %s\n", m)
		}
	}
}
