package backend

import (
	"fmt"

	"github.com/moerun/moerun/tensor"
)

// Backend is a device that holds memory and computes on it, in the shape of ggml-backend:
// buffers allocated on the device (weights, KV cache, working memory), tensors that are
// views of them, copies between the host and the device, and operations whose operands
// are all tensors of this backend. The runtime keeps a layer's values on the device that
// holds the layer's weights and copies them only where the placement plan changes device
// (see Copy), so a model needs nothing more than one backend per device and a plan.
//
// Operations are issued in order, as on one stream: a backend may run them asynchronously,
// and Set, Get and Copy are ordered with them; Synchronize waits for all of them. Results
// read with Get are valid after the next Synchronize. An operand held by another backend is
// an error naming both devices, never a silent copy: crossings are the caller's to make.
//
// A Backend is used by one forward pass at a time; its methods are not safe for concurrent
// use unless an implementation says otherwise.
type Backend interface {
	// Device describes the device. Its Name is the one placement plans use ("CPU",
	// "CUDA0"), which is how the runtime finds the backend that holds a tensor.
	Device() Device

	// Load makes a weight resident on the device. data holds the tensor's bytes in host
	// memory, usually a view into the memory-mapped model file that stays valid until the
	// file is closed; a device that can compute on host memory keeps the view (no copy,
	// ggml's buffer from a host pointer), others copy it into their own buffers. (The runtime
	// gives a host backend that keeps a store, Keeper, the host's weights through the store,
	// which honours the load mode.) shape is in
	// GGUF order ([ne0, ne1, ne2]: columns, rows, stacked experts). An unsupported type or
	// shape is an error naming the tensor.
	Load(name string, t tensor.Type, shape []int64, data []byte) (Weight, error)

	// Alloc allocates size bytes of the device's memory, zeroed; Free releases a buffer
	// Alloc returned, whose tensors must not be used afterwards.
	Alloc(size int64) (Buffer, error)
	Free(Buffer) error

	// Set copies host bytes into a contiguous tensor of this backend, Get a contiguous
	// tensor's bytes to the host (valid after Synchronize). len(src) and len(dst) must be
	// the tensor's size.
	Set(dst Tensor, src []byte) error
	Get(dst []byte, src Tensor) error
	// Synchronize waits until every operation and copy issued so far has finished.
	Synchronize() error

	// Supports reports whether the backend runs op with operands of type t (the weight's
	// type for weight operations, the cache's for SetRows, Attention and IndexerScores,
	// I32 for MapIDs, F32 otherwise).
	Supports(op Op, t tensor.Type) bool

	Ops

	// Close releases the device's buffers. Weights and tensors of the backend must not be
	// used afterwards.
	Close() error
}

// Ops are the operations of a MoE forward pass. Every tensor operand must belong to the
// backend; activations are F32 (ids I32), contiguous rows of Cols values unless an
// operation says otherwise. dst may be the same tensor as an input where the operation is
// element-wise. Shapes follow ggml's: one row per token (or per token and head, or per
// token and expert slot).
type Ops interface {
	// GetRows decodes rows ids of a 2-D weight into dst (the embedding lookup).
	GetRows(dst Tensor, w Weight, ids []int32) error
	// MatMul computes dst[t][r] = Σ_c W[r][c]·x[t][c] for every row t of x (ggml_mul_mat).
	MatMul(dst Tensor, w Weight, x Tensor) error
	// MatMuls runs MatMul for several weights that read the same x, as one operation
	// where the backend can (the input converted once): a layer's q, k and v projections.
	MatMuls(dsts []Tensor, ws []Weight, x Tensor) error
	// MulMatID is ggml_mul_mat_id over a stack of experts: ids holds k expert ids per
	// token (I32; -1 for a slot to skip, whose output is zero); x holds one row per token
	// or one per (token, slot); dst one row per (token, slot).
	MulMatID(dst Tensor, w Weight, x, ids Tensor, k int) error
	// MulMatIDs is MulMatID for several stacks with the same routing.
	MulMatIDs(dsts []Tensor, ws []Weight, x, ids Tensor, k int) error
	// MatMulStack is ggml_mul_mat of a 3-D weight: row i of x is multiplied by matrix
	// i mod Experts (DeepSeek's absorbed attention multiplies each head's query by that
	// head's slice of attn_k_b so).
	MatMulStack(dst Tensor, w Weight, x Tensor) error

	// RMSNorm sets each row of dst to the row of x RMS-normalised and, unless w is the
	// zero Tensor, multiplied element-wise by w (one row), as ggml_rms_norm then ggml_mul.
	RMSNorm(dst, x, w Tensor, eps float32) error
	// L2Norm scales each row of x in place to unit L2 norm, the norm clamped below at eps.
	L2Norm(x Tensor, eps float32) error
	// LayerNorm normalises each row of x in place to zero mean and unit variance, then
	// scales it by w and adds b (one row each, x's width), as ggml_norm, ggml_mul and
	// ggml_add: tensor.LayerNorm.
	LayerNorm(x, w, b Tensor, eps float32) error
	// Hadamard rotates each row of x (a power of two of columns) in place by the
	// orthonormal Walsh-Hadamard matrix: tensor.Hadamard.
	Hadamard(x Tensor) error
	// Add and Mul are element-wise; b has as many rows as a, or one row that is broadcast.
	Add(dst, a, b Tensor) error
	Mul(dst, a, b Tensor) error
	// Scale multiplies x by s; ScaleRows multiplies row t of x by s[t] (one column).
	Scale(dst, x Tensor, s float32) error
	ScaleRows(dst, x, s Tensor) error
	// Unary applies f element-wise.
	Unary(dst, x Tensor, f Unary) error
	// SwiGLU sets dst = silu(gate) ⊙ up; SwiGLUOAI is gpt-oss's clamped variant.
	SwiGLU(dst, gate, up Tensor) error
	SwiGLUOAI(dst, gate, up Tensor, alpha, limit float32) error
	// Copy copies src into dst, both of the same shape; either may be a strided view
	// (ggml_cpy / ggml_cont).
	Copy(dst, src Tensor) error

	// RoPE rotates x in place, rows of rowLen values, the rows of token t at pos[t]
	// (x has len(pos)·k rows for some k heads).
	RoPE(x Tensor, rowLen int, r *tensor.RoPE, pos []int32) error
	// SetRows converts rows of src (F32) into the cache tensor dst from row first on
	// (ggml_set_rows): the keys or values of new positions.
	SetRows(dst Tensor, first int, src Tensor) error
	// Attention is flash attention of q ([tokens·heads][K dim]) over the cache's first
	// kvLen positions (k and v: one row per position and KV head; heads query heads per
	// token share them in groups), masked causally at pos and by p's window; sinks, unless
	// the zero Tensor, holds a logit per head. dst receives [tokens·heads][V dim].
	// Position j is row j mod k.Rows: a cache of fewer rows than kvLen is a ring (a
	// sliding-window layer's), which must hold every position the queries see; the
	// positions are attended in their order whichever rows hold them.
	Attention(dst, q Tensor, heads int, pos []int32, k, v, sinks Tensor, kvLen int, p tensor.AttnParams) error

	// Route is the MoE router of one layer for each row of logits: gating, selection
	// bias (unless the zero Tensor), group limits, top-k, weights, normalisation, scale
	// and smart expert reduction, as tensor.Router. ids (I32) and weights receive r.Used
	// slots per token.
	Route(ids, weights, logits, bias Tensor, r tensor.RouterConfig) error
	// AddID adds to each slot's row of x the row of b that the slot's expert id selects
	// (ggml_add_id); slots with id -1 are left alone.
	AddID(x, b, ids Tensor) error
	// WeightedSum sets dst[t] to the sum over slots j of y[t·k+j]·w[t·k+j], each product
	// rounded before it is added, in slot order.
	WeightedSum(dst, y, w Tensor, k int) error
	// IndexerScores is DeepSeek Sparse Attention's lightning indexer over a cache of keys
	// (tensor.Pool.IndexerScores): dst[t][j] = Σ_h w[t][h]·relu(q[t·heads+h]·keys[j]) for
	// j ≤ pos[t], −∞ for pos[t] < j < kvLen. q is [tokens·heads][dim], w [tokens][heads]
	// (F32), keys one row of dim values per position in a cache type, dst [tokens][kvLen].
	IndexerScores(dst, q Tensor, heads int, pos []int32, keys, w Tensor, kvLen int) error
	// MapIDs sets each element of dst (I32) to table[id] for the element id of ids (I32), or
	// to -1 where id is -1 or outside the table (one row of I32): the router's expert ids
	// turned into the indices of the experts one device holds of a stack split by expert,
	// -1 for the experts it does not.
	MapIDs(dst, ids, table Tensor) error

	// CausalConv runs a depthwise causal convolution (taps = w.Rows, channels = w.Cols)
	// over the rows of x, carrying the last taps-1 inputs in state (F32).
	CausalConv(dst, x, state, w Tensor) error
	// GatedDeltaRule runs the Gated DeltaNet recurrence for len(rows of decay) tokens:
	// queries, keys and values are the leading column blocks of qkv as r lays them out,
	// states holds each value head's state.
	GatedDeltaRule(o, qkv, decay, beta, states Tensor, r tensor.DeltaRule) error
}

// Op names an operation for Supports.
type Op int

// The operations a backend may be asked about.
const (
	OpGetRows Op = iota
	OpMatMul
	OpMulMatID
	OpMatMulStack
	OpRMSNorm
	OpL2Norm
	OpAdd
	OpMul
	OpScale
	OpUnary
	OpSwiGLU
	OpCopy
	OpRoPE
	OpSetRows
	OpAttention
	OpRoute
	OpAddID
	OpWeightedSum
	OpCausalConv
	OpGatedDeltaRule
	OpMapIDs
	OpIndexerScores
	OpLayerNorm
	OpHadamard
	NumOps // the number of operations
)

var opNames = [NumOps]string{"get-rows", "mul-mat", "mul-mat-id", "mul-mat-stack", "rms-norm", "l2-norm", "add", "mul",
	"scale", "unary", "swiglu", "copy", "rope", "set-rows", "attention", "route", "add-id", "weighted-sum", "causal-conv",
	"gated-delta-rule", "map-ids", "indexer-scores", "layer-norm", "hadamard"}

func (o Op) String() string {
	if o < 0 || o >= NumOps {
		return fmt.Sprintf("op(%d)", int(o))
	}
	return opNames[o]
}

// AllOps lists every operation, for conformance tests and reports.
func AllOps() []Op {
	ops := make([]Op, NumOps)
	for i := range ops {
		ops[i] = Op(i)
	}
	return ops
}

// Unary is an element-wise function.
type Unary int

// The element-wise functions of Ops.Unary.
const (
	Sigmoid  Unary = iota // 1/(1+e^-x)
	Softplus              // log(1+e^x), x beyond 20 passed through (ggml's)
	SiLU                  // x·sigmoid(x)
)

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

// Buffer is memory allocated on a device.
type Buffer interface {
	// Device is the name of the device whose memory it is.
	Device() string
	// Size is its length in bytes.
	Size() int64
	// Host is the memory when the host can address it directly (the CPU's), else nil.
	Host() []byte
}

// Traffic counts what crossed between a device and the host, for devices with memory of
// their own (Counter).
type Traffic struct {
	CopiesIn, CopiesOut int   // Set calls and copies into the device; Get and copies out
	BytesIn, BytesOut   int64 // their bytes
	Syncs               int   // Synchronize calls
	Ops                 int   // operations run
	// Uploads and BytesUploaded count the copies of host-held weights' byte ranges into
	// the device for op offload (Stager.Stage), apart from the crossings of values.
	Uploads       int
	BytesUploaded int64
}

// CountStage counts a Stage of a weight of size bytes: one upload per span it copies (the
// whole weight where spans is nil).
func (t *Traffic) CountStage(size int64, spans [][2]int64) {
	if spans == nil {
		t.Uploads++
		t.BytesUploaded += size
	}
	for _, s := range spans {
		t.Uploads++
		t.BytesUploaded += s[1] - s[0]
	}
}

// Sub is the traffic between two readings of a counter.
func (t Traffic) Sub(before Traffic) Traffic {
	return Traffic{CopiesIn: t.CopiesIn - before.CopiesIn, CopiesOut: t.CopiesOut - before.CopiesOut,
		BytesIn: t.BytesIn - before.BytesIn, BytesOut: t.BytesOut - before.BytesOut,
		Syncs: t.Syncs - before.Syncs, Ops: t.Ops - before.Ops,
		Uploads: t.Uploads - before.Uploads, BytesUploaded: t.BytesUploaded - before.BytesUploaded}
}

// Add is the traffic of two periods together.
func (t Traffic) Add(o Traffic) Traffic {
	return Traffic{CopiesIn: t.CopiesIn + o.CopiesIn, CopiesOut: t.CopiesOut + o.CopiesOut,
		BytesIn: t.BytesIn + o.BytesIn, BytesOut: t.BytesOut + o.BytesOut, Syncs: t.Syncs + o.Syncs, Ops: t.Ops + o.Ops,
		Uploads: t.Uploads + o.Uploads, BytesUploaded: t.BytesUploaded + o.BytesUploaded}
}

// Submitter is a device that may hold its queued work back until the host waits for it (the
// CUDA backend records its stream's work and launches it as one graph). Submit starts the
// work queued so far without waiting for it, for a caller about to compute on another
// device meanwhile: the host's share of a layer's experts while the GPU computes its own.
type Submitter interface {
	Submit() error
}

// Counter is a backend that counts its traffic with the host.
type Counter interface {
	Traffic() Traffic
}

// Stager is a device that computes on weights the host holds by copying them into its own
// memory for the operation at hand: ggml's op offload, which runs a prompt batch's matmuls
// of CPU-held weights on a GPU when the batch is large enough that the copy costs less than
// the CPU's compute. The caller owns the staging memory (a Buffer of the device) and says
// which bytes to copy, so that of a stack of experts only those a batch routes to travel.
type Stager interface {
	// Stage returns a weight of this backend that stands for a host-held weight of type t
	// and shape (GGUF order) whose bytes in host memory are data, its own bytes being those
	// of buf from byte off. It copies into buf the byte ranges of data that spans lists
	// ([from, to) pairs; all of data where spans is nil), ordered with the device's
	// operations: one issued before still sees the old bytes, one issued after the new. The
	// bytes outside spans are left as they were, for operations that do not read them. data
	// must stay unchanged until the next Synchronize.
	Stage(buf Buffer, off int64, name string, t tensor.Type, shape []int64, data []byte, spans [][2]int64) (Weight, error)
	// StagesInto reports whether Stage of a weight of type t computes on the bytes in buf.
	// Where it does not (a type the device computes through the host), the staged weight
	// computes on data, and a weight whose bytes are written into buf piece by piece, as
	// the expert cache's slots are, cannot be made of that type.
	StagesInto(t tensor.Type) bool
}

// CheckSpans checks Stage's spans against data of n bytes: ordered, non-empty ranges
// within it.
func CheckSpans(spans [][2]int64, n int64) error {
	var end int64
	for _, s := range spans {
		if s[0] < end || s[1] <= s[0] || s[1] > n {
			return fmt.Errorf("bytes [%d, %d) of a %d-byte weight, after byte %d", s[0], s[1], n, end)
		}
		end = s[1]
	}
	return nil
}
