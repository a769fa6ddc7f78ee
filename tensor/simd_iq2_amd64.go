//go:build goexperiment.simd && amd64

package tensor

import (
	"math/bits"
	"simd/archsimd"
	"unsafe"
)

// IQ2_XXS, IQ2_XS and IQ2_S dot products against Q8_K on AVX2 (simd_iq2_amd64.s), the
// expert formats of the low-bit DeepSeek files. The generic kernel unpacks each block into
// an iqBlock (~0.4 GB/s); these build each 32 values' grid bytes and signs in registers.
//
// Each group of 8 weights is a grid point (8 unsigned bytes) looked up by its index; four
// such lookups make a sub-block's 32 bytes, each a VPBROADCASTQ from the table (a load
// port only) merged by VPBLENDD (any vector port), which leaves the shuffle port to the
// rest (VPINSRQ and VINSERTI128, the usual way, are both shuffles). The signs are moved
// onto the activations: as ±1 bytes for VPSIGNB (IQ2_XXS and IQ2_XS, whose 7-bit sign codes
// index iq2SignBytes, the eighth sign being the parity) or, for IQ2_S's explicit sign
// bytes, as byte masks built by VPSHUFB/VPAND/VPCMPEQB (y ^ m - m). VPMADDUBSW multiplies
// the unsigned grid bytes by the signed activations, VPMADDWD by the sub-block scale
// (2s+1, from iq2ScaleWords or iq2ScalePairs by the scale byte: a folded load).
//
// Bits: ggml's AVX2 kernels (ggml_vec_dot_iq2_*_q8_K) keep per block eight int32 lanes,
// lane k the sum over the sub-blocks of (2s+1)·q·y for the values 4k..4k+3 of each, and
// accumulate d_x·d_y (a float32 product) times their float conversion with one FMA; the
// row ends with hsum_float_8 ((l0+l4 + l2+l6) + (l1+l5 + l3+l7)) times 0.125. These
// kernels compute the same exact integers per lane and the same float steps, so they give
// ggml's x86 bits (TestVecDotMatchesGGML). Like ggml's, a -128 activation against a
// negative sign stays -128 (VPSIGNB and y ^ m - m wrap alike).
//
// One call runs a tile of consecutive rows (dotRowsOne) with the tables' addresses loaded
// once, and asks for the lines 4 KiB ahead of each block (as prefetchNext does for the other
// AVX2 kernels): the hardware prefetcher stops at page boundaries.
//
// Where the CPU has AVX-512 VNNI and VBMI, kernels that take two sub-blocks per 512-bit
// register replace these (dotIQ2_*RowsVNNI, described in the .s file): the sign codes of a
// whole block are decoded at once (VPMULTISHIFTQB, VPERMI2B) into mask registers, the grid
// points come from VPGATHERQQ, and VPDPWSSD applies the scales; their integer lanes fold to
// the same eight per block, so the bits are the same. BenchmarkIQ2Kernels (2048×768, one
// vector, one thread, cache-hot; the build machine, shared): the generic kernel 35-47 MB/s,
// the AVX2 kernels 3.3 (XXS), 3.7 (XS), 3.1-4.0 (S) GB/s, the VNNI kernels 5.2, 5.9, 6.7.

// Tables of the kernels.
var (
	// iq2SignBytes is ggml's keven_signs_q2xs: for a 7-bit sign code, eight ±1 bytes (the
	// eighth negative when the code has an odd number of bits: iqSigns, which is set up
	// by an init function, after this).
	iq2SignBytes = func() (t [128]uint64) {
		for c := range t {
			signs := uint8(c) | uint8(bits.OnesCount8(uint8(c))&1)<<7
			for j := range 8 {
				b := uint64(1)
				if signs>>j&1 != 0 {
					b = 0xFF
				}
				t[c] |= b << (8 * j)
			}
		}
		return t
	}()
	// iq2ScaleWords[s] is 2s+1 in sixteen words: IQ2_XXS's one scale for 32 values.
	iq2ScaleWords = func() (t [16][16]int16) {
		for s := range t {
			for j := range t[s] {
				t[s][j] = int16(2*s + 1)
			}
		}
		return t
	}()
	// iq2ScalePairs[b] is, for a scale byte b of IQ2_XS or IQ2_S, 2(b&15)+1 in words 0-7
	// (the first 16 values of the sub-block) and 2(b>>4)+1 in words 8-15.
	iq2ScalePairs = func() (t [256][16]int16) {
		for b := range t {
			for j := range t[b] {
				t[b][j] = int16(2*(b>>(4*(j/8))&15) + 1)
			}
		}
		return t
	}()
	// iq2SSignSpread makes VPSHUFB copy sign byte j of a broadcast dword to bytes 8j..8j+7,
	// and iq2SSignBit picks bit i%8 of each: IQ2_S's explicit signs of 32 values.
	iq2SSignSpread = func() (t [32]uint8) {
		for i := range t {
			t[i] = uint8(i / 8)
		}
		return t
	}()
	iq2SSignBit = func() (t [32]uint8) {
		for i := range t {
			t[i] = 1 << (i % 8)
		}
		return t
	}()
)

// Constants of the AVX-512 kernels: iq2SignTable is iqSigns (sign codes to sign bytes) for
// VPERMI2B; iq2XXSCodeShifts the VPMULTISHIFTQB offsets of IQ2_XXS's four sign codes in
// the upper half of each qword (one sub-block); iq2PairScaleIdx[p] the VPERMW indices that
// spread qword 2p's low word to the lower 16 words and qword 2p+1's to the upper 16.
var (
	iq2SignTable = func() (t [128]uint8) {
		for c := range t {
			t[c] = uint8(c) | uint8(bits.OnesCount8(uint8(c))&1)<<7
		}
		return t
	}()
	iq2XXSCodeShifts = func() (t [8]uint64) {
		for q := range t {
			t[q] = 32 | 39<<8 | 46<<16 | 53<<24
		}
		return t
	}()
	iq2PairScaleIdx = func() (t [4][32]uint16) {
		for p := range t {
			for w := range t[p] {
				t[p][w] = uint16(4 * (2*p + w/16))
			}
		}
		return t
	}()
	iq2QwordOnes = [8]uint64{1, 1, 1, 1, 1, 1, 1, 1}
	// iq2PairScaleBytes[p] makes VPERMB put quarter 4p+c's scale byte (of sixteen, in
	// order) in the low bytes of the words of 128-bit lane c (the high bytes masked off);
	// iq2OddScales is 2s+1 for s = 0..15.
	iq2PairScaleBytes = func() (t [4][64]uint8) {
		for p := range t {
			for i := range t[p] {
				t[p][i] = uint8(4*p + i/16)
			}
		}
		return t
	}()
	iq2OddScales = func() (t [16]uint8) {
		for s := range t {
			t[s] = uint8(2*s + 1)
		}
		return t
	}()
	iq2QwordMask511 = [8]uint64{511, 511, 511, 511, 511, 511, 511, 511}
	// IQ2_S's indices as words w = 4q+l: iq2SHighSpread makes VPERMB put qh[q] (the block's
	// eight qh bytes broadcast to every qword) in both bytes of word w, iq2SHighShifts
	// shifts word w right by 2l and iq2SHighWordMask keeps bits 8-9: qh's bits 2l, 2l+1.
	iq2SHighSpread = func() (t [64]uint8) {
		for i := range t {
			t[i] = uint8(i / 8)
		}
		return t
	}()
	iq2SHighShifts = func() (t [32]uint16) {
		for w := range t {
			t[w] = uint16(2 * (w % 4))
		}
		return t
	}()
	iq2SHighWordMask = [32]uint16{0x300, 0x300, 0x300, 0x300, 0x300, 0x300, 0x300, 0x300, 0x300, 0x300, 0x300,
		0x300, 0x300, 0x300, 0x300, 0x300, 0x300, 0x300, 0x300, 0x300, 0x300, 0x300, 0x300, 0x300, 0x300,
		0x300, 0x300, 0x300, 0x300, 0x300, 0x300, 0x300}
	useIQ2VNNI = useVNNI && archsimd.X86.AVX512VBMI()
)

// In simd_iq2_amd64.s: rows ≥ 1 consecutive rows of nb ≥ 1 blocks, rowBytes apart, against
// one Q8_K vector; out[r] gets row r's sum.
//
//go:noescape
func dotIQ2_XXSRowsAVX2(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)

//go:noescape
func dotIQ2_XXSRowsVNNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)

//go:noescape
func dotIQ2_XSRowsVNNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)

//go:noescape
func dotIQ2_SRowsVNNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)

//go:noescape
func dotIQ2_XSRowsAVX2(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)

//go:noescape
func dotIQ2_SRowsAVX2(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)

var (
	iq2XXSShape = blockShape{values: qkK, bytes: 66, actBytes: 292}
	iq2XSShape  = blockShape{values: qkK, bytes: 74, actBytes: 292}
	iq2SShape   = blockShape{values: qkK, bytes: 82, actBytes: 292}
)

// iq2Kernels lists the AVX2 kernels per type, iq2VNNIKernels the AVX-512 ones installed
// over them where the CPU has VNNI and VBMI.
var (
	iq2Kernels = map[Type]latticeKernel{
		IQ2_XXS: {iq2XXSShape, dotIQ2_XXSRowsAVX2},
		IQ2_XS:  {iq2XSShape, dotIQ2_XSRowsAVX2},
		IQ2_S:   {iq2SShape, dotIQ2_SRowsAVX2},
	}
	iq2VNNIKernels = map[Type]vnniRowsKernel{
		IQ2_XXS: dotIQ2_XXSRowsVNNI,
		IQ2_XS:  dotIQ2_XSRowsVNNI,
		IQ2_S:   dotIQ2_SRowsVNNI,
	}
)
