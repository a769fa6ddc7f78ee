package gguf

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// golden is what ggml's own reader (tools/oracle/gguf_dump.cpp, llama.cpp 3f545bec) saw.
type golden struct {
	OK         bool         `json:"ok"`
	Version    uint32       `json:"version"`
	Alignment  int64        `json:"alignment"`
	DataOffset int64        `json:"data_offset"`
	KV         []goldenKV   `json:"kv"`
	Tensors    []goldenTens `json:"tensors"`
}

type goldenKV struct {
	Key      string            `json:"key"`
	Type     string            `json:"type"`
	Value    json.RawMessage   `json:"value"`
	ElemType string            `json:"elem_type"`
	Len      int               `json:"len"`
	Head     []json.RawMessage `json:"head"`
	FNV      string            `json:"fnv1a"`
}

type goldenTens struct {
	Name   string   `json:"name"`
	Type   string   `json:"type"`
	NE     [4]int64 `json:"ne"`
	Offset int64    `json:"offset"`
	Size   int64    `json:"size"`
}

// ggml's short names for metadata types (gguf_type_name).
var ggmlValueTypeNames = map[ValueType]string{
	TypeUint8: "u8", TypeInt8: "i8", TypeUint16: "u16", TypeInt16: "i16", TypeUint32: "u32",
	TypeInt32: "i32", TypeFloat32: "f32", TypeBool: "bool", TypeString: "str", TypeArray: "arr",
	TypeUint64: "u64", TypeInt64: "i64", TypeFloat64: "f64",
}

// fixturePath maps a golden file to the fixture it describes.
func fixturePath(t *testing.T, goldenName string) string {
	base := strings.TrimSuffix(goldenName, ".json") + ".gguf"
	matches, _ := filepath.Glob(filepath.Join("..", "testdata", "*", base))
	if len(matches) != 1 {
		t.Fatalf("fixture for %s: found %v", goldenName, matches)
	}
	return matches[0]
}

func TestReaderMatchesGGML(t *testing.T) {
	goldens, _ := filepath.Glob("testdata/golden/*.json")
	if len(goldens) < 9 {
		t.Fatalf("found %d golden files, want at least 9", len(goldens))
	}
	for _, gp := range goldens {
		t.Run(filepath.Base(gp), func(t *testing.T) {
			raw, err := os.ReadFile(gp)
			if err != nil {
				t.Fatal(err)
			}
			var g golden
			if err := json.Unmarshal(raw, &g); err != nil {
				t.Fatal(err)
			}
			f, err := Open(fixturePath(t, filepath.Base(gp)))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if f.Version() != g.Version || f.Alignment() != g.Alignment || f.DataOffset() != g.DataOffset {
				t.Errorf("header: version %d alignment %d data offset %d; ggml: %d %d %d",
					f.Version(), f.Alignment(), f.DataOffset(), g.Version, g.Alignment, g.DataOffset)
			}
			compareMetadata(t, f.Metadata, g.KV)
			compareTensors(t, f, g.Tensors)
		})
	}
}

func compareMetadata(t *testing.T, md Metadata, want []goldenKV) {
	t.Helper()
	if md.Len() != len(want) {
		t.Fatalf("%d metadata keys, ggml has %d", md.Len(), len(want))
	}
	for i, kv := range md.All() {
		w := want[i]
		if kv.Key != w.Key || ggmlValueTypeNames[kv.Value.Type()] != w.Type {
			t.Errorf("kv %d: %s (%s), ggml: %s (%s)", i, kv.Key, kv.Value.Type(), w.Key, w.Type)
			continue
		}
		if kv.Value.Type() != TypeArray {
			checkScalar(t, kv.Key, kv.Value, w.Value)
			continue
		}
		if ggmlValueTypeNames[kv.Value.ElemType()] != w.ElemType || kv.Value.Len() != w.Len {
			t.Errorf("%s: array of %d %s, ggml: %d %s", kv.Key, kv.Value.Len(), kv.Value.ElemType(), w.Len, w.ElemType)
			continue
		}
		for j, h := range w.Head {
			checkScalar(t, kv.Key+"["+strconv.Itoa(j)+"]", kv.Value.Index(j), h)
		}
		if got := arrayFNV(kv.Value); got != w.FNV {
			t.Errorf("%s: array contents hash %s, ggml %s", kv.Key, got, w.FNV)
		}
	}
}

// checkScalar compares a value with ggml's printout of it: numbers numerically at the
// value's own precision, strings and bools exactly.
func checkScalar(t *testing.T, key string, v Value, want json.RawMessage) {
	t.Helper()
	switch x := v.Any().(type) {
	case string:
		var s string
		if err := json.Unmarshal(want, &s); err != nil || s != x {
			t.Errorf("%s = %q, ggml %s", key, x, want)
		}
	case bool:
		if strconv.FormatBool(x) != string(want) {
			t.Errorf("%s = %v, ggml %s", key, x, want)
		}
	case float32:
		w, err := strconv.ParseFloat(string(want), 32)
		if err != nil || float32(w) != x {
			t.Errorf("%s = %v, ggml %s", key, x, want)
		}
	case float64:
		w, err := strconv.ParseFloat(string(want), 64)
		if err != nil || w != x {
			t.Errorf("%s = %v, ggml %s", key, x, want)
		}
	default:
		if formatScalar(x) != string(want) {
			t.Errorf("%s = %v, ggml %s", key, x, want)
		}
	}
}

// arrayFNV hashes an array as gguf_dump does: raw little-endian elements, or each string
// followed by a NUL byte.
func arrayFNV(v Value) string {
	h := fnv.New64a()
	for i := range v.Len() {
		switch x := v.Index(i).Any().(type) {
		case string:
			h.Write(append([]byte(x), 0))
		case bool:
			h.Write([]byte{boolByte(x)})
		case float32:
			h.Write(binary.LittleEndian.AppendUint32(nil, math.Float32bits(x)))
		case float64:
			h.Write(binary.LittleEndian.AppendUint64(nil, math.Float64bits(x)))
		default:
			binary.Write(h, binary.LittleEndian, x)
		}
	}
	return fmt.Sprintf("%016x", h.Sum64())
}

func compareTensors(t *testing.T, f *File, want []goldenTens) {
	t.Helper()
	got := []goldenTens{}
	for _, ti := range f.Tensors {
		ne := [4]int64{1, 1, 1, 1}
		copy(ne[:], ti.Shape)
		got = append(got, goldenTens{Name: ti.Name, Type: ti.Type.String(), NE: ne, Offset: ti.Offset, Size: ti.Size})
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("tensors differ from ggml (-ggml +moerun):\n%s", diff)
	}
}
