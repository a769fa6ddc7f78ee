package main

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/placement"
	"github.com/moerun/moerun/tensor"
)

// markdownTable splits bench's markdown output into its header titles and rows of cells,
// checking the alignment row and the build footer on the way.
func markdownTable(t *testing.T, out string) (titles []string, rows [][]string) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) < 4 || !strings.HasPrefix(lines[len(lines)-1], "build: moerun ") || lines[len(lines)-2] != "" {
		t.Fatalf("want a table, a blank line and a build line:\n%s", out)
	}
	cells := func(line string) []string {
		if !strings.HasPrefix(line, "| ") || !strings.HasSuffix(line, " |") {
			t.Fatalf("not a table row: %q", line)
		}
		parts := strings.Split(strings.TrimSuffix(strings.TrimPrefix(line, "| "), " |"), " | ")
		for i := range parts {
			parts[i] = strings.TrimSpace(parts[i])
		}
		return parts
	}
	titles = cells(lines[0])
	rule := regexp.MustCompile(`^-+[-:]$`)
	for _, c := range cells(lines[1]) {
		if !rule.MatchString(c) {
			t.Fatalf("alignment row cell %q", c)
		}
	}
	for _, l := range lines[2 : len(lines)-2] {
		row := cells(l)
		if len(row) != len(titles) {
			t.Fatalf("row %q has %d cells, the header %d", l, len(row), len(titles))
		}
		rows = append(rows, row)
	}
	return titles, rows
}

// column returns one column of the rows by title.
func column(t *testing.T, titles []string, rows [][]string, title string) []string {
	t.Helper()
	i := slices.Index(titles, title)
	if i < 0 {
		t.Fatalf("no column %q in %v", title, titles)
	}
	var out []string
	for _, r := range rows {
		out = append(out, r[i])
	}
	return out
}

var speedCell = regexp.MustCompile(`^\d+\.\d\d ± \d+\.\d\d$`)

// TestBenchMarkdownThreadsSweep: llama-bench's columns, one row per thread count and test,
// in llama-bench's order (threads outer, pp before tg).
func TestBenchMarkdownThreadsSweep(t *testing.T) {
	code, out, errOut := moerun(t, "bench", "-m", tinyQwen, "-p", "8", "-n", "4", "-r", "2", "-t", "1,2")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	titles, rows := markdownTable(t, out)
	if diff := cmp.Diff([]string{"model", "size", "params", "backend", "threads", "test", "t/s"}, titles); diff != "" {
		t.Fatalf("columns (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"1", "1", "2", "2"}, column(t, titles, rows, "threads")); diff != "" {
		t.Errorf("threads (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"pp8", "tg4", "pp8", "tg4"}, column(t, titles, rows, "test")); diff != "" {
		t.Errorf("tests (-want +got):\n%s", diff)
	}
	for _, s := range column(t, titles, rows, "t/s") {
		if !speedCell.MatchString(s) {
			t.Errorf("t/s cell %q is not MEAN ± STDDEV", s)
		}
	}
	// The header of llama-bench's table, byte for byte (its widths, with "±" counted as one).
	wantHeader := "| model                          |       size |     params | backend    | threads |            test |                  t/s |\n" +
		"| ------------------------------ | ---------: | ---------: | ---------- | ------: | --------------: | -------------------: |\n"
	if !strings.HasPrefix(out, wantHeader) {
		t.Errorf("header:\n%s\nwant:\n%s", out[:len(wantHeader)], wantHeader)
	}
}

// TestBenchModelColumns compares the model, size and params cells with llama-bench's
// output for the same files (llama-bench -p 8 -n 0 -r 1 -t 1 at 3f545bec).
func TestBenchModelColumns(t *testing.T) {
	for model, want := range map[string][]string{
		"tiny-qwen3moe":  {"qwen3moe ?B Q4_0", "5.45 MiB", "7.36 M"},
		"tiny-deepseek2": {"deepseek2 ?B Q8_0", "5.05 MiB", "4.39 M"},
		"tiny-glm4moe":   {"glm4moe ?B Q4_0", "6.45 MiB", "7.03 M"},
		"tiny-gpt-oss":   {"gpt-oss ?B MXFP4 MoE", "4.06 MiB", "5.55 M"},
		"tiny-qwen2moe":  {"qwen2moe ?B Q8_0", "1.75 MiB", "1.46 M"},
		"tiny-qwen35moe": {"qwen35moe ?B Q4_0", "3.94 MiB", "4.49 M"},
	} {
		t.Run(model, func(t *testing.T) {
			code, out, errOut := moerun(t, "bench", "-m", "../../testdata/models/"+model+".gguf", "-p", "2", "-n", "0", "-r", "1", "-t", "1", "--no-warmup")
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			titles, rows := markdownTable(t, out)
			if len(rows) != 1 {
				t.Fatalf("%d rows, want 1", len(rows))
			}
			got := []string{rows[0][0], rows[0][1], rows[0][2]}
			if diff := cmp.Diff(want, got); diff != "" || titles[3] != "backend" || rows[0][3] != "CPU" {
				t.Errorf("model, size, params (-want +got):\n%s; backend %q", diff, rows[0][3])
			}
		})
	}
}

// benchJSON runs bench with JSON output and decodes it.
func benchJSON(t *testing.T, args ...string) []map[string]any {
	t.Helper()
	code, out, errOut := moerun(t, append([]string{"bench", "-m", tinyQwen, "-t", "1"}, args...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var results []map[string]any
	if err := json.Unmarshal([]byte(out), &results); err != nil {
		t.Fatalf("output is not a JSON array: %v\n%s", err, out)
	}
	return results
}

// TestBenchJSON: llama-bench's field names and types, the repetition count, and the summary
// statistics recomputed from the samples.
func TestBenchJSON(t *testing.T) {
	results := benchJSON(t, "-p", "8", "-n", "4", "-r", "3", "-o", "json")
	if len(results) != 2 {
		t.Fatalf("%d results, want pp and tg", len(results))
	}
	strs := []string{"build_commit", "cpu_info", "kernels", "backends", "model_filename", "model_type", "type_k", "type_v", "test_time"}
	nums := []string{"model_size", "model_n_params", "n_batch", "n_ubatch", "n_threads", "n_prompt", "n_gen", "n_depth", "avg_ns", "stddev_ns", "avg_ts", "stddev_ts"}
	for i, r := range results {
		if r["kernels"] != tensor.KernelLevel() {
			t.Errorf("result %d: kernels %v, the process runs %s", i, r["kernels"], tensor.KernelLevel())
		}
		for _, k := range strs {
			if _, ok := r[k].(string); !ok {
				t.Errorf("result %d: %s = %#v, want a string", i, k, r[k])
			}
		}
		for _, k := range nums {
			if _, ok := r[k].(float64); !ok {
				t.Errorf("result %d: %s = %#v, want a number", i, k, r[k])
			}
		}
		ns, _ := r["samples_ns"].([]any)
		ts, _ := r["samples_ts"].([]any)
		if len(ns) != 3 || len(ts) != 3 {
			t.Fatalf("result %d: %d and %d samples, want -r 3", i, len(ns), len(ts))
		}
		tokens := r["n_prompt"].(float64) + r["n_gen"].(float64)
		var speeds []float64
		for j := range ns {
			want := 1e9 * tokens / ns[j].(float64)
			if got := ts[j].(float64); math.Abs(got-want) > 1e-9*want {
				t.Errorf("result %d sample %d: %v t/s from %v ns, want %v", i, j, got, ns[j], want)
			}
			speeds = append(speeds, want)
		}
		mean, sd := meanStddev(speeds)
		if math.Abs(r["avg_ts"].(float64)-mean) > 1e-9*mean || math.Abs(r["stddev_ts"].(float64)-sd) > 1e-9*mean {
			t.Errorf("result %d: avg_ts %v stddev_ts %v, want %v %v", i, r["avg_ts"], r["stddev_ts"], mean, sd)
		}
	}
	first := results[0]
	for k, want := range map[string]any{
		"model_type": "qwen3moe ?B Q4_0", "model_size": 5712896.0, "model_n_params": 7359232.0, // llama-bench's values
		"backends": "CPU", "n_batch": 2048.0, "n_ubatch": 512.0, "type_k": "f16", "type_v": "f16",
		"n_threads": 1.0, "n_prompt": 8.0, "n_gen": 0.0, "n_depth": 0.0,
	} {
		if first[k] != want {
			t.Errorf("%s = %#v, want %#v", k, first[k], want)
		}
	}
	if results[1]["n_prompt"] != 0.0 || results[1]["n_gen"] != 4.0 {
		t.Errorf("second test: n_prompt %v n_gen %v, want the tg4 test", results[1]["n_prompt"], results[1]["n_gen"])
	}
}

// TestBenchSingleRepetition: one sample has no deviation.
func TestBenchSingleRepetition(t *testing.T) {
	results := benchJSON(t, "--n-prompt", "4", "--n-gen", "0", "--repetitions", "1", "--output", "json", "--no-warmup")
	if len(results) != 1 || len(results[0]["samples_ns"].([]any)) != 1 || results[0]["stddev_ts"] != 0.0 {
		t.Errorf("want one pp4 result with one sample and stddev 0: %v", results)
	}
}

// TestBenchJSONLines: -o jsonl writes one object a line, one per test and thread count.
func TestBenchJSONLines(t *testing.T) {
	code, out, errOut := moerun(t, "bench", "-m", tinyQwen, "-p", "4", "-n", "2", "-r", "1", "--threads", "1,2", "-o", "jsonl")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	var threads []float64
	for _, l := range lines {
		var r map[string]any
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		threads = append(threads, r["n_threads"].(float64))
	}
	if diff := cmp.Diff([]float64{1, 1, 2, 2}, threads); diff != "" {
		t.Errorf("n_threads of the lines (-want +got):\n%s", diff)
	}
}

// TestBenchSettingLists: -ub and -ctk lists (llama-bench spellings) run every combination,
// threads innermost, and add their columns to the table.
func TestBenchSettingLists(t *testing.T) {
	code, out, errOut := moerun(t, "bench", "-m", tinyQwen, "-p", "8", "-n", "0", "-r", "1", "-t", "1",
		"-ub", "4,8", "-ctk", "f16,q8_0", "-b", "2048")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	titles, rows := markdownTable(t, out)
	if diff := cmp.Diff([]string{"model", "size", "params", "backend", "threads", "n_ubatch", "type_k", "test", "t/s"}, titles); diff != "" {
		t.Fatalf("columns (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"4", "4", "8", "8"}, column(t, titles, rows, "n_ubatch")); diff != "" {
		t.Errorf("n_ubatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"f16", "q8_0", "f16", "q8_0"}, column(t, titles, rows, "type_k")); diff != "" {
		t.Errorf("type_k (-want +got):\n%s", diff)
	}
}

func TestBenchBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-r", "0"}, "-r 0: give at least one repetition"},
		{[]string{"-p", "abc"}, `-p "abc": want numbers or ranges`},
		{[]string{"-p", "1-8*1"}, "the range does not advance"},
		{[]string{"-t", "0"}, `-t "0": values start at 1`},
		{[]string{"-t", "1,x"}, `-t "1,x": want numbers`},
		{[]string{"-p", "0", "-n", "0"}, "nothing to run"},
		{[]string{"-o", "sql"}, "--output"},
		{[]string{"-c", "512"}, "-c: bench sizes each test's context"},
		{[]string{"-ctk", "q9_9"}, "-ctk"},
		{[]string{"-ub", "4,x"}, `-ub "4,x"`},
		{[]string{"--gpu", "8GiB"}, "dry run"},
		{[]string{"-p", "1-100000000"}, "more than 4096 values"},
		{[]string{"--attention", "fast"}, "--attention"},
		{[]string{"-d", "x"}, `-d "x"`},
		{[]string{"-ser", "6"}, `-ser "6": want pairs KMIN,T`},
		{[]string{"-ser", "6,0.5,4"}, `-ser "6,0.5,4": want pairs`},
		{[]string{"-ser", "x,1"}, `"x","1" is not a pair`},
		{[]string{"-ser", "-2,1"}, `"-2","1" is not a pair`},
		{[]string{"-ser", "6,-1"}, `"6","-1" is not a pair`},
		{[]string{"-ser", "6,NaN"}, `"6","NaN" is not a pair`},
	} {
		args := append([]string{"bench", "-m", tinyQwen}, tc.args...)
		code, _, errOut := moerun(t, args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
	for _, args := range [][]string{
		{"bench"},
		{"bench", "-m", "no-such-model.gguf"},
		{"bench", "-m", "../../testdata/vocab/ggml-vocab-gpt-2.gguf"}, // an architecture moerun does not run
		{"bench", "-m", "../../testdata/vocab/ggml-vocab-qwen3.gguf"}, // a vocabulary without weights
		{"bench", "-m", "bench_test.go"},                              // not a GGUF file
	} {
		if code, _, errOut := moerun(t, args...); code != exitUsage || errOut == "" {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 with a message", args, code, errOut)
		}
	}
}

// TestIntList checks llama-bench's list syntax, expanded by hand.
func TestIntList(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want []int
	}{
		{[]string{"512"}, []int{512}},
		{[]string{"128,512"}, []int{128, 512}},
		{[]string{"1-4"}, []int{1, 2, 3, 4}},
		{[]string{"1-16*2"}, []int{1, 2, 4, 8, 16}},
		{[]string{"0-512+128"}, []int{0, 128, 256, 384, 512}},
		{[]string{"1-10+4,32"}, []int{1, 5, 9, 32}},
		{[]string{"1", "2,3"}, []int{1, 2, 3}}, // repeated flags append
	} {
		got, err := intList("-p", tc.in, 0)
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%q (-want +got):\n%s", tc.in, diff)
		}
	}
	for _, bad := range []string{"", "1,", "-1", "1-", "1-4/2", "1-4+0", "0-4*3", "99999999999", "8-2"} {
		if _, err := intList("-p", []string{bad}, 0); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestMeanStddev against hand-computed values: {2,4,4,4,5,5,7,9} has mean 5 and squared
// deviations summing to 32, so the sample standard deviation is √(32/7).
func TestMeanStddev(t *testing.T) {
	for _, tc := range []struct {
		xs       []float64
		mean, sd float64
	}{
		{[]float64{2, 4, 4, 4, 5, 5, 7, 9}, 5, math.Sqrt(32.0 / 7)},
		{[]float64{10, 20}, 15, math.Sqrt(50)},
		{[]float64{3}, 3, 0},
		{nil, 0, 0},
	} {
		mean, sd := meanStddev(tc.xs)
		if math.Abs(mean-tc.mean) > 1e-12 || math.Abs(sd-tc.sd) > 1e-12 {
			t.Errorf("%v: %v ± %v, want %v ± %v", tc.xs, mean, sd, tc.mean, tc.sd)
		}
	}
}

// TestFileTypeName: general.file_type is named as llama.cpp names it; without it the most
// common tensor type gives a guessed one.
func TestFileTypeName(t *testing.T) {
	md := func(kvs ...gguf.KV) gguf.Metadata {
		m, err := gguf.NewMetadata(kvs...)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	counts := map[tensor.Type]int{tensor.F32: 3, tensor.Q6_K: 2, tensor.Q4_K: 5}
	for _, tc := range []struct {
		md   gguf.Metadata
		want string
	}{
		{md(gguf.KV{Key: "general.file_type", Value: gguf.NewValue(uint32(15))}), "Q4_K - Medium"},
		{md(gguf.KV{Key: "general.file_type", Value: gguf.NewValue(uint32(38))}), "MXFP4 MoE"},
		{md(gguf.KV{Key: "general.file_type", Value: gguf.NewValue(uint32(999))}), "unknown, may not work"},
		{md(), "(guessed) Q4_K - Medium"},
	} {
		if got := fileTypeName(tc.md, counts); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.md, got, tc.want)
		}
	}
}

// llama-bench's model_type names a model by its architecture's layer counts, not by the
// file's size label: the built-in layouts of real models get llama.cpp's labels (GLM-4.5-Air
// and DeepSeek-V3 count their NextN block out), a shortened one and a size label alone "?B".
func TestLlamaSizeType(t *testing.T) {
	for spec, want := range map[string]string{
		"deepseek-v2-lite": "16B", "deepseek-v3": "671B", "qwen3-30b-a3b": "30B.A3B", "qwen3-235b-a22b": "235B.A22B",
		"gpt-oss-20b": "20B", "gpt-oss-120b": "120B", "glm-4.5-air": "106B.A12B", "qwen3.5-35b-a3b": "35B.A3B",
		"qwen3-next-80b-a3b": "80B.A3B", "qwen3-coder-next": "80B.A3B", "minimax-m2": "230B.A10B",
		"deepseek-v3.2": "685B.A37B", "glm-5": "744B.A40B",
	} {
		m, _, err := presetModel(spec)
		if err != nil {
			t.Fatal(err)
		}
		if got := llamaSizeType(m); got != want {
			t.Errorf("%s: %q, want %q", spec, got, want)
		}
	}
	m, _, err := presetModel("qwen3-30b-a3b")
	if err != nil {
		t.Fatal(err)
	}
	label, err := gguf.NewMetadata(append(m.Metadata.All(), gguf.KV{Key: "general.size_label", Value: gguf.NewValue("30B-A3B")})...)
	if err != nil {
		t.Fatal(err)
	}
	var fewer []gguf.KV
	for _, kv := range label.All() {
		if kv.Key == "qwen3moe.block_count" {
			kv.Value = gguf.NewValue(uint32(8))
		}
		fewer = append(fewer, kv)
	}
	short, err := gguf.NewMetadata(fewer...)
	if err != nil {
		t.Fatal(err)
	}
	var tensors []gguf.TensorInfo // the first eight blocks and the global tensors
	for _, ti := range m.Tensors {
		var block int
		if _, err := fmt.Sscanf(ti.Name, "blk.%d.", &block); err != nil || block < 8 {
			tensors = append(tensors, ti)
		}
	}
	if got := llamaSizeType(placement.Model{Name: "short", Metadata: short, Tensors: tensors}); got != "?B" {
		t.Errorf("8 layers with a size label: %q, want ?B", got)
	}
	if got := llamaSizeType(placement.Model{Name: "labelled", Metadata: label, Tensors: m.Tensors}); got != "30B.A3B" {
		t.Errorf("48 layers with the label 30B-A3B: %q, want llama.cpp's 30B.A3B", got)
	}
}

// FuzzIntList: any list either fails cleanly or expands to at most maxListLen values, each at
// least the minimum and within the range items it came from.
func FuzzIntList(f *testing.F) {
	for _, s := range []string{"512", "1-16*2", "0-512+128,7", "1-", "99999999999", "2147483647-2147483647*2", "1-4096"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ns, err := intList("-p", []string{s}, 1)
		if err != nil {
			return
		}
		if len(ns) > maxListLen {
			t.Fatalf("%q: %d values", s, len(ns))
		}
		for _, n := range ns {
			if n < 1 || n > math.MaxInt32 {
				t.Fatalf("%q: value %d", s, n)
			}
		}
	})
}

// TestBenchDepth: -d runs every test at each depth, in llama-bench's order (depth outside
// the pp and tg tests), names them "tg4 @ d16" and reports n_depth; the timed tokens stay
// the test's own.
func TestBenchDepth(t *testing.T) {
	code, out, errOut := moerun(t, "bench", "-m", tinyQwen, "-p", "8", "-n", "4", "-d", "0,16", "-r", "1", "-t", "1")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	titles, rows := markdownTable(t, out)
	if diff := cmp.Diff([]string{"pp8", "tg4", "pp8 @ d16", "tg4 @ d16"}, column(t, titles, rows, "test")); diff != "" {
		t.Errorf("tests (-want +got):\n%s", diff)
	}
	results := benchJSON(t, "-p", "0", "-n", "4", "-d", "16", "-r", "2", "-o", "json", "--attention", "precise")
	if len(results) != 1 || results[0]["n_depth"] != 16.0 || results[0]["n_gen"] != 4.0 {
		t.Fatalf("want one tg4 result at depth 16: %v", results)
	}
	ns, ts := results[0]["samples_ns"].([]any), results[0]["samples_ts"].([]any)
	for k := range ns {
		// t/s counts the four generated tokens, not the depth's.
		if want := 1e9 * 4 / ns[k].(float64); math.Abs(ts[k].(float64)-want) > 1e-9*want {
			t.Errorf("sample %d: %v t/s from %v ns, want %v", k, ts[k], ns[k], want)
		}
	}
}

// --roofline accounts for the tg test only: the bytes a token reads — every weight but the
// embedding, of which one row, k/E of the routed experts, and the F16 KV cache at the
// test's mean depth, counted here from the file — and the share of the roofline reached.
func TestBenchRoofline(t *testing.T) {
	code, _, errOut := moerun(t, "bench", "-m", tinyQwen, "-p", "4", "-n", "8", "-r", "2", "-t", "1", "--roofline")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	line := regexp.MustCompile(`moerun: (\S+) roofline: ([0-9.]+) MB read per token \(KV cache ([0-9.]+) MB at depth (\d+)\); stream read ([0-9.]+) GB/s with 1 threads \(the best read around each repetition, averaged\): ([0-9.]+) t/s; ([0-9.]+) t/s is ([0-9.]+)% of it \(repetitions ([0-9.]+)-([0-9.]+)%\)`)
	found := line.FindAllStringSubmatch(errOut, -1)
	if len(found) != 1 || found[0][1] != "tg8" {
		t.Fatalf("want one roofline line, for tg8:\n%s", errOut)
	}
	num := func(i int) float64 {
		v, err := strconv.ParseFloat(found[0][i], 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	f, err := gguf.Open(tinyQwen)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const layers, kvHeads, headDim, used, experts, depth = 4, 2, 64, 4, 16, 4 // tiny-qwen3moe; 8 tokens from depth 0
	var weights float64
	for _, ti := range f.Tensors {
		switch {
		case ti.Name == "token_embd.weight":
			weights += float64(ti.Size) / float64(ti.Shape[1])
		case strings.Contains(ti.Name, "_exps."):
			weights += float64(ti.Size) * used / experts
		default:
			weights += float64(ti.Size)
		}
	}
	kv := float64(layers * kvHeads * 2 * headDim * 2 * depth) // K and V rows, F16
	if num(4) != depth || math.Abs(num(3)-kv/1e6) > 0.006 || math.Abs(num(2)-(weights+kv)/1e6) > 0.006 {
		t.Errorf("%s MB per token, KV %s MB at depth %s; want %.2f, %.2f at %d", found[0][2], found[0][3], found[0][4], (weights+kv)/1e6, kv/1e6, depth)
	}
	stream, limit, tps, share := num(5), num(6), num(7), num(8)
	if stream <= 0 || math.Abs(limit-stream*1e3/num(2)) > 0.01*limit+0.1 || math.Abs(share-100*tps/limit) > 0.1 || num(9) > num(10) {
		t.Errorf("inconsistent figures: %s", found[0][0])
	}
}

// TestBenchSER: -ser lists settings as ik_llama.cpp's llama-bench; each row carries its
// setting and its quality against no SER on the fixed text: the off setting is the
// baseline itself (KLD 0, every top token the same), and 2,1, which drops two of
// tiny-qwen3moe's four experts a token, changes the distributions.
func TestBenchSER(t *testing.T) {
	results := benchJSON(t, "-p", "8", "-n", "0", "-r", "1", "-o", "json", "-ser", "-1,0", "-ser", "2,1")
	if len(results) != 2 {
		t.Fatalf("%d results, want one per setting", len(results))
	}
	quality := func(r map[string]any) map[string]float64 {
		q, ok := r["ser_quality"].(map[string]any)
		if !ok {
			t.Fatalf("no ser_quality in %v", r)
		}
		out := map[string]float64{}
		for k, v := range q {
			out[k] = v.(float64)
		}
		return out
	}
	off, on := quality(results[0]), quality(results[1])
	if results[0]["ser"] != "-1,0" || results[1]["ser"] != "2,1" {
		t.Errorf("ser fields %v, %v", results[0]["ser"], results[1]["ser"])
	}
	if off["mean_kld"] != 0 || off["same_top_pct"] != 100 || off["ppl"] != off["base_ppl"] || !(off["tokens"] > 100) {
		t.Errorf("the off setting against itself: %v", off)
	}
	if !(on["mean_kld"] > 0.01) || !(on["same_top_pct"] < 100) || on["base_ppl"] != off["ppl"] || on["tokens"] != off["tokens"] {
		t.Errorf("-ser 2,1 against off %v: %v", off, on)
	}
	code, out, errOut := moerun(t, "bench", "-m", tinyQwen, "-p", "8", "-n", "0", "-r", "1", "-t", "1", "-ser", "2,0.5")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	titles, rows := markdownTable(t, out)
	if got := column(t, titles, rows, "ser"); !slices.Equal(got, []string{"2,0.5"}) {
		t.Errorf("ser column %v", got)
	}
	for _, title := range []string{"PPL", "KLD", "same top"} {
		column(t, titles, rows, title)
	}
}

// TestCompareLogits checks the quality statistics on two positions of a two-token
// vocabulary, computed by hand: base (1/2, 1/2) then (3/4, 1/4), with SER (3/4, 1/4) then
// (1/4, 3/4). KL divergences ½·ln(4/3) and ½·ln 3, the second argmax changes, and the one
// prediction (token 1 after position 0) has probability 1/2 and 1/4: perplexities 2 and 4.
func TestCompareLogits(t *testing.T) {
	ln3 := float32(math.Log(3))
	q := compareLogits([]int32{0, 1}, []float32{0, 0, ln3, 0}, []float32{ln3, 0, 0, ln3})
	want := serQuality{Tokens: 2, PPL: 4, BasePPL: 2, MeanKLD: (math.Log(4.0/3) + math.Log(3)) / 4, SameTop: 50}
	if diff := cmp.Diff(want, *q, cmp.Comparer(func(a, b float64) bool { return math.Abs(a-b) < 1e-6 })); diff != "" {
		t.Errorf("compareLogits (-want +got):\n%s", diff)
	}
}

// TestBenchSimGPU runs bench on a simulated GPU: the expert-offload placement reports two
// copies (one each way) per MoE layer per generated token (the tiny model has 4 layers, all MoE) on
// top of the embedding in and the logits out; everything on the GPU only those two; and
// the speed is that of the CPU's kernels, so the results are real numbers. A prompt of 32
// tokens uploads the expert weights for op offload unless -nopo 1 (llama-bench's
// --no-op-offload 1).
func TestBenchSimGPU(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-ngl", "99"}, `CUDA0 per generated token \(tg2\): 1 copies in \([^)]*\), 1 out \([^)]*\), 1 waits`},
		{[]string{"-ngl", "99", "-ot", "exps=CPU"}, `CUDA0 per generated token \(tg2\): 5 copies in \([^)]*\), 5 out \([^)]*\), 5 waits`},
	} {
		args := append([]string{"bench", "-m", tinyQwen, "-p", "0", "-n", "2", "-r", "1", "-t", "1", "--sim-gpu", "64MiB"}, c.args...)
		code, out, errOut := moerun(t, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", c.args, code, errOut)
		}
		if !regexp.MustCompile(c.want).MatchString(errOut) || !strings.Contains(out, "SIM") {
			t.Errorf("%v: want %q on stderr and the SIM backend in the table:\n%s\n%s", c.args, c.want, errOut, out)
		}
	}
	// Op offload: a 32-token prompt's expert matmuls run on the GPU, their weights
	// uploaded; --no-op-offload keeps them on the CPU.
	for _, c := range []struct {
		flags []string
		want  string
	}{
		{[]string{"-nopo", "0"}, `CUDA0 \(simulated GPU[^)]*\): .* [1-9][0-9]* weight uploads for op offload \([0-9.]+ MiB\)`},
		{[]string{"--no-op-offload", "1"}, `CUDA0 \(simulated GPU[^)]*\): .* 0 weight uploads for op offload`},
	} {
		args := append([]string{"bench", "-m", tinyQwen, "-p", "32", "-n", "0", "-r", "1", "-t", "1", "--sim-gpu", "64MiB", "-ngl", "99", "-ot", "exps=CPU"}, c.flags...)
		code, _, errOut := moerun(t, args...)
		if code != 0 || !regexp.MustCompile(c.want).MatchString(errOut) {
			t.Errorf("%v: exit %d, want %q on stderr:\n%s", c.flags, code, c.want, errOut)
		}
	}
	results := benchJSON(t, "-p", "32", "-n", "0", "-r", "1", "--sim-gpu", "64MiB", "-ngl", "99", "-ot", "exps=CPU", "-nopo", "0,1", "-o", "json")
	if len(results) != 2 || results[0]["no_op_offload"] != 0.0 || results[1]["no_op_offload"] != 1.0 {
		t.Errorf("-nopo 0,1: %d results, no_op_offload %v", len(results), results)
	}
	code, out, errOut := moerun(t, "bench", "-m", tinyQwen, "-p", "32", "-n", "0", "-r", "1", "-t", "1", "--sim-gpu", "64MiB", "-nopo", "0,1")
	if code != 0 || !strings.Contains(out, "| nopo |") {
		t.Errorf("-nopo 0,1: exit %d, want a nopo column:\n%s%s", code, out, errOut)
	}
	code, out, errOut = moerun(t, "place", tinyQwen, "--sim-gpu", "64MiB")
	if code != 0 || !strings.Contains(out, "CUDA0  64.00 MiB") {
		t.Errorf("place --sim-gpu: exit %d, %s%s", code, out, errOut)
	}
	code, _, errOut = moerun(t, "place", tinyQwen, "--sim-gpu", "64MiB", "--gpu", "8GiB")
	if code != 2 || !strings.Contains(errOut, "give the GPUs once") {
		t.Errorf("--sim-gpu with --gpu: exit %d, %s", code, errOut)
	}
	code, _, errOut = moerun(t, "bench", "-m", tinyQwen, "--sim-gpu", "0")
	if code != 2 || !strings.Contains(errOut, "--sim-gpu") {
		t.Errorf("--sim-gpu 0: exit %d, %s", code, errOut)
	}
}

// TestBenchSweeps: llama-bench's lists of placement settings run every combination in its
// nesting order (-ngl outermost, then -ncmoe, -nkvo, -fa, -mmp), each row saying its
// settings in llama-bench's fields; -o csv writes the same fields; --progress counts tests.
func TestBenchSweeps(t *testing.T) {
	results := benchJSON(t, "-p", "0", "-n", "2", "-r", "1", "--sim-gpu", "64MiB", "-ngl", "0,99", "-ncmoe", "0,2", "-nkvo", "0,1", "-fa", "0,1", "-mmp", "0", "-o", "json")
	if len(results) != 16 {
		t.Fatalf("%d results, want 2×2×2×2", len(results))
	}
	i := 0
	for _, ngl := range []float64{0, 5} { // -ngl 99 offloads the 4 blocks and the output
		for _, nc := range []float64{0, 2} {
			for _, nkvo := range []bool{false, true} {
				for _, fa := range []float64{0, 1} {
					r := results[i]
					if r["n_gpu_layers"] != ngl || r["n_cpu_moe"] != nc || r["no_kv_offload"] != nkvo || r["flash_attn"] != fa || r["load_mode"] != "none" || r["backends"] != "SIM" {
						t.Errorf("result %d: ngl %v n_cpu_moe %v nkvo %v fa %v lm %v backends %v; want %v %v %v %v none SIM",
							i, r["n_gpu_layers"], r["n_cpu_moe"], r["no_kv_offload"], r["flash_attn"], r["load_mode"], r["backends"], ngl, nc, nkvo, fa)
					}
					i++
				}
			}
		}
	}
	code, out, errOut := moerun(t, "bench", "-m", tinyQwen, "-t", "1", "-p", "4", "-n", "2", "-r", "1", "-fa", "0,1", "-o", "csv", "--progress")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 5 || !strings.HasPrefix(lines[0], "build_commit,") || !strings.Contains(lines[0], ",flash_attn,") || strings.Count(errOut, "moerun bench: test ") != 4 {
		t.Errorf("csv: exit %d, %d lines:\n%s\n%s", code, len(lines), out, errOut)
	}
	for _, bad := range [][]string{{"-nkvo", "2"}, {"-mmp", "yes"}} {
		code, _, errOut := moerun(t, append([]string{"bench", "-m", tinyQwen, "-p", "0", "-n", "1"}, bad...)...)
		if code != 2 || !strings.Contains(errOut, "want 0 or 1") {
			t.Errorf("%v: exit %d: %s", bad, code, errOut)
		}
	}
}
