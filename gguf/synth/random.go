package synth

import (
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"

	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/tensor"
)

// RandomOptions control WriteRandom.
type RandomOptions struct {
	Seed uint64
	// Workers generate and quantize chunks in parallel (0: GOMAXPROCS). The output does not
	// depend on it.
	Workers int
	// Progress, if set, is called after each tensor with the bytes of tensor data written
	// so far and in total.
	Progress func(done, total int64)
}

// chunkElems is about how many values one chunk holds. Chunks are whole rows, sized from
// the tensor's shape alone, and each has its own random stream, so the bytes depend only
// on the seed and never on how many workers made them.
const chunkElems = 1 << 18

// WriteRandom streams the model to w with random weights at a scale that keeps activations
// O(1), quantized with moerun's own quantizers: norms 1 + 0.1·N(0,1), weights
// N(0, gain/√fan_in) with fan_in the row length (gain 2 for routers, for a clear top-k, 3
// for the output head, 1 otherwise), embeddings N(0,1), biases N(0, 0.02²). The same seed
// gives the same bytes. Nothing is held in memory beyond a few chunks per worker.
func (m *Model) WriteRandom(w io.Writer, opts RandomOptions) error {
	if err := m.CheckRandom(); err != nil {
		return err
	}
	wr, err := gguf.NewWriter(w, m.Metadata, m.Tensors)
	if err != nil {
		return err
	}
	workers := opts.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	results := make(chan chan chunkResult, 2*workers)
	done := make(chan struct{})
	defer close(done)
	go m.dispatch(opts.Seed, results, done, workers)

	var total, written int64
	for _, t := range wr.Layout().Tensors {
		total += t.Size
	}
	for i, t := range wr.Layout().Tensors { // the layout keeps m.Tensors' order
		r := &chunkReader{results: results, left: chunkCount(m.Tensors[i])}
		if err := wr.WriteTensor(t.Name, r); err != nil {
			return err
		}
		written += t.Size
		if opts.Progress != nil {
			opts.Progress(written, total)
		}
	}
	return wr.Close()
}

// CheckRandom reports whether WriteRandom can write the model: an error names the first type
// moerun has no quantizer for yet.
func (m *Model) CheckRandom() error {
	seen := map[tensor.Type]bool{}
	for _, t := range m.Tensors {
		if seen[t.Type] {
			continue
		}
		seen[t.Type] = true
		tr, err := tensor.TraitsOf(t.Type)
		if err == nil && tr.FromFloat == nil {
			err = fmt.Errorf("no quantizer for %s", t.Type)
		}
		if err != nil {
			return fmt.Errorf("cannot write random %s weights (first needed by %s): %w; choose another mix", t.Type, t.Name, err)
		}
	}
	return nil
}

// chunkJob is a run of whole rows of one tensor.
type chunkJob struct {
	spec       gguf.TensorSpec
	init       initRule
	rows, from int // rows in this chunk, first row
	seed       [2]uint64
}

type chunkResult struct {
	data []byte
	err  error
}

// chunkRows is how many rows a chunk of the tensor holds, and how many rows it has.
func chunkRows(t gguf.TensorSpec) (per, rows int) {
	rows = 1
	for _, d := range t.Shape[1:] {
		rows *= int(d)
	}
	return max(1, chunkElems/int(t.Shape[0])), rows
}

func chunkCount(t gguf.TensorSpec) int {
	per, rows := chunkRows(t)
	return (rows + per - 1) / per
}

// dispatch generates every tensor's chunks on workers goroutines and hands their results
// over in order; the results channel's capacity bounds how far generation runs ahead of
// writing.
func (m *Model) dispatch(seed uint64, results chan<- chan chunkResult, done <-chan struct{}, workers int) {
	sem := make(chan struct{}, workers)
	for _, t := range m.Tensors {
		h := fnv.New64a()
		h.Write([]byte(t.Name))
		stream := h.Sum64()
		rule := initFor(&m.Preset.Config, t)
		per, rows := chunkRows(t)
		for from, k := 0, uint64(0); from < rows; from, k = from+per, k+1 {
			j := chunkJob{spec: t, init: rule, rows: min(per, rows-from), from: from,
				seed: [2]uint64{seed, stream ^ (k * 0x9E3779B97F4A7C15)}}
			out := make(chan chunkResult, 1)
			select {
			case results <- out:
			case <-done:
				return
			}
			sem <- struct{}{}
			go func() {
				defer func() { <-sem }()
				data, err := j.generate()
				out <- chunkResult{data, err}
			}()
		}
	}
}

// chunkReader reads one tensor's chunks in order.
type chunkReader struct {
	results <-chan chan chunkResult
	left    int
	buf     []byte
}

func (r *chunkReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.left == 0 {
			return 0, io.EOF
		}
		res := <-<-r.results
		if res.err != nil {
			return 0, res.err
		}
		r.buf = res.data
		r.left--
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

func (j *chunkJob) generate() ([]byte, error) {
	ne0 := int(j.spec.Shape[0])
	vals := make([]float32, j.rows*ne0)
	j.init.fill(vals, rand.New(rand.NewPCG(j.seed[0], j.seed[1])), j.from*ne0)
	rowBytes, err := j.spec.Type.RowBytes(int64(ne0))
	if err != nil {
		return nil, err
	}
	out := make([]byte, int64(j.rows)*rowBytes)
	for r := range j.rows {
		if err := tensor.Quantize(j.spec.Type, vals[r*ne0:(r+1)*ne0], out[int64(r)*rowBytes:int64(r+1)*rowBytes]); err != nil {
			return nil, fmt.Errorf("tensor %s: %w", j.spec.Name, err)
		}
	}
	return out, nil
}

// initRule is how a tensor's values are drawn.
type initRule struct {
	mean, std float64
	negExp    bool      // −exp(std·N(0,1)): a decay rate that keeps the recurrence stable
	fixed     []float32 // exact values (rope_freqs)
}

func (r initRule) fill(vals []float32, rng *rand.Rand, offset int) {
	if r.fixed != nil {
		copy(vals, r.fixed[offset:])
		return
	}
	for i := range vals {
		x := rng.NormFloat64()
		if r.negExp {
			vals[i] = float32(-math.Exp(r.std * x))
			continue
		}
		vals[i] = float32(r.mean + r.std*x)
	}
}

func initFor(c *Config, t gguf.TensorSpec) initRule {
	name := t.Name
	fanIn := float64(t.Shape[0])
	scaled := func(gain float64) initRule { return initRule{std: gain / math.Sqrt(fanIn)} }
	switch {
	case name == "rope_freqs.weight" && c.Llama3Rope != nil:
		return initRule{fixed: llama3RopeFactors(c)}
	case strings.HasSuffix(name, "norm.weight"):
		return initRule{mean: 1, std: 0.1}
	case strings.HasSuffix(name, ".ssm_a"):
		return initRule{negExp: true, std: 0.5}
	case strings.HasSuffix(name, ".bias"):
		return initRule{std: 0.02}
	case strings.HasSuffix(name, "ffn_gate_inp.weight"):
		return scaled(2)
	case name == "output.weight" || strings.HasSuffix(name, "shared_head_head.weight"):
		return scaled(3)
	case name == "token_embd.weight" || strings.HasSuffix(name, "embed_tokens.weight") ||
		strings.HasSuffix(name, "attn_sinks.weight"):
		return initRule{std: 1}
	}
	return scaled(1)
}
