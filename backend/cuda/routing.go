//go:build cuda

package cuda

import (
	"github.com/moerun/moerun/backend/cuda/kernels"
	"gorgonia.org/cu"
)

// routing is MulMatID's work list for the GPU: the (token, slot) pairs that use an expert,
// sorted by expert with a counting sort, cut into groups of at most kernels.GroupSize pairs
// of one expert. packed holds, back to back so that one copy moves them, the pair indices
// (sel), the groups' start offsets into sel plus the end (gstart) and each group's expert
// (gexpert); the kernels read them through the pointers offsets returns.
type routing struct {
	counts, next []int32
	sel          []int32
	groupStart   []int32
	groupExpert  []int32
	packed       []int32
}

// group builds the work list for ids (k per token, -1 for unused slots, each below
// experts: the caller checked them).
func (r *routing) group(ids []int32, experts int) {
	r.counts = resize(r.counts, experts+1)
	clear(r.counts)
	for _, e := range ids {
		if e >= 0 {
			r.counts[e+1]++
		}
	}
	for e := range experts {
		r.counts[e+1] += r.counts[e]
	}
	// counts[e] is where expert e's pairs start in sel.
	used := int(r.counts[experts])
	r.sel = resize(r.sel, used)
	r.next = append(r.next[:0], r.counts[:experts]...)
	for p, e := range ids {
		if e >= 0 {
			r.sel[r.next[e]] = int32(p)
			r.next[e]++
		}
	}
	r.groupStart, r.groupExpert = r.groupStart[:0], r.groupExpert[:0]
	for e := range experts {
		for s := r.counts[e]; s < r.counts[e+1]; s += kernels.GroupSize {
			r.groupStart = append(r.groupStart, s)
			r.groupExpert = append(r.groupExpert, int32(e))
		}
	}
	r.groupStart = append(r.groupStart, int32(used))
	r.packed = append(append(append(r.packed[:0], r.sel...), r.groupStart...), r.groupExpert...)
}

// offsets returns the device addresses of sel, gstart and gexpert when packed was copied
// to base.
func (r *routing) offsets(base cu.DevicePtr) (sel, gstart, gexpert uint64) {
	sel = uint64(base)
	gstart = sel + 4*uint64(len(r.sel))
	gexpert = gstart + 4*uint64(len(r.groupStart))
	return sel, gstart, gexpert
}

// resize returns s with length n, reusing its array when it is big enough.
func resize(s []int32, n int) []int32 {
	if cap(s) < n {
		return make([]int32, n)
	}
	return s[:n]
}
