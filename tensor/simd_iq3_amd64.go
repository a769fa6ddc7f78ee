//go:build goexperiment.simd && amd64

package tensor

import "unsafe"

// IQ3_XXS and IQ3_S dot products against Q8_K on AVX2 and AVX-512 (simd_iq3_amd64.s), the
// 3-bit lattice formats of the low-bit DeepSeek and Qwen3 files, in place of the generic
// kernel that unpacks every block (iqFormat.vecDot, 0.04-0.05 GB/s).
//
// Each group of 4 weights is a grid point (4 unsigned bytes, at most 62) looked up by its
// index: a byte for IQ3_XXS, a byte plus a ninth bit from qh for IQ3_S. The AVX2 kernels
// build a sub-block's 32 grid bytes from eight VPBROADCASTD loads merged by VPBLENDD (as
// the IQ2 kernels do with qwords: no shuffle-port work); IQ3_S's 9-bit indices are
// computed sixteen at a time in vector registers and read back from the stack. The signs
// go onto the activations: IQ3_XXS's 7-bit sign codes as ±1 bytes for VPSIGNB
// (iq2SignBytes), IQ3_S's explicit sign bits as byte masks (y ^ m - m). VPMADDUBSW
// multiplies the grid bytes by the signed activations (a pair is at most 2·62·128, no
// saturation), VPMADDWD by the sub-block's 2s+1 (iq2ScaleWords).
//
// Bits: ggml's AVX2 kernels (ggml_vec_dot_iq3_xxs_q8_K, ggml_vec_dot_iq3_s_q8_K) keep per
// block eight int32 lanes, lane k the sum over the sub-blocks of (2s+1)·q·y for the values
// 4k..4k+3 of each, and accumulate d_x·d_y (a float32 product) times their conversion with
// one FMA; the row ends with hsum_float_8, times 0.25 for IQ3_XXS. These kernels compute
// the same exact integers per lane and the same float steps (LATTICE_ROWS), so they give
// ggml's x86 bits. As in ggml's, a -128 activation against a negative sign stays -128.
//
// Where the CPU has AVX-512 VNNI and VBMI, kernels that take two sub-blocks per 512-bit
// register replace these: one VPGATHERDD fetches a pair's 16 points, the sign bits become
// mask registers (IQ3_XXS's codes decoded for the whole block by VPMULTISHIFTQB and
// VPERMI2B; IQ3_S's bits loaded as they are) that negate the activations, and VPDPWSSD
// applies the scales. Their lanes fold to the same eight integers per block, so the bits
// are the AVX2 kernels'. BenchmarkIQ3Kernels (2048×768, one vector, one thread,
// cache-hot, GODEBUG=asyncpreemptoff=1; the build machine, a Sapphire Rapids Xeon,
// shared, best of six): the generic kernel 0.05 GB/s, the AVX2 kernels 3.6 (XXS) and 3.9
// (S) GB/s, the VNNI kernels 6.2 and 6.6-6.8.

// Constants of the kernels: iq3SHighBits is the words 1<<k (IQ3_S's ninth bits in AVX2;
// word 8 doubles as the 0x100 to set), iq3XXSCodeShifts the VPMULTISHIFTQB offsets of
// IQ3_XXS's four sign codes in a u32, iq3SScaleShifts the qword shifts 4q that bring
// IQ3_S's scale nibble q down.
var (
	iq3SHighBits = func() (t [16]uint16) {
		for k := range t {
			t[k] = 1 << k
		}
		return t
	}()
	iq3XXSCodeShifts = uint64(0 | 7<<8 | 14<<16 | 21<<24)
	iq3SScaleShifts  = [8]uint64{0, 4, 8, 12, 16, 20, 24, 28}
)

// In simd_iq3_amd64.s: rows ≥ 1 consecutive rows of nb ≥ 1 blocks, rowBytes apart, against
// one Q8_K vector; out[r] gets row r's sum.
//
//go:noescape
func dotIQ3_XXSRowsAVX2(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)

//go:noescape
func dotIQ3_SRowsAVX2(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)

//go:noescape
func dotIQ3_XXSRowsVNNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)

//go:noescape
func dotIQ3_SRowsVNNI(w, a unsafe.Pointer, nb, rows, rowBytes int, out *float32)

var (
	iq3XXSShape = blockShape{values: qkK, bytes: 98, actBytes: 292}
	iq3SShape   = blockShape{values: qkK, bytes: 110, actBytes: 292}
)

// latticeKernel is a lattice format's block shape and AVX2 rows kernel (the element type
// of iq2Kernels and iq3Kernels).
type latticeKernel = struct {
	shape blockShape
	rows  vnniRowsKernel
}

// iq3Kernels lists the AVX2 kernels per type, iq3VNNIKernels the AVX-512 ones installed
// over them where the CPU has VNNI and VBMI (useIQ2VNNI: the same features).
var (
	iq3Kernels = map[Type]latticeKernel{
		IQ3_XXS: {iq3XXSShape, dotIQ3_XXSRowsAVX2},
		IQ3_S:   {iq3SShape, dotIQ3_SRowsAVX2},
	}
	iq3VNNIKernels = map[Type]vnniRowsKernel{
		IQ3_XXS: dotIQ3_XXSRowsVNNI,
		IQ3_S:   dotIQ3_SRowsVNNI,
	}
)

// installLattice makes rows kernels k's VecDot and dotRowsOne of their types, the AVX-512
// one (vnni) where there is one.
func installLattice(k *kernelSet, kernels map[Type]latticeKernel, vnni map[Type]vnniRowsKernel) {
	for t, lk := range kernels {
		if v, ok := vnni[t]; ok {
			lk.rows = v
		}
		tr := k.traits[t]
		if tr == nil {
			continue
		}
		tr.VecDot = vnniDot(lk.shape, lk.rows)
		k.dotRowsOne[t] = vnniDotRows(lk.shape, lk.rows)
	}
}
