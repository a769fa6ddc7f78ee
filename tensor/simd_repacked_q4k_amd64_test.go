//go:build goexperiment.simd && amd64

package tensor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"simd/archsimd"
	"testing"
	"unsafe"
)

// skipWithoutAVX2 skips a test of the AVX2 kernels on a CPU that cannot run them.
func skipWithoutAVX2(t testing.TB) {
	t.Helper()
	if !archsimd.X86.AVX2() || !archsimd.X86.FMA() {
		t.Skip("CPU without AVX2 and FMA")
	}
}

// q4KRepackedCase is one set of operands for the repacked AVX2 kernels: rows Q4_K rows of
// n values and Q8_K vectors against them.
type q4KRepackedCase struct {
	name    string
	n, rows int
	data    []byte
	acts    [][]byte
}

// q4KRepackedCases are the operands of the repacked AVX2 tests: 0 to 17, 24 and 40 rows
// (every remainder of the kernels' groups of eight, and several groups) of 256, 512 and
// 2048 values, and for a few 4352 and 8448 (17 and 33 super-blocks: more than one span of
// the one-token kernel and of the four-token one, whose rows then go in groups of 16),
// each as quantized normal rows against quantized normal vectors and as
// q4KExtremeOperands (every scale and min pattern, the largest sums, odd ones).
func q4KRepackedCases(t *testing.T, vectors int) []q4KRepackedCase {
	rng := rand.New(rand.NewPCG(11, 12))
	counts := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 24, 40}
	var cases []q4KRepackedCase
	for _, n := range []int{256, 512, 2048, 4352, 8448} {
		for _, rows := range counts {
			if n > 2048 && rows != 1 && rows != 9 && rows != 17 && rows != 40 {
				continue
			}
			c := q4KRepackedCase{name: fmt.Sprintf("n=%d/rows=%d/random", n, rows), n: n, rows: rows}
			c.data = randomRows(t, Q4_K, rows, n, 1, rng)
			for range vectors {
				q8 := make([]byte, n/qkK*292)
				if err := QuantizeActivations(Q8_K, randomFloats(rng, n), q8); err != nil {
					t.Fatal(err)
				}
				c.acts = append(c.acts, q8)
			}
			cases = append(cases, c)
			data, acts := q4KExtremeOperands(rng, rows, n, vectors)
			cases = append(cases, q4KRepackedCase{name: fmt.Sprintf("n=%d/rows=%d/extreme", n, rows), n: n, rows: rows, data: data, acts: acts})
		}
	}
	return cases
}

// checkRepackedRows compares out with repackedQ4KDot(chunk) of each row against a, bit for
// bit, and reports whether they all match.
func checkRepackedRows(t *testing.T, c q4KRepackedCase, a []byte, out []float32, chunk int, what string) bool {
	t.Helper()
	rb := c.n / qkK * 144
	for r := range c.rows {
		want := repackedQ4KDot(c.n, c.data[r*rb:(r+1)*rb], a, chunk)
		if got := out[r]; math.Float32bits(got) != math.Float32bits(want) {
			t.Errorf("%s: row %d: %v (%#08x), want %v (%#08x)", what, r, got, math.Float32bits(got), want, math.Float32bits(want))
			return false
		}
	}
	return true
}

// TestRepackedQ4KAVX2Rows checks dotQ4_KRepackedRowsAVX2 bit for bit against
// repackedQ4KDot in gemv's arithmetic (a float step per super-block).
func TestRepackedQ4KAVX2Rows(t *testing.T) {
	skipWithoutAVX2(t)
	for _, c := range q4KRepackedCases(t, 3) {
		t.Run(c.name, func(t *testing.T) {
			for i, a := range c.acts {
				out := make([]float32, c.rows+1)
				out[c.rows] = 42 // past the rows: left alone
				dotQ4_KRepackedRowsAVX2(c.n, c.data, a, out[:c.rows])
				if !checkRepackedRows(t, c, a, out, qkK, fmt.Sprintf("vector %d", i)) {
					return
				}
				if out[c.rows] != 42 {
					t.Fatalf("vector %d: wrote past the rows", i)
				}
			}
		})
	}
}

// q4KTokens4Levels are the four-token kernels of the levels this CPU runs, by name.
func q4KTokens4Levels() []struct {
	name string
	k    q4KTokens4Kernels
} {
	levels := []struct {
		name string
		k    q4KTokens4Kernels
	}{{"avx2", q4KTokens4AVX2}}
	if archsimd.X86.AVX512() {
		levels = append(levels, struct {
			name string
			k    q4KTokens4Kernels
		}{"avx512", q4KTokens4AVX512})
	}
	return levels
}

// TestRepackedQ4KAVX2Tokens4 checks the four-token kernels of each level
// (dotQ4_KRepackedTokens4With: q4KRepackedGemm4AVX2 and its kin) bit for bit against
// repackedQ4KDot, in gemv's arithmetic (chunk 256) and gemm's (64), four tokens at a time,
// with the rows where the matmul has them and, for the stride, each followed by a block of
// padding.
func TestRepackedQ4KAVX2Tokens4(t *testing.T) {
	skipWithoutAVX2(t)
	for _, level := range q4KTokens4Levels() {
		t.Run(level.name, func(t *testing.T) { testRepackedQ4KTokens4(t, level.k) })
	}
}

func testRepackedQ4KTokens4(t *testing.T, k q4KTokens4Kernels) {
	for _, c := range q4KRepackedCases(t, 4) {
		rb := c.n / qkK * 144
		padded := make([]byte, c.rows*(rb+144))
		for r := range c.rows {
			copy(padded[r*(rb+144):], c.data[r*rb:(r+1)*rb])
		}
		for _, chunk := range []int{qkK, 64} {
			for _, stride := range []int{rb, rb + 144} {
				rows := c.data
				if stride != rb {
					rows = padded
				}
				t.Run(fmt.Sprintf("%s/chunk=%d/stride=%d", c.name, chunk, stride), func(t *testing.T) {
					var out [4][]float32
					for k := range out {
						out[k] = make([]float32, c.rows+1)
						out[k][c.rows] = 42 // past the rows: left alone
					}
					dotQ4_KRepackedTokens4With(k, c.n, rows, stride, c.acts[0], c.acts[1], c.acts[2], c.acts[3],
						out[0][:c.rows], out[1][:c.rows+1], out[2][:c.rows], out[3][:c.rows], chunk)
					for k := range out {
						if !checkRepackedRows(t, c, c.acts[k], out[k], chunk, fmt.Sprintf("token %d", k)) {
							return
						}
						if out[k][c.rows] != 42 {
							t.Fatalf("token %d: wrote past the rows", k)
						}
					}
				})
			}
		}
	}
}

// TestRepackedQ4KAVX2Sensitive shows that the operands of the tests above tell the
// repacked arithmetic from its near misses: for gemv's (chunk 256) and gemm's (64), a
// float step per sub-block (chunk 32) or per the other chunk, and ggml_vec_dot_q4_K_q8_K's
// lanes (dotQ4_KAVX2) each differ from it on some row of every shape, so a kernel with one
// of those mutations fails them.
func TestRepackedQ4KAVX2Sensitive(t *testing.T) {
	skipWithoutAVX2(t)
	cases := q4KRepackedCases(t, 4)
	for _, chunk := range []int{qkK, 64} {
		mutants := map[string]func(n int, w, a []byte) float32{"vec_dot": dotQ4_KAVX2}
		for _, other := range []int{32, 64, qkK} {
			if other != chunk {
				mutants[fmt.Sprintf("chunk %d", other)] = func(n int, w, a []byte) float32 { return repackedQ4KDot(n, w, a, other) }
			}
		}
		for name, dot := range mutants {
			for _, n := range []int{512, 2048} {
				caught := false
				for _, c := range cases {
					if c.n != n || c.rows != 24 {
						continue
					}
					rb := n / qkK * 144
					for _, a := range c.acts {
						for r := range c.rows {
							w := c.data[r*rb : (r+1)*rb]
							caught = caught || math.Float32bits(dot(n, w, a)) != math.Float32bits(repackedQ4KDot(n, w, a, chunk))
						}
					}
				}
				if !caught {
					t.Errorf("chunk %d: %s, n %d: the same bits on every row", chunk, name, n)
				}
			}
		}
	}
}

// BenchmarkRepackedQ4KAVX2 times the repacked AVX2 kernels next to the AVX2 kernels of
// ggml_vec_dot_q4_K_q8_K's arithmetic, one thread: one token (dotQ4_KAVX2 row by row
// against dotQ4_KRepackedRowsAVX2, called for 64 rows at a time, a decode tile of these
// matrices) and four tokens (dotQ4_KTokens4AVX2 row by row against
// dotQ4_KRepackedTokens4AVX2 in gemv's and gemm's arithmetic, called for matRowTile rows
// at a time as mulTokens does), on Qwen3-30B-A3B's 2048×768 expert matrices cycling
// through 512 MiB of them (from DRAM), on one 4096×4096 matrix and on one 2048×768 one (in
// cache). MB/s counts weight bytes; ns/row is per row and token.
//
//	GOEXPERIMENT=simd GODEBUG=asyncpreemptoff=1 go test -run '^$' -bench RepackedQ4KAVX2 -benchtime 200x ./tensor
func BenchmarkRepackedQ4KAVX2(b *testing.B) {
	skipWithoutAVX2(b)
	type kernel struct {
		name   string
		tokens int
		run    func(n int, rows []byte, rowBytes int, acts [4][]byte, out [4][]float32)
	}
	kernels := []kernel{
		{"vecdot/tokens=1", 1, func(n int, rows []byte, rb int, acts [4][]byte, out [4][]float32) {
			for r := range out[0] {
				out[0][r] = dotQ4_KAVX2(n, rows[r*rb:(r+1)*rb], acts[0])
			}
		}},
		{"repacked/tokens=1", 1, func(n int, rows []byte, rb int, acts [4][]byte, out [4][]float32) {
			for r0 := 0; r0 < len(out[0]); r0 += 4 * matRowTile {
				r1 := min(r0+4*matRowTile, len(out[0]))
				dotQ4_KRepackedRowsAVX2(n, rows[r0*rb:], acts[0], out[0][r0:r1])
			}
		}},
		{"vecdot/tokens=4", 4, func(n int, rows []byte, rb int, acts [4][]byte, out [4][]float32) {
			for r := range out[0] {
				d := dotQ4_KTokens4AVX2(n, rows[r*rb:(r+1)*rb], acts[0], acts[1], acts[2], acts[3])
				out[0][r], out[1][r], out[2][r], out[3][r] = d[0], d[1], d[2], d[3]
			}
		}},
		{"repacked-gemv/tokens=4", 4, func(n int, rows []byte, rb int, acts [4][]byte, out [4][]float32) {
			for r0 := 0; r0 < len(out[0]); r0 += matRowTile {
				r1 := min(r0+matRowTile, len(out[0]))
				dotQ4_KRepackedTokens4AVX2(n, rows[r0*rb:], rb, acts[0], acts[1], acts[2], acts[3], out[0][r0:r1], out[1][r0:r1], out[2][r0:r1], out[3][r0:r1], qkK)
			}
		}},
		{"repacked-gemm/tokens=4", 4, func(n int, rows []byte, rb int, acts [4][]byte, out [4][]float32) {
			for r0 := 0; r0 < len(out[0]); r0 += matRowTile {
				r1 := min(r0+matRowTile, len(out[0]))
				dotQ4_KRepackedTokens4AVX2(n, rows[r0*rb:], rb, acts[0], acts[1], acts[2], acts[3], out[0][r0:r1], out[1][r0:r1], out[2][r0:r1], out[3][r0:r1], 64)
			}
		}},
	}
	for _, shape := range []struct {
		name       string
		cols, rows int
		set        int
	}{
		{"experts_2048x768_512MiB", 2048, 768, 512 << 20},
		{"4096x4096", 4096, 4096, 0},
		{"2048x768", 2048, 768, 0},
	} {
		rb := shape.cols / qkK * 144
		matBytes := shape.rows * rb
		count := max(1, shape.set/matBytes)
		var data []byte
		rng := rand.New(rand.NewPCG(13, 14))
		var acts [4][]byte
		for i := range acts {
			acts[i] = make([]byte, shape.cols/qkK*292)
			if err := QuantizeActivations(Q8_K, randomFloats(rng, shape.cols), acts[i]); err != nil {
				b.Fatal(err)
			}
		}
		var out [4][]float32
		for i := range out {
			out[i] = make([]float32, shape.rows)
		}
		for _, k := range kernels {
			b.Run(fmt.Sprintf("shape=%s/%s", shape.name, k.name), func(b *testing.B) {
				if data == nil {
					data = tiledWeights(b, Q4_K, shape.cols, shape.rows, count)
				}
				b.SetBytes(int64(matBytes))
				m := 0
				for b.Loop() {
					k.run(shape.cols, data[m*matBytes:(m+1)*matBytes], rb, acts, out)
					if m++; m == count {
						m = 0
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*shape.rows*k.tokens), "ns/row")
			})
		}
	}
}

// BenchmarkRepackedQ4KTokens4Levels times the four-token kernels of each level alone, in
// L1: 16 rows of 2048 values (18 KiB) against activations prepared once (9 KiB), in gemm's
// and gemv's arithmetic. ns/sb-token is per super-block of a row and token.
//
//	GOEXPERIMENT=simd GODEBUG=asyncpreemptoff=1 go test -run '^$' -bench RepackedQ4KTokens4Levels ./tensor
func BenchmarkRepackedQ4KTokens4Levels(b *testing.B) {
	skipWithoutAVX2(b)
	const n, rows = 2048, 16
	nb, rb := n/qkK, n/qkK*144
	rng := rand.New(rand.NewPCG(15, 16))
	data := tiledWeights(b, Q4_K, n, rows, 1)
	var acts [4][]byte
	for i := range acts {
		acts[i] = make([]byte, nb*292)
		if err := QuantizeActivations(Q8_K, randomFloats(rng, n), acts[i]); err != nil {
			b.Fatal(err)
		}
	}
	pre := make([]q4KRepackedTokensBlock, nb)
	q4KRepackedTokensPrepare(acts[0], acts[1], acts[2], acts[3], pre)
	var out [4][rows]float32
	for _, level := range q4KTokens4Levels() {
		for _, k := range []struct {
			name   string
			kernel q4KTokens4Asm
		}{{"gemm", level.k.gemm}, {"gemv", level.k.gemv}} {
			b.Run(level.name+"/"+k.name, func(b *testing.B) {
				for b.Loop() {
					k.kernel(unsafe.Pointer(&data[0]), unsafe.Pointer(&pre[0]), nb, rows, rb, &out[0][0], &out[1][0], &out[2][0], &out[3][0])
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rows*nb*4), "ns/sb-token")
			})
		}
	}
}
