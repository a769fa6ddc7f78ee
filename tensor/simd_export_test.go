package tensor

import "reflect"

// ScalarVecDot is the generic kernel of t, the reference the other levels' kernels are
// held to: ggml's generic kernels' summation order.
func ScalarVecDot(t Type) func(n int, w, a []byte) float32 { return traits[t].VecDot }

// scalarVecDots holds, for each type whose VecDot the active level replaced, the generic
// kernel it replaced: empty at the generic level.
func scalarVecDots() map[Type]func(n int, w, a []byte) float32 {
	replaced := map[Type]func(n int, w, a []byte) float32{}
	for t, tr := range traits {
		fast := active.traits[t].VecDot
		if tr.VecDot != nil && reflect.ValueOf(fast).Pointer() != reflect.ValueOf(tr.VecDot).Pointer() {
			replaced[t] = tr.VecDot
		}
	}
	return replaced
}
