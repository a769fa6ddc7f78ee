//go:build goexperiment.simd && amd64

package tensor

import (
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/moerun/moerun/internal/mmap"
)

// q6KRowsOperands makes count Q6_K rows of n values, one after another at the start of a
// buffer with spare bytes after them (the capacity a row tile cut from a matrix has, which
// the kernels prefetch into), and one Q8_K vector: quantized from floats, random bytes
// (every code and sub-block scale, bsums as given), the extreme codes and scales against
// -128 activations, or random rows with every other one extreme.
func q6KRowsOperands(t *testing.T, rng *rand.Rand, kind string, n, count, spare int) (rows, a []byte) {
	t.Helper()
	rb := n / qkK * 210
	buf := make([]byte, count*rb+spare)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	rows = buf[:count*rb]
	a = make([]byte, n/qkK*292)
	switch kind {
	case "quantized":
		for r := range count {
			w, _ := quantizedOperands(t, rng, Q6_K, n)
			copy(rows[r*rb:], w)
		}
		_, a = quantizedOperands(t, rng, Q6_K, n)
	case "random", "extreme", "mixed":
		randomBlocks(rng, Q6_K, rows)
		randomQ8K(rng, a)
		switch kind {
		case "extreme":
			extremeBlocks(Q6_K, rows, a)
		case "mixed":
			for r := 1; r < count; r += 2 {
				extremeBlocks(Q6_K, rows[r*rb:(r+1)*rb], nil)
			}
		}
	default:
		t.Fatalf("no operands %q", kind)
	}
	return rows, a
}

// TestQ6KRowsAVX2 holds dotQ6_KRowsAVX2 to dotQ6_KAVX2 row by row, bit for bit, for row
// counts that leave every tail (pairs of pairs, a pair, a single row), and checks that it
// writes every one of its outputs and nothing past them.
func TestQ6KRowsAVX2(t *testing.T) {
	skipWithoutAVX2(t)
	rng := rand.New(rand.NewPCG(61, 67))
	counts := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 33}
	for _, n := range []int{256, 512, 768, 2048} {
		rb := n / qkK * 210
		for _, kind := range []string{"quantized", "random", "extreme", "mixed"} {
			for _, count := range counts {
				for _, spare := range []int{0, 4096 + 3*rb} {
					rows, a := q6KRowsOperands(t, rng, kind, n, count, spare)
					out := make([]float32, count+2)
					for i := range out {
						out[i] = float32(math.NaN())
					}
					out[count], out[count+1] = 42, 43 // past the rows: must stay
					dotQ6_KRowsAVX2(n, rows, a, out[:count])
					for r := range count {
						want := dotQ6_KAVX2(n, rows[r*rb:(r+1)*rb], a)
						if math.Float32bits(out[r]) != math.Float32bits(want) {
							t.Errorf("%s n=%d row %d of %d (spare %d): %g (%#08x), one row %g (%#08x)",
								kind, n, r, count, spare, out[r], math.Float32bits(out[r]), want, math.Float32bits(want))
						}
					}
					if out[count] != 42 || out[count+1] != 43 {
						t.Errorf("%s n=%d: wrote past %d rows: %v", kind, n, count, out[count:])
					}
				}
			}
		}
	}
}

// TestQ6KRowsAVX2Short: rows of fewer than 256 values have no whole block, and their
// results are 0, as dotQ6_KAVX2's.
func TestQ6KRowsAVX2Short(t *testing.T) {
	skipWithoutAVX2(t)
	out := []float32{1, 2, 3, 42}
	dotQ6_KRowsAVX2(100, nil, nil, out[:3])
	if out[0] != 0 || out[1] != 0 || out[2] != 0 || out[3] != 42 {
		t.Errorf("n=100: %v, want [0 0 0 42]", out)
	}
}

// BenchmarkQ6KRowsAVX2 times dotQ6_KRowsAVX2 against dotQ6_KAVX2 called row by row (as the
// matmul calls VecDot, here directly) and against a plain streaming read of the same bytes
// (readStreamAVX2, the ceiling), one thread, in huge pages as the model's weights: 512 MiB
// of Qwen3-30B-A3B's expert down projections (2048 rows of 768 values), streamed from DRAM
// as decode streams them; one such matrix (1.3 MiB, from L2/L3) 16 times; a 4096×4096
// matrix (13 MiB, in a 32 MiB L3); and 32 rows of 768 (20 KiB, in L1) 1024 times, the
// kernels' arithmetic alone. MB/s counts the weight bytes.
//
//	GOEXPERIMENT=simd go test -run '^$' -bench Q6KRowsAVX2 -benchtime 20x -count 3 ./tensor
func BenchmarkQ6KRowsAVX2(b *testing.B) {
	skipWithoutAVX2(b)
	rng := rand.New(rand.NewPCG(71, 73))
	for _, shape := range []struct {
		name                  string
		rows, n, size, passes int
	}{
		{"2048x768-512MiB", 2048, 768, 512 << 20, 1},
		{"2048x768-cached", 2048, 768, 0, 16},
		{"4096x4096", 4096, 4096, 0, 1},
		{"32x768-L1", 32, 768, 0, 1024},
	} {
		b.Run(shape.name, func(b *testing.B) {
			rb := shape.n / qkK * 210
			matBytes := shape.rows * rb
			mats := max(1, shape.size/matBytes)
			data, free, err := mmap.Anonymous(mats * matBytes)
			if err != nil {
				b.Fatal(err)
			}
			defer free()
			randomBlocks(rng, Q6_K, data[:matBytes])
			for m := 1; m < mats; m++ {
				copy(data[m*matBytes:], data[:matBytes])
			}
			a := make([]byte, shape.n/qkK*292)
			randomQ8K(rng, a)
			out := make([]float32, shape.rows)
			for _, k := range []struct {
				name string
				mul  func(mat []byte)
			}{
				{"rows", func(mat []byte) { dotQ6_KRowsAVX2(shape.n, mat, a, out) }},
				{"each", func(mat []byte) {
					for r := range out {
						out[r] = dotQ6_KAVX2(shape.n, mat[r*rb:(r+1)*rb], a)
					}
				}},
				{"stream", func(mat []byte) { readStreamAVX2(unsafe.Pointer(&mat[0]), len(mat)&^255) }},
			} {
				b.Run(k.name, func(b *testing.B) {
					b.SetBytes(int64(len(data) * shape.passes))
					for b.Loop() {
						for range shape.passes {
							for m := range mats {
								k.mul(data[m*matBytes : (m+1)*matBytes])
							}
						}
					}
				})
			}
		})
	}
}

// TestQ6KTokensRowsAVX2 holds the AVX2 level's four- and two-token Q6_K rows kernels
// (dotQ6_KTokens4RowsAVX2, dotQ6_KTokens2RowsAVX2) to the level's VecDot, dotQ6_KAVX2, bit
// for bit.
func TestQ6KTokensRowsAVX2(t *testing.T) {
	k := kernelsAt(t, LevelAVX2)
	rows4, rows2 := k.dotTokens4Rows[Q6_K], k.dotTokens2Rows[Q6_K]
	if rows4 == nil || rows2 == nil {
		t.Fatal("Q6_K: no four- or two-token rows kernel at the AVX2 level")
	}
	rng := rand.New(rand.NewPCG(43, 47))
	testTokens4Rows(t, rng, Q6_K, "avx2", rows4, k.traits[Q6_K].VecDot)
	testTokens2Rows(t, rng, Q6_K, rows2, k.traits[Q6_K].VecDot)
}
