package moe

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/moerun/moerun/gguf/synth"
)

// generatedModels are tiny random models whose llama.cpp goldens are committed
// (testdata/golden/synth-<name>.json.gz) but whose files are not: with them the GPU run
// would carry more than it can (tools/gpu/check.sh fit), and moerun synth writes the same
// bytes again from the same recipe as ../tools/oracle/synth_goldens.sh's (its flags
// --random --seed 7 --vocab-size 512 and the ones below). The SHA-256 of the file llama.cpp
// answered for is checked, so a change to synth's writer says so instead of failing the
// goldens.
var generatedModels = map[string]struct {
	spec   string
	opts   synth.Options
	sha256 string
}{
	"deepseek32": {"deepseek-v3.2:q8_0", dsaTiny(3, 2, 1, 0), "1151277e20dce62420df1a74c19384372610612b044ff28c689716dab132caad"},
	"glm-dsa":    {"glm-5:q5_k_m", dsaTiny(3, 0, 0, 0), "6f64bf18fd55336c2d433cb2d37d75dd6791862218d748133db79219dd290c57"},
	// A training context of 1M: llama.cpp reads the file as GLM-5.2, layer 3 sharing layer 2's
	// choice of positions.
	"glm-dsa-shared": {"glm-5:q5_k_m", dsaTiny(4, 0, 0, 1048576), "7f8e0720cee2f903e3887b2fab5ecd824da7c0df271a23c0074950b24f257dee"},
}

// dsaTiny is synth_goldens.sh's $dsa shape: layers blocks (one dense), 128 wide, 4 heads
// of 32 + 16 rotary over a KV rank of 64, 8 experts of 64 (2 used, in groups when asked),
// an indexer of 4 heads of 64 keeping 32 positions.
func dsaTiny(layers, groups, groupsUsed, context int) synth.Options {
	return synth.Options{Layers: layers, LeadingDense: 1, Embd: 128, Heads: 4, HeadDim: 48, VHeadDim: 32, RopeDim: 16,
		QLoraRank: 64, KVLoraRank: 64, Experts: 8, ExpertsUsed: 2, ExpertFF: 64, FF: 192,
		IndexerHeads: 4, IndexerHeadDim: 64, IndexerTopK: 32, ExpertGroups: groups, ExpertGroupsUsed: groupsUsed,
		Context: context, Vocab: 512}
}

var generated struct {
	once  sync.Once
	dir   string
	err   error
	mu    sync.Mutex
	paths map[string]string
}

// generatedModel writes the generated model name once per test binary and returns its path.
func generatedModel(name string) (string, error) {
	g := &generated
	g.once.Do(func() { g.dir, g.err = os.MkdirTemp("", "moerun-synth-") })
	if g.err != nil {
		return "", g.err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if p, ok := g.paths[name]; ok {
		return p, nil
	}
	r := generatedModels[name]
	m, err := synth.Build(r.spec, r.opts)
	if err != nil {
		return "", err
	}
	path := filepath.Join(g.dir, name+".gguf")
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	err = m.WriteRandom(io.MultiWriter(f, h), synth.RandomOptions{Seed: 7})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != r.sha256 {
		return "", fmt.Errorf("moerun synth now writes %s with SHA-256 %s, not the %s llama.cpp's golden was made for: remake it with tools/oracle/synth_goldens.sh %s and update the hash",
			name, got, r.sha256, name)
	}
	if g.paths == nil {
		g.paths = map[string]string{}
	}
	g.paths[name] = path
	return path, nil
}

// TestMain removes the generated models after the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if generated.dir != "" {
		os.RemoveAll(generated.dir)
	}
	os.Exit(code)
}
