package placement

import (
	"fmt"
	"slices"
	"strings"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/gguf"
)

// RuleUse is one row of the rule table: an entry of the override list and what it did.
type RuleUse struct {
	Item          Item
	Patterns      []string // the regexes it stands for (N for --n-cpu-moe N)
	Matched       int      // loaded tensors any of its patterns matches
	Decided       int      // tensors it placed (it was their first matching rule)
	DecidedBytes  int64
	Moved         int // of those, tensors it put on another device than the layer map
	MovedBytes    int64
	ShadowedBy    []int    // earlier rules that took the tensors it matches
	Warnings      []string // lint
	Info          []string
	IgnoredReason string // non-empty when the rule cannot act at all (ik_llama.cpp at -ngl 0)
}

// report turns the final layout into a Plan.
func (p *planner) report(lay *layout) *Plan {
	hp := p.hp
	plan := &Plan{
		Semantics: p.r.Semantics,
		Model: ModelSummary{Name: p.m.Name, Arch: hp.arch, Layers: hp.nLayer, NextN: hp.nNextN, Tensors: len(p.m.Tensors),
			Experts: hp.nExpert, ExpertsUsed: hp.nUsed, ContextTrain: hp.nCtx, MLA: hp.mla, IndexerTopK: hp.indexerTopK},
		Context: lay.ctx,
		Settings: Settings{GPULayers: p.offloaded(lay), GPULayersFlag: lay.cfg.ngl, SplitMode: p.r.SplitMode,
			TensorSplit: lay.cfg.split, LoadMode: p.r.LoadMode, Mmap: lay.mmap, Locked: p.r.LoadMode.locked(), OpOffload: p.r.OpOffload, OpOffloadMinBatch: p.r.OpOffloadMinBatch, OffloadAllExperts: p.r.OffloadAllExperts, ExpertCache: p.r.ExpertCache,
			CacheK: p.r.CacheK, CacheV: p.r.CacheV, KVOffload: p.r.KVOffload},
	}
	for _, d := range p.model {
		plan.Settings.ModelDevices = append(plan.Settings.ModelDevices, p.devs[d].Name)
	}
	for _, t := range p.m.Tensors {
		plan.Model.Bytes += t.Size
	}
	plan.Devices = p.deviceUses(lay)
	plan.Tensors = p.tensorUses(lay)
	plan.Layers = p.layerUses(lay)
	plan.Rules = p.ruleUses(lay)
	p.notes(lay, plan)
	return plan
}

// offloaded counts the layer indices (blocks and the output layer) the layer map puts on a
// GPU.
func (p *planner) offloaded(lay *layout) int {
	n := 0
	for _, d := range lay.layerDev {
		if d != p.cpu {
			n++
		}
	}
	return n
}

func (p *planner) deviceUses(lay *layout) []DeviceUse {
	var order []int
	order = append(order, p.model...)
	for i, d := range p.devs {
		if d.Kind == backend.KindGPU && !slices.Contains(order, i) {
			order = append(order, i)
		}
	}
	order = append(order, p.cpu)
	var out []DeviceUse
	for _, d := range order {
		m := lay.mem[d]
		u := DeviceUse{Device: p.devs[d], InModel: slices.Contains(p.model, d) || d == p.cpu, Weights: m.weights,
			WeightsMapped: m.mapped, KV: m.kv, Compute: m.compute, Staging: m.staging, ExpertCache: m.expertCache, Total: m.total(), Margin: p.margin(0)}
		if id := slices.Index(p.model, d); id >= 0 {
			u.Margin = p.margin(id)
		}
		for _, ld := range lay.layerDev[:len(lay.layerDev)-1] {
			if ld == d {
				u.Layers++
			}
		}
		out = append(out, u)
	}
	return out
}

func (p *planner) tensorUses(lay *layout) []TensorUse {
	out := make([]TensorUse, 0, len(p.tensors)+1)
	add := func(t *tensorMeta, a assignment, tied bool) {
		u := TensorUse{Name: t.info.Name, Class: t.class, Layer: t.layer, Type: t.info.Type, Shape: t.info.Shape,
			Bytes: t.info.Size, Device: p.deviceName(a.dev), Buffer: a.buffer, Storage: a.storage, Rule: -1,
			Tied: tied, Default: p.deviceName(a.listDev)}
		p.explain(lay, &u, t, a)
		out = append(out, u)
	}
	for i := range p.tensors {
		shares, split := lay.shares[i]
		if !split {
			add(&p.tensors[i], lay.assign[i], false)
			continue
		}
		for _, sh := range shares {
			add(&p.tensors[i], sh.a, false)
			u := &out[len(out)-1]
			u.Experts, u.Bytes = sh.experts, sh.bytes
			if sh.a.over >= 0 && lay.ovr[sh.a.over].experts != nil {
				u.Reason += fmt.Sprintf(" (%d experts: %s)", len(sh.experts), expertList(sh.experts))
			} else {
				u.Reason += fmt.Sprintf(" (the %d experts no selector took: %s)", len(sh.experts), expertList(sh.experts))
			}
		}
	}
	if lay.tied != nil {
		add(&lay.tiedMeta, *lay.tied, true)
	}
	return out
}

// explain fills in the rule that decided u (a's override) and the reason in words.
func (p *planner) explain(lay *layout, u *TensorUse, t *tensorMeta, a assignment) {
	if u.Tied {
		u.Class = gguf.ClassOutput
	}
	if a.over < 0 {
		u.Reason = p.describeList(lay, t, a)
		return
	}
	o := lay.ovr[a.over]
	u.Rule = o.item
	u.Reason = lay.cfg.items[o.item].Origin()
	if lay.cfg.items[o.item].Kind == ItemNCPUMoE || p.r.Semantics == IKLlama && o.host && lay.cfg.items[o.item].Kind != ItemPattern {
		u.Reason += " (" + o.pattern + ")"
	}
}

// layerUses builds the layer map: one row per block, then the output and input layers.
func (p *planner) layerUses(lay *layout) []LayerUse {
	n := p.hp.nLayerAll()
	rows := make([]LayerUse, n+2)
	for il := range n {
		kv := lay.kv[il]
		rows[il] = LayerUse{Index: il, Device: p.deviceName(lay.layerDev[il]), KVDevice: p.deviceName(kv.dev), KVBytes: kv.bytes, IndexerBytes: kv.indexer, Kind: kv.kind}
		if il >= p.hp.nLayer {
			rows[il].Kind = "nextn"
		}
	}
	rows[n] = LayerUse{Index: -1, Device: p.deviceName(lay.layerDev[n])}
	rows[n+1] = LayerUse{Index: -2, Device: p.deviceName(p.cpu)}
	for i := range rows {
		rows[i].Classes, rows[i].Bytes = map[string]string{}, map[string]int64{}
	}
	row := func(t *tensorMeta) *LayerUse {
		switch {
		case t.input:
			return &rows[n+1]
		case t.layer >= 0:
			return &rows[t.layer]
		}
		return &rows[n]
	}
	place := func(t *tensorMeta, a assignment, class gguf.Class, bytes int64) {
		r := row(t)
		dev := p.deviceName(a.dev)
		if a.dev < 0 {
			dev = "-"
		}
		cell := r.Classes[class.String()]
		if !slices.Contains(strings.Split(cell, "+"), dev) {
			if cell != "" {
				dev = cell + "+" + dev
			}
			r.Classes[class.String()] = dev
		}
		if a.dev >= 0 {
			r.Bytes[p.deviceName(a.dev)] += bytes
		}
	}
	for i := range p.tensors {
		if shares, ok := lay.shares[i]; ok {
			r := row(&p.tensors[i])
			counted := r.Experts != nil
			if !counted {
				r.Experts = map[string]int{}
			}
			for _, sh := range shares {
				place(&p.tensors[i], sh.a, p.tensors[i].class, sh.bytes)
				if !counted {
					r.Experts[p.deviceName(sh.a.dev)] += len(sh.experts)
				}
			}
			continue
		}
		place(&p.tensors[i], lay.assign[i], p.tensors[i].class, p.tensors[i].info.Size)
	}
	if lay.tied != nil {
		place(&lay.tiedMeta, *lay.tied, gguf.ClassOutput, lay.tiedMeta.info.Size)
	}
	return rows
}

func (p *planner) ruleUses(lay *layout) []RuleUse {
	items := lay.cfg.items
	rules := make([]RuleUse, len(items))
	for i, it := range items {
		rules[i].Item = it
	}
	if p.r.Semantics == IKLlama && lay.cfg.ngl == 0 {
		for i := range rules {
			rules[i].IgnoredReason = "ik_llama.cpp discards every override at -ngl 0"
		}
		return rules
	}
	matchedBy := make([][]bool, len(items)) // per item, per tensor
	for i := range items {
		matchedBy[i] = make([]bool, len(p.tensors))
	}
	for _, o := range lay.ovr {
		rules[o.item].Patterns = append(rules[o.item].Patterns, o.pattern)
		hits := p.mustHits(o.pattern)
		for t, h := range hits {
			if h && !p.tensors[t].skip {
				matchedBy[o.item][t] = true
			}
		}
	}
	for t := range lay.assign {
		decided := map[int]bool{} // a rule taking several shares of a tensor decides it once
		for _, sh := range lay.sharesOf(t, p.tensors[t].info.Size) {
			a := sh.a
			if a.over < 0 {
				continue
			}
			item := lay.ovr[a.over].item
			r := &rules[item]
			if !decided[item] {
				r.Decided++
			}
			r.DecidedBytes += sh.bytes
			if a.dev != a.listDev {
				if !decided[item] {
					r.Moved++
				}
				r.MovedBytes += sh.bytes
			}
			decided[item] = true
		}
	}
	for i := range rules {
		p.lint(lay, rules, i, matchedBy)
	}
	return rules
}

// lint explains rules that probably do not do what their author meant.
func (p *planner) lint(lay *layout, rules []RuleUse, i int, matchedBy [][]bool) {
	r := &rules[i]
	it := r.Item
	var shadow []int
	for t, m := range matchedBy[i] {
		if !m {
			continue
		}
		r.Matched++
		for _, a := range lay.assignments(t) {
			if a.over >= 0 && lay.ovr[a.over].item != i && !slices.Contains(shadow, lay.ovr[a.over].item) {
				shadow = append(shadow, lay.ovr[a.over].item)
			}
		}
	}
	slices.Sort(shadow)
	switch {
	case len(r.Patterns) == 0 && it.Kind == ItemNCPUMoE:
		r.Info = append(r.Info, "--n-cpu-moe 0 adds no pattern")
	case r.Matched == 0 && it.Kind == ItemNCPUMoE:
		r.Warnings = append(r.Warnings, "matches no tensor: the model's first blocks have no routed experts")
	case r.Matched == 0:
		r.Warnings = append(r.Warnings, "matches no tensor")
	case r.Decided == 0:
		r.ShadowedBy = shadow
		r.Warnings = append(r.Warnings, fmt.Sprintf("shadowed: every tensor it matches was already placed by %s (the first matching rule wins)", ruleRefs(shadow)))
	case r.Moved == 0 && it.Experts == nil:
		r.Warnings = append(r.Warnings, fmt.Sprintf("moves nothing: the %d tensor(s) it places were already on %s", r.Decided, p.targetName(lay, i)))
	case r.Moved == 0:
		r.Info = append(r.Info, fmt.Sprintf("keeps the experts it selects of %d stack(s) on %s, ahead of the rules after it", r.Decided, p.targetName(lay, i)))
	default:
		if len(shadow) > 0 && r.Matched > r.Decided {
			r.ShadowedBy = shadow
			r.Info = append(r.Info, fmt.Sprintf("%d of the %d tensors it matches were taken by %s first", r.Matched-r.Decided, r.Matched, ruleRefs(shadow)))
		} else if len(shadow) > 0 {
			r.Info = append(r.Info, fmt.Sprintf("takes the experts %s left of the stacks it matches", ruleRefs(shadow)))
		}
		if r.Decided > r.Moved {
			r.Info = append(r.Info, fmt.Sprintf("%d of the %d tensors it places were already there", r.Decided-r.Moved, r.Decided))
		}
	}
	if it.Kind == ItemNCPUMoE && it.N > p.hp.nLayer {
		r.Info = append(r.Info, fmt.Sprintf("N=%d exceeds the %d blocks: llama.cpp then acts like --cpu-moe", it.N, p.hp.nLayer))
	}
	if it.Kind != ItemPattern {
		return
	}
	if it.Experts != nil {
		r.Warnings = append(r.Warnings, fmt.Sprintf("the expert selector @%s is moerun's own: llama.cpp reads it as part of the regex, which then matches no tensor", it.Experts))
		if n := r.Matched - p.stacksMatched(matchedBy[i]); n > 0 {
			r.Info = append(r.Info, fmt.Sprintf("%d tensor(s) it matches are not expert stacks: its selector leaves them to the rules after it", n))
		}
	}
	if what := stdRegexUnsupported(it.Pattern); what != "" {
		r.Warnings = append(r.Warnings, "llama.cpp cannot use this pattern: C++ std::regex (ECMAScript) rejects "+what+", so llama.cpp fails to load the model")
	}
	if escaped, ok := escapeBareDots(it.Pattern); ok {
		if strict, err := p.hits(escaped); err == nil {
			var extra []string
			for t, m := range matchedBy[i] {
				if m && !strict[t] {
					extra = append(extra, p.tensors[t].info.Name)
				}
			}
			if len(extra) > 0 {
				r.Warnings = append(r.Warnings, fmt.Sprintf("an unescaped '.' matches any character, so this also matches %s; write %s for literal dots",
					sample(extra, 3), escaped))
			}
		}
	}
	if d := p.targetName(lay, i); d != "CPU" && !slices.Contains(p.model, slices.IndexFunc(p.devs, func(x backend.Device) bool { return x.Name == d })) {
		r.Info = append(r.Info, d+" is not in the model's device list (-dev / -sm none): it holds these weights but computes nothing else")
	}
}

func (p *planner) targetName(lay *layout, item int) string {
	for _, o := range lay.ovr {
		if o.item == item {
			return p.deviceName(o.target)
		}
	}
	return lay.cfg.items[item].Target
}

func ruleRefs(idx []int) string {
	parts := make([]string, len(idx))
	for i, x := range idx {
		parts[i] = fmt.Sprintf("rule %d", x+1)
	}
	return strings.Join(parts, ", ")
}

func sample(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}

// notes collects what llama.cpp would say and what moerun assumed.
func (p *planner) notes(lay *layout, plan *Plan) {
	r, c := p.r, lay.ctx
	note := func(format string, args ...any) { plan.Notes = append(plan.Notes, fmt.Sprintf(format, args...)) }
	warn := func(format string, args ...any) { plan.Warnings = append(plan.Warnings, fmt.Sprintf(format, args...)) }
	if r.FlashAttn == FlashAuto {
		note("flash attention 'auto' is taken as on (llama.cpp turns it on when every device supports it for this head size)")
		if r.CacheV.BlockSize() > 1 {
			note("quantized V cache: llama.cpp enables flash attention for it")
		}
	}
	if r.CtxSize == 0 && lay.cfg.nCtx == p.hp.nCtx || lay.cfg.nCtx == 0 {
		note("context: -c not given, so the model's training context, %d tokens", p.hp.nCtx)
	}
	if !c.Unified && c.NCtx != pad(max(lay.cfg.nCtx, 0), 256) && lay.cfg.nCtx > 0 {
		note("n_ctx is not divisible by n_seq_max - rounding down to %d", c.NCtx)
	}
	if r.Parallel < 0 {
		note("-np auto: llama-server runs 4 slots sharing one unified KV cache")
	}
	if p.hp.nNextN > 0 {
		note("%d NextN/MTP block(s) are not loaded (llama.cpp loads them only for MTP speculative decoding); -ngl still counts them", p.hp.nNextN)
	}
	cpuOverride := false
	for _, o := range lay.ovr {
		if o.target == p.cpu && slices.Contains(p.mustHits(o.pattern), true) {
			cpuOverride = true
		}
	}
	if cpuOverride && lay.mmap && r.Semantics == Mainline && len(p.model) > 0 {
		note("llama.cpp warns: tensor overrides to CPU are used with mmap enabled - consider using --load-mode none for better performance (the log says they go to %s, but with mmap they stay in CPU_Mapped)", p.hostBuffer())
	}
	if r.Semantics == IKLlama {
		if !lay.mmap && r.LoadMode.mmap() {
			note("ik_llama.cpp loads the whole model without mmap (pinned) because tensors are overridden to the CPU")
		}
		if len(p.model) > 1 {
			note("ik_llama.cpp splits layers across several GPUs by memory and shares -ncmoe out per GPU; moerun approximates both by layer count")
		}
	}
	if len(p.model) == 0 {
		note("no GPU: everything runs on the CPU (give --gpu 24GiB for a dry run with a GPU)")
	}
	if p.devs[p.cpu].TotalBytes == 0 {
		note("the host's RAM is unknown: give --ram to check it")
	}
	for _, d := range plan.Devices {
		if d.ExpertCache > 0 {
			note("%s: %s of its weights are the expert cache's slots (--expert-cache %s): the experts each layer's routing used most lately, refilled between passes",
				d.Device.Name, humanBytes(d.ExpertCache), p.r.ExpertCache)
		}
		if d.Staging > 0 {
			all := ""
			if p.r.OffloadAllExperts {
				all = ", every expert of a stack (-no-ooae)"
			}
			note("%s: prompt batches of 32+ tokens run the matmuls of CPU-held weights here, copying the weights over%s; the compute estimate includes %s for that (--no-op-offload removes it)", d.Device.Name, all, humanBytes(d.Staging))
		}
	}
	for _, d := range plan.Devices {
		if fits, ok := d.Fits(); ok && !fits && d.Total > d.Capacity() {
			warn("%s needs %s but has %s", d.Device.Name, humanBytes(d.Total), humanBytes(d.Capacity()))
		}
	}
}

// humanBytes prints binary units as llama.cpp does.
func humanBytes(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	v, i := float64(n), 0
	for (v >= 1024 || v <= -1024) && i < len(units)-1 {
		v /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.2f %s", v, units[i])
}

// stacksMatched counts the routed-expert stacks among the tensors matched marks.
func (p *planner) stacksMatched(matched []bool) int {
	n := 0
	for t, m := range matched {
		if m && p.isExpertStack(t) {
			n++
		}
	}
	return n
}
