package tensor

// The ternary formats (BitNet b1.58, TriLMs): values in {-1, 0, 1}·d per 256.
//   TQ1_0 (54 bytes): qs[48], qh[4], d f16. Each byte packs 5 (qs) or 4 (qh) base-3 digits
//   as a fixed-point fraction ⌈digits·256/243⌉; digit n is recovered as ((b·3ⁿ mod 256)·3) >> 8.
//   Element order: qs[0..31] digit 0, then digit 1, … (32 per digit), then qs[32..47] the same
//   way (16 per digit), then qh[0..3] digits 0..3 (4 per digit).
//   TQ2_0 (66 bytes): qs[64], d f16; 2 bits per value (q-1)·d, in Q2_K's layout (byte m of
//   each 32-byte half holds elements m, m+32, m+64, m+96 of its 128 at bit pairs 0, 2, 4, 6).

var pow3 = [5]uint8{1, 3, 9, 27, 81}

func init() {
	traits[TQ1_0] = &Traits{ToFloat: decodeTQ1_0, FromFloat: encodeTQ1_0, VecDotType: Q8_K, VecDot: dotTQ1_0}
	traits[TQ2_0] = &Traits{ToFloat: decodeTQ2_0, FromFloat: encodeTQ2_0, VecDotType: Q8_K, VecDot: dotTQ2_0}
}

// trit extracts base-3 digit n of a TQ1_0 byte, 0..2.
func trit(b byte, n int) int {
	return int(uint16(b*pow3[n]) * 3 >> 8)
}

// tq1Runs are the three packings of a TQ1_0 block in element order: bytes [off,
// off+width) each hold `digits` digits, and digit n of all of them comes before digit n+1.
var tq1Runs = [...]struct{ off, width, digits int }{{0, 32, 5}, {32, 16, 5}, {48, 4, 4}}

// tq1Values returns the 256 values (-1, 0, 1) of a TQ1_0 block in element order.
func tq1Values(b []byte) (v [qkK]int8) {
	k := 0
	for _, run := range tq1Runs {
		for n := range run.digits {
			for _, q := range b[run.off : run.off+run.width] {
				v[k] = int8(trit(q, n) - 1)
				k++
			}
		}
	}
	return v
}

func decodeTQ1_0(src []byte, dst []float32) {
	for i := range len(dst) / qkK {
		b, y := src[i*54:][:54], dst[i*qkK:][:qkK]
		d := halfAt(b, 52)
		for k, t := range tq1Values(b) {
			y[k] = float32(t) * d
		}
	}
}

func decodeTQ2_0(src []byte, dst []float32) {
	var q [qkK]int8
	for i := range len(dst) / qkK {
		b, y := src[i*66:][:66], dst[i*qkK:][:qkK]
		unpackTwoBits(b[:64], &q)
		d := halfAt(b, 64)
		for k, c := range &q {
			y[k] = float32(c-1) * d
		}
	}
}

// ternaryScale returns d = max|x| and 1/d (0 for an all-zero block), shared by both TQ
// quantizers.
func ternaryScale(x []float32) (d, id float32) {
	for _, v := range x {
		d = max(d, abs32(v))
	}
	return d, inverse(d)
}

// ternaryDigit is lroundf(x·id) + 1: -1, 0, 1 become 0, 1, 2.
func ternaryDigit(x, id float32) int {
	return int(truncInt(roundAway(x*id))) + 1
}

// encodeTQ1_0 is quantize_row_tq1_0_ref: 5 (or 4) digits, most significant first, packed
// as a base-3 number q and stored as ⌈q·256/243⌉ so that digit extraction is a multiply.
func encodeTQ1_0(src []float32, dst []byte) {
	for i := range len(src) / qkK {
		x, b := src[i*qkK:][:qkK], dst[i*54:][:54]
		d, id := ternaryScale(x)
		putHalf(b, 52, d)
		base := 0
		for _, run := range tq1Runs {
			for m := range run.width {
				var q uint8
				for n := range run.digits {
					q = q*3 + uint8(ternaryDigit(x[base+m+n*run.width], id))
				}
				if run.digits == 4 {
					q *= 3 // the first value goes to the most significant of 5 digits
				}
				b[run.off+m] = uint8((uint16(q)*256 + 242) / 243)
			}
			base += run.width * run.digits
		}
	}
}

// encodeTQ2_0 is quantize_row_tq2_0_ref.
func encodeTQ2_0(src []float32, dst []byte) {
	for i := range len(src) / qkK {
		x, b := src[i*qkK:][:qkK], dst[i*66:][:66]
		d, id := ternaryScale(x)
		putHalf(b, 64, d)
		for j := 0; j < 64; j += 32 {
			for m := range 32 {
				var q uint8
				for n := range 4 {
					q += uint8(ternaryDigit(x[4*j+m+32*n], id)&3) << (2 * n)
				}
				b[j+m] = q
			}
		}
	}
}

// dotTQ1_0 is ggml_vec_dot_tq1_0_q8_K_generic.
func dotTQ1_0(n int, w, a []byte) float32 {
	var sumf float32
	for i := range n / qkK {
		x, y := w[i*54:][:54], blockQ8K(a, i)
		sum := 0
		for k, t := range tq1Values(x) {
			sum += int(t) * y.q(k)
		}
		sumf += float32(float32(sum) * (halfAt(x, 52) * y.d()))
	}
	return sumf
}

// dotTQ2_0 is ggml_vec_dot_tq2_0_q8_K_generic.
func dotTQ2_0(n int, w, a []byte) float32 {
	var sumf float32
	for i := range n / qkK {
		x, y := w[i*66:][:66], blockQ8K(a, i)
		var q [qkK]int8
		unpackTwoBits(x[:64], &q)
		sumi := 0
		for k, v := range y.quants() {
			sumi += int(int8(v)) * int(q[k]-1)
		}
		sumf += float32(float32(sumi) * (y.d() * halfAt(x, 64)))
	}
	return sumf
}
