package main

import (
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fitDoc is the part of moerun.fit/v1 these tests read.
type fitDoc struct {
	Schema string `json:"schema"`
	Best   *struct {
		TG         float64  `json:"tg_tps"`
		PP         *float64 `json:"pp_tps"`
		CPUExperts int      `json:"cpu_expert_layers"`
		Flags      []string `json:"flags"`
		Llama      string   `json:"llama_command"`
		Moerun     string   `json:"moerun_command"`
	} `json:"best"`
	RunnerUps []struct {
		TG float64 `json:"tg_tps"`
	} `json:"runner_ups"`
	Sweep []struct {
		N    int      `json:"cpu_expert_layers"`
		Fits bool     `json:"fits"`
		TG   *float64 `json:"tg_tps"`
	} `json:"sweep"`
	Failure string `json:"failure"`
	Search  struct {
		Placements int `json:"placements"`
	} `json:"search"`
}

// isolate keeps the tests away from the user's real profile.
func isolate(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", dir)
	return dir
}

func fitJSON(t *testing.T, args ...string) fitDoc {
	t.Helper()
	return runJSON[fitDoc](t, append([]string{"fit"}, args...)...)
}

// shellWords splits a command line the way a POSIX shell splits fit's output and the
// pasted lines: on spaces, with single- or double-quoted words kept whole.
func shellWords(t *testing.T, s string) []string {
	t.Helper()
	var words []string
	var cur strings.Builder
	inWord, quoted := false, rune(0)
	for _, r := range s {
		switch {
		case (r == '\'' || r == '"') && (quoted == 0 || quoted == r):
			if quoted == 0 {
				quoted = r
			} else {
				quoted = 0
			}
			inWord = true
		case r == ' ' && quoted == 0:
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
			}
			inWord = false
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quoted != 0 {
		t.Fatalf("unbalanced quote in %s", s)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// predictedTG runs a moerun place command line (as fit prints it) with --json and returns
// its predicted tg.
func predictedTG(t *testing.T, args []string) float64 {
	t.Helper()
	p := runJSON[predictDoc](t, args...).Prediction
	if p == nil || !p.Fits || p.TG == nil {
		t.Fatalf("%q: the placement fit printed does not fit: %+v", args, p)
	}
	return *p.TG
}

// The flags fit prints are the placement it predicted: pasted into moerun place, in moerun's
// spelling and in llama-server's, they give the same prediction.
func TestFitCommandsRoundTrip(t *testing.T) {
	isolate(t)
	doc := fitJSON(t, "--preset", "qwen3-30b-a3b:q4_k_m", "-c", "4096", "--gpu-model", "rtx3060-12g", "--cpu-bw-eff", "38",
		"--ram", "64GiB", "-np", "1", "--ubatches", "512,2048")
	if doc.Schema != "moerun.fit/v1" || doc.Best == nil || doc.Search.Placements == 0 {
		t.Fatalf("%+v", doc)
	}
	b := doc.Best
	if b.CPUExperts <= 0 || b.CPUExperts >= 48 || !strings.Contains(b.Llama, "--n-cpu-moe") || !strings.Contains(b.Llama, "--parallel 1") {
		t.Errorf("best: %+v", b)
	}
	words := shellWords(t, b.Moerun)
	if words[0] != "moerun" {
		t.Fatalf("moerun command %q", b.Moerun)
	}
	if got := predictedTG(t, words[1:]); got != b.TG {
		t.Errorf("moerun command predicts %.4f t/s, fit said %.4f", got, b.TG)
	}
	// llama-server's spelling, pasted after moerun place with the same machine.
	llama := shellWords(t, b.Llama)
	args := append([]string{"place"}, llama...)
	args = append(args, "--preset", "qwen3-30b-a3b:q4_k_m", "--gpu-model", "rtx3060-12g", "--cpu-bw-eff", "38", "--ram", "64GiB", "--predict")
	args = slicesDelete(args, "-m", 2) // the placeholder file name of a preset
	if got := predictedTG(t, args); got != b.TG {
		t.Errorf("llama.cpp command predicts %.4f t/s, fit said %.4f", got, b.TG)
	}
	if len(doc.Sweep) != 49 || doc.Sweep[b.CPUExperts].TG == nil || *doc.Sweep[b.CPUExperts].TG != b.TG || doc.Sweep[0].Fits {
		t.Errorf("sweep: %d points, at the best %v", len(doc.Sweep), doc.Sweep[b.CPUExperts])
	}
}

// slicesDelete removes the first occurrence of word and the n-1 words after it.
func slicesDelete(args []string, word string, n int) []string {
	for i, a := range args {
		if a == word {
			return append(args[:i:i], args[i+n:]...)
		}
	}
	return args
}

// Text and the SVG plot.
func TestFitTextAndSVG(t *testing.T) {
	isolate(t)
	svg := filepath.Join(t.TempDir(), "fit.svg")
	code, out, errOut := moerun(t, "fit", "--preset", "gpt-oss-20b", "--gpu-model", "rtx4060", "--ram-channels", "2", "--ram-speed", "5600",
		"--cpu-threads", "8", "--svg", svg, "--kv-types", "f16", "--ubatches", "512")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"BEST", "llama-server -m gpt-oss-20b.gguf", "moerun place --preset gpt-oss-20b", "EXPERT LAYERS IN RAM", "← best",
		"uncalibrated: 0.55 × theoretical 89.6 GB/s", "context: -c not given, so 4096 tokens"} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q:\n%s", want, out)
		}
	}
	data, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(strings.NewReader(string(data)))
	polylines := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "polyline" {
			polylines++
		}
	}
	if polylines != 2 || !strings.HasSuffix(strings.TrimSpace(string(data)), "</svg>") {
		t.Errorf("SVG with %d polylines:\n%s", polylines, data)
	}
}

// A machine too small: the report says why and the command fails (exit 1) for scripts.
func TestFitNothingFits(t *testing.T) {
	isolate(t)
	code, out, errOut := moerun(t, "fit", "--preset", "deepseek-v3:q4_k_m", "--gpu-model", "rtx4090", "--cpu-bw-eff", "40", "--ram", "64GiB", "-c", "4096")
	if code != 1 || !strings.Contains(out, "NOTHING FITS") || !strings.Contains(errOut, "nothing fits: CPU needs") {
		t.Errorf("exit %d\n%s\n%s", code, out, errOut)
	}
}

// Mistakes are usage errors (exit 2) that say what to do.
func TestFitBadInput(t *testing.T) {
	isolate(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--preset", "qwen3-30b-a3b", "--gpu", "8GiB"}, "moerun calibrate"},
		{[]string{"--preset", "qwen3-30b-a3b", "--gpu", "8GiB", "--ram-bw", "50"}, "--gpu-model"},
		{[]string{"--preset", "qwen3-30b-a3b", "--gpu-model", "rtx9999", "--ram-bw", "50"}, "unknown GPU model"},
		{[]string{"--preset", "qwen3-30b-a3b", "--gpu-model", "rtx4090", "--ram-bw", "50", "--request", "5"}, "--request"},
		{[]string{"--preset", "qwen3-30b-a3b", "--gpu-model", "rtx4090", "--ram-channels", "2"}, "go together"},
		{[]string{"--preset", "qwen3-30b-a3b", "--gpu-model", "rtx4090", "--ram-bw", "50", "-ctk", "q8_0", "-ctv", "f16"}, "alike"},
		{[]string{"--preset", "qwen3-30b-a3b", "--gpu-model", "rtx4090", "--ram-bw", "50", "--profile", "/nonexistent/p.json"}, "--profile"},
	} {
		code, _, errOut := moerun(t, append([]string{"fit"}, c.args...)...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%q: exit %d, %q; want 2 and %q", c.args, code, errOut, c.want)
		}
	}
}

func TestGPUModelList(t *testing.T) {
	for _, cmd := range []string{"fit", "place", "calibrate"} {
		code, out, errOut := moerun(t, cmd, "--gpu-model", "list")
		if code != 0 || !strings.Contains(out, "rtx3060-12g") || !strings.Contains(out, "1008 GB/s") {
			t.Errorf("%s --gpu-model list: exit %d %s\n%s", cmd, code, errOut, out)
		}
	}
}

// --runner-ups 0 asks for the best placement alone.
func TestFitNoRunnerUps(t *testing.T) {
	isolate(t)
	doc := fitJSON(t, "--preset", "qwen3-30b-a3b:q4_k_m", "--gpu-model", "rtx2080", "--cpu-bw-eff", "38", "--runner-ups", "0")
	if doc.Best == nil || len(doc.RunnerUps) != 0 {
		t.Errorf("best %v, %d runner-ups", doc.Best != nil, len(doc.RunnerUps))
	}
	if many := fitJSON(t, "--preset", "qwen3-30b-a3b:q4_k_m", "--gpu-model", "rtx2080", "--cpu-bw-eff", "38"); len(many.RunnerUps) == 0 {
		t.Error("the default shows no alternatives")
	}
}

// TestPastedCommandLines runs every command line of testdata/command-lines.txt (public
// guides' and posts' llama-server, llama-cli and llama-bench lines) as written, the model
// file replaced: place and fit take the server and cli lines (a preset for the model, a
// described GPU and RAM added), bench the llama-bench lines (the tiny model, short tests
// added). The three lines llama.cpp itself refuses (a q6_0 cache, a bare -fa, llama-bench
// with --ctx-size, which it has no such option for) are refused with exit 2.
func TestPastedCommandLines(t *testing.T) {
	data, err := os.ReadFile("testdata/command-lines.txt")
	if err != nil {
		t.Fatal(err)
	}
	refused := map[string]string{"q6_0": "q6_0", " -fa --ctx": "write -fa on", "llama-bench -m qwen2.5-32b-instruct-IQ4_XS.gguf -ngl 60 -t 8 --ctx-size": "-c"}
	for _, line := range strings.Split(string(data), "\n") {
		if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		args := shellWords(t, line)
		program, args := args[0], withoutModel(args[1:])
		var runs [][]string
		if program == "llama-bench" {
			runs = append(runs, append(append([]string{"bench", "-m", tinyQwen}, args...), "-p", "8", "-n", "2"))
		} else {
			runs = append(runs,
				append([]string{"place", program, "--preset", "qwen3-30b-a3b", "--gpu", "24GiB", "--ram", "128GiB"}, args...),
				append([]string{"fit", program, "--preset", "qwen3-30b-a3b", "--gpu-model", "rtx4090", "--ram", "128GiB", "--ram-channels", "2", "--ram-speed", "5600"}, args...))
		}
		for _, run := range runs {
			code, _, errOut := moerun(t, run...)
			want := ""
			for k, msg := range refused {
				if strings.Contains(line, k) {
					want = msg
				}
			}
			switch {
			case want == "" && code != 0:
				t.Errorf("%s: %v: exit %d: %s", line, run[0], code, errOut)
			case want != "" && (code != 2 || !strings.Contains(errOut, want)):
				t.Errorf("%s: %v: exit %d, want 2 and %q: %s", line, run[0], code, want, errOut)
			}
		}
	}
}

// withoutModel drops -m FILE and --model FILE.
func withoutModel(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		if args[i] == "-m" || args[i] == "--model" {
			i++
			continue
		}
		out = append(out, args[i])
	}
	return out
}

// TestFitSetsAsidePlacement: the placement flags of a pasted command (-ot, -ngl, …) are set
// aside, and the printed commands carry fit's placement only: repeating -ot exps=CPU before
// fit's --n-cpu-moe would put every expert in RAM.
func TestFitSetsAsidePlacement(t *testing.T) {
	code, out, errOut := moerun(t, "fit", "--preset", "qwen3-30b-a3b:q4_k_m", "--gpu", "8GiB", "--ram", "64GiB", "--gpu-bw", "272", "--ram-bw", "60",
		"-ot", "exps=CPU", "-ngl", "20", "-ts", "1")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && (f[0] == "llama.cpp" || f[0] == "moerun") &&
			(strings.Contains(line, "exps=CPU") || strings.Contains(line, "-ngl 20") || strings.Contains(line, "--n-gpu-layers 20") || strings.Contains(line, "tensor-split")) {
			t.Errorf("a printed command repeats a placement flag fit set aside: %s", line)
		}
	}
	if !strings.Contains(out, "set aside: -ot exps=CPU, -ngl 20, -ts 1") {
		t.Errorf("no note names the flags set aside:\n%s", out)
	}
}
