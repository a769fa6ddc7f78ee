package backend

import (
	"github.com/moerun/moerun/internal/mmap"
	"github.com/moerun/moerun/tensor"
)

// Storage is how a backend that computes on host memory keeps a model's weights:
// llama.cpp's load modes. The zero value keeps views of the file's mapping (mmap, auto):
// no copy, ggml's buffer from a host pointer.
type Storage struct {
	// Copy reads the weights into memory of the store's own (-lm none, mlock, dio).
	Copy bool
	// Direct reads them with direct I/O where the file system allows (dio; with Copy).
	Direct bool
	// Lock keeps them in RAM (mlock): the copies, or each mapped file from its start to
	// the end of the last weight the store holds in it (mmap+mlock).
	Lock bool
}

// Source is a weight's bytes as the model file holds them.
type Source struct {
	// Pieces are the bytes, side by side, in host memory (views of the file's mapping): one
	// for a tensor, one per expert for a share of a stack of experts split by expert.
	Pieces [][]byte
	// File holds the bytes as one range from Offset, for a store that reads or locks them
	// itself; nil for bytes made of several pieces.
	File   ModelFile
	Offset int64
}

// ModelFile is one file (part) of a model as a store reads it.
type ModelFile interface {
	// Name is the file's path, which direct I/O opens anew.
	Name() string
	// ReadAt reads the file with ordinary reads (pread), not through its mapping, so that
	// a store's copy does not leave the mapping's pages behind as a second copy.
	ReadAt(p []byte, off int64) (int, error)
	// Lock keeps the mapping of the file's first n bytes in RAM.
	Lock(n int64) error
}

// Keeper is a backend that computes on host memory and keeps a model's weights in a store
// of its own, as the load mode says.
type Keeper interface {
	// NewStore makes a store for a model's weights: at most weights tensors of bytes
	// bytes in all, for which a copying store reserves its memory at once.
	NewStore(s Storage, weights int, bytes int64) (Store, error)
}

// Store holds one model's weights in a host backend's memory.
type Store interface {
	// Load makes a weight of the backend from src (of shape in GGUF order) and returns
	// it with the bytes it computes on: a view of the mapping, or the store's copy. A
	// tensor loaded twice under one name (a tied output) is the same bytes.
	Load(name string, t tensor.Type, shape []int64, src Source) (Weight, []byte, error)
	// Seal is called once every weight is loaded: it locks them where the Storage says.
	// A failed lock is a warning (Report), as in llama.cpp: the model still runs.
	Seal()
	// Report says what the store holds and what the user should know about it.
	Report() StoreReport
	// Close releases the copies and the files opened for direct I/O; the weights must not
	// be used afterwards.
	Close() error
}

// StoreReport is what a Store holds.
type StoreReport struct {
	// Copied is the memory the copies take (zero for views of the mapping).
	Copied int64
	// Pages is how the kernel holds the copies (resident, huge pages); PagesErr says
	// why it could not tell.
	Pages    mmap.PageUse
	PagesErr error
	// Warnings are what loading met that the user should know, as llama.cpp warns: a lock
	// refused (RLIMIT_MEMLOCK), a file system without direct I/O.
	Warnings []string
}
