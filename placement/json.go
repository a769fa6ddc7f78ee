package placement

import (
	"encoding/json"
	"io"
)

// SchemaVersion names the JSON document WriteJSON writes (documented in docs/schemas.md).
const SchemaVersion = "moerun.place/v1"

// The JSON document. Field names and meanings are stable within moerun.place/v1; new fields
// may be added.
type jsonPlan struct {
	Schema    string       `json:"schema"`
	Semantics string       `json:"semantics"`
	Model     jsonModel    `json:"model"`
	Context   jsonContext  `json:"context"`
	Settings  jsonSettings `json:"settings"`
	Verdict   jsonVerdict  `json:"verdict"`
	Devices   []jsonDevice `json:"devices"`
	Layers    []jsonLayer  `json:"layers"`
	Tensors   []jsonTensor `json:"tensors"`
	Rules     []jsonRule   `json:"rules"`
	Fit       jsonFit      `json:"fit"`
	Notes     []string     `json:"notes"`
	Warnings  []string     `json:"warnings"`
	Ignored   []string     `json:"ignored_flags"`
	// Prediction is present with place --predict (predict_report.go).
	Prediction *jsonPrediction `json:"prediction,omitempty"`
}

type jsonModel struct {
	Name         string `json:"name"`
	Architecture string `json:"architecture"`
	Layers       int    `json:"layers"`
	NextNLayers  int    `json:"nextn_layers"`
	Tensors      int    `json:"tensors"`
	Bytes        int64  `json:"bytes"`
	Experts      int    `json:"experts"`
	ExpertsUsed  int    `json:"experts_used"`
	ContextTrain int    `json:"context_train"`
	MLA          bool   `json:"mla"`
	IndexerTopK  int    `json:"indexer_top_k"`
}

type jsonContext struct {
	NCtx      int  `json:"n_ctx"`
	NCtxSeq   int  `json:"n_ctx_seq"`
	NSeq      int  `json:"n_seq_max"`
	NStream   int  `json:"n_stream"`
	Unified   bool `json:"kv_unified"`
	NBatch    int  `json:"n_batch"`
	NUBatch   int  `json:"n_ubatch"`
	SWACells  int  `json:"swa_cells"`
	FlashAttn bool `json:"flash_attn"`
}

type jsonSettings struct {
	GPULayers      int       `json:"gpu_layers"`
	GPULayersParam string    `json:"gpu_layers_param"`
	SplitMode      string    `json:"split_mode"`
	TensorSplit    []float32 `json:"tensor_split"`
	ModelDevices   []string  `json:"model_devices"`
	CacheTypeK     string    `json:"cache_type_k"`
	CacheTypeV     string    `json:"cache_type_v"`
	KVOffload      bool      `json:"kv_offload"`
	LoadMode       string    `json:"load_mode"`
	Mmap           bool      `json:"mmap"`
	Mlock          bool      `json:"mlock"`
	OpOffload      bool      `json:"op_offload"`
	// OffloadAllExperts: -no-ooae, op offload copies whole expert stacks.
	OffloadAllExperts bool   `json:"offload_all_experts,omitempty"`
	ExpertCache       string `json:"expert_cache,omitempty"` // --expert-cache: SLOTS or SLOTS:SWAPS
}

type jsonVerdict struct {
	Fits *bool  `json:"fits"`
	Text string `json:"text"`
}

type jsonDevice struct {
	Name                string `json:"name"`
	Kind                string `json:"kind"`
	InModel             bool   `json:"in_model"`
	CapacityBytes       int64  `json:"capacity_bytes"`
	WeightsBytes        int64  `json:"weights_bytes"`
	WeightsMappedBytes  int64  `json:"weights_mapped_bytes"`
	KVBytes             int64  `json:"kv_bytes"`
	ComputeBytes        int64  `json:"compute_bytes"`
	ComputeStagingBytes int64  `json:"compute_staging_bytes"`
	ExpertCacheBytes    int64  `json:"expert_cache_bytes,omitempty"`
	TotalBytes          int64  `json:"total_bytes"`
	MarginBytes         int64  `json:"margin_bytes"`
	Fits                *bool  `json:"fits"`
	Layers              int    `json:"layers"`
}

type jsonLayer struct {
	Layer    *int   `json:"layer"` // null for the output and input layers
	Name     string `json:"name"`
	Kind     string `json:"kind"`
	Device   string `json:"device"`
	KVDevice string `json:"kv_device"`
	KVBytes  int64  `json:"kv_bytes"`
	// IndexerBytes is the part of kv_bytes holding DeepSeek Sparse Attention's indexer keys.
	IndexerBytes int64             `json:"indexer_bytes,omitempty"`
	Classes      map[string]string `json:"classes"`
	Bytes        map[string]int64  `json:"bytes"`
	Experts      map[string]int    `json:"experts,omitempty"` // per device, where selectors split the layer's experts
}

type jsonTensor struct {
	Name    string  `json:"name"`
	Class   string  `json:"class"`
	Layer   *int    `json:"layer"`
	Type    string  `json:"type"`
	Shape   []int64 `json:"shape"`
	Bytes   int64   `json:"bytes"`
	Device  string  `json:"device"`
	Buffer  string  `json:"buffer"`
	Storage string  `json:"storage"`
	Rule    string  `json:"rule"`
	RuleIdx *int    `json:"rule_index"`
	Default string  `json:"default_device"`
	Tied    bool    `json:"tied_output,omitempty"`
	Experts []int   `json:"experts,omitempty"` // a share of a stack split by expert
}

type jsonRule struct {
	Index        int      `json:"index"`
	Origin       string   `json:"origin"`
	Flag         string   `json:"flag"`
	Kind         string   `json:"kind"`
	Text         string   `json:"text"`
	Target       string   `json:"target"`
	Patterns     []string `json:"patterns"`
	Matched      int      `json:"matched_tensors"`
	Decided      int      `json:"placed_tensors"`
	DecidedBytes int64    `json:"placed_bytes"`
	Moved        int      `json:"moved_tensors"`
	MovedBytes   int64    `json:"moved_bytes"`
	ShadowedBy   []int    `json:"shadowed_by"`
	Warnings     []string `json:"warnings"`
	Info         []string `json:"info"`
	Ignored      string   `json:"ignored,omitempty"`
}

type jsonFit struct {
	Enabled bool     `json:"enabled"`
	Status  string   `json:"status"`
	Changes []string `json:"changes"`
	Args    string   `json:"args"`
	Log     []string `json:"log"`
}

var itemKindNames = [...]string{"override", "cpu_moe", "n_cpu_moe", "fit"}

// WriteJSON writes the plan as a moerun.place/v1 document. ignored lists the flags the
// caller accepted but that do not affect placement.
func (p *Plan) WriteJSON(w io.Writer, ignored []string) error {
	doc := jsonPlan{
		Schema: SchemaVersion, Semantics: p.Semantics.String(),
		Model: jsonModel{p.Model.Name, p.Model.Arch, p.Model.Layers, p.Model.NextN, p.Model.Tensors, p.Model.Bytes,
			p.Model.Experts, p.Model.ExpertsUsed, p.Model.ContextTrain, p.Model.MLA, p.Model.IndexerTopK},
		Context: jsonContext{p.Context.NCtx, p.Context.NCtxSeq, p.Context.NSeq, p.Context.NStream, p.Context.Unified,
			p.Context.NBatch, p.Context.NUBatch, p.Context.SWACells, p.Context.FlashAttn},
		Settings: jsonSettings{GPULayers: p.Settings.GPULayers, GPULayersParam: nglText(p.Settings.GPULayersFlag),
			SplitMode: p.Settings.SplitMode.String(), TensorSplit: nonNil(p.Settings.TensorSplit), ModelDevices: nonNil(p.Settings.ModelDevices),
			CacheTypeK: p.Settings.CacheK.String(), CacheTypeV: p.Settings.CacheV.String(), KVOffload: p.Settings.KVOffload,
			LoadMode: p.Settings.LoadMode.String(), Mmap: p.Settings.Mmap, Mlock: p.Settings.Locked, OpOffload: p.Settings.OpOffload, OffloadAllExperts: p.Settings.OffloadAllExperts, ExpertCache: expertCacheFlag(p.Settings.ExpertCache)},
		Verdict: jsonVerdict{Text: p.Verdict()},
		Fit:     jsonFit{Enabled: p.Fit.Enabled, Status: p.Fit.Status, Changes: nonNil(p.Fit.Changes), Args: p.Fit.Args, Log: nonNil(p.Fit.Log)},
		Notes:   nonNil(p.Notes), Warnings: nonNil(p.Warnings), Ignored: nonNil(ignored),
		Devices: []jsonDevice{}, Layers: []jsonLayer{}, Tensors: []jsonTensor{}, Rules: []jsonRule{},
	}
	allFit, known := true, false
	for _, d := range p.Devices {
		jd := jsonDevice{Name: d.Device.Name, Kind: d.Device.Kind.String(), InModel: d.InModel, CapacityBytes: d.Capacity(),
			WeightsBytes: d.Weights, WeightsMappedBytes: d.WeightsMapped, KVBytes: d.KV, ComputeBytes: d.Compute,
			ComputeStagingBytes: d.Staging, ExpertCacheBytes: d.ExpertCache, TotalBytes: d.Total, MarginBytes: d.Margin, Layers: d.Layers}
		if fits, ok := d.Fits(); ok {
			jd.Fits = &fits
			known = true
			allFit = allFit && fits
		}
		doc.Devices = append(doc.Devices, jd)
	}
	if known {
		doc.Verdict.Fits = &allFit
	}
	for _, l := range p.Layers {
		jl := jsonLayer{Name: l.Label(), Kind: l.Kind, Device: l.Device, KVDevice: l.KVDevice, KVBytes: l.KVBytes, IndexerBytes: l.IndexerBytes, Classes: l.Classes, Bytes: l.Bytes, Experts: l.Experts}
		if l.Index >= 0 {
			jl.Layer = &l.Index
		}
		doc.Layers = append(doc.Layers, jl)
	}
	for _, t := range p.Tensors {
		jt := jsonTensor{Name: t.Name, Class: t.Class.String(), Type: t.Type.String(), Shape: t.Shape, Bytes: t.Bytes,
			Device: t.Device, Buffer: t.Buffer, Storage: t.Storage.String(), Rule: t.Reason, Default: t.Default, Tied: t.Tied, Experts: t.Experts}
		if t.Layer >= 0 {
			jt.Layer = &t.Layer
		}
		if t.Rule >= 0 {
			jt.RuleIdx = &t.Rule
		}
		doc.Tensors = append(doc.Tensors, jt)
	}
	for i, r := range p.Rules {
		doc.Rules = append(doc.Rules, jsonRule{Index: i, Origin: r.Item.Origin(), Flag: r.Item.Flag, Kind: itemKindNames[r.Item.Kind],
			Text: r.Item.Text, Target: r.Item.Target, Patterns: nonNil(r.Patterns), Matched: r.Matched, Decided: r.Decided,
			DecidedBytes: r.DecidedBytes, Moved: r.Moved, MovedBytes: r.MovedBytes, ShadowedBy: nonNil(r.ShadowedBy),
			Warnings: nonNil(r.Warnings), Info: nonNil(r.Info), Ignored: r.IgnoredReason})
	}
	doc.Prediction = p.Prediction.toJSON()
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(doc)
}

// nonNil keeps empty lists as [] rather than null, so readers can iterate without checks.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// expertCacheFlag is --expert-cache's value, "" without a cache.
func expertCacheFlag(c ExpertCache) string {
	if c.Slots == 0 {
		return ""
	}
	return c.String()
}
