package placement

import (
	"fmt"
	"math"
	"strings"
)

// FitReport says what --fit did (llama.cpp's common_fit_params, common/fit.cpp).
type FitReport struct {
	Enabled bool
	Status  string   // "no changes needed", "fitted", or why it gave up
	Changes []string // what it changed, in words
	Args    string   // the changes as llama.cpp flags, as llama-fit-params prints them
	Log     []string // its steps
}

// fitFailure ends a fit early; llama.cpp keeps whatever it changed until then.
type fitFailure string

// layerFraction is which part of a partially offloaded layer stays on its device.
type layerFraction int

const (
	fractionAttn layerFraction = iota + 1 // attention only
	fractionUp                            // attention + up
	fractionGate                          // attention + up + gate
	fractionMoE                           // everything but the routed experts
)

// overflowPattern matches the tensors of layer il that overflow past a fraction.
func overflowPattern(il int, f layerFraction) string {
	switch f {
	case fractionAttn:
		return fmt.Sprintf(`blk\.%d\.ffn_(gate|up|gate_up|down).*`, il)
	case fractionUp:
		return fmt.Sprintf(`blk\.%d\.ffn_(gate|gate_up|down).*`, il)
	case fractionGate:
		return fmt.Sprintf(`blk\.%d\.ffn_down.*`, il)
	}
	return fmt.Sprintf(`blk\.%d\.ffn_(up|down|gate_up|gate)_(ch|)exps`, il)
}

// nglPart is llama.cpp's ngl_t: layers on a device, of which n_part keep their experts
// (or part of the FFN) elsewhere.
type nglPart struct {
	nLayer, nPart int
	overflow      layerFraction
}

func (n nglPart) nFull() int { return n.nLayer - n.nPart }

// fitter carries one fit's state.
type fitter struct {
	p        *planner
	cfg      config
	rep      *FitReport
	nd       int
	nStreams int64 // KV streams: 1 with a unified cache, else one per slot
}

// fit adjusts the context, -ngl, -ts and the expert overrides to the devices' free memory
// as llama.cpp does by default, measuring each candidate with the memory model.
func (p *planner) fit(cfg config) (config, FitReport, error) {
	rep := FitReport{Enabled: true}
	f := &fitter{p: p, cfg: cfg, rep: &rep, nd: len(p.model)}
	out, err := f.run()
	var fail fitFailure
	switch e := err.(type) {
	case nil:
	case fitFailure:
		fail = e
	default:
		return cfg, rep, err
	}
	if fail != "" {
		rep.Status = "gave up: " + string(fail)
		f.logf("failed to fit params to free device memory: %s", fail)
	}
	f.describe(cfg, out)
	return out, rep, nil
}

func (e fitFailure) Error() string { return string(e) }

func (f *fitter) logf(format string, args ...any) {
	f.rep.Log = append(f.rep.Log, fmt.Sprintf(format, args...))
}

// measurement is one memory projection: per model device and for the host.
type measurement struct {
	used, model []int64
	host        int64
}

func (f *fitter) measure(cfg config) (measurement, error) {
	lay, err := f.p.layout(cfg)
	if err != nil {
		return measurement{}, err
	}
	m := measurement{host: lay.mem[f.p.cpu].total()}
	for _, d := range f.p.model {
		m.used = append(m.used, lay.mem[d].total())
		m.model = append(m.model, lay.mem[d].weights)
	}
	return m, nil
}

func (f *fitter) free(id int) int64 { return f.p.devs[f.p.model[id]].FreeBytes }

func (f *fitter) margin(id int) int64 { return f.p.margin(id) }

// margin is the free memory llama.cpp's fit keeps on model device id (the host uses the
// first): -fitt's value for it, its single value for all, or 1 GiB; none with --fit off,
// as llama.cpp then keeps none, unless KeepMargin (fit's search plans for --fit's user).
func (p *planner) margin(id int) int64 {
	if !p.r.Fit && !p.r.KeepMargin {
		return 0 // llama.cpp keeps no free memory unless --fit does: a plan that fits runs
	}
	return p.fitTarget(id)
}

// fitTarget is -fitt's free memory for model device id, whether --fit is on or not.
func (p *planner) fitTarget(id int) int64 {
	t := p.r.FitTarget
	switch {
	case id < len(t):
		return t[id]
	case len(t) == 1:
		return t[0]
	}
	return 1 << 30
}

func (f *fitter) run() (config, error) {
	p, cfg, nd := f.p, f.cfg, f.nd
	ctx := p.context(cfg.nCtx)
	nStreams := int64(1)
	if !ctx.Unified {
		nStreams = int64(max(1, ctx.NSeq))
	}
	f.nStreams = nStreams
	nCtxAuto := cfg.nCtx == 0
	nCtxMax := min(int64(p.hp.nCtx)*nStreams, math.MaxUint32)
	nCtxMinTotal := min(p.r.FitMinCtx*nStreams, math.MaxUint32)
	if nCtxAuto {
		cfg.nCtx = int(nCtxMax)
	}
	full, err := f.measure(cfg)
	if err != nil {
		return cfg, err
	}
	f.cfg = cfg

	// Step 1: is anything to be done at all?
	var sumFree, sumUsed, sumModel int64
	if nd == 0 {
		host := p.devs[p.cpu].TotalBytes
		if host == 0 {
			f.rep.Status = "skipped: the host's RAM is unknown (give --ram)"
			return cfg, nil
		}
		sumUsed, sumFree = full.host, host
		f.logf("projected to use %d MiB of host memory vs. %d MiB of total host memory", sumUsed>>20, sumFree>>20)
		if sumFree-sumUsed >= f.margin(0) {
			f.rep.Status = "no changes needed"
			return cfg, nil
		}
	} else {
		need := false
		for id := range nd {
			sumFree += f.free(id)
			sumUsed += full.used[id]
			sumModel += full.model[id]
			if f.free(id)-full.used[id] < f.margin(id) {
				need = true
			}
		}
		f.logf("projected to use %d MiB of device memory vs. %d MiB of free device memory", sumUsed>>20, sumFree>>20)
		if !need {
			f.rep.Status = "no changes needed"
			return cfg, nil
		}
	}

	// Step 2: a smaller context, when the user did not set one.
	if err := f.reduceContext(&cfg, nCtxAuto, nCtxMax, nCtxMinTotal, sumFree, sumUsed, sumModel); err != nil {
		return cfg, err
	}
	f.cfg = cfg
	if f.rep.Status != "" {
		return cfg, nil
	}
	if nd == 0 {
		return cfg, fitFailure("was unable to fit model into system memory by reducing context, abort")
	}
	if err := f.checkUserSettings(); err != nil {
		return cfg, err
	}
	return f.fillLayers()
}

func (f *fitter) reduceContext(cfg *config, auto bool, nCtxMax, nCtxMin, sumFree, sumUsed, sumModel int64) error {
	surplus := sumFree - sumUsed
	for id := range max(f.nd, 1) {
		surplus -= f.margin(id)
	}
	if surplus >= 0 {
		return nil
	}
	f.logf("cannot meet free memory targets, need to use %d MiB less in total", -surplus>>20)
	switch {
	case !auto:
		f.logf("context size set by user to %d -> no change", cfg.nCtx)
		return nil
	case nCtxMax <= nCtxMin:
		f.logf("default model context size is %d which is <= the min. context size of %d -> no change", nCtxMax, nCtxMin)
		return nil
	}
	target := sumFree
	for id := range max(f.nd, 1) {
		target -= f.margin(id)
	}
	if f.nd > 1 {
		// whole layers (dense) or whole tensors (MoE) waste about half a layer per device
		layers := f.p.hp.nLayer
		if f.cfg.ngl >= 0 {
			layers = max(min(f.cfg.ngl, layers), 1)
		}
		perLayer := sumModel / int64(layers)
		div := int64(2)
		if f.p.hp.nExpert > 0 {
			div = 6
		}
		target -= int64(f.nd+1) * perLayer / div
	}
	cfg.nCtx = int(nCtxMin)
	small, err := f.measure(*cfg)
	if err != nil {
		return err
	}
	usedMin := small.host
	if f.nd > 0 {
		usedMin = 0
		for _, u := range small.used {
			usedMin += u
		}
	}
	if target <= usedMin {
		f.logf("context size reduced from %d to %d -> need %d MiB less memory in total", nCtxMax, cfg.nCtx, (sumUsed-usedMin)>>20)
		f.rep.Changes = append(f.rep.Changes, fmt.Sprintf("context %d → %d (the minimum, -fitc)", nCtxMax, cfg.nCtx))
		return nil
	}
	n := nCtxMin + (nCtxMax-nCtxMin)*(target-usedMin)/(sumUsed-usedMin)
	align := 256 * f.nStreams
	n = max(n-n%align, nCtxMin)
	cfg.nCtx = int(n)
	f.logf("context size reduced from %d to %d", nCtxMax, n)
	f.rep.Changes = append(f.rep.Changes, fmt.Sprintf("context %d → %d", nCtxMax, n))
	if f.nd <= 1 {
		f.rep.Status = "fitted by reducing the context"
	}
	return nil
}

// checkUserSettings gives up, as llama.cpp does, when the user already decided the layers,
// the split or the overrides.
func (f *fitter) checkUserSettings() error {
	if f.cfg.ngl != NGLAuto {
		return fitFailure(fmt.Sprintf("n_gpu_layers already set by user to %d, abort", f.cfg.ngl))
	}
	if f.nd > 1 {
		for _, x := range f.cfg.split {
			if x != 0 {
				return fitFailure("model_params::tensor_split already set by user, abort")
			}
		}
	}
	if len(f.cfg.items) > 0 {
		return fitFailure("model_params::tensor_buft_overrides already set by user, abort")
	}
	return nil
}

// apply turns layers per device into -ngl, -ts and the overflow overrides
// (set_ngl_tensor_split_tbo).
func (f *fitter) apply(ngl []nglPart, overflow []int) config {
	cfg := f.cfg
	cfg.ngl = 0
	for _, n := range ngl {
		cfg.ngl += n.nLayer
	}
	if f.nd > 1 {
		cfg.split = make([]float32, f.nd)
		for id, n := range ngl {
			cfg.split[id] = float32(n.nLayer)
		}
	}
	cfg.items = nil
	il0 := f.p.hp.nLayer + 1 - cfg.ngl
	for id, n := range ngl {
		il0 += n.nFull()
		for il := il0; il < il0+n.nPart; il++ {
			frac, dev := fractionMoE, f.p.cpu
			if il == il0 {
				frac, dev = n.overflow, overflow[id]
			}
			pat := overflowPattern(il, frac)
			target := f.p.devs[dev].Name
			cfg.items = append(cfg.items, Item{Kind: ItemFit, Flag: "fit", Text: pat + "=" + target, Pattern: pat, Target: target})
		}
		il0 += n.nPart
	}
	return cfg
}

func (f *fitter) memoryFor(ngl []nglPart, overflow []int) ([]int64, error) {
	m, err := f.measure(f.apply(ngl, overflow))
	return m.used, err
}

// fillLayers is steps 3 and 4 of llama.cpp's fit: fill the devices back to front with
// layers (dense-only layers for MoE models, experts on the CPU), then turn dense-only layers
// into full ones front to back while memory lasts, with a partial layer overflowing.
func (f *fitter) fillLayers() (config, error) {
	p, nd := f.p, f.nd
	hpNgl := p.hp.nLayer
	moe := p.hp.nExpert > 0
	surplusCPUMoE := int64(0)
	if moe {
		all := f.cfg
		all.items = []Item{{Kind: ItemFit, Pattern: `blk\.\d+\.ffn_(up|down|gate_up|gate)_(ch|)exps`, Target: "CPU"}}
		m, err := f.measure(all)
		if err != nil {
			return f.cfg, err
		}
		for id := range nd {
			surplusCPUMoE += f.free(id) - m.used[id] - f.margin(id)
		}
		f.logf("with only dense weights in device memory there is a total surplus of %d MiB", surplusCPUMoE>>20)
	}
	targets := make([]int64, nd)
	for id := range nd {
		targets[id] = f.free(id) - f.margin(id)
	}
	overflow := make([]int, nd)
	for id := range overflow {
		overflow[id] = p.cpu
	}
	ngl := make([]nglPart, nd)
	for id := range ngl {
		ngl[id].overflow = fractionMoE
	}
	mem, err := f.memoryFor(ngl, overflow)
	if err != nil {
		return f.cfg, err
	}
	for id := nd - 1; id >= 0; id-- {
		unassigned := hpNgl + 1
		for jd := id + 1; jd < nd; jd++ {
			unassigned -= ngl[jd].nLayer
		}
		high := clone(ngl)
		high[id].nLayer = unassigned
		if moe {
			high[id].nPart = high[id].nLayer
			if id == nd-1 {
				high[id].nPart--
			}
		}
		if high[id].nLayer == 0 {
			continue
		}
		memHigh, err := f.memoryFor(high, overflow)
		if err != nil {
			return f.cfg, err
		}
		if memHigh[id] <= targets[id] {
			ngl, mem = high, memHigh
			continue
		}
		for delta := high[id].nLayer - ngl[id].nLayer; delta > 1 && memHigh[id] != mem[id]; delta = high[id].nLayer - ngl[id].nLayer {
			step := falsePosition(delta, targets[id], mem[id], memHigh[id])
			test := clone(ngl)
			test[id].nLayer += step
			if moe {
				if id == nd-1 && test[id].nPart == 0 {
					test[id].nPart += step - 1 // the first layer is the output layer, always whole
				} else {
					test[id].nPart += step
				}
			}
			memTest, err := f.memoryFor(test, overflow)
			if err != nil {
				return f.cfg, err
			}
			if memTest[id] <= targets[id] {
				ngl, mem = test, memTest
			} else {
				high, memHigh = test, memTest
			}
		}
	}
	if !moe || surplusCPUMoE <= 0 {
		return f.finish(ngl, overflow), nil
	}
	return f.convertDense(ngl, overflow, mem, targets)
}

// falsePosition guesses how many of delta layers fit between a low and a high measurement.
func falsePosition(delta int, target, low, high int64) int {
	step := int(uint32(int64(delta) * (target - low) / (high - low)))
	return min(max(step, 1), delta-1)
}

func clone(n []nglPart) []nglPart { return append([]nglPart(nil), n...) }

// convertDense is step 4 for MoE models with room to spare.
func (f *fitter) convertDense(ngl []nglPart, overflow []int, mem, targets []int64) (config, error) {
	nd := f.nd
	denseStart := nd
	for id := nd - 1; id >= 0 && ngl[id].nLayer > 0; id-- {
		denseStart = id
	}
	for id := 0; id <= denseStart && denseStart < nd; id++ {
		high := clone(ngl)
		for jd := denseStart; jd < nd; jd++ {
			move := high[jd].nLayer
			if jd == nd-1 {
				move--
			}
			high[id].nLayer += move
			high[jd].nLayer -= move
			high[jd].nPart = 0
		}
		denseStartHigh := nd - 1
		memHigh, err := f.memoryFor(high, overflow)
		if err != nil {
			return f.cfg, err
		}
		if memHigh[id] > targets[id] {
			for delta := high[id].nFull() - ngl[id].nFull(); delta > 1 && memHigh[id] != mem[id]; delta = high[id].nFull() - ngl[id].nFull() {
				step := falsePosition(delta, targets[id], mem[id], memHigh[id])
				test := clone(ngl)
				startTest, converted := denseStart, 0
				for ; startTest < nd; startTest++ {
					n := min(step-converted, test[startTest].nPart)
					test[startTest].nLayer -= n
					test[startTest].nPart -= n
					test[id].nLayer += n
					converted += n
					if test[startTest].nPart > 0 {
						break
					}
				}
				memTest, err := f.memoryFor(test, overflow)
				if err != nil {
					return f.cfg, err
				}
				if memTest[id] <= targets[id] {
					ngl, mem, denseStart = test, memTest, startTest
				} else {
					high, memHigh, denseStartHigh = test, memTest, startTest
				}
			}
		} else {
			ngl, mem, denseStart = high, memHigh, denseStartHigh
		}
		if denseStart >= nd {
			break
		}
		minLayers := 0
		if id == nd-1 {
			minLayers = 1
		}
		if ngl[denseStart].nLayer <= minLayers {
			continue
		}
		// Try to fit part of one more layer: its attention and some of its FFN.
		test := clone(ngl)
		startTest := denseStart
		test[startTest].nLayer--
		test[startTest].nPart--
		test[id].nLayer++
		test[id].nPart++
		if test[startTest].nPart == 0 {
			startTest++
		}
		overflowTest := append([]int(nil), overflow...)
		if id < nd-1 {
			overflowTest[id] = f.p.model[id+1]
		}
		fits := func(m []int64) bool { return m[id] < targets[id] && (id+1 == nd || m[id+1] < targets[id+1]) }
		test[id].overflow = fractionUp
		memTest, err := f.memoryFor(test, overflowTest)
		if err != nil {
			return f.cfg, err
		}
		if fits(memTest) {
			ngl, overflow, mem, denseStart = clone(test), overflowTest, memTest, startTest
			test[id].overflow = fractionGate
			if memTest, err = f.memoryFor(test, overflowTest); err != nil {
				return f.cfg, err
			}
			if fits(memTest) {
				ngl, mem = clone(test), memTest
			}
		} else {
			test[id].overflow = fractionAttn
			if memTest, err = f.memoryFor(test, overflowTest); err != nil {
				return f.cfg, err
			}
			if fits(memTest) {
				ngl, overflow, mem, denseStart = clone(test), overflowTest, memTest, startTest
			}
		}
	}
	return f.finish(ngl, overflow), nil
}

func (f *fitter) finish(ngl []nglPart, overflow []int) config {
	for id, n := range ngl {
		f.logf("%s: %d layers (%d overflowing)", f.p.devs[f.p.model[id]].Name, n.nLayer, n.nPart)
	}
	f.rep.Status = "fitted"
	return f.apply(ngl, overflow)
}

// describe lists what fit changed and renders the result as llama-fit-params prints it.
func (f *fitter) describe(before, after config) {
	nCtx := after.nCtx
	if nCtx == 0 {
		nCtx = f.p.hp.nCtx
	}
	args := fmt.Sprintf("-c %d -ngl %d", nCtx, after.ngl)
	if after.ngl != before.ngl {
		f.rep.Changes = append(f.rep.Changes, fmt.Sprintf("-ngl %s → %d", nglText(before.ngl), after.ngl))
	}
	if f.nd > 1 && fmt.Sprint(after.split) != fmt.Sprint(before.split) {
		parts := make([]string, len(after.split))
		for i, x := range after.split {
			parts[i] = fmt.Sprint(uint32(x))
		}
		args += " -ts " + strings.Join(parts, ",")
		f.rep.Changes = append(f.rep.Changes, "-ts "+strings.Join(parts, ","))
	}
	var ot []string
	for _, it := range after.items {
		if it.Kind == ItemFit {
			ot = append(ot, it.Text)
		}
	}
	if len(ot) > 0 {
		args += ` -ot "` + strings.Join(ot, ",") + `"`
		f.rep.Changes = append(f.rep.Changes, fmt.Sprintf("%d override(s) keep the experts (or part of the FFN) of partially offloaded layers off the GPU", len(ot)))
	}
	f.rep.Args = args
	if f.rep.Status == "" {
		f.rep.Status = "no changes needed"
	}
}

func nglText(n int) string {
	switch n {
	case NGLAuto:
		return "auto"
	case NGLAll:
		return "all"
	}
	return fmt.Sprint(n)
}
