package tensor

import (
	"fmt"
	"math/bits"
)

// ArgsortDesc fills idx with the indices of x by descending value, as ggml_argsort(x,
// GGML_SORT_ORDER_DESC) does on the CPU; the first k of them are ggml_argsort_top_k, the
// experts a MoE router picks. len(idx) must equal len(x).
//
// Ties: ggml sorts with std::sort, which is not stable, so which of two equal values comes
// first depends on the algorithm. This is libstdc++'s std::sort step for step (introsort:
// median-of-three quicksort down to runs of 16, a heap sort if the recursion gets too deep,
// then one insertion sort), so ties come out as in llama.cpp built with GCC. For up to 16
// values that is the order of the indices (the insertion sort is stable); beyond, it is
// whatever the partitioning leaves. NaNs make the order unspecified, as in ggml, but never
// make this read outside x.
func ArgsortDesc(idx []int32, x []float32) {
	if len(idx) != len(x) {
		panic(fmt.Sprintf("tensor.ArgsortDesc: %d indices for %d values", len(idx), len(x)))
	}
	for i := range idx {
		idx[i] = int32(i)
	}
	s := introsort{idx: idx, x: x}
	if len(idx) > 1 {
		s.loop(0, len(idx), 2*(bits.Len(uint(len(idx)))-1))
		s.finalInsertionSort()
	}
}

// introsort sorts idx by x[idx[i]] descending. Positions are indices into idx.
type introsort struct {
	idx []int32
	x   []float32
}

// threshold is libstdc++'s _S_threshold: runs this short are left to the insertion sort.
const threshold = 16

// before is the comparator: index a sorts before index b.
func (s *introsort) before(a, b int32) bool { return s.x[a] > s.x[b] }

func (s *introsort) loop(first, last, depth int) {
	for last-first > threshold {
		if depth == 0 {
			s.heapSort(first, last)
			return
		}
		depth--
		cut := s.partitionPivot(first, last)
		s.loop(cut, last, depth)
		last = cut
	}
}

// partitionPivot moves the median of idx[first+1], the middle and the last to first and
// partitions the rest around it.
func (s *introsort) partitionPivot(first, last int) int {
	mid := first + (last-first)/2
	a, b, c := first+1, mid, last-1
	idx := s.idx
	var m int
	switch {
	case s.before(idx[a], idx[b]):
		switch {
		case s.before(idx[b], idx[c]):
			m = b
		case s.before(idx[a], idx[c]):
			m = c
		default:
			m = a
		}
	case s.before(idx[a], idx[c]):
		m = a
	case s.before(idx[b], idx[c]):
		m = c
	default:
		m = b
	}
	idx[first], idx[m] = idx[m], idx[first]
	return s.partition(first+1, last, first)
}

// partition is __unguarded_partition. The bounds in the scans never bind for a consistent
// comparator (the median of three stops them); they only keep NaNs from running off the ends.
func (s *introsort) partition(lo, hi, pivot int) int {
	idx, p := s.idx, s.idx[pivot]
	for {
		for lo < len(idx)-1 && s.before(idx[lo], p) {
			lo++
		}
		hi--
		for hi > pivot && s.before(p, idx[hi]) {
			hi--
		}
		if lo >= hi {
			return lo
		}
		idx[lo], idx[hi] = idx[hi], idx[lo]
		lo++
	}
}

// finalInsertionSort is __final_insertion_sort over the whole slice.
func (s *introsort) finalInsertionSort() {
	n := len(s.idx)
	if n <= threshold {
		s.insertionSort(0, n)
		return
	}
	s.insertionSort(0, threshold)
	for i := threshold; i < n; i++ {
		s.linearInsert(i)
	}
}

func (s *introsort) insertionSort(first, last int) {
	idx := s.idx
	for i := first + 1; i < last; i++ {
		if v := idx[i]; s.before(v, idx[first]) {
			copy(idx[first+1:i+1], idx[first:i])
			idx[first] = v
		} else {
			s.linearInsert(i)
		}
	}
}

// linearInsert moves idx[i] left past the elements it sorts before.
func (s *introsort) linearInsert(i int) {
	idx := s.idx
	v := idx[i]
	for i > 0 && s.before(v, idx[i-1]) {
		idx[i] = idx[i-1]
		i--
	}
	idx[i] = v
}

// heapSort is std::__partial_sort(first, last, last): make a heap, then pop it.
func (s *introsort) heapSort(first, last int) {
	h := s.idx[first:last]
	n := len(h)
	for parent := (n - 2) / 2; n >= 2; parent-- {
		s.adjustHeap(h, parent, n, h[parent])
		if parent == 0 {
			break
		}
	}
	for end := n - 1; end > 0; end-- {
		v := h[end]
		h[end] = h[0]
		s.adjustHeap(h, 0, end, v)
	}
}

// adjustHeap is std::__adjust_heap: sift the hole at hole down to a leaf, then push v up.
func (s *introsort) adjustHeap(h []int32, hole, n int, v int32) {
	top, child := hole, hole
	for child < (n-1)/2 {
		child = 2 * (child + 1)
		if s.before(h[child], h[child-1]) {
			child--
		}
		h[hole] = h[child]
		hole = child
	}
	if n&1 == 0 && child == (n-2)/2 {
		child = 2 * (child + 1)
		h[hole] = h[child-1]
		hole = child - 1
	}
	// __push_heap with the comparator "parent sorts before v".
	for parent := (hole - 1) / 2; hole > top && s.before(h[parent], v); parent = (hole - 1) / 2 {
		h[hole] = h[parent]
		hole = parent
	}
	h[hole] = v
}
