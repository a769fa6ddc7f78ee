package tensor

import (
	"encoding/binary"
	"math"
	"unsafe"
)

// Products of float weights (F32 and F16) in the order of the llama.cpp build the shared
// fixtures come from: ggml's CPU backend built for AVX-512 without AVX512-FP16 (vectors of
// 16 float32 lanes), whose F16 and F32 products are all float32 arithmetic. With these
// orders, the packed kernels' for Q4_0 (packed.go) and the quantized kernels ending as
// ggml's hsum_float_8 (sumLanes), moerun gives the fixtures' logits bit for bit
// (moe's TestFixtureBitExact). A build with AVX512-FP16 sums F16 dot products in half
// precision instead, and an AVX2 build in vectors of 8: those are not reproduced.
//
//   - vecDot, ggml_vec_dot_f16 and ggml_vec_dot_f32 (one token, mul_mat_id, attention
//     scores): 64 values a step into four 16-lane accumulators by fused multiply-adds; the
//     accumulators added 0+2 and 1+3, then those two, then the 16 lanes in
//     _mm512_reduce_add_ps's order (sum16). The n%64 values left: F16 adds their float32
//     products one by one in float64 (ggml_float), F32 goes on in float32 (leftoverTerm).
//   - tinyDot, llamafile's tinyBLAS, which ggml_compute_forward_mul_mat runs for a batch
//     of two tokens or more when the weight's rows are a multiple of 4 and its row length
//     a multiple of 16 (tinyMatMul): one 16-lane accumulator, 16 values a step, then sum16.

// floatStep is 4·vecWidth, the values one step of ggml_vec_dot_* takes.
const floatStep = 4 * vecWidth

// vecAcc is ggml_vec_dot_*'s four accumulators.
type vecAcc [4][vecWidth]float32

func vecReducedGo(q, k []float32) float32 {
	var acc vecAcc
	vecSteps(&acc, q, k)
	return acc.reduce()
}

// vecSteps runs whole steps of q and k into acc.
func vecSteps(acc *vecAcc, q, k []float32) {
	for i := 0; i+floatStep <= len(q); i += floatStep {
		for a := range acc {
			for l := range vecWidth {
				d := i + a*vecWidth + l
				acc[a][l] = fma32(q[d], k[d], acc[a][l])
			}
		}
	}
}

// reduce adds the accumulators up as GGML_F32x16_REDUCE does.
func (acc *vecAcc) reduce() float32 {
	for l := range vecWidth {
		acc[0][l] += acc[2][l]
		acc[1][l] += acc[3][l]
		acc[0][l] += acc[1][l]
	}
	return sum16(&acc[0])
}

// finish4F16 is finishF16 of four rows (w, their values past whole) by one vector a, the
// four float64 chains side by side: each waits on its own additions only.
func finish4F16(sums *[4]float32, w *[4][]float32, whole int, a []float32) {
	s0, s1, s2, s3 := float64(sums[0]), float64(sums[1]), float64(sums[2]), float64(sums[3])
	w0, w1, w2, w3 := w[0][whole:], w[1][whole:len(w[0])], w[2][whole:len(w[0])], w[3][whole:len(w[0])]
	a = a[whole:len(w[0])]
	for d, y := range a {
		s0 += float64(w0[d] * y)
		s1 += float64(w1[d] * y)
		s2 += float64(w2[d] * y)
		s3 += float64(w3[d] * y)
	}
	sums[0], sums[1], sums[2], sums[3] = float32(s0), float32(s1), float32(s2), float32(s3)
}

// finishF16 and finishF32 add the values left past the whole steps (q, k) to their reduced
// sum: F16's products one by one in float64, F32's by fused multiply-adds.
func finishF16(steps float32, q, k []float32) float32 {
	sum := float64(steps)
	for d := range q {
		sum += float64(q[d] * k[d])
	}
	return float32(sum)
}

func finishF32(sum float32, q, k []float32) float32 {
	for d := range q {
		sum = leftoverTerm(d, len(q), sum, q[d], k[d])
	}
	return sum
}

// leftoverTerm adds the product of a and b, the i-th of n, to sum as the scalar loops of
// ggml's build that sum products in order do (the leftovers of ggml_vec_dot_f32,
// ggml_ssm_conv's taps; see their disassembly): the compiler vectorised them, products
// rounded sixteen or eight at a time and then added one by one, and fused the last n mod 8
// into multiply-adds.
func leftoverTerm(i, n int, sum, a, b float32) float32 {
	if i < n&^7 {
		return sum + float32(a*b)
	}
	return fma32(a, b, sum)
}

// vecDotF16 is ggml_vec_dot_f16 of two vectors of F16 values already widened to float32
// (ggml_vec_dot_f32 is the same steps with finishF32).
func vecDotF16(q, k []float32) float32 {
	k = k[:len(q)]
	whole := len(q) &^ (floatStep - 1)
	return finishF16(active.vecReduced(q[:whole], k[:whole]), q[whole:], k[whole:])
}

// vecDotF32 is ggml_vec_dot_f32 of two float32 vectors.
func vecDotF32(q, k []float32) float32 {
	k = k[:len(q)]
	whole := len(q) &^ (floatStep - 1)
	return finishF32(active.vecReduced(q[:whole], k[:whole]), q[whole:], k[whole:])
}

func tinyDotGo(q, k []float32) float32 {
	k = k[:len(q)]
	var acc [vecWidth]float32
	for i := 0; i < len(q); i += vecWidth {
		for l := range acc {
			acc[l] = fma32(q[i+l], k[i+l], acc[l])
		}
	}
	return sum16(&acc)
}

// tinyMatMul reports whether ggml multiplies w by a batch of tokens with tinyBLAS.
func (w *Matrix) tinyMatMul(tokens int) bool {
	return (w.typ == F16 || w.typ == F32) && tokens >= 2 && w.rows%4 == 0 && w.cols%vecWidth == 0
}

// dotF16 and dotF32 are the VecDot of F16 and F32: ggml_vec_dot_f16 and _f32 of a row and
// an activation vector in their bytes, widened a step at a time, in scalar code (mulFloat
// widens whole rows and vectors for the matmuls and takes the vector kernels).
func dotF16(n int, w, a []byte) float32 { return dotFloatBytes(n, w, a, true) }

func dotF32(n int, w, a []byte) float32 { return dotFloatBytes(n, w, a, false) }

func dotFloatBytes(n int, w, a []byte, f16 bool) float32 {
	var acc vecAcc
	var q, k [floatStep]float32
	widen := func(lo, hi int) {
		for i := lo; i < hi; i++ {
			if f16 {
				q[i-lo], k[i-lo] = F16ToF32(binary.LittleEndian.Uint16(w[2*i:])), F16ToF32(binary.LittleEndian.Uint16(a[2*i:]))
			} else {
				q[i-lo], k[i-lo] = math.Float32frombits(binary.LittleEndian.Uint32(w[4*i:])), math.Float32frombits(binary.LittleEndian.Uint32(a[4*i:]))
			}
		}
	}
	whole := n &^ (floatStep - 1)
	for i := 0; i < whole; i += floatStep {
		widen(i, i+floatStep)
		vecSteps(&acc, q[:], k[:])
	}
	widen(whole, n)
	if f16 {
		return finishF16(acc.reduce(), q[:n-whole], k[:n-whole])
	}
	return finishF32(acc.reduce(), q[:n-whole], k[:n-whole])
}

// mulFloat multiplies nr whole rows of an F16 or F32 w (rows) by count activation vectors
// in the same type: out(i)[r] is row r times act(i), by tinyDot (tiny) or the type's
// vecDot. The vectors are widened once for the tile, the rows four at a time.
func (w *Matrix) mulFloat(s *wideScratch, rows []byte, nr, count int, act func(i int) []byte, out func(i int) []float32, tiny bool) {
	n, rb := w.cols, w.rowBytes
	f32 := w.typ == F32
	finish := finishF16
	if f32 {
		finish = finishF32
	}
	// F32 rows and vectors are read in place (on a little-endian machine); the others are
	// widened, the vectors once.
	inPlace := f32 && littleEndian
	widen := active.widenHalf
	if f32 {
		widen = decodeF32
	}
	vec := func(i int) []float32 { return floats(act(i)[:rb]) }
	if !inPlace {
		s.acts = grow(s.acts, count*n)
		for i := range count {
			widen(act(i)[:rb], s.acts[i*n:(i+1)*n])
		}
		vec = func(i int) []float32 { return s.acts[i*n : (i+1)*n] }
	}
	// store16 puts a four-by-four kernel's outputs (s.out16[4r+t]) at vectors i.. and rows r0..
	store16 := func(i, r0 int) {
		for r := range 4 {
			for t := range 4 {
				out(i + t)[r0+r] = s.out16[4*r+t]
			}
		}
	}
	whole := n &^ (floatStep - 1)
	s.rows = grow(s.rows, 4*n)
	for r0 := 0; r0 < nr; r0 += 4 {
		four := min(4, nr-r0) == 4
		if four && !tiny && !f32 && count == 1 && whole > 0 && active.vecF16Rows4 != nil {
			w.vecF16Four(s, rows[r0*rb:(r0+4)*rb], whole, vec(0), out(0)[r0:r0+4])
			continue
		}
		done := 0 // vectors multiplied already
		if four && tiny && !f32 && active.tinyF16Rows4x4 != nil {
			for ; done+4 <= count; done += 4 {
				active.tinyF16Rows4x4(&rows[r0*rb], rb, n/vecWidth, &s.acts[done*n], 4*n, &s.out16)
				store16(done, r0)
			}
			if done == count {
				continue
			}
		}
		for r := range min(4, nr-r0) {
			row := rows[(r0+r)*rb : (r0+r+1)*rb]
			if inPlace {
				s.w4[r] = floats(row)
				continue
			}
			s.w4[r] = s.rows[r*n : (r+1)*n]
			widen(row, s.w4[r])
		}
		rowsHere := s.w4[:min(4, nr-r0)]
		switch {
		case tiny:
			i := done
			if four && active.tinyDots4x4 != nil {
				for ; i+4 <= count; i += 4 {
					for t := range 4 {
						s.x4[t] = vec(i + t)
					}
					active.tinyDots4x4(&s.w4, &s.x4, &s.out16)
					store16(i, r0)
				}
			}
			for ; i < count; i++ {
				for r, row := range rowsHere {
					out(i)[r0+r] = active.tinyDot(row, vec(i))
				}
			}
		case four && active.vecReduced4 != nil:
			for r := range 4 {
				s.x4[r] = s.w4[r][:whole]
			}
			for i := range count {
				a := vec(i)
				active.vecReduced4(&s.x4, a[:whole], &s.out4)
				if f32 {
					for r, row := range rowsHere {
						out(i)[r0+r] = finishF32(s.out4[r], row[whole:], a[whole:])
					}
					continue
				}
				finish4F16(&s.out4, &s.w4, whole, a)
				copy(out(i)[r0:r0+4], s.out4[:])
			}
		default:
			for i := range count {
				a := vec(i)
				for r, row := range rowsHere {
					out(i)[r0+r] = finish(active.vecReduced(row[:whole], a[:whole]), row[whole:], a[whole:])
				}
			}
		}
	}
}

// littleEndian is whether float32 values in memory are in GGUF's byte order.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// floats is F32 bytes as float32 values, in place (on a little-endian machine; float32
// loads need no alignment on the platforms Go runs moerun on).
func floats(b []byte) []float32 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}

// vecF16Four is mulFloat's ggml_vec_dot_f16 of four F16 rows by one vector a through
// vecF16Rows4: the whole steps from the F16 bytes, the values past them widened.
func (w *Matrix) vecF16Four(s *wideScratch, rows []byte, whole int, a []float32, out []float32) {
	n, rb := w.cols, w.rowBytes
	active.vecF16Rows4(&rows[0], rb, whole/floatStep, &a[0], &s.out4)
	for r := range 4 {
		s.w4[r] = s.rows[r*n : (r+1)*n]
		active.widenHalf(rows[r*rb+2*whole:(r+1)*rb], s.w4[r][whole:])
	}
	finish4F16(&s.out4, &s.w4, whole, a)
	copy(out, s.out4[:])
}

// VecDotF32 is ggml_vec_dot_f32 of a and b (len(b) ≥ len(a)) in the order of the build
// described above, for callers outside the kernels that reproduce a ggml op which uses it
// (the lightning indexer's scores).
func VecDotF32(a, b []float32) float32 { return vecDotF32(a, b) }
