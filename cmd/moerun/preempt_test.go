package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestAsyncPreemptOffEnv(t *testing.T) {
	for _, c := range []struct {
		name    string
		environ []string
		want    []string // nil: unchanged
	}{
		{"no GODEBUG", []string{"HOME=/root", "PATH=/bin"}, []string{"HOME=/root", "PATH=/bin", "GODEBUG=asyncpreemptoff=1"}},
		{"empty GODEBUG", []string{"GODEBUG=", "HOME=/root"}, []string{"HOME=/root", "GODEBUG=asyncpreemptoff=1"}},
		{"other settings kept", []string{"GODEBUG=gctrace=1", "X=1"}, []string{"X=1", "GODEBUG=gctrace=1,asyncpreemptoff=1"}},
		{"first entry rules, all replaced", []string{"GODEBUG=madvdontneed=1", "Y=2", "GODEBUG=asyncpreemptoff=1"}, []string{"Y=2", "GODEBUG=madvdontneed=1,asyncpreemptoff=1"}},
		{"turned back on later in the list", []string{"GODEBUG=asyncpreemptoff=1,asyncpreemptoff=0"}, []string{"GODEBUG=asyncpreemptoff=1,asyncpreemptoff=0,asyncpreemptoff=1"}},
		{"explicitly on", []string{"GODEBUG=asyncpreemptoff=0"}, []string{"GODEBUG=asyncpreemptoff=0,asyncpreemptoff=1"}},
		{"not a prefix match", []string{"GODEBUG=asyncpreemptoff=10"}, []string{"GODEBUG=asyncpreemptoff=10,asyncpreemptoff=1"}},
		{"a space is part of the key", []string{"GODEBUG=gctrace=1, asyncpreemptoff=1"}, []string{"GODEBUG=gctrace=1, asyncpreemptoff=1,asyncpreemptoff=1"}},
		{"already off", []string{"A=1", "GODEBUG=gctrace=1,asyncpreemptoff=1"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, changed := asyncPreemptOffEnv(c.environ)
			if c.want == nil {
				if changed || !cmp.Equal(got, c.environ) {
					t.Fatalf("changed %v to %q, want it left alone", c.environ, got)
				}
				return
			}
			if !changed {
				t.Fatalf("%v reported as already off", c.environ)
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Fatalf("environment (-want +got):\n%s", diff)
			}
			// The re-executed moerun sees this environment and must not execute itself again.
			if again, changed := asyncPreemptOffEnv(got); changed {
				t.Fatalf("%q would be re-executed again as %q", got, again)
			}
		})
	}
}
