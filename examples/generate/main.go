// Command generate runs a model from Go with moerun's packages: it opens a GGUF file, places
// it on this machine's CPU with llama.cpp's rules, loads it, tokenizes a prompt and streams
// the generated text token by token. The default model is the tiny random-weight test model
// in testdata/ (so the text is nonsense); give another with -m.
//
//	go run ./examples/generate -m testdata/models/tiny-qwen3moe.gguf -p Hello -n 8
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"os"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/backend/cpu"
	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/moe"
	"github.com/moerun/moerun/placement"
	"github.com/moerun/moerun/tensor"
	"github.com/moerun/moerun/tokenizer"
)

func main() {
	model := flag.String("m", "testdata/models/tiny-qwen3moe.gguf", "GGUF model")
	prompt := flag.String("p", "Hello", "prompt")
	n := flag.Int("n", 8, "tokens to generate")
	flag.Parse()
	if err := generate(os.Stdout, *model, *prompt, *n); err != nil {
		log.Fatal(err)
	}
}

// generate streams n greedily chosen tokens after prompt to w, each as its id and the text
// it completes (a token may end in the middle of a UTF-8 character, which the stream
// decoder holds back until it is whole).
func generate(w io.Writer, path, prompt string, n int) error {
	f, err := gguf.Open(path) // maps the file: weights are used in place
	if err != nil {
		return err
	}
	defer f.Close()
	vocab, err := tokenizer.Load(f.Metadata)
	if err != nil {
		return err
	}

	pool := tensor.NewPool(tensor.DefaultThreads())
	defer pool.Close()
	host := cpu.New(cpu.Options{Pool: pool})
	rules := placement.DefaultRules()
	rules.Parallel = 1 // one sequence
	rules.CtxSize = 512
	plan, err := placement.Place(placement.Model{Name: path, Metadata: f.Metadata, Tensors: f.Tensors},
		rules, []backend.Device{host.Device()})
	if err != nil {
		return err
	}
	model, err := moe.Load(f, plan, []backend.Backend{host})
	if err != nil {
		return err
	}
	opts := moe.DefaultContextOptions()
	opts.Size, opts.UBatch = rules.CtxSize, plan.Context.NUBatch
	ctx, err := model.NewContext(opts)
	if err != nil {
		return err
	}

	ids := vocab.Encode(prompt, true, true) // add BOS if the model asks, parse special tokens
	stream := vocab.NewStreamDecoder(false)
	_, err = ctx.Generate(ids, moe.GenerateOptions{
		MaxTokens: n,
		Sampler:   nil, // greedy; moe.NewSampler gives llama.cpp's sampler chain
		IsEOG:     vocab.IsEOG,
		Token: func(id int32, _ []float32) error {
			_, err := fmt.Fprintf(w, "%d %q\n", id, stream.Add(id))
			return err
		},
	})
	return err
}
