package tensor

import (
	"encoding/binary"
	"math"
	"unsafe"
)

// Row-interleaved ("packed") products of the 32-value 4-bit formats (Q4_0, IQ4_NL, MXFP4)
// by Q8_0 activations, and of Q4_K and Q2_K by Q8_K.
//
// On an x86 CPU with AVX2, llama.cpp copies these tensors (those with a multiple of 8
// rows) into its CPU_REPACK buffer, eight rows interleaved, and multiplies them with
// ggml_gemm_q4_0_8x8_q8_0 (prefill), ggml_gemv_q4_0_8x8_q8_0 (one token) and their
// siblings: per row, token and 32-value block the exact integer sum, then
// acc = float(sum)·(d_w·d_y) + acc, one FMA a block, where ggml_vec_dot_q4_0_q8_0 keeps
// eight float lanes a row. The tiny-qwen3moe fixture's Q4_0 experts ran that way. moerun
// does the same arithmetic, so it gets the same bits, without copying the weights:
//
//   - several tokens: a tile packs its rows, 16 at a time, into a worker's scratch, each
//     32-bit lane one row, and every token of the tile then multiplies them with VPDPBUSD
//     against its activation bytes broadcast four at a time: 64 useful byte products an
//     instruction, where the rows kernel's 512-bit registers hold two rows' eight lanes
//     each and need a float step per row and block;
//   - one token (decode): a kernel reads 16 rows straight from the weights, one row a
//     128-bit lane, and adds each row's four dword sums up by a 4×4 transpose, with half
//     the rows kernel's instructions.
//
// So a prompt gives bit for bit the logits of feeding it token by token, as in llama.cpp.
//
// Q4_K (repacked.go) is packed the same way, 16 rows a group, a 256-value super-block at a
// time: its values as bytes, its sub-blocks' 6-bit scales as float32 and mins as int16
// pairs, against Q8_K activations as they are. Each 64-value chunk's scaled integer sum
// is exact in float32, which gives llama.cpp's gemm (per chunk) and gemv (per super-block)
// roundings with no horizontal adds. Q2_K (on AVX-512) stores its values times their
// scales, which fit a byte. One token takes the rows kernel instead.
//
// Pool.SetRepack(false) (--no-repack) gives VecDot's arithmetic instead, as llama.cpp's
// flag does. The kernels (simd_packed_amd64.s) need AVX-512 VNNI; elsewhere packedFormats
// is empty and the AVX2 level runs the same arithmetic in rows kernels (repackedKernels:
// simd_repacked_legacy_amd64.go, simd_repacked_q4k_amd64.go).

// packedFormat describes a format with packed kernels: pack lays out 16 rows (rowBytes
// apart) of nb blocks of blockValues values as blockBytes a block.
type packedFormat struct {
	pack func(w unsafe.Pointer, rowBytes, nb int, dst unsafe.Pointer)
	// rows1 multiplies groups whole groups of 16 rows by one token's prepared activations
	// a, straight from the weights, into out (decode); nil where one token takes the rows
	// kernels (minTokens).
	rows1 func(w unsafe.Pointer, rowBytes, groups, nb int, a unsafe.Pointer, out *float32)
	// prepared: the kernels take activations prepPackedActs prepared, with offset what
	// the packed value bytes, unsigned, exceed the format's signed values by; otherwise
	// the VecDotType's rows as they are (Q4_K's and Q2_K's Q8_K).
	prepared                bool
	offset                  int32
	blockValues, blockBytes int
	// dots are the kernels for 8, 4, 2 and 1 tokens (nil where there is none); gemm4 is
	// mul_mat's for its tokens in fours where that arithmetic differs (Q4_K, Q2_K), or nil.
	dots  [4]packedDot
	gemm4 packedDot
	// minTokens: fewer tokens take the rows kernels (mulTokens), for which packing the
	// group would cost more than it saves.
	minTokens int
}

// packedDot multiplies one packed group of 16 rows by its tokens' activations (acts[t])
// and stores to outs[t] the rows mask selects.
type packedDot func(w unsafe.Pointer, nb int, acts *unsafe.Pointer, outs **float32, mask uint16)

const (
	packedGroupRows  = 16
	packedBlockBytes = 8*64 + 64 // eight registers of value bytes, 16 float32 scales
	packedActBytes   = 40        // 32 value bytes, int32 correction, float32 scale
	// A Q4_K super-block of 16 rows: 64 registers of value bytes, and eight of scales,
	// eight of mins, one of d and one of dmin; a Q2_K one: 64 of scaled values, eight of
	// mins pairs, d and dmin (simd_packed_amd64.s).
	q4KPackedBytes = (64 + 8 + 8 + 2) * 64
	q2KPackedBytes = (64 + 8 + 2) * 64
	// kPackedMinTokens: packing a Q4_K group costs about three tokens' products, and two
	// tokens already gain on the rows kernels (768×2048, one thread).
	kPackedMinTokens = 2
	// kPackedMinTokensInPlace2: where the level multiplies Q4_K rows by two tokens in place
	// (repackedTokens2), two and three tokens take that kernel, at about 1.6 times one
	// token's instructions against packing's three.
	kPackedMinTokensInPlace2 = 4
	// packedGemmMinTokens: a mul_mat of fewer tokens takes the in-place four-token kernel
	// where the level has one (packingLoses).
	packedGemmMinTokens = 8
)

// packedFormatOf is t's packedFormat for a matrix of rows rows, or nil (see repackedRows).
func packedFormatOf(t Type, rows int) *packedFormat {
	if !repackedRows(rows) {
		return nil
	}
	return active.packedFormats[t]
}

// prepPackedActs turns a row of Q8_0 blocks, in place at the start of row, into the packed
// kernels' activations: per block its 32 value bytes, −offset·Σy as int32 (so that the
// unsigned weight bytes give the signed values' sum) and its scale as float32. row holds
// nb·packedActBytes bytes; the blocks are expanded from the last, which never overwrites
// one not yet read.
func prepPackedActs(row []byte, nb int, offset int32) {
	const q8Bytes = 34
	for b := nb - 1; b >= 0; b-- {
		var blk [q8Bytes]byte
		copy(blk[:], row[b*q8Bytes:])
		sum := int32(0)
		for _, q := range blk[2:] {
			sum += int32(int8(q))
		}
		dst := row[b*packedActBytes : (b+1)*packedActBytes]
		copy(dst, blk[2:])
		binary.LittleEndian.PutUint32(dst[32:], uint32(-offset*sum))
		binary.LittleEndian.PutUint32(dst[36:], math.Float32bits(F16ToF32(binary.LittleEndian.Uint16(blk[:]))))
	}
}

// usePacked reports whether products of w run on the packed kernels: a format with them,
// and packing not turned off.
func (p *Pool) usePacked(w *Matrix) bool {
	return w.packed != nil && !p.noRepack
}

// PackedKernels reports whether this machine multiplies matrices of type t (with a
// multiple of 8 rows) in llama.cpp's repacked arithmetic (the packed kernels, and Q4_K's
// and Q2_K's one-token ones), unless a pool turns them off.
func PackedKernels(t Type) bool {
	return active.packedFormats[t] != nil || active.repackedKernels[t] != nil
}

// SetRepack turns the packed kernels on (the default) or off, as llama.cpp's --no-repack
// does its repacked weights: off, every product of the packed formats runs the rows
// kernels and VecDot's arithmetic.
func (p *Pool) SetRepack(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.noRepack = !on
}

// packingLoses reports whether a mul_mat of w by this many tokens is faster on the level's
// four-token kernel in gemm's arithmetic, which reads the rows where they lie, than on the
// packed kernels, whose groups it would pack for these tokens alone. Packing a Q4_K group
// costs about eight tokens' packed gemm (the batch of four decoding sequences, bench8 on
// two threads: packing took 2.0 s of a profile's 19 s against 0.95 s for the packed gemm,
// the in-place kernel 1.84 s for the same products). Only where the activations are the
// same for both: the prepared formats convert them for the packed kernels alone.
func (w *Matrix) packingLoses(tokens int) bool {
	return tokens < packedGemmMinTokens && w.repacked4[gemm] != nil && !w.packed.prepared
}

// packedScratch is a worker's scratch for the packed kernels: a group of packed rows (kept,
// with where it came from, for the next tile of the same rows) and a group of rows padded
// with zero rows to 16.
type packedScratch struct {
	group  []byte
	padded []byte
	op     uint64 // the operation and the first row the group was packed from
	from   *byte
	// The kernels' token pointers, here rather than on the stack: a call through a
	// function value would move them to the heap on every call.
	acts [8]unsafe.Pointer
	outs [8]*float32
}

// mulPacked multiplies nr whole rows of w (rows) by count activation vectors: out(i)[r] is
// row r times act(i). Each group of 16 rows is packed and then multiplied by every vector
// while it is in L1. op numbers the pool's operation, so that a group the worker packed
// last in the same operation (a prefill tile's rows, one group, with the next tile of
// tokens) is not packed again. matmul: the tokens are a mul_mat's, whose fours from the
// first take gemm4 where the format has one (see useRepacked).
func (w *Matrix) mulPacked(s *packedScratch, op uint64, rows []byte, nr, count int, matmul bool, act func(i int) []byte, out func(i int) []float32) {
	f := w.packed
	if count < f.minTokens {
		w.mulTokens(rows, count, act, out)
		return
	}
	nb, rb := w.cols/f.blockValues, w.rowBytes
	s.group = grow(s.group, nb*f.blockBytes)
	packed := unsafe.Pointer(&s.group[0])
	g0 := 0
	if full := nr / packedGroupRows; f.rows1 != nil && count == 1 && full > 0 {
		f.rows1(unsafe.Pointer(&rows[0]), rb, full, nb, unsafe.Pointer(&act(0)[0]), &out(0)[0])
		g0 = full * packedGroupRows
	}
	for g := g0; g < nr; g += packedGroupRows {
		src := rows[g*rb:]
		if s.op != op || s.from != &src[0] {
			s.op, s.from = op, &src[0]
			if nr-g < packedGroupRows {
				s.padded = grow(s.padded, packedGroupRows*rb)
				clear(s.padded[copy(s.padded, src[:(nr-g)*rb]):])
				src = s.padded
			}
			f.pack(unsafe.Pointer(&src[0]), rb, nb, packed)
		}
		mask := uint16(1<<min(nr-g, packedGroupRows) - 1)
		// run multiplies the group by tokens i..i+size-1.
		run := func(dot packedDot, i, size int) {
			for t := range size {
				s.acts[t] = unsafe.Pointer(&act(i + t)[0])
				s.outs[t] = &out(i + t)[g]
			}
			dot(packed, nb, &s.acts[0], &s.outs[0], mask)
		}
		i := 0
		if matmul && f.gemm4 != nil {
			for ; i+4 <= count; i += 4 {
				run(f.gemm4, i, 4)
			}
		}
		for k, size := range [...]int{8, 4, 2, 1} {
			for ; f.dots[k] != nil && i+size <= count; i += size {
				run(f.dots[k], i, size)
			}
		}
	}
}
