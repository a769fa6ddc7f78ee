package tensor

// Q1_0 and Q2_0: one f16 scale d and 1 or 2 bits per value. Q1_0 stores signs (±d) for
// 128 values; Q2_0 stores q ∈ {0,1,2,3} meaning (q-1)·d for 64 values. Bits are packed from
// the least significant end: value k is bit k%8 of byte k/8 (Q1_0), bits 2(k%4) of byte
// k/4 (Q2_0).

const (
	qkQ1_0 = 128
	qkQ2_0 = 64
)

func init() {
	for t, f := range map[Type]*lowbitFormat{Q1_0: &formatQ1_0, Q2_0: &formatQ2_0} {
		traits[t] = &Traits{
			ToFloat:    func(src []byte, dst []float32) { f.decode(src, dst) },
			FromFloat:  f.encode,
			VecDotType: Q8_0,
			VecDot:     func(n int, w, a []byte) float32 { return f.vecDot(n, w, a) },
		}
	}
}

// lowbitFormat is Q1_0 or Q2_0 for the shared decoder and dot product: 18-byte blocks of
// qk values, d then the packed bits, which values turns into integers.
type lowbitFormat struct {
	qk     int
	values func(qs []byte, q []int8)
	encode func(src []float32, dst []byte)
}

var (
	formatQ1_0 = lowbitFormat{qkQ1_0, signValues, encodeQ1_0}
	formatQ2_0 = lowbitFormat{qkQ2_0, twoBitValues, encodeQ2_0}
)

// signValues unpacks Q1_0 bits: set is +1, clear -1 (ggml decodes them as ±d).
func signValues(qs []byte, q []int8) {
	for k := range q {
		q[k] = int8(qs[k/8]>>(k%8)&1)*2 - 1
	}
}

// twoBitValues unpacks Q2_0 codes 0..3 as -1..2.
func twoBitValues(qs []byte, q []int8) {
	for k := range q {
		q[k] = int8(qs[k/4]>>(2*(k%4))&3) - 1
	}
}

func (f *lowbitFormat) decode(src []byte, dst []float32) {
	var q [qkQ1_0]int8
	for i := range len(dst) / f.qk {
		b, y := src[i*18:][:18], dst[i*f.qk:][:f.qk]
		f.values(b[2:18], q[:f.qk])
		d := halfAt(b, 0)
		for k := range y {
			y[k] = float32(q[k]) * d
		}
	}
}

// vecDot is ggml_vec_dot_q1_0_q8_0_generic / ggml_vec_dot_q2_0_q8_0_generic: a block spans
// qk/32 Q8_0 blocks, whose integer sums are scaled by their own d and summed in float
// before the weight scale is applied.
func (f *lowbitFormat) vecDot(n int, w, a []byte) float32 {
	var q [qkQ1_0]int8
	parts := f.qk / qk32
	var sumf float32
	for i := range n / f.qk {
		x := w[i*18:][:18]
		f.values(x[2:18], q[:f.qk])
		var sumi float32
		for k := range parts {
			y := a[(parts*i+k)*34:][:34]
			block := 0
			for j, v := range q8Quants(y) {
				block += int(q[qk32*k+j]) * int(int8(v))
			}
			sumi += float32(halfAt(y, 0) * float32(block))
		}
		sumf += float32(halfAt(x, 0) * sumi)
	}
	return sumf
}

// encodeQ1_0 is quantize_row_q1_0_ref: d is the mean |x|, and each bit is x ≥ 0.
func encodeQ1_0(src []float32, dst []byte) {
	for i := range len(src) / qkQ1_0 {
		x, b := src[i*qkQ1_0:][:qkQ1_0], dst[i*18:][:18]
		var sumAbs float32
		for _, v := range x {
			sumAbs += abs32(v)
		}
		putHalf(b, 0, sumAbs/qkQ1_0)
		clear(b[2:])
		for k, v := range x {
			if v >= 0 {
				b[2+k/8] |= 1 << (k % 8)
			}
		}
	}
}

// encodeQ2_0 is quantize_row_q2_0_ref: d is max |x|, q = round(x/d)+1 clamped to [0, 3].
func encodeQ2_0(src []float32, dst []byte) {
	for i := range len(src) / qkQ2_0 {
		x, b := src[i*qkQ2_0:][:qkQ2_0], dst[i*18:][:18]
		d, _ := absMax(x)
		id := float32(0)
		if d > 0 {
			id = 1 / d
		}
		putHalf(b, 0, d)
		clear(b[2:])
		for k, v := range x {
			q := clampInt(int(truncInt(roundAway(v*id)))+1, 0, 3)
			b[2+k/4] |= uint8(q) << (2 * (k % 4))
		}
	}
}
