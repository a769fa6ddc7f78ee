package tensor

// ScalarVecDot is the scalar kernel of t, the reference its vector kernel (if one is
// installed) is held to: ggml's generic kernels' summation order.
func ScalarVecDot(t Type) func(n int, w, a []byte) float32 {
	if f, ok := scalarVecDot[t]; ok {
		return f
	}
	return traits[t].VecDot
}
