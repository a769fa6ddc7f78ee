// Package moe runs Mixture-of-Experts language models as llama.cpp does: the architectures
// (one file each: qwen3moe.go, deepseek2.go, dsa.go, qwen2moe.go, glm4moe.go, gptoss.go,
// qwen35moe.go, qwen3next.go, minimaxm2.go) built from shared layers (grouped-query, gated and multi-head latent
// attention, Gated DeltaNet linear attention, dense and MoE feed-forward networks), the KV
// cache and recurrent state, the router with smart expert reduction, routing statistics, llama.cpp's sampler and the
// generation loop. Weights live on the backends a placement plan assigns them to, and every
// weight operation is asked of the backend that holds the weight.
package moe

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/moerun/moerun/arch"
	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/internal/mmap"
	"github.com/moerun/moerun/placement"
	"github.com/moerun/moerun/tensor"
)

// Model is a loaded MoE model: its configuration and its weights, each held by the backend
// the placement plan chose. A Model is read-only after Load; each sequence being generated
// has its own Context (KV cache and working memory).
type Model struct {
	Name   string
	Config Config

	embd       weight
	outputNorm param
	output     weight
	layers     []layer
	weights    *weightSource
	offload    *opOffload   // nil without op offload
	cache      *expertCache // nil without the expert cache

	backends []backend.Backend // the devices the plan uses, by index
	names    []string          // their names
	kvDev    []int             // by layer: the device of its KV cache (or recurrent state)
}

// layer is one transformer block: attention, then a dense or MoE feed-forward network,
// each after its RMS norm and each added to the residual stream.
type layer struct {
	attnNorm param
	attn     attention
	ffnNorm  param
	ffn      feedForward
}

// attention computes a block's attention output (after the output projection) for the
// tokens of a pass, each through its own sequence's KV cache (or recurrent state).
type attention interface {
	// cacheShape is what one position of the layer's KV cache holds.
	cacheShape() cacheShape
	forward(c *pass, il int, in value) value
}

// feedForward computes a block's feed-forward output for the tokens of in.
type feedForward interface {
	forward(c *pass, il int, in value) value
}

// weight is a tensor and the backend that holds it: every operation on the weight is asked
// of that backend (device index dev of the model's).
type weight struct {
	w   backend.Weight
	on  backend.Backend
	dev int
	// host is the weight's bytes where it may be offloaded (opOffload): it is in the
	// host's memory and not in the CPU's repacked layout. Nil otherwise.
	host []byte
}

// ModelError is a problem with the model file (its metadata or tensors) rather than with
// moerun: a missing key, an unsupported architecture, a tensor of the wrong shape.
type ModelError struct {
	Model string
	Err   error
}

func (e *ModelError) Error() string { return e.Model + ": " + e.Err.Error() }
func (e *ModelError) Unwrap() error { return e.Err }

// Load binds a model's tensors to the backends the plan assigns them to (by device name)
// and builds its layers. The file must stay open while the model is used: CPU-held weights
// are views of its mapping, or, where the plan's load mode does not map the file (-lm none,
// mlock, dio), copies read into memory that Close releases.
func Load(f *gguf.File, plan *placement.Plan, backends []backend.Backend) (*Model, error) {
	name := plan.Model.Name
	pm := placement.Model{Name: name, Metadata: f.Metadata, Tensors: f.Tensors}
	cfg, arch, err := readConfig(pm)
	if err != nil {
		return nil, &ModelError{Model: name, Err: err}
	}
	src, err := newWeightSource(f, plan, backends)
	if err != nil {
		return nil, err
	}
	b := newBinder(f, plan, backends, src, cfg.Layers, cfg.Layers+cfg.NextN)
	b.experts = cfg.Router.Experts
	m := &Model{Name: name, Config: *cfg, layers: make([]layer, cfg.Layers), weights: src, backends: backends}
	for _, be := range backends {
		m.names = append(m.names, be.Device().Name)
	}
	if m.kvDev, err = b.cacheDevices(plan, cfg.Layers); err != nil {
		return nil, errors.Join(&ModelError{Model: name, Err: err}, src.close())
	}
	if err := m.bind(b, arch); err != nil {
		return nil, errors.Join(&ModelError{Model: name, Err: err}, src.close())
	}
	if err := b.checkAllUsed(); err != nil {
		return nil, errors.Join(&ModelError{Model: name, Err: err}, src.close())
	}
	if m.offload, err = newOpOffload(plan, backends); err != nil {
		return nil, errors.Join(err, src.close())
	}
	if ec := plan.Settings.ExpertCache; ec.Slots > 0 {
		if err := m.EnableExpertCache(ExpertCacheOptions{Slots: ec.Slots, Swaps: ec.Swaps}); err != nil {
			return nil, errors.Join(&ModelError{Model: name, Err: fmt.Errorf("--expert-cache %s: %w", ec, err)}, m.Close())
		}
	}
	src.seal()
	return m, nil
}

// Close releases the memory the weights were read into where the load mode copies them
// (--no-mmap, --mlock, -dio), and op offload's staging memory. Contexts of the model must
// not be used afterwards; views into a mapped file need no release (the file's Close
// unmaps it).
func (m *Model) Close() error {
	var cache error
	if m.cache != nil {
		cache = m.cache.free()
	}
	return errors.Join(m.weights.close(), m.offload.close(m.backends), cache)
}

// LoadWarnings are what loading the weights met that the user should know, as llama.cpp
// warns: a lock in RAM refused (RLIMIT_MEMLOCK), a file system without direct I/O.
func (m *Model) LoadWarnings() []string { return m.weights.report().Warnings }

// CopiedWeights is how much memory the weights were read into (zero where the file is
// mapped), and how the kernel holds it: resident bytes and those in huge pages. The page
// use fails where the platform cannot tell.
func (m *Model) CopiedWeights() (int64, mmap.PageUse, error) {
	r := m.weights.report()
	return r.Copied, r.Pages, r.PagesErr
}

// NewExpertStats makes a routing-statistics recorder for the model's MoE layers.
func (m *Model) NewExpertStats() *ExpertStats {
	return NewExpertStats(len(m.layers), m.Config.Router.Experts, func(il int) bool {
		_, ok := m.layers[il].ffn.(*moeFFN)
		return ok
	})
}

// bind binds the tensors every architecture has, and lets the architecture bind each
// layer's.
func (m *Model) bind(b *binder, arch *architecture) error {
	c := &m.Config
	var err error
	if m.embd, err = b.matrix("token_embd.weight", c.Embd, c.Vocab); err != nil {
		return err
	}
	if m.outputNorm, err = b.param("output_norm.weight", c.Embd); err != nil {
		return err
	}
	if m.output, err = b.outputMatrix(c.Embd, c.Vocab); err != nil {
		return err
	}
	for il := range m.layers {
		l := &m.layers[il]
		if l.attnNorm, err = b.param(blk(il, "attn_norm.weight"), c.Embd); err != nil {
			return err
		}
		if l.ffnNorm, err = b.param(blk(il, arch.ffnNormName()), c.Embd); err != nil {
			return err
		}
		if l.attn, err = arch.attention(c, b, il); err != nil {
			return err
		}
		if l.ffn, err = arch.feedForward(c, b, il); err != nil {
			return err
		}
	}
	if arch.unrun != nil {
		return arch.unrun(c, b)
	}
	return nil
}

// blk names a tensor of block il.
func blk(il int, name string) string { return fmt.Sprintf("blk.%d.%s", il, name) }

// architecture is what an architecture's file provides.
type architecture struct {
	// yarnLogMul says the architecture reads rope.scaling.yarn_log_multiplier.
	yarnLogMul bool
	// config reads the architecture's own keys into c (after the shared ones).
	config func(c *Config, r *metaReader) error
	// attention and feedForward bind block il's tensors.
	attention   func(c *Config, b *binder, il int) (attention, error)
	feedForward func(c *Config, b *binder, il int) (feedForward, error)
	// ffnNorm names a block's norm before the feed-forward network, "ffn_norm.weight"
	// when empty (GLM-4.5 calls it post_attention_norm.weight).
	ffnNorm string
	// unrun, when set, checks the tensors of blocks past c.Layers that llama.cpp loads
	// but does not run (NextN/MTP blocks), after the blocks are bound.
	unrun func(c *Config, b *binder) error
}

func (a *architecture) ffnNormName() string {
	if a.ffnNorm == "" {
		return "ffn_norm.weight"
	}
	return a.ffnNorm
}

// architectures are the forward passes, keyed by the descriptor of the architecture each
// runs (arch.Arch.Runs says which have one).
var architectures = map[*arch.Arch]*architecture{
	arch.Qwen3MoE:   &qwen3moe,
	arch.DeepSeek2:  &deepseek2,
	arch.DeepSeek32: &deepseek32,
	arch.GLMDSA:     &glmDSA,
	arch.GPTOSS:     &gptOSS,
	arch.Qwen2MoE:   &qwen2moe,
	arch.GLM4MoE:    &glm4moe,
	arch.Qwen35MoE:  &qwen35moe,
	arch.Qwen3Next:  &qwen3next,
	arch.MiniMaxM2:  &minimaxM2,
}

func supportedArchs() string {
	names := make([]string, 0, len(architectures))
	for a := range architectures {
		names = append(names, a.Name)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// binder looks tensors up by name, checks their shapes and loads them on the backend the
// plan assigned them to.
type binder struct {
	f    *gguf.File
	src  *weightSource
	uses map[string]*placement.TensorUse // by name; the tied output copy is apart
	tied *placement.TensorUse
	// shares holds, by name, the plan's entries for a stack of experts it splits by
	// expert, one per share.
	shares   map[string][]*placement.TensorUse
	experts  int            // routed experts per MoE layer
	backends map[string]int // device name → index in devs
	devs     []backend.Backend
	used     map[string]bool
	layers   int // blocks the model runs
	blocks   int // and the NextN blocks after them
}

func newBinder(f *gguf.File, plan *placement.Plan, backends []backend.Backend, src *weightSource, layers, blocks int) *binder {
	b := &binder{f: f, src: src, uses: map[string]*placement.TensorUse{}, shares: map[string][]*placement.TensorUse{},
		backends: map[string]int{}, devs: backends, used: map[string]bool{}, layers: layers, blocks: blocks}
	for i, be := range backends {
		b.backends[be.Device().Name] = i
	}
	for i := range plan.Tensors {
		u := &plan.Tensors[i]
		switch {
		case u.Tied:
			b.tied = u
		case u.Experts != nil:
			b.shares[u.Name] = append(b.shares[u.Name], u)
		default:
			b.uses[u.Name] = u
		}
	}
	return b
}

// load loads tensor ti on the backend of the plan entry u.
func (b *binder) load(ti *gguf.TensorInfo, u *placement.TensorUse) (weight, error) {
	dev, err := b.device(ti.Name, u)
	if err != nil {
		return weight{}, err
	}
	be := b.devs[dev]
	w, data, err := b.src.load(be, ti, ti.Shape, u)
	if err != nil {
		return weight{}, err
	}
	wt := weight{w: w, on: be, dev: dev}
	if u.Storage != placement.StorageRepacked {
		wt.host = data
	}
	return wt, nil
}

// device is the index of the backend of the plan entry u for tensor name.
func (b *binder) device(name string, u *placement.TensorUse) (int, error) {
	if u == nil {
		return 0, fmt.Errorf("tensor %s is not in the placement plan", name)
	}
	dev, ok := b.backends[u.Device]
	if !ok {
		return 0, fmt.Errorf("the plan puts %s on %s, and there is no backend for that device (moerun computes on: %s)",
			name, u.Device, strings.Join(slices.Sorted(maps.Keys(b.backends)), ", "))
	}
	return dev, nil
}

// cacheDevices is the device of each layer's KV cache (or recurrent state), as the plan's
// layer map gives it.
func (b *binder) cacheDevices(plan *placement.Plan, layers int) ([]int, error) {
	devs := make([]int, layers)
	for _, l := range plan.Layers {
		if l.Index < 0 || l.Index >= layers {
			continue
		}
		if l.KVDevice == "" {
			return nil, fmt.Errorf("the plan gives layer %d no KV cache device", l.Index)
		}
		dev, ok := b.backends[l.KVDevice]
		if !ok {
			return nil, fmt.Errorf("the plan puts layer %d's KV cache on %s, and there is no backend for that device", l.Index, l.KVDevice)
		}
		devs[l.Index] = dev
	}
	return devs, nil
}

// lookup finds a tensor and checks its shape (GGUF order; trailing 1s do not count).
func (b *binder) lookup(name string, shape ...int) (*gguf.TensorInfo, error) {
	ti, ok := b.f.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("tensor %s is missing", name)
	}
	if !sameShape(ti.Shape, shape) {
		return nil, fmt.Errorf("tensor %s has shape %v, the metadata implies %v", name, ti.Shape, shape)
	}
	b.used[name] = true
	return ti, nil
}

func sameShape(got []int64, want []int) bool {
	n := len(got)
	for n > 1 && got[n-1] == 1 {
		n--
	}
	w := len(want)
	for w > 1 && want[w-1] == 1 {
		w--
	}
	if n != w {
		return false
	}
	for i := range n {
		if got[i] != int64(want[i]) {
			return false
		}
	}
	return true
}

// matrix binds a required matmul weight.
func (b *binder) matrix(name string, shape ...int) (weight, error) {
	ti, err := b.lookup(name, shape...)
	if err != nil {
		return weight{}, err
	}
	return b.load(ti, b.uses[name])
}

// has reports whether the file has a tensor.
func (b *binder) has(name string) bool {
	_, ok := b.f.Tensor(name)
	return ok
}

// outputMatrix binds output.weight, or token_embd.weight where the plan ties the output to
// the embedding (models without output.weight).
func (b *binder) outputMatrix(embd, vocab int) (weight, error) {
	if b.has("output.weight") {
		return b.matrix("output.weight", embd, vocab)
	}
	ti, err := b.lookup("token_embd.weight", embd, vocab)
	if err != nil {
		return weight{}, err
	}
	return b.load(ti, b.tied)
}

// vector reads a small tensor (norm weights, biases; of the given shape, usually 1-D) into
// host memory as float32: they are used by the host's element-wise ops.
func (b *binder) vector(name string, shape ...int) ([]float32, error) {
	ti, err := b.lookup(name, shape...)
	if err != nil {
		return nil, err
	}
	data, err := b.f.TensorData(ti)
	if err != nil {
		return nil, err
	}
	n := 1
	for _, d := range shape {
		n *= d
	}
	out := make([]float32, n)
	var derr error
	if err := mmap.Guard(func() { derr = tensor.Dequantize(ti.Type, data, out) }); err != nil {
		return nil, fmt.Errorf("tensor %s: %w", name, err)
	}
	if derr != nil {
		return nil, fmt.Errorf("tensor %s: %w", name, derr)
	}
	return out, nil
}

// param reads a small tensor (norm weights, biases) as float32 onto the device the plan
// gives it: rows of shape[0] elements (ne0), as many as the other dimensions make.
func (b *binder) param(name string, shape ...int) (param, error) {
	v, err := b.vector(name, shape...)
	if err != nil {
		return param{}, err
	}
	return b.upload(name, v, shape[0], len(v)/shape[0])
}

// upload puts rows×cols float32 values of tensor name on the device the plan gives it.
func (b *binder) upload(name string, v []float32, cols, rows int) (param, error) {
	dev, err := b.device(name, b.uses[name])
	if err != nil {
		return param{}, err
	}
	return b.uploadTo(name, dev, v, cols, rows)
}

// uploadTo puts rows×cols float32 values of tensor name on device dev.
func (b *binder) uploadTo(name string, dev int, v []float32, cols, rows int) (param, error) {
	be := b.devs[dev]
	buf, err := be.Alloc(int64(4 * len(v)))
	if err != nil {
		return param{}, fmt.Errorf("tensor %s: %w", name, err)
	}
	t, err := backend.NewTensor(buf, 0, tensor.F32, cols, rows)
	if err == nil {
		err = be.Set(t, float32Bytes(v))
	}
	if err != nil {
		return param{}, fmt.Errorf("tensor %s: %w", name, err)
	}
	return param{t: t, dev: dev}, nil
}

// optionalParam is param for a tensor the model may lack (the zero param then).
func (b *binder) optionalParam(name string, n int) (param, error) {
	if !b.has(name) {
		return param{}, nil
	}
	return b.param(name, n)
}

// checkAllUsed rejects a file with tensors the architecture does not know, as llama.cpp's
// loader does ("wrong number of tensors"): they usually mean a layout moerun would silently
// misread. The NextN/MTP blocks the metadata declares after the main layers are not run;
// their tensors are accepted (architectures that know the block's layout check it in
// unrun).
func (b *binder) checkAllUsed() error {
	var extra []string
	for _, ti := range b.f.Tensors {
		if b.used[ti.Name] {
			continue
		}
		if il, ok := gguf.LayerOf(ti.Name); ok && il >= b.layers && il < b.blocks {
			continue
		}
		extra = append(extra, ti.Name)
	}
	if len(extra) > 0 {
		more := ""
		if len(extra) > 5 {
			more = fmt.Sprintf(" and %d more", len(extra)-5)
			extra = extra[:5]
		}
		return fmt.Errorf("unexpected tensors for %s: %s%s", b.f.Metadata.Arch(), strings.Join(extra, ", "), more)
	}
	return nil
}
