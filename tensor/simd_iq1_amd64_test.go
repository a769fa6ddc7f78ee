//go:build goexperiment.simd && amd64

package tensor

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// iq1Types are the formats of simd_iq1_amd64.go with their kernels' model (the float order
// of ggml's AVX2 kernels, written out in Go).
var iq1Types = []struct {
	typ   Type
	model func(n int, w, a []byte) float32
}{{IQ1_S, iq1SGGMLModel}, {IQ1_M, iq1MGGMLModel}}

func iq1Installed(t testing.TB) {
	if _, ok := active.dotRowsOne[IQ1_S]; !ok {
		t.Skip("CPU without AVX2, FMA and F16C: the generic IQ1 kernels run")
	}
}

// hsumGGML adds eight lanes in the order of ggml's hsum_float_8.
func hsumGGML(x [8]float32) float32 {
	r := [4]float32{x[0] + x[4], x[1] + x[5], x[2] + x[6], x[3] + x[7]}
	return (r[0] + r[2]) + (r[1] + r[3])
}

// iq1SGGMLModel is ggml_vec_dot_iq1_s_q8_K's AVX2 path: lane k of a block holds values 4k
// to 4k+3 of each sub-block times its scale; the shift's integer comes from the bsums.
func iq1SGGMLModel(n int, w, a []byte) float32 {
	var accum [8]float32
	var accum1 float32
	for i := range n / qkK {
		b, y := w[50*i:][:50], blockQ8K(a, i)
		var sumi [8]int
		sumi1 := 0
		for ib := range 8 {
			qh := int(binary.LittleEndian.Uint16(b[34+2*ib:]))
			ls := 2*(qh>>12&7) + 1
			for e := range 32 {
				idx := int(b[2+4*ib+e/8]) | qh>>(3*(e/8))&7<<8
				sumi[e/4] += ls * int(iq1sGrid[8*idx+e%8]) * y.q(32*ib+e)
			}
			sign := 1
			if qh&0x8000 != 0 {
				sign = -1
			}
			sumi1 += (y.bsum(2*ib) + y.bsum(2*ib+1)) * sign * ls
		}
		d := y.d() * halfAt(b, 0)
		for k := range accum {
			accum[k] = fma32(d, float32(sumi[k]), accum[k])
		}
		accum1 = fma32(d, float32(sumi1), accum1)
	}
	return hsumGGML(accum) + iqShift*accum1
}

// iq1MGGMLModel is ggml_vec_dot_iq1_m_q8_K's AVX2 path: the points' lanes and the shift's
// (the activations signed per group of 8) in two vector sums, each value times the scale
// of its half sub-block.
func iq1MGGMLModel(n int, w, a []byte) float32 {
	var accum1, accum2 [8]float32
	for i := range n / qkK {
		b, y := w[56*i:][:56], blockQ8K(a, i)
		var sc [4]int
		for j := range sc {
			sc[j] = int(binary.LittleEndian.Uint16(b[48+2*j:]))
		}
		var sumi1, sumi2 [8]int
		for ib := range 8 {
			for e := range 32 {
				g := 4*ib + e/8
				nibble := int(b[32+g/2]) >> (4 * (g % 2)) & 15
				idx := int(b[g]) | nibble&7<<8
				s := 2*(sc[ib/2]>>(6*(ib%2)+3*(e/16))&7) + 1
				q := y.q(32*ib + e)
				sumi1[e/4] += s * int(iq1sGrid[8*idx+e%8]) * q
				if nibble&8 != 0 {
					q = -q
				}
				sumi2[e/4] += s * q
			}
		}
		d := y.d() * F16ToF32(uint16(sc[0]>>12|sc[1]>>8&0x00F0|sc[2]>>4&0x0F00|sc[3]&0xF000))
		for k := range accum1 {
			accum1[k] = fma32(d, float32(sumi1[k]), accum1[k])
			accum2[k] = fma32(d, float32(sumi2[k]), accum2[k])
		}
	}
	return hsumGGML(accum1) + iqShift*hsumGGML(accum2)
}

// randomIQ1 fills IQ1 blocks with random bytes and a finite block scale.
func randomIQ1(rng *rand.Rand, typ Type, w []byte) {
	for i := range w {
		w[i] = byte(rng.Uint32())
	}
	bs := int(typ.BlockBytes())
	for off := 0; off < len(w); off += bs {
		h := randomHalf(rng)
		if typ == IQ1_S {
			binary.LittleEndian.PutUint16(w[off:], h)
			continue
		}
		for j := range 4 { // d's nibble j in the top bits of scale u16 j
			p := &w[off+48+2*j+1]
			*p = *p&0x0F | byte(h>>(4*j)&15)<<4
		}
	}
}

// randomQ8KValid is Q8_K activations as the quantizer makes them: quants in [-127, 127]
// and their sums in bsums.
func randomQ8KValid(rng *rand.Rand, a []byte, extreme bool) {
	for off := 0; off < len(a); off += 292 {
		binary.LittleEndian.PutUint32(a[off:], math.Float32bits(float32(math.Ldexp(rng.Float64()+0.5, rng.IntN(20)-10))))
		for g := range 16 {
			sum := 0
			for j := range 16 {
				q := rng.IntN(255) - 127
				if extreme {
					q = 127 * (1 - 2*rng.IntN(2))
				}
				a[off+4+16*g+j] = byte(int8(q))
				sum += q
			}
			binary.LittleEndian.PutUint16(a[off+260+2*g:], uint16(int16(sum)))
		}
	}
}

// extremeIQ1 sets every scale to 7 (2s+1 = 15) and the indices to points with the most
// nonzero values, shifts of either sign.
func extremeIQ1(rng *rand.Rand, typ Type, w []byte) {
	bs := int(typ.BlockBytes())
	// The points with eight nonzero values.
	var full []int
	for i := range 2048 {
		nz := 0
		for _, v := range iq1sGrid[8*i : 8*i+8] {
			if v != 0 {
				nz++
			}
		}
		if nz == 8 {
			full = append(full, i)
		}
	}
	for off := 0; off < len(w); off += bs {
		b := w[off : off+bs]
		switch typ {
		case IQ1_S:
			for ib := range 8 {
				qh := 0x7000 | uint16(rng.IntN(2))<<15
				for l := range 4 {
					i := full[rng.IntN(len(full))]
					b[2+4*ib+l] = byte(i)
					qh |= uint16(i>>8) << (3 * l)
				}
				binary.LittleEndian.PutUint16(b[34+2*ib:], qh)
			}
		case IQ1_M:
			for g := range 32 {
				i := full[rng.IntN(len(full))]
				b[g] = byte(i)
				nibble := byte(i>>8) | byte(rng.IntN(2))<<3
				b[32+g/2] = b[32+g/2]&^(15<<(4*(g%2))) | nibble<<(4*(g%2))
			}
			for j := range 4 {
				b[48+2*j] = 0xFF
				b[48+2*j+1] |= 0x0F
			}
		}
	}
}

// iq1Magnitude is Σ|w·x| of a row against its activations, in float64 from Dequantize.
func iq1Magnitude(t *testing.T, typ Type, n int, w, a []byte) float64 {
	wf, af := make([]float32, n), make([]float32, n)
	if err := Dequantize(typ, w, wf); err != nil {
		t.Fatal(err)
	}
	if err := Dequantize(Q8_K, a, af); err != nil {
		t.Fatal(err)
	}
	var m float64
	for i := range wf {
		m += math.Abs(float64(wf[i]) * float64(af[i]))
	}
	return m
}

// TestIQ1KernelsMatchScalar holds the installed kernels to the generic ones (within
// 1e-5·Σ|w·x|: their float orders differ) and to the model of ggml's AVX2 kernels (the
// same bits), on random and extreme blocks of 1-4 blocks per row.
func TestIQ1KernelsMatchScalar(t *testing.T) {
	iq1Installed(t)
	rng := rand.New(rand.NewPCG(7, 11))
	for _, c := range iq1Types {
		fast, scalar := active.traits[c.typ].VecDot, scalarVecDots()[c.typ]
		for _, extreme := range []bool{false, true} {
			for nb := 1; nb <= 4; nb++ {
				n := nb * qkK
				w := make([]byte, nb*int(c.typ.BlockBytes()))
				a := make([]byte, nb*292)
				for trial := range 50 {
					randomIQ1(rng, c.typ, w)
					if extreme {
						extremeIQ1(rng, c.typ, w)
					}
					randomQ8KValid(rng, a, extreme)
					got, want, model := fast(n, w, a), scalar(n, w, a), c.model(n, w, a)
					mag := iq1Magnitude(t, c.typ, n, w, a)
					if diff := math.Abs(float64(got) - float64(want)); !(diff <= 1e-5*mag) {
						t.Errorf("%s extreme=%v nb=%d trial %d: %g, generic kernel %g (Σ|w·x| %g)", c.typ, extreme, nb, trial, got, want, mag)
					}
					if math.Float32bits(got) != math.Float32bits(model) {
						t.Errorf("%s extreme=%v nb=%d trial %d: %g, ggml's AVX2 order %g", c.typ, extreme, nb, trial, got, model)
					}
				}
			}
		}
	}
}

// TestIQ1RowsMatchOneRow checks the rows kernels against VecDot row by row: the same bits.
func TestIQ1RowsMatchOneRow(t *testing.T) {
	iq1Installed(t)
	rng := rand.New(rand.NewPCG(3, 5))
	for _, c := range iq1Types {
		for _, nb := range []int{1, 3, 8} {
			for _, rows := range []int{1, 2, 7} {
				n, rb := nb*qkK, nb*int(c.typ.BlockBytes())
				w, a := make([]byte, rows*rb), make([]byte, nb*292)
				randomIQ1(rng, c.typ, w)
				randomQ8KValid(rng, a, false)
				out := make([]float32, rows)
				active.dotRowsOne[c.typ](n, w, a, out)
				for r := range rows {
					if want := active.traits[c.typ].VecDot(n, w[r*rb:(r+1)*rb], a); math.Float32bits(out[r]) != math.Float32bits(want) {
						t.Errorf("%s nb=%d rows=%d row %d: %g, VecDot %g", c.typ, nb, rows, r, out[r], want)
					}
				}
			}
		}
	}
}

// BenchmarkIQ1Kernels times a [2048 × 768] mat-vec (one expert's down projection) on one
// thread with the generic kernel, the rows kernel and the matmul (which quantizes the
// activations too); MB/s counts the weight bytes, cpu-ns/op the time the process ran.
//
//	GOEXPERIMENT=simd go test -run '^$' -bench IQ1Kernels -benchtime 200x ./tensor
func BenchmarkIQ1Kernels(b *testing.B) {
	iq1Installed(b)
	const cols, rows = 2048, 768
	for _, c := range iq1Types {
		rng := rand.New(rand.NewPCG(1, uint64(c.typ)))
		rb := cols / qkK * int(c.typ.BlockBytes())
		w, a := make([]byte, rows*rb), make([]byte, cols/qkK*292)
		randomIQ1(rng, c.typ, w)
		randomQ8KValid(rng, a, false)
		out := make([]float32, rows)
		b.Run(fmt.Sprintf("type=%s/kernel=generic", c.typ), func(b *testing.B) {
			scalar := scalarVecDots()[c.typ]
			b.SetBytes(int64(len(w)))
			cpu := processCPU()
			for b.Loop() {
				for r := range rows {
					out[r] = scalar(cols, w[r*rb:(r+1)*rb], a)
				}
			}
			reportCPU(b, cpu)
		})
		b.Run(fmt.Sprintf("type=%s/kernel=rows", c.typ), func(b *testing.B) {
			b.SetBytes(int64(len(w)))
			cpu := processCPU()
			for b.Loop() {
				active.dotRowsOne[c.typ](cols, w, a, out)
			}
			reportCPU(b, cpu)
		})
		b.Run(fmt.Sprintf("type=%s/kernel=matmul", c.typ), func(b *testing.B) {
			m, err := NewMatrix(c.typ, []int64{cols, rows}, w)
			if err != nil {
				b.Fatal(err)
			}
			x := randomFloats(rng, cols)
			p := NewPool(1)
			defer p.Close()
			b.SetBytes(int64(len(w)))
			cpu := processCPU()
			for b.Loop() {
				if err := p.MatMul(out, m, x); err != nil {
					b.Fatal(err)
				}
			}
			reportCPU(b, cpu)
		})
	}
}
