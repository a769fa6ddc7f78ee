package grammar

import (
	"bytes"
	"fmt"
	"slices"
)

// Vocab is a vocabulary's token texts arranged as a trie, built once and
// shared by every matcher (it is immutable). Masking walks the trie once per
// sampled token: tokens sharing a prefix share the work of matching it, and a
// prefix the grammar refuses removes its whole subtree at once.
type Vocab struct {
	nodes    []trieNode // pre-order: each node comes before its subtree
	tokens   []int32    // token ids, grouped by the node their text ends at
	size     int
	maxDepth int
}

type trieNode struct {
	b     byte
	depth int32 // 1 for the first byte of a text
	// skip is the index of the first node after this node's subtree.
	skip int32
	// tokens[first:end] are the tokens whose text ends at this node.
	first, end int32
}

// NewVocab indexes pieces, the text of each token by token id. Empty pieces
// are never allowed (see Matcher.Allows).
func NewVocab(pieces [][]byte) *Vocab {
	v := &Vocab{size: len(pieces)}
	type entry struct {
		text []byte
		id   int32
	}
	order := make([]entry, 0, len(pieces))
	for id, p := range pieces {
		if len(p) > 0 {
			order = append(order, entry{p, int32(id)})
		}
	}
	slices.SortFunc(order, func(a, b entry) int { return bytes.Compare(a.text, b.text) })

	// path[d] is the node for the first d+1 bytes of the current text.
	var path []int32
	var prev []byte
	for _, e := range order {
		p, id := e.text, e.id
		common := 0
		for common < len(p) && common < len(prev) && p[common] == prev[common] {
			common++
		}
		if common == len(p) && common == len(prev) {
			// Same text as the previous token: it ends at the same node.
			last := &v.nodes[path[len(path)-1]]
			v.tokens = append(v.tokens, id)
			last.end++
			continue
		}
		path = path[:common]
		for d := common; d < len(p); d++ {
			path = append(path, int32(len(v.nodes)))
			v.nodes = append(v.nodes, trieNode{b: p[d], depth: int32(d + 1), first: int32(len(v.tokens)), end: int32(len(v.tokens))})
		}
		last := &v.nodes[path[len(path)-1]]
		v.tokens = append(v.tokens, id)
		last.end++
		v.maxDepth = max(v.maxDepth, len(p))
		prev = p
	}

	// A node's subtree ends at the next node no deeper than it.
	var open []int32
	for i, n := range v.nodes {
		for len(open) > 0 && v.nodes[open[len(open)-1]].depth >= n.depth {
			v.nodes[open[len(open)-1]].skip = int32(i)
			open = open[:len(open)-1]
		}
		open = append(open, int32(i))
	}
	for _, i := range open {
		v.nodes[i].skip = int32(len(v.nodes))
	}
	return v
}

// Len is the number of token ids, the length AllowedTokens needs.
func (v *Vocab) Len() int { return v.size }

// AllowedTokens sets allowed[id] to whether the grammar allows token id's
// text next: allowed[id] == m.Allows(pieces[id]) for the pieces v was built
// from. It does not change the matcher's position. allowed must have length
// v.Len(). End-of-generation tokens are the caller's to decide, with CanEnd.
func (m *Matcher) AllowedTokens(v *Vocab, allowed []bool) {
	if len(allowed) != v.size {
		panic(fmt.Sprintf("grammar: AllowedTokens given %d flags for a vocabulary of %d tokens", len(allowed), v.size))
	}
	clear(allowed)
	m.trimCache()
	t := m.table
	root, err := t.byteState(m.cur)
	if err != nil {
		t.fail(err)
		return
	}
	// at[d] is the byte state after the first d bytes of the current path.
	at := make([]int32, v.maxDepth+1)
	at[0] = root
	nodes := v.nodes
	for i := 0; i < len(nodes); {
		n := &nodes[i]
		next := t.byteNext[int(at[n.depth-1])<<8|int(n.b)] - byteOffset
		if next == -byteOffset { // not computed yet
			next = t.advance(at[n.depth-1], n.b)
		}
		if next == byteDead {
			i = int(n.skip)
			continue
		}
		at[n.depth] = next
		for _, id := range v.tokens[n.first:n.end] {
			allowed[id] = true
		}
		i++
	}
}
