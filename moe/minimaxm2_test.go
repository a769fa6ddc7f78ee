package moe

import (
	"strings"
	"testing"

	"github.com/moerun/moerun/gguf"
)

// TestMiniMaxM2BadMetadata checks that files llama.cpp refuses (expert_feed_forward_length
// is required, a missing gating function aborts its graph) or that cannot be a MiniMax-M2
// get a clear error instead of a model.
func TestMiniMaxM2BadMetadata(t *testing.T) {
	for _, tc := range []struct {
		edit modelEdit
		want string
	}{
		{modelEdit{delete: []string{"{arch}.expert_feed_forward_length"}}, "expert_feed_forward_length"},
		{modelEdit{delete: []string{"{arch}.expert_gating_func"}}, "expert_gating_func"},
		{modelEdit{set: map[string]gguf.Value{"{arch}.rope.dimension_count": gguf.NewValue(uint32(64))}}, "rotary dims"},
		{modelEdit{set: map[string]gguf.Value{"{arch}.attention.value_length": gguf.NewValue(uint32(16))}}, "equal key and value head sizes"},
	} {
		path := rewriteModel(t, synthModel("minimax-m2"), tc.edit)
		if err := configError(t, path); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one about %q", tc.edit, err, tc.want)
		}
	}
}
