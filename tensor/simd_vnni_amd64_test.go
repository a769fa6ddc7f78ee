//go:build goexperiment.simd && amd64

package tensor

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// q4KSplits names the Q4_K kernel variants this CPU can run (see pickGFNI), so that
// a machine with GFNI tests the shift split too.
func q4KSplits() map[string]bool {
	if useGFNI {
		return map[string]bool{"shift": false, "gfni": true}
	}
	return map[string]bool{"shift": false}
}

// TestVNNIMatchesAVX2 holds the AVX-512 VNNI kernels to the AVX2 kernels' bits, on rows
// quantized from stressing floats and on random bytes (any codes, scales and bsums), over
// every row length a block loop can meet.
func TestVNNIMatchesAVX2(t *testing.T) {
	if !useVNNI {
		t.Skip("CPU without AVX-512 VNNI: the AVX2 kernels run")
	}
	type kernel struct {
		typ        Type
		name       string
		vnni, avx2 func(n int, w, a []byte) float32
	}
	kernels := []kernel{{Q6_K, "", dotQ6_KVNNI, dotQ6_KAVX2}, {Q2_K, "", dotQ2_KVNNI, dotQ2_KAVX2}, {Q3_K, "", dotQ3_KVNNI, dotQ3_KAVX2}}
	for name, gfni := range q4KSplits() {
		rows := pickGFNI(gfni, dotQ4_KRowsGFNI, dotQ4_KRowsVNNI)
		kernels = append(kernels, kernel{Q4_K, name, vnniDot(q4KShape, rows), dotQ4_KAVX2},
			kernel{IQ4_XS, name, vnniDot(pickLegacyRows(IQ4_XS, gfni)), dotIQ4_XSAVX2})
	}
	if useGFNI {
		kernels = append(kernels, kernel{Q5_K, "gfni", dotQ5_KVNNI, dotQ5_KAVX2})
	}
	for i, v := range iq4Values { // the IQ4_XS kernel takes a level's sign from its index
		if (v < 0) != (i < 8) {
			t.Fatalf("IQ4 level %d is %d: the kernel's signs assume levels 0-7 negative", i, v)
		}
	}
	rng := rand.New(rand.NewPCG(7, 11))
	for _, k := range kernels {
		if got := active.traits[k.typ].VecDot; got == nil {
			t.Fatalf("%s: no kernel", k.typ)
		}
		compare := func(n int, w, a []byte, what string) {
			got, want := k.vnni(n, w, a), k.avx2(n, w, a)
			if math.Float32bits(got) != math.Float32bits(want) {
				t.Errorf("%s %s n=%d %s: VNNI %g, AVX2 %g", k.typ, k.name, n, what, got, want)
			}
		}
		for _, n := range simdLengths(k.typ) {
			for trial := range 20 {
				w, a := quantizedOperands(t, rng, k.typ, n)
				compare(n, w, a, "quantized")
				randomBlocks(rng, k.typ, w)
				randomQ8K(rng, a)
				compare(n, w, a, "random bytes")
				if trial == 0 {
					extremeBlocks(k.typ, w, a)
					compare(n, w, a, "extreme codes")
				}
			}
		}
	}
}

// TestVNNITokens4MatchesAVX2 holds the four-token VNNI kernels to the four-token AVX2
// kernels' bits (which are the one-token kernels' for each vector).
func TestVNNITokens4MatchesAVX2(t *testing.T) {
	if !useVNNI {
		t.Skip("CPU without AVX-512 VNNI: the AVX2 kernels run")
	}
	rng := rand.New(rand.NewPCG(13, 17))
	type kernel struct {
		typ        Type
		name       string
		vnni, avx2 func(n int, w, a0, a1, a2, a3 []byte) [4]float32
	}
	kernels := []kernel{{Q6_K, "", dotQ6_KTokens4VNNI, dotQ6_KTokens4AVX2},
		{Q2_K, "", kernelsAt(t, LevelAVX512).dotTokens4[Q2_K], eachToken(dotQ2_KAVX2)}, {Q3_K, "", kernelsAt(t, LevelAVX512).dotTokens4[Q3_K], eachToken(dotQ3_KAVX2)}}
	for name, gfni := range q4KSplits() {
		tokens4 := pickGFNI(gfni, dotQ4_KTokens4RowsGFNI, dotQ4_KTokens4RowsVNNI)
		kernels = append(kernels, kernel{Q4_K, name, vnniDotTokens4(tokens4RowsOf(q4KShape, tokens4)), dotQ4_KTokens4AVX2},
			kernel{IQ4_XS, name, vnniDotTokens4(tokens4RowsOf(iq4XSShape, pickIQ4XSTokens4(gfni))), eachToken(dotIQ4_XSAVX2)})
	}
	for _, k := range kernels {
		for _, n := range simdLengths(k.typ) {
			for trial := range 10 {
				w, a0 := quantizedOperands(t, rng, k.typ, n)
				a := [4][]byte{a0}
				for i := 1; i < 4; i++ {
					_, a[i] = quantizedOperands(t, rng, k.typ, n)
				}
				if trial%2 == 1 {
					randomBlocks(rng, k.typ, w)
					for i := range a {
						randomQ8K(rng, a[i])
					}
				}
				if trial == 9 {
					extremeBlocks(k.typ, w, a[2])
				}
				got := k.vnni(n, w, a[0], a[1], a[2], a[3])
				want := k.avx2(n, w, a[0], a[1], a[2], a[3])
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Errorf("%s %s n=%d trial %d token %d: VNNI %g, AVX2 %g", k.typ, k.name, n, trial, i, got[i], want[i])
					}
				}
			}
		}
	}
}

// eachToken is a one-token kernel as a four-token one: Q2_K and Q3_K have no four-token
// AVX2 kernels, and the VNNI ones must give each token the one-token kernel's bits.
func eachToken(dot func(n int, w, a []byte) float32) func(n int, w, a0, a1, a2, a3 []byte) [4]float32 {
	return func(n int, w, a0, a1, a2, a3 []byte) [4]float32 {
		return [4]float32{dot(n, w, a0), dot(n, w, a1), dot(n, w, a2), dot(n, w, a3)}
	}
}

// TestVNNIRowsMatchOneRow holds the VNNI kernels over consecutive rows (dotRowsOne, the
// decode mat-vec's path) to the one-row VecDot of each row, bit for bit: every row must
// restart its sum, read its own bytes and land in its own slot.
func TestVNNIRowsMatchOneRow(t *testing.T) {
	if !useVNNI {
		t.Skip("CPU without AVX-512 VNNI: the AVX2 kernels run")
	}
	k512 := kernelsAt(t, LevelAVX512)
	rng := rand.New(rand.NewPCG(19, 23))
	type kernel struct {
		typ     Type
		name    string
		rowsOne func(n int, rows, a []byte, out []float32)
	}
	kernels := []kernel{{Q6_K, "", k512.dotRowsOne[Q6_K]}, {Q2_K, "", k512.dotRowsOne[Q2_K]}, {Q3_K, "", k512.dotRowsOne[Q3_K]}}
	for name, gfni := range q4KSplits() {
		rows := pickGFNI(gfni, dotQ4_KRowsGFNI, dotQ4_KRowsVNNI)
		kernels = append(kernels, kernel{Q4_K, name, vnniDotRows(q4KShape, rows)})
	}
	for _, k := range kernels {
		typ, rowsOne := k.typ, k.rowsOne
		if rowsOne == nil {
			t.Fatalf("%s: no rows kernel", typ)
		}
		for _, n := range simdLengths(typ) {
			for _, count := range []int{0, 1, 2, 7} {
				rowBytes := n / qkK * int(typ.BlockBytes())
				rows := make([]byte, 0, count*rowBytes)
				var a []byte
				for range count {
					w, act := quantizedOperands(t, rng, typ, n)
					rows, a = append(rows, w...), act
				}
				if a == nil {
					_, a = quantizedOperands(t, rng, typ, n)
				}
				out := make([]float32, count+1)
				out[count] = 42 // past the rows: must stay
				rowsOne(n, rows, a, out[:count])
				for r := range count {
					want := k512.traits[typ].VecDot(n, rows[r*rowBytes:(r+1)*rowBytes], a)
					if math.Float32bits(out[r]) != math.Float32bits(want) {
						t.Errorf("%s %s n=%d row %d of %d: %g, one row %g", typ, k.name, n, r, count, out[r], want)
					}
				}
				if out[count] != 42 {
					t.Errorf("%s n=%d: wrote past %d rows", typ, n, count)
				}
			}
		}
	}
}

// TestVNNITokens2RowsMatchOneRow holds the two-token kernels over rows (dotTokens2Rows:
// two sequences decoding together, an expert two tokens chose) to the one-row VecDot of
// each row and vector, bit for bit, with a guard past every output.
func TestVNNITokens2RowsMatchOneRow(t *testing.T) {
	if !useVNNI {
		t.Skip("CPU without AVX-512 VNNI: the AVX2 kernels run")
	}
	k512 := kernelsAt(t, LevelAVX512)
	if k512.dotTokens2Rows[Q6_K] == nil {
		t.Fatal("Q6_K: no two-token rows kernel on the VNNI level")
	}
	rng := rand.New(rand.NewPCG(37, 41))
	for typ, rows2 := range k512.dotTokens2Rows {
		testTokens2Rows(t, rng, typ, rows2, k512.traits[typ].VecDot)
	}
}

// testTokens2Rows holds a two-token rows kernel (dotTokens2Rows) to vecDot of each row and
// vector, bit for bit, with a guard past every output.
func testTokens2Rows(t *testing.T, rng *rand.Rand, typ Type, rows2 rows2Kernel, vecDot func(n int, w, a []byte) float32) {
	t.Helper()
	for _, n := range simdLengths(typ) {
		for _, count := range []int{1, 2, 7} {
			rb := n / qkK * int(typ.BlockBytes())
			rows := make([]byte, count*rb)
			for r := range count {
				w, _ := quantizedOperands(t, rng, typ, n)
				copy(rows[r*rb:], w)
			}
			_, a0 := quantizedOperands(t, rng, typ, n)
			_, a1 := quantizedOperands(t, rng, typ, n)
			o0, o1 := make([]float32, count+1), make([]float32, count+1)
			o0[count], o1[count] = 42, 42 // past the rows: must stay
			rows2(n, rows, a0, a1, o0[:count], o1[:count])
			for v, c := range []struct {
				out []float32
				a   []byte
			}{{o0, a0}, {o1, a1}} {
				for r := range count {
					want := vecDot(n, rows[r*rb:(r+1)*rb], c.a)
					if math.Float32bits(c.out[r]) != math.Float32bits(want) {
						t.Errorf("%s n=%d row %d of %d vector %d: %g, one row %g", typ, n, r, count, v, c.out[r], want)
					}
				}
				if c.out[count] != 42 {
					t.Errorf("%s n=%d: vector %d's outputs written past %d rows", typ, n, v, count)
				}
			}
		}
	}
}

// TestVNNITokens4RowsMatchOneRow holds the four-token kernels over rows (dotTokens4Rows,
// prefill's path) to the one-row VecDot of each row and vector, bit for bit, with rows
// spaced wider than their blocks (a stride of its own) and a guard past every output.
func TestVNNITokens4RowsMatchOneRow(t *testing.T) {
	if !useVNNI {
		t.Skip("CPU without AVX-512 VNNI: the AVX2 kernels run")
	}
	k512 := kernelsAt(t, LevelAVX512)
	rng := rand.New(rand.NewPCG(29, 31))
	type kernel struct {
		typ  Type
		name string
		rows func(n int, rows []byte, rowBytes int, a0, a1, a2, a3 []byte, o0, o1, o2, o3 []float32)
	}
	kernels := []kernel{{Q6_K, "", k512.dotTokens4Rows[Q6_K]}, {Q2_K, "", k512.dotTokens4Rows[Q2_K]}, {Q3_K, "", k512.dotTokens4Rows[Q3_K]}}
	for name, gfni := range q4KSplits() {
		rows := pickGFNI(gfni, dotQ4_KTokens4RowsGFNI, dotQ4_KTokens4RowsVNNI)
		kernels = append(kernels, kernel{Q4_K, name, tokens4RowsOf(q4KShape, rows)},
			kernel{IQ4_XS, name, tokens4RowsOf(iq4XSShape, pickIQ4XSTokens4(gfni))})
	}
	for _, k := range kernels {
		if k.rows == nil {
			t.Fatalf("%s: no four-token rows kernel", k.typ)
		}
		testTokens4Rows(t, rng, k.typ, k.name, k.rows, k512.traits[k.typ].VecDot)
	}
}

// testTokens4Rows holds a four-token rows kernel (dotTokens4Rows) to vecDot of each row and
// vector, bit for bit, with rows spaced wider than their blocks (a stride of its own) and a
// guard past every output.
func testTokens4Rows(t *testing.T, rng *rand.Rand, typ Type, name string, rows4 func(n int, rows []byte, rowBytes int, a0, a1, a2, a3 []byte, o0, o1, o2, o3 []float32), vecDot func(n int, w, a []byte) float32) {
	t.Helper()
	for _, n := range simdLengths(typ) {
		for _, count := range []int{1, 2, 7} {
			stride := n/qkK*int(typ.BlockBytes()) + 3
			rows := make([]byte, count*stride)
			var a [4][]byte
			for r := range count {
				w, act := quantizedOperands(t, rng, typ, n)
				copy(rows[r*stride:], w)
				a[r%4] = act
			}
			for v := range a {
				if a[v] == nil {
					_, a[v] = quantizedOperands(t, rng, typ, n)
				}
			}
			var outs [4][]float32
			for v := range outs {
				outs[v] = make([]float32, count+1)
				outs[v][count] = 42 // past the rows: must stay
			}
			rows4(n, rows, stride, a[0], a[1], a[2], a[3], outs[0][:count], outs[1][:count], outs[2][:count], outs[3][:count])
			for v, out := range outs {
				for r := range count {
					want := vecDot(n, rows[r*stride:r*stride+stride-3], a[v])
					if math.Float32bits(out[r]) != math.Float32bits(want) {
						t.Errorf("%s %s n=%d row %d of %d vector %d: %g, one row %g", typ, name, n, r, count, v, out[r], want)
					}
				}
				if out[count] != 42 {
					t.Errorf("%s %s n=%d: vector %d's outputs written past %d rows", typ, name, n, v, count)
				}
			}
		}
	}
}

// randomQ8K fills Q8_K activations with random quants and bsums (the kernels take the
// bsums as given) and a finite scale.
func randomQ8K(rng *rand.Rand, a []byte) {
	for i := range a {
		a[i] = byte(rng.Uint32())
	}
	for off := 0; off < len(a); off += 292 {
		binary.LittleEndian.PutUint32(a[off:], math.Float32bits(float32(math.Ldexp(rng.Float64()+0.5, rng.IntN(20)-10))))
	}
}

// extremeBlocks sets every code, scale and activation to the largest magnitude the
// formats allow (the -128 activation against the largest weight), where a 16-bit
// intermediate would saturate first.
func extremeBlocks(typ Type, w, a []byte) {
	bs := int(typ.BlockBytes())
	for off := 0; off < len(w); off += bs {
		b := w[off : off+bs]
		switch typ {
		case Q4_K:
			for i := 4; i < bs; i++ {
				b[i] = 0xFF
			}
		case Q6_K:
			for i := 0; i < 192; i++ {
				b[i] = 0xFF
			}
			for i := 192; i < 208; i++ {
				b[i] = 0x80 // scale -128
			}
		case Q5_K:
			for i := 4; i < bs; i++ {
				b[i] = 0xFF
			}
		case IQ4_XS:
			for i := 2; i < bs; i++ {
				b[i] = 0 // scales -32, every level -127
			}
		case Q2_K:
			for i := 0; i < 80; i++ {
				b[i] = 0xFF // scales and mins 15, codes 3
			}
		case Q3_K:
			for i := 0; i < 108; i++ {
				b[i] = 0 // scales -32, every value -4 (code 0, high bit clear)
			}
		}
	}
	for off := 0; off < len(a); off += 292 {
		for i := 4; i < 260; i++ {
			a[off+i] = 0x80
		}
	}
}

// BenchmarkVNNI times the VNNI kernels next to the AVX2 ones on one cache-hot 4096-value
// row (MB/s counts the weight row's bytes).
//
//	GOEXPERIMENT=simd go test -run '^$' -bench VNNI ./tensor
func BenchmarkVNNI(b *testing.B) {
	if !useVNNI {
		b.Skip("CPU without AVX-512 VNNI")
	}
	for _, k := range []struct {
		name string
		typ  Type
		dot  func(n int, w, a []byte) float32
	}{
		{"Q4_K/avx2", Q4_K, dotQ4_KAVX2}, {"Q4_K/vnni", Q4_K, dotQ4_KVNNI}, {"Q4_K/vnni-repacked", Q4_K, vnniDot(q4KShape, q4KRepackedRows)},
		{"Q6_K/avx2", Q6_K, dotQ6_KAVX2}, {"Q6_K/vnni", Q6_K, dotQ6_KVNNI},
		{"Q2_K/avx2", Q2_K, dotQ2_KAVX2}, {"Q2_K/vnni", Q2_K, dotQ2_KVNNI},
		{"Q3_K/avx2", Q3_K, dotQ3_KAVX2}, {"Q3_K/vnni", Q3_K, dotQ3_KVNNI},
	} {
		b.Run(k.name, func(b *testing.B) {
			w, a := benchOperands(b, k.typ)
			b.SetBytes(int64(len(w)))
			var sink float32
			for b.Loop() {
				sink += k.dot(benchRow, w, a)
			}
			_ = sink
		})
	}
}

// BenchmarkRepackedQ4KTwoTokens times Q4_K's gemv-arithmetic kernels on a tile of
// matRowTile cache-hot rows of 2048 values against two tokens: the one-token kernel once
// per token, and the two-token kernel (ns/dot: per row and token).
//
//	GOEXPERIMENT=simd go test -run '^$' -bench RepackedQ4KTwoTokens ./tensor
func BenchmarkRepackedQ4KTwoTokens(b *testing.B) {
	rows1, rows2 := active.repackedKernels[Q4_K], active.repackedTokens2[Q4_K]
	if rows2 == nil {
		b.Skip("no two-token Q4_K kernel on this CPU or build")
	}
	const n = 2048
	rng := rand.New(rand.NewPCG(3, 4))
	w, acts := q4KExtremeOperands(rng, matRowTile, n, 2)
	o0, o1 := make([]float32, matRowTile), make([]float32, matRowTile)
	for _, k := range []struct {
		name string
		run  func()
	}{
		{"one-token-twice", func() { rows1(n, w, acts[0], o0); rows1(n, w, acts[1], o1) }},
		{"two-token", func() { rows2(n, w, acts[0], acts[1], o0, o1) }},
	} {
		b.Run(k.name, func(b *testing.B) {
			for b.Loop() {
				k.run()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*matRowTile*2), "ns/dot")
		})
	}
}
