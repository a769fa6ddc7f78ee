package moe

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestExpertStats(t *testing.T) {
	s := NewExpertStats(3, 4, func(l int) bool { return l > 0 }) // layer 0 is dense
	s.Record(1, []int32{2, 0}, []float32{0.75, 0.25})
	s.Record(1, []int32{2, -1}, []float32{1, 0})
	s.Record(2, []int32{3, 1}, []float32{0.5, 0.5})
	var buf bytes.Buffer
	if err := s.WriteJSON(&buf, "tiny"); err != nil {
		t.Fatal(err)
	}
	var doc ExpertStatsJSON
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Schema != "moerun.expert-stats/v1" || len(doc.Layers) != 2 || doc.Layers[0].Layer != 1 {
		t.Fatalf("document %+v", doc)
	}
	l1 := doc.Layers[0]
	if l1.Tokens != 2 || l1.DroppedSlots != 1 || l1.Experts[2].Selected != 2 || l1.Experts[2].WeightSum != 1.75 ||
		l1.Experts[0].Selected != 1 || l1.Experts[1].Selected != 0 {
		t.Errorf("layer 1: %+v", l1)
	}
	if l2 := doc.Layers[1]; l2.Tokens != 1 || l2.Experts[3].WeightSum != 0.5 {
		t.Errorf("layer 2: %+v", l2)
	}
}
