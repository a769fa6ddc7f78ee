package placement

import (
	"fmt"
	"slices"

	"github.com/moerun/moerun/gguf"
)

// layout is one complete placement for a config: what Plan reports, and what --fit measures
// while it searches.
type layout struct {
	cfg      config
	ctx      Context
	ngl      int   // effective layer count
	layerDev []int // device per layer index 0..nLayerAll (the last is the output layer)
	ovr      []override
	assign   []assignment // per tensor
	// shares holds, by tensor index, the shares of a routed-expert stack that expert
	// selectors split (assign then holds the first share's assignment).
	shares   map[int][]share
	tied     *assignment // the output matrix made from token_embd, when output.weight is absent
	tiedMeta tensorMeta
	kv       []layerKV // per layer 0..nLayerAll-1
	mem      []devMem  // per device
	mmap     bool
}

type assignment struct {
	dev      int // device index; -1 when skipped
	buffer   string
	storage  Storage
	over     int // index into layout.ovr of the deciding override, -1 for none
	listDev  int // the device the layer's list alone would give
	listFrom string
}

// share is the part of a routed-expert stack one assignment takes: its experts (ascending)
// and their bytes.
type share struct {
	a       assignment
	experts []int
	bytes   int64
}

type layerKV struct {
	dev     int // -1: no cache for this layer
	bytes   int64
	indexer int64 // of bytes, the lightning indexer's keys (DeepSeek Sparse Attention)
	kind    string
}

type devMem struct {
	weights, mapped, kv, compute, staging int64
	expertCache                           int64 // of weights: --expert-cache's slots and tables
}

func (m devMem) total() int64 { return m.weights + m.kv + m.compute }

// Context is the memory-relevant context configuration llama.cpp derives from -c, -np, -b,
// -ub and --kv-unified (llama_context's constructor).
type Context struct {
	NCtx      int  // total cells, padded to 256
	NCtxSeq   int  // cells per sequence stream
	NSeq      int  // n_seq_max
	NStream   int  // 1 with a unified cache
	Unified   bool // one cache shared by all sequences
	NBatch    int
	NUBatch   int
	NTokens   int // tokens in the worst-case graph the compute buffers are sized for
	SWACells  int // cells of the sliding-window cache (0: none)
	SWAWindow int // tokens a sliding-window layer attends to (0: none)
	FlashAttn bool
}

func (p *planner) context(nCtx int) Context {
	r := p.r
	c := Context{NSeq: r.Parallel, Unified: r.KVUnified == True}
	if r.Parallel < 0 { // llama-server's auto: 4 slots sharing a unified cache
		c.NSeq, c.Unified = 4, true
	}
	n := nCtx
	if n == 0 {
		n = p.hp.nCtx
	}
	c.NBatch = min(n, r.Batch)
	c.NUBatch = c.NBatch
	if r.UBatch > 0 {
		c.NUBatch = min(c.NBatch, r.UBatch)
	}
	c.NCtx = pad(n, 256)
	c.NStream, c.NCtxSeq = 1, c.NCtx
	if !c.Unified {
		c.NStream = c.NSeq
		c.NCtxSeq = pad(c.NCtx/c.NSeq, 256)
		c.NCtx = c.NCtxSeq * c.NSeq
	}
	c.NTokens = min(c.NCtx, c.NUBatch)
	c.FlashAttn = r.FlashAttn != FlashOff
	if slices.Contains(p.hp.swa, true) {
		c.SWAWindow = p.hp.nSWA
		c.SWACells = c.NCtxSeq
		if !r.SWAFull {
			window := p.hp.nSWA
			if c.Unified {
				window *= c.NSeq
			}
			c.SWACells = pad(min(c.NCtxSeq, window+c.NUBatch), 256)
		}
	}
	return c
}

func pad(x, n int) int { return (x + n - 1) / n * n }

// layerMap gives the device of every layer index 0..L, L being the output layer
// (llama_model_base::load_tensors, or the older rule ik_llama.cpp keeps).
func (p *planner) layerMap(ngl int, split []float32) (int, []int) {
	L := p.hp.nLayerAll()
	devs := make([]int, L+1)
	for i := range devs {
		devs[i] = p.cpu
	}
	nd := len(p.model)
	if p.r.Semantics == IKLlama && ngl < 0 {
		ngl = 0
		if nd > 0 {
			ngl = 999
		}
	} else if ngl < 0 {
		ngl = L + 1
	}
	if nd == 0 {
		return ngl, devs
	}
	splits := p.splitPoints(split)
	device := func(pos, act int) int {
		x := float32(pos) / float32(act)
		i, _ := slices.BinarySearchFunc(splits, x, func(s, x float32) int {
			if s <= x {
				return -1
			}
			return 1
		})
		return p.model[min(i, nd-1)]
	}
	if p.r.Semantics == IKLlama {
		start := max(L-ngl, 0)
		act := min(ngl, L+1)
		for il := 0; il < L; il++ {
			if il >= start && il-start < act {
				devs[il] = device(il-start, act)
			}
		}
		if ngl > L {
			devs[L] = device(L-start, act)
		}
		return ngl, devs
	}
	start := max(L+1-ngl, 0)
	act := min(ngl, L+1)
	for il := 0; il <= L; il++ {
		if il >= start && il-start < act {
			devs[il] = device(il-start, act)
		}
	}
	return ngl, devs
}

// splitPoints are llama.cpp's cumulative split fractions, in float32 as it computes them:
// -ts when any entry is non-zero, else each device's free memory.
func (p *planner) splitPoints(split []float32) []float32 {
	nd := len(p.model)
	w := make([]float32, nd)
	given := false
	for i := range w {
		if i < len(split) && split[i] != 0 {
			given = true
		}
	}
	for i, d := range p.model {
		switch {
		case given:
			if i < len(split) {
				w[i] = split[i]
			}
		case p.devs[d].FreeBytes == 0 && p.devs[d].TotalBytes == 0:
			w[i] = float32(p.devs[p.cpu].FreeBytes)
		default:
			w[i] = float32(p.devs[d].FreeBytes)
		}
	}
	var sum float32
	for i := range w {
		sum += w[i]
		w[i] = sum
	}
	if sum == 0 { // unknown memory everywhere: equal shares
		for i := range w {
			w[i] = float32(i + 1)
		}
		sum = float32(nd)
	}
	for i := range w {
		w[i] /= sum
	}
	return w
}

// layout places everything for one config.
func (p *planner) layout(cfg config) (*layout, error) {
	ctx := p.context(cfg.nCtx)
	lay := &layout{cfg: cfg, ctx: ctx, mmap: p.r.LoadMode.mmap(), mem: make([]devMem, len(p.devs))}
	lay.ngl, lay.layerDev = p.layerMap(cfg.ngl, cfg.split)
	lay.ovr = p.expand(cfg.items, cfg.ngl)
	if p.r.Semantics == IKLlama && lay.mmap {
		// ik_llama.cpp loads the whole model without mmap once any tensor is overridden to
		// the CPU (#1510), so that it can be pinned.
		for _, o := range lay.ovr {
			if o.host && slices.Contains(p.mustHits(o.pattern), true) {
				lay.mmap = false
				break
			}
		}
	}
	// The first matching override of every tensor, from each pattern's list of matches.
	first := make([]int, len(p.tensors))
	for i := range first {
		first[i] = -1
	}
	for i, o := range lay.ovr {
		matches, err := p.matches(o.pattern)
		if err != nil {
			return nil, err
		}
		for _, t := range matches {
			if first[t] < 0 {
				first[t] = i
			}
		}
	}
	lay.assign = make([]assignment, len(p.tensors))
	for i := range p.tensors {
		lay.assign[i] = p.assign(lay, &p.tensors[i], first[i])
	}
	if err := p.splitByExpert(lay); err != nil {
		return nil, err
	}
	if embd := p.tiedEmbd; embd >= 0 {
		lay.tiedMeta = p.tensors[embd]
		lay.tiedMeta.input, lay.tiedMeta.matmul, lay.tiedMeta.partKey = false, true, partOutput
		a := p.assign(lay, &lay.tiedMeta, first[embd])
		lay.tied = &a
	}
	for i, a := range lay.assign {
		if shares, ok := lay.shares[i]; ok {
			for _, sh := range shares {
				lay.addWeight(sh.a, sh.bytes)
			}
			continue
		}
		lay.addWeight(a, p.tensors[i].info.Size)
	}
	if lay.tied != nil && lay.tied.buffer != lay.assign[p.tiedEmbd].buffer {
		lay.addWeight(*lay.tied, p.tensors[p.tiedEmbd].info.Size)
	}
	p.expertCache(lay)
	if err := p.kvCache(lay); err != nil {
		return nil, err
	}
	p.compute(lay)
	return lay, nil
}

func (p *planner) mustHits(pattern string) []bool {
	h, _ := p.hits(pattern) // patterns were compiled when the items were checked
	return h
}

func (lay *layout) addWeight(a assignment, bytes int64) {
	if a.dev < 0 {
		return
	}
	lay.mem[a.dev].weights += bytes
	if a.storage == StorageMapped {
		lay.mem[a.dev].mapped += bytes
	}
}

// assign picks one tensor's buffer type (llama_model_loader::create_tensor): the first
// matching override, else the first buffer type of its layer's list that supports it; then
// the mmap swap of host buffers to plain CPU memory.
func (p *planner) assign(lay *layout, t *tensorMeta, over int) assignment {
	if t.skip {
		return assignment{dev: -1, over: -1, listDev: -1, storage: StorageSkipped}
	}
	listDev := p.cpu
	switch {
	case t.input:
	case t.layer >= 0:
		listDev = lay.layerDev[t.layer]
	default:
		listDev = lay.layerDev[len(lay.layerDev)-1]
	}
	a := assignment{over: over, listDev: listDev, dev: listDev}
	if over >= 0 {
		a.dev = lay.ovr[over].target
	}
	switch {
	case a.dev != p.cpu:
		a.buffer = p.devs[a.dev].Name
	case over >= 0 && lay.ovr[over].host && len(p.model) > 0: // ik_llama.cpp: straight to the host buffer type
		a.buffer = p.hostBuffer()
	default:
		a.buffer = p.cpuBuffer(t)
	}
	host := p.hostBuffer()
	switch {
	case a.buffer == host && host != "" && lay.mmap:
		a.buffer, a.storage = "CPU_Mapped", StorageMapped
	case a.buffer == host && host != "":
		a.storage = StoragePinned
	case a.buffer == "CPU_REPACK":
		a.storage = StorageRepacked
	case a.dev == p.cpu || p.devs[a.dev].MapsHostMemory:
		if lay.mmap {
			a.storage = StorageMapped
			if a.dev == p.cpu {
				a.buffer = "CPU_Mapped"
			}
		} else {
			a.storage = StorageCopied
		}
	default:
		a.storage = StorageCopied
	}
	return a
}

// hostBuffer is the pinned host buffer type of the first model device that has one, which
// heads llama.cpp's CPU buffer list unless --no-host.
func (p *planner) hostBuffer() string {
	if p.r.NoHost {
		return ""
	}
	for _, d := range p.model {
		if h := p.devs[d].HostBuffer; h != "" {
			return h
		}
	}
	return ""
}

// cpuBuffer walks llama.cpp's CPU list (make_cpu_buft_list): the host buffer type, then the
// repacked layout for matmul weights it accepts, then plain CPU memory.
func (p *planner) cpuBuffer(t *tensorMeta) string {
	if h := p.hostBuffer(); h != "" {
		return h
	}
	cpu := &p.devs[p.cpu]
	if p.r.Repack && t.matmul && cpu.CanRepack(t.info.Type, t.info.Shape[1]) {
		return "CPU_REPACK"
	}
	return "CPU"
}

// kvCache sizes the KV cache per layer (llama_kv_cache, llama_kv_cache_iswa) and the
// recurrent state (llama_memory_recurrent), each on its layer's device — never where -ot
// put the weights — or on the CPU with -nkvo.
func (p *planner) kvCache(lay *layout) error {
	hp, r, c := p.hp, p.r, lay.ctx
	lay.kv = make([]layerKV, hp.nLayerAll())
	vMax := 0
	for il := range lay.kv {
		vMax = max(vMax, p.headV(il)*hp.nHeadKV[il])
	}
	for il := range lay.kv {
		dev := p.cpu
		if r.KVOffload {
			dev = lay.layerDev[il]
		}
		kv := layerKV{dev: dev}
		switch {
		case hp.recurrent[il]:
			rows := int64(max(1, c.NSeq))
			kv.kind, kv.bytes = "recurrent", int64(hp.nEmbdR+hp.nEmbdS)*4*rows
		case (hp.hybridKVFilter || hp.indexerDim > 0) && il >= hp.nLayer:
			kv.dev, kv.kind = -1, "nextn"
			lay.kv[il] = kv
			continue
		default:
			cells := c.NCtxSeq
			kv.kind = "attention"
			if hp.swa[il] {
				cells, kv.kind = c.SWACells, "swa"
			}
			kRow, err := r.CacheK.RowBytes(int64(p.headK(il) * hp.nHeadKV[il]))
			if err != nil {
				return usagef("K cache type %s cannot hold layer %d: %v", r.CacheK, il, err)
			}
			kv.bytes = kRow * int64(cells) * int64(c.NStream)
			if !hp.mla {
				width := p.headV(il) * hp.nHeadKV[il]
				if !c.FlashAttn {
					width = vMax // the transposed V cache is padded to the widest layer
				}
				vRow, err := r.CacheV.RowBytes(int64(width))
				if err != nil {
					return usagef("V cache type %s cannot hold layer %d: %v", r.CacheV, il, err)
				}
				kv.bytes += vRow * int64(cells) * int64(c.NStream)
			}
			if hp.indexerDim > 0 && hp.indexerFull[il] {
				// llama_kv_cache_dsa's indexer cache: one K row per cell in the K cache type.
				iRow, err := r.CacheK.RowBytes(int64(hp.indexerDim))
				if err != nil {
					return usagef("K cache type %s cannot hold layer %d's indexer keys: %v", r.CacheK, il, err)
				}
				kv.indexer = iRow * int64(cells) * int64(c.NStream)
				kv.bytes += kv.indexer
			}
		}
		lay.kv[il] = kv
		lay.mem[dev].kv += kv.bytes
	}
	return nil
}

func (p *planner) headK(il int) int {
	if p.hp.swa[il] {
		return p.hp.headKSWA
	}
	return p.hp.headK
}

func (p *planner) headV(il int) int {
	if p.hp.swa[il] {
		return p.hp.headVSWA
	}
	return p.hp.headV
}

// compute estimates the compute buffer of every device (see docs/placement.md): ggml's
// allocator sizes it for the worst-case prompt graph, so it is the largest set of
// activations alive at once on that device, plus the attention masks, the logits on the
// output device, and — with op offload — the CPU-resident weights copied to the GPU for
// batches of 32 tokens or more.
func (p *planner) compute(lay *layout) {
	hp, c := p.hp, lay.ctx
	T := int64(c.NTokens)
	f32 := func(elems int) int64 { return 4 * T * int64(elems) }
	peak := make([]int64, len(p.devs))
	attention := make([]bool, len(p.devs))
	swa := make([]bool, len(p.devs))
	kvCopy := make([]int64, len(p.devs))
	// DeepSeek Sparse Attention (deepseek32.cpp, glm-dsa.cpp, build_attn's top-k mask):
	// each layer's zero-filled source of top-k rows is a graph leaf, allocated before the
	// first layer runs and freed after its own, so the first layers' attention sees them
	// all; the indexer has a mask of its own; and its scores over every cell of the cache,
	// the top-k over them and the new mask are n_kv × ubatch tensors alive at once.
	sparse, sparseStage := make([]int64, len(p.devs)), make([]int64, len(p.devs))
	offloadTo := p.offloadTarget(c)

	// Which device runs each part of each layer (the device of its largest matmul weight),
	// and its two largest matmul weights, which op offload would copy.
	type partUse struct {
		used, host    bool
		dev           int
		largest, next int64
	}
	nRows := hp.nLayerAll() + 1 // blocks, then the output layer
	parts := make([]partUse, nRows*int(numParts))
	addTensor := func(t *tensorMeta, a assignment) {
		if a.dev < 0 || t.partKey == partNone {
			return
		}
		row := t.layer
		if t.partKey == partOutput || row < 0 {
			row = nRows - 1
		}
		u := &parts[row*int(numParts)+int(t.partKey)]
		size := int64(-1)
		if t.matmul {
			size = t.info.Size
		}
		if !u.used || size > u.largest {
			u.next = max(u.largest, 0)
			u.used, u.largest, u.dev = true, size, a.dev
			u.host = t.matmul && a.dev == p.cpu && a.storage != StorageRepacked
		} else if size > u.next {
			u.next = size
		}
	}
	for i := range p.tensors {
		for _, a := range lay.assignments(i) {
			addTensor(&p.tensors[i], a)
		}
	}
	if lay.tied != nil {
		addTensor(&lay.tiedMeta, *lay.tied)
	}
	nkvoCopy := int64(0)
	for _, kv := range lay.kv {
		if kv.kind == "attention" || kv.kind == "swa" {
			nkvoCopy = max(nkvoCopy, kv.bytes)
		}
	}
	// The logits go past wherever the final norm landed, which is in a hole the last
	// block left. When that block's routed experts run on another device, their outputs
	// come back as a graph-split input, the largest such hole: with it the estimate is
	// within 10% of llama.cpp's on Kimi-K2 and 22% over on MiniMax-M2, whose norm landed
	// lower; without it Kimi-K2 was 26% under (testdata/placement/compute-mla.txt).
	var lastExpertsIn int64
	for i, u := range parts {
		if !u.used {
			continue
		}
		layer, pt := i/int(numParts), part(i%int(numParts))
		dev := u.dev
		if u.host && offloadTo >= 0 && T >= 32 {
			dev = offloadTo
			lay.mem[dev].staging = max(lay.mem[dev].staging, u.largest+u.next)
		}
		var b int64
		switch pt {
		case partAttn:
			il := layer
			switch {
			case hp.recurrent[il]:
				b = f32(2*hp.nEmbd + 3*hp.recurrentConvWd)
			default:
				heads, kvHeads := hp.nHead[il], hp.nHeadKV[il]
				if hp.mla {
					b = f32(p.mlaQueryWidth(il))
				} else {
					b = f32(2*hp.nEmbd + heads*p.headK(il) + kvHeads*(p.headK(il)+p.headV(il)) + heads*p.headV(il))
				}
				// The attention op itself runs by the KV cache when that is on a GPU, else
				// where the projections run (fetching the CPU cache, as with -nkvo).
				fa, kvDev := dev, lay.kv[il].dev
				if kvDev >= 0 && kvDev != p.cpu {
					fa = kvDev
				}
				cells := c.NCtxSeq
				if hp.swa[il] {
					cells = c.SWACells
					swa[fa] = true
				} else {
					attention[fa] = true
				}
				if !c.FlashAttn { // the KQ scores
					peak[fa] = max(peak[fa], 4*T*int64(cells)*int64(heads)+f32(2*hp.nEmbd))
				}
				if hp.indexerTopK > 0 {
					sparse[fa] += 4 * T * int64(min(hp.indexerTopK, cells))
					sparseStage[fa] = max(sparseStage[fa], b)
					if hp.indexerFull[il] {
						sparseStage[fa] = max(sparseStage[fa], f32(hp.nEmbd+heads*p.headK(il))+10*T*int64(cells))
					}
				}
				if kvDev != fa && fa != p.cpu { // a layer's cache copied over each ubatch
					kvCopy[fa] = nkvoCopy
				}
			}
		case partFFN:
			width := max(hp.nFFShexp, 0)
			if hp.nExpert == 0 || layer < nRows-1 && !p.moeLayer[layer] {
				width = max(width, hp.nFF)
			}
			b = f32(2*hp.nEmbd + 3*width)
		case partExperts:
			b = f32(max(hp.nEmbd*(1+2*hp.nUsed), 2*hp.nEmbd+3*hp.nFFExp*hp.nUsed))
			if layer == hp.nLayer-1 && dev != lay.layerDev[layer] {
				lastExpertsIn = f32(hp.nEmbd * hp.nUsed)
			}
		case partOutput:
			b = f32(hp.nVocab + 2*hp.nEmbd)
			if dev == lay.layerDev[hp.nLayer-1] {
				b += lastExpertsIn
			}
		}
		peak[dev] = max(peak[dev], b)
	}
	maskElem := int64(4)
	if c.FlashAttn {
		maskElem = 2
	}
	// One mask row of n_kv cells per token; with several streams each stream's tokens see
	// only their own stream's cells.
	fullMask := maskElem * T * int64(c.NCtxSeq)
	swaMask := maskElem * T * int64(c.SWACells)
	anyAttn, anySWA := slices.Contains(attention, true), slices.Contains(swa, true)
	anyDSA := slices.ContainsFunc(sparse, func(b int64) bool { return b > 0 })
	for d := range p.devs {
		m := &lay.mem[d]
		var masks int64
		if attention[d] || d == p.cpu && anyAttn {
			masks += fullMask
		}
		if sparse[d] > 0 || d == p.cpu && anyDSA { // the indexer's, F16 with its fused op
			masks += 2 * T * int64(c.NCtxSeq)
		}
		if sparse[d] > 0 {
			peak[d] = max(peak[d], sparse[d]+sparseStage[d])
		}
		if swa[d] || d == p.cpu && anySWA {
			masks += swaMask
		}
		if d == p.cpu {
			// The host holds the graph inputs: the embeddings' get_rows output and the masks.
			// A mask dies once copied to the GPUs unless attention also runs here.
			inputs := f32(hp.nEmbd)
			if attention[d] || swa[d] {
				m.compute = masks + peak[d] + inputs
			} else {
				m.compute = max(masks+2*inputs, peak[d]+inputs)
			}
			continue
		}
		if peak[d] > 0 || m.staging > 0 {
			m.compute = masks + peak[d] + m.staging + kvCopy[d]
		}
	}
}

// mlaQueryWidth is what one token of an MLA layer's attention keeps alive at its peak,
// in floats, as ggml's allocator lays out deepseek2.cpp's absorbed query (traced with
// GGML_ALLOCATOR_DEBUG on DeepSeek-V3): the layer input and its norm, the projected
// query (freed just before, a hole nothing fills), its rotated part, the query
// multiplied into the latent space, and both concatenated.
func (p *planner) mlaQueryWidth(il int) int {
	hp := p.hp
	heads, latent, rope := hp.nHead[il], hp.headV, hp.headK-hp.headV
	return 2*hp.nEmbd + heads*(hp.headKMLA+rope+latent+hp.headK)
}

// offloadTarget is the GPU that runs large-batch matmuls on CPU-held weights (ggml's
// offload_op): the first model device that offers it, or -1.
func (p *planner) offloadTarget(c Context) int {
	if !p.r.OpOffload {
		return -1
	}
	for _, d := range p.model {
		if p.devs[d].OffloadsOps {
			return d
		}
	}
	return -1
}

// deviceName is a device index as reports print it.
func (p *planner) deviceName(d int) string {
	if d < 0 {
		return ""
	}
	return p.devs[d].Name
}

// describeList explains a tensor placed by its layer's list.
func (p *planner) describeList(lay *layout, t *tensorMeta, a assignment) string {
	switch {
	case t.skip:
		return "NextN/MTP block (not loaded without MTP speculative decoding)"
	case t.input:
		return "input layer (always on the CPU list)"
	case t.layer >= 0:
		return fmt.Sprintf("-ngl layer map: layer %d → %s", t.layer, p.deviceName(lay.layerDev[t.layer]))
	}
	return "-ngl layer map: output layer → " + p.deviceName(lay.layerDev[len(lay.layerDev)-1])
}

// assignments are tensor i's assignments: its shares', or its one.
func (lay *layout) assignments(i int) []assignment {
	shares, ok := lay.shares[i]
	if !ok {
		return lay.assign[i : i+1]
	}
	out := make([]assignment, len(shares))
	for j, sh := range shares {
		out[j] = sh.a
	}
	return out
}

// splitByExpert applies the overrides with expert selectors: each expert of a routed-expert
// stack takes the first override whose pattern matches the stack and whose selector holds
// the expert (one without a selector holds them all), else the layer map's device. Experts
// that end up in the same buffer form one share; a stack whose experts all do stays whole.
// Tensors that are not routed-expert stacks are left to the overrides without selectors.
func (p *planner) splitByExpert(lay *layout) error {
	var selective []int
	for i, o := range lay.ovr {
		if o.experts != nil {
			selective = append(selective, i)
		}
	}
	if len(selective) == 0 {
		return nil
	}
	n := p.hp.nExpert
	matching := map[int][]int{} // stack → the overrides matching it, in order
	hit := map[int]bool{}
	for _, oi := range selective {
		ts, err := p.matches(lay.ovr[oi].pattern)
		if err != nil {
			return err
		}
		for _, t := range ts {
			if p.isExpertStack(t) {
				hit[t] = true
			}
		}
	}
	for oi, o := range lay.ovr {
		ts, err := p.matches(o.pattern)
		if err != nil {
			return err
		}
		for _, t := range ts {
			if hit[t] {
				matching[t] = append(matching[t], oi)
			}
		}
	}
	// The first override without a selector decides a non-stack tensor, as before.
	for i := range p.tensors {
		if hit[i] || lay.assign[i].over < 0 || lay.ovr[lay.assign[i].over].experts == nil {
			continue
		}
		first := -1
		ts := p.mustHitsIndex(i, lay.ovr)
		for _, oi := range ts {
			if lay.ovr[oi].experts == nil {
				first = oi
				break
			}
		}
		lay.assign[i] = p.assign(lay, &p.tensors[i], first)
	}
	lay.shares = map[int][]share{}
	for t, ovrs := range matching {
		owner := make([]int, n)
		for e := range owner {
			owner[e] = -2 // not taken yet
		}
		for _, oi := range ovrs {
			o := lay.ovr[oi]
			ids := []int(nil)
			if o.experts != nil {
				var err error
				if ids, err = o.experts.experts(p.tensors[t].layer, n, p.r.HotStats); err != nil {
					return usagef("%s on %s: %v", lay.cfg.items[o.item].Origin(), p.tensors[t].info.Name, err)
				}
			}
			for e := range owner {
				if owner[e] == -2 && (o.experts == nil || slices.Contains(ids, e)) {
					owner[e] = oi
				}
			}
		}
		var shares []share
		per := p.tensors[t].info.Size / int64(n)
		for e, oi := range owner {
			if oi == -2 {
				oi = -1 // the layer map's
			}
			a := p.assign(lay, &p.tensors[t], oi)
			j := slices.IndexFunc(shares, func(sh share) bool {
				return sh.a.dev == a.dev && sh.a.buffer == a.buffer && sh.a.storage == a.storage
			})
			if j < 0 {
				shares = append(shares, share{a: a})
				j = len(shares) - 1
			}
			shares[j].experts = append(shares[j].experts, e)
			shares[j].bytes += per
		}
		lay.assign[t] = shares[0].a
		if len(shares) > 1 {
			lay.shares[t] = shares
		}
	}
	return nil
}

// isExpertStack reports whether tensor i holds one slice per expert of the model: a
// routed-expert stack or its bias, of a block that is loaded.
func (p *planner) isExpertStack(i int) bool {
	t := &p.tensors[i]
	shape := t.info.Shape
	return t.class == gguf.ClassRoutedExpert && !t.skip && t.layer >= 0 && p.hp.nExpert > 1 &&
		len(shape) >= 2 && shape[len(shape)-1] == int64(p.hp.nExpert)
}

// mustHitsIndex lists, in order, the overrides whose patterns match tensor i.
func (p *planner) mustHitsIndex(i int, ovr []override) []int {
	var out []int
	for oi, o := range ovr {
		if p.mustHits(o.pattern)[i] {
			out = append(out, oi)
		}
	}
	return out
}

// sharesOf is tensor i's shares, or one share of all its bytes (size).
func (lay *layout) sharesOf(i int, size int64) []share {
	if shares, ok := lay.shares[i]; ok {
		return shares
	}
	return []share{{a: lay.assign[i], bytes: size}}
}
