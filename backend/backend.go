package backend

import (
	"github.com/moerun/moerun/tensor"
)

// Backend is a device that computes: it holds weights in its own memory and runs the
// operations that read them. The runtime asks the backend holding a weight to run each op
// on it, so a model whose routed experts live on one device and everything else on another
// needs nothing more than two backends and a placement plan.
//
// Activations are float32 slices in host memory, in ggml's row-major layout (one row of
// Cols values per token); a backend whose memory is elsewhere copies them in and out. The
// operations are those of a MoE forward pass that involve a weight; everything between
// them (norms, RoPE, attention over the host's KV cache) runs on the host.
//
// A Backend is used by one forward pass at a time; its methods are not safe for concurrent
// use unless an implementation says otherwise.
type Backend interface {
	// Device describes the device. Its Name is the one placement plans use ("CPU",
	// "CUDA0"), which is how the runtime finds the backend that holds a tensor.
	Device() Device

	// Load makes a weight resident on the device. data holds the tensor's bytes in host
	// memory, usually a view into the memory-mapped model file that stays valid until the
	// file is closed; a device that can compute on host memory keeps the view (no copy),
	// others copy it into their own buffers. shape is in GGUF order ([ne0, ne1, ne2]:
	// columns, rows, stacked experts). An unsupported type or shape is an error naming
	// the tensor.
	Load(name string, t tensor.Type, shape []int64, data []byte) (Weight, error)

	// MatMul computes dst[t][r] = Σ_c W[r][c]·x[t][c] for every token t (ggml_mul_mat).
	MatMul(dst []float32, w Weight, x []float32) error

	// MulMatID is ggml_mul_mat_id over a stack of experts: ids holds k expert ids per
	// token (-1 for a slot to skip, whose output is zero); x holds one vector per token
	// or one per (token, slot); dst one row per (token, slot). See tensor.Pool.MulMatID.
	MulMatID(dst []float32, w Weight, x []float32, ids []int32, k int) error

	// GetRows decodes rows ids of a 2-D weight into dst (the embedding lookup).
	GetRows(dst []float32, w Weight, ids []int32) error

	// Close releases the device's buffers. Weights loaded on it must not be used
	// afterwards.
	Close() error
}

// Fuser is a Backend that can also run several operations that read the same activations
// as one (tensor.Pool.MatMuls and MulMatIDs: the input converted once, no wait between
// the weights). The runtime uses it for a layer's q, k and v projections and its gate and
// up projections where they sit on one backend, and calls the weights one by one
// elsewhere; dsts[i] receives what MatMul or MulMatID would give for ws[i].
type Fuser interface {
	MatMuls(dsts [][]float32, ws []Weight, x []float32) error
	MulMatIDs(dsts [][]float32, ws []Weight, x []float32, ids []int32, k int) error
}

// Stacker is a Backend that can also multiply a stack of matrices as ggml_mul_mat of a 3-D
// weight does (tensor.Pool.MatMulStack): MulMatID's operands, ggml_mul_mat's arithmetic.
// DeepSeek's absorbed attention multiplies each head's query by that head's slice of
// attn_k_b so; a backend without it runs MulMatID, whose float weights differ in the last
// bits.
type Stacker interface {
	MatMulStack(dst []float32, w Weight, x []float32, ids []int32, k int) error
}

// Weight is a tensor resident on a backend, as Load returned it. It can only be passed to
// the backend that loaded it.
type Weight interface {
	// Name is the tensor's name in the model file.
	Name() string
	// Type is its element type.
	Type() tensor.Type
	// Cols, Rows and Experts are ne0, ne1 and ne2.
	Cols() int
	Rows() int
	Experts() int
}
