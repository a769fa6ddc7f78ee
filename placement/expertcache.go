package placement

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/gguf"
)

// ExpertCache is --expert-cache: how many experts of each MoE layer whose experts are in
// RAM under a GPU attention the GPU keeps in slots, refilled between passes from their
// recent use, and how many a layer may swap between two passes (0: the runtime's default).
// The zero value is no cache; Slots ExpertCacheAuto asks Place for as many as the GPUs'
// free memory holds.
type ExpertCache struct {
	Slots, Swaps int
}

// ExpertCacheAuto is the Slots of --expert-cache auto.
const ExpertCacheAuto = -1

// maxCacheSlots bounds the slots a flag may ask for (the largest MoE layers have 512
// experts; the model's own count is checked when it is loaded).
const maxCacheSlots = 1 << 16

// ParseExpertCache reads SLOTS or SLOTS:SWAPS, SLOTS a count (0: no cache) or auto.
func ParseExpertCache(flag, value string) (ExpertCache, error) {
	slots, swaps, hasSwaps := strings.Cut(value, ":")
	c := ExpertCache{Slots: ExpertCacheAuto}
	var err error
	if slots != "auto" {
		if c.Slots, err = strconv.Atoi(slots); err != nil || c.Slots < 0 || c.Slots > maxCacheSlots {
			return ExpertCache{}, argError(flag, fmt.Sprintf("%q: want SLOTS or SLOTS:SWAPS, SLOTS auto or a count of experts per layer from 0 to %d", value, maxCacheSlots))
		}
	}
	if hasSwaps {
		if c.Swaps, err = strconv.Atoi(swaps); err != nil || c.Swaps < 1 || c.Swaps > maxCacheSlots {
			return ExpertCache{}, argError(flag, fmt.Sprintf("%q: SWAPS is the most experts a layer refills between two passes, at least 1", value))
		}
	}
	return c, nil
}

func (c ExpertCache) String() string {
	slots := strconv.Itoa(c.Slots)
	if c.Slots == ExpertCacheAuto {
		slots = "auto"
	}
	if c.Swaps == 0 {
		return slots
	}
	return fmt.Sprintf("%s:%d", slots, c.Swaps)
}

// autoExpertCache sizes --expert-cache auto for the placement cfg: the most slots per
// layer (fewer than the layer's experts) that every GPU holding slots has room for beside
// the rest of the plan, keeping -fitt's free memory whether --fit is on or not. The cost of
// a slot on each GPU is measured by planning one and two slots. It fails where a GPU that
// would hold slots has no known capacity, and gives 0 where none fits or nothing is cached.
func (p *planner) autoExpertCache(cfg config) (int, error) {
	var plans [3]*Plan
	for s := range plans {
		p.r.ExpertCache.Slots = s
		lay, err := p.layout(cfg)
		if err != nil {
			return 0, err
		}
		plans[s] = p.report(lay)
	}
	slots, cached := p.hp.nExpert-1, false
	for i, d := range plans[0].Devices {
		one, two := plans[1].Devices[i].ExpertCache, plans[2].Devices[i].ExpertCache
		per := two - one
		if per <= 0 {
			continue
		}
		cached = true
		if d.Capacity() <= 0 {
			return 0, fmt.Errorf("--expert-cache auto: %s's free memory is unknown: give the slots as a number, or the GPU's memory (--gpu, --device-mem)", d.Device.Name)
		}
		margin := d.Margin
		if id := slices.Index(plans[0].Settings.ModelDevices, d.Device.Name); id >= 0 {
			margin = max(margin, p.fitTarget(id))
		}
		room := d.Capacity() - margin - d.Total - (one - per) // the tables cost once
		slots = min(slots, int(max(room, 0)/per))
	}
	if !cached {
		return 0, nil
	}
	return slots, nil
}

// expertCache adds the memory --expert-cache takes to the layout, as the runtime allocates
// it (moe's EnableExpertCache): for each MoE layer whose router is on a GPU and whose
// routed experts are all in the host's memory (mapped or copied, not repacked), the slots
// of its gate, up and down stacks and float32 rows of its expert biases on the router's
// GPU, and two tables of one int32 per expert, one on that GPU and one on the host. The
// slots count as weights, the tables too.
func (p *planner) expertCache(lay *layout) {
	slots := int64(p.r.ExpertCache.Slots)
	experts := int64(p.hp.nExpert)
	if slots <= 0 || experts <= 0 {
		return
	}
	type layerUse struct {
		router   int   // the router's device, -1 where none was seen
		onHost   bool  // every routed expert tensor in the host's mapped or copied memory
		perSlot  int64 // bytes of one slot
		hasStack bool
	}
	layers := map[int]*layerUse{}
	use := func(l int) *layerUse {
		if layers[l] == nil {
			layers[l] = &layerUse{router: -1, onHost: true}
		}
		return layers[l]
	}
	for i := range p.tensors {
		t, a := &p.tensors[i], lay.assign[i]
		if t.layer < 0 || t.skip || a.dev < 0 {
			continue
		}
		switch {
		case strings.HasSuffix(t.info.Name, ".ffn_gate_inp.weight"):
			use(t.layer).router = a.dev
		case t.class == gguf.ClassRoutedExpert:
			u := use(t.layer)
			_, split := lay.shares[i] // a layer split by expert selectors is not cached
			u.onHost = u.onHost && !split && a.dev == p.cpu && a.storage != StorageRepacked
			if strings.HasSuffix(t.info.Name, ".bias") {
				u.perSlot += 4 * t.info.Shape[0]
			} else {
				u.perSlot += t.info.Size / experts
				u.hasStack = true
			}
		}
	}
	for _, u := range layers {
		if u.router < 0 || !u.onHost || !u.hasStack || p.devs[u.router].Kind != backend.KindGPU {
			continue
		}
		m := &lay.mem[u.router]
		cache := slots*u.perSlot + 4*experts
		m.weights += cache
		m.expertCache += cache
		lay.mem[p.cpu].weights += 4 * experts
	}
}
