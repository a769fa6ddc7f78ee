//go:build goexperiment.simd && amd64

package tensor

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"simd/archsimd"
	"testing"
)

// repackedLegacyCase is an AVX2 repacked kernel with its format and the same format's
// VecDot kernel (float lanes), whose arithmetic the tests' operands must tell apart.
type repackedLegacyCase struct {
	typ    Type
	rows   func(n int, rows, a []byte, out []float32)
	vecDot func(n int, w, a []byte) float32
}

func repackedLegacyCases(t testing.TB) []repackedLegacyCase {
	if !archsimd.X86.AVX2() || !archsimd.X86.FMA() {
		t.Skip("CPU without AVX2 and FMA")
	}
	return []repackedLegacyCase{
		{Q4_0, dotQ4_0RepackedRowsAVX2, dotQ4_0AVX2},
		{IQ4_NL, dotIQ4_NLRepackedRowsAVX2, dotIQ4_NLAVX2},
		{MXFP4, dotMXFP4RepackedRowsAVX2, dotMXFP4AVX2},
	}
}

// repackedLegacyCounts are the row counts tested: every tail of a group of eight, and a
// few whole groups.
var repackedLegacyCounts = []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 24, 40}

// checkRepackedLegacy runs c.rows on the first count rows of data for every count and
// compares each result bit for bit with blockwiseDot, and that nothing past them was
// written; it returns how many rows VecDot's arithmetic gets other bits for.
func checkRepackedLegacy(t *testing.T, c repackedLegacyCase, n int, data, a []byte) (vecDiffers int) {
	t.Helper()
	rb := n / qk32 * blockBytes(c.typ)
	maxRows := len(data) / rb
	want := make([]float32, maxRows)
	for r := range want {
		want[r] = blockwiseDot(c.typ, n, data[r*rb:(r+1)*rb], a)
		if math.IsNaN(float64(want[r])) || math.IsInf(float64(want[r]), 0) {
			t.Fatalf("row %d: operands give %v", r, want[r])
		}
		if v := c.vecDot(n, data[r*rb:(r+1)*rb], a); math.Float32bits(v) != math.Float32bits(want[r]) {
			vecDiffers++
		}
	}
	const sentinel = float32(-1.5)
	for _, count := range repackedLegacyCounts {
		if count > maxRows {
			continue
		}
		// The rows as the mat-vec passes them (capacity running on: the kernel
		// prefetches there) and alone.
		for _, rows := range [][]byte{data[:count*rb], data[: count*rb : count*rb]} {
			out := make([]float32, count+1)
			for i := range out {
				out[i] = sentinel
			}
			c.rows(n, rows, a, out[:count])
			for r := range count {
				if math.Float32bits(out[r]) != math.Float32bits(want[r]) {
					t.Fatalf("%d rows of %d values: row %d = %v (%#x), want %v (%#x)", count, n, r, out[r], math.Float32bits(out[r]), want[r], math.Float32bits(want[r]))
				}
			}
			if out[count] != sentinel {
				t.Fatalf("%d rows of %d values: wrote past the rows", count, n)
			}
		}
	}
	return vecDiffers
}

// repackedLegacyCols are the row lengths tested: one block to a few, and rows of one
// chunk of blocks and a block (repackedChunk) and of several chunks.
var repackedLegacyCols = []int{32, 64, 96, 256, 32 * (repackedChunk + 1), 4096}

// TestRepackedLegacyRandom holds the AVX2 repacked kernels to blockwiseDot on quantized
// normal rows (MXFP4's first rows with the scale bytes' edges) and activations.
func TestRepackedLegacyRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, c := range repackedLegacyCases(t) {
		for _, n := range repackedLegacyCols {
			t.Run(fmt.Sprintf("%s/n=%d", c.typ, n), func(t *testing.T) {
				const rows = 40
				data := randomRows(t, c.typ, rows, n, 1, rng)
				if c.typ == MXFP4 { // the scale bytes' edges: subnormal halves, large ones
					for r, e := range []byte{0, 1, 2, 3, 200, 230} {
						data[r*(n/qk32*17)] = e
					}
				}
				a := randomRows(t, Q8_0, 1, n, 3, rng)
				differs := checkRepackedLegacy(t, c, n, data, a)
				if n >= 256 && differs == 0 {
					t.Errorf("VecDot's arithmetic gives the same bits on all %d rows: the test cannot tell the two apart", rows)
				}
			})
		}
	}
}

// extremeLevels are the nibbles of each format's most negative and most positive value.
var extremeLevels = map[Type][2]byte{
	Q4_0:   {0, 15}, // -8, 7
	IQ4_NL: {0, 15}, // -127, 113
	MXFP4:  {15, 7}, // -12, 12 (doubled)
}

// extremeRows builds rows whose blocks hold only extreme values (all the most negative,
// all the most positive, or a mix), or any values (so that the sums have many significant
// bits and their products with the scales round), with scales from the largest to
// subnormal, both signs; every block's int32 sum is then as large as the format allows
// against extremeActs.
func extremeRows(typ Type, rows, n int, rng *rand.Rand) []byte {
	bb := blockBytes(typ)
	data := make([]byte, rows*n/qk32*bb)
	lv := extremeLevels[typ]
	f16Scales := []uint16{0x7bff, 0xfbff, 0x0001, 0x8001, 0x03ff, 0x3c00, 0x7800, 0x0400, 0x0000, 0x8000}
	for b := 0; b < len(data); b += bb {
		blk := data[b : b+bb]
		if typ == MXFP4 {
			blk[0] = []byte{0, 1, 2, 127, 128, 180, 200}[rng.IntN(7)]
		} else {
			binary.LittleEndian.PutUint16(blk, f16Scales[rng.IntN(len(f16Scales))])
		}
		qs := blk[bb-16:]
		mode := rng.IntN(4)
		for i := range qs {
			lo, hi := lv[mode&1], lv[mode&1]
			switch mode {
			case 2:
				lo, hi = lv[rng.IntN(2)], lv[rng.IntN(2)]
			case 3:
				lo, hi = byte(rng.IntN(16)), byte(rng.IntN(16))
			}
			qs[i] = lo | hi<<4
		}
	}
	return data
}

// extremeActs is one Q8_0 row of -128, -127 and 127 (blocks of one value or mixed), or
// of any bytes, with scales from the largest to subnormal, most with every mantissa bit
// set.
func extremeActs(n int, rng *rand.Rand) []byte {
	a := make([]byte, n/qk32*34)
	f16Scales := []uint16{0x7bff, 0xfbff, 0x0001, 0x03ff, 0x3c00, 0x5bff, 0x2000, 0x3bff, 0xb7ff, 0x1fff}
	for b := 0; b < len(a); b += 34 {
		binary.LittleEndian.PutUint16(a[b:], f16Scales[rng.IntN(len(f16Scales))])
		vals := []int8{-128, -127, 127}
		mode := rng.IntN(5)
		for i := range 32 {
			v := vals[min(mode, 2)]
			switch mode {
			case 3:
				v = vals[rng.IntN(3)]
			case 4:
				v = int8(rng.Uint32())
			}
			a[b+2+i] = byte(v)
		}
	}
	return a
}

// TestRepackedLegacyExtreme holds the kernels to blockwiseDot on the largest int32 sums
// (the int16 stages must neither saturate nor wrap) and on scales at f16's and E8M0's
// edges, so that the products and sums round as often as they can.
func TestRepackedLegacyExtreme(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, c := range repackedLegacyCases(t) {
		for _, n := range repackedLegacyCols {
			t.Run(fmt.Sprintf("%s/n=%d", c.typ, n), func(t *testing.T) {
				for range 4 {
					checkRepackedLegacy(t, c, n, extremeRows(c.typ, 40, n, rng), extremeActs(n, rng))
				}
				// One block of the largest sum a format has: every value at one end
				// against every activation at -128 or 127.
				lv := extremeLevels[c.typ]
				for _, q := range lv {
					for _, y := range []int8{-128, 127} {
						data := extremeRows(c.typ, 8, n, rng)
						a := extremeActs(n, rng)
						bb := blockBytes(c.typ)
						for b := 0; b < len(data); b += bb {
							for i := bb - 16; i < bb; i++ {
								data[b+i] = q | q<<4
							}
						}
						for b := 0; b < len(a); b += 34 {
							for i := range 32 {
								a[b+2+i] = byte(y)
							}
						}
						checkRepackedLegacy(t, c, n, data, a)
					}
				}
			})
		}
	}
}

// BenchmarkRepackedLegacyAVX2 times the repacked kernels over a whole matrix (one thread)
// next to the AVX2 VecDot kernels row by row (the current one-token path on an AVX2
// machine; the rows cut from the matrix, as the mat-vec passes them, so that its prefetch
// runs): 4096×4096 (9 MiB, L3 here), a 2048×768 expert (L2) and, for Q4_0, 4096×32768
// (75 MiB, DRAM). GB/s counts weight bytes.
//
//	GOEXPERIMENT=simd GODEBUG=asyncpreemptoff=1 go test -run '^$' -bench RepackedLegacyAVX2 -benchtime 200x ./tensor
func BenchmarkRepackedLegacyAVX2(b *testing.B) {
	cases := repackedLegacyCases(b)
	rng := rand.New(rand.NewPCG(9, 10))
	for _, shape := range [][2]int{{4096, 4096}, {2048, 768}, {4096, 32768}} {
		n, rows := shape[0], shape[1]
		for _, c := range cases {
			if rows > 4096 && c.typ != Q4_0 {
				continue
			}
			bb := blockBytes(c.typ)
			rb := n / qk32 * bb
			data := make([]byte, rows*rb+8)
			for i := 0; i < rows*rb; i += 8 {
				binary.LittleEndian.PutUint64(data[i:], rng.Uint64())
			}
			data = data[:rows*rb]
			for i := 0; i < len(data); i += bb { // finite scales near 1/64
				data[i+1] = 0x24
				if c.typ == MXFP4 {
					data[i] = byte(120 + rng.IntN(8))
				}
			}
			a := make([]byte, n/qk32*34)
			for i := range a {
				a[i] = byte(rng.Uint32())
			}
			for i := 0; i < len(a); i += 34 {
				a[i+1] = 0x20
			}
			out := make([]float32, rows)
			run := func(name string, f func()) {
				b.Run(fmt.Sprintf("%s/%dx%d/%s", c.typ, n, rows, name), func(b *testing.B) {
					b.SetBytes(int64(len(data)))
					for b.Loop() {
						f()
					}
					b.ReportMetric(float64(len(data))*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
				})
			}
			run("repacked", func() { c.rows(n, data, a, out) })
			run("vecdot", func() {
				for r := range rows {
					out[r] = c.vecDot(n, data[r*rb:(r+1)*rb], a)
				}
			})
		}
	}
}
