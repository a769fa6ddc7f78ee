package tensor

import (
	"encoding/json"
	"errors"
	"os"
	"testing"
)

// TestTypeTableMatchesLlamaCpp checks every quantized type against the index llama.cpp's
// quantizer wrote for quant-tensors.gguf (ids, names, block sizes, block and row bytes).
func TestTypeTableMatchesLlamaCpp(t *testing.T) {
	raw, err := os.ReadFile("../testdata/quant/quant-tensors.dequant.json")
	if err != nil {
		t.Fatal(err)
	}
	var index struct {
		NE    []int64 `json:"ne"`
		Types []struct {
			ID        uint32 `json:"ggml_type_id"`
			Name      string `json:"ggml_type_name"`
			BlockSize int64  `json:"block_size"`
			TypeSize  int64  `json:"type_size"`
			RowSize   int64  `json:"row_size"`
			Bytes     int64  `json:"bytes"`
		} `json:"types"`
	}
	if err := json.Unmarshal(raw, &index); err != nil {
		t.Fatal(err)
	}
	if len(index.Types) != 27 {
		t.Fatalf("index lists %d types, want 27", len(index.Types))
	}
	for _, want := range index.Types {
		typ, err := TypeFromID(want.ID)
		if err != nil {
			t.Errorf("%s: %v", want.Name, err)
			continue
		}
		info := typ.Info()
		if info.Name != want.Name || info.BlockSize != want.BlockSize || info.BlockBytes != want.TypeSize {
			t.Errorf("type %d: got %+v, want name %s block %d bytes %d", want.ID, info, want.Name, want.BlockSize, want.TypeSize)
		}
		if row, err := typ.RowBytes(index.NE[0]); err != nil || row != want.RowSize {
			t.Errorf("%s: RowBytes(%d) = %d, %v; want %d", want.Name, index.NE[0], row, err, want.RowSize)
		}
		if n, err := typ.Bytes(index.NE); err != nil || n != want.Bytes {
			t.Errorf("%s: Bytes(%v) = %d, %v; want %d", want.Name, index.NE, n, err, want.Bytes)
		}
		if parsed, err := ParseType(want.Name); err != nil || parsed != typ {
			t.Errorf("ParseType(%q) = %v, %v", want.Name, parsed, err)
		}
	}
}

// The types the quantizer index does not cover, from ggml.h and ggml-common.h.
func TestTypeTableOthers(t *testing.T) {
	for _, c := range []struct {
		typ         Type
		id          uint32
		name        string
		block, size int64
	}{
		{F32, 0, "f32", 1, 4}, {F64, 28, "f64", 1, 8}, {I8, 24, "i8", 1, 1}, {I16, 25, "i16", 1, 2},
		{I32, 26, "i32", 1, 4}, {I64, 27, "i64", 1, 8}, {Q8_1, 9, "q8_1", 32, 36}, {Q8_K, 15, "q8_K", 256, 292},
	} {
		if uint32(c.typ) != c.id || c.typ.String() != c.name || c.typ.BlockSize() != c.block || c.typ.BlockBytes() != c.size {
			t.Errorf("%v: got id %d name %s block %d bytes %d; want %d %s %d %d", c.typ, uint32(c.typ), c.typ, c.typ.BlockSize(), c.typ.BlockBytes(), c.id, c.name, c.block, c.size)
		}
	}
	if n := len(Types()); n != 35 {
		t.Errorf("%d types known, want 35 (ggml's 43 ids less the 8 removed ones)", n)
	}
}

func TestUnknownTypeIDs(t *testing.T) {
	// 4, 5, 31-33 and 36-38 are formats ggml removed; 43 is past the end of the enum.
	for _, id := range []uint32{4, 5, 31, 32, 33, 36, 37, 38, 43, 1 << 31} {
		_, err := TypeFromID(id)
		var unknown *UnknownTypeError
		if !errors.As(err, &unknown) || unknown.ID != id {
			t.Errorf("TypeFromID(%d) = %v, want UnknownTypeError", id, err)
		}
	}
	if _, err := ParseType("q4_0_4_4"); err == nil {
		t.Error("ParseType accepted a removed type")
	}
}

func TestSizeHelpers(t *testing.T) {
	if _, err := Q4_K.RowBytes(300); err == nil {
		t.Error("a 300-element q4_K row was accepted; 300 is not a multiple of 256")
	}
	if n, err := Q4_0.Bytes([]int64{4096, 14336, 8}); err != nil || n != 4096/32*18*14336*8 {
		t.Errorf("q4_0 expert tensor: %d, %v", n, err)
	}
	if _, err := F32.Bytes([]int64{1 << 40, 1 << 40}); err == nil {
		t.Error("overflowing shape accepted")
	}
	if _, err := F32.Bytes([]int64{4, -1}); err == nil {
		t.Error("negative dimension accepted")
	}
	if n, err := F16.Bytes(nil); err != nil || n != 2 {
		t.Errorf("scalar f16: %d, %v", n, err)
	}
	if bpw := Q4_K.BitsPerWeight(); bpw != 4.5 {
		t.Errorf("q4_K bits per weight %v, want 4.5", bpw)
	}
}
