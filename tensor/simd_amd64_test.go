//go:build goexperiment.simd && amd64

package tensor

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"simd/archsimd"
	"testing"
)

// TestSIMDInstalled checks that every hot type runs a vector kernel at each SIMD level the
// CPU has: the matmul and DotRow reach the kernels through the traits table only.
func TestSIMDInstalled(t *testing.T) {
	if !archsimd.X86.AVX2() || !archsimd.X86.FMA() {
		if len(kernelLevels) != 1 {
			t.Fatalf("vector kernels on a CPU without AVX2/FMA: levels %v", Levels())
		}
		t.Skip("CPU without AVX2 and FMA: the generic kernels run")
	}
	if !hasLevel(LevelAVX2) || archsimd.X86.AVX512() != hasLevel(LevelAVX512) {
		t.Fatalf("levels %v on a CPU with AVX2 (AVX-512 %v)", Levels(), archsimd.X86.AVX512())
	}
	for _, k := range kernelLevels[1:] {
		for _, typ := range simdHotTypes {
			if reflect.ValueOf(k.traits[typ].VecDot).Pointer() == reflect.ValueOf(traits[typ].VecDot).Pointer() {
				t.Errorf("%s: %s's VecDot is still the generic kernel", k.level, typ)
			}
		}
	}
}

// TestTileKernels holds the tiled attention kernel's vector loops (AVX2, and AVX-512 where
// the CPU has it; scores also for pairs of rows) to the Go ones bit for bit: scores over 16 to 256
// dimensions with masked positions at either end of the tile, and V accumulation over
// value widths that take the 64-, 32- and 16-value paths.
func TestTileKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	fill := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	type scoresKernel = func(*[ggmlTile]float32, []float32, []float32, int, int, float32)
	type accKernel = func([]float32, []float32, *[ggmlTile]float32, int, int)
	scorers := map[string]scoresKernel{"AVX2": tileScoresAVX2}
	accumulators := map[string]accKernel{"AVX2": tileAccumulateAVX2}
	if archsimd.X86.AVX512() {
		scorers["AVX-512"], accumulators["AVX-512"] = tileScoresAVX512, tileAccumulateAVX512
	}
	for _, dim := range []int{16, 32, 48, 64, 80, 96, 128, 192, 256} {
		lo, hi := rng.IntN(8), ggmlTile-1-rng.IntN(8)
		q, keys, values := fill(dim), fill(dim*ggmlTile), fill(dim*ggmlTile)
		var want [ggmlTile]float32
		tileScoresGo(&want, q, keys, lo, hi, 0.125)
		for name, kernel := range scorers {
			var got [ggmlTile]float32
			kernel(&got, q, keys, lo, hi, 0.125)
			expectBits(t, name+" scores", got[:], want[:])
		}
		weights := (*[ggmlTile]float32)(fill(ggmlTile))
		start := fill(dim)
		wantAcc := append([]float32(nil), start...)
		tileAccumulateGo(wantAcc, values, weights, lo, hi)
		for name, kernel := range accumulators {
			got := append([]float32(nil), start...)
			kernel(got, values, weights, lo, hi)
			expectBits(t, name+" accumulation", got, wantAcc)
		}
		if !archsimd.X86.AVX512() {
			continue
		}
		// The pair kernel: each row as the single Go loop does it.
		q1 := fill(dim)
		var want1, got0, got1 [ggmlTile]float32
		tileScoresGo(&want1, q1, keys, lo, hi, 0.125)
		tileScores2AVX512(&got0, &got1, q, q1, keys, lo, hi, 0.125)
		expectBits(t, "AVX-512 pair scores (first)", got0[:], want[:])
		expectBits(t, "AVX-512 pair scores (second)", got1[:], want1[:])
		// And the pair accumulation, against the Go loop for each row.
		weights1, start1 := (*[ggmlTile]float32)(fill(ggmlTile)), fill(dim)
		wantAcc1 := append([]float32(nil), start1...)
		tileAccumulateGo(wantAcc1, values, weights1, lo, hi)
		pair0, pair1 := append([]float32(nil), start...), append([]float32(nil), start1...)
		tileAccumulate2AVX512(pair0, pair1, values, weights, weights1, lo, hi)
		expectBits(t, "AVX-512 pair accumulation (first)", pair0, wantAcc)
		expectBits(t, "AVX-512 pair accumulation (second)", pair1, wantAcc1)
		// The four-row kernels, each row against the Go loops.
		var quad [4]*[ggmlTile]float32
		qs, accs, wantQuad, ws := [4][]float32{}, [4][]float32{}, [4][]float32{}, [4]*[ggmlTile]float32{}
		for r := range quad {
			quad[r], qs[r], ws[r] = new([ggmlTile]float32), fill(dim), (*[ggmlTile]float32)(fill(ggmlTile))
			accs[r] = fill(dim)
			wantQuad[r] = append([]float32(nil), accs[r]...)
			tileAccumulateGo(wantQuad[r], values, ws[r], lo, hi)
		}
		tileScores4AVX512(&quad, &qs, keys, lo, hi, 0.125)
		tileAccumulate4AVX512(&accs, values, &ws, lo, hi)
		for r := range quad {
			var want [ggmlTile]float32
			tileScoresGo(&want, qs[r], keys, lo, hi, 0.125)
			expectBits(t, fmt.Sprintf("AVX-512 quad scores (row %d)", r), quad[r][:], want[:])
			expectBits(t, fmt.Sprintf("AVX-512 quad accumulation (row %d)", r), accs[r], wantQuad[r])
		}
	}
}

// TestTileMax holds the vector maximum of a tile's scores to the scalar scan: masked
// edges (−Inf), a fully masked tile, ties, zeros of both signs, and the NaN it hands back.
func TestTileMax(t *testing.T) {
	if !archsimd.X86.AVX512() {
		t.Skip("no AVX-512")
	}
	rng := rand.New(rand.NewPCG(61, 67))
	scan := func(scores *[ggmlTile]float32) float32 {
		m := float32(math.Inf(-1))
		for _, sc := range scores {
			if !(m > sc) {
				m = sc
			}
		}
		return m
	}
	for c := range 200 {
		var scores [ggmlTile]float32
		for r := range scores {
			scores[r] = float32(rng.NormFloat64() * 10)
		}
		switch c % 5 {
		case 1: // the causal edge
			for r := rng.IntN(ggmlTile); r < ggmlTile; r++ {
				scores[r] = float32(math.Inf(-1))
			}
		case 2:
			for r := range scores {
				scores[r] = float32(math.Inf(-1))
			}
		case 3: // the largest value twice, and zeros
			scores[rng.IntN(ggmlTile)], scores[rng.IntN(ggmlTile)] = 100, 100
			scores[rng.IntN(ggmlTile)] = float32(math.Copysign(0, -1))
		case 4:
			scores[rng.IntN(ggmlTile)] = float32(math.NaN())
		}
		got, nan := tileMaxAVX512(&scores)
		if c%5 == 4 {
			if !nan {
				t.Errorf("case %d: a NaN not reported", c)
			}
			continue
		}
		if want := scan(&scores); nan || got != want {
			t.Errorf("case %d: max %v (NaN %v), the scan %v", c, got, nan, want)
		}
	}
}

// TestTileExpSum holds the fused exponentials and sum of a tile to tileExpAVX2 and
// tileSoftmax's sum16 loop bit for bit: masked edges, the maximum itself (an exponent of
// 0), differences down to −87 (the smallest exponentials expfAVX2 takes), and the tiles
// it must hand back untouched (a difference past its range, a NaN).
func TestTileExpSum(t *testing.T) {
	if !archsimd.X86.AVX512() {
		t.Skip("no AVX-512")
	}
	rng := rand.New(rand.NewPCG(71, 73))
	for c := range 300 {
		var scores [ggmlTile]float32
		max := float32(rng.NormFloat64() * 4)
		for r := range scores {
			scores[r] = max - float32(rng.Float64()*[]float64{1, 10, 87}[c%3])
		}
		scores[rng.IntN(ggmlTile)] = max
		if c%4 == 1 {
			for r := rng.IntN(ggmlTile); r < ggmlTile; r++ {
				scores[r] = float32(math.Inf(-1))
			}
		}
		special := c%10 == 7
		if special {
			scores[rng.IntN(ggmlTile)] = []float32{max - 120, float32(math.NaN())}[c%20/10]
		}
		want := scores
		tileExpAVX2(&want, max)
		var wantSum float64
		for i := 0; i < ggmlTile; i += vecWidth {
			wantSum += float64(sum16((*[vecWidth]float32)(want[i : i+vecWidth])))
		}
		got := scores
		sum, ok := tileExpSumAVX512(&got, max)
		if special {
			if ok {
				t.Errorf("case %d: a tile out of range taken", c)
			}
			expectBits(t, fmt.Sprintf("case %d handed back", c), got[:], scores[:])
			continue
		}
		if !ok {
			t.Errorf("case %d: handed back", c)
			continue
		}
		expectBits(t, fmt.Sprintf("case %d exponentials", c), got[:], want[:])
		if math.Float64bits(sum) != math.Float64bits(wantSum) {
			t.Errorf("case %d: sum %v, want %v", c, sum, wantSum)
		}
	}
}

// BenchmarkTileScores is the tiled attention's scores for two query rows of 64 dimensions
// against one tile, row by row and as a pair.
func BenchmarkTileScores(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	fill := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	q0, q1, keys := fill(64), fill(64), fill(64*ggmlTile)
	var s0, s1 [ggmlTile]float32
	b.Run("rows", func(b *testing.B) {
		for b.Loop() {
			active.tileScores(&s0, q0, keys, 0, ggmlTile-1, 0.125)
			active.tileScores(&s1, q1, keys, 0, ggmlTile-1, 0.125)
		}
	})
	b.Run("pair", func(b *testing.B) {
		for b.Loop() {
			active.tileScores2(&s0, &s1, q0, q1, keys, 0, ggmlTile-1, 0.125)
		}
	})
}

// TestDeltaRowKernels holds the delta rule's and the convolution's vector kernels to the
// Go loops bit for bit: madFloats for lengths with and without a tail, convRow for 1 to 20
// taps (unfused, fused and both) and channel counts with and without a tail.
func TestDeltaRowKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	fill := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	for n := 1; n <= 70; n++ {
		row, k := fill(n), fill(n)
		delta := float32(rng.NormFloat64())
		want, got := append([]float32(nil), row...), append([]float32(nil), row...)
		madFloatsGo(want, k, delta)
		madFloatsAVX2(got, k, delta)
		expectBits(t, "madFloats", got, want)
	}
	for taps := 1; taps <= 20; taps++ {
		for _, c := range []int{8, 13, 32} {
			rows, kernel := fill(taps*c), fill(taps*c)
			want, got := make([]float32, c), make([]float32, c)
			convRowGo(want, rows, kernel)
			convRowAVX2(got, rows, kernel)
			expectBits(t, fmt.Sprintf("convRow %d taps × %d", taps, c), got, want)
		}
	}
}

// TestF16HeadsKernel holds the many-head F16 score kernel to vecDotF16 bit for bit: each head's query (rounded to F16) against key rows read
// from F16 with a stride of their own, for row lengths in registers (64-256) and through
// scratch (576, MLA's latent), one to eight heads and scores strided per head; lengths it
// does not take are refused.
func TestF16HeadsKernel(t *testing.T) {
	if active.f16Heads == nil {
		t.Skip("no AVX-512: scores go one at a time")
	}
	rng := rand.New(rand.NewPCG(43, 47))
	for _, dk := range []int{64, 128, 192, 256, 576} {
		for _, heads := range []int{1, 3, 8} {
			const positions, stride = 5, 64
			kStride := 2*dk + 6
			keys := make([]byte, (positions-1)*kStride+2*dk)
			widened := make([][]float32, positions)
			for p := range positions {
				widened[p] = make([]float32, dk)
				for d := range dk {
					h := F32ToF16(float32(rng.NormFloat64() * math.Ldexp(1, rng.IntN(9)-4)))
					binary.LittleEndian.PutUint16(keys[p*kStride+2*d:], h)
					widened[p][d] = F16ToF32(h)
				}
			}
			q := make([]float32, heads*dk)
			for i := range q {
				q[i] = roundToF16(float32(rng.NormFloat64()))
			}
			scores := make([]float32, heads*stride)
			if !active.f16Heads(q, keys, kStride, positions, dk, scores, stride, make([]float32, dk)) {
				t.Fatalf("dk %d: refused", dk)
			}
			for h := range heads {
				for p := range positions {
					want := vecDotF16(q[h*dk:(h+1)*dk], widened[p])
					if got := scores[h*stride+p]; math.Float32bits(got) != math.Float32bits(want) {
						t.Errorf("dk %d, %d heads: head %d position %d: %g, vecDotF16 %g", dk, heads, h, p, got, want)
					}
				}
			}
		}
	}
	for _, dk := range []int{48, 80, 600} {
		if active.f16Heads(make([]float32, dk), make([]byte, 2*dk), 2*dk, 1, dk, make([]float32, 1), 1, make([]float32, dk)) {
			t.Errorf("dk %d: taken", dk)
		}
	}
}

// TestMadHalfHeadsKernel holds ggml's per-row attention with the eight-head F16 V kernel
// (madHalfHeads) to the same attention through scaleHalf and madHalf one head and position
// at a time, bit for bit: groups of 1 to 16 query heads per KV head (padded eights
// included), value rows of 64, 128 and 512 (MLA's latent, a view of K), contexts that
// span several chunks of positions and, on two threads, split across workers. The
// queries grow along the positions of one case so that the running maximum rises often
// (each rise rescales an accumulator); another has scores large enough for exponentials
// to underflow.
func TestMadHalfHeadsKernel(t *testing.T) {
	if active.madHalfHeads == nil {
		t.Skip("no AVX-512: the accumulators go one head at a time")
	}
	rng := rand.New(rand.NewPCG(53, 59))
	for _, c := range []struct {
		group, kvHeads, dk, dv, ctx int
		scale                       float32
	}{
		{8, 4, 128, 128, 300, 1},
		{1, 2, 64, 64, 130, 4},
		{4, 2, 128, 128, 70, 0.1},
		{12, 1, 64, 64, 200, 1},
		{16, 1, 576, 512, 150, 0.5},
		{8, 1, 128, 128, 1100, 8},
	} {
		heads := c.group * c.kvHeads
		keys := make([]float32, c.ctx*c.kvHeads*c.dk)
		for p := range c.ctx {
			for i := range c.kvHeads * c.dk {
				// Keys that lean more and more one way: later positions score higher.
				keys[p*c.kvHeads*c.dk+i] = float32(rng.NormFloat64()) + float32(p)/float32(c.ctx)
			}
		}
		k := denseKV(t, F16, keys, c.dk, c.kvHeads)
		v := denseKV(t, F16, randomFloats(rng, c.ctx*c.kvHeads*c.dv), c.dv, c.kvHeads)
		if c.dk != c.dv { // MLA: V is the first dv values of each K row
			v = k
			v.Dim = c.dv
		}
		q := randomFloats(rng, heads*c.dk)
		for i := range q {
			q[i] = abs32(q[i])
		}
		a := AttnParams{Scale: c.scale, Numerics: AttnGGML}
		for _, threads := range []int{1, 2} {
			p := NewPool(threads)
			got := make([]float32, heads*c.dv)
			want := make([]float32, heads*c.dv)
			if err := p.Attention(got, q, heads, []int32{int32(c.ctx - 1)}, k, v, c.ctx, a); err != nil {
				t.Fatal(err)
			}
			kernel := active.madHalfHeads
			active.madHalfHeads = nil
			err := p.Attention(want, q, heads, []int32{int32(c.ctx - 1)}, k, v, c.ctx, a)
			active.madHalfHeads = kernel
			p.Close()
			if err != nil {
				t.Fatal(err)
			}
			expectBits(t, fmt.Sprintf("group %d, dv %d, ctx %d, %d threads", c.group, c.dv, c.ctx, threads), got, want)
		}
	}
}
