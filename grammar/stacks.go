package grammar

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
)

// Limits on matching. An ambiguous grammar can make the set of parse stacks
// grow without bound; past these limits a character is refused and
// Matcher.Err says why.
const (
	// MaxStacks bounds the distinct parse stacks alive at one position. It
	// leaves room for large alternations (a JSON schema enum of thousands of
	// values starts that many stacks) while stopping exponential growth.
	MaxStacks = 1 << 15
	// MaxExpansion bounds the stacks visited while expanding rule references
	// after one character, before duplicates are dropped.
	MaxExpansion = 1 << 18
	// MaxExpansionElements bounds the total length of those stacks, so that a
	// long chain of nested rules cannot cost quadratic time and memory.
	MaxExpansionElements = 1 << 23
)

// A stack is a pushdown stack of positions in Grammar.elems, bottom first. Its
// top is always the start of a terminal once expanded; the empty stack means
// the grammar is complete. Stacks are never modified once built.
type stack = []int32

// stackSet collects expanded stacks, dropping duplicates.
type stackSet struct {
	stacks []stack
	seen   map[string]struct{}
}

func (s *stackSet) add(st stack) {
	if s.seen == nil {
		s.seen = map[string]struct{}{}
	}
	k := stackKey(st)
	if _, dup := s.seen[k]; dup {
		return
	}
	s.seen[k] = struct{}{}
	s.stacks = append(s.stacks, st)
}

func stackKey(st stack) string {
	b := make([]byte, 4*len(st))
	for i, v := range st {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
	}
	return string(b)
}

// expand turns st, whose top may be a rule reference, into the stacks whose
// tops are terminals (or that are empty), adding them to out. It follows each
// alternative of each referenced rule; visiting a stack twice is skipped,
// which keeps empty-matching loops such as ( [x]* )* finite, as in llama.cpp.
func (g *Grammar) expand(st stack, out *stackSet) error {
	todo := []stack{st}
	seen := map[string]struct{}{}
	work := len(st)
	for len(todo) > 0 {
		cur := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		k := stackKey(cur)
		if _, dup := seen[k]; dup {
			continue
		}
		seen[k] = struct{}{}
		if len(seen) > MaxExpansion || work > MaxExpansionElements {
			return fmt.Errorf("%w: expanding rules after one character visited more than %d stacks or %d stack elements (the grammar is too ambiguous or nests too deeply)", errLimit, MaxExpansion, MaxExpansionElements)
		}
		if len(cur) == 0 {
			out.add(cur)
			continue
		}
		top := cur[len(cur)-1]
		e := g.elems[top]
		if e.kind != kindRuleRef {
			out.add(cur)
			continue
		}
		sub := g.ruleStart[e.value]
		for {
			next := make(stack, len(cur)-1, len(cur)+1)
			copy(next, cur)
			if !g.elems[top+1].endsAlternative() {
				next = append(next, top+1)
			}
			if !g.elems[sub].endsAlternative() {
				next = append(next, sub)
			}
			todo = append(todo, next)
			work += len(next)
			if work > MaxExpansionElements {
				return fmt.Errorf("%w: expanding rules after one character built more than %d stack elements (the grammar nests too deeply)", errLimit, MaxExpansionElements)
			}
			for !g.elems[sub].endsAlternative() {
				sub++
			}
			if g.elems[sub].kind != kindAlt {
				break
			}
			sub++
		}
	}
	if len(out.stacks) > MaxStacks {
		return fmt.Errorf("%w: more than %d parse stacks at once (the grammar is too ambiguous)", errLimit, MaxStacks)
	}
	return nil
}

func (g *Grammar) initialStacks() ([][]int32, error) {
	var out stackSet
	pos := g.ruleStart[g.root]
	for {
		var st stack
		if !g.elems[pos].endsAlternative() {
			st = stack{pos}
		}
		if err := g.expand(st, &out); err != nil {
			return nil, err
		}
		for !g.elems[pos].endsAlternative() {
			pos++
		}
		if g.elems[pos].kind != kindAlt {
			break
		}
		pos++
	}
	return out.stacks, nil
}

// matchChar reports whether the terminal starting at pos accepts cp, and the
// position just after the terminal.
func (g *Grammar) matchChar(pos int32, cp rune) (bool, int32) {
	e := g.elems[pos]
	positive := e.kind != kindCharNot
	found := false
	for {
		switch {
		case g.elems[pos+1].kind == kindCharRangeUpper:
			found = found || rune(g.elems[pos].value) <= cp && cp <= rune(g.elems[pos+1].value)
			pos += 2
		case g.elems[pos].kind == kindCharAny:
			found = true
			pos++
		default:
			found = found || rune(g.elems[pos].value) == cp
			pos++
		}
		if g.elems[pos].kind != kindCharAlt {
			return found == positive, pos
		}
	}
}

// matchSomeIn reports whether the terminal starting at pos accepts at least
// one code point in [lo, hi]. It decides whether a partial UTF-8 sequence can
// still be completed into an allowed character. Unlike llama.cpp, which
// refuses a partial sequence whenever a negated class excludes any of its
// completions, this is exact, so feeding bytes one at a time accepts the same
// texts as feeding them whole.
func (g *Grammar) matchSomeIn(pos int32, lo, hi rune) bool {
	type span struct{ lo, hi rune }
	var spans []span
	negated := g.elems[pos].kind == kindCharNot
	for {
		switch {
		case g.elems[pos+1].kind == kindCharRangeUpper:
			spans = append(spans, span{rune(g.elems[pos].value), rune(g.elems[pos+1].value)})
			pos += 2
		case g.elems[pos].kind == kindCharAny:
			return true
		default:
			spans = append(spans, span{rune(g.elems[pos].value), rune(g.elems[pos].value)})
			pos++
		}
		if g.elems[pos].kind != kindCharAlt {
			break
		}
	}
	if !negated {
		for _, s := range spans {
			if s.lo <= hi && lo <= s.hi && s.lo <= s.hi {
				return true
			}
		}
		return false
	}
	// Negated: look for a code point in [lo, hi] that no span covers, stepping
	// over covering spans.
	for x := lo; x <= hi; {
		covered := false
		for _, s := range spans {
			if s.lo <= x && x <= s.hi {
				x = s.hi + 1
				covered = true
			}
		}
		if !covered {
			return true
		}
	}
	return false
}

// state is an interned set of stacks: one position of the matcher between
// whole code points. Transitions are cached on it.
type state struct {
	stacks [][]int32
	canEnd bool
	size   int            // total stack elements, charged against the table
	ascii  *[128]int32    // cached transitions on ASCII; see asciiOffset
	other  map[rune]int32 // cached transitions on other code points
	// byMatch caches transitions by what decides them: the accepting stacks and the
	// positions after their terminals (computeTransition's signature).
	byMatch map[string]int32
}

// transitionDead is the transition on a refused code point. The ASCII table
// stores a state id plus asciiOffset so that its zero value means "not
// computed yet" and transitionDead is stored as 1.
const (
	transitionDead int32 = -1
	asciiOffset    int32 = 2
)

// Soft and hard bounds of a state table. Past the soft bounds the table is
// rebuilt from the current state before the next operation; the hard bound on
// stored stack elements keeps one mask computation over a hostile grammar
// from using unbounded memory.
const (
	tableSoftStates     = 4096
	tableSoftElements   = 1 << 20
	tableHardElements   = 1 << 23
	tableSoftByteStates = 1 << 13 // 8 MiB of byte transitions
	tableHardByteStates = 1 << 16 // 64 MiB
)

// stateTable interns states and caches transitions between them. It belongs
// to one Matcher (clones get their own), so no locking is needed.
type stateTable struct {
	g        *Grammar
	states   []*state
	byKey    map[string]int32
	elements int
	err      error // the first limit met, reported by Matcher.Err

	// Byte states are cursors (a state plus any unfinished UTF-8 sequence),
	// interned so that the transition on a byte is one lookup in byteNext:
	// 256 entries per byte state, 0 for not computed yet, otherwise the
	// next byte state's id plus byteOffset (so byteDead is stored as 1).
	// Masking walks a trie of the vocabulary with these lookups alone.
	cursors  []cursor
	cursorID map[cursor]int32
	byteNext []int32
}

const (
	byteDead   int32 = -1
	byteOffset int32 = 2
)

func newStateTable(g *Grammar) *stateTable {
	return &stateTable{g: g, byKey: map[string]int32{}, cursorID: map[cursor]int32{}}
}

// oversized reports whether the table has outgrown its soft bounds.
func (t *stateTable) oversized() bool {
	return len(t.states) > tableSoftStates || t.elements > tableSoftElements || len(t.cursors) > tableSoftByteStates
}

// byteState returns the id of cursor c, interning it.
func (t *stateTable) byteState(c cursor) (int32, error) {
	if id, ok := t.cursorID[c]; ok {
		return id, nil
	}
	if len(t.cursors) >= tableHardByteStates {
		return 0, fmt.Errorf("%w: more than %d distinct byte-level positions cached", errLimit, tableHardByteStates)
	}
	id := int32(len(t.cursors))
	t.cursors = append(t.cursors, c)
	t.cursorID[c] = id
	t.byteNext = append(t.byteNext, make([]int32, 256)...)
	return id, nil
}

// advance returns the byte state after byte b, or byteDead.
func (t *stateTable) advance(id int32, b byte) int32 {
	if n := t.byteNext[int(id)<<8|int(b)]; n != 0 {
		return n - byteOffset
	}
	n := byteDead
	if c, ok := t.step(t.cursors[id], b); ok {
		var err error
		if n, err = t.byteState(c); err != nil {
			t.fail(err)
			n = byteDead
		}
	}
	t.byteNext[int(id)<<8|int(b)] = n + byteOffset
	return n
}

// intern returns the id of the state holding exactly these stacks.
func (t *stateTable) intern(stacks [][]int32) (int32, error) {
	keys := make([]string, len(stacks))
	order := make([]int, len(stacks))
	size := 0
	for i, st := range stacks {
		keys[i] = stackKey(st)
		order[i] = i
		size += len(st) + 1
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(keys[a], keys[b]) })
	var kb strings.Builder
	sorted := make([][]int32, len(stacks))
	for i, j := range order {
		var n [4]byte
		binary.LittleEndian.PutUint32(n[:], uint32(len(stacks[j])))
		kb.Write(n[:])
		kb.WriteString(keys[j])
		sorted[i] = stacks[j]
	}
	key := kb.String()
	if id, ok := t.byKey[key]; ok {
		return id, nil
	}
	if t.elements+size > tableHardElements {
		return 0, fmt.Errorf("%w: parse stacks use more than %d elements in total", errLimit, tableHardElements)
	}
	s := &state{stacks: sorted, size: size}
	for _, st := range sorted {
		if len(st) == 0 {
			s.canEnd = true
		}
	}
	id := int32(len(t.states))
	t.states = append(t.states, s)
	t.byKey[key] = id
	t.elements += size
	return id, nil
}

func (t *stateTable) fail(err error) {
	if t.err == nil {
		t.err = err
	}
}

// transition returns the state after code point cp, or transitionDead.
func (t *stateTable) transition(id int32, cp rune) int32 {
	s := t.states[id]
	if cp < 128 {
		if s.ascii == nil {
			s.ascii = new([128]int32)
		} else if n := s.ascii[cp]; n != 0 {
			return n - asciiOffset
		}
		n := t.computeTransition(s, cp)
		s.ascii[cp] = n + asciiOffset
		return n
	}
	if n, ok := s.other[cp]; ok {
		return n
	}
	n := t.computeTransition(s, cp)
	if s.other == nil {
		s.other = map[rune]int32{}
	}
	s.other[cp] = n
	return n
}

func (t *stateTable) computeTransition(s *state, cp rune) int32 {
	g := t.g
	// The next state depends only on which stacks accept cp and where their terminals end:
	// a character class such as a JSON string's [^"\\] sends most code points to the same
	// state, which is then expanded and interned once rather than once per code point.
	var sigBuf [64]byte
	sig := sigBuf[:0]
	for i, st := range s.stacks {
		if len(st) == 0 {
			continue
		}
		if ok, after := g.matchChar(st[len(st)-1], cp); ok {
			sig = binary.LittleEndian.AppendUint32(sig, uint32(i))
			sig = binary.LittleEndian.AppendUint32(sig, uint32(after))
		}
	}
	if len(sig) == 0 {
		return transitionDead
	}
	if id, ok := s.byMatch[string(sig)]; ok {
		return id
	}
	var out stackSet
	for k := 0; k < len(sig); k += 8 {
		st := s.stacks[binary.LittleEndian.Uint32(sig[k:])]
		after := int32(binary.LittleEndian.Uint32(sig[k+4:]))
		next := make(stack, len(st)-1, len(st))
		copy(next, st)
		if !g.elems[after].endsAlternative() {
			next = append(next, after)
		}
		if err := g.expand(next, &out); err != nil {
			t.fail(err)
			return transitionDead
		}
	}
	id := transitionDead
	if len(out.stacks) > 0 {
		var err error
		if id, err = t.intern(out.stacks); err != nil {
			t.fail(err)
			return transitionDead
		}
	}
	if s.byMatch == nil {
		s.byMatch = map[string]int32{}
	}
	s.byMatch[string(sig)] = id
	return id
}

// viable reports whether some stack of the state accepts a code point in
// [lo, hi]: whether a partial UTF-8 sequence can still be completed.
func (t *stateTable) viable(id int32, lo, hi rune) bool {
	// Not cached: it is asked once per byte transition computed (advance caches those), and
	// the ranges differ from one partial sequence to the next, so a cache of them missed
	// nearly always and its map writes cost four times the check.
	for _, st := range t.states[id].stacks {
		if len(st) > 0 && t.g.matchSomeIn(st[len(st)-1], lo, hi) {
			return true
		}
	}
	return false
}
