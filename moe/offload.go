package moe

import (
	"fmt"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/placement"
)

// Op offload, as llama.cpp's scheduler does it: a matmul (or a stack of experts' matmul)
// whose weight the host holds runs, for a batch of GGML_OP_OFFLOAD_MIN_BATCH tokens (32 by default) or more, on the
// first GPU that offers it, the weight copied into staging memory there first. A prompt
// batch reads each weight once for many tokens, so copying it costs less than the CPU's
// compute. Of a stack of experts only those the batch routes to are copied, which needs
// the routing on the host: the ids are read back (one wait) once per MoE layer, as ggml's
// scheduler reads them before it copies a MUL_MAT_ID's weight. A device-side gather would
// save that wait but needs the device to read host memory, which a file mapping is not.
//
// Which weights qualify follows the plan: those it puts on the host in host memory —
// mapped, copied, or pinned — and not in the CPU's repacked layout (--no-host with a type
// the CPU repacks), which ggml keeps in a buffer that is not host memory and does not
// offload. Placement reserves the staging memory (DeviceUse.Staging); without a
// reservation, or with --no-op-offload, nothing is offloaded.

// stagingAlign is where in the staging memory each staged weight starts: a multiple of
// 256 bytes, as the device's own allocations (cuMemAlloc) start, which its kernels may
// rely on.
const stagingAlign = 256

// opOffload is the GPU that runs large batches' matmuls of host-held weights, and its
// staging memory.
type opOffload struct {
	dev    int // its index among the model's devices
	stager backend.Stager
	// buf is placement's Staging bytes, room for a part's two largest weights, and
	// stagingAlign more for the second one's start.
	buf backend.Buffer
	// minBatch is the fewest tokens whose matmuls go to the GPU: the plan's
	// (GGML_OP_OFFLOAD_MIN_BATCH, as the CUDA backend's op_offload_min_batch_size).
	minBatch int
	// allExperts: copy whole expert stacks, not only the routed experts (-no-ooae).
	allExperts bool
}

// newOpOffload sets up the plan's op offload: the device placement reserved staging
// memory on, if its backend can stage weights; nil where there is none.
func newOpOffload(plan *placement.Plan, backends []backend.Backend) (*opOffload, error) {
	if !plan.Settings.OpOffload {
		return nil, nil
	}
	for _, d := range plan.Devices {
		if d.Staging <= 0 {
			continue
		}
		for i, be := range backends {
			stager, ok := be.(backend.Stager)
			if be.Device().Name != d.Device.Name || !ok || !be.Device().OffloadsOps {
				continue
			}
			buf, err := be.Alloc(d.Staging + stagingAlign)
			if err != nil {
				return nil, fmt.Errorf("op offload's staging memory on %s: %w", d.Device.Name, err)
			}
			return &opOffload{dev: i, stager: stager, buf: buf, minBatch: plan.Settings.OpOffloadMinBatch, allExperts: plan.Settings.OffloadAllExperts}, nil
		}
	}
	return nil, nil
}

// close releases the staging memory.
func (o *opOffload) close(backends []backend.Backend) error {
	if o == nil {
		return nil
	}
	return backends[o.dev].Free(o.buf)
}

// runsOn is the device that runs op (a matmul or a stack of experts' matmul) of w over a
// batch of tokens: the offload GPU where w qualifies, fits its staging memory and the GPU
// computes w's type, else w's own device.
func (c *pass) runsOn(w weight, op backend.Op, tokens int) int {
	o := c.m.offload
	if o == nil || w.host == nil || tokens < o.minBatch || int64(len(w.host)) > o.buf.Size() || !c.backendOf(o.dev).Supports(op, w.w.Type()) {
		return w.dev
	}
	return o.dev
}

// fitStaging reports whether the weights of ws that run on dev without being held there
// fit in the staging memory together.
func (c *pass) fitStaging(dev int, ws []weight) bool {
	var n int64
	for _, w := range ws {
		if w.dev != dev {
			n = alignStaging(n) + int64(len(w.host))
		}
	}
	return n == 0 || n <= c.m.offload.buf.Size()
}

// resident is w as the backend of dev computes on it: w itself where dev holds it, else w
// staged there from byte *off of the staging memory, which advances past it. Of a stack
// of experts only those routed marks are copied (all where routed is nil), consecutive
// ones as one span; the others' bytes are whatever an earlier staging left, which no
// routed slot reads.
func (c *pass) resident(dev int, w weight, off *int64, routed []bool) backend.Weight {
	if c.err != nil || dev == w.dev {
		return w.w
	}
	var spans [][2]int64 // nil: the whole weight
	if routed != nil {
		size := int64(len(w.host) / w.w.Experts())
		c.spans = c.spans[:0]
		for e, used := range routed {
			switch {
			case !used:
			case len(c.spans) > 0 && c.spans[len(c.spans)-1][1] == int64(e)*size:
				c.spans[len(c.spans)-1][1] += size
			default:
				c.spans = append(c.spans, [2]int64{int64(e) * size, int64(e+1) * size})
			}
		}
		spans = c.spans
	}
	o := c.m.offload
	*off = alignStaging(*off)
	shape := []int64{int64(w.w.Cols()), int64(w.w.Rows()), int64(w.w.Experts())}
	staged, err := o.stager.Stage(o.buf, *off, w.w.Name(), w.w.Type(), shape, w.host, spans)
	c.fail(err)
	*off += int64(len(w.host))
	return staged
}

// alignStaging is off rounded up to stagingAlign.
func alignStaging(off int64) int64 { return (off + stagingAlign - 1) &^ (stagingAlign - 1) }

// routeExperts sets c.routed for an MoE layer whose stack of experts w multiplies n
// tokens by ids: the experts ids select where w runs on another device for this batch (op
// offload), so that only those are staged; nil where w runs where it is held, or where the
// plan stages whole stacks (-no-ooae). The ids are read to the host for it.
func (c *pass) routeExperts(ids value, w weight, n int) {
	c.routed = nil
	if c.err != nil || c.runsOn(w, backend.OpMulMatID, n) == w.dev || c.m.offload != nil && c.m.offload.allExperts {
		return
	}
	c.hostIDs = grow(c.hostIDs, ids.Elements())
	c.readIDs(c.hostIDs, ids)
	c.routedBuf = grow(c.routedBuf, w.w.Experts())
	clear(c.routedBuf)
	for _, id := range c.hostIDs {
		if id >= 0 && int(id) < len(c.routedBuf) {
			c.routedBuf[id] = true
		}
	}
	c.routed = c.routedBuf
}
