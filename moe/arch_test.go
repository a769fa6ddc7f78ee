package moe

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/moerun/moerun/arch"
	"github.com/moerun/moerun/gguf/synth"
	"github.com/moerun/moerun/placement"
)

// TestArchitecturesAreWhole: every architecture has both halves or neither, so that one
// cannot be half added. A descriptor that says it runs has a forward pass here and a forward
// pass has such a descriptor; and synth writes a model of it (a built-in layout cut to four
// blocks) that placement reads with the layer kinds the descriptor names and moerun loads.
func TestArchitecturesAreWhole(t *testing.T) {
	for a := range architectures {
		if !a.Runs {
			t.Errorf("%s has a forward pass, but its descriptor says moerun does not run it", a.Name)
		}
	}
	for _, a := range arch.All() {
		if !a.Runs {
			continue
		}
		t.Run(a.Name, func(t *testing.T) {
			if _, ok := architectures[a]; !ok {
				t.Fatalf("%s's descriptor says moerun runs it, but it has no forward pass", a.Name)
			}
			presets := synth.Presets()
			i := slices.IndexFunc(presets, func(p synth.Preset) bool { return p.Config.Arch == a.Name })
			if i < 0 {
				t.Fatalf("synth has no built-in layout of %s", a.Name)
			}
			sm, err := synth.Build(presets[i].Name, synth.Options{Layers: 4})
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "sparse.gguf")
			if _, err := sm.WriteSparse(path); err != nil {
				t.Fatal(err)
			}
			m := openModel(t, path, 1)
			hp, err := placement.ReadHParams(placement.Model{Name: path, Metadata: m.file.Metadata, Tensors: m.file.Tensors})
			if err != nil {
				t.Fatal(err)
			}
			if got := slices.Contains(hp.Recurrent, true); got != a.Recurrent {
				t.Errorf("recurrent layers: %v, the descriptor says %v", got, a.Recurrent)
			}
			if got := slices.Contains(hp.SWA, true); got != a.SlidingWindow {
				t.Errorf("sliding-window layers: %v, the descriptor says %v", got, a.SlidingWindow)
			}
			if got := hp.IndexerDim > 0; got != a.Indexer {
				t.Errorf("lightning indexer: %v, the descriptor says %v", got, a.Indexer)
			}
		})
	}
}
