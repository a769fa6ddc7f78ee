package main

import (
	"strings"
	"testing"

	"github.com/alecthomas/kong"
	"github.com/google/go-cmp/cmp"
)

func TestRewriteLlamaArgs(t *testing.T) {
	for _, c := range []struct {
		in, want []string
	}{
		// multi-letter single-dash flags, '=' forms, underscores, long aliases, values with '-'
		{[]string{"place", "m.gguf", "-ngl", "99", "-ot", "exps=CPU", "-ngl=5", "--n_gpu_layers", "3", "--gpu-layers=-1", "-ngl", "-1"},
			[]string{"place", "m.gguf", "--n-gpu-layers=99", "--override-tensor=exps=CPU", "--n-gpu-layers=5", "--n-gpu-layers=3", "--n-gpu-layers=-1", "--n-gpu-layers=-1"}},
		{[]string{"place", "-cmoe", "-ncmoe", "2", "-nkvo", "-kvo", "-fa", "on", "-ctk", "q8_0", "-ub", "256", "-np", "2"},
			[]string{"place", "--cpu-moe", "--n-cpu-moe=2", "--no-kv-offload", "--kv-offload", "--flash-attn=on", "--cache-type-k=q8_0", "--ubatch-size=256", "--parallel=2"}},
		{[]string{"place", "-ts", "1,1", "-sm", "none", "-mg", "1", "-dev", "CUDA0", "-fitt", "2048", "-fitc", "8192", "-fit", "off", "--no-mmap", "-nr", "-no-ooae", "-ooae"},
			[]string{"place", "--tensor-split=1,1", "--split-mode=none", "--main-gpu=1", "--device=CUDA0", "--fit-target=2048", "--fit-ctx=8192", "--fit=off", "--no-mmap", "--no-repack",
				"--no-offload-only-active-experts", "--offload-only-active-experts"}},
		// place gets one-rune llama.cpp flags in long form, and the options it does not use packed
		{[]string{"place", "-m", "x.gguf", "-c", "4096", "-t", "8", "--port", "8080", "--jinja", "-ser", "7,1", "--host=0.0.0.0"},
			[]string{"place", "--model=x.gguf", "--ctx-size=4096", "--llama-ignored=-t 8", "--llama-ignored=--port 8080", "--llama-ignored=--jinja", "--llama-ignored=-ser 7,1", "--llama-ignored=--host=0.0.0.0"}},
		// a pasted program name
		{[]string{"place", "./build/bin/llama-server", "-m", "x.gguf"}, []string{"place", "--llama-ignored=./build/bin/llama-server", "--model=x.gguf"}},
		// other commands keep one-rune flags for kong; everything after -- is left alone
		{[]string{"inspect", "-m", "x", "-ngl", "2", "--", "-ngl", "3"}, []string{"inspect", "-m", "x", "--n-gpu-layers=2", "--", "-ngl", "3"}},
		// before the command, and flags llama.cpp does not have, pass through
		{[]string{"--version"}, []string{"--version"}},
		{[]string{"place", "--gpu", "8GiB", "--json", "-ngl"}, []string{"place", "--gpu", "8GiB", "--json", "--n-gpu-layers"}},
	} {
		if diff := cmp.Diff(c.want, rewriteLlamaArgs(c.in)); diff != "" {
			t.Errorf("%q: %s", c.in, diff)
		}
	}
}

// The option table: every option has a long spelling, no spelling is listed twice, and the
// options place reads exist under the keys it uses.
func TestLlamaOptionTable(t *testing.T) {
	seen := map[string]bool{}
	for _, o := range llamaServerOptions {
		if !strings.HasPrefix(canonical(o.names), "--") || o.values < 0 || o.values > 2 {
			t.Errorf("option %v", o.names)
		}
		for _, s := range append(append([]string{}, o.names...), o.negs...) {
			if seen[s] {
				t.Errorf("spelling %s listed twice", s)
			}
			seen[s] = true
		}
	}
	if len(llamaServerOptions) < 200 {
		t.Errorf("only %d llama-server options", len(llamaServerOptions))
	}
	var c placeCmd
	fields := c.fields()
	for key := range placeLlamaOptions {
		found := false
		for i := range llamaServerOptions {
			found = found || llamaServerOptions[i].key() == key
		}
		if _, ok := fields[key]; !found || !ok && key != "model" {
			t.Errorf("place reads option %q: in table %v, has a field %v", key, found, ok)
		}
	}
}

// The rewrite must not rename any command's own flags: every kong flag spelled like a
// llama.cpp option must be that option's canonical spelling.
func TestRewriteKeepsCommandFlags(t *testing.T) {
	var c cli
	parser, err := kong.New(&c)
	if err != nil {
		t.Fatal(err)
	}
	for _, node := range parser.Model.Children {
		for _, f := range node.Flags {
			for _, name := range append([]string{f.Name}, f.Aliases...) {
				if moerunSwitch(node.Name, []string{"--" + name}, 0) {
					continue // moerun's own switch, kept from the rewrite (place --predict)
				}
				if sp, ok := lookupLlamaFlag("--" + name); ok {
					want := canonical(sp.opt.names)
					if sp.negated {
						want = canonical(sp.opt.negs)
					}
					if want != "--"+name {
						t.Errorf("moerun %s --%s would be rewritten to %s", node.Name, name, want)
					}
				}
			}
		}
	}
}
