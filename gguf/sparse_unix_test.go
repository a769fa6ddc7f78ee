//go:build unix

package gguf

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/moerun/moerun/tensor"
)

func allocatedBytes(st os.FileInfo) int64 { return st.Sys().(*syscall.Stat_t).Blocks * 512 }

func TestWriteSparse(t *testing.T) {
	md := sampleMetadata(t)
	// 64 experts of 4096x14336 q4_K: 2.1 GB of data per tensor, 8.5 GB in all.
	var specs []TensorSpec
	for _, n := range []string{"blk.0.ffn_gate_exps.weight", "blk.0.ffn_up_exps.weight", "blk.0.ffn_down_exps.weight", "blk.1.ffn_gate_exps.weight"} {
		specs = append(specs, TensorSpec{n, tensor.Q4_K, []int64{4096, 14336, 64}})
	}
	path := filepath.Join(t.TempDir(), "sparse.gguf")
	l, err := WriteSparse(path, md, specs)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() != l.FileSize || l.FileSize < 8e9 {
		t.Fatalf("file size %d, layout says %d", st.Size(), l.FileSize)
	}
	if used := allocatedBytes(st); used > 1<<20 {
		t.Errorf("sparse file uses %d bytes on disk", used)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if len(f.Tensors) != 4 || f.Tensors[3].FileOffset != l.Tensors[3].FileOffset {
		t.Errorf("reopened sparse file: %d tensors", len(f.Tensors))
	}
	data, err := f.TensorData(&f.Tensors[3])
	if err != nil || int64(len(data)) != f.Tensors[3].Size || data[len(data)-1] != 0 {
		t.Errorf("sparse tensor data: %d bytes, %v", len(data), err)
	}
}
