package tensor

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// Matmul benchmarks. MB/s is weight bytes streamed per second (compare with
// BenchmarkMemoryBandwidth), GFLOP/s counts 2 operations per weight per token.
//
//	go test -run '^$' -bench 'MatVec|MulMatIDQwen3|MemoryBandwidth' ./tensor

// tiledWeights quantizes a block of random rows once and repeats it to the requested size:
// quantizing gigabytes with the reference quantizers would take minutes, and the speed of a
// kernel does not depend on which rows repeat.
func tiledWeights(b *testing.B, typ Type, cols, rows, copies int) []byte {
	b.Helper()
	block := min(rows, 64)
	rng := rand.New(rand.NewPCG(41, uint64(typ)))
	rowBytes, err := typ.RowBytes(int64(cols))
	if err != nil {
		b.Fatal(err)
	}
	seed := make([]byte, block*int(rowBytes))
	if err := Quantize(typ, randomFloats(rng, block*cols), seed); err != nil {
		b.Fatal(err)
	}
	out := make([]byte, copies*rows*int(rowBytes))
	for off := 0; off < len(out); off += len(seed) {
		copy(out[off:], seed)
	}
	return out
}

// expertSetBytes is how much weight the out-of-cache mat-vec cycles through: four times the
// build machine's 260 MiB last-level cache, so every matrix comes from DRAM.
const expertSetBytes = 1 << 30

func BenchmarkMatVec(b *testing.B) {
	for _, typ := range computeTypes(b) {
		for _, shape := range []struct {
			name       string
			cols, rows int
			set        int // bytes of distinct matrices to cycle through (0: one matrix)
		}{
			{"4096x4096", 4096, 4096, 0},
			{"experts_2048x768_1GiB", 2048, 768, expertSetBytes},
		} {
			rowBytes, _ := typ.RowBytes(int64(shape.cols))
			matBytes := shape.rows * int(rowBytes)
			var mats []*Matrix // made by the first sub-benchmark that runs, shared by the next
			for _, threads := range []int{1, 2} {
				b.Run(fmt.Sprintf("type=%s/shape=%s/threads=%d", typ, shape.name, threads), func(b *testing.B) {
					if mats == nil {
						count := max(1, shape.set/matBytes)
						data := tiledWeights(b, typ, shape.cols, shape.rows, count)
						for i := range count {
							m, err := NewMatrix(typ, []int64{int64(shape.cols), int64(shape.rows)}, data[i*matBytes:(i+1)*matBytes])
							if err != nil {
								b.Fatal(err)
							}
							mats = append(mats, m)
						}
					}
					benchMatMulCycling(b, mats, 1, threads)
					b.ReportMetric(2*float64(shape.rows*shape.cols)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			}
			mats = nil
		}
	}
}

// hotExpertTypes are the formats routed experts come in (the SIMD targets of issue 3).
var hotExpertTypes = []Type{Q4_K, Q6_K, Q8_0, Q4_0, Q5_K, IQ4_XS, MXFP4, F16, BF16}

// BenchmarkMulMatIDQwen3 is the expert FFN of one Qwen3-30B-A3B layer: 128 experts with
// gate and up [2048 → 768] and down [768 → 2048], 8 experts per token; decode (1 token) for
// the hot expert types, four tokens (a decode step of four server slots, where most experts
// get one token and a few two or more) and a prefill micro-batch of 512 for Q4_K, Q8_0,
// Q4_0 and MXFP4 (the scalar kernels take about a minute per batch); Q4_0 and MXFP4 with their packed kernels
// and without (repack=false). Gate and up go together, as a MoE layer runs them
// (MulMatIDs). MB/s counts the bytes of the experts the batch touches.
func BenchmarkMulMatIDQwen3(b *testing.B) {
	const embd, ff, experts, used = 2048, 768, 128, 8
	for _, typ := range hotExpertTypes {
		if tr, err := TraitsOf(typ); err != nil || tr.FromFloat == nil {
			continue
		}
		gate, err := NewMatrix(typ, []int64{embd, ff, experts}, tiledWeights(b, typ, embd, ff, experts))
		if err != nil {
			b.Fatal(err)
		}
		up, _ := NewMatrix(typ, []int64{embd, ff, experts}, tiledWeights(b, typ, embd, ff, experts))
		down, _ := NewMatrix(typ, []int64{ff, embd, experts}, tiledWeights(b, typ, ff, embd, experts))
		expertBytes, _ := typ.Bytes([]int64{embd, ff, 3})
		for _, tokens := range []int{1, 4, 512} {
			if tokens > 1 && typ != Q4_K && typ != Q8_0 && typ != Q4_0 && typ != MXFP4 {
				continue
			}
			// Routings drawn afresh for each iteration in turn, as a decode step's are:
			// one routing repeated keeps a token's eight experts (21 MB of Q4_K) in the
			// last-level cache, from which one thread read them at 27.8-30.5 GB/s against
			// the 18-19 GB/s these stream at from memory.
			rng := rand.New(rand.NewPCG(51, 52))
			routings := make([][]int32, 16)
			touched := 0
			for i := range routings {
				seen := map[int32]bool{}
				for range tokens {
					for _, e := range rng.Perm(experts)[:used] {
						routings[i] = append(routings[i], int32(e))
						seen[int32(e)] = true
					}
				}
				touched += len(seen)
			}
			x := randomFloats(rng, tokens*embd)
			g, u := make([]float32, tokens*used*ff), make([]float32, tokens*used*ff)
			out := make([]float32, tokens*used*embd)
			repacks := []bool{true}
			if PackedKernels(typ) {
				repacks = append(repacks, false)
			}
			for _, threads := range []int{1, 2} {
				for _, repack := range repacks {
					name := fmt.Sprintf("type=%s/tokens=%d/threads=%d", typ, tokens, threads)
					if !repack {
						name += "/repack=false"
					}
					b.Run(name, func(b *testing.B) {
						p := NewPool(threads)
						defer p.Close()
						p.SetRepack(repack)
						b.SetBytes(int64(touched) * expertBytes / int64(len(routings)))
						cpu := processCPU()
						i := 0
						for b.Loop() {
							ids := routings[i%len(routings)]
							i++
							if err := p.MulMatIDs([][]float32{g, u}, []*Matrix{gate, up}, x, ids, used); err != nil {
								b.Fatal(err)
							}
							SwiGLU(g, g, u, ff)
							if err := p.MulMatID(out, down, g, ids, used); err != nil {
								b.Fatal(err)
							}
						}
						reportCPU(b, cpu)
						flops := 2 * 3 * float64(embd*ff) * float64(tokens*used)
						b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
						b.ReportMetric(float64(tokens*b.N)/b.Elapsed().Seconds(), "tokens/s")
					})
				}
			}
		}
	}
}

// BenchmarkMatMulPrefill is a prefill micro-batch of 512 tokens through Qwen3-30B-A3B's
// attn_q ([2048 → 4096]), for the formats with repacked arithmetic, with it and without
// (repack=false): llama.cpp's gemm for Q4_K folds its sums every 64 values.
func BenchmarkMatMulPrefill(b *testing.B) {
	const cols, rows, tokens = 2048, 4096, 512
	for _, typ := range []Type{Q4_K, Q4_0} {
		if !PackedKernels(typ) {
			continue
		}
		m, err := NewMatrix(typ, []int64{cols, rows}, tiledWeights(b, typ, cols, rows, 1))
		if err != nil {
			b.Fatal(err)
		}
		x := randomFloats(rand.New(rand.NewPCG(7, 8)), tokens*cols)
		dst := make([]float32, tokens*rows)
		for _, threads := range []int{1, 2} {
			for _, repack := range []bool{true, false} {
				b.Run(fmt.Sprintf("type=%s/threads=%d/repack=%v", typ, threads, repack), func(b *testing.B) {
					p := NewPool(threads)
					defer p.Close()
					p.SetRepack(repack)
					for b.Loop() {
						if err := p.MatMul(dst, m, x); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(2*float64(rows*cols*tokens)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			}
		}
	}
}

// BenchmarkMatMulDecodeBatch is one decode step of several server slots through the dense
// matrices every token reads: Qwen3-30B-A3B's output head (Q6_K [2048 → 151936], 255 MB,
// out of every cache), its attn_q (Q4_K [2048 → 4096], cycled through 1 GiB of copies) and
// its router (F32 [2048 → 128], cycled through 64 MiB), for 1, 2 and 4 tokens on 2 threads. MB/s counts the weight bytes, so the batch's kernels
// can be set against one token's (the memory's pace, BenchmarkMemoryBandwidth).
func BenchmarkMatMulDecodeBatch(b *testing.B) {
	for _, shape := range []struct {
		name       string
		typ        Type
		cols, rows int
		set        int // bytes of distinct matrices to cycle through
	}{
		{"output_q6_K_2048x151936", Q6_K, 2048, 151936, 0},
		{"attn_q_q4_K_2048x4096_1GiB", Q4_K, 2048, 4096, expertSetBytes},
		{"ffn_gate_inp_f32_2048x128_64MiB", F32, 2048, 128, 64 << 20},
	} {
		rowBytes, _ := shape.typ.RowBytes(int64(shape.cols))
		matBytes := shape.rows * int(rowBytes)
		count := max(1, shape.set/matBytes)
		data := tiledWeights(b, shape.typ, shape.cols, shape.rows, count)
		mats := make([]*Matrix, count)
		for i := range mats {
			m, err := NewMatrix(shape.typ, []int64{int64(shape.cols), int64(shape.rows)}, data[i*matBytes:(i+1)*matBytes])
			if err != nil {
				b.Fatal(err)
			}
			mats[i] = m
		}
		for _, tokens := range []int{1, 2, 4} {
			b.Run(fmt.Sprintf("shape=%s/tokens=%d", shape.name, tokens), func(b *testing.B) {
				benchMatMulCycling(b, mats, tokens, 2)
			})
		}
	}
}

// benchMatMulCycling times MatMul of tokens random vectors by each of mats in turn on
// threads threads, with the bytes of one matrix per operation and the CPU time.
func benchMatMulCycling(b *testing.B, mats []*Matrix, tokens, threads int) {
	m := mats[0]
	x := randomFloats(rand.New(rand.NewPCG(uint64(tokens), 1)), tokens*m.cols)
	dst := make([]float32, tokens*m.rows)
	p := NewPool(threads)
	defer p.Close()
	b.SetBytes(int64(m.rows * m.rowBytes))
	i := 0
	cpu := processCPU()
	for b.Loop() {
		if err := p.MatMul(dst, mats[i], x); err != nil {
			b.Fatal(err)
		}
		i = (i + 1) % len(mats)
	}
	reportCPU(b, cpu)
}
