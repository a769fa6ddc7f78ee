package moe

import (
	"fmt"
	"os"
	"testing"
)

// benchModels are the files the benchmarks run: the tiny fixtures, and MOERUN_BENCH_MODEL
// if set (the medium benchmark model of docs/benchmarks.md, not in the repository).
func benchModels() []string {
	models := []string{qwenModel, deepseekModel}
	if p := os.Getenv("MOERUN_BENCH_MODEL"); p != "" {
		models = append(models, p)
	}
	return models
}

// BenchmarkPrompt evaluates a prompt of 64 tokens (llama-bench's pp64 for the tiny models;
// pp512 for a bench model), reporting tokens per second.
func BenchmarkPrompt(b *testing.B) {
	for _, path := range benchModels() {
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/t%d", baseName(path), threads), func(b *testing.B) {
				m := openModel(b, path, threads)
				n := 64
				if path != qwenModel && path != deepseekModel {
					n = 512
				}
				tokens := benchTokens(n, m.Config.Vocab)
				c := m.context(b, ContextOptions{Size: n, UBatch: 512, CacheK: DefaultContextOptions().CacheK, CacheV: DefaultContextOptions().CacheV, Attention: DefaultContextOptions().Attention})
				b.ResetTimer()
				for b.Loop() {
					c.Reset()
					if _, err := c.Eval(tokens, false); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
			})
		}
	}
}

// BenchmarkDecode generates tokens one at a time after a 16-token prompt (llama-bench's
// tg: each iteration is one single-token evaluation), reporting tokens per second.
func BenchmarkDecode(b *testing.B) {
	for _, path := range benchModels() {
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/t%d", baseName(path), threads), func(b *testing.B) {
				m := openModel(b, path, threads)
				c := m.context(b, DefaultContextOptions())
				prompt := benchTokens(16, m.Config.Vocab)
				next := []int32{1}
				b.ResetTimer()
				for b.Loop() {
					if c.Len() == 0 || c.Len()+1 > 256 {
						c.Reset()
						if _, err := c.Eval(prompt, false); err != nil {
							b.Fatal(err)
						}
					}
					if _, err := c.Eval(next, false); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
			})
		}
	}
}

// BenchmarkBatchDecode is BenchmarkDecode for 4 and for 2 sequences decoded together, one
// token each per batch (moerun serve -np 4 with four or two streams), reporting their
// tokens per second together. The sequences are fed different tokens, so that they are
// routed to different experts as different texts are (the same tokens would share their
// experts and flatter the batch).
func BenchmarkBatchDecode(b *testing.B) {
	for _, path := range benchModels() {
		for _, threads := range []int{1, 2} {
			for _, seqs := range []int{4, 2} {
				b.Run(fmt.Sprintf("%s/t%d/seqs=%d", baseName(path), threads, seqs), func(b *testing.B) {
					benchBatchDecode(b, path, threads, seqs)
				})
			}
		}
	}
}

// benchBatchDecode is one BenchmarkBatchDecode: seqs sequences of the model at path on
// threads threads.
func benchBatchDecode(b *testing.B, path string, threads, seqs int) {
	m := openModel(b, path, threads)
	batch := m.NewBatch()
	defer batch.Close()
	vocab := m.Config.Vocab
	step := make([]BatchSeq, seqs)
	next := make([]int32, seqs)
	for i := range step {
		step[i] = BatchSeq{Context: m.context(b, DefaultContextOptions()), Tokens: next[i : i+1], Logits: true}
	}
	b.ResetTimer()
	for b.Loop() {
		for i, s := range step {
			if c := s.Context; c.Len() == 0 || c.Len()+1 > 256 {
				c.Reset()
				if _, err := c.Eval(benchTokens(16+i, vocab)[i:], false); err != nil {
					b.Fatal(err)
				}
			}
			next[i] = int32((s.Context.Len()*7919 + i*104729 + 13) % vocab)
		}
		if err := batch.Eval(step); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(seqs*b.N)/b.Elapsed().Seconds(), "tokens/s")
}

func benchTokens(n, vocab int) []int32 {
	t := make([]int32, n)
	for i := range t {
		t[i] = int32((i*7919 + 13) % vocab)
	}
	return t
}

func baseName(path string) string {
	for i := len(path) - 1; i >= 0; i-- {
		if path[i] == '/' {
			return path[i+1:]
		}
	}
	return path
}
