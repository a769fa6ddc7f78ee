package tokenizer

import (
	"errors"

	"github.com/nikolalohinski/gonja/v2/exec"
)

// itemsFilter is Jinja's items filter, value|items, with the pairs in the order of the
// JSON the mapping came from, as Python and llama.cpp give them. gonja's own walks the Go
// map, in a different order on every render; Qwen3.5's template writes tool-call arguments
// with {% for name, value in arguments|items %}. None and undefined give no pairs, as in
// llama.cpp (Python raises on None; gonja cannot tell the two apart); anything but a
// mapping is an error.
func itemsFilter(_ *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	if err := params.Take(); err != nil {
		return exec.AsValue(exec.ErrInvalidCall(err))
	}
	if in.IsNil() {
		return exec.AsValue([]any{})
	}
	items := []any{}
	switch m := in.Interface().(type) {
	case map[string]any:
		items = orderedItems(m)
	case *exec.Dict: // a dict literal in the template
		keys, vals := dictEntries(m)
		for _, k := range keys {
			items = append(items, []any{k, vals[k]})
		}
	default:
		return exec.AsValue(errors.New("items: can only get item pairs from a mapping"))
	}
	return exec.AsValue(items)
}

// dictEntries gives a template's dict literal as Python builds it: keys in the order they
// first appear, each with the last value given for it.
func dictEntries(d *exec.Dict) (keys []string, vals map[string]any) {
	vals = map[string]any{}
	for _, p := range d.Pairs {
		k := p.Key.String()
		if _, dup := vals[k]; !dup {
			keys = append(keys, k)
		}
		vals[k] = p.Value
	}
	return keys, vals
}

// orderedItems lists a mapping's (key, value) pairs in its keys' order (orderedKeys).
func orderedItems(m map[string]any) []any {
	items := make([]any, 0, len(m))
	for _, k := range orderedKeys(m) {
		items = append(items, []any{k, m[k]})
	}
	return items
}
