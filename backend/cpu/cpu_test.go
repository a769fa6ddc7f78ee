package cpu

import (
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/tensor"
)

// q8Matrix quantizes a rows×cols (×experts) matrix of small distinct values to Q8_0.
func q8Matrix(t *testing.T, cols, rows, experts int) []byte {
	t.Helper()
	x := make([]float32, cols*rows*experts)
	for i := range x {
		x[i] = float32((i*37)%23-11) / 8
	}
	data := make([]byte, experts*rows*cols/32*34)
	if err := tensor.Quantize(tensor.Q8_0, x, data); err != nil {
		t.Fatal(err)
	}
	return data
}

// put copies values to the backend as rows of cols values (I32 or F32).
func put[T int32 | float32](t *testing.T, b *Backend, v []T, cols int) backend.Tensor {
	t.Helper()
	typ := tensor.F32
	if _, ok := any(v).([]int32); ok {
		typ = tensor.I32
	}
	buf, err := b.Alloc(int64(4 * len(v)))
	if err != nil {
		t.Fatal(err)
	}
	x, err := backend.NewTensor(buf, 0, typ, cols, len(v)/cols)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Set(x, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 4*len(v))); err != nil {
		t.Fatal(err)
	}
	return x
}

// get reads an F32 tensor back.
func get(t *testing.T, b *Backend, x backend.Tensor) []float32 {
	t.Helper()
	out := make([]float32, x.Elements())
	if err := b.Get(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(out))), 4*len(out)), x); err != nil {
		t.Fatal(err)
	}
	return out
}

// The backend's operations are the tensor package's on the same matrix: a view of the
// caller's bytes by default, a copy with Copy.
func TestOpsAndStorage(t *testing.T) {
	const cols, rows, experts = 64, 8, 3
	pool := tensor.NewPool(2)
	defer pool.Close()
	data := q8Matrix(t, cols, rows, experts)
	stack, err := tensor.NewMatrix(tensor.Q8_0, []int64{cols, rows, experts}, slices.Clone(data))
	if err != nil {
		t.Fatal(err)
	}
	x := make([]float32, 2*cols)
	for i := range x {
		x[i] = float32(i%7) - 3
	}
	ids := []int32{2, 0, -1, 1}
	want := make([]float32, len(ids)*rows)
	if err := pool.MulMatID(want, stack, x, ids, 2); err != nil {
		t.Fatal(err)
	}

	viewer := New(Options{Pool: pool})
	copier := New(Options{Pool: pool, Device: backend.GPU(0, 1<<20), Copy: true})
	defer copier.Close()
	src := slices.Clone(data)
	var results [2][]float32
	for i, b := range []*Backend{viewer, copier} {
		w, err := b.Load("blk.0.ffn_up_exps.weight", tensor.Q8_0, []int64{cols, rows, experts}, src)
		if err != nil {
			t.Fatal(err)
		}
		if w.Name() != "blk.0.ffn_up_exps.weight" || w.Type() != tensor.Q8_0 || w.Cols() != cols || w.Rows() != rows || w.Experts() != experts {
			t.Errorf("weight %s %s %d×%d×%d", w.Name(), w.Type(), w.Cols(), w.Rows(), w.Experts())
		}
		out, xt, it := put(t, b, make([]float32, len(ids)*rows), rows), put(t, b, x, cols), put(t, b, ids, 2)
		if err := b.MulMatID(out, w, xt, it, 2); err != nil {
			t.Fatal(err)
		}
		got := get(t, b, out)
		if !slices.Equal(got, want) {
			t.Errorf("%s: MulMatID %v, tensor's %v", b.Device().Name, got, want)
		}
		results[i] = got
		clear(src) // the viewer now computes on zeros, the copier on its own bytes
		if err := b.MulMatID(out, w, xt, it, 2); err != nil {
			t.Fatal(err)
		}
		got = get(t, b, out)
		zero := !slices.ContainsFunc(got, func(v float32) bool { return v != 0 })
		if zero != (b == viewer) {
			t.Errorf("%s: after the source was cleared, outputs all zero = %v", b.Device().Name, zero)
		}
		copy(src, data)
	}
	if copier.CopiedBytes() != int64(len(data)) || viewer.CopiedBytes() != 0 {
		t.Errorf("copied bytes %d and %d", copier.CopiedBytes(), viewer.CopiedBytes())
	}

	// MatMul and GetRows on a plain matrix.
	plain, err := viewer.Load("output.weight", tensor.Q8_0, []int64{cols, rows}, data[:rows*cols/32*34])
	if err != nil {
		t.Fatal(err)
	}
	first := stack.Expert(0)
	wantMM := make([]float32, 2*rows)
	if err := pool.MatMul(wantMM, &first, x); err != nil {
		t.Fatal(err)
	}
	mm := put(t, viewer, make([]float32, 2*rows), rows)
	if err := viewer.MatMul(mm, plain, put(t, viewer, x, cols)); err != nil || !slices.Equal(get(t, viewer, mm), wantMM) {
		t.Errorf("MatMul %v (%v), want %v", get(t, viewer, mm), err, wantMM)
	}
	row := make([]float32, cols)
	first.Row(0, 5, row)
	gotRow := put(t, viewer, make([]float32, cols), cols)
	if err := viewer.GetRows(gotRow, plain, []int32{5}); err != nil || !slices.Equal(get(t, viewer, gotRow), row) {
		t.Errorf("GetRows: %v", err)
	}
	if err := viewer.GetRows(gotRow, plain, []int32{rows}); err == nil || !strings.Contains(err.Error(), "output.weight") {
		t.Errorf("GetRows of a row past the end: %v", err)
	}
}

// Misuse is an error naming the tensor: a weight of another backend, a backend used after
// Close, bytes that do not match the shape.
func TestErrors(t *testing.T) {
	a, b := New(Options{Threads: 1}), New(Options{Threads: 1, Device: backend.GPU(1, 1<<20)})
	defer b.Close()
	data := q8Matrix(t, 32, 4, 1)
	w, err := a.Load("blk.3.attn_q.weight", tensor.Q8_0, []int64{32, 4}, data)
	if err != nil {
		t.Fatal(err)
	}
	dst, x := put(t, a, make([]float32, 4), 4), put(t, a, make([]float32, 32), 32)
	if err := b.MatMul(put(t, b, make([]float32, 4), 4), w, put(t, b, make([]float32, 32), 32)); err == nil || !strings.Contains(err.Error(), "blk.3.attn_q.weight is not held by backend CUDA1") {
		t.Errorf("foreign weight: %v", err)
	}
	if err := b.Add(dst, dst, dst); err == nil || !strings.Contains(err.Error(), "CUDA1: add of a tensor on CPU: copy it to CUDA1 first") {
		t.Errorf("foreign activation: %v", err)
	}
	if _, err := a.Load("blk.3.attn_k.weight", tensor.Q8_0, []int64{32, 5}, data); err == nil || !strings.Contains(err.Error(), "blk.3.attn_k.weight") {
		t.Errorf("short data: %v", err)
	}
	if err := a.MatMul(dst.Reshape(1).Slice(0, 3), w, x); err == nil || !strings.Contains(err.Error(), "blk.3.attn_q.weight") {
		t.Errorf("wrong output length: %v", err)
	}
	a.Close()
	if err := a.MatMul(dst, w, x); err == nil {
		t.Error("MatMul after Close")
	}
	if _, err := a.Load("x", tensor.Q8_0, []int64{32, 4}, data); err == nil {
		t.Error("Load after Close")
	}
	if a.Device().Name != "CPU" || a.Device().Kind != backend.KindCPU {
		t.Errorf("default device %+v", a.Device())
	}
}

// The fused operations (MatMuls, MulMatIDs) give what the weights give one by one, and name
// the tensors in their errors.
func TestFused(t *testing.T) {
	const cols, rows, experts = 64, 8, 3
	b := New(Options{Threads: 2})
	defer b.Close()
	data := q8Matrix(t, cols, rows, experts)
	var plain, stacks []backend.Weight
	for i, name := range []string{"q", "k"} {
		w, err := b.Load("blk.0.attn_"+name+".weight", tensor.Q8_0, []int64{cols, rows}, data[i*rows*cols/32*34:][:rows*cols/32*34])
		if err != nil {
			t.Fatal(err)
		}
		plain = append(plain, w)
		s, err := b.Load("blk.0.ffn_"+name+"_exps.weight", tensor.Q8_0, []int64{cols, rows, experts}, data)
		if err != nil {
			t.Fatal(err)
		}
		stacks = append(stacks, s)
	}
	x := make([]float32, cols)
	for i := range x {
		x[i] = float32(i%5) - 2
	}
	ids := []int32{2, -1, 0}
	xt, it := put(t, b, x, cols), put(t, b, ids, len(ids))
	gotMM := []backend.Tensor{put(t, b, make([]float32, rows), rows), put(t, b, make([]float32, rows), rows)}
	gotID := []backend.Tensor{put(t, b, make([]float32, len(ids)*rows), rows), put(t, b, make([]float32, len(ids)*rows), rows)}
	if err := b.MatMuls(gotMM, plain, xt); err != nil {
		t.Fatal(err)
	}
	if err := b.MulMatIDs(gotID, stacks, xt, it, len(ids)); err != nil {
		t.Fatal(err)
	}
	for i := range plain {
		want := put(t, b, make([]float32, rows), rows)
		if err := b.MatMul(want, plain[i], xt); err != nil || !slices.Equal(get(t, b, gotMM[i]), get(t, b, want)) {
			t.Errorf("MatMuls output %d: %v, MatMul %v (%v)", i, get(t, b, gotMM[i]), get(t, b, want), err)
		}
		want = put(t, b, make([]float32, len(ids)*rows), rows)
		if err := b.MulMatID(want, stacks[i], xt, it, len(ids)); err != nil || !slices.Equal(get(t, b, gotID[i]), get(t, b, want)) {
			t.Errorf("MulMatIDs output %d: %v, MulMatID %v (%v)", i, get(t, b, gotID[i]), get(t, b, want), err)
		}
	}
	if err := b.MatMuls([]backend.Tensor{gotMM[0], gotMM[1].Reshape(4).Slice(0, 1)}, plain, xt); err == nil || !strings.Contains(err.Error(), "blk.0.attn_q.weight, blk.0.attn_k.weight") {
		t.Errorf("a short output: %v", err)
	}
	other := New(Options{Threads: 1})
	defer other.Close()
	if err := other.MatMuls(gotMM, plain, xt); err == nil || !strings.Contains(err.Error(), "not held by backend") {
		t.Errorf("weights of another backend: %v", err)
	}
}

// TestMapIDs: the router's ids become the indices the table gives, -1 for skipped slots,
// for experts the table marks absent and for ids beyond it.
func TestMapIDs(t *testing.T) {
	b := New(Options{})
	defer b.Close()
	ids := []int32{3, -1, 0, 5, 2, 7}
	table := []int32{-1, 0, 1, 2, -1, 3} // experts 1, 2, 3, 5 held here, as 0..3
	want := []int32{2, -1, -1, 3, 1, -1}
	tensorOf := func(v []int32, cols, rows int) backend.Tensor {
		buf, err := b.Alloc(int64(4 * len(v)))
		if err != nil {
			t.Fatal(err)
		}
		x, err := backend.NewTensor(buf, 0, tensor.I32, cols, rows)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Set(x, unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))); err != nil {
			t.Fatal(err)
		}
		return x
	}
	dst := tensorOf(make([]int32, len(ids)), 2, 3)
	if err := b.MapIDs(dst, tensorOf(ids, 2, 3), tensorOf(table, len(table), 1)); err != nil {
		t.Fatal(err)
	}
	got := make([]int32, len(ids))
	if err := b.Get(unsafe.Slice((*byte)(unsafe.Pointer(&got[0])), 4*len(got)), dst); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("MapIDs(%v) by %v = %v, want %v", ids, table, got, want)
	}
	if err := b.MapIDs(dst, tensorOf(ids[:4], 2, 2), tensorOf(table, len(table), 1)); err == nil {
		t.Error("MapIDs of 4 ids into 6: no error")
	}
}
