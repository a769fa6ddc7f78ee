package moe

import (
	"errors"
	"fmt"
	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/backend/cpu"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/tensor"
)

const qwen35Model = "../testdata/models/tiny-qwen35moe.gguf"

// TestHybridPrefillMatchesDecode feeds Qwen3.5's and Qwen3-Next's golden prompts once in one
// batch and once in pieces
// of two tokens (three for the last piece of an odd prompt), carrying the recurrent state
// (conv windows, delta-rule state) across calls, and compares every position's logits.
// They must be identical, bit for bit: the recurrent layers run token by token in both; the
// CPU backend's matmuls compute each row independently of the others in the batch; and
// attention computes each query row over the same cached keys. (Pieces of one token would
// multiply the float weights in ggml_vec_dot's order instead of tinyBLAS's, as llama.cpp
// does; the one-token path is held to llama.cpp's step logits by the golden tests.) The one
// deliberate difference is Context.attend's switch to float32 arithmetic for batches of 64
// tokens or more, where a smaller batch uses ggml's F16-rounding kernel: the long prompt
// therefore runs with AttnPrecise in both, the short ones with the defaults.
func TestHybridPrefillMatchesDecode(t *testing.T) {
	for _, gm := range []struct{ golden, path string }{{"tiny-qwen35moe", qwen35Model}, {"synth-qwen3next", synthModel("qwen3next")}} {
		t.Run(gm.golden, func(t *testing.T) { checkPrefillMatchesDecode(t, openModel(t, gm.path, 2), loadGolden(t, gm.golden)) })
	}
}

func checkPrefillMatchesDecode(t *testing.T, m *testModel, g *golden) {
	vocab := m.Config.Vocab
	for _, p := range g.Prompts {
		o := DefaultContextOptions()
		if len(p.Tokens) >= tensor.AttnTileTokens {
			o.Attention = tensor.AttnPrecise
		}
		batch, err := m.context(t, o).Eval(p.Tokens, true)
		if err != nil {
			t.Fatal(err)
		}
		batch = append([]float32(nil), batch...)
		c := m.context(t, o)
		for i := 0; i < len(p.Tokens); {
			n := 2
			if len(p.Tokens)-i == 3 || len(p.Tokens)-i < 2 {
				n = len(p.Tokens) - i
			}
			piece, err := c.Eval(p.Tokens[i:i+n], true)
			if err != nil {
				t.Fatal(err)
			}
			for j, v := range piece {
				if w := batch[i*vocab+j]; v != w {
					t.Fatalf("%s: position %d logit %d: %g in pieces, %g in one batch", p.Name, i+j/vocab, j%vocab, v, w)
				}
			}
			i += n
		}
	}
}

// TestQwen35ResetClearsState checks that Reset forgets the recurrent state: a prompt gives
// the same logits in a fresh context and in a reset one that had evaluated another prompt.
func TestQwen35ResetClearsState(t *testing.T) {
	m := openModel(t, qwen35Model, 2)
	prompts := loadGolden(t, "tiny-qwen35moe").Prompts
	first, second := prompts[0].Tokens, prompts[1].Tokens
	fresh, err := m.context(t, DefaultContextOptions()).Eval(second, false)
	if err != nil {
		t.Fatal(err)
	}
	fresh = append([]float32(nil), fresh...)
	c := m.context(t, DefaultContextOptions())
	if _, err := c.Eval(first, false); err != nil {
		t.Fatal(err)
	}
	c.Reset()
	again, err := c.Eval(second, false)
	if err != nil {
		t.Fatal(err)
	}
	for i := range fresh {
		if again[i] != fresh[i] {
			t.Fatalf("logit %d after Reset: %g, in a fresh context %g", i, again[i], fresh[i])
		}
	}
}

// deltaOps runs the operations of deltaNet.forward from the convolution to the delta rule.
func deltaOps(be backend.Backend, cfg DeltaNetConfig, o, qkv, x, convState, w, decay, beta, heads backend.Tensor) error {
	errs := []error{be.CausalConv(qkv, x, convState, w), be.Unary(qkv, qkv, backend.SiLU)}
	for h := range 2 * cfg.KHeads {
		errs = append(errs, be.L2Norm(qkv.Columns(h*cfg.HeadDim, cfg.HeadDim), 1e-6))
	}
	errs = append(errs, be.GatedDeltaRule(o, qkv, decay, beta, heads,
		tensor.DeltaRule{Dim: cfg.HeadDim, KHeads: cfg.KHeads, VHeads: cfg.VHeads, Stride: cfg.convDim()}))
	return errors.Join(errs...)
}

// deviceFloats puts v on be as rows of cols values.
func deviceFloats(tb testing.TB, be backend.Backend, v []float32, cols int) backend.Tensor {
	tb.Helper()
	buf, err := be.Alloc(int64(4 * len(v)))
	if err != nil {
		tb.Fatal(err)
	}
	x, err := backend.NewTensor(buf, 0, tensor.F32, cols, len(v)/cols)
	if err == nil {
		err = be.Set(x, float32Bytes(v))
	}
	if err != nil {
		tb.Fatal(err)
	}
	return x
}

// TestDeltaRuleMatchesDefinition checks the convolution and the gated delta rule against
// a direct float64 transcription of their definitions (S as a k×v matrix, not ggml's
// transposed layout), on random inputs with two value heads per key head, fed in two
// batches so that the carried conv and recurrent states are exercised.
func TestDeltaRuleMatchesDefinition(t *testing.T) {
	cfg := DeltaNetConfig{ConvKernel: 4, HeadDim: 8, KHeads: 2, VHeads: 4, Inner: 32}
	rng := rand.New(rand.NewPCG(1, 2))
	rnd := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		return x
	}
	const n = 7
	conv, dim := cfg.convDim(), cfg.HeadDim
	convW := rnd(conv * cfg.ConvKernel)
	kernel, err := tensor.NewCausalConv(convW, cfg.ConvKernel, conv)
	if err != nil {
		t.Fatal(err)
	}
	mixed, beta, decay := rnd(n*conv), make([]float32, n*cfg.VHeads), make([]float32, n*cfg.VHeads)
	for i := range beta {
		beta[i] = float32(rng.Float64())
		decay[i] = -float32(rng.Float64())
	}

	// Ours, the backend operations deltaNet.forward runs, in batches of 3 and 4 tokens.
	pool := tensor.NewPool(2)
	defer pool.Close()
	be := cpu.New(cpu.Options{Pool: pool})
	upload := func(v []float32, cols int) backend.Tensor { return deviceFloats(t, be, v, cols) }
	w := upload(kernel.Kernel(), conv)
	convState := upload(make([]float32, cfg.convState()), cfg.convState())
	heads := upload(make([]float32, cfg.stateSize()-cfg.convState()), cfg.stateSize()-cfg.convState())
	got := make([]float32, n*cfg.Inner)
	for _, r := range [][2]int{{0, 3}, {3, n}} {
		t0, t1 := r[0], r[1]
		x := upload(mixed[t0*conv:t1*conv], conv)
		qkv := upload(make([]float32, (t1-t0)*conv), conv)
		o := upload(make([]float32, (t1-t0)*cfg.Inner), cfg.Inner)
		err := deltaOps(be, cfg, o, qkv, x, convState, w, upload(decay[t0*cfg.VHeads:t1*cfg.VHeads], cfg.VHeads),
			upload(beta[t0*cfg.VHeads:t1*cfg.VHeads], cfg.VHeads), heads)
		if err = errors.Join(err, be.Get(float32Bytes(got[t0*cfg.Inner:t1*cfg.Inner]), o)); err != nil {
			t.Fatal(err)
		}
	}

	// The definition.
	x := func(p, ch int) float64 {
		if p < 0 {
			return 0
		}
		return float64(mixed[p*conv+ch])
	}
	feat := make([][]float64, n) // conv + SiLU output
	for p := range n {
		feat[p] = make([]float64, conv)
		for ch := range conv {
			var s float64
			for i := range cfg.ConvKernel {
				s += x(p-cfg.ConvKernel+1+i, ch) * float64(convW[ch*cfg.ConvKernel+i])
			}
			feat[p][ch] = s / (1 + math.Exp(-s))
		}
	}
	unit := func(v []float64) []float64 {
		var ss float64
		for _, e := range v {
			ss += e * e
		}
		out := make([]float64, len(v))
		for i, e := range v {
			out[i] = e / math.Sqrt(ss)
		}
		return out
	}
	kd := cfg.keyDim()
	for h := range cfg.VHeads {
		kh := h % cfg.KHeads
		S := make([][]float64, dim) // S[i][j]: key dimension i, value dimension j
		for i := range S {
			S[i] = make([]float64, dim)
		}
		for p := range n {
			q := unit(feat[p][kh*dim : (kh+1)*dim])
			k := unit(feat[p][kd+kh*dim : kd+(kh+1)*dim])
			v := feat[p][2*kd+h*dim : 2*kd+(h+1)*dim]
			g, b := math.Exp(float64(decay[p*cfg.VHeads+h])), float64(beta[p*cfg.VHeads+h])
			for i := range dim {
				for j := range dim {
					S[i][j] *= g
				}
			}
			for j := range dim {
				var sk float64
				for i := range dim {
					sk += S[i][j] * k[i]
				}
				dj := b * (v[j] - sk)
				for i := range dim {
					S[i][j] += k[i] * dj
				}
			}
			for j := range dim {
				var o float64
				for i := range dim {
					o += S[i][j] * q[i]
				}
				o /= math.Sqrt(float64(dim))
				if w := got[(p*cfg.VHeads+h)*dim+j]; math.Abs(float64(w)-o) > 1e-5 {
					t.Fatalf("head %d token %d output %d: %g, the definition gives %g", h, p, j, w, o)
				}
			}
		}
	}
}

// TestQwen35BadMetadata checks that metadata the forward pass cannot honour is refused
// with an error naming what is wrong.
func TestQwen35BadMetadata(t *testing.T) {
	for _, tc := range []struct {
		key   string
		value gguf.Value
		want  string
	}{
		{"{arch}.ssm.inner_size", gguf.NewValue(uint32(100)), "inner size"},
		{"{arch}.ssm.time_step_rank", gguf.NewValue(uint32(3)), "value heads"},
		{"{arch}.rope.dimension_sections", gguf.NewArray([]int32{1, 1, 2, 0}), "fourth section"},
	} {
		path := rewriteModel(t, qwen35Model, modelEdit{set: map[string]gguf.Value{tc.key: tc.value}})
		if err := configError(t, path); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s = %v: error %v, want one about %q", tc.key, tc.value, err, tc.want)
		}
	}
}

// BenchmarkDeltaRule times one Gated DeltaNet layer's convolution and delta rule at
// Qwen3.5-35B-A3B's sizes, for a decode step and a 128-token prompt.
func BenchmarkDeltaRule(b *testing.B) {
	cfg := DeltaNetConfig{ConvKernel: 4, HeadDim: 128, KHeads: 16, VHeads: 32, Inner: 4096}
	pool := tensor.NewPool(2)
	defer pool.Close()
	be := cpu.New(cpu.Options{Pool: pool})
	conv := cfg.convDim()
	for _, n := range []int{1, 128} {
		b.Run(fmt.Sprintf("tokens=%d", n), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			mixed := make([]float32, n*conv)
			for i := range mixed {
				mixed[i] = float32(rng.NormFloat64())
			}
			x, qkv := deviceFloats(b, be, mixed, conv), deviceFloats(b, be, make([]float32, n*conv), conv)
			o := deviceFloats(b, be, make([]float32, n*cfg.Inner), cfg.Inner)
			beta, decay := deviceFloats(b, be, make([]float32, n*cfg.VHeads), cfg.VHeads), deviceFloats(b, be, make([]float32, n*cfg.VHeads), cfg.VHeads)
			w := deviceFloats(b, be, make([]float32, cfg.ConvKernel*conv), conv)
			convState := deviceFloats(b, be, make([]float32, cfg.convState()), cfg.convState())
			heads := deviceFloats(b, be, make([]float32, cfg.stateSize()-cfg.convState()), cfg.stateSize()-cfg.convState())
			for b.Loop() {
				if err := deltaOps(be, cfg, o, qkv, x, convState, w, decay, beta, heads); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// FuzzQwen35Metadata gives the qwen35moe fixture arbitrary Gated DeltaNet and layer-pattern
// metadata: a mismatch with the tensors must be refused with an error, never a panic.
func FuzzQwen35Metadata(f *testing.F) {
	f.Add(uint32(4), uint32(32), uint32(2), uint32(4), uint32(128), uint32(4))
	f.Add(uint32(4), uint32(32), uint32(2), uint32(4), uint32(128), uint32(2))
	f.Add(uint32(0), uint32(0), uint32(0), uint32(0), uint32(0), uint32(0))
	f.Add(uint32(1), uint32(64), uint32(4), uint32(2), uint32(128), uint32(1))
	fuzzDeltaNetMetadata(f, qwen35Model)
}

// FuzzQwen3NextMetadata is FuzzQwen35Metadata for the qwen3next model, whose value heads are
// grouped and whose beta and alpha come from one ssm_ba projection.
func FuzzQwen3NextMetadata(f *testing.F) {
	f.Add(uint32(4), uint32(16), uint32(2), uint32(6), uint32(96), uint32(4))
	f.Add(uint32(4), uint32(16), uint32(3), uint32(6), uint32(96), uint32(4))
	f.Add(uint32(4), uint32(16), uint32(6), uint32(6), uint32(96), uint32(2))
	f.Add(uint32(4), uint32(32), uint32(1), uint32(3), uint32(96), uint32(4))
	fuzzDeltaNetMetadata(f, synthModel("qwen3next"))
}

func fuzzDeltaNetMetadata(f *testing.F, path string) {
	orig := readFuzzSource(f, path)
	keys := []string{"ssm.conv_kernel", "ssm.state_size", "ssm.group_count", "ssm.time_step_rank", "ssm.inner_size", "full_attention_interval"}
	f.Fuzz(func(t *testing.T, conv, state, groups, rank, inner, interval uint32) {
		set := map[string]uint32{}
		for i, v := range []uint32{conv, state, groups, rank, inner, interval} {
			set[keys[i]] = v
		}
		loadAndRun(t, orig, set)
	})
}
