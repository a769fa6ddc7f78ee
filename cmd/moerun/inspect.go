package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dlclark/regexp2"
	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/tensor"
)

type inspectCmd struct {
	Model  string `arg:"" help:"GGUF file to inspect (any part of a split model)."`
	Full   bool   `help:"Print every element of long metadata arrays (the vocabulary, merges, …) instead of a summary."`
	JSON   bool   `name:"json" help:"Write JSON (schema moerun.inspect/v1, see docs/schemas.md) instead of tables."`
	Filter string `help:"Only list and total the tensors whose name matches this regex, searched like llama.cpp's -ot patterns (ECMAScript syntax, matches anywhere in the name)." placeholder:"REGEX"`
}

// Help is the command's detailed help: what to know first, and an example that docs/docs_test.go runs.
func (*inspectCmd) Help() string {
	return "Only the header is read, so it is instant on a 400 GB file.\n" +
		"\n" +
		"Example (the routed experts of block 0, with -ot's regex semantics):\n" +
		"\n" +
		"    moerun inspect testdata/models/tiny-qwen3moe.gguf --filter 'blk\\.0\\.ffn_.*_exps'"
}

// arraySummaryItems is how many leading elements a summarised array shows.
const arraySummaryItems = 8

func (c *inspectCmd) Run(e *env) error {
	match, err := compileTensorFilter(c.Filter)
	if err != nil {
		return err
	}
	opts := gguf.Options{ArrayLimit: arraySummaryItems} // the summaries show no more than this
	if c.Full {
		opts = gguf.Options{}
	}
	f, err := gguf.OpenWith(c.Model, opts)
	if err != nil {
		return err
	}
	defer f.Close()
	var tensors []gguf.TensorInfo
	for _, t := range f.Tensors {
		ok, err := match(t.Name)
		if err != nil {
			return err
		}
		if ok {
			tensors = append(tensors, t)
		}
	}
	rep := newInspectReport(c.Model, f, tensors, c.Full)
	if c.Filter != "" {
		rep.Filter = &c.Filter
	}
	if c.JSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(rep)
	}
	return rep.writeText(e.stdout, f)
}

// compileTensorFilter builds a name matcher with llama.cpp's -ot regex semantics: ECMAScript
// syntax (plus POSIX classes), searched anywhere in the name like std::regex_search.
func compileTensorFilter(pattern string) (func(string) (bool, error), error) {
	if pattern == "" {
		return func(string) (bool, error) { return true, nil }, nil
	}
	re, err := regexp2.Compile(pattern, regexp2.ECMAScript|regexp2.RE2)
	if err != nil {
		return nil, badInput("--filter %q: %v", pattern, err)
	}
	re.MatchTimeout = time.Second // a pathological pattern must not hang inspect
	return func(name string) (bool, error) {
		ok, err := re.MatchString(name)
		if err != nil {
			return false, badInput("--filter %q on %s: %v", pattern, name, err)
		}
		return ok, nil
	}, nil
}

// inspectReport is the JSON document of `moerun inspect --json` (schema moerun.inspect/v1).
// Field names and meanings are stable; new fields may be added.
type inspectReport struct {
	Schema        string            `json:"schema"`
	Path          string            `json:"path"`
	Version       uint32            `json:"version"`
	Alignment     int64             `json:"alignment"`
	DataOffset    int64             `json:"data_offset"`
	FileSize      int64             `json:"file_size"`
	Architecture  string            `json:"architecture"`
	Parts         []inspectPart     `json:"parts"`
	Metadata      orderedJSON       `json:"metadata"`
	MetadataTypes orderedJSON       `json:"metadata_types"`
	Filter        *string           `json:"filter,omitempty"`
	Tensors       []inspectTensor   `json:"tensors"`
	Totals        inspectTotals     `json:"totals"`
	ByType        []inspectGroupSum `json:"by_type"`
	ByClass       []inspectGroupSum `json:"by_class"`

	full bool // metadata arrays printed whole
}

type inspectPart struct {
	Path       string `json:"path"`
	Size       int64  `json:"size"`
	DataOffset int64  `json:"data_offset"`
	Tensors    int    `json:"tensors"`
}

type inspectTensor struct {
	Name       string  `json:"name"`
	Type       string  `json:"type"`
	Shape      []int64 `json:"shape"`
	Offset     int64   `json:"offset"`
	FileOffset int64   `json:"file_offset"`
	Bytes      int64   `json:"bytes"`
	Elements   int64   `json:"elements"`
	Class      string  `json:"class"`
	Layer      *int    `json:"layer"`
	Split      int     `json:"split"`
}

type inspectTotals struct {
	Tensors  int   `json:"tensors"`
	Elements int64 `json:"elements"`
	Bytes    int64 `json:"bytes"`
}

type inspectGroupSum struct {
	Name string `json:"name"`
	inspectTotals
}

func newInspectReport(path string, f *gguf.File, tensors []gguf.TensorInfo, full bool) *inspectReport {
	rep := &inspectReport{
		Schema: "moerun.inspect/v1", Path: path, Version: f.Version(), Alignment: f.Alignment(),
		DataOffset: f.DataOffset(), FileSize: f.Size(), Architecture: f.Metadata.Arch(),
		Tensors: []inspectTensor{}, full: full,
	}
	for _, p := range f.Parts {
		rep.Parts = append(rep.Parts, inspectPart{p.Path, p.Size, p.DataOffset, p.Tensors})
	}
	maxItems := arraySummaryItems
	if full {
		maxItems = -1
	}
	for _, kv := range f.Metadata.All() {
		rep.Metadata = append(rep.Metadata, jsonField{kv.Key, metadataJSON(kv.Value, maxItems)})
		rep.MetadataTypes = append(rep.MetadataTypes, jsonField{kv.Key, kv.Value.TypeName()})
	}
	byType := map[tensor.Type]*inspectTotals{}
	byClass := map[gguf.Class]*inspectTotals{}
	for _, t := range tensors {
		class := gguf.ClassOf(t.Name)
		it := inspectTensor{Name: t.Name, Type: t.Type.String(), Shape: t.Shape, Offset: t.Offset,
			FileOffset: t.FileOffset, Bytes: t.Size, Elements: t.Elements(), Class: class.String(), Split: t.Split}
		if l, ok := gguf.LayerOf(t.Name); ok {
			it.Layer = &l
		}
		rep.Tensors = append(rep.Tensors, it)
		for _, sum := range []*inspectTotals{&rep.Totals, group(byType, t.Type), group(byClass, class)} {
			sum.Tensors++
			sum.Elements += it.Elements
			sum.Bytes += it.Bytes
		}
	}
	for _, typ := range tensor.Types() {
		if s, ok := byType[typ]; ok {
			rep.ByType = append(rep.ByType, inspectGroupSum{typ.String(), *s})
		}
	}
	for _, class := range gguf.Classes() {
		if s, ok := byClass[class]; ok {
			rep.ByClass = append(rep.ByClass, inspectGroupSum{class.String(), *s})
		}
	}
	return rep
}

func group[K comparable](m map[K]*inspectTotals, k K) *inspectTotals {
	if m[k] == nil {
		m[k] = &inspectTotals{}
	}
	return m[k]
}

// jsonField and orderedJSON keep metadata in file order in the JSON object.
type jsonField struct {
	Key   string
	Value any
}

type orderedJSON []jsonField

func (o orderedJSON) MarshalJSON() ([]byte, error) {
	var b strings.Builder
	b.WriteByte('{')
	for i, f := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(f.Key)
		v, err := json.Marshal(f.Value)
		if err != nil {
			return nil, fmt.Errorf("metadata %s: %w", f.Key, err)
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return []byte(b.String()), nil
}

// arraySummary stands in for a long array when --full is not given.
type arraySummary struct {
	Array  string `json:"array"`  // element type
	Length int    `json:"length"` // number of elements
	Head   []any  `json:"head"`   // the first elements
}

// metadataJSON converts a value for JSON: numbers as numbers (float32 with its shortest
// exact decimal; NaN and infinities as the strings "NaN", "+Inf", "-Inf"), arrays as arrays
// or, when longer than maxItems (>= 0), as an arraySummary.
func metadataJSON(v gguf.Value, maxItems int) any {
	if v.Type() != gguf.TypeArray {
		return scalarJSON(v.Any())
	}
	n := v.Len()
	shown := n
	if maxItems >= 0 && n > maxItems {
		shown = maxItems
	}
	items := make([]any, shown)
	for i := range items {
		items[i] = metadataJSON(v.Index(i), maxItems)
	}
	if shown < n {
		return arraySummary{Array: strings.TrimSuffix(strings.TrimPrefix(v.TypeName(), "array["), "]"), Length: n, Head: items}
	}
	return items
}

func scalarJSON(x any) any {
	switch x := x.(type) {
	case float32:
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return nonFinite(float64(x))
		}
		return json.Number(strconv.FormatFloat(float64(x), 'g', -1, 32))
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nonFinite(x)
		}
	}
	return x
}

func nonFinite(x float64) string {
	switch {
	case math.IsNaN(x):
		return "NaN"
	case x > 0:
		return "+Inf"
	}
	return "-Inf"
}

func (rep *inspectReport) writeText(w io.Writer, f *gguf.File) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	name, _ := f.Metadata.StringOr("general.name", "")
	fmt.Fprintf(tw, "file\t%s\n", rep.Path)
	fmt.Fprintf(tw, "format\tGGUF v%d, alignment %d, data section at byte %d, file %s\n", rep.Version, rep.Alignment, rep.DataOffset, humanBytes(rep.FileSize))
	if len(rep.Parts) > 1 {
		fmt.Fprintf(tw, "parts\t%d split files\n", len(rep.Parts))
	}
	fmt.Fprintf(tw, "model\t%s (architecture %s)\n", orDash(name), orDash(rep.Architecture))
	fmt.Fprintf(tw, "tensors\t%d, %s parameters, %s of weights\n", len(f.Tensors), humanCount(sumElements(f)), humanBytes(sumBytes(f)))
	tw.Flush()

	fmt.Fprintf(w, "\nMETADATA (%d keys)\n", f.Metadata.Len())
	maxItems := arraySummaryItems
	if rep.full {
		maxItems = -1
	}
	for _, kv := range f.Metadata.All() {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", kv.Key, kv.Value.TypeName(), oneLine(kv.Value.Summary(maxItems), !rep.full))
	}
	tw.Flush()

	title := fmt.Sprintf("TENSORS (%d)", len(rep.Tensors))
	if rep.Filter != nil {
		title = fmt.Sprintf("TENSORS (%d of %d match %q)", len(rep.Tensors), len(f.Tensors), *rep.Filter)
	}
	fmt.Fprintf(w, "\n%s\n", title)
	fmt.Fprintf(tw, "  NAME\tTYPE\tSHAPE\tBYTES\tOFFSET\tCLASS\n")
	for _, t := range rep.Tensors {
		offset := strconv.FormatInt(t.Offset, 10)
		if len(rep.Parts) > 1 {
			offset = fmt.Sprintf("%d:%d", t.Split+1, t.Offset)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", t.Name, t.Type, formatShape(t.Shape), humanBytes(t.Bytes), offset, t.Class)
	}
	tw.Flush()

	for _, g := range []struct {
		title string
		rows  []inspectGroupSum
	}{{"BY TYPE", rep.ByType}, {"BY CLASS", rep.ByClass}} {
		fmt.Fprintf(w, "\n%s\n", g.title)
		fmt.Fprintf(tw, "  \tTENSORS\tPARAMETERS\tBYTES\tSHARE\n")
		for _, r := range g.rows {
			fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%s\n", r.Name, r.Tensors, humanCount(r.Elements), humanBytes(r.Bytes), share(r.Bytes, rep.Totals.Bytes))
		}
		fmt.Fprintf(tw, "  total\t%d\t%s\t%s\t\n", rep.Totals.Tensors, humanCount(rep.Totals.Elements), humanBytes(rep.Totals.Bytes))
		tw.Flush()
	}
	return nil
}

func sumElements(f *gguf.File) (n int64) {
	for i := range f.Tensors {
		n += f.Tensors[i].Elements()
	}
	return n
}

func sumBytes(f *gguf.File) (n int64) {
	for _, t := range f.Tensors {
		n += t.Size
	}
	return n
}

func formatShape(shape []int64) string {
	parts := make([]string, len(shape))
	for i, d := range shape {
		parts[i] = strconv.FormatInt(d, 10)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// oneLine keeps multi-line strings (chat templates) on one table row, shortened unless the
// user asked for everything.
func oneLine(s string, shorten bool) string {
	s = strings.ReplaceAll(s, "\n", `\n`)
	if shorten && len(s) > 200 {
		s = s[:strings.LastIndexAny(s[:200], " ,")+1] + "…"
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func share(part, total int64) string {
	if total == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(part)/float64(total))
}

// humanBytes prints binary units as llama.cpp does (MiB, GiB).
func humanBytes(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	v, i := float64(n), 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.2f %s", v, units[i])
}

// humanCount prints parameter counts as 7.36 M, 671.03 B.
func humanCount(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2f B", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.2f M", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.2f K", float64(n)/1e3)
	}
	return strconv.FormatInt(n, 10)
}
