//go:build race

package jinja

// raceEnabled: the race detector slows the interpreter about tenfold and allocates on its
// own, so the limit tests' bounds on time and allocation do not apply.
const raceEnabled = true
