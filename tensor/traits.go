package tensor

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Traits are the per-type row functions, like ggml's type_traits and type_traits_cpu. Every
// function works on whole blocks: n elements stored in t.RowBytes(n) bytes. They do not
// check lengths (they run in hot loops); Dequantize, Quantize and DotRow below do.
type Traits struct {
	// ToFloat decodes len(dst) elements from src, bit-exact with ggml's to_float.
	ToFloat func(src []byte, dst []float32)
	// FromFloat encodes src with ggml's reference quantizer (quantize_row_*_ref, no
	// importance matrix): the bytes llama-quantize writes into model files.
	FromFloat func(src []float32, dst []byte)
	// VecDotType is the format activations are converted to before a dot product with a
	// row of this type (ggml's vec_dot_type): Q8_0, Q8_1, Q8_K, F16, BF16 or F32.
	VecDotType Type
	// VecDot is the dot product of n elements: w in this type, a in VecDotType. The scalar
	// versions follow ggml's generic kernels' summation order. It is nil for the formats
	// that only ever hold activations (Q8_1, Q8_K).
	VecDot func(n int, w, a []byte) float32
}

// activationFromFloat is how the CPU matmul converts activations to a VecDotType (the
// generic level's registry; kernelSet.activationFromFloat the active level's). For Q8_0
// and Q8_1 it differs from the reference quantizer in rounding (ggml's x86 from_float rounds
// half to even with a scale of 127/amax); for the others it is the same as FromFloat.
var activationFromFloat = map[Type]func(src []float32, dst []byte){}

var traits = map[Type]*Traits{
	F32: {
		ToFloat:    func(src []byte, dst []float32) { decodeF32(src, dst) },
		FromFloat:  encodeF32,
		VecDotType: F32,
		VecDot:     dotF32,
	},
	F16: {
		ToFloat:    decodeF16,
		FromFloat:  func(src []float32, dst []byte) { encodeHalf(src, dst, F32ToF16) },
		VecDotType: F16,
		VecDot:     dotF16,
	},
	BF16: {
		ToFloat:    func(src []byte, dst []float32) { decodeHalf(src, dst, BF16ToF32) },
		FromFloat:  func(src []float32, dst []byte) { encodeHalf(src, dst, F32ToBF16) },
		VecDotType: BF16,
		VecDot:     func(n int, w, a []byte) float32 { return dotHalf(n, w, a, BF16ToF32) },
	},
}

// TraitsOf returns the kernels for a type, or an error naming the type if moerun cannot
// compute with it.
func TraitsOf(t Type) (*Traits, error) {
	tr, ok := active.traits[t]
	if !ok {
		return nil, fmt.Errorf("no CPU kernels for tensor type %s", t)
	}
	return tr, nil
}

// checkRow validates that n elements of type t fit a buffer of the given length.
func checkRow(t Type, n int, bufLen int, what string) error {
	want, err := t.RowBytes(int64(n))
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if int64(bufLen) != want {
		return fmt.Errorf("%s: %d elements of %s take %d bytes, buffer has %d", what, n, t, want, bufLen)
	}
	return nil
}

// Dequantize decodes src (whole blocks of type t) into dst, one float32 per element.
func Dequantize(t Type, src []byte, dst []float32) error {
	tr, err := TraitsOf(t)
	if err != nil {
		return err
	}
	if err := checkRow(t, len(dst), len(src), "dequantize"); err != nil {
		return err
	}
	tr.ToFloat(src, dst)
	return nil
}

// Quantize encodes src into dst with ggml's reference quantizer for t.
func Quantize(t Type, src []float32, dst []byte) error {
	tr, err := TraitsOf(t)
	if err != nil {
		return err
	}
	if tr.FromFloat == nil {
		return fmt.Errorf("quantizing to %s is not supported", t)
	}
	if err := checkRow(t, len(src), len(dst), "quantize"); err != nil {
		return err
	}
	tr.FromFloat(src, dst)
	return nil
}

// QuantizeActivations converts activations to t (a VecDotType) the way the CPU matmul does
// before dot products.
func QuantizeActivations(t Type, src []float32, dst []byte) error {
	if f, ok := active.activationFromFloat[t]; ok {
		if err := checkRow(t, len(src), len(dst), "quantize activations"); err != nil {
			return err
		}
		f(src, dst)
		return nil
	}
	return Quantize(t, src, dst)
}

// DotRow is the checked form of a row dot product: w holds n elements of type t, a holds n
// activations already converted to t's VecDotType.
func DotRow(t Type, n int, w, a []byte) (float32, error) {
	tr, err := TraitsOf(t)
	if err != nil {
		return 0, err
	}
	if tr.VecDot == nil {
		return 0, fmt.Errorf("%s is an activation format: no dot product takes it as weights", t)
	}
	if err := checkRow(t, n, len(w), "weights"); err != nil {
		return 0, err
	}
	if err := checkRow(tr.VecDotType, n, len(a), "activations"); err != nil {
		return 0, err
	}
	return tr.VecDot(n, w, a), nil
}

func decodeF32(src []byte, dst []float32) {
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
	}
}

func encodeF32(src []float32, dst []byte) {
	for i, x := range src {
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(x))
	}
}

func decodeHalf(src []byte, dst []float32, widen func(uint16) float32) {
	for i := range dst {
		dst[i] = widen(binary.LittleEndian.Uint16(src[2*i:]))
	}
}

// decodeF16 widens F16 values with the common case written out: normal values (exponent
// 1..30) only move their bits up by 13 and rebias the exponent, which inlines here, where
// a call of F16ToF32 for each value (too large to inline) was most of the cost of
// attention's cache reads. Zeros, subnormals, infinities and NaNs go to F16ToF32.
func decodeF16(src []byte, dst []float32) {
	src = src[:2*len(dst)]
	for i := range dst {
		h := binary.LittleEndian.Uint16(src[2*i:])
		if h&0x7C00-0x400 < 0x7800 { // exponent 1..30; 0 wraps around to the top
			x := uint32(h)
			dst[i] = math.Float32frombits(x&0x8000<<16 | (x&0x7FFF<<13 + 112<<23))
			continue
		}
		dst[i] = F16ToF32(h)
	}
}

func encodeHalf(src []float32, dst []byte, narrow func(float32) uint16) {
	for i, x := range src {
		binary.LittleEndian.PutUint16(dst[2*i:], narrow(x))
	}
}

// dotHalf multiplies widened halves and sums in float64 like ggml's scalar path.
func dotHalf(n int, w, a []byte, widen func(uint16) float32) float32 {
	var sum float64
	for i := range n {
		x := widen(binary.LittleEndian.Uint16(w[2*i:]))
		y := widen(binary.LittleEndian.Uint16(a[2*i:]))
		sum += float64(x * y)
	}
	return float32(sum)
}
