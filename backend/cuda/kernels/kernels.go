// Package kernels holds moerun's CUDA kernels: CUDA C sources (matvec.cu, quants.cuh,
// ops.cuh) compiled ahead of time to PTX, which is embedded here so that building moerun needs no
// CUDA toolkit; the driver compiles the PTX for the GPU at hand when package cuda loads it.
// This package is plain Go (no cgo, no build tag), so CI builds and tests it everywhere;
// its test checks that the embedded PTX defines every entry point and was built from the
// current sources.
//
// Each supported weight type has three entry points, whose exact parameters and launch shapes
// matvec.cu's header documents (ops.cuh's header those of the operations between the
// products, on F32 values):
//
//	mmv_<type>: Y = W·X for up to GroupSize activation rows per pass over the weights,
//	  plain or grouped by expert (MulMatID);
//	mmq_<type>: the same product tiled for batches (prompts): TileTokens activation rows
//	  per pass over a tile of TileRows weight rows, dequantized once into shared memory;
//	getrows_<type>: dequantized rows of W (embedding lookup).
//
// <type> is the type's ggml name as tensor.Type's String() gives it ("q4_K", "iq4_xs").
// Every dequantizer is bit-exact with package tensor's (NaN payloads aside), so GetRows
// matches the CPU's values exactly and MatVec up to float32 summation order. The test runs
// the CUDA source itself on the CPU (testdata/emulate) against package tensor. The other
// entry points (Ops: group_pairs, which builds MulMatID's work list on the device, and the
// operations between the products) are checked against the CPU backend by package cuda's
// tests, on a GPU or on the fake driver (make cuda-fake) that runs them the same way.
package kernels

//go:generate sh gen.sh

import (
	_ "embed"
	"slices"

	"github.com/moerun/moerun/tensor"
)

// PTX is the module holding every kernel: PTX ISA 7.8 for compute_70 (Volta and later).
//
//go:embed moerun.ptx
var PTX string

// Launch geometry the kernels are written for (matvec.cu's constants).
const (
	// MatVecBlockX and MatVecBlockY are mmv's blockDim: a warp per output row, MatVecBlockY
	// rows per block, so grid.x = ceil(rows / MatVecBlockY).
	MatVecBlockX = 32
	MatVecBlockY = 4
	// GroupSize is how many activation rows one pass over a weight row serves: a plain
	// matmul's grid.y is ceil(tokens / GroupSize); a grouped one's is the number of groups,
	// which may hold any number of pairs. A block serves its group in passes of GroupSize
	// pairs; splitting a large group into groups of GroupSize spreads those passes over
	// more blocks.
	GroupSize = 8
	// TileBlockX, TileRows and TileTokens shape mmq, the tiled product for batches: a
	// block is one warp (blockDim = (TileBlockX, 1)) and computes TileRows rows of the
	// output, so grid.x = ceil(rows / TileRows), for TileTokens activation rows per pass
	// over its tile of weights: a plain matmul's grid.y is ceil(tokens / TileTokens), a
	// grouped one's the number of groups, which group_pairs cuts at TileTokens pairs for it.
	TileBlockX = 32
	TileRows   = 64
	TileTokens = 32
	// MaxGridY caps grid.y; the kernels stride over groups beyond it.
	MaxGridY = 65535
	// GetRowsBlockX is getrows' blockDim.x; grid.x is the number of rows.
	GetRowsBlockX = 128
	// OpBlockX is the blockDim.x of the operations between the products (ops.cuh); their
	// grid.x is the number of rows, or fewer (at most MaxGridX): blocks stride over rows.
	OpBlockX = 128
	MaxGridX = 1<<31 - 1
)

// The operations between the products (ops.cuh's MOERUN_OPS), by entry name.
const (
	GroupPairs     = "group_pairs" // mmv's or mmq's grouped work list from expert ids (matvec.cu)
	CopyF32        = "copy_f32"    // strided copy
	AddF32         = "add_f32"
	MulF32         = "mul_f32"
	ScaleF32       = "scale_f32"
	ScaleRowsF32   = "scale_rows_f32"
	SigmoidF32     = "sigmoid_f32"
	SoftplusF32    = "softplus_f32"
	SiLUF32        = "silu_f32"
	SwiGLUF32      = "swiglu_f32"
	SwiGLUOAIF32   = "swiglu_oai_f32"
	RMSNormF32     = "rms_norm_f32" // a warp per row, OpRowsPerBlock rows per block
	L2NormF32      = "l2_norm_f32"  // likewise
	AddIDF32       = "add_id_f32"
	MapIDsI32      = "map_ids_i32" // a thread per element
	WeightedSumF32 = "weighted_sum_f32"
	RoPEF32        = "rope_f32"
	// QuantizeActF32 rounds activations as the CPU matmul quantizes them for a weight type
	// (ActivationKind), a warp per block.
	QuantizeActF32 = "quantize_act_f32"
	// AttentionF32 is flash attention over F32, F16 or Q8_0 caches (AttentionCache codes),
	// heads of at most AttentionMaxDim values, a warp per (token, query head).
	AttentionF32    = "attention_f32"
	AttentionMaxDim = 576
	// RouteF32 is the MoE router, a thread per token, with RouteScratchWords(experts,
	// groups) 4-byte words of scratch per token.
	RouteF32 = "route_f32"
	// IndexerScoresF32 is the lightning indexer's scores, a warp per (token, position), keys
	// of at most AttentionMaxDim values in an AttentionCache type.
	IndexerScoresF32 = "indexer_scores_f32"
	// CausalConvF32 is the depthwise causal convolution, a thread per channel.
	CausalConvF32 = "causal_conv_f32"
	// GatedDeltaRuleF32 is Gated DeltaNet's recurrence, a warp per (value head, state row),
	// heads of at most DeltaMaxDim values.
	GatedDeltaRuleF32 = "gated_delta_rule_f32"
	DeltaMaxDim       = 128
	// LayerNormF32 and HadamardF32 are DeepSeek Sparse Attention's indexer key norm and
	// rotation, a thread per row.
	LayerNormF32 = "layer_norm_f32"
	HadamardF32  = "hadamard_f32"
)

// RouteScratchWords is the scratch RouteF32 needs per token.
func RouteScratchWords(experts, groups int) int { return 3*experts + groups }

// AttentionCache is the code attention_f32 takes for a cache of type t, and whether it
// reads that type.
func AttentionCache(t tensor.Type) (uint64, bool) {
	switch t {
	case tensor.F32:
		return 0, true
	case tensor.F16:
		return 1, true
	case tensor.Q8_0:
		return 2, true
	}
	return 0, false
}

// SetRows names the kernel that converts F32 rows into a cache of type t (F32, F16 or
// Q8_0; "" for another type).
func SetRows(t tensor.Type) string {
	switch t {
	case tensor.F32, tensor.F16, tensor.Q8_0:
		return "set_rows_" + t.String()
	}
	return ""
}

// ActivationKind is the kind quantize_act_f32 takes for the activations of a product with
// weights of type t, and whether they need it: ggml's CPU matmul (package tensor's, and so
// the CPU backend's) quantizes activations to the weight type's vec_dot type before its
// dot products, Q8_0 or Q8_1 (the same quants and scale) in blocks of 32, Q8_K in blocks of
// 256; the float types' activations are rounded by mmv itself, and F32 stays exact.
func ActivationKind(t tensor.Type) (uint64, bool) {
	tr, err := tensor.TraitsOf(t)
	if err != nil {
		return 0, false
	}
	switch tr.VecDotType {
	case tensor.Q8_0, tensor.Q8_1:
		return 0, true
	case tensor.Q8_K:
		return 1, true
	}
	return 0, false
}

// ActivationBlock is the block ActivationKind's quantization works in (32 or 256 values).
func ActivationBlock(kind uint64) int {
	if kind == 1 {
		return 256
	}
	return 32
}

// OpRowsPerBlock is how many rows a block of the warp-per-row kernels (RMSNormF32,
// L2NormF32, AttentionF32) serves.
const OpRowsPerBlock = OpBlockX / 32

// ops lists them, for Entries.
var ops = []string{GroupPairs, CopyF32, AddF32, MulF32, ScaleF32, ScaleRowsF32, SigmoidF32, SoftplusF32, SiLUF32, SwiGLUF32,
	SwiGLUOAIF32, RMSNormF32, L2NormF32, AddIDF32, MapIDsI32, WeightedSumF32, RoPEF32, SetRows(tensor.F32), SetRows(tensor.F16),
	SetRows(tensor.Q8_0), QuantizeActF32, AttentionF32, RouteF32, IndexerScoresF32, CausalConvF32, GatedDeltaRuleF32,
	LayerNormF32, HadamardF32}

// types are the weight types with kernels, in ggml's id order.
var types = []tensor.Type{
	tensor.F32, tensor.F16, tensor.Q4_0, tensor.Q4_1, tensor.Q5_0, tensor.Q5_1, tensor.Q8_0,
	tensor.Q2_K, tensor.Q3_K, tensor.Q4_K, tensor.Q5_K, tensor.Q6_K, tensor.IQ4_NL, tensor.IQ4_XS,
	tensor.BF16, tensor.MXFP4,
}

// Types lists the weight types PTX has kernels for.
func Types() []tensor.Type { return slices.Clone(types) }

// Supported reports whether PTX has kernels for weights of type t.
func Supported(t tensor.Type) bool { return slices.Contains(types, t) }

// MatVec names t's matrix-vector kernel; PTX defines it only when Supported(t).
func MatVec(t tensor.Type) string { return "mmv_" + t.String() }

// MatMulTiled names t's tiled matmul kernel, for batches; PTX defines it only when
// Supported(t).
func MatMulTiled(t tensor.Type) string { return "mmq_" + t.String() }

// GetRows names t's row-dequantizing kernel; PTX defines it only when Supported(t).
func GetRows(t tensor.Type) string { return "getrows_" + t.String() }

// Ops lists the entry names of the operations between the products.
func Ops() []string { return slices.Clone(ops) }

// Entries lists every kernel PTX defines.
func Entries() []string {
	var names []string
	for _, t := range types {
		names = append(names, MatVec(t), MatMulTiled(t), GetRows(t))
	}
	return append(names, ops...)
}
