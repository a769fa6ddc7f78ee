package moe

import (
	"fmt"
	"slices"
	"strings"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/placement"
	"github.com/moerun/moerun/tensor"
)

// expertShare is the part of a layer's routed experts that one device holds: all of them,
// unless the plan splits the layer's stacks by expert (an -ot rule with an expert
// selector, issue 38), when each device holding some has a share. A share's stacks number
// its experts locally, and table turns the router's expert ids into those numbers (-1 for
// an expert held elsewhere), so that each device multiplies only the slots routed to its
// own experts; the other slots' outputs are zero, and the shares' outputs add up to the
// whole stack's exactly.
type expertShare struct {
	gate, up, down weight
	// gpt-oss's expert biases, numbered as the stacks; absent in other models.
	gateBias, upBias, downBias param
	// table is an I32 row on the share's device, one entry per expert of the model; the
	// zero value where the share holds every expert, numbered as in the file.
	table value
	// experts lists the experts the share holds (nil: all).
	experts []int
	// local is the share's numbering: the experts its stacks hold, in order, where they hold
	// only the share's (nil where they are the whole stacks, numbered as in the file: a
	// share of the host that views the mapping).
	local []int
}

// stackShare is one device's part of one expert stack as the binder loaded it.
type stackShare struct {
	w       weight
	experts []int // the experts of the plan's share (nil: all)
	local   []int // the experts the weight holds, in order (nil: all, as numbered in the file)
}

// expertStack loads a stack of routed experts (GGUF shape [cols, rows, experts]): whole as
// matrix loads it, or, where the plan splits it by expert, one weight per share on the
// share's device. A share other than the host's mapped view holds its experts' slices
// alone, side by side.
func (b *binder) expertStack(name string, shape ...int) ([]stackShare, error) {
	shares, split := b.shares[name]
	if !split {
		w, err := b.matrix(name, shape...)
		return []stackShare{{w: w}}, err
	}
	ti, err := b.lookup(name, shape...)
	if err != nil {
		return nil, err
	}
	out := make([]stackShare, 0, len(shares))
	for _, u := range shares {
		dev, err := b.device(name, u)
		if err != nil {
			return nil, err
		}
		be := b.devs[dev]
		w, data, local, err := b.src.share(be, ti, u)
		if err != nil {
			return nil, err
		}
		wt := weight{w: w, on: be, dev: dev}
		if u.Storage != placement.StorageRepacked {
			wt.host = data
		}
		out = append(out, stackShare{w: wt, experts: u.Experts, local: local})
	}
	return out, nil
}

// expertBias loads an expert stack's bias ([cols, experts]) for each share: rows in the
// share's numbering, on the share's device. An unsplit stack's bias goes where the plan
// puts it, as param does.
func (b *binder) expertBias(name string, cols int, shares []expertShare) ([]param, error) {
	if len(shares) == 1 && shares[0].experts == nil {
		p, err := b.param(name, cols, b.experts)
		return []param{p}, err
	}
	v, err := b.vector(name, cols, b.experts)
	if err != nil {
		return nil, err
	}
	out := make([]param, len(shares))
	for i, s := range shares {
		rows := v
		if s.local != nil {
			rows = make([]float32, 0, cols*len(s.local))
			for _, e := range s.local {
				rows = append(rows, v[e*cols:(e+1)*cols]...)
			}
		}
		if out[i], err = b.uploadTo(name, s.gate.dev, rows, cols, len(rows)/cols); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// bindExperts binds block il's gate, up and down stacks of routed experts as shares (one,
// unless the plan splits them by expert). A split must give the three stacks, and their
// biases where the model has them, the same experts on the same devices: a device computes
// an expert's whole network. The share on the router's device comes first, so that its
// products are issued (and, on a GPU, run) before the host computes its own.
func bindExperts(c *Config, b *binder, il int, routerDev int, biases bool) ([]expertShare, error) {
	gate, err := b.expertStack(blk(il, "ffn_gate_exps.weight"), c.Embd, c.FFExp, c.Router.Experts)
	if err != nil {
		return nil, err
	}
	up, err := b.expertStack(blk(il, "ffn_up_exps.weight"), c.Embd, c.FFExp, c.Router.Experts)
	if err != nil {
		return nil, err
	}
	down, err := b.expertStack(blk(il, "ffn_down_exps.weight"), c.FFExp, c.Embd, c.Router.Experts)
	if err != nil {
		return nil, err
	}
	split := len(gate) > 1 || gate[0].experts != nil
	names := []string{"ffn_up_exps.weight", "ffn_down_exps.weight"}
	for i, s := range [][]stackShare{up, down} {
		if !sameShares(gate, s) {
			return nil, fmt.Errorf("blk.%d: the plan splits ffn_gate_exps.weight by expert as %s and %s as %s: give a layer's expert stacks the same expert selectors",
				il, describeShares(gate), names[i], describeShares(s))
		}
	}
	shares := make([]expertShare, len(gate))
	for i := range gate {
		shares[i] = expertShare{gate: gate[i].w, up: up[i].w, down: down[i].w, experts: gate[i].experts, local: gate[i].local}
	}
	if biases {
		for _, p := range []struct {
			name string
			cols int
			set  func(s *expertShare, p param)
		}{
			{"ffn_gate_exps.bias", c.FFExp, func(s *expertShare, p param) { s.gateBias = p }},
			{"ffn_up_exps.bias", c.FFExp, func(s *expertShare, p param) { s.upBias = p }},
			{"ffn_down_exps.bias", c.Embd, func(s *expertShare, p param) { s.downBias = p }},
		} {
			name := blk(il, p.name)
			bias, stacks := b.planShares(name), b.planShares(blk(il, "ffn_gate_exps.weight"))
			if b.has(name) && (split || len(bias) > 1 || bias[0].Experts != nil) && !samePlanShares(bias, stacks) {
				return nil, fmt.Errorf("%s: the plan puts it on %s and the layer's expert stacks on %s: give a layer's expert biases the same expert selectors as its stacks",
					name, describePlanShares(bias), describePlanShares(stacks))
			}
			ps, err := b.expertBias(name, p.cols, shares)
			if err != nil {
				return nil, err
			}
			for i := range shares {
				p.set(&shares[i], ps[i])
			}
		}
	}
	if !split {
		return shares, nil
	}
	for i := range shares {
		if shares[i].table, err = b.expertTable(blk(il, "ffn_gate_exps.weight"), &shares[i]); err != nil {
			return nil, err
		}
	}
	slices.SortStableFunc(shares, func(x, y expertShare) int {
		return boolRank(x.gate.dev != routerDev) - boolRank(y.gate.dev != routerDev)
	})
	return shares, nil
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// expertTable uploads a share's table to its device: for each expert of the model its
// index in the share's stacks, -1 where another device holds it.
func (b *binder) expertTable(name string, s *expertShare) (value, error) {
	table := make([]int32, b.experts)
	for i := range table {
		table[i] = -1
	}
	for _, e := range s.experts {
		table[e] = int32(e)
	}
	for i, e := range s.local {
		table[e] = int32(i)
	}
	t, err := newTable(s.gate.on, table)
	if err != nil {
		return value{}, fmt.Errorf("tensor %s: its experts' table: %w", name, err)
	}
	return t, nil
}

// newTable puts an I32 row of its own on be: an expert share's table.
func newTable(be backend.Backend, table []int32) (value, error) {
	buf, err := be.Alloc(int64(4 * len(table)))
	if err != nil {
		return value{}, err
	}
	t, err := backend.NewTensor(buf, 0, tensor.I32, len(table), 1)
	if err == nil {
		err = be.Set(t, int32Bytes(table))
	}
	return t, err
}

// sameShares reports whether two stacks' shares hold the same experts on the same devices.
func sameShares(a, b []stackShare) bool {
	return slices.EqualFunc(a, b, func(x, y stackShare) bool {
		return x.w.dev == y.w.dev && slices.Equal(x.experts, y.experts) && slices.Equal(x.local, y.local)
	})
}

// describeShares writes a stack's shares as "CUDA0 (experts 0-3), CPU (28 experts)".
func describeShares(s []stackShare) string {
	parts := make([]string, len(s))
	for i, sh := range s {
		n := "all experts"
		if sh.experts != nil {
			n = fmt.Sprintf("%d experts", len(sh.experts))
		}
		parts[i] = fmt.Sprintf("%s (%s)", sh.w.on.Device().Name, n)
	}
	return strings.Join(parts, ", ")
}

// planShares is the plan's entries for a tensor: its shares where the plan splits it by
// expert, else its one entry.
func (b *binder) planShares(name string) []*placement.TensorUse {
	if shares, ok := b.shares[name]; ok {
		return shares
	}
	return []*placement.TensorUse{b.uses[name]}
}

func samePlanShares(a, b []*placement.TensorUse) bool {
	return slices.EqualFunc(a, b, func(x, y *placement.TensorUse) bool {
		return x != nil && y != nil && x.Device == y.Device && slices.Equal(x.Experts, y.Experts)
	})
}

// describePlanShares writes plan entries as "CUDA0 (4 experts), CPU (28 experts)".
func describePlanShares(us []*placement.TensorUse) string {
	parts := make([]string, len(us))
	for i, u := range us {
		switch {
		case u == nil:
			parts[i] = "no device"
		case u.Experts == nil:
			parts[i] = u.Device + " (all experts)"
		default:
			parts[i] = fmt.Sprintf("%s (%d experts)", u.Device, len(u.Experts))
		}
	}
	return strings.Join(parts, ", ")
}
