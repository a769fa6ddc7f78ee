package gguf

import (
	"bytes"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/moerun/moerun/tensor"
)

// sampleMetadata exercises every value type, nested arrays and the {arch}. keys.
func sampleMetadata(t testing.TB, extra ...KV) Metadata {
	t.Helper()
	inner1, inner2 := NewArray([]int32{1, -2, 3}), NewArray([]string{"a", "bc"})
	nested, err := NewArrayOfArrays([]Value{inner1, inner2})
	if err != nil {
		t.Fatal(err)
	}
	kvs := []KV{
		{"general.architecture", NewValue("qwen3moe")},
		{"general.alignment", NewValue(uint32(64))},
		{"qwen3moe.block_count", NewValue(uint32(2))},
		{"qwen3moe.context_length", NewValue(uint64(40960))},
		{"qwen3moe.expert_count", NewValue(int32(8))},
		{"qwen3moe.rope.freq_base", NewValue(float32(1e6))},
		{"test.u8", NewValue(uint8(255))},
		{"test.i8", NewValue(int8(-128))},
		{"test.u16", NewValue(uint16(65535))},
		{"test.i16", NewValue(int16(-32768))},
		{"test.i64", NewValue(int64(math.MinInt64))},
		{"test.f64", NewValue(math.Pi)},
		{"test.bool", NewValue(true)},
		{"test.unicode", NewValue("日本語 ✓\x00nul")},
		{"test.floats", NewArray([]float32{0.5, -1, float32(math.Inf(1))})},
		{"test.bools", NewArray([]bool{true, false})},
		{"test.empty", NewArray([]uint64{})},
		{"test.nested", nested},
		{"tokenizer.ggml.tokens", NewArray([]string{"<s>", "hello", " world", ""})},
	}
	md, err := NewMetadata(append(kvs, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	return md
}

var sampleSpecs = []TensorSpec{
	{"token_embd.weight", tensor.F16, []int64{64, 4}},
	{"blk.0.attn_norm.weight", tensor.F32, []int64{64}},
	{"blk.0.ffn_up_exps.weight", tensor.Q4_0, []int64{64, 3, 2}},
	{"blk.1.empty", tensor.F32, []int64{0, 5}},
	{"output.weight", tensor.Q8_0, []int64{64, 4}},
}

// tensorBytes is deterministic, distinct data for each tensor.
func tensorBytes(t TensorInfo) []byte {
	b := make([]byte, t.Size)
	for i := range b {
		b[i] = byte(i*7 + len(t.Name))
	}
	return b
}

func writeFile(t testing.TB, md Metadata, specs []TensorSpec) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, md, specs)
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range w.Layout().Tensors {
		if err := w.WriteTensor(ti.Name, bytes.NewReader(tensorBytes(ti))); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// valueCmp compares Values by type and content.
var valueCmp = cmp.Comparer(func(a, b Value) bool {
	if a.typ != b.typ || a.elem != b.elem {
		return false
	}
	return cmp.Equal(a.x, b.x, cmp.Comparer(func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) }),
		cmp.Comparer(func(x, y float64) bool { return math.Float64bits(x) == math.Float64bits(y) }),
		cmp.Comparer(func(x, y Value) bool { return x.String() == y.String() && x.TypeName() == y.TypeName() }))
})

func TestRoundTrip(t *testing.T) {
	md := sampleMetadata(t)
	data := writeFile(t, md, sampleSpecs)
	f, err := NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(md.All(), f.Metadata.All(), valueCmp); diff != "" {
		t.Errorf("metadata differs after round trip (-written +read):\n%s", diff)
	}
	if f.Alignment() != 64 || f.DataOffset()%64 != 0 {
		t.Errorf("alignment %d, data offset %d", f.Alignment(), f.DataOffset())
	}
	if len(f.Tensors) != len(sampleSpecs) {
		t.Fatalf("%d tensors, want %d", len(f.Tensors), len(sampleSpecs))
	}
	for i, ti := range f.Tensors {
		s := sampleSpecs[i]
		if ti.Name != s.Name || ti.Type != s.Type || !cmp.Equal(ti.Shape, s.Shape) || ti.Offset%64 != 0 {
			t.Errorf("tensor %d: %+v, want %+v", i, ti, s)
		}
		got, err := f.TensorData(&ti)
		if err != nil || !bytes.Equal(got, tensorBytes(ti)) {
			t.Errorf("tensor %s: data differs (%v)", ti.Name, err)
		}
	}
	if got, err := f.Metadata.Uint("{arch}.block_count"); err != nil || got != 2 {
		t.Errorf("{arch}.block_count = %d, %v", got, err)
	}
}

// TestRewriteFixturesByteExact re-writes every fixture from what the reader parsed and
// checks that the result equals the original file byte for byte: the writer lays files out
// exactly as gguf-py and llama.cpp do.
func TestRewriteFixturesByteExact(t *testing.T) {
	paths, _ := filepath.Glob("../testdata/*/*.gguf")
	for _, p := range paths {
		t.Run(filepath.Base(p), func(t *testing.T) {
			orig, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			f, err := Open(p)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var specs []TensorSpec
			for _, ti := range f.Tensors {
				specs = append(specs, TensorSpec{ti.Name, ti.Type, ti.Shape})
			}
			var buf bytes.Buffer
			w, err := NewWriter(&buf, f.Metadata, specs)
			if err != nil {
				t.Fatal(err)
			}
			for i := range f.Tensors {
				if err := w.WriteTensor(f.Tensors[i].Name, f.TensorReader(&f.Tensors[i])); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf.Bytes(), orig) {
				n := min(len(orig), buf.Len())
				first := n
				for i := range n {
					if orig[i] != buf.Bytes()[i] {
						first = i
						break
					}
				}
				t.Errorf("rewritten file differs: %d vs %d bytes, first difference at byte %d", buf.Len(), len(orig), first)
			}
		})
	}
}

func TestWriterErrors(t *testing.T) {
	md := sampleMetadata(t)
	for _, c := range []struct {
		name  string
		specs []TensorSpec
		want  string
	}{
		{"long name", []TensorSpec{{strings.Repeat("x", 64), tensor.F32, []int64{1}}}, "1 to 63 bytes"},
		{"duplicate", []TensorSpec{{"a", tensor.F32, []int64{1}}, {"a", tensor.F32, []int64{1}}}, "duplicate"},
		{"dims", []TensorSpec{{"a", tensor.F32, []int64{1, 1, 1, 1, 1}}}, "dimensions"},
		{"block", []TensorSpec{{"a", tensor.Q4_K, []int64{100}}}, "block size"},
		{"type", []TensorSpec{{"a", tensor.Type(4), []int64{32}}}, "unknown ggml type"},
	} {
		if _, err := NewLayout(md, c.specs); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want error containing %q", c.name, err, c.want)
		}
	}
	bad, _ := NewMetadata(KV{"general.alignment", NewValue(int32(32))})
	if _, err := NewLayout(bad, nil); err == nil {
		t.Error("int32 general.alignment accepted")
	}

	var buf bytes.Buffer
	w, err := NewWriter(&buf, md, sampleSpecs)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteTensor("output.weight", bytes.NewReader(nil)); err == nil || !strings.Contains(err.Error(), "out of order") {
		t.Errorf("out-of-order write: %v", err)
	}
	if err := w.WriteTensor("token_embd.weight", bytes.NewReader(make([]byte, 10))); err == nil || !strings.Contains(err.Error(), "want 512") {
		t.Errorf("short data: %v", err)
	}
	if err := w.Close(); err == nil {
		t.Error("Close after a failed write succeeded")
	}
	w, _ = NewWriter(io.Discard, md, sampleSpecs)
	if err := w.Close(); err == nil || !strings.Contains(err.Error(), "only 0 of 5") {
		t.Errorf("Close with tensors missing: %v", err)
	}
}

func TestMetadataGetters(t *testing.T) {
	md := sampleMetadata(t)
	if v, err := md.Int("qwen3moe.context_length"); err != nil || v != 40960 {
		t.Errorf("u64 as int: %d, %v", v, err)
	}
	if v, err := md.Uint("{arch}.expert_count"); err != nil || v != 8 {
		t.Errorf("i32 as uint: %d, %v", v, err)
	}
	if _, err := md.Uint("test.i8"); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Errorf("negative as uint: %v", err)
	}
	if v, err := md.Float("{arch}.rope.freq_base"); err != nil || v != 1e6 {
		t.Errorf("float: %v, %v", v, err)
	}
	if v, err := md.Float("test.u16"); err != nil || v != 65535 {
		t.Errorf("int as float: %v, %v", v, err)
	}
	if _, err := md.String("{arch}.block_count"); err == nil || !strings.Contains(err.Error(), `"qwen3moe.block_count": value is uint32, want a string`) {
		t.Errorf("type mismatch error: %v", err)
	}
	_, err := md.Uint("{arch}.missing")
	var ke *KeyError
	if !errors.Is(err, ErrKeyNotFound) || !errors.As(err, &ke) || ke.Key != "qwen3moe.missing" {
		t.Errorf("missing key: %v", err)
	}
	if v, err := md.UintOr("{arch}.missing", 7); err != nil || v != 7 {
		t.Errorf("default: %d, %v", v, err)
	}
	if _, err := md.BoolOr("test.u8", false); err == nil {
		t.Error("BoolOr accepted a uint8")
	}
	if s, err := md.Strings("tokenizer.ggml.tokens"); err != nil || len(s) != 4 || s[2] != " world" {
		t.Errorf("strings: %q, %v", s, err)
	}
	if xs, err := md.Floats("test.floats"); err != nil || xs[1] != -1 {
		t.Errorf("floats: %v, %v", xs, err)
	}
	if xs, err := md.Ints("test.floats"); err == nil {
		t.Errorf("floats as ints: %v", xs)
	}
	v, _ := md.Get("test.nested")
	if got := v.Summary(1); got != `[[1, … (3 total)], … (2 total)]` {
		t.Errorf("summary %s", got)
	}
	if _, err := NewMetadata(KV{"a", NewValue(1.0)}, KV{"a", NewValue(2.0)}); err == nil {
		t.Error("duplicate key accepted")
	}
}
