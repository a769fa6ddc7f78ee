package moe

import (
	"fmt"
	"slices"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/gguf"
	"github.com/moerun/moerun/internal/mmap"
	"github.com/moerun/moerun/placement"
)

// weightSource hands each weight to the backend of its device. The host's go to the host
// backend's store, which keeps them as the plan's load mode says (views of the mapping, or
// copies read into memory of its own, locked or not: backend.Storage); the other devices'
// backends copy theirs into their memory from the mapping.
type weightSource struct {
	f     *gguf.File
	host  string        // the host's device name ("" without one)
	copy  bool          // the host's store copies the weights (the plan does not map the file)
	store backend.Store // the host's; nil without a host
}

// newWeightSource opens the host backend's store for the weights plan puts on it, sized
// for all of them: the distinct tensors, a stack split by expert counting its host share.
// The host's small tensors that the binder reads as float32 vectors (norms, biases) are
// counted too, and their room in a copying store goes unused.
func newWeightSource(f *gguf.File, plan *placement.Plan, backends []backend.Backend) (*weightSource, error) {
	s := &weightSource{f: f, copy: !plan.Settings.Mmap}
	var keeper backend.Keeper
	for _, be := range backends {
		if be.Device().Kind == backend.KindCPU {
			s.host = be.Device().Name
			keeper, _ = be.(backend.Keeper)
			break
		}
	}
	if s.host == "" {
		return s, nil
	}
	if keeper == nil {
		return nil, fmt.Errorf("the host's backend %s keeps no weight store", s.host)
	}
	weights, bytes, seen := 0, int64(0), map[string]bool{}
	for _, u := range plan.Tensors {
		name := u.Name
		if u.Tied {
			name = "token_embd.weight"
		}
		if u.Experts != nil {
			name = fmt.Sprintf("%s@%d", name, u.Experts[0]) // a share of a stack split by expert
		}
		if u.Device != s.host || seen[name] {
			continue
		}
		seen[name] = true
		weights++
		bytes += u.Bytes
	}
	storage := backend.Storage{Copy: s.copy, Direct: plan.Settings.LoadMode == placement.LoadDirectIO, Lock: plan.Settings.Locked}
	store, err := keeper.NewStore(storage, weights, bytes)
	if err != nil {
		return nil, fmt.Errorf("load mode %s: %w", plan.Settings.LoadMode, err)
	}
	s.store = store
	return s, nil
}

// load loads tensor ti (of shape, in GGUF order) on be, the backend of the plan entry u,
// and returns it with its bytes in host memory where the host holds it (nil elsewhere).
func (s *weightSource) load(be backend.Backend, ti *gguf.TensorInfo, shape []int64, u *placement.TensorUse) (backend.Weight, []byte, error) {
	data, err := s.f.TensorData(ti)
	if err != nil {
		return nil, nil, err
	}
	if u.Device == s.host {
		return s.store.Load(ti.Name, ti.Type, shape, backend.Source{Pieces: [][]byte{data}, File: s.f.Parts[ti.Split], Offset: ti.FileOffset})
	}
	w, err := be.Load(ti.Name, ti.Type, shape, data)
	return w, nil, err
}

// share loads one share of a stack of experts that the plan splits by expert (entry u) on
// be, its device's backend, and returns it as load does, with the experts it holds in
// order. The host's share under a mapping is a view of the whole stack (nil experts:
// numbered as in the file), whose other experts' pages are never read; any other share
// holds its experts' slices alone, side by side: in the host store's copies, or in memory
// that the device's backend copies from.
func (s *weightSource) share(be backend.Backend, ti *gguf.TensorInfo, u *placement.TensorUse) (backend.Weight, []byte, []int, error) {
	if u.Device == s.host && !s.copy {
		w, data, err := s.load(be, ti, ti.Shape, u)
		return w, data, nil, err
	}
	if len(ti.Shape) != 3 || ti.Shape[2] <= 0 {
		return nil, nil, nil, fmt.Errorf("tensor %s: the plan splits it by expert, and it is not a stack of experts (shape %v)", ti.Name, ti.Shape)
	}
	experts := int(ti.Shape[2])
	for i, e := range u.Experts {
		if e < 0 || e >= experts || i > 0 && e <= u.Experts[i-1] {
			return nil, nil, nil, fmt.Errorf("tensor %s: the plan's share on %s lists experts %v: not ascending ids below %d", ti.Name, u.Device, u.Experts, experts)
		}
	}
	whole, err := s.f.TensorData(ti)
	if err != nil {
		return nil, nil, nil, err
	}
	size := len(whole) / experts
	pieces := make([][]byte, len(u.Experts))
	for i, e := range u.Experts {
		pieces[i] = whole[e*size : (e+1)*size]
	}
	shape := slices.Clone(ti.Shape)
	shape[2] = int64(len(u.Experts))
	if u.Device == s.host {
		w, data, err := s.store.Load(ti.Name, ti.Type, shape, backend.Source{Pieces: pieces})
		return w, data, u.Experts, err
	}
	out := make([]byte, size*len(u.Experts))
	err = mmap.Guard(func() {
		for i, p := range pieces {
			copy(out[i*size:], p)
		}
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("tensor %s: %w", ti.Name, err)
	}
	w, err := be.Load(ti.Name, ti.Type, shape, out)
	return w, nil, u.Experts, err
}

// seal locks the host's weights where the load mode says so, once every weight is loaded.
func (s *weightSource) seal() {
	if s.store != nil {
		s.store.Seal()
	}
}

// report is what the host's store holds (the zero report without a host).
func (s *weightSource) report() backend.StoreReport {
	if s.store == nil {
		return backend.StoreReport{}
	}
	return s.store.Report()
}

// close releases the host store's copies and files.
func (s *weightSource) close() error {
	if s.store == nil {
		return nil
	}
	return s.store.Close()
}
