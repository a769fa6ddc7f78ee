package tensor

import (
	"fmt"
	"math"

	"github.com/moerun/moerun/internal/mmap"
)

// Element-wise and row operations on float32 data, with ggml-cpu's arithmetic (F32 ops at
// the fixtures' commit, AVX-512 build): the same order of operations and roundings, so that
// a forward pass can reproduce llama.cpp's values bit for bit where the ops are the same.
//
// A row is cols consecutive elements; an op over rows takes a slice holding whole rows. dst
// may be the same slice as an input (in place), but must not overlap it otherwise. The
// shapes come from the model's hyper-parameters, so a length that does not fit is a bug in
// the caller and panics with a message naming the op, as ggml's asserts abort.

// checkRows panics unless every slice holds the same whole number of rows.
func checkRows(op string, cols int, dst []float32, srcs ...[]float32) {
	if cols <= 0 || len(dst)%cols != 0 {
		panic(fmt.Sprintf("tensor.%s: %d elements are not whole rows of %d", op, len(dst), cols))
	}
	checkSame(op, dst, srcs...)
}

// checkSame panics unless every slice is as long as dst.
func checkSame(op string, dst []float32, srcs ...[]float32) {
	for _, s := range srcs {
		if len(s) != len(dst) {
			panic(fmt.Sprintf("tensor.%s: input of %d elements for an output of %d", op, len(s), len(dst)))
		}
	}
}

// RMSNorm normalizes each row to unit root mean square: y = x / sqrt(mean(x²) + eps), as
// ggml_rms_norm (the squares summed in float64, in element order). Multiply by the norm
// weights with Mul.
func RMSNorm(dst, x []float32, cols int, eps float32) {
	checkRows("RMSNorm", cols, dst, x)
	r := 0
	// Rows four at a time: each row's sum is still one chain of additions in element
	// order (so the same bits), but four chains run side by side where one waited on its
	// last addition at every element (a decode step's 36 per-head q/k norms of Qwen3).
	for ; r+4*cols <= len(x); r += 4 * cols {
		sums := sumSquares4(x[r:r+4*cols], cols)
		for i, sum := range sums {
			scaleToRMS(dst[r+i*cols:r+(i+1)*cols], x[r+i*cols:r+(i+1)*cols], sum, eps)
		}
	}
	for ; r < len(x); r += cols {
		row := x[r : r+cols]
		var sum float64
		for _, v := range row {
			sum += float64(float32(v * v))
		}
		scaleToRMS(dst[r:r+cols], row, sum, eps)
	}
}

// sumSquares4 is RMSNorm's float64 sum of squares of each of four rows of cols values.
func sumSquares4(x []float32, cols int) [4]float64 {
	a, b, c, d := x[:cols], x[cols:2*cols], x[2*cols:3*cols], x[3*cols:4*cols]
	var s0, s1, s2, s3 float64
	for i := range a {
		s0 += float64(float32(a[i] * a[i]))
		s1 += float64(float32(b[i] * b[i]))
		s2 += float64(float32(c[i] * c[i]))
		s3 += float64(float32(d[i] * d[i]))
	}
	return [4]float64{s0, s1, s2, s3}
}

// scaleToRMS sets out = row / sqrt(sum/len(row) + eps), ggml's roundings.
func scaleToRMS(out, row []float32, sum float64, eps float32) {
	mean := float32(sum / float64(len(row)))
	scale := 1 / float32(math.Sqrt(float64(mean+eps)))
	for i, v := range row {
		out[i] = v * scale
	}
}

// Softmax is ggml_soft_max_ext without ALiBi: each row becomes softmax(x·scale + mask).
// mask is nil or holds whole rows; row r of x uses mask row r mod (len(mask)/cols), so one
// mask row applies to every row, and a [tokens][cols] causal mask to every head of a
// [heads][tokens][cols] score tensor. Masked entries are -Inf; a row masked entirely gives
// NaNs, as in ggml.
func Softmax(dst, x []float32, cols int, scale float32, mask []float32) {
	checkRows("Softmax", cols, dst, x)
	if mask != nil && (len(mask) == 0 || len(mask)%cols != 0) {
		panic(fmt.Sprintf("tensor.Softmax: a mask of %d elements is not whole rows of %d", len(mask), cols))
	}
	for r := 0; r < len(x); r += cols {
		out := dst[r : r+cols]
		for i, v := range x[r : r+cols] {
			out[i] = v * scale
		}
		if mask != nil {
			m := r % len(mask)
			for i, v := range mask[m : m+cols] {
				out[i] += v
			}
		}
		softmaxRow(out)
	}
}

// softmaxRow turns the scaled, masked scores in y into probabilities, in place, the way
// ggml_vec_soft_max_f32 and its caller do: exponentials of x − max (16 at a time with
// ggml_v_expf), their sum in float64, then a multiplication by the float32 reciprocal.
func softmaxRow(y []float32) {
	m := float32(math.Inf(-1))
	for _, v := range y {
		if !(m > v) { // C's MAX(m, v), which lets a NaN through like ggml
			m = v
		}
	}
	var sum float64
	i := 0
	for ; i+vecWidth <= len(y); i += vecWidth {
		lanes := (*[vecWidth]float32)(y[i : i+vecWidth])
		for l := range lanes {
			lanes[l] = vexp32(lanes[l] - m)
		}
		sum += float64(sum16(lanes))
	}
	for ; i < len(y); i++ {
		y[i] = exp32(y[i] - m)
		sum += float64(y[i])
	}
	inv := float32(1 / sum)
	for i := range y {
		y[i] *= inv
	}
}

// SiLU is x·sigmoid(x) over rows (ggml_silu).
func SiLU(dst, x []float32, cols int) {
	checkRows("SiLU", cols, dst, x)
	vec := cols / vecWidth * vecWidth
	for r := 0; r < len(x); r += cols {
		out, in := dst[r:r+cols], x[r:r+cols]
		active.vsiluRun(out[:vec], in[:vec])
		for i := vec; i < cols; i++ {
			out[i] = silu32(in[i])
		}
	}
}

// SwiGLU is silu(gate)·up over rows (ggml_swiglu_split), the activation of Qwen's and
// DeepSeek's feed-forward networks.
func SwiGLU(dst, gate, up []float32, cols int) {
	checkRows("SwiGLU", cols, dst, gate, up)
	vec := cols / vecWidth * vecWidth
	for r := 0; r < len(dst); r += cols {
		out, g, u := dst[r:r+cols], gate[r:r+cols], up[r:r+cols]
		active.vsiluRun(out[:vec], g[:vec])
		active.mulRow(out[:vec], out[:vec], u[:vec])
		for i := vec; i < cols; i++ {
			out[i] = silu32(g[i]) * u[i]
		}
	}
}

// SwiGLUOAI is gpt-oss's clamped SwiGLU (ggml_swiglu_oai): with g = min(gate, limit) and
// u = clamp(up, −limit, limit), out = g·sigmoid(alpha·g)·(u + 1). gpt-oss uses alpha 1.702
// and limit 7.
func SwiGLUOAI(dst, gate, up []float32, alpha, limit float32) {
	checkSame("SwiGLUOAI", dst, gate, up)
	for i := range dst {
		g := min(gate[i], limit)
		u := max(-limit, min(up[i], limit))
		out := g / (1 + exp32(float32(alpha*(-g))))
		dst[i] = out * (u + 1)
	}
}

// Sigmoid is 1/(1+e^−x) element-wise (ggml_sigmoid; DeepSeek-V3's router gate).
func Sigmoid(dst, x []float32) {
	checkSame("Sigmoid", dst, x)
	for i, v := range x {
		dst[i] = 1 / (1 + exp32(-v))
	}
}

// Softplus is ggml_softplus element-wise (Gated DeltaNet's decay): x above 20, else
// log(1 + e^x), e^x by glibc's expf (exp32). The logarithm is float64's, rounded: glibc's
// logf, which is not correctly rounded (up to 0.82 ulp), can differ from it in the last bit.
func Softplus(dst, x []float32) {
	checkSame("Softplus", dst, x)
	for i, v := range x {
		if v > 20 {
			dst[i] = v
			continue
		}
		dst[i] = float32(math.Log(float64(1 + exp32(v))))
	}
}

// Add sets dst = a + b. b may be shorter than a if a's length is a multiple of it: it is
// then repeated (ggml's broadcasting of rows), e.g. a bias over the tokens of a batch.
func Add(dst, a, b []float32) {
	checkBroadcast("Add", dst, a, b)
	for r := 0; r < len(a); r += len(b) {
		active.addRow(dst[r:r+len(b)], a[r:r+len(b)], b)
	}
}

// Mul sets dst = a·b element-wise, repeating b like Add; e.g. RMS norm weights over rows.
func Mul(dst, a, b []float32) {
	checkBroadcast("Mul", dst, a, b)
	for r := 0; r < len(a); r += len(b) {
		active.mulRow(dst[r:r+len(b)], a[r:r+len(b)], b)
	}
}

func addRowGo(dst, a, b []float32) {
	for i, v := range b {
		dst[i] = a[i] + v
	}
}

func mulRowGo(dst, a, b []float32) {
	for i, v := range b {
		dst[i] = a[i] * v
	}
}

// AddScaled sets acc[i] += x[i]·s, the product rounded before it is added (ggml_mul, then
// ggml_add).
func AddScaled(acc, x []float32, s float32) {
	checkSame("AddScaled", acc, x)
	active.addScaled(acc, x, s)
}

func checkBroadcast(op string, dst, a, b []float32) {
	checkSame(op, dst, a)
	if len(b) == 0 || len(a)%len(b) != 0 {
		panic(fmt.Sprintf("tensor.%s: %d elements cannot repeat over %d", op, len(b), len(a)))
	}
}

// Scale sets dst = x·s.
func Scale(dst, x []float32, s float32) {
	checkSame("Scale", dst, x)
	for i, v := range x {
		dst[i] = v * s
	}
}

// GetRows decodes rows ids of a 2-D weight into dst, one row of w.Cols() floats per id
// (ggml_get_rows: the token embedding lookup), from any type through its ToFloat. The ids
// come from a tokenizer or a file, so one outside the matrix is an error. w may be mapped
// memory; a fault reading it is returned as an error.
func GetRows(dst []float32, w *Matrix, ids []int32) error {
	if err := w.CheckGetRows(len(dst), ids); err != nil {
		return err
	}
	return mmap.Guard(func() {
		for i, id := range ids {
			w.Row(0, int(id), dst[i*w.cols:(i+1)*w.cols])
		}
	})
}

// CheckGetRows checks the operands of a GetRows from this matrix: ndst outputs for the ids.
func (w *Matrix) CheckGetRows(ndst int, ids []int32) error {
	if w.experts != 1 {
		return fmt.Errorf("get_rows: the matrix stacks %d experts", w.experts)
	}
	if ndst != len(ids)*w.cols {
		return fmt.Errorf("get_rows: %d rows of %d need %d outputs, dst has %d", len(ids), w.cols, len(ids)*w.cols, ndst)
	}
	for i, id := range ids {
		if id < 0 || int(id) >= w.rows {
			return fmt.Errorf("get_rows: id %d (position %d) outside [0, %d)", id, i, w.rows)
		}
	}
	return nil
}

// LayerNorm normalises x in place to zero mean and unit variance (ggml_norm: the sums in
// float64), then scales by w and adds b (each len(x) values): DeepSeek Sparse Attention's
// indexer key norm. Each product and sum is rounded on its own (the conversions keep Go
// from fusing them), as llama.cpp's separate mul and add ops round them.
func LayerNorm(x, w, b []float32, eps float32) {
	var sum float64
	for _, v := range x {
		sum += float64(v)
	}
	mean := float32(sum / float64(len(x)))
	var sq float64
	for i := range x {
		x[i] -= mean
		sq += float64(x[i] * x[i])
	}
	scale := float32(1 / math.Sqrt(sq/float64(len(x))+float64(eps)))
	w, b = w[:len(x)], b[:len(x)]
	for i := range x {
		x[i] = float32(float32(x[i]*scale)*w[i]) + b[i]
	}
}

// Hadamard multiplies x (a power of two of values) in place by the orthonormal
// Walsh-Hadamard matrix of its size (Sylvester's, entries ±1/sqrt(n)) with the fast
// transform, strides 1, 2, 4 and up: the rotation DeepSeek Sparse Attention's indexer
// gives its queries and keys.
func Hadamard(x []float32) {
	n := len(x)
	for h := 1; h < n; h *= 2 {
		for i := 0; i < n; i += 2 * h {
			for j := i; j < i+h; j++ {
				a, b := x[j], x[j+h]
				x[j], x[j+h] = a+b, a-b
			}
		}
	}
	norm := 1 / float32(math.Sqrt(float64(n)))
	for i := range x {
		x[i] *= norm
	}
}

// L2Norm scales x in place to unit L2 norm, the norm clamped below at eps (ggml_l2_norm:
// the squares summed in float64, the norm rounded to float32).
func L2Norm(x []float32, eps float32) {
	var sum float64
	for _, v := range x {
		sum += float64(v * v)
	}
	scale := 1 / max(float32(math.Sqrt(float64(float32(sum)))), eps)
	for i := range x {
		x[i] *= scale
	}
}
