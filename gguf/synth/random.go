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
	// ExpertLoad is how unevenly the routers spread tokens over the experts (the zero
	// value: as random weights do, almost uniformly).
	ExpertLoad ExpertLoad
}

// poolBlocks is how many quantized blocks a pool holds (16.7 M values for 256-value
// blocks): enough that a block repeats only by chance and far apart, few enough that the
// pools of a model take a second or two to make and tens of MB to hold.
const poolBlocks = 1 << 16

// chunkElems is about how many values one chunk holds. Chunks are whole rows, sized from
// the tensor's shape alone, and each has its own random stream, so the bytes depend only
// on the seed and never on how many workers made them.
const chunkElems = 1 << 18

// WriteRandom streams the model to w with random weights at a scale that keeps activations
// O(1): norms 1 + 0.1·N(0,1), weights N(0, gain/√fan_in) with fan_in the row length (gain 2
// for routers, for a clear top-k, 3 for the output head, 1 otherwise), embeddings N(0,1),
// biases N(0, 0.02²). Quantized blocks are moerun's quantizers' (llama-quantize's bytes)
// for their values. The values of a class of tensors (one type, one rule) that together
// hold more than poolBlocks blocks are not all drawn: such tensors pick each block at
// random from a pool of poolBlocks blocks of the class, quantized once, because fitting
// K-quant blocks runs at tens of MB/s per core and copying them at GB/s. The same seed
// gives the same bytes whatever the number of workers. Nothing is held in memory beyond
// the pools and a few chunks per worker.
func (m *Model) WriteRandom(w io.Writer, opts RandomOptions) error {
	return m.writeRandom(w, opts, poolBlocks)
}

// writeRandom is WriteRandom with pools of the given size (tests make them small).
func (m *Model) writeRandom(w io.Writer, opts RandomOptions, poolSize int) error {
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
	if err := m.CheckExpertLoad(opts.ExpertLoad); err != nil {
		return err
	}
	c := &m.Preset.Config
	rules := make([]initRule, len(m.Tensors))
	for i, t := range m.Tensors {
		rules[i] = initFor(c, t)
		if opts.ExpertLoad.Shape > 0 && strings.HasSuffix(t.Name, routerSuffix) {
			rules[i].rowScale = opts.ExpertLoad.routerScales(int(t.Shape[1]), c.ExpertsUsed, routerRNG(opts.Seed, t.Name))
			rules[i].rowLen = int(t.Shape[0])
		}
	}
	pools, err := m.makePools(rules, opts.Seed, poolSize, workers)
	if err != nil {
		return err
	}
	results, stop := produce(m.Tensors, rules, pools, opts.Seed, workers)
	defer stop()

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
	pool       *blockPool // set: the rows' blocks are picked from it, not drawn
	rows, from int        // rows in this chunk, first row
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

// produce makes the chunks of the tensors (pools[i] set: tensor i picks its blocks from
// it) on workers goroutines, each chunk with a random stream of its own derived from the
// seed, the tensor's name and the chunk's index. The results come in order, one per chunk,
// and chunkReaders read them tensor by tensor; the channel's capacity bounds how far
// generation runs ahead of reading. stop ends the generation early.
func produce(specs []gguf.TensorSpec, rules []initRule, pools []*blockPool, seed uint64, workers int) (results <-chan chan chunkResult, stop func()) {
	out := make(chan chan chunkResult, 2*workers)
	done := make(chan struct{})
	go func() {
		sem := make(chan struct{}, workers)
		for i, t := range specs {
			h := fnv.New64a()
			h.Write([]byte(t.Name))
			stream := h.Sum64()
			per, rows := chunkRows(t)
			for from, k := 0, uint64(0); from < rows; from, k = from+per, k+1 {
				j := chunkJob{spec: t, init: rules[i], pool: pools[i], rows: min(per, rows-from), from: from,
					seed: [2]uint64{seed, stream ^ (k * 0x9E3779B97F4A7C15)}}
				res := make(chan chunkResult, 1)
				select {
				case out <- res:
				case <-done:
					return
				}
				sem <- struct{}{}
				go func() {
					defer func() { <-sem }()
					data, err := j.generate()
					res <- chunkResult{data, err}
				}()
			}
		}
	}()
	return out, func() { close(done) }
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
	rowBytes, err := j.spec.Type.RowBytes(int64(ne0))
	if err != nil {
		return nil, err
	}
	out := make([]byte, int64(j.rows)*rowBytes)
	rng := rand.New(rand.NewPCG(j.seed[0], j.seed[1]))
	if j.pool != nil {
		j.pool.pick(out, rng)
		return out, nil
	}
	vals := make([]float32, j.rows*ne0)
	j.init.fill(vals, rng, j.from*ne0)
	for r := range j.rows {
		if err := tensor.Quantize(j.spec.Type, vals[r*ne0:(r+1)*ne0], out[int64(r)*rowBytes:int64(r+1)*rowBytes]); err != nil {
			return nil, fmt.Errorf("tensor %s: %w", j.spec.Name, err)
		}
	}
	return out, nil
}

// poolKey is a class of tensors whose blocks are alike: one type, one rule of drawing.
type poolKey struct {
	typ       tensor.Type
	mean, std float64
	negExp    bool
}

// poolKeyOf is t's class; ok is false for tensors that are never pooled: those of float
// types (whose values cost only drawing) and those with exact values.
func poolKeyOf(t gguf.TensorSpec, rule initRule) (key poolKey, ok bool) {
	if t.Type.BlockSize() == 1 || rule.fixed != nil || rule.rowScale != nil {
		return poolKey{}, false
	}
	return poolKey{typ: t.Type, mean: rule.mean, std: rule.std, negExp: rule.negExp}, true
}

// blockPool holds quantized blocks of one class for tensors to pick from.
type blockPool struct {
	blocks     []byte
	blockBytes int
}

// pick fills out with blocks of the pool chosen at random.
func (p *blockPool) pick(out []byte, rng *rand.Rand) {
	n := len(p.blocks) / p.blockBytes
	for at := 0; at < len(out); at += p.blockBytes {
		b := rng.IntN(n) * p.blockBytes
		copy(out[at:at+p.blockBytes], p.blocks[b:b+p.blockBytes])
	}
}

// makePools returns, for every tensor, the pool it picks its blocks from, or nil. Every
// class (see poolKeyOf) whose tensors together hold more than size blocks gets a pool of
// size blocks, made like a tensor of one-block rows named after its class, so that its
// bytes too depend only on the seed.
func (m *Model) makePools(rules []initRule, seed uint64, size, workers int) ([]*blockPool, error) {
	need := map[poolKey]int64{}
	for i, t := range m.Tensors {
		if key, ok := poolKeyOf(t, rules[i]); ok {
			n, err := t.Type.Bytes(t.Shape)
			if err != nil {
				return nil, fmt.Errorf("tensor %s: %w", t.Name, err)
			}
			need[key] += n / t.Type.BlockBytes()
		}
	}
	byKey := map[poolKey]*blockPool{}
	var (
		specs     []gguf.TensorSpec
		specRules []initRule
		made      []*blockPool
	)
	pools := make([]*blockPool, len(m.Tensors))
	for i, t := range m.Tensors { // in file order, so that the pools' order is the same every time
		key, ok := poolKeyOf(t, rules[i])
		if !ok || need[key] <= int64(size) {
			continue
		}
		if byKey[key] == nil {
			byKey[key] = &blockPool{blockBytes: int(t.Type.BlockBytes())}
			specs = append(specs, gguf.TensorSpec{
				Name:  fmt.Sprintf("pool of %s blocks, %+v", t.Type, key),
				Type:  t.Type,
				Shape: []int64{t.Type.BlockSize(), int64(size)},
			})
			specRules = append(specRules, rules[i])
			made = append(made, byKey[key])
		}
		pools[i] = byKey[key]
	}
	results, stop := produce(specs, specRules, make([]*blockPool, len(specs)), seed, workers)
	defer stop()
	for i, spec := range specs {
		data, err := io.ReadAll(&chunkReader{results: results, left: chunkCount(spec)})
		if err != nil {
			return nil, err
		}
		made[i].blocks = data
	}
	return pools, nil
}

// initRule is how a tensor's values are drawn.
type initRule struct {
	mean, std float64
	negExp    bool      // −exp(std·N(0,1)): a decay rate that keeps the recurrence stable
	fixed     []float32 // exact values (rope_freqs)
	// rowScale multiplies the values of each row of rowLen (a router's experts, see
	// ExpertLoad); nil: none.
	rowScale []float64
	rowLen   int
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
		v := r.mean + r.std*x
		if r.rowScale != nil {
			v *= r.rowScale[(offset+i)/r.rowLen]
		}
		vals[i] = float32(v)
	}
}

// routerSuffix ends the name of a MoE layer's router (not a shared expert's gate,
// ffn_gate_inp_shexp).
const routerSuffix = "ffn_gate_inp.weight"

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
	case strings.HasSuffix(name, routerSuffix):
		return scaled(2)
	case name == "output.weight" || strings.HasSuffix(name, "shared_head_head.weight"):
		return scaled(3)
	case name == "token_embd.weight" || strings.HasSuffix(name, "embed_tokens.weight") ||
		strings.HasSuffix(name, "attn_sinks.weight"):
		return initRule{std: 1}
	}
	return scaled(1)
}
