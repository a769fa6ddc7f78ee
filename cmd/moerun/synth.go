package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/gguf/synth"
)

type synthCmd struct {
	Spec   string `arg:"" optional:"" help:"Model to build: PRESET[:MIX], e.g. deepseek-v3:q4_k_m (see --list). The mix defaults to q4_k_m (mxfp4 for gpt-oss)." placeholder:"PRESET[:MIX]"`
	Output string `short:"o" help:"File to write." placeholder:"FILE" group:"output"`
	List   bool   `help:"List the presets with their parameter counts and file size per mix." group:"output"`
	JSON   bool   `name:"json" help:"With --list: write JSON instead of a table." group:"output"`

	Sparse bool   `help:"Write the header and extend the file to its full size without writing data (the default): free on disk, the weights read as zeros." xor:"mode" group:"weights"`
	Random bool   `help:"Write random weights at a sane scale, quantized with moerun's quantizers (llama-quantize's bytes); large tensors pick their blocks from pools of 65,536 quantized blocks (see docs/guide.md)." xor:"mode" group:"weights"`
	Seed   uint64 `help:"Seed of --random; the same seed gives the same bytes." default:"1" group:"weights"`
	Load   string `name:"expert-load" default:"uniform" placeholder:"uniform|gamma:SHAPE" help:"With --random: how unevenly the routers spread tokens over the experts. gamma:SHAPE draws each layer's expert loads from a gamma distribution (smaller is more uneven): gamma:0.7 and gamma:0.5 match a public measurement of Qwen3-30B-A3B on diverse and on Python text (see docs/guide.md). Default: uniform, as random weights route." group:"weights"`

	Vocab   string `help:"Copy the tokenizer (the tokenizer.* keys) from this GGUF, e.g. testdata/vocab/ggml-vocab-qwen3.gguf. Default: a small built-in byte-level BPE vocabulary." placeholder:"FILE.gguf" group:"weights"`
	Imatrix bool   `help:"Choose tensor types as llama-quantize does with an importance matrix (changes ffn_down in q4_0 and iq4_xs)." group:"weights"`

	Layers           int  `help:"Keep the first N blocks (multi-token-prediction blocks stay after them)." placeholder:"N" group:"shape"`
	NoMTP            bool `name:"no-mtp" help:"Leave out multi-token-prediction blocks, like the converter's --no-mtp." group:"shape"`
	LegacySSMIn      bool `name:"legacy-ssm-in" help:"Write qwen3next's linear-attention input as one ssm_in matrix, as converters did before llama.cpp split it." group:"shape"`
	NEmbd            int  `name:"n-embd" help:"Embedding length (hidden size)." placeholder:"N" group:"shape"`
	NFF              int  `name:"n-ff" help:"Dense feed-forward length." placeholder:"N" group:"shape"`
	Experts          int  `help:"Routed experts per MoE layer." placeholder:"N" group:"shape"`
	ExpertsUsed      int  `help:"Experts used per token." placeholder:"N" group:"shape"`
	ExpertFF         int  `name:"expert-ff" help:"Feed-forward length of one expert." placeholder:"N" group:"shape"`
	SharedFF         int  `name:"shared-ff" help:"Feed-forward length of the shared expert (qwen2moe, qwen35moe, qwen3next)." placeholder:"N" group:"shape"`
	LeadingDense     int  `help:"Leading blocks with a dense FFN (deepseek2, glm4moe)." placeholder:"N" group:"shape"`
	ExpertGroups     int  `help:"Expert groups (deepseek2)." placeholder:"N" group:"shape"`
	ExpertGroupsUsed int  `help:"Expert groups used per token." placeholder:"N" group:"shape"`
	Heads            int  `help:"Attention heads." placeholder:"N" group:"shape"`
	HeadsKV          int  `name:"heads-kv" help:"Key/value heads." placeholder:"N" group:"shape"`
	HeadDim          int  `help:"Head dimension (MLA: qk_nope + qk_rope)." placeholder:"N" group:"shape"`
	VHeadDim         int  `name:"v-head-dim" help:"MLA value head dimension." placeholder:"N" group:"shape"`
	RopeDim          int  `help:"Rotary dimensions (where the model has partial rotary or MLA)." placeholder:"N" group:"shape"`
	QLoraRank        int  `name:"q-lora-rank" help:"MLA query LoRA rank." placeholder:"N" group:"shape"`
	KVLoraRank       int  `name:"kv-lora-rank" help:"MLA key/value LoRA rank." placeholder:"N" group:"shape"`
	SSMState         int  `name:"ssm-state" help:"Linear-attention head dimension (qwen35moe, qwen3next)." placeholder:"N" group:"shape"`
	SSMGroups        int  `name:"ssm-groups" help:"Linear-attention key heads (qwen35moe, qwen3next)." placeholder:"N" group:"shape"`
	SSMHeads         int  `name:"ssm-heads" help:"Linear-attention value heads (qwen35moe, qwen3next)." placeholder:"N" group:"shape"`
	IndexerHeads     int  `help:"Lightning indexer heads (deepseek32, glm-dsa)." placeholder:"N" group:"shape"`
	IndexerHeadDim   int  `name:"indexer-head-dim" help:"Lightning indexer head dimension, a power of two from 64." placeholder:"N" group:"shape"`
	IndexerTopK      int  `name:"indexer-top-k" help:"Positions the lightning indexer keeps per query (index_topk)." placeholder:"N" group:"shape"`
	VocabSize        int  `help:"Vocabulary size (rows of token_embd and output)." placeholder:"N" group:"shape"`
	Context          int  `help:"Training context length." placeholder:"N" group:"shape"`
}

// Help is the command's detailed help: what to know first, and an example that docs/docs_test.go runs.
func (*synthCmd) Help() string {
	return "Example (DeepSeek-V3's 404 GB layout in about 3 MB of disk, readable by llama.cpp):\n" +
		"\n" +
		"    moerun synth deepseek-v3:q4_k_m -o deepseek-v3.gguf"
}

func (c *synthCmd) Run(e *env) error {
	if c.List {
		return writePresetList(e.stdout, c.JSON)
	}
	if c.Spec == "" {
		return badInput("give a model as PRESET[:MIX] (see moerun synth --list)")
	}
	if c.Output == "" {
		return badInput("give the file to write with -o FILE")
	}
	opts := synth.Options{
		Layers: c.Layers, Embd: c.NEmbd, FF: c.NFF, Experts: c.Experts, ExpertsUsed: c.ExpertsUsed,
		ExpertFF: c.ExpertFF, SharedFF: c.SharedFF, ExpertGroups: c.ExpertGroups, ExpertGroupsUsed: c.ExpertGroupsUsed,
		Heads: c.Heads, HeadsKV: c.HeadsKV, HeadDim: c.HeadDim, VHeadDim: c.VHeadDim, RopeDim: c.RopeDim,
		QLoraRank: c.QLoraRank, KVLoraRank: c.KVLoraRank, SSMState: c.SSMState, SSMGroups: c.SSMGroups,
		SSMHeads: c.SSMHeads, IndexerHeads: c.IndexerHeads, IndexerHeadDim: c.IndexerHeadDim, IndexerTopK: c.IndexerTopK, Vocab: c.VocabSize, Context: c.Context, LeadingDense: c.LeadingDense, NoMTP: c.NoMTP, LegacySSMIn: c.LegacySSMIn, Imatrix: c.Imatrix,
	}
	if c.Vocab != "" {
		tok, err := readTokenizer(c.Vocab)
		if err != nil {
			return err
		}
		opts.Tokenizer = tok
	}
	m, err := synth.Build(c.Spec, opts)
	if err != nil {
		return badInput("%v", err)
	}
	load, err := synth.ParseExpertLoad(c.Load)
	if err != nil {
		return badInput("--expert-load: %v", err)
	}
	if load.Shape > 0 && !c.Random {
		return badInput("--expert-load %s: only random weights have a load; add --random", load)
	}
	if err := m.CheckExpertLoad(load); err != nil {
		return badInput("--expert-load: %v", err)
	}
	start := time.Now()
	var layout *gguf.Layout
	mode := "sparse"
	if c.Random {
		mode = fmt.Sprintf("random, seed %d", c.Seed)
		if err := m.CheckRandom(); err != nil {
			return badInput("%v", err)
		}
		if load.Shape > 0 {
			mode += ", expert load " + load.String()
		}
		layout, err = writeRandom(c.Output, m, synth.RandomOptions{Seed: c.Seed, ExpertLoad: load}, e.stderr)
	} else {
		layout, err = m.WriteSparse(c.Output)
	}
	if err != nil {
		return err
	}
	total, active := m.Params()
	fmt.Fprintf(e.stdout, "wrote %s: %s:%s (%s), %d tensors, %s parameters (%s active), %s (%d bytes) in %s\n",
		c.Output, m.Preset.Name, m.Mix.Name, mode, len(m.Tensors), humanCount(total), humanCount(active),
		humanBytes(layout.FileSize), layout.FileSize, time.Since(start).Round(time.Millisecond))
	return nil
}

func readTokenizer(path string) (*synth.Tokenizer, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tok, err := synth.TokenizerFrom(f.Metadata)
	if err != nil {
		return nil, badInput("--vocab %s: %v", path, err)
	}
	return tok, nil
}

// writeRandom streams random weights to path, reporting progress on stderr every few
// seconds; a failed write leaves no partial file behind.
func writeRandom(path string, m *synth.Model, opts synth.RandomOptions, stderr io.Writer) (layout *gguf.Layout, err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(path)
		}
	}()
	last, lastDone := time.Now(), int64(0)
	opts.Progress = func(done, total int64) {
		if since := time.Since(last); since >= 2*time.Second && done > lastDone {
			fmt.Fprintf(stderr, "synth: %s\n", progressLine(done, total, float64(done-lastDone)/since.Seconds()))
			last, lastDone = time.Now(), done
		}
	}
	err = m.WriteRandom(f, opts)
	if err != nil {
		return nil, err
	}
	return m.Layout()
}

// progressLine says how much of a file is written, at what rate (bytes per second since
// the last line: the pools made before the first byte and the load of a shared machine
// make the average since the start a poor guide), and how long the rest takes at that
// rate.
func progressLine(done, total int64, rate float64) string {
	left := time.Duration(float64(total-done) / rate * float64(time.Second)).Round(time.Second)
	return fmt.Sprintf("%s of %s written (%.0f%%), %s/s, %s left", humanBytes(done), humanBytes(total), 100*float64(done)/float64(total),
		humanBytes(int64(rate)), left)
}

// presetListing is one preset in --list --json.
type presetListing struct {
	Name         string           `json:"name"`
	Aliases      []string         `json:"aliases,omitempty"`
	Title        string           `json:"title"`
	Architecture string           `json:"architecture"`
	Layers       int              `json:"layers"`
	Params       int64            `json:"params"`
	ActiveParams int64            `json:"active_params"`
	DefaultMix   string           `json:"default_mix"`
	FileBytes    map[string]int64 `json:"file_bytes"` // by mix
	Source       string           `json:"source"`
}

func listPresets() ([]presetListing, error) {
	var out []presetListing
	for _, p := range synth.Presets() {
		l := presetListing{Name: p.Name, Aliases: p.Aliases, Title: p.Title, Architecture: p.Arch, Layers: p.Layers,
			DefaultMix: p.DefaultMix(), FileBytes: map[string]int64{}, Source: p.Source}
		m, err := synth.BuildPreset(p, synth.Mixes()[0], synth.Options{})
		if err != nil {
			return nil, err
		}
		l.Params, l.ActiveParams = m.Params()
		sizes, err := synth.MixSizes(p, synth.Options{})
		if err != nil {
			return nil, err
		}
		for i, mix := range synth.Mixes() {
			l.FileBytes[mix.Name] = sizes[i]
		}
		out = append(out, l)
	}
	return out, nil
}

func writePresetList(w io.Writer, asJSON bool) error {
	list, err := listPresets()
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(list)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := []string{"PRESET", "ARCH", "LAYERS", "PARAMS", "ACTIVE"}
	for _, mix := range synth.Mixes() {
		head = append(head, strings.ToUpper(mix.Name))
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, l := range list {
		row := []string{l.Name, l.Architecture, fmt.Sprint(l.Layers), humanCount(l.Params), humanCount(l.ActiveParams)}
		for _, mix := range synth.Mixes() {
			row = append(row, fmt.Sprintf("%.2f", float64(l.FileBytes[mix.Name])/1e9))
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, "\nFile sizes in GB (10^9 bytes, as Hugging Face lists files). Build one with: moerun synth PRESET[:MIX] -o FILE [--sparse | --random]")
	return err
}
