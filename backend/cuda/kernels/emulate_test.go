package kernels

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moerun/moerun/tensor"
)

// TestEmulated runs the kernels' CUDA source on the CPU: testdata/emulate builds matvec.cu
// with the host C++ compiler (host versions of the few CUDA intrinsics it uses, a warp's
// lanes run as fibers) and executes launches of the shapes matvec.cu documents. The results
// are compared with package tensor, the reference: getrows bit for bit on random bytes
// (every bit of every block matters), mmv and mmq on quantized Gaussian weights against a
// float64 dot product of tensor's dequantized rows, for plain and grouped launches, with
// grids smaller than the work and rows and tokens that leave a block or tile part empty. It skips where no C++
// compiler is installed; a GPU run of the same kernels is package cuda's conformance test.
func TestEmulated(t *testing.T) {
	cxx := ""
	for _, name := range []string{"g++-11", "g++", "c++", "clang++"} {
		if path, err := exec.LookPath(name); err == nil {
			cxx = path
			break
		}
	}
	if cxx == "" {
		t.Skip("no C++ compiler to build testdata/emulate")
	}
	// The compiler reads the sources, not this process: reading them here puts them in the
	// go test cache's key, so editing one reruns the test.
	for _, src := range []string{"matvec.cu", "matmul.cuh", "quants.cuh", "ops.cuh", "testdata/emulate/emulate.cc", "testdata/emulate/cuda_fp16.h", "testdata/emulate/warp.h"} {
		if _, err := os.ReadFile(src); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	emulator := filepath.Join(dir, "emulate")
	build := exec.Command(cxx, "-std=c++17", "-O1", "-ffp-contract=off", "-Itestdata/emulate", "-o", emulator, "testdata/emulate/emulate.cc")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the emulator: %v\n%s", err, out)
	}

	s := &script{dir: dir}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, typ := range types {
		cols := []int{512}
		switch typ.BlockSize() {
		case 1:
			cols = []int{520, 517, 37} // a partial last chunk; rows not 16-byte aligned
		case 32:
			// 96: rows of an odd number of blocks, so rows start at every alignment; 64: the
			// buffer ends with an odd-numbered block, whose quants (Q4_0, Q8_0, IQ4_NL) end at
			// the buffer's end on a 4-byte boundary.
			cols = []int{64, 96}
		}
		for _, c := range cols {
			addCases(t, s, rng, typ, c)
			addTiledCases(t, s, rng, typ, c)
		}
	}
	addQuantizeActCases(t, s, rng)
	run := exec.Command(emulator)
	run.Stdin = strings.NewReader(s.text.String())
	if out, err := run.CombinedOutput(); err != nil {
		t.Fatalf("emulator: %v\n%s", err, out)
	}
	for _, c := range s.launches {
		c.check(t, readFloats(t, c.output))
	}
}

// script collects the emulator's launches and the files they read.
type script struct {
	dir      string
	text     strings.Builder
	files    int
	launches []*launch
}

type launch struct {
	name   string
	output string
	want   []float32
	// tolerance[i] bounds |got - want| for mmv: 1e-5·Σ|w·x|, several times the float32
	// rounding of a lane's ≤ 33 fused multiply-adds and the 5 shuffle additions. nil:
	// bit-exact.
	tolerance []float64
}

// file writes data (a slice of fixed-size values) for the emulator and returns its path.
func (s *script) file(t *testing.T, data any) string {
	var buf bytes.Buffer
	if err := binary.Write(&buf, binary.LittleEndian, data); err != nil {
		t.Fatal(err)
	}
	s.files++
	path := filepath.Join(s.dir, fmt.Sprint(s.files))
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// add queues a launch; args are the kernel's parameters in emulate.cc's script syntax, the
// output buffer written as "out".
func (s *script) add(l *launch, kernel string, grid, block [2]int, args ...string) {
	l.output = filepath.Join(s.dir, fmt.Sprintf("out%d", len(s.launches)))
	fmt.Fprintf(&s.text, "launch %s %d %d %d %d %s %d\n%s\nend\n", kernel, grid[0], grid[1], block[0], block[1],
		l.output, len(l.want), strings.Join(args, "\n"))
	s.launches = append(s.launches, l)
}

func (l *launch) check(t *testing.T, got []float32) {
	t.Helper()
	bad := 0
	for i, w := range l.want {
		g := got[i]
		var ok bool
		switch {
		case math.IsNaN(float64(w)) || math.IsNaN(float64(g)):
			ok = math.IsNaN(float64(w)) && math.IsNaN(float64(g)) // NaN: an output that must stay untouched
		case l.tolerance == nil:
			ok = math.Float32bits(g) == math.Float32bits(w)
		default:
			ok = math.Abs(float64(g)-float64(w)) <= l.tolerance[i]
		}
		if !ok {
			if bad < 5 {
				t.Errorf("%s: element %d = %g, want %g", l.name, i, g, w)
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d elements wrong", l.name, bad, len(l.want))
	}
}

func readFloats(t *testing.T, path string) []float32 {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float32, len(data)/4)
	if err := binary.Read(bytes.NewReader(data), binary.LittleEndian, out); err != nil {
		t.Fatal(err)
	}
	return out
}

func i64(v int) string { return fmt.Sprint("i64 ", v) }

// decodeRows dequantizes rows of cols values with package tensor.
func decodeRows(t *testing.T, typ tensor.Type, data []byte, cols int) []float32 {
	rowBytes := int(must(typ.RowBytes(int64(cols))))
	out := make([]float32, len(data)/rowBytes*cols)
	for r := range len(data) / rowBytes {
		if err := tensor.Dequantize(typ, data[r*rowBytes:][:rowBytes], out[r*cols:][:cols]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// addCases queues typ's launches for rows of cols values.
func addCases(t *testing.T, s *script, rng *rand.Rand, typ tensor.Type, cols int) {
	const rows, experts = 9, 3 // 9 rows: the last block of 4 has one
	rowBytes := int(must(typ.RowBytes(int64(cols))))
	tag := fmt.Sprintf("%s/%d", typ, cols)

	// getrows of random bytes, all three experts' rows as one matrix. A quarter of the bytes
	// are edge values, so that zero and subnormal scales (E8M0 0 and 1, f16 exponent 0),
	// all-ones fields and sign bits all occur.
	raw := make([]byte, experts*rows*rowBytes)
	edges := []byte{0x00, 0x01, 0x7F, 0x80, 0xFF}
	for i := range raw {
		raw[i] = byte(rng.Uint32())
		if rng.IntN(4) == 0 {
			raw[i] = edges[rng.IntN(len(edges))]
		}
	}
	all := decodeRows(t, typ, raw, cols)
	ids := []int32{0, experts*rows - 1, 5, 13, 1, 20, 7}
	var want []float32
	for _, id := range ids {
		want = append(want, all[int(id)*cols:][:cols]...)
	}
	rawFile, idsFile := s.file(t, raw), s.file(t, ids)
	for _, grid := range []int{len(ids), 3} {
		s.add(&launch{name: fmt.Sprintf("getrows %s grid %d", tag, grid), want: want}, GetRows(typ), [2]int{grid, 1},
			[2]int{GetRowsBlockX, 1}, "buf "+rawFile, "buf "+idsFile, "out", i64(cols), i64(len(ids)), i64(rowBytes))
	}

	// mmv on quantized Gaussian weights and activations.
	const tokens, k = 13, 3
	p := newProducts(t, s, rng, typ, cols, rows, experts, tokens, k)
	mmvBlock := [2]int{MatVecBlockX, MatVecBlockY}
	gridX := (rows + MatVecBlockY - 1) / MatVecBlockY
	for _, shape := range [][2]int{{1, 1}, {tokens, 2}, {tokens, 1}} { // tokens, grid.y
		p.plain(s, "mmv", MatVec(typ), [2]int{gridX, shape[1]}, mmvBlock, shape[0])
	}
	p.grouped(t, s, rng, "mmv", MatVec(typ), gridX, mmvBlock, GroupSize)
}

// addQuantizeActCases queues quantize_act_f32 for both activation formats, against package
// tensor bit for bit: the activations the CPU matmul quantizes (QuantizeActivations),
// dequantized. Besides Gaussian values the rows hold an all-zero block, halves that
// round to even, and a Q8_K block whose largest magnitude occurs with both signs (the
// first one sets the scale's sign).
func addQuantizeActCases(t *testing.T, s *script, rng *rand.Rand) {
	const cols, rows = 512, 3
	x := make([]float32, cols*rows)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	clear(x[cols : cols+256]) // row 1: a zero Q8_K block, so zero Q8_0 blocks too
	for i := range 32 {
		x[64+i] = float32(i-16) * 0.5 // scale 1: every other value a half
	}
	x[64+31] = 127
	x[2*cols+5], x[2*cols+200] = -4, 4 // row 2's first Q8_K block
	xFile := s.file(t, x)
	for _, vdt := range []tensor.Type{tensor.Q8_0, tensor.Q8_K} {
		kind, block := uint64(0), 32
		if vdt == tensor.Q8_K {
			kind, block = 1, 256
		}
		rowBytes := int(must(vdt.RowBytes(cols)))
		quantized := make([]byte, rows*rowBytes)
		for r := range rows {
			if err := tensor.QuantizeActivations(vdt, x[r*cols:][:cols], quantized[r*rowBytes:][:rowBytes]); err != nil {
				t.Fatal(err)
			}
		}
		want := decodeRows(t, vdt, quantized, cols)
		blocks := rows * cols / block
		for _, grid := range []int{(blocks + OpRowsPerBlock - 1) / OpRowsPerBlock, 1} {
			s.add(&launch{name: fmt.Sprintf("quantize_act_f32 %s grid %d", vdt, grid), want: want}, QuantizeActF32,
				[2]int{grid, 1}, [2]int{OpBlockX, 1}, "out", "buf "+xFile, i64(cols), i64(rows), i64(int(kind)))
		}
	}
}

// addTiledCases queues mmq's launches for typ's rows of cols values: a matrix of 70 rows
// (a full tile of TileRows and one of 6, which leaves most lanes' rows empty) and 45
// tokens (a full pass of TileTokens and one of 13), plain and grouped by expert as
// package cuda launches them (groups of up to TileTokens pairs padded with empty ones,
// unused slots), with one group that holds all of an expert's pairs (several passes), an
// empty group among the others, and grids smaller than the work.
func addTiledCases(t *testing.T, s *script, rng *rand.Rand, typ tensor.Type, cols int) {
	const rows, experts, tokens, k = 70, 3, 45, 3
	p := newProducts(t, s, rng, typ, cols, rows, experts, tokens, k)
	block := [2]int{TileBlockX, 1}
	gridX := (rows + TileRows - 1) / TileRows
	passes := (tokens + TileTokens - 1) / TileTokens
	for _, shape := range [][2]int{{1, 1}, {tokens, passes}, {tokens, 1}} { // tokens, grid.y
		p.plain(s, "mmq", MatMulTiled(typ), [2]int{gridX, shape[1]}, block, shape[0])
	}
	p.grouped(t, s, rng, "mmq", MatMulTiled(typ), gridX, block, TileTokens)
}

// products are a product test's operands, shared by mmv's and mmq's cases: experts stacks
// of rows × cols Gaussian weights quantized to typ, and Gaussian activations, one row per
// (token, slot) pair of tokens tokens with k slots each.
type products struct {
	typ                                      tensor.Type
	cols, rows, experts, tokens, k, rowBytes int
	tag, wFile, xFile                        string
	wf                                       []float32 // the weights dequantized
	xSeen                                    []float32 // the activations as the dot products see them
}

func newProducts(t *testing.T, s *script, rng *rand.Rand, typ tensor.Type, cols, rows, experts, tokens, k int) *products {
	p := &products{typ: typ, cols: cols, rows: rows, experts: experts, tokens: tokens, k: k,
		rowBytes: int(must(typ.RowBytes(int64(cols)))), tag: fmt.Sprintf("%s/%d", typ, cols)}
	src := make([]float32, experts*rows*cols)
	for i := range src {
		src[i] = float32(rng.NormFloat64())
	}
	w := make([]byte, experts*rows*p.rowBytes)
	for r := range experts * rows {
		if err := tensor.Quantize(typ, src[r*cols:][:cols], w[r*p.rowBytes:][:p.rowBytes]); err != nil {
			t.Fatal(err)
		}
	}
	p.wf = decodeRows(t, typ, w, cols)
	x := make([]float32, tokens*k*cols)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	p.wFile, p.xFile = s.file(t, w), s.file(t, x)
	// The kernels round the activations to F16 or BF16 as they read them for weights of
	// those types.
	p.xSeen = slices.Clone(x)
	for i, v := range p.xSeen {
		switch typ {
		case tensor.F16:
			p.xSeen[i] = tensor.F16ToF32(tensor.F32ToF16(v))
		case tensor.BF16:
			p.xSeen[i] = tensor.BF16ToF32(tensor.F32ToBF16(v))
		}
	}
	return p
}

// launch is a launch whose outRows output rows are all unset (NaN) until expect sets them.
func (p *products) launch(name string, outRows int) *launch {
	l := &launch{name: name, want: make([]float32, outRows*p.rows), tolerance: make([]float64, outRows*p.rows)}
	for i := range l.want {
		l.want[i] = float32(math.NaN())
	}
	return l
}

// expect sets output row yRow to weight rows wRow.. (of all experts) times activation row
// xRow. An output's float32 rounding errors add up over the columns: 1e-5·Σ|w·x| covers
// them with a wide margin at these lengths (a random walk of ≤ 520 roundings of 2^-24
// relative to the running sum).
func (p *products) expect(l *launch, yRow, wRow, xRow int) {
	for r := range p.rows {
		var sum, abs float64
		for c := range p.cols {
			v := float64(p.wf[(wRow+r)*p.cols+c]) * float64(p.xSeen[xRow*p.cols+c])
			sum, abs = sum+v, abs+math.Abs(v)
		}
		l.want[yRow*p.rows+r] = float32(sum)
		l.tolerance[yRow*p.rows+r] = 1e-5*abs + 1e-30
	}
}

// plain queues a plain product of the first expert with the first n activation rows.
func (p *products) plain(s *script, name, entry string, grid, block [2]int, n int) {
	l := p.launch(fmt.Sprintf("%s %s: %d tokens, grid.y %d", name, p.tag, n, grid[1]), n)
	for tok := range n {
		p.expect(l, tok, 0, tok)
	}
	s.add(l, entry, grid, block, "buf "+p.wFile, "buf "+p.xFile, "out", "null", "null",
		"null", i64(p.cols), i64(p.rows), i64(n), i64(0), i64(0), i64(p.rowBytes), i64(0))
}

// grouped queues products grouped by expert as package cuda launches them: each (token,
// slot) pair picks an expert or none (-1, left untouched); the pairs are grouped by expert,
// at most groupSize to a group, or all of an expert's pairs in one group, which the kernel
// serves in several passes; an empty group sits among the others and two empty ones pad
// the list as group_pairs pads it; grids smaller than the work are tried too.
func (p *products) grouped(t *testing.T, s *script, rng *rand.Rand, name, entry string, gridX int, block [2]int, groupSize int) {
	byExpert := make([][]int32, p.experts)
	for pair := range p.tokens * p.k {
		if e := rng.IntN(p.experts+1) - 1; e >= 0 {
			byExpert[e] = append(byExpert[e], int32(pair))
		}
	}
	for _, maxGroup := range []int{groupSize, p.tokens * p.k} {
		var sel, gstart, gexpert []int32
		for e, pairs := range byExpert {
			if e == 1 {
				gstart, gexpert = append(gstart, int32(len(sel))), append(gexpert, 2) // an empty group
			}
			for chunk := range slices.Chunk(pairs, maxGroup) {
				gstart, gexpert = append(gstart, int32(len(sel))), append(gexpert, int32(e))
				sel = append(sel, chunk...)
			}
		}
		for range 2 { // group_pairs' padding
			gstart, gexpert = append(gstart, int32(len(sel))), append(gexpert, 0)
		}
		gstart = append(gstart, int32(len(sel)))
		selFile, gstartFile, gexpertFile := s.file(t, sel), s.file(t, gstart), s.file(t, gexpert)
		for xPerSlot := range 2 {
			gridYs := []int{len(gexpert)}
			if xPerSlot == 0 && maxGroup == groupSize {
				gridYs = append(gridYs, 2) // fewer blocks than groups
			}
			for _, gridY := range gridYs {
				l := p.launch(fmt.Sprintf("%s %s: groups of up to %d, xPerSlot %d, grid.y %d", name, p.tag, maxGroup, xPerSlot, gridY), p.tokens*p.k)
				for g, e := range gexpert {
					for _, pair := range sel[gstart[g]:gstart[g+1]] {
						xRow := int(pair) / p.k
						if xPerSlot == 1 {
							xRow = int(pair)
						}
						p.expect(l, int(pair), int(e)*p.rows, xRow)
					}
				}
				s.add(l, entry, [2]int{gridX, gridY}, block, "buf "+p.wFile, "buf "+p.xFile, "out", "buf "+selFile,
					"buf "+gstartFile, "buf "+gexpertFile, i64(p.cols), i64(p.rows), i64(len(gexpert)), i64(p.k), i64(xPerSlot),
					i64(p.rowBytes), i64(p.rows*p.rowBytes))
			}
		}
	}
}
