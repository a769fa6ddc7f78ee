package moe

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/placement"
)

// TestLoadModes loads a golden model, and the same model with its output tied to the
// embedding, under each of llama.cpp's load modes. Those that do not map the file (none,
// mlock, dio) read every host weight into the model's own memory — the tied output sharing
// the embedding's copy — and compute from it after the file is closed; every mode gives
// the mapped model's logits bit for bit. Locking may be refused (RLIMIT_MEMLOCK) and direct
// I/O (tmpfs): each is a warning, as in llama.cpp, and nothing else is.
func TestLoadModes(t *testing.T) {
	tokens := promptOf(t, "tiny-qwen3moe", "fox")
	for _, path := range []string{qwenModel, rewriteModel(t, qwenModel, outputEdit(false))} {
		want := evalAll(t, openModel(t, path, 2), DefaultContextOptions(), tokens)
		for _, mode := range []placement.LoadMode{placement.LoadNone, placement.LoadMlock, placement.LoadDirectIO, placement.LoadMmap, placement.LoadMmapMlock} {
			t.Run(mode.String(), func(t *testing.T) {
				f, _, host := openHost(t, path, 2)
				rules := placement.DefaultRules()
				rules.LoadMode = mode
				plan := placeModel(t, f, rules, []backend.Device{host.Device()})
				m, err := Load(f, plan, []backend.Backend{host})
				if err != nil {
					t.Fatal(err)
				}
				for _, w := range m.LoadWarnings() {
					if !strings.Contains(w, map[bool]string{true: "falling back to buffered reads", false: "RLIMIT_MEMLOCK"}[mode == placement.LoadDirectIO]) {
						t.Errorf("warning %q", w)
					}
				}
				copied, use, err := m.CopiedWeights()
				if plan.Settings.Mmap {
					if copied != 0 {
						t.Errorf("mapped mode copied %d bytes", copied)
					}
				} else {
					weights, tensors := hostWeightBytes(plan)
					// Each copy starts at a cache line and, under direct I/O, takes the
					// whole blocks around it (at most a page each).
					if most := weights + tensors*(64+3*int64(os.Getpagesize())); copied < weights || copied > most {
						t.Errorf("copied %d bytes; the host's weights take %d (%d tensors)", copied, weights, tensors)
					}
					if err == nil && use.Resident < copied {
						t.Errorf("%d of the %d copied bytes resident", use.Resident, copied)
					}
					if err := f.Close(); err != nil { // the copies are all the model needs
						t.Fatal(err)
					}
				}
				got := evalAll(t, &testModel{Model: m}, DefaultContextOptions(), tokens)
				if !slices.Equal(got, want) {
					t.Errorf("logits differ from the mapped model's: %+v", compareLogits(got, want))
				}
				if err := m.Close(); err != nil {
					t.Error(err)
				}
			})
		}
	}
}

// hostWeightBytes sums the bytes of the distinct weights plan puts on the CPU (the tied
// output is the embedding itself) and counts them.
func hostWeightBytes(plan *placement.Plan) (bytes, tensors int64) {
	for _, u := range plan.Tensors {
		if u.Device == "CPU" && !u.Tied && u.Class != gguf.ClassNorm {
			bytes += u.Bytes
			tensors++
		}
	}
	return bytes, tensors
}
