package placement

import (
	"strings"
	"testing"
)

func TestParseExpertCache(t *testing.T) {
	for in, want := range map[string]ExpertCache{"0": {}, "16": {Slots: 16}, "16:4": {Slots: 16, Swaps: 4}, "1:1": {Slots: 1, Swaps: 1}} {
		got, err := ParseExpertCache("--expert-cache", in)
		if err != nil || got != want {
			t.Errorf("ParseExpertCache(%q) = %+v, %v; want %+v", in, got, err, want)
		}
		if got.String() != in {
			t.Errorf("%+v prints as %q, parsed from %q", got, got.String(), in)
		}
	}
	for in, why := range map[string]string{"": "SLOTS", "-1": "SLOTS", "16:0": "SWAPS", "16:": "SWAPS", "x": "SLOTS", "16:2:3": "SWAPS", "70000": "65536"} {
		if _, err := ParseExpertCache("--expert-cache", in); err == nil || !strings.Contains(err.Error(), why) || !strings.Contains(err.Error(), "--expert-cache") {
			t.Errorf("ParseExpertCache(%q): %v, want an error naming the flag and %s", in, err, why)
		}
	}
}

func FuzzParseExpertCache(f *testing.F) {
	for _, s := range []string{"16", "16:4", "0", ":", "1:99999999999999999999", "-3:-3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseExpertCache("--expert-cache", s)
		if err != nil {
			return
		}
		if c.Slots < 0 || c.Slots > maxCacheSlots || c.Swaps < 0 || c.Swaps > maxCacheSlots {
			t.Fatalf("%q gave %+v", s, c)
		}
		if again, err := ParseExpertCache("--expert-cache", c.String()); err != nil || again != c {
			t.Fatalf("%q gave %+v, which prints as %q and reads back as %+v, %v", s, c, c.String(), again, err)
		}
	})
}

// TestParseOffloadMinBatch: GGML_OP_OFFLOAD_MIN_BATCH reads as C's atoi does.
func TestParseOffloadMinBatch(t *testing.T) {
	for in, want := range map[string]int{"32": 32, " 8": 8, "+16x": 16, "-4": -4, "": 0, "abc": 0, "12 34": 12, "99999999999999999999": 2147483647} {
		if got := ParseOffloadMinBatch(in); got != want {
			t.Errorf("ParseOffloadMinBatch(%q) = %d, want %d", in, got, want)
		}
	}
}
