// Package arch describes each model architecture moerun knows, one file per architecture:
// the facts about it that the placement planner, the synthetic-model writer, the reports and
// the runtime would otherwise each keep a copy of. It holds data only and imports nothing of
// moerun's, so every other package can read it; what needs code of its own (a forward pass,
// a tensor layout) stays in the package that owns that code, keyed by the descriptor.
package arch

import (
	"fmt"
	"slices"
	"strings"
)

// Arch is one architecture, as a GGUF file's general.architecture names it.
type Arch struct {
	// Name is general.architecture, also the prefix of the architecture's metadata keys.
	Name string
	// Runs says moerun runs models of this architecture (package moe has its forward pass).
	// The others are ones placement can plan and synth can lay out, nothing more.
	Runs bool
	// Recurrent says some layers keep a recurrent state instead of a KV cache (Gated
	// DeltaNet): every layer but each full_attention_interval-th one, or those that
	// attention.recurrent_layers marks. llama.cpp gives such a model a hybrid memory.
	Recurrent bool
	// SlidingWindow says layers alternate sliding-window and full attention: all but the
	// last layer of each attention.sliding_window_pattern period slide.
	SlidingWindow bool
	// Indexer says the model has DeepSeek Sparse Attention's lightning indexer, which keeps
	// a key of its own per position beside the MLA cache.
	Indexer bool
	// SharedIndexers says layers may reuse another layer's indexer selection instead of
	// having their own (attention.indexer.types; GLM-5.2's fixed pattern when absent).
	SharedIndexers bool
	// MRoPE says the files carry multimodal rotary sections (rope.dimension_sections),
	// which a text-only model runs as plain NeoX rotation.
	MRoPE bool
	// SizeLabels are llama.cpp's model types (llm_type_name) of the architecture by the
	// number of blocks the main graph runs, as its load_hparams at llama.cpp 3f545bec sets them.
	SizeLabels map[int]string
}

// SizeLabel is llama.cpp's model type for a model of this architecture with layers blocks,
// "?B" for a count llama.cpp does not name.
func (a *Arch) SizeLabel(layers int) string {
	if label, ok := a.SizeLabels[layers]; ok {
		return label
	}
	return "?B"
}

var byName = map[string]*Arch{}

// register adds an architecture's descriptor to the table at package initialisation.
func register(a *Arch) *Arch {
	if _, dup := byName[a.Name]; dup {
		panic(fmt.Sprintf("arch: %q registered twice", a.Name))
	}
	byName[a.Name] = a
	return a
}

// Lookup returns the descriptor of the architecture named name, false for one moerun does
// not know.
func Lookup(name string) (*Arch, bool) {
	a, ok := byName[name]
	return a, ok
}

// Of returns the descriptor of the architecture named name; for one moerun does not know,
// a descriptor of that name with no special layers and no size labels, as which planning
// and reports take such a model.
func Of(name string) *Arch {
	if a, ok := byName[name]; ok {
		return a
	}
	return &Arch{Name: name}
}

// All returns every descriptor, by name.
func All() []*Arch {
	all := make([]*Arch, 0, len(byName))
	for _, a := range byName {
		all = append(all, a)
	}
	slices.SortFunc(all, func(a, b *Arch) int { return strings.Compare(a.Name, b.Name) })
	return all
}
