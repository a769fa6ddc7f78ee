package placement

import (
	"fmt"
	"strconv"
	"strings"
)

// ExpertCache is --expert-cache: how many experts of each MoE layer whose experts are in
// RAM under a GPU attention the GPU keeps in slots, refilled between passes from their
// recent use, and how many a layer may swap between two passes (0: the runtime's default).
// The zero value is no cache.
type ExpertCache struct {
	Slots, Swaps int
}

// maxCacheSlots bounds the slots a flag may ask for (the largest MoE layers have 512
// experts; the model's own count is checked when it is loaded).
const maxCacheSlots = 1 << 16

// ParseExpertCache reads SLOTS or SLOTS:SWAPS (0 slots: no cache).
func ParseExpertCache(flag, value string) (ExpertCache, error) {
	slots, swaps, hasSwaps := strings.Cut(value, ":")
	var c ExpertCache
	var err error
	if c.Slots, err = strconv.Atoi(slots); err != nil || c.Slots < 0 || c.Slots > maxCacheSlots {
		return ExpertCache{}, argError(flag, fmt.Sprintf("%q: want SLOTS or SLOTS:SWAPS, SLOTS a count of experts per layer from 0 to %d", value, maxCacheSlots))
	}
	if hasSwaps {
		if c.Swaps, err = strconv.Atoi(swaps); err != nil || c.Swaps < 1 || c.Swaps > maxCacheSlots {
			return ExpertCache{}, argError(flag, fmt.Sprintf("%q: SWAPS is the most experts a layer refills between two passes, at least 1", value))
		}
	}
	return c, nil
}

func (c ExpertCache) String() string {
	if c.Swaps == 0 {
		return strconv.Itoa(c.Slots)
	}
	return fmt.Sprintf("%d:%d", c.Slots, c.Swaps)
}
