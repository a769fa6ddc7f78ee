package moe

import (
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/tensor"
)

// TestDSAPrefillMatchesDecode evaluates each golden prompt of the sparse-attention models
// in one batch, in pieces of two tokens and token by token. Most of "long"'s tokens see more
// positions than the indexer keeps, so the three must choose the same positions: pieces
// give the batch's logits bit for bit (with AttnPrecise, which the batch's tiled kernel
// would otherwise differ from), and so do single tokens until the padded cache reaches
// splitFrom cells, from where ggml (and moerun after it) splits a lone token's positions
// across threads and merges the parts: float32 rounding, which the later layers' choice of
// positions may amplify a little. (The generic kernels' products of one token and of a
// batch differ in their last bits anyway: there only the bound holds.)
func TestDSAPrefillMatchesDecode(t *testing.T) {
	const splitFrom = 256 // positions from 256 attend over 512 padded cells
	for _, name := range []string{"deepseek32", "glm-dsa"} {
		t.Run(name, func(t *testing.T) {
			m := openModel(t, synthModel(name), 2)
			g := loadGolden(t, "synth-"+name)
			checkPrefillMatchesDecode(t, m, g)
			vocab := m.Config.Vocab
			for _, p := range g.Prompts {
				o := DefaultContextOptions()
				o.Attention = tensor.AttnPrecise
				batch, err := m.context(t, o).Eval(p.Tokens, true)
				if err != nil {
					t.Fatal(err)
				}
				batch = append([]float32(nil), batch...)
				c := m.context(t, o)
				var worst float64
				for i, tok := range p.Tokens {
					got, err := c.Eval([]int32{tok}, false)
					if err != nil {
						t.Fatal(err)
					}
					d := compareLogits(got, batch[i*vocab:(i+1)*vocab]).maxDiff
					if i < splitFrom && d != 0 && tensor.ActiveLevel() != tensor.LevelGeneric {
						t.Errorf("%s: position %d: token by token differs from the batch by %.3g", p.Name, i, d)
					}
					worst = max(worst, d)
				}
				t.Logf("%s (%d tokens, top-k %d): token by token max |Δ| %.3g from the batch", p.Name, len(p.Tokens), m.Config.Indexer.TopK, worst)
				if worst > 0.05 {
					t.Errorf("%s: token by token differs from the batch by %.3g", p.Name, worst)
				}
			}
		})
	}
}

// TestDSASparsityMatters checks that the goldens test the indexer: the synth models keep 32
// positions, "long" has 302 tokens, and with every position kept instead (a top-k larger
// than the context) its final logits leave llama.cpp's, which the sparse pass matches.
func TestDSASparsityMatters(t *testing.T) {
	for _, name := range []string{"deepseek32", "glm-dsa"} {
		m := openModel(t, synthModel(name), 2)
		p := loadGolden(t, "synth-"+name).Prompts[2]
		if p.Name != "long" || len(p.Tokens) <= 2*m.Config.Indexer.TopK {
			t.Fatalf("%s: prompt %s of %d tokens does not exceed the top-k of %d well", name, p.Name, len(p.Tokens), m.Config.Indexer.TopK)
		}
		sparse, dense := sparseAndDense(t, m, p)
		t.Logf("%s: long's final logits from llama.cpp's: max |Δ| %.3g keeping 32 positions, %.3g keeping all", name, sparse, dense)
		// On x86 kernels the sparse pass gives llama.cpp's bits; the generic ones' last bits
		// may flip a position near the top-k's boundary, still far closer than dense.
		bound := 0.05
		if tensor.ActiveLevel() == tensor.LevelGeneric {
			bound = dense / 10
		}
		if sparse > bound || dense < 1 {
			t.Errorf("%s: keeping the indexer's top-k gives max |Δ| %.3g, keeping every position %.3g", name, sparse, dense)
		}
	}
}

// TestTopPositionsMatchPartialSort holds topPositions to the C++ standard library's
// std::partial_sort (libstdc++, tools/oracle/partial_sort_golden.cpp) on scores full of
// ties and masked cells: which of the tied positions stay is what decides llama.cpp's
// sparse attention.
func TestTopPositionsMatchPartialSort(t *testing.T) {
	data, err := os.ReadFile("testdata/partial-sort.txt")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	for li, line := range lines {
		head, tail, _ := strings.Cut(line, "|")
		f := strings.Fields(head)
		n, _ := strconv.Atoi(f[0])
		k, _ := strconv.Atoi(f[1])
		scores := make([]float32, n)
		for i := range scores {
			v, err := strconv.ParseFloat(f[2+i], 32)
			if err != nil {
				t.Fatal(err)
			}
			scores[i] = float32(v)
		}
		var want []int32
		for _, s := range strings.Fields(tail) {
			v, _ := strconv.Atoi(s)
			want = append(want, int32(v))
		}
		if got := topPositions(scores, k); !slices.Equal(got, want) {
			t.Errorf("case %d (%d of %d): got %v, libstdc++ %v", li, k, n, got, want)
		}
	}
	if len(lines) < 50 {
		t.Fatalf("only %d cases", len(lines))
	}
}

// TestHadamardRows compares the fast transform (tensor.Hadamard) with the matrix llama.cpp builds
// (Sylvester's: H1 = [1], H2n = [[Hn, Hn], [Hn, -Hn]], over sqrt(n)) and checks that it
// is its own inverse.
func TestHadamardRows(t *testing.T) {
	const n = 64
	h := [][]float64{{1}}
	for len(h) < n {
		m := len(h)
		next := make([][]float64, 2*m)
		for i := range next {
			next[i] = make([]float64, 2*m)
			for j := range next[i] {
				v := h[i%m][j%m]
				if i >= m && j >= m {
					v = -v
				}
				next[i][j] = v
			}
		}
		h = next
	}
	x := make([]float32, 2*n) // two rows
	for i := range x {
		x[i] = float32(math.Sin(float64(i)*0.7)) * 3
	}
	y := slices.Clone(x)
	hadamardRows := func(v []float32) {
		for r := 0; r < len(v); r += n {
			tensor.Hadamard(v[r : r+n])
		}
	}
	hadamardRows(y)
	for r := range 2 {
		for i := range n {
			var want float64
			for j := range n {
				want += h[i][j] * float64(x[r*n+j])
			}
			want /= math.Sqrt(n)
			if d := math.Abs(float64(y[r*n+i]) - want); d > 1e-5 {
				t.Fatalf("row %d element %d: %g, want %g", r, i, y[r*n+i], want)
			}
		}
	}
	hadamardRows(y)
	for i := range x {
		if d := math.Abs(float64(y[i] - x[i])); d > 1e-5 {
			t.Fatalf("H·H·x element %d: %g, want %g", i, y[i], x[i])
		}
	}
	for d, want := range map[int]int{64: 64, 128: 128, 192: 64, 32: 0, 96: 0, 512: 512} {
		if got := hadamardSize(d); got != want {
			t.Errorf("hadamardSize(%d) = %d, want %d", d, got, want)
		}
	}
}

// TestLayerNorm is the indexer key's norm on a hand-computed case: mean 2.5, variance 1.25.
func TestLayerNorm(t *testing.T) {
	x := []float32{1, 2, 3, 4}
	tensor.LayerNorm(x, []float32{1, 2, 1, 1}, []float32{0, 0, 1, -1}, 0)
	s := float32(1 / math.Sqrt(1.25))
	want := []float32{-1.5 * s, -0.5 * s * 2, 0.5*s + 1, 1.5*s - 1}
	for i := range x {
		if math.Abs(float64(x[i]-want[i])) > 1e-6 {
			t.Fatalf("LayerNorm: %v, want %v", x, want)
		}
	}
}

// TestDSABadMetadata checks that files llama.cpp 3f545bec refuses or cannot run (a missing
// gating function or query LoRA rank, an indexer head its Hadamard rotation does not fit, a
// first layer without its own indexer) get a clear error instead of a model.
func TestDSABadMetadata(t *testing.T) {
	for _, tc := range []struct {
		model string
		edit  modelEdit
		want  string
	}{
		{"deepseek32", modelEdit{delete: []string{"{arch}.expert_gating_func"}}, "expert_gating_func"},
		{"deepseek32", modelEdit{delete: []string{"{arch}.attention.indexer.top_k"}}, "indexer.top_k"},
		{"deepseek32", modelEdit{set: map[string]gguf.Value{"{arch}.attention.indexer.key_length": gguf.NewValue(uint32(96))}}, "Hadamard"},
		{"glm-dsa", modelEdit{delete: []string{"{arch}.attention.q_lora_rank"}}, "q_lora_rank"},
		{"glm-dsa", modelEdit{set: map[string]gguf.Value{"{arch}.attention.indexer.types": gguf.NewArray([]bool{false, true, true})}}, "shared"},
		{"glm-dsa", modelEdit{set: map[string]gguf.Value{"{arch}.attention.indexer.types": gguf.NewArray([]bool{true, false})}}, "entries for 3 layers"},
	} {
		path := rewriteModel(t, synthModel(tc.model), tc.edit)
		if err := configError(t, path); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %+v: error %v, want one about %q", tc.model, tc.edit, err, tc.want)
		}
	}
}

// TestGLMSharedIndexer gives the GLM model's middle layer a shared indexer (GLM-5.2's
// indexer_types): that layer has no key cache of its own and attends the positions layer 0
// chose, so a prompt longer than the top-k changes the logits, but stays the same whether
// evaluated in one batch or in pieces.
func TestGLMSharedIndexer(t *testing.T) {
	path := rewriteModel(t, synthModel("glm-dsa"), modelEdit{set: map[string]gguf.Value{
		"{arch}.attention.indexer.types": gguf.NewArray([]bool{true, false, true})}})
	m := openModel(t, path, 2)
	if got := m.Config.Indexer.Full; !slices.Equal(got, []bool{true, false, true}) {
		t.Fatalf("indexer types %v", got)
	}
	if d := m.layers[1].attn.(*dsaAttention); d.indexer != nil || d.cacheShape().indexDim != 0 {
		t.Fatalf("the shared layer has an indexer of its own")
	}
	g := loadGolden(t, "synth-glm-dsa")
	checkPrefillMatchesDecode(t, m, g)
	long := g.Prompts[2]
	logits, err := m.context(t, DefaultContextOptions()).Eval(long.Tokens, false)
	if err != nil {
		t.Fatal(err)
	}
	if d := compareLogits(logits, long.StepLogits[0]).maxDiff; d < 0.1 {
		t.Errorf("sharing layer 0's choice in layer 1 changes long's final logits by only %.3g", d)
	}
}

// sparseAndDense is how far the model's final logits for prompt p land from llama.cpp's
// keeping the indexer's top-k, then keeping every position (the model is left dense).
func sparseAndDense(t *testing.T, m *testModel, p goldenPrompt) (sparse, dense float64) {
	t.Helper()
	final := func() float64 {
		logits, err := m.context(t, DefaultContextOptions()).Eval(p.Tokens, false)
		if err != nil {
			t.Fatal(err)
		}
		return compareLogits(logits, p.StepLogits[0]).maxDiff
	}
	sparse = final()
	for _, l := range m.layers {
		l.attn.(*dsaAttention).topK = 1 << 20
	}
	return sparse, final()
}
