package moe

import (
	"encoding/json"
	"fmt"
	"io"
	"sync"
)

// ExpertStats records, per MoE layer and expert, how often the router selected the expert
// and the total weight it got: the input the placement predictor uses to estimate how many
// experts a token really touches. Record is called from the forward pass; the recorder is
// safe for concurrent use, so that a server can read it while its engine runs.
type ExpertStats struct {
	mu     sync.Mutex
	layers []*layerStats // nil for layers without routed experts
}

type layerStats struct {
	tokens   uint64
	dropped  uint64 // slots SER removed
	selected []uint64
	weight   []float64
}

// NewExpertStats makes a recorder for a model with nLayers layers of nExperts experts;
// isMoE says which layers route (DeepSeek's leading dense layers do not).
func NewExpertStats(nLayers, nExperts int, isMoE func(layer int) bool) *ExpertStats {
	s := &ExpertStats{layers: make([]*layerStats, nLayers)}
	for l := range s.layers {
		if isMoE(l) {
			s.layers[l] = &layerStats{selected: make([]uint64, nExperts), weight: make([]float64, nExperts)}
		}
	}
	return s
}

// Record adds one token's routing decision at a layer (ids and weights as Router.Route
// returns them; id -1 marks a slot SER dropped).
func (s *ExpertStats) Record(layer int, ids []int32, weights []float32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ls := s.layers[layer]
	ls.tokens++
	for j, e := range ids {
		if e < 0 {
			ls.dropped++
			continue
		}
		ls.selected[e]++
		ls.weight[e] += float64(weights[j])
	}
}

// ExpertStatsJSON is the document --expert-stats writes (schema moerun.expert-stats/v1).
type ExpertStatsJSON struct {
	Schema string           `json:"schema"`
	Model  string           `json:"model"`
	Layers []LayerStatsJSON `json:"layers"`
}

// LayerStatsJSON is one MoE layer's record.
type LayerStatsJSON struct {
	Layer        int              `json:"layer"`
	Tokens       uint64           `json:"tokens"`
	DroppedSlots uint64           `json:"dropped_slots"` // slots removed by -ser
	Experts      []ExpertStatJSON `json:"experts"`
}

// ExpertStatJSON is one expert's record in a layer.
type ExpertStatJSON struct {
	Expert    int     `json:"expert"`
	Selected  uint64  `json:"selected"`   // tokens that routed to it
	WeightSum float64 `json:"weight_sum"` // sum of its gating weights over those tokens
}

// Snapshot returns the statistics as their JSON document.
func (s *ExpertStats) Snapshot(model string) ExpertStatsJSON {
	s.mu.Lock()
	defer s.mu.Unlock()
	doc := ExpertStatsJSON{Schema: "moerun.expert-stats/v1", Model: model, Layers: []LayerStatsJSON{}}
	for l, ls := range s.layers {
		if ls == nil {
			continue
		}
		row := LayerStatsJSON{Layer: l, Tokens: ls.tokens, DroppedSlots: ls.dropped, Experts: make([]ExpertStatJSON, len(ls.selected))}
		for e := range ls.selected {
			row.Experts[e] = ExpertStatJSON{Expert: e, Selected: ls.selected[e], WeightSum: ls.weight[e]}
		}
		doc.Layers = append(doc.Layers, row)
	}
	return doc
}

// WriteJSON writes the statistics document.
func (s *ExpertStats) WriteJSON(w io.Writer, model string) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(s.Snapshot(model)); err != nil {
		return fmt.Errorf("writing expert statistics: %w", err)
	}
	return nil
}
