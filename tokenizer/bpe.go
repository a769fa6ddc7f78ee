package tokenizer

import (
	"strings"
	"sync"
)

// symbol is a run of a word's bytes that BPE has merged so far. Symbols form a linked
// list in word order; a symbol merged into its left neighbour becomes empty.
type symbol struct {
	start, end int32 // byte range in the word
	id         int32 // token whose text the run spells, or None
	prev, next int32 // neighbours, -1 at the ends
}

// bigram is a candidate merge of two adjacent symbols. size (the length of the pair when
// it was queued) detects stale candidates: a symbol only grows, and a neighbour that was
// merged away becomes empty, so the pair is unchanged exactly when the size still adds up.
type bigram struct {
	left, right int32
	rank        int32
	size        int32
	result      int32
}

// before orders the merge queue as llama.cpp does: lowest rank first, then leftmost.
func (a bigram) before(b bigram) bool {
	return a.rank < b.rank || (a.rank == b.rank && a.left < b.left)
}

// mergeQueue is a binary min-heap of bigrams (container/heap's interface calls cost more
// than the merges themselves on short words).
type mergeQueue []bigram

func (q *mergeQueue) push(b bigram) {
	h := append(*q, b)
	for i := len(h) - 1; i > 0; {
		parent := (i - 1) / 2
		if !h[i].before(h[parent]) {
			break
		}
		h[i], h[parent] = h[parent], h[i]
		i = parent
	}
	*q = h
}

func (q *mergeQueue) pop() bigram {
	h := *q
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(h) && h[l].before(h[m]) {
			m = l
		}
		if r < len(h) && h[r].before(h[m]) {
			m = r
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	*q = h
	return top
}

// bpe appends the tokens of one pre-tokenized word (raw bytes, not yet byte-encoded).
func (v *Vocab) bpe(word string, out []int32) []int32 {
	if ids, ok := v.cache.get(word); ok {
		return append(out, ids...)
	}
	start := len(out)
	out = v.mergeWord(word, out)
	v.cache.put(word, out[start:])
	return out
}

func (v *Vocab) mergeWord(word string, out []int32) []int32 {
	if word == "" {
		return out
	}
	if v.ignoreMerges {
		if id := v.id(byteEncode(word)); id != None {
			return append(out, id)
		}
	}
	syms := make([]symbol, len(word))
	for i := range syms {
		syms[i] = symbol{start: int32(i), end: int32(i + 1), id: v.byteTokens[word[i]], prev: int32(i - 1), next: int32(i + 1)}
	}
	syms[len(syms)-1].next = -1
	queue := make(mergeQueue, 0, len(word))
	for i := 1; i < len(syms); i++ {
		v.queuePair(word, syms, &queue, int32(i-1), int32(i))
	}
	for len(queue) > 0 {
		b := queue.pop()
		l, r := &syms[b.left], &syms[b.right]
		ln, rn := l.end-l.start, r.end-r.start
		if ln == 0 || rn == 0 || ln+rn != b.size {
			continue
		}
		l.end, l.id, l.next = r.end, b.result, r.next
		r.end = r.start
		if r.next >= 0 {
			syms[r.next].prev = b.left
		}
		v.queuePair(word, syms, &queue, l.prev, b.left)
		v.queuePair(word, syms, &queue, b.left, l.next)
	}
	for i := int32(0); i >= 0; i = syms[i].next {
		s := syms[i]
		if s.id != None {
			out = append(out, s.id)
			continue
		}
		// Not a token: llama.cpp falls back to single-byte tokens of the byte-level text
		// (only the printable-ASCII ones can exist).
		enc := byteEncode(word[s.start:s.end])
		for j := 0; j < len(enc); j++ {
			if id := v.id(enc[j : j+1]); id != None {
				out = append(out, id)
			}
		}
	}
	return out
}

// queuePair queues the merge of symbols left and right if the merge table has one.
func (v *Vocab) queuePair(word string, syms []symbol, queue *mergeQueue, left, right int32) {
	if left < 0 || right < 0 {
		return
	}
	l, r := syms[left], syms[right]
	var rule merge
	var ok bool
	if l.id != None && r.id != None {
		rule, ok = v.merges[pairKey(l.id, r.id)]
	} else if v.textMerges != nil {
		rule, ok = v.textMerges[byteEncode(word[l.start:l.end])+" "+byteEncode(word[r.start:r.end])]
	}
	if ok {
		queue.push(bigram{left: left, right: right, rank: rule.rank, size: r.end - l.start, result: rule.result})
	}
}

// wordCache remembers the tokens of recent words: natural text repeats words a lot, and a
// cached word skips the merge loop.
type wordCache struct {
	mu    sync.RWMutex
	words map[string][]int32
}

const (
	maxCachedWords   = 1 << 16
	maxCachedWordLen = 64
)

func (c *wordCache) init() { c.words = make(map[string][]int32) }

func (c *wordCache) get(word string) ([]int32, bool) {
	c.mu.RLock()
	ids, ok := c.words[word]
	c.mu.RUnlock()
	return ids, ok
}

func (c *wordCache) put(word string, ids []int32) {
	if len(word) > maxCachedWordLen {
		return
	}
	c.mu.Lock()
	if len(c.words) >= maxCachedWords {
		clear(c.words)
	}
	// Clone: the word is a substring of the caller's text, which the cache must not pin.
	c.words[strings.Clone(word)] = append([]int32(nil), ids...)
	c.mu.Unlock()
}
