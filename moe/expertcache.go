package moe

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/tensor"
)

// The expert cache (issue 38) keeps, for each MoE layer whose experts are in RAM and whose
// attention and router are on a GPU (-ot exps=CPU, --n-cpu-moe), a few of the layer's
// experts in slots on that GPU: the ones its routing used most lately, by a usage count
// that decays every pass. The GPU computes the slots routed to cached experts, the host
// the rest, as for a layer the plan splits by expert (expertShare), so the output is the
// same bit for bit whatever the cache holds. Slots are refilled between passes, never
// within one: at the start of a pass, a few experts whose count has overtaken a cached
// one's are copied in from host memory (Stager.Stage, through pinned memory on CUDA), and
// the two tables that send each expert to its device are rewritten.

// ExpertCacheOptions configure the expert cache.
type ExpertCacheOptions struct {
	// Slots is how many experts of each layer the GPU holds.
	Slots int
	// Swaps is the most experts of a layer refilled between two passes (0: the default),
	// which bounds the bytes a step waits for; empty slots fill without this bound.
	Swaps int
	// Decay multiplies each usage count once a pass (0: the default).
	Decay float64
}

// Defaults of ExpertCacheOptions.
const (
	DefaultExpertCacheSwaps = 2
	DefaultExpertCacheDecay = 0.99
	// cacheMargin is how much higher than a cached expert's count an uncached expert's
	// must be to take its slot: an expert as used as a cached one is not worth its copy,
	// and two experts of about equal use would otherwise swap back and forth.
	cacheMargin = 1.25
)

// ExpertCacheStats count what the expert cache did since it was enabled.
type ExpertCacheStats struct {
	Layers, Slots int   // layers cached and slots per layer
	SlotBytes     int64 // the GPU memory the slots take, all layers
	Hits, Misses  uint64
	Swaps         uint64 // experts copied into a slot
	BytesMoved    int64  // their bytes
}

// HitRate is the share of routed slots the GPU computed.
func (s ExpertCacheStats) HitRate() float64 {
	if s.Hits+s.Misses == 0 {
		return 0
	}
	return float64(s.Hits) / float64(s.Hits+s.Misses)
}

// expertCache is the model's cache: its layers and counters.
type expertCache struct {
	opts    ExpertCacheOptions
	layers  []*cachedLayer
	mu      sync.Mutex // guards stats, which metrics read while passes run
	stats   ExpertCacheStats
	hostIDs []int32
}

// cachedLayer is one layer's slots.
type cachedLayer struct {
	ffn    *moeFFN
	gpu    backend.Backend // the router's, which holds the slots
	host   backend.Backend // the one holding the layer's stacks
	stager backend.Stager
	stacks [3]cachedStack // gate, up, down
	biases [3]cachedBias  // gpt-oss's, where the model has them
	slotOf []int32        // per expert: its slot, -1 (the GPU share's table)
	hostOf []int32        // per expert: itself where the host computes it, else -1 (the host share's)
	tables [2]value       // slotOf and hostOf on their devices
	inSlot []int          // per slot: its expert, -1 while empty
	count  []float64      // per expert: the decayed number of slots routed to it
}

// cachedStack is one stack's slots on the GPU and the host's whole stack they copy from.
type cachedStack struct {
	buf  backend.Buffer
	w    backend.Weight
	host []byte // the stack in host memory, all experts
	size int    // one expert's bytes
}

// cachedBias is one expert bias's rows for the slots, and the host's rows.
type cachedBias struct {
	p    param
	host []float32
	cols int
}

// EnableExpertCache sets up the expert cache on the layers that can use it: MoE layers whose
// experts the plan keeps whole in host memory while their router runs on a GPU that can
// stage weights of their type. It fails where no layer qualifies or the GPU lacks the
// memory.
func (m *Model) EnableExpertCache(o ExpertCacheOptions) error {
	if m.cache != nil {
		return errors.New("the expert cache is enabled already")
	}
	e := m.Config.Router.Experts
	if o.Swaps == 0 {
		o.Swaps = DefaultExpertCacheSwaps
	}
	if o.Decay == 0 {
		o.Decay = DefaultExpertCacheDecay
	}
	switch {
	case o.Slots <= 0 || o.Slots >= e:
		return fmt.Errorf("expert cache of %d slots: want 1 to %d (the model's layers have %d experts)", o.Slots, e-1, e)
	case o.Swaps < 0:
		return fmt.Errorf("expert cache: %d swaps a pass", o.Swaps)
	case o.Decay <= 0 || o.Decay > 1:
		return fmt.Errorf("expert cache: decay %g, want (0, 1]", o.Decay)
	}
	cache := &expertCache{opts: o}
	var err error
	for il := range m.layers {
		f, ok := m.layers[il].ffn.(*moeFFN)
		if !ok || !m.cacheable(f) {
			continue
		}
		var l *cachedLayer
		if l, err = m.cacheLayer(f, o.Slots); err != nil {
			err = fmt.Errorf("expert cache of layer %d: %w", il, err)
			break
		}
		cache.layers = append(cache.layers, l)
		for _, s := range l.stacks {
			cache.stats.SlotBytes += s.buf.Size()
		}
	}
	if err == nil && len(cache.layers) == 0 {
		err = errors.New("the expert cache serves MoE layers whose experts are in RAM and whose attention is on a GPU (-ot exps=CPU, --n-cpu-moe); this placement has none")
	}
	if err != nil {
		return errors.Join(err, cache.free())
	}
	cache.stats.Layers, cache.stats.Slots = len(cache.layers), o.Slots
	for _, l := range cache.layers {
		l.ffn.cache = l
	}
	m.cache = cache
	return nil
}

// cacheable reports whether a layer's experts are whole in host memory (their bytes
// there, views or the host store's copies) while its router is on another device that
// stages their types into its own memory.
func (m *Model) cacheable(f *moeFFN) bool {
	if len(f.experts) != 1 || f.router.dev == f.experts[0].gate.dev {
		return false
	}
	st, ok := f.router.on.(backend.Stager)
	s := f.experts[0]
	return ok && st.StagesInto(s.gate.w.Type()) && st.StagesInto(s.up.w.Type()) && st.StagesInto(s.down.w.Type()) &&
		s.gate.host != nil && s.up.host != nil && s.down.host != nil
}

// cacheLayer allocates a layer's slots and tables on its router's GPU, all slots empty,
// and makes the layer's experts two shares: the slots, then the host's stacks.
func (m *Model) cacheLayer(f *moeFFN, slots int) (*cachedLayer, error) {
	e := m.Config.Router.Experts
	host := f.experts[0]
	l := &cachedLayer{ffn: f, gpu: f.router.on, host: host.gate.on, stager: f.router.on.(backend.Stager), slotOf: make([]int32, e), hostOf: make([]int32, e),
		inSlot: make([]int, slots), count: make([]float64, e)}
	for i := range l.slotOf {
		l.slotOf[i], l.hostOf[i] = -1, int32(i)
	}
	for i := range l.inSlot {
		l.inSlot[i] = -1
	}
	var slotStacks [3]weight // gate, up, down
	var slotBiases [3]param
	for i, w := range []weight{host.gate, host.up, host.down} {
		s := &l.stacks[i]
		s.host, s.size = w.host, len(w.host)/e
		var err error
		if s.buf, err = l.gpu.Alloc(int64(slots * s.size)); err != nil {
			return l, errors.Join(err, l.free())
		}
		// The slots' weight computes on buf; data only gives its size (StagesInto), and the
		// empty spans copy nothing yet.
		shape := []int64{int64(w.w.Cols()), int64(w.w.Rows()), int64(slots)}
		sw, err := l.stager.Stage(s.buf, 0, w.w.Name(), w.w.Type(), shape, s.host[:slots*s.size], [][2]int64{})
		if err != nil {
			return l, errors.Join(err, l.free())
		}
		s.w = sw
		slotStacks[i] = weight{w: sw, on: l.gpu, dev: f.router.dev}
	}
	for i, p := range []param{host.gateBias, host.upBias, host.downBias} {
		if !p.valid() {
			continue
		}
		b := &l.biases[i]
		b.cols = p.t.Cols
		b.host = make([]float32, p.t.Elements())
		be := m.backends[p.dev]
		err := be.Get(float32Bytes(b.host), p.t)
		if err == nil {
			err = be.Synchronize()
		}
		if err == nil {
			b.p, err = m.allocParam(f.router.dev, b.cols, slots)
		}
		if err != nil {
			return l, errors.Join(err, l.free())
		}
		slotBiases[i] = b.p
	}
	for i, table := range [][]int32{l.slotOf, l.hostOf} {
		t, err := newTable([]backend.Backend{l.gpu, l.host}[i], table)
		if err != nil {
			return l, errors.Join(err, l.free())
		}
		l.tables[i] = t
	}
	host.table = l.tables[1]
	f.experts = []expertShare{{gate: slotStacks[0], up: slotStacks[1], down: slotStacks[2],
		gateBias: slotBiases[0], upBias: slotBiases[1], downBias: slotBiases[2], table: l.tables[0]}, host}
	return l, nil
}

// allocParam is a zeroed rows×cols float32 tensor of its own on device dev.
func (m *Model) allocParam(dev, cols, rows int) (param, error) {
	buf, err := m.backends[dev].Alloc(int64(4 * cols * rows))
	if err != nil {
		return param{}, err
	}
	t, err := backend.NewTensor(buf, 0, tensor.F32, cols, rows)
	return param{t: t, dev: dev}, err
}

// free releases what the layer allocated on the GPU (the host's tables and weights are the
// model's).
func (l *cachedLayer) free() error {
	var errs []error
	for _, s := range l.stacks {
		if s.buf != nil {
			errs = append(errs, l.gpu.Free(s.buf))
		}
	}
	for _, b := range l.biases {
		if b.p.valid() {
			errs = append(errs, l.gpu.Free(b.p.t.Buf))
		}
	}
	for i, t := range l.tables {
		if t.Valid() {
			errs = append(errs, []backend.Backend{l.gpu, l.host}[i].Free(t.Buf))
		}
	}
	return errors.Join(errs...)
}

func (c *expertCache) free() error {
	var errs []error
	for _, l := range c.layers {
		errs = append(errs, l.free())
	}
	return errors.Join(errs...)
}

// ExpertCacheStats is what the expert cache did so far (the zero value without one).
func (m *Model) ExpertCacheStats() ExpertCacheStats {
	if m.cache == nil {
		return ExpertCacheStats{}
	}
	m.cache.mu.Lock()
	defer m.cache.mu.Unlock()
	return m.cache.stats
}

// count adds a pass's routing of the layer (k ids per token, global) to its usage counts
// and the cache's hits and misses.
func (c *expertCache) count(l *cachedLayer, ids []int32) {
	var hits, misses uint64
	for _, id := range ids {
		if id < 0 || int(id) >= len(l.count) {
			continue
		}
		l.count[id]++
		if l.slotOf[id] >= 0 {
			hits++
		} else {
			misses++
		}
	}
	c.mu.Lock()
	c.stats.Hits += hits
	c.stats.Misses += misses
	c.mu.Unlock()
}

// refill runs before a pass: each layer's counts decay, and the most-used uncached experts
// take the slots of cached ones they overtook by cacheMargin (empty slots first, without
// the swap bound), at most opts.Swaps a layer. The copies are queued on the GPU's stream,
// ordered before the pass's operations.
func (c *expertCache) refill() error {
	var swaps uint64
	var moved int64
	for _, l := range c.layers {
		n, bytes, err := l.refill(c.opts)
		swaps, moved = swaps+uint64(n), moved+bytes
		if err != nil {
			return err
		}
	}
	c.mu.Lock()
	c.stats.Swaps += swaps
	c.stats.BytesMoved += moved
	c.mu.Unlock()
	return nil
}

func (l *cachedLayer) refill(o ExpertCacheOptions) (swaps int, moved int64, err error) {
	var want []int // uncached experts with a use, most used first
	for e, n := range l.count {
		if l.slotOf[e] < 0 && n > 0 {
			want = append(want, e)
		}
	}
	slices.SortStableFunc(want, func(a, b int) int { return cmp.Compare(l.count[b], l.count[a]) })
	victims := make([]int, len(l.inSlot)) // slots, empty then least used first
	for i := range victims {
		victims[i] = i
	}
	slotCount := func(s int) float64 {
		if l.inSlot[s] < 0 {
			return -1
		}
		return l.count[l.inSlot[s]]
	}
	slices.SortStableFunc(victims, func(a, b int) int { return cmp.Compare(slotCount(a), slotCount(b)) })
	for i, e := range want {
		if i >= len(victims) {
			break
		}
		s := victims[i]
		if old := l.inSlot[s]; old >= 0 && (swaps >= o.Swaps || l.count[e] <= cacheMargin*l.count[old]) {
			break
		}
		n, err := l.fill(s, e)
		moved += n
		if err != nil {
			return swaps, moved, err
		}
		if l.inSlot[s] >= 0 {
			swaps++
		}
		l.place(s, e)
	}
	for e := range l.count {
		l.count[e] *= o.Decay
	}
	if moved > 0 {
		err = l.writeTables()
	}
	return swaps, moved, err
}

// fill copies expert e's slices of the stacks (and its bias rows) into slot s.
func (l *cachedLayer) fill(s, e int) (int64, error) {
	var moved int64
	for _, st := range l.stacks {
		shape := []int64{int64(st.w.Cols()), int64(st.w.Rows()), 1}
		if _, err := l.stager.Stage(st.buf, int64(s*st.size), st.w.Name(), st.w.Type(), shape, st.host[e*st.size:(e+1)*st.size], nil); err != nil {
			return moved, err
		}
		moved += int64(st.size)
	}
	for _, b := range l.biases {
		if !b.p.valid() {
			continue
		}
		if err := l.gpu.Set(b.p.t.Slice(s, s+1), float32Bytes(b.host[e*b.cols:(e+1)*b.cols])); err != nil {
			return moved, err
		}
		moved += int64(4 * b.cols)
	}
	return moved, nil
}

// place records expert e in slot s, its former expert back on the host.
func (l *cachedLayer) place(s, e int) {
	if old := l.inSlot[s]; old >= 0 {
		l.slotOf[old], l.hostOf[old] = -1, int32(old)
	}
	l.inSlot[s] = e
	l.slotOf[e], l.hostOf[e] = int32(s), -1
}

// writeTables copies both tables to their devices.
func (l *cachedLayer) writeTables() error {
	for i, table := range [][]int32{l.slotOf, l.hostOf} {
		if err := []backend.Backend{l.gpu, l.host}[i].Set(l.tables[i], int32Bytes(table)); err != nil {
			return err
		}
	}
	return nil
}
