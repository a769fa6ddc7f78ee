package tensor

import (
	"fmt"
)

// Matrix is a weight in ggml's layout, usually a view straight into a memory-mapped GGUF
// file (gguf.File.TensorData): rows of Cols elements (ne0, the dot-product length), Rows
// of them (ne1), and for a stack of experts Experts such matrices one after another (ne2).
// A Matrix is immutable and checked once, when it is made, so the hot paths do not re-check.
type Matrix struct {
	typ      Type
	cols     int
	rows     int
	experts  int
	rowBytes int
	data     []byte
	tr       *Traits
	// dot2 and dot4T are the type's two- and four-token kernels (dotTokens2, dotTokens4),
	// nil where it has none: looked up once here, not in every work unit.
	dot2  func(n int, w, a0, a1 []byte) [2]float32
	dot4T func(n int, w, a0, a1, a2, a3 []byte) [4]float32
	// rows1 is the type's kernel over consecutive rows against one vector (dotRowsOne),
	// rows4T against four (dotTokens4Rows).
	rows1  func(n int, rows, a []byte, out []float32)
	rows4T func(n int, rows []byte, rowBytes int, a0, a1, a2, a3 []byte, o0, o1, o2, o3 []float32)
	// rows2 is the type's kernel over consecutive rows against two vectors
	// (dotTokens2Rows, or in an operation's repacked arithmetic: useRepacked), or nil.
	rows2 rows2Kernel
	// packed is the type's row-interleaved kernels for prefill (packed.go), or nil.
	packed *packedFormat
	// repacked is the type's one-token kernel in llama.cpp's repacked arithmetic where it
	// needs no layout of its own (Q4_K, Q2_K; repacked.go), or nil.
	repacked func(n int, rows, a []byte, out []float32)
	// repacked4 is its four-token kernels in gemm's and gemv's arithmetic where the level
	// has them (repackedTokens4).
	repacked4 [2]rows4Kernel
	// repacked2 is its two-token kernel in gemv's arithmetic where the level has one.
	repacked2 rows2Kernel
}

// NewMatrix makes a Matrix of type t over data. shape is in GGUF order ([ne0, ne1, ne2]);
// a 1-D shape is a single row, and dimensions past the third must be 1. The type needs a
// decoder (for GetRows and Row); MatMul and MulMatID also need its dot product, which
// activation-only formats (Q8_1, Q8_K) lack. data must hold exactly the tensor's bytes.
func NewMatrix(t Type, shape []int64, data []byte) (*Matrix, error) {
	if !t.Valid() {
		return nil, fmt.Errorf("matrix: %w", &UnknownTypeError{ID: uint32(t)})
	}
	if len(shape) == 0 {
		return nil, fmt.Errorf("matrix of %s: empty shape", t)
	}
	dims := [3]int64{1, 1, 1}
	for i, d := range shape {
		if d <= 0 || (i >= 3 && d != 1) {
			return nil, fmt.Errorf("matrix of %s: shape %v: a matrix needs positive ne0..ne2 and 1 beyond", t, shape)
		}
		if i < 3 {
			dims[i] = d
		}
	}
	tr, err := TraitsOf(t)
	if err != nil {
		return nil, err
	}
	if tr.ToFloat == nil {
		return nil, fmt.Errorf("matrix of %s: no decoder for the type", t)
	}
	size, err := t.Bytes(dims[:])
	if err != nil {
		return nil, fmt.Errorf("matrix of %s, shape %v: %w", t, shape, err)
	}
	if size != int64(len(data)) {
		return nil, fmt.Errorf("matrix of %s, shape %v: needs %d bytes, have %d", t, shape, size, len(data))
	}
	if dims[0] > maxInt32 || dims[1] > maxInt32 || dims[2] > maxInt32 {
		return nil, fmt.Errorf("matrix of %s, shape %v: dimension too large", t, shape)
	}
	rowBytes, _ := t.RowBytes(dims[0]) // checked by Bytes
	m := &Matrix{typ: t, cols: int(dims[0]), rows: int(dims[1]), experts: int(dims[2]), rowBytes: int(rowBytes), data: data, tr: tr,
		dot2: active.dotTokens2[t], dot4T: active.dotTokens4[t], rows1: active.dotRowsOne[t], rows4T: active.dotTokens4Rows[t], rows2: active.dotTokens2Rows[t],
		packed: packedFormatOf(t, int(dims[1])), repacked: repackedKernelsOf(t, int(dims[1]))}
	if m.repacked != nil {
		m.repacked4, m.repacked2 = active.repackedTokens4[t], active.repackedTokens2[t]
	}
	if tr.VecDot == nil {
		return m, nil
	}
	// The activations of every product are converted to VecDotType; make sure that works
	// for rows of this length now rather than inside a worker later.
	vt := tr.VecDotType
	if _, err := vt.RowBytes(dims[0]); err != nil {
		return nil, fmt.Errorf("matrix of %s, shape %v: activations as %s: %w", t, shape, vt, err)
	}
	if err := QuantizeActivations(vt, nil, nil); err != nil { // an empty row: is there a converter?
		return nil, fmt.Errorf("matrix of %s: %w", t, err)
	}
	return m, nil
}

const maxInt32 = 1<<31 - 1

// Type is the element type of the weights.
func (m *Matrix) Type() Type { return m.typ }

// Cols is ne0, the length of a row and of the activation vectors it multiplies.
func (m *Matrix) Cols() int { return m.cols }

// Rows is ne1, the number of outputs per activation vector.
func (m *Matrix) Rows() int { return m.rows }

// Experts is ne2: the number of stacked matrices (1 for a plain matrix).
func (m *Matrix) Experts() int { return m.experts }

// Expert returns a view of the e-th stacked matrix (0 <= e < Experts()), e.g. one head's
// slice of DeepSeek's attn_k_b.
func (m *Matrix) Expert(e int) Matrix {
	if e < 0 || e >= m.experts {
		panic(fmt.Sprintf("tensor: expert %d of a matrix stack of %d", e, m.experts))
	}
	v := *m
	size := m.rows * m.rowBytes
	v.data, v.experts = m.data[e*size:(e+1)*size:(e+1)*size], 1
	return v
}

// Row decodes row r of expert e into dst (Cols floats), e.g. for checks and references.
func (m *Matrix) Row(e, r int, dst []float32) {
	off := (e*m.rows + r) * m.rowBytes
	m.tr.ToFloat(m.data[off:off+m.rowBytes], dst[:m.cols])
}

// checkDot reports a weight type without a dot product.
func (m *Matrix) checkDot(op string) error {
	if m.tr.VecDot == nil {
		return fmt.Errorf("%s: %s is an activation format, no kernels use it as weights", op, m.typ)
	}
	return nil
}

// Tiles of work. A unit is up to matRowTile weight rows times up to matTokenTile activation
// rows: the weight rows stay in cache while a few activations at a time run down them (see
// mulTokens), so each weight row is read from memory once per matmul however many tokens
// there are.
const (
	matRowTile   = 16
	matTokenTile = 32
)

// A tile with a single activation vector (a decode mat-vec) takes weight rows by bytes
// instead: nothing in it is reused, so it only needs to be one long sequential read, which
// the hardware prefetchers and the kernels' own prefetches serve best, and each switch to
// a new tile breaks that stream. A job streaming total bytes over its workers cuts them
// into streamTilesPerThread tiles per worker (so they finish together), of
// minStreamTile..maxStreamTile bytes. Measured on the build machine, 2 threads,
// out-of-cache Q6_K [2048 → 151936] mat-vec (the output matrix of Qwen3-30B-A3B): tiles
// of 16 rows handed out in turn (reads jumping every ~20 KiB) 22-23 GB/s, 64 KiB tiles 30
// GB/s with 4 KiB pages (a stream read: 28 GB/s); with the file in 2 MiB pages, 64 KiB
// 20.8 GB/s, 512 KiB to 4 MiB 22.4-22.8 (medians of 30 interleaved runs); Q4_K
// [2048 → 4096]: 32 KiB 21.3, 64-256 KiB 23.2-23.4, 1 MiB (five tiles) 22.9.
const (
	minStreamTile        = 64 << 10
	maxStreamTile        = 1 << 20
	streamTilesPerThread = 16
)

// streamTile is the weight bytes of a single-vector tile for a job that streams total
// bytes over threads workers.
func streamTile(total, threads int) int {
	return min(max(total/(threads*streamTilesPerThread), minStreamTile), maxStreamTile)
}

// rowTile is the number of weight rows in a tile multiplied by vectors activation vectors;
// a single vector's tile holds about tileBytes of weights (streamTile).
func (w *Matrix) rowTile(vectors, tileBytes int) int {
	if vectors > 1 {
		return matRowTile
	}
	return ceilDiv(ceilDiv(tileBytes, w.rowBytes), matRowTile) * matRowTile
}

// MatMul multiplies every activation vector in x (len(x)/Cols of them, one per token) by
// the matrix: dst[t*Rows+r] = Σ_c W[r][c]·x[t*Cols+c], ggml_mul_mat. As in ggml, the
// activations are first converted to the weights' VecDotType (Q8_0, Q8_K, F16, …; once per
// call), and each output is one VecDot over a row, accumulated in float. With one token
// this is a mat-vec (decode); with many it is blocked over rows × tokens (prefill).
func (p *Pool) MatMul(dst []float32, w *Matrix, x []float32) error {
	if err := w.checkDot("matmul"); err != nil {
		return err
	}
	tokens, err := w.CheckMatMul(len(dst), len(x))
	if err != nil {
		return err
	}
	if err := p.lock(); err != nil {
		return err
	}
	defer p.mu.Unlock()
	packed := p.usePacked(w) && !w.packingLoses(tokens)
	act, actBytes, err := p.convert(w, x, tokens, packed)
	if err != nil {
		return err
	}
	j := &p.jobs.matmul
	units := j.set(p, w, dst, act, actBytes, tokens)
	j.packed = packed
	return p.run(j, units)
}

// MatMuls is MatMul of several matrices by the same activations, such as a layer's q, k
// and v projections, as one operation: x is converted once, and a worker done with one
// matrix's tiles goes on to the next one's instead of waiting for the others at the end of
// each (on two threads a decode step lost a few microseconds to that wait per operation).
// dsts[i] receives matrix i's outputs, as MatMul(dsts[i], ws[i], x) would. Matrices whose
// activations differ in format are multiplied one after the other, and so are all of them
// for more than one token: there the wait is short next to the work, and fused prefill
// measured 2-3% slower (pp512 of the 8-layer Qwen3-30B-A3B model, two threads).
func (p *Pool) MatMuls(dsts [][]float32, ws []*Matrix, x []float32) error {
	if len(dsts) != len(ws) {
		return fmt.Errorf("matmul: %d outputs for %d matrices", len(dsts), len(ws))
	}
	if len(ws) == 0 {
		return nil
	}
	for i, w := range ws {
		if err := w.checkDot("matmul"); err != nil {
			return err
		}
		if _, err := w.CheckMatMul(len(dsts[i]), len(x)); err != nil {
			return err
		}
		if w.cols != ws[0].cols || w.tr.VecDotType != ws[0].tr.VecDotType || w.packed != ws[0].packed || len(x) != w.cols {
			for i, w := range ws {
				if err := p.MatMul(dsts[i], w, x); err != nil {
					return err
				}
			}
			return nil
		}
	}
	if err := p.lock(); err != nil {
		return err
	}
	defer p.mu.Unlock()
	packed := p.usePacked(ws[0])
	act, actBytes, err := p.convert(ws[0], x, 1, packed)
	if err != nil {
		return err
	}
	j := &p.jobs.matmuls
	j.parts, j.starts = grow(j.parts, len(ws)), grow(j.starts, len(ws))
	units := 0
	for i, w := range ws {
		j.starts[i] = units
		units += j.parts[i].set(p, w, dsts[i], act, actBytes, 1)
		j.parts[i].packed = packed
	}
	return p.run(j, units)
}

// matmulsJob runs the units of several matmulJobs one after the other: unit u is unit
// u-starts[i] of parts[i], for the last i with starts[i] <= u.
type matmulsJob struct {
	parts  []matmulJob
	starts []int
}

func (j *matmulsJob) unit(worker, u int) {
	i := len(j.starts) - 1
	for u < j.starts[i] {
		i--
	}
	j.parts[i].unit(worker, u-j.starts[i])
}

// convert turns rows of activations into w's VecDotType in the pool's scratch, in parallel,
// and for w's packed kernels (packed) on into their layout (prepPackedActs). It returns
// the converted rows and the bytes of each.
func (p *Pool) convert(w *Matrix, x []float32, rows int, packed bool) ([]byte, int, error) {
	vt := w.tr.VecDotType
	q8Bytes, _ := vt.RowBytes(int64(w.cols)) // checked by NewMatrix
	j := &p.jobs.convert
	*j = convertJob{typ: vt, cols: w.cols, x: x, rowBytes: int(q8Bytes), typeBytes: int(q8Bytes)}
	if packed {
		p.packedOps++
		if w.packed.prepared {
			j.packed, j.rowBytes = w.packed, w.cols/qk32*packedActBytes
		}
	}
	p.scratch.act = grow(p.scratch.act, rows*j.rowBytes)
	j.dst = p.scratch.act
	return p.scratch.act, j.rowBytes, p.run(j, rows)
}

type convertJob struct {
	typ       Type
	cols      int
	x         []float32
	dst       []byte
	rowBytes  int
	typeBytes int           // a row's bytes in typ
	packed    *packedFormat // then prepared for its kernels
}

func (j *convertJob) unit(_, u int) {
	row := j.dst[u*j.rowBytes : (u+1)*j.rowBytes]
	err := QuantizeActivations(j.typ, j.x[u*j.cols:(u+1)*j.cols], row[:j.typeBytes])
	if err != nil {
		panic(fmt.Sprintf("tensor: activations converted at a length NewMatrix accepted: %v", err))
	}
	if j.packed != nil {
		prepPackedActs(row, j.cols/qk32, j.packed.offset)
	}
}

// set makes j the product of w by the converted activations act, into dst, and returns
// its unit count. Its tiles are sized for w alone also where it is one part of MatMuls:
// sized for all the parts, the last ones are longer, and so is the wait at the end.
func (j *matmulJob) set(p *Pool, w *Matrix, dst []float32, act []byte, actBytes, tokens int) int {
	p.scratch.wide = grow(p.scratch.wide, p.threads)
	*j = matmulJob{w: *w, act: act, actBytes: actBytes, dst: dst, tokens: tokens, tokenTiles: ceilDiv(tokens, matTokenTile),
		rowTile: w.rowTile(tokens, streamTile(w.rows*w.rowBytes, p.threads)), wide: p.scratch.wide, op: p.packedOps}
	p.useRepacked(&j.w, gemm)
	return ceilDiv(w.rows, j.rowTile) * j.tokenTiles
}

type matmulJob struct {
	w          Matrix
	act        []byte
	actBytes   int
	dst        []float32
	tokens     int
	tokenTiles int
	rowTile    int
	wide       []wideScratch // per worker, for float weights and the packed kernels
	packed     bool          // act is prepared for w's packed kernels
	op         uint64        // Pool.packedOps of this operation
}

// unit computes one tile. Units that follow each other share their weight rows (the token
// tile varies fastest), so a worker finds them in cache.
func (j *matmulJob) unit(worker, u int) {
	w := &j.w
	r0, t0 := u/j.tokenTiles*j.rowTile, u%j.tokenTiles*matTokenTile
	r1, t1 := min(r0+j.rowTile, w.rows), min(t0+matTokenTile, j.tokens)
	rb, ab := w.rowBytes, j.actBytes
	act := func(i int) []byte { return j.act[(t0+i)*ab : (t0+i+1)*ab] }
	out := func(i int) []float32 { return j.dst[(t0+i)*w.rows+r0 : (t0+i)*w.rows+r1] }
	if j.packed {
		w.mulPacked(&j.wide[worker].packed, j.op, w.data[r0*rb:r1*rb], r1-r0, t1-t0, true, act, out)
		return
	}
	if w.typ == F16 || w.typ == F32 {
		w.mulFloat(&j.wide[worker], w.data[r0*rb:r1*rb], r1-r0, t1-t0, act, out, w.tinyMatMul(j.tokens))
		return
	}
	w.mulTokens(w.data[r0*rb:r1*rb], t1-t0, act, out)
}

// wideScratch is a worker's scratch for products of float weights (an F16 or F32 tile's
// activation vectors and a row, widened to float32), MulMatID's gathered vectors and the
// packed kernels'.
type wideScratch struct {
	acts   []float32
	rows   []float32
	w4, x4 [4][]float32 // mulFloat's rows and vectors in fours
	out16  [16]float32
	out4   [4]float32
	packed packedScratch
}

// mulTokens multiplies whole rows of w, rows, by count activation vectors: out(i)[r] is
// row r times act(i). It takes the vectors four at a time, then in pairs, then alone,
// through w's multi-token kernels, and runs each group down all the rows, so that the
// group's vectors stay in L1 and the tile's rows are read again from L1 or L2; row by row
// against every vector read all of a tile's vectors from L2 for each row (pp512 of a
// Qwen3-30B-A3B-shaped Q4_K_M on 2 threads went from about 127 to 136 t/s).
func (w *Matrix) mulTokens(rows []byte, count int, act func(i int) []byte, out func(i int) []float32) {
	n, rb := w.cols, w.rowBytes
	i := 0
	if rows4T := w.rows4T; rows4T != nil {
		for ; i+4 <= count; i += 4 {
			rows4T(n, rows, rb, act(i), act(i+1), act(i+2), act(i+3), out(i), out(i+1), out(i+2), out(i+3))
		}
	}
	if dot4T := w.dot4T; dot4T != nil {
		for ; i+4 <= count; i += 4 {
			a0, a1, a2, a3 := act(i), act(i+1), act(i+2), act(i+3)
			o0, o1, o2, o3 := out(i), out(i+1), out(i+2), out(i+3)
			for r := range o0 {
				d := dot4T(n, rows[r*rb:(r+1)*rb], a0, a1, a2, a3)
				o0[r], o1[r], o2[r], o3[r] = d[0], d[1], d[2], d[3]
			}
		}
	}
	if rows2 := w.rows2; rows2 != nil {
		for ; i+2 <= count; i += 2 {
			rows2(n, rows, act(i), act(i+1), out(i), out(i+1))
		}
	}
	if dot2 := w.dot2; dot2 != nil {
		for ; i+2 <= count; i += 2 {
			a0, a1 := act(i), act(i+1)
			o0, o1 := out(i), out(i+1)
			for r := range o0 {
				d := dot2(n, rows[r*rb:(r+1)*rb], a0, a1)
				o0[r], o1[r] = d[0], d[1]
			}
		}
	}
	for ; i < count; i++ {
		a, o := act(i), out(i)
		if w.rows1 != nil {
			w.rows1(n, rows, a, o)
			continue
		}
		for r := range o {
			o[r] = w.tr.VecDot(n, rows[r*rb:(r+1)*rb], a)
		}
	}
}

// MulMatID is ggml_mul_mat_id, the expert matmul of a MoE layer. w stacks the experts
// ([ne0, ne1, n_expert] in GGUF order); ids holds k expert ids per token (len(ids)/k
// tokens); dst[(t*k+s)*Rows + r] is row r of expert ids[t*k+s] times token t's activations.
// x holds either one vector per token, shared by its k slots (the gate and up projections),
// or one per (token, slot) in the same order as ids (the down projection).
//
// Work is grouped by expert: the (token, slot) pairs routed to an expert are gathered, and
// each of its row tiles is multiplied by all of them, so an expert's weights are read once
// per batch. An id of -1 marks an unused slot (ik_llama.cpp's smart expert reduction):
// its outputs are zero.
func (p *Pool) MulMatID(dst []float32, w *Matrix, x []float32, ids []int32, k int) error {
	dsts, ws := [1][]float32{dst}, [1]*Matrix{w}
	return p.MulMatIDs(dsts[:], ws[:], x, ids, k)
}

// MulMatIDs is MulMatID of several stacks of experts by the same activations and routing,
// such as a MoE layer's gate and up projections, as one operation (see MatMuls): the pairs
// are grouped and x converted once, and no worker waits for the others between stacks.
// dsts[i] receives stack i's outputs. Stacks that differ in format or shape are multiplied
// one after the other, and so are all of them for more than one token (see MatMuls).
func (p *Pool) MulMatIDs(dsts [][]float32, ws []*Matrix, x []float32, ids []int32, k int) error {
	if len(dsts) != len(ws) {
		return fmt.Errorf("mul_mat_id: %d outputs for %d expert stacks", len(dsts), len(ws))
	}
	if len(ws) == 0 {
		return nil
	}
	w, alike := ws[0], len(ids) == k
	var shared bool // of the first stack, and of every stack alike
	for i, wi := range ws {
		if err := wi.checkDot("mul_mat_id"); err != nil {
			return err
		}
		sh, err := wi.CheckMulMatID(len(dsts[i]), len(x), ids, k)
		if err != nil {
			return err
		}
		if i == 0 {
			shared = sh
		}
		alike = alike && wi.typ == w.typ && wi.cols == w.cols && wi.rows == w.rows && wi.experts == w.experts
	}
	if alike {
		return p.mulMatIDs(dsts, ws, x, ids, k, shared, false)
	}
	for i, wi := range ws {
		// Whether x holds a vector per token or per slot depends on the stack's columns.
		shared, _ := wi.CheckMulMatID(len(dsts[i]), len(x), ids, k)
		if err := p.mulMatIDs(dsts[i:i+1], ws[i:i+1], x, ids, k, shared, false); err != nil {
			return err
		}
	}
	return nil
}

// MatMulStack is MulMatID's product with ggml_mul_mat's arithmetic: ggml_mul_mat of a 3-D
// weight, a stack of matrices each multiplied by its own vectors, such as DeepSeek's
// absorbed attention multiplying each head's query by that head's slice of attn_k_b (ids
// names each (token, slot) vector's matrix, as for MulMatID). The two differ only for
// float weights, which a batch of two tokens or more multiplies in tinyBLAS's order here
// (ggml_float.go) and in ggml_vec_dot's in ggml_mul_mat_id.
func (p *Pool) MatMulStack(dst []float32, w *Matrix, x []float32, ids []int32, k int) error {
	if err := w.checkDot("mul_mat"); err != nil {
		return err
	}
	shared, err := w.CheckMulMatID(len(dst), len(x), ids, k)
	if err != nil {
		return err
	}
	dsts, ws := [1][]float32{dst}, [1]*Matrix{w}
	return p.mulMatIDs(dsts[:], ws[:], x, ids, k, shared, true)
}

// mulMatIDs is MulMatIDs once the operands are checked and the stacks known to be alike;
// stack is MatMulStack's arithmetic.
func (p *Pool) mulMatIDs(dsts [][]float32, ws []*Matrix, x []float32, ids []int32, k int, shared, stack bool) error {
	w := ws[0]
	if err := p.lock(); err != nil {
		return err
	}
	defer p.mu.Unlock()

	// Group the pairs by expert (a counting sort); zero the outputs of unused slots.
	s := &p.scratch
	s.counts = grow(s.counts, w.experts+1)
	clear(s.counts)
	for i, e := range ids {
		if e < 0 {
			for _, dst := range dsts {
				clear(dst[i*w.rows : (i+1)*w.rows])
			}
			continue
		}
		s.counts[e+1]++
	}
	for e := range w.experts {
		s.counts[e+1] += s.counts[e] // now counts[e] is where expert e's pairs start
	}
	used := int(s.counts[w.experts])
	s.order = grow(s.order, used)
	for i, e := range ids {
		if e >= 0 {
			s.order[s.counts[e]] = int32(i)
			s.counts[e]++
		}
	}
	// counts[e] is now where expert e's pairs end; cut them into tiles.
	touched, prev := 0, int32(0) // experts with pairs: their weights are what the job streams
	for _, end := range s.counts[:w.experts] {
		if end > prev {
			touched++
		}
		prev = end
	}
	tileBytes := streamTile(touched*w.rows*w.rowBytes, p.threads)
	s.tiles = s.tiles[:0]
	start := int32(0)
	for e := range w.experts {
		end := s.counts[e]
		rowTile := w.rowTile(int(end-start), tileBytes)
		for r := 0; r < w.rows && start < end; r += rowTile {
			for p0 := start; p0 < end; p0 += matTokenTile {
				s.tiles = append(s.tiles, idTile{expert: int32(e), row: int32(r), rows: int32(min(rowTile, w.rows-r)), pair: p0, pairs: min(end-p0, matTokenTile)})
			}
		}
		start = end
	}

	vectors := len(ids) / k // one per token
	if !shared {
		vectors = len(ids) // one per (token, slot)
	}
	packed := p.usePacked(w)
	act, actBytes, err := p.convert(w, x, vectors, packed)
	if err != nil {
		return err
	}
	p.scratch.wide = grow(p.scratch.wide, p.threads)
	j := &p.jobs.mulMatIDs
	j.parts = grow(j.parts, len(ws))
	for i, wi := range ws {
		j.parts[i] = mulMatIDJob{w: *wi, act: act, actBytes: actBytes, dst: dsts[i], order: s.order, tiles: s.tiles, k: k, shared: shared,
			wide: p.scratch.wide, packed: packed, op: p.packedOps, tiny: stack && wi.tinyMatMul(len(ids)/k)}
		p.useRepacked(&j.parts[i].w, gemv)
	}
	return p.run(j, len(ws)*len(s.tiles))
}

// mulMatIDsJob runs the tiles of each part in turn: unit u is tile u mod T of part u / T,
// for T tiles a part.
type mulMatIDsJob struct {
	parts []mulMatIDJob
}

func (j *mulMatIDsJob) unit(worker, u int) {
	tiles := len(j.parts[0].tiles)
	j.parts[u/tiles].unit(worker, u%tiles)
}

// idTile is a unit of MulMatID: rows row..row+rows of one expert times pairs
// order[pair:pair+pairs].
type idTile struct {
	expert, row, rows, pair, pairs int32
}

type mulMatIDJob struct {
	w        Matrix
	act      []byte
	actBytes int
	dst      []float32
	order    []int32
	tiles    []idTile
	k        int
	shared   bool
	wide     []wideScratch // per worker, for float weights and the packed kernels
	packed   bool          // act is prepared for w's packed kernels
	op       uint64        // Pool.packedOps of this operation
	tiny     bool          // float weights in tinyBLAS's order (MatMulStack)
}

func (j *mulMatIDJob) unit(worker, u int) {
	w, tile := &j.w, j.tiles[u]
	r0 := int(tile.row)
	r1 := r0 + int(tile.rows)
	rb := w.rowBytes
	pairs := j.order[tile.pair : tile.pair+tile.pairs]
	rows := w.data[int(tile.expert)*w.rows*rb:][r0*rb : r1*rb]
	act := func(i int) []byte { return j.vector(pairs[i]) }
	out := func(i int) []float32 { return j.dst[int(pairs[i])*w.rows+r0 : int(pairs[i])*w.rows+r1] }
	if j.packed {
		w.mulPacked(&j.wide[worker].packed, j.op, rows, r1-r0, len(pairs), false, act, out)
		return
	}
	if w.typ == F16 || w.typ == F32 {
		w.mulFloat(&j.wide[worker], rows, r1-r0, len(pairs), act, out, j.tiny)
		return
	}
	w.mulTokens(rows, len(pairs), act, out)
}

// vector is the activation vector of a (token, slot) pair: its token's when the k slots
// share one.
func (j *mulMatIDJob) vector(pair int32) []byte {
	v := int(pair)
	if j.shared {
		v /= j.k
	}
	return j.act[v*j.actBytes : (v+1)*j.actBytes]
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// CheckMatMul checks the sizes of a MatMul by this matrix — ndst outputs for nx activations
// — and returns the number of tokens. Every backend checks its operands the same way.
func (w *Matrix) CheckMatMul(ndst, nx int) (tokens int, err error) {
	if w.experts != 1 {
		return 0, fmt.Errorf("matmul: the matrix stacks %d experts; use MulMatID or Expert", w.experts)
	}
	if nx%w.cols != 0 {
		return 0, fmt.Errorf("matmul: %d activations are not whole vectors of %d", nx, w.cols)
	}
	tokens = nx / w.cols
	if ndst != tokens*w.rows {
		return 0, fmt.Errorf("matmul: %d tokens × %d rows need %d outputs, dst has %d", tokens, w.rows, tokens*w.rows, ndst)
	}
	return tokens, nil
}

// CheckMulMatID checks the operands of a MulMatID by this stack of experts (ndst outputs,
// nx activations, the ids and k) and reports whether x holds one vector per token, shared
// by its slots, rather than one per slot.
func (w *Matrix) CheckMulMatID(ndst, nx int, ids []int32, k int) (shared bool, err error) {
	if k <= 0 || len(ids)%k != 0 {
		return false, fmt.Errorf("mul_mat_id: %d ids are not whole groups of k=%d", len(ids), k)
	}
	tokens := len(ids) / k
	pairs := len(ids)
	if nx%w.cols != 0 {
		return false, fmt.Errorf("mul_mat_id: %d activations are not whole vectors of %d", nx, w.cols)
	}
	shared = nx/w.cols == tokens
	if !shared && nx/w.cols != pairs {
		return false, fmt.Errorf("mul_mat_id: %d activation vectors for %d tokens × %d slots; need one per token or one per slot", nx/w.cols, tokens, k)
	}
	if ndst != pairs*w.rows {
		return false, fmt.Errorf("mul_mat_id: %d tokens × %d slots × %d rows need %d outputs, dst has %d", tokens, k, w.rows, pairs*w.rows, ndst)
	}
	for i, e := range ids {
		if e < -1 || int(e) >= w.experts {
			return false, fmt.Errorf("mul_mat_id: token %d slot %d: expert id %d outside [0, %d)", i/k, i%k, e, w.experts)
		}
	}
	return shared, nil
}
