// Command moerun runs Mixture-of-Experts models with tensor-level placement across GPU and
// CPU, speaking llama.cpp's flags.
package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime/debug"
	"strings"

	"github.com/alecthomas/kong"
	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/tensor"
)

// cli is the command line. Each command is a struct with a Run method in its own file.
type cli struct {
	Version kong.VersionFlag `help:"Print the version and exit."`

	Inspect  inspectCmd  `cmd:"" help:"Show a GGUF model's metadata, tensors, and totals by type and by tensor class."`
	Tokenize tokenizeCmd `cmd:"" help:"Tokenize text with a model's vocabulary, as llama-tokenize does."`
	Template templateCmd `cmd:"" help:"Render a model's chat template for a conversation."`
	Synth    synthCmd    `cmd:"" help:"Write a real model's GGUF layout (sparse, or with random weights) from a built-in preset."`
	Place    placeCmd    `cmd:"" help:"Show where llama.cpp would place every tensor, the KV cache and the compute buffers for these flags, and whether it fits."`
	Fit      fitCmd      `cmd:"" help:"Find the fastest placement that fits a machine, as llama.cpp and moerun flags (predicted speed, alternatives, plot)."`
	Calib    calibCmd    `cmd:"" name:"calibrate" help:"Measure this machine's RAM and decode bandwidth for predictions and save a hardware profile."`
	Run      runCmd      `cmd:"" help:"Generate text from a prompt with llama.cpp's placement and sampling flags, streaming it and reporting prompt and generation speed."`
	Serve    serveCmd    `cmd:"" help:"Serve an OpenAI-compatible HTTP API (chat and text completions with streaming, models, health, metrics, tokenize) with llama-server's flags."`
	Bench    benchCmd    `cmd:"" help:"Measure prompt (pp) and generation (tg) speed as llama-bench does: mean ± stddev over repetitions, lists of threads and batch sizes, markdown or JSON."`
}

// flagGroups are the headings that --help sorts flags under (a field's group:"key" tag).
var flagGroups = []kong.Group{
	{Key: "model", Title: "Model:"},
	{Key: "generation", Title: "Generation:"},
	{Key: "sampling", Title: "Sampling:"},
	{Key: "server", Title: "Server:"},
	{Key: "placement", Title: "Placement (llama.cpp's rules):"},
	{Key: "memory", Title: "Memory (context, KV cache, batches, loading):"},
	{Key: "devices", Title: "Devices (real ones, or a dry run's):"},
	{Key: "prediction", Title: "Machine and prediction:"},
	{Key: "search", Title: "Search:"},
	{Key: "bench", Title: "Benchmark:"},
	{Key: "weights", Title: "Weights:"},
	{Key: "shape", Title: "Model shape (overrides the preset's):"},
	{Key: "output", Title: "Output:"},
}

// Help is the detailed help of `moerun --help`: where to start, and an example that
// docs/docs_test.go runs.
func (*cli) Help() string {
	return "Start with docs/guide.md; every command has its own --help.\n" +
		"\n" +
		"Example (where llama.cpp puts DeepSeek-V3 on a 24 GB GPU, no model file needed):\n" +
		"\n" +
		"    moerun place --preset deepseek-v3:q4_k_m --gpu 24GiB --cpu-moe"
}

// Exit codes, as documented: 0 ok, 1 runtime failure, 2 bad usage or input.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// usageError marks errors caused by what the user gave us (flags, files), which exit 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func badInput(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// env carries the process's streams into commands, so tests can run them in-process.
type env struct {
	stdout, stderr io.Writer
}

func main() {
	avoidAsyncPreemption()
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	var c cli
	exitCode := -1
	parser, err := kong.New(&c,
		kong.Name("moerun"),
		kong.Description("moerun runs Mixture-of-Experts LLMs with llama.cpp-compatible tensor placement across GPU and CPU."),
		kong.UsageOnError(),
		kong.ConfigureHelp(kong.HelpOptions{Compact: true}),
		kong.ExplicitGroups(flagGroups),
		kong.Vars{"version": "moerun " + version() + ", CPU kernels " + tensor.KernelLevel()},
		kong.Writers(stdout, stderr),
		kong.Exit(func(code int) { exitCode = code }),
	)
	if err != nil {
		fmt.Fprintf(stderr, "moerun: internal error: %v\n", err)
		return exitFailure
	}
	ctx, err := parser.Parse(rewriteLlamaArgs(args))
	if exitCode >= 0 { // --help or --version
		return exitCode
	}
	if err := tensor.ISAError(); err != nil {
		fmt.Fprintf(stderr, "moerun: %v (unset it to use the best level this CPU has: %s)\n", err, tensor.KernelLevel())
		return exitUsage
	}
	if err != nil {
		fmt.Fprintf(stderr, "moerun: %v\n", err)
		if pe := (*kong.ParseError)(nil); errors.As(err, &pe) && pe.Context != nil {
			fmt.Fprintf(stderr, "run 'moerun %s --help' for usage\n", pe.Context.Command())
		}
		return exitUsage
	}
	if err := ctx.Run(&env{stdout: stdout, stderr: stderr}); err != nil {
		fmt.Fprintf(stderr, "moerun: %v\n", err)
		if pe := (*fs.PathError)(nil); errors.As(err, &pe) && errors.Is(err, fs.ErrNotExist) && strings.HasSuffix(pe.Path, ".gguf") {
			fmt.Fprintln(stderr, missingModelHint)
		}
		return exitCodeFor(err)
	}
	return exitOK
}

// missingModelHint follows "no such file" for a model: weights cannot be downloaded here,
// but a built-in preset plans without any file and synth writes a model to run.
const missingModelHint = `moerun: without the file, "moerun place --preset NAME" plans a model's real layout (moerun synth --list names them), and "moerun synth NAME --layers 4 --random -o small.gguf" writes a small model that run, bench and serve can use`

// exitCodeFor sorts failures: bad flags, missing or malformed files are the user's input (2);
// anything else is a runtime failure (1).
func exitCodeFor(err error) int {
	var ue usageError
	var fe *gguf.FormatError
	switch {
	case errors.As(err, &ue), errors.As(err, &fe) && fe.Err == nil,
		errors.Is(err, fs.ErrNotExist), errors.Is(err, fs.ErrPermission):
		return exitUsage
	}
	return exitFailure
}

func version() string {
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
		return info.Main.Version
	}
	return "devel"
}
