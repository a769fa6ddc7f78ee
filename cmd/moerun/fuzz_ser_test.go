package main

import (
	"math"
	"strconv"
	"strings"
	"testing"
)

// FuzzParseSER: parseSER reads run's and serve's -ser KMIN,T; parseSERList reads bench's
// lists of pairs. Neither panics; errors quote the text; what parseSER accepts has KMIN ≥ 0
// and T ≥ 0 (never NaN), and the same pair given to bench reads the same (bench also takes
// KMIN -1, and refuses an infinite T, which parseSER takes from "inf"); each of bench's
// settings is labelled with a pair that reads back as that setting.
func FuzzParseSER(f *testing.F) {
	for _, s := range []string{"", "6,0.5", "2,1", "7,1", "4,1", " 3 , 0.5 ", "6", "6,0.5,4", "6,0.5,4,1",
		"-1,0", "-1,0,6,0.5,4,1,2,1", "6,-0.5", "6,NaN", "6,inf", "6,1e39", "6,0x1p-2", "1_0,1", "99999999999999999999,1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ser, err := parseSER(s)
		if err != nil {
			if !strings.Contains(err.Error(), "-ser "+strconv.Quote(s)) {
				t.Fatalf("error %q does not quote %q", err, s)
			}
		} else {
			if ser.MinExperts < 0 || ser.Threshold < 0 || math.IsNaN(float64(ser.Threshold)) {
				t.Fatalf("%q: %+v", s, ser)
			}
			if s == "" && ser.Enabled() {
				t.Fatalf("no -ser enables SER: %+v", ser)
			}
		}
		list, lerr := parseSERList([]string{s})
		if lerr != nil {
			if !strings.Contains(lerr.Error(), "-ser "+strconv.Quote(s)) {
				t.Fatalf("bench's error %q does not quote %q", lerr, s)
			}
		}
		if s != "" && !strings.Contains(s[strings.IndexByte(s, ',')+1:], ",") { // one pair at most
			inf := err == nil && math.IsInf(float64(ser.Threshold), 0)
			switch {
			case err == nil && !inf && (lerr != nil || len(list) != 1 || list[0].ser != ser):
				t.Fatalf("%q: run reads %+v, bench %v %v", s, ser, list, lerr)
			case lerr == nil && len(list) == 1 && list[0].ser.MinExperts > 0 && err != nil:
				t.Fatalf("%q: bench reads %+v, run fails: %v", s, list[0].ser, err)
			}
		}
		for _, b := range list {
			back, err := parseSERList([]string{b.label})
			if err != nil || len(back) != 1 || back[0].ser != b.ser {
				t.Fatalf("%q: setting %+v labelled %q reads back as %v, %v", s, b.ser, b.label, back, err)
			}
		}
	})
}
