package gguf

import (
	"errors"
	"fmt"
	"strings"
)

// KV is one metadata entry.
type KV struct {
	Key   string
	Value Value
}

// ErrKeyNotFound is wrapped by getters when a key is absent.
var ErrKeyNotFound = errors.New("key not found")

// KeyError names the key a getter failed on.
type KeyError struct {
	Key string
	Err error
}

func (e *KeyError) Error() string { return fmt.Sprintf("metadata key %q: %v", e.Key, e.Err) }
func (e *KeyError) Unwrap() error { return e.Err }

// ArchPrefix stands for the model's architecture in key names given to the getters:
// "{arch}.block_count" reads "qwen3moe.block_count" in a qwen3moe file, the way llama.cpp
// spells its per-architecture keys.
const ArchPrefix = "{arch}."

// Metadata is a file's key-value section, in file order, with lookup by key.
type Metadata struct {
	kvs   []KV
	index map[string]int
}

// NewMetadata builds metadata from entries; duplicate or empty keys are an error.
func NewMetadata(kvs ...KV) (Metadata, error) {
	var md Metadata
	for _, kv := range kvs {
		if err := md.add(kv); err != nil {
			return Metadata{}, err
		}
	}
	return md, nil
}

func (md *Metadata) add(kv KV) error {
	if kv.Key == "" {
		return errors.New("empty metadata key")
	}
	if _, dup := md.index[kv.Key]; dup {
		return fmt.Errorf("duplicate metadata key %q", kv.Key)
	}
	if md.index == nil {
		md.index = make(map[string]int)
	}
	md.index[kv.Key] = len(md.kvs)
	md.kvs = append(md.kvs, kv)
	return nil
}

// All returns the entries in file order. The slice must not be modified.
func (md Metadata) All() []KV { return md.kvs }

// Len is the number of entries.
func (md Metadata) Len() int { return len(md.kvs) }

// Arch is general.architecture, or "" when the file has none.
func (md Metadata) Arch() string {
	s, _ := md.String("general.architecture")
	return s
}

// Key expands a leading "{arch}." to the file's architecture.
func (md Metadata) Key(key string) string {
	if rest, ok := strings.CutPrefix(key, ArchPrefix); ok {
		return md.Arch() + "." + rest
	}
	return key
}

// Get looks a key up ("{arch}." expanded).
func (md Metadata) Get(key string) (Value, bool) {
	i, ok := md.index[md.Key(key)]
	if !ok {
		return Value{}, false
	}
	return md.kvs[i].Value, true
}

// Has reports whether the key is present.
func (md Metadata) Has(key string) bool {
	_, ok := md.Get(key)
	return ok
}

// lookup applies a typed accessor to a key's value, wrapping failures in a KeyError.
func lookup[T any](md Metadata, key string, as func(Value) (T, error)) (T, error) {
	var zero T
	v, ok := md.Get(key)
	if !ok {
		return zero, &KeyError{Key: md.Key(key), Err: ErrKeyNotFound}
	}
	x, err := as(v)
	if err != nil {
		return zero, &KeyError{Key: md.Key(key), Err: err}
	}
	return x, nil
}

// lookupOr is lookup with a default for a missing key; a present key of the wrong type is
// still an error.
func lookupOr[T any](md Metadata, key string, def T, as func(Value) (T, error)) (T, error) {
	if !md.Has(key) {
		return def, nil
	}
	return lookup(md, key, as)
}

// Uint reads an integer key of any width as uint64 (negative values are an error).
func (md Metadata) Uint(key string) (uint64, error) { return lookup(md, key, Value.Uint) }

// Int reads an integer key of any width as int64.
func (md Metadata) Int(key string) (int64, error) { return lookup(md, key, Value.Int) }

// Float reads a numeric key as float64.
func (md Metadata) Float(key string) (float64, error) { return lookup(md, key, Value.Float) }

// Bool reads a boolean key.
func (md Metadata) Bool(key string) (bool, error) { return lookup(md, key, Value.Bool) }

// String reads a string key.
func (md Metadata) String(key string) (string, error) { return lookup(md, key, Value.Str) }

// Strings reads an array-of-strings key.
func (md Metadata) Strings(key string) ([]string, error) { return lookup(md, key, Value.Strings) }

// Ints reads an array-of-integers key.
func (md Metadata) Ints(key string) ([]int64, error) { return lookup(md, key, Value.Ints) }

// Floats reads an array-of-numbers key.
func (md Metadata) Floats(key string) ([]float64, error) { return lookup(md, key, Value.Floats) }

// UintOr is Uint with a default for a missing key.
func (md Metadata) UintOr(key string, def uint64) (uint64, error) {
	return lookupOr(md, key, def, Value.Uint)
}

// IntOr is Int with a default for a missing key.
func (md Metadata) IntOr(key string, def int64) (int64, error) {
	return lookupOr(md, key, def, Value.Int)
}

// FloatOr is Float with a default for a missing key.
func (md Metadata) FloatOr(key string, def float64) (float64, error) {
	return lookupOr(md, key, def, Value.Float)
}

// BoolOr is Bool with a default for a missing key.
func (md Metadata) BoolOr(key string, def bool) (bool, error) {
	return lookupOr(md, key, def, Value.Bool)
}

// StringOr is String with a default for a missing key.
func (md Metadata) StringOr(key string, def string) (string, error) {
	return lookupOr(md, key, def, Value.Str)
}
