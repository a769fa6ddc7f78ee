//go:build goexperiment.simd && amd64

package tensor

import "unsafe"

// Q4_0, Q5_0, Q8_0, MXFP4 and IQ4_XS dot products on AVX-512 with VNNI
// (simd_legacy_vnni_amd64.s): the AVX-512 level's in place of the AVX2 kernels where the
// CPU has VNNI.
//
// The AVX2 kernels of these formats are bound by their one chain of FMAs: each 32-value
// block adds d·float(lanes) to the same eight float lanes, so a row costs at least an FMA
// latency per block however little the block's integers cost. The order of that chain is
// the kernels' bits, so a row cannot be split; instead the rows kernel (dotRowsOne, which
// the decode mat-vec and, token by token, prefill tiles run) takes four rows side by side
// (a 512-bit register holds two rows' eight lanes), and the Q8_0 four-token kernel a
// tile's rows one at a time against four vectors, each half register taking the AVX2
// kernel's steps. VPDPBUSD adds
// four unsigned × signed byte products into each 32-bit lane, the same four values (so the
// same exact integer) as the AVX2 kernels' VPMADDUBSW and VPMADDWD, and the lanes are
// reduced in sumLanes' order: the same bits (TestLegacyVNNIMatchesAVX2).
//
// A lone row (VecDot) runs in both halves of the rows kernel, still one FMA chain: on a
// cache-hot 4096-value row that takes Q4_0 261 ns against the AVX2 kernel's 272, MXFP4
// 273 against 300, but Q8_0 291 against 216 (its AVX2 kernel is lighter), so Q8_0 keeps
// its AVX2 VecDot. Sixteen rows: Q4_0 1.67 against 4.59 µs, Q8_0 2.16 against 3.95,
// MXFP4 1.88 against 4.81 (BenchmarkLegacyVNNI, medians of 6 alternating runs).
//
// IQ4_XS (256-value blocks of eight 32-value sub-blocks, against Q8_K) borrows their
// sub-block unpacking in a one-row kernel shaped as Q4_K's (simd_vnni_amd64.s): its AVX2
// kernel was arithmetic-bound. BenchmarkMatVec, 2 threads: 4096×4096 (L3-resident)
// 14.9-17.9 -> 30.7-32.0 GB/s, 1 GiB of 2048×768 experts 13.6-15.5 -> 21.5; bits as the
// AVX2 kernel's (TestVNNIMatchesAVX2).

// Constant vectors of the kernels.
var (
	// laneShift4 shifts the words of 128-bit lanes 1 and 3 right by 4 (VPSRLVW): a block's
	// 16 bytes of nibbles in all four lanes give the low nibbles in lanes 0 and 2 and the
	// high ones in 1 and 3.
	laneShift4 = func() (v [32]uint16) {
		for i := range v {
			v[i] = uint16(4 * (i / 8 % 2))
		}
		return v
	}()
	// nibbleMatrixLanes does the same with GFNI (see nibbleMatrix): low nibbles kept in
	// lanes 0 and 2, high nibbles moved down in 1 and 3.
	nibbleMatrixLanes = [8]uint64{lowNibble, lowNibble, highNibble, highNibble, lowNibble, lowNibble, highNibble, highNibble}
)

// In simd_legacy_vnni_amd64.s, as the Q4_K ones (simd_vnni_amd64.go): the Q4_0 and MXFP4
// kernels split nibbles by shifts or, where the CPU has it, GFNI.
//
//go:noescape
func dotQ4_0RowsVNNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)

//go:noescape
func dotQ4_0RowsGFNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)

//go:noescape
func dotQ5_0RowsVNNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)

//go:noescape
func dotQ5_0RowsGFNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)

//go:noescape
func dotQ8_0RowsVNNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)

//go:noescape
func dotMXFP4RowsVNNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)

//go:noescape
func dotMXFP4RowsGFNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)

//go:noescape
func dotIQ4_XSRowsVNNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)

//go:noescape
func dotIQ4_XSRowsGFNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)

//go:noescape
func dotIQ4_XSTokens4RowsVNNI(w, a0, a1, a2, a3 unsafe.Pointer, nb, rows, rowBytes int, o0, o1, o2, o3 *float32)

//go:noescape
func dotIQ4_XSTokens4RowsGFNI(w, a0, a1, a2, a3 unsafe.Pointer, nb, rows, rowBytes int, o0, o1, o2, o3 *float32)

//go:noescape
func dotQ8_0Tokens4Rows4VNNI(w, a0, a1, a2, a3 unsafe.Pointer, nb, rows, rowBytes int, o0, o1, o2, o3 *float32)

//go:noescape
func dotQ8_0Tokens4RowsVNNI(w, a0, a1, a2, a3 unsafe.Pointer, nb, rows, rowBytes int, o0, o1, o2, o3 *float32)

var (
	q4_0Shape  = blockShape{values: qk32, bytes: 18, actBytes: 34}
	q5_0Shape  = blockShape{values: qk32, bytes: 22, actBytes: 34}
	q8_0Shape  = blockShape{values: qk32, bytes: 34, actBytes: 34}
	mxfp4Shape = blockShape{values: qk32, bytes: 17, actBytes: 34}
	iq4XSShape = blockShape{values: qkK, bytes: 136, actBytes: 292}
)

// Constants of the IQ4_XS kernel: iq4AbsLevels are the magnitudes of the IQ4 levels (the
// first eight levels are the negative ones); iq4XSScaleWords[c] makes VPSHUFB fill 128-bit
// lanes 0-1 with scale word 2c and lanes 2-3 with word 2c+1, from the eight scale words
// repeated in every lane.
var (
	iq4AbsLevels = func() (t [16]uint8) {
		for i, v := range iq4Values {
			t[i] = uint8(max(v, -v))
		}
		return t
	}()
	iq4XSScaleWords = func() (idx [4][64]int8) {
		for c := range idx {
			idx[c] = laneWords(func(lane int) int { return 2*c + lane/2 })
		}
		return idx
	}()
)

// dotQ8_0Tokens4RowsOf and dotQ8_0Tokens4VNNI are dotTokens4Rows and dotTokens4 for Q8_0:
// rows in fours through dotQ8_0Tokens4Rows4VNNI, the rest one at a time.
var (
	dotQ8_0Tokens4Row1   = tokens4RowsOf(q8_0Shape, dotQ8_0Tokens4RowsVNNI)
	dotQ8_0Tokens4RowsOf = func(n int, rows []byte, rowBytes int, a0, a1, a2, a3 []byte, o0, o1, o2, o3 []float32) {
		count, nb := len(o0), n/qk32
		four := count &^ 3
		if four > 0 && nb > 0 {
			act := func(a []byte) unsafe.Pointer { return unsafe.Pointer(&a[:nb*34][0]) }
			dotQ8_0Tokens4Rows4VNNI(unsafe.Pointer(&rows[:(four-1)*rowBytes+nb*34][0]), act(a0), act(a1), act(a2), act(a3),
				nb, four, rowBytes, &o0[0], &o1[:four][0], &o2[:four][0], &o3[:four][0])
		} else {
			four = 0
		}
		if four < count {
			dotQ8_0Tokens4Row1(n, rows[four*rowBytes:], rowBytes, a0, a1, a2, a3, o0[four:], o1[four:count], o2[four:count], o3[four:count])
		}
	}
	dotQ8_0Tokens4VNNI = vnniDotTokens4(dotQ8_0Tokens4Row1)
)

// pickLegacyRows returns the rows kernel of t (Q4_0, Q5_0, Q8_0 or MXFP4) and its block shape,
// the nibble formats' splitting with GFNI or with shifts.
func pickLegacyRows(t Type, gfni bool) (blockShape, vnniRowsKernel) {
	switch {
	case t == Q4_0 && gfni:
		return q4_0Shape, dotQ4_0RowsGFNI
	case t == Q4_0:
		return q4_0Shape, dotQ4_0RowsVNNI
	case t == Q5_0 && gfni:
		return q5_0Shape, dotQ5_0RowsGFNI
	case t == Q5_0:
		return q5_0Shape, dotQ5_0RowsVNNI
	case t == MXFP4 && gfni:
		return mxfp4Shape, dotMXFP4RowsGFNI
	case t == MXFP4:
		return mxfp4Shape, dotMXFP4RowsVNNI
	case t == Q8_0:
		return q8_0Shape, dotQ8_0RowsVNNI
	case t == IQ4_XS && gfni:
		return iq4XSShape, dotIQ4_XSRowsGFNI
	case t == IQ4_XS:
		return iq4XSShape, dotIQ4_XSRowsVNNI
	}
	panic("tensor: no VNNI kernels for " + t.String())
}

// pickIQ4XSTokens4 is IQ4_XS's four-token rows kernel (prefill), with GFNI's nibble split
// where the CPU has it.
func pickIQ4XSTokens4(gfni bool) vnniTokens4RowsKernel {
	if gfni {
		return dotIQ4_XSTokens4RowsGFNI
	}
	return dotIQ4_XSTokens4RowsVNNI
}

// installLegacyVNNI puts the kernels in place of the AVX2 ones where they are faster (see
// above and dotQ8_0Tokens4RowsVNNI). MXFP4 drops its AVX2 two-token kernel so that its
// prefill tiles run the rows kernel token by token (mulTokens' last resort), which is
// faster.
func installLegacyVNNI(k *kernelSet) {
	for _, t := range []Type{Q4_0, Q5_0, Q8_0, MXFP4, IQ4_XS} {
		k.dotRowsOne[t] = vnniDotRows(pickLegacyRows(t, useGFNI))
	}
	for _, t := range []Type{Q4_0, Q5_0, MXFP4, IQ4_XS} {
		k.traits[t].VecDot = vnniDot(pickLegacyRows(t, useGFNI))
	}
	k.dotTokens4[Q8_0], k.dotTokens4Rows[Q8_0] = dotQ8_0Tokens4VNNI, dotQ8_0Tokens4RowsOf
	iq4XSTokens4 := tokens4RowsOf(iq4XSShape, pickIQ4XSTokens4(useGFNI))
	k.dotTokens4[IQ4_XS], k.dotTokens4Rows[IQ4_XS] = vnniDotTokens4(iq4XSTokens4), iq4XSTokens4
	delete(k.dotTokens2, MXFP4)
}
