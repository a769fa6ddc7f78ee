package main

import (
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/alecthomas/kong"
)

// pastedArgs splits a fuzzed command line as a shell would hand it over: at line breaks
// when it has them (so that arguments may hold spaces or be empty), else at spaces.
func pastedArgs(line string) []string {
	if strings.Contains(line, "\n") {
		return strings.Split(line, "\n")
	}
	return strings.Fields(line)
}

// llamaArgsSeeds are command lines from the tests and the docs.
var llamaArgsSeeds = []string{
	"place m.gguf -ngl 99 -ot exps=CPU -ngl=5 --n_gpu_layers 3 --gpu-layers=-1 -ngl -1",
	"place -cmoe -ncmoe 2 -nkvo -kvo -fa on -ctk q8_0 -ub 256 -np 2",
	"place -ts 1,1 -sm none -mg 1 -dev CUDA0 -fitt 2048 -fitc 8192 -fit off --no-mmap -nr",
	"place -m x.gguf -c 4096 -t 8 --port 8080 --jinja -ser 7,1 --host=0.0.0.0",
	"place ./build/bin/llama-server -m x.gguf",
	"inspect -m x -ngl 2 -- -ngl 3",
	"--version",
	"place --gpu 8GiB --json -ngl",
	"place llama-server -m qwen3-30b-a3b.gguf -c 32768 -ngl 999 --n-cpu-moe 37 -ctk q8_0 -ctv q8_0 -fa on --gpu 24GiB --ram 64GiB",
	`place llama-server -m qwen3-235b-a22b.gguf -c 32768 -ngl 999 -ot blk\.(1[2-9]|[2-3][0-9]|4[0-7])\.ffn_(up|down|gate)_exps=CPU -ts 48,47 -fa on --gpus 24GiB,24GiB`,
	"place llama-server --preset qwen3-30b-a3b --gpu 24GiB --port 8080 --jinja -t 8 --predict",
	"place --preset qwen3-30b-a3b --predict 128 --device-mem CUDA0=8GiB,CUDA1=12GiB -lm mmap -dio -fa",
	"run -m tiny.gguf -p Hello -n 8 --temp 0 -ser 6,0.5 --no-escape -e -sp",
	"run\n-m\nm.gguf\n-p\nHello, world\n-ot\n\n-fa\n-1",
	"bench -m m.gguf -nkvo 0,1 -mmp 0 -ngl 10,20 -fa 0,1",
	"place --sim-gpu 0.5B,8G --fit-target 1024,2048 -kvu -no-kvu --swa-full --mlock -sm row",
}

// FuzzRewriteLlamaArgs: rewriteLlamaArgs turns a pasted llama.cpp command line into kong's
// spellings. It never panics, never adds arguments, copies everything from a "--" on,
// keeps every value it was given (each non-flag argument appears in some output
// argument), and rewriting again changes nothing.
func FuzzRewriteLlamaArgs(f *testing.F) {
	for _, s := range llamaArgsSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		args := pastedArgs(line)
		out := rewriteLlamaArgs(args)
		if len(out) > len(args) {
			t.Fatalf("%q → %q: more arguments", args, out)
		}
		// From a "--" on, the arguments are copied. (A "--" right after an option that
		// takes a value is that value, as in llama.cpp: -ngl -- gives --n-gpu-layers=--.)
		if j := slices.Index(out, "--"); j >= 0 && (len(out)-j > len(args) || !slices.Equal(out[j:], args[len(args)-(len(out)-j):])) {
			t.Fatalf("%q → %q: the arguments after -- changed", args, out)
		}
		joined := strings.Join(out, "\x00")
		for _, a := range args {
			if !strings.HasPrefix(a, "-") && !strings.Contains(joined, a) {
				t.Fatalf("%q → %q: %q is lost", args, out, a)
			}
		}
		if again := rewriteLlamaArgs(out); !slices.Equal(again, out) {
			t.Fatalf("%q → %q → %q: not stable", args, out, again)
		}
	})
}

// FuzzPastedCommandLine parses a pasted command line as moerun does (rewriteLlamaArgs,
// then kong) and, for place and run, reads the placement flags into rules and devices and
// run's -ser: what llama.cpp would do with the flags, without a model. Nothing panics, and
// every failure has a message.
func FuzzPastedCommandLine(f *testing.F) {
	for _, s := range llamaArgsSeeds {
		f.Add(s)
	}
	noEnv := func(string) (string, bool) { return "", false }
	// One parser for all inputs: kong.New takes milliseconds, a parse well under one. Parse
	// resets every flag to its default; zeroing c clears what the hooks append to (a
	// crasher, re-run alone, gets a fresh parser).
	var c cli
	parser, err := kong.New(&c, kong.Name("moerun"), kong.ExplicitGroups(flagGroups),
		kong.Vars{"version": "moerun fuzz"}, kong.Writers(io.Discard, io.Discard), kong.Exit(func(int) {}))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, line string) {
		c = cli{}
		ctx, err := parser.Parse(rewriteLlamaArgs(pastedArgs(line)))
		if err != nil {
			if err.Error() == "" {
				t.Fatal("parse failed with an empty error")
			}
			return
		}
		var flags *placementFlags
		switch cmd := ctx.Command(); {
		case strings.HasPrefix(cmd, "place"):
			flags = &c.Place.placementFlags
		case strings.HasPrefix(cmd, "run"):
			flags = &c.Run.placementFlags
			if _, err := parseSER(c.Run.SER); err != nil && err.Error() == "" {
				t.Fatal("-ser failed with an empty error")
			}
		default:
			return
		}
		if _, err := flags.rules(noEnv); err != nil && err.Error() == "" {
			t.Fatal("rules failed with an empty error")
		}
		devs, err := flags.devices()
		if err != nil {
			if err.Error() == "" {
				t.Fatal("devices failed with an empty error")
			}
			return
		}
		for _, d := range devs {
			if d.TotalBytes < 0 || d.FreeBytes < 0 {
				t.Fatalf("device %s with %d bytes (%d free)", d.Name, d.TotalBytes, d.FreeBytes)
			}
		}
	})
}
