package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/moe"
	"github.com/moerun/moerun/placement"
	"github.com/moerun/moerun/tokenizer"
)

// What run, serve and bench share: the sampling flags, opening a model moerun can run, and
// loading it onto this machine's CPU.

// samplingFlags are llama.cpp's sampling flags, shared by run (its one generation) and
// serve (the defaults of requests that do not say).
type samplingFlags struct {
	Seed             int64   `short:"s" name:"seed" default:"-1" help:"-s: sampling seed; -1 for a random one." group:"sampling"`
	Temperature      float32 `name:"temperature" default:"0.8" help:"--temp: sampling temperature; 0 or less is greedy." group:"sampling"`
	TopK             int     `name:"top-k" default:"40" env:"LLAMA_ARG_TOP_K" help:"Keep the k most likely tokens (0: all)." group:"sampling"`
	TopP             float32 `name:"top-p" default:"0.95" help:"Keep the most likely tokens up to this probability mass (1: off)." group:"sampling"`
	MinP             float32 `name:"min-p" default:"0.05" help:"Drop tokens less likely than this fraction of the best (0: off)." group:"sampling"`
	RepeatPenalty    float32 `name:"repeat-penalty" default:"1" help:"Penalize repeated tokens (1: off)." group:"sampling"`
	RepeatLastN      int     `name:"repeat-last-n" default:"64" help:"How many recent tokens the penalties consider (-1: the context)." group:"sampling"`
	PresencePenalty  float32 `name:"presence-penalty" default:"0" help:"Presence penalty (0: off)." group:"sampling"`
	FrequencyPenalty float32 `name:"frequency-penalty" default:"0" help:"Frequency penalty (0: off)." group:"sampling"`
}

// params reads the flags with llama.cpp's meanings: seed -1 (stored as LLAMA_DEFAULT_SEED,
// 0xFFFFFFFF) draws a random seed.
func (s samplingFlags) params() (moe.SamplerParams, error) {
	p := moe.DefaultSampler()
	p.Temperature, p.TopK, p.TopP, p.MinP = s.Temperature, s.TopK, s.TopP, s.MinP
	p.RepeatPenalty, p.PenaltyLastN = s.RepeatPenalty, s.RepeatLastN
	p.PresencePenalty, p.FrequencyPenalty = s.PresencePenalty, s.FrequencyPenalty
	switch {
	case s.Seed == -1:
		p.Seed = moe.RandomSeed
	case s.Seed < 0 || s.Seed >= moe.RandomSeed:
		return p, badInput("-s %d: the seed is -1 (random) or 0..%d", s.Seed, uint32(moe.RandomSeed-1))
	default:
		p.Seed = uint32(s.Seed)
	}
	if err := p.Validate(); err != nil {
		return p, badInput("%v", err)
	}
	return p, nil
}

// openRunnable opens a model of an architecture moerun runs and loads its vocabulary; the
// caller closes the file.
func openRunnable(path string) (*gguf.File, *tokenizer.Vocab, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, nil, err
	}
	if err := moe.CheckArchitecture(f.Metadata.Arch()); err != nil {
		f.Close()
		return nil, nil, badInput("%s: %v", path, err)
	}
	vocab, err := tokenizer.Load(f.Metadata)
	if err != nil {
		f.Close()
		return nil, nil, badInput("%s: %v", path, err)
	}
	return f, vocab, nil
}

// reportCache prints the memory the runtime's KV caches take on each device beside what
// place's report gives for it, so that a user (and a test) sees them agree: what names the
// caches ("KV cache", "KV cache of 4 slots").
func reportCache(w io.Writer, what string, bytes map[string]int64, plan *placement.Plan) {
	var parts []string
	for _, d := range plan.Devices {
		got, ok := bytes[d.Device.Name]
		if !ok && d.KV == 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.2f MiB (place: %.2f MiB)", d.Device.Name, float64(got)/(1<<20), float64(d.KV)/(1<<20)))
	}
	fmt.Fprintf(w, "moerun: %s: %s\n", what, strings.Join(parts, ", "))
}
