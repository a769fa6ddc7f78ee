package placement

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// An expert selector narrows an -ot rule to some experts of the routed-expert stacks it
// matches (moerun's own; llama.cpp places whole tensors): PATTERN@EXPERTS=DEVICE puts those
// experts' slices of each matching ffn_*_exps stack on DEVICE, and leaves the stack's other
// experts to the rules after it (then the layer map), as if the rule matched only them.
// EXPERTS is ids and ranges joined by '+' (3+17+40-42), or hot:K, each layer's K most
// selected experts in the routing statistics Rules.HotStats. The selector is the text
// after the pattern's last '@' when that text reads as one; a pattern that must end in '@'
// and digits writes the '@' as [@].
type ExpertSelector struct {
	IDs []int // ascending, distinct; nil for hot:K
	Hot int   // K of hot:K, 0 otherwise
}

// maxSelectorID bounds the expert ids a selector may name (the largest MoE layers have a
// few hundred experts; the model's own count is checked when the rule is applied).
const maxSelectorID = 1 << 16

// splitSelector cuts an -ot pattern into its regex and its expert selector, if it ends in
// one (sel nil where the pattern has no '@' whose tail reads as a selector).
func splitSelector(pattern string) (regex string, sel *ExpertSelector, err error) {
	at := strings.LastIndexByte(pattern, '@')
	if at < 0 || !looksLikeSelector(pattern[at+1:]) {
		return pattern, nil, nil
	}
	sel, err = ParseExpertSelector(pattern[at+1:])
	if err != nil {
		return "", nil, err
	}
	if pattern[:at] == "" {
		return "", nil, fmt.Errorf("%q: an expert selector needs a pattern before its '@'", pattern)
	}
	return pattern[:at], sel, nil
}

// looksLikeSelector reports whether s is made of a selector's characters: digits, '-' and
// '+', or hot: and digits.
func looksLikeSelector(s string) bool {
	if rest, ok := strings.CutPrefix(s, "hot:"); ok {
		s = rest
	}
	return s != "" && strings.Trim(s, "0123456789+-") == ""
}

// ParseExpertSelector reads EXPERTS: ids and ranges joined by '+' (0-7+12), or hot:K.
func ParseExpertSelector(s string) (*ExpertSelector, error) {
	if k, ok := strings.CutPrefix(s, "hot:"); ok {
		n, err := strconv.Atoi(k)
		if err != nil || n < 1 || n > maxSelectorID {
			return nil, fmt.Errorf("expert selector %q: hot:K wants K, the experts per layer, from 1 to %d", s, maxSelectorID)
		}
		return &ExpertSelector{Hot: n}, nil
	}
	var ids []int
	for _, part := range strings.Split(s, "+") {
		lo, hi, isRange := strings.Cut(part, "-")
		first, err1 := strconv.Atoi(lo)
		last, err2 := first, error(nil)
		if isRange {
			last, err2 = strconv.Atoi(hi)
		}
		switch {
		case part == "" || err1 != nil || err2 != nil || first < 0 || last >= maxSelectorID:
			return nil, fmt.Errorf("expert selector %q: %q is not an expert id or a range FIRST-LAST of ids below %d", s, part, maxSelectorID)
		case last < first:
			return nil, fmt.Errorf("expert selector %q: the range %q runs backwards", s, part)
		}
		for e := first; e <= last; e++ {
			ids = append(ids, e)
		}
		if len(ids) > maxSelectorID {
			return nil, fmt.Errorf("expert selector %q: more than %d experts", s, maxSelectorID)
		}
	}
	slices.Sort(ids)
	return &ExpertSelector{IDs: slices.Compact(ids)}, nil
}

// String writes the selector as ParseExpertSelector reads it, runs as ranges.
func (s *ExpertSelector) String() string {
	if s.Hot > 0 {
		return fmt.Sprintf("hot:%d", s.Hot)
	}
	return expertList(s.IDs)
}

// experts is the selector's experts in layer il of a model with n experts per layer:
// its ids, or the layer's hot ones in stats.
func (s *ExpertSelector) experts(il, n int, stats *RoutingStats) ([]int, error) {
	if s.Hot == 0 {
		if last := s.IDs[len(s.IDs)-1]; last >= n {
			return nil, fmt.Errorf("expert %d: the model's layers have %d experts (0-%d)", last, n, n-1)
		}
		return s.IDs, nil
	}
	if stats == nil {
		return nil, fmt.Errorf("hot:%d needs routing statistics: give --hot-stats FILE (moerun run --expert-stats FILE records them)", s.Hot)
	}
	l := stats.Layers[il]
	if l == nil {
		return nil, fmt.Errorf("hot:%d: the routing statistics have no record of layer %d", s.Hot, il)
	}
	if len(l.Selected) != n {
		return nil, fmt.Errorf("hot:%d: the routing statistics' layer %d has %d experts, the model %d", s.Hot, il, len(l.Selected), n)
	}
	ids := make([]int, n)
	for i := range ids {
		ids[i] = i
	}
	// Most selected first; ties to the lower id.
	slices.SortStableFunc(ids, func(a, b int) int { return cmp.Compare(l.Selected[b], l.Selected[a]) })
	ids = ids[:min(s.Hot, n)]
	slices.Sort(ids)
	return ids, nil
}
