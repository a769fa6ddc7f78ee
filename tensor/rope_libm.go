package tensor

import "math"

// sin32 and cos32 are sinf and cosf as glibc computes them on x86-64 (its FMA variant,
// glibc 2.36 as on the fixtures' machine): the algorithm of Arm's optimized-routines
// (sinf.c/cosf.c, MIT licence), evaluated in float64 and rounded to float32 once. They are
// not correctly rounded (up to 0.56 ulp), and RoPE angles are exactly where that shows:
// float32(math.Cos(x)) differs from ggml's cosf in about one value in 400. Every operation
// that GCC fuses in glibc's FMA build is a math.FMA here, every other one is rounded on its
// own.

// sincosCoeffs are the constants of one polynomial set. The second set computes −cos
// instead of cos, which negates quadrants 2 and 3 for free.
type sincosCoeffs struct {
	c0, c1, c2, c3, c4 float64 // cosine polynomial
	s1, s2, s3         float64 // sine polynomial
}

var sincosTable = [2]sincosCoeffs{
	{0x1p0, -0x1.ffffffd0c621cp-2, 0x1.55553e1068f19p-5, -0x1.6c087e89a359dp-10, 0x1.99343027bf8c3p-16,
		-0x1.555545995a603p-3, 0x1.1107605230bc4p-7, -0x1.994eb3774cf24p-13},
	{-0x1p0, 0x1.ffffffd0c621cp-2, -0x1.55553e1068f19p-5, 0x1.6c087e89a359dp-10, -0x1.99343027bf8c3p-16,
		-0x1.555545995a603p-3, 0x1.1107605230bc4p-7, -0x1.994eb3774cf24p-13},
}

// quadrantSign is the sign of the reduced argument per quadrant.
var quadrantSign = [4]float64{1, -1, -1, 1}

// invPio4 is 4/π to 192 bits; entry i holds bits 8i+1 … 8i+32 after the binary point.
var invPio4 = [24]uint32{
	0xa2, 0xa2f9, 0xa2f983, 0xa2f9836e, 0xf9836e4e, 0x836e4e44, 0x6e4e4415, 0x4e441529,
	0x441529fc, 0x1529fc27, 0x29fc2757, 0xfc2757d1, 0x2757d1f5, 0x57d1f534, 0xd1f534dd, 0xf534ddc0,
	0x34ddc0db, 0xddc0db62, 0xc0db6295, 0xdb629599, 0x6295993c, 0x95993c43, 0x993c4390, 0x3c439041,
}

const (
	hpiInv = 0x1.45F306DC9C883p+23 // 2/π, scaled by 2^24 so the quadrant lands in bits 24…31
	hpi    = 0x1.921FB54442D18p0   // π/2
	pi63   = 0x1.921FB54442D18p-62 // 2π·2^-64
)

// abstop12 is the top 12 bits of f's encoding without the sign: a cheap magnitude class.
func abstop12(f float32) uint32 { return math.Float32bits(f) >> 20 & 0x7ff }

var (
	topPio4 = abstop12(0x1.921FB6p-1)
	topTiny = abstop12(0x1p-12)
	top120  = abstop12(120)
	topInf  = abstop12(float32(math.Inf(1)))
)

func sin32(x float32) float32 { return sincos32(x, 0) }
func cos32(x float32) float32 { return sincos32(x, 1) }

// sincos32 is sinf (cosine 0) or cosf (cosine 1).
func sincos32(y float32, cosine int) float32 {
	x := float64(y)
	top := abstop12(y)
	if top < topPio4 {
		if top < topTiny {
			if cosine != 0 {
				return 1
			}
			return y
		}
		return sincosPoly(x, float64(x*x), &sincosTable[0], cosine)
	}
	var n, quadrant int
	switch {
	case top < top120:
		// One multiply-subtract reduction, accurate enough below 120.
		n = (int(int32(float64(x*hpiInv))) + 0x800000) >> 24
		x = math.FMA(-float64(n), hpi, x)
		quadrant = n
	case top < topInf:
		x, n = reduceLarge(math.Float32bits(y))
		quadrant = n + int(math.Float32bits(y)>>31)
	default:
		return float32(math.NaN()) // ±Inf or NaN
	}
	p := &sincosTable[0]
	if quadrant&2 != 0 {
		p = &sincosTable[1]
	}
	xs := float64(x * quadrantSign[quadrant&3])
	return sincosPoly(xs, float64(x*x), p, n^cosine)
}

// sincosPoly evaluates the sine polynomial for even n and the cosine one for odd n.
func sincosPoly(x, x2 float64, p *sincosCoeffs, n int) float32 {
	if n&1 == 0 {
		x3 := float64(x * x2)
		s1 := math.FMA(x2, p.s3, p.s2)
		x7 := float64(x3 * x2)
		s := math.FMA(x3, p.s1, x)
		return float32(math.FMA(x7, s1, s))
	}
	x4 := float64(x2 * x2)
	c2 := math.FMA(x2, p.c4, p.c3)
	c1 := math.FMA(x2, p.c1, p.c0)
	x6 := float64(x4 * x2)
	c := math.FMA(x4, p.c2, c1)
	return float32(math.FMA(x6, c2, c))
}

// reduceLarge reduces |y| >= 120 modulo π/2 with a 32×96-bit product against 4/π; it
// returns the reduced argument and the quadrant (the sign of y is not included).
func reduceLarge(bits uint32) (float64, int) {
	arr := invPio4[bits>>26&15:]
	shift := bits >> 23 & 7
	m := (bits&0xffffff | 0x800000) << shift
	res0 := uint64(m * arr[0])
	res1 := uint64(m) * uint64(arr[4])
	res2 := uint64(m) * uint64(arr[8])
	res0 = res2>>32 | res0<<32
	res0 += res1
	n := (res0 + 1<<61) >> 62
	res0 -= n << 62
	return float64(int64(res0)) * pi63, int(n)
}
