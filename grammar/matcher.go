package grammar

import "sync"

// cursor is a matcher position at byte granularity: a state between whole
// code points plus the UTF-8 sequence begun but not finished, if any.
type cursor struct {
	state   int32
	partial rune  // bits of the unfinished code point read so far
	need    uint8 // continuation bytes still to come; 0 when none is pending
	lo, hi  byte  // range the next continuation byte must fall in
}

// step feeds one byte. It refuses bytes that are not well-formed UTF-8
// (overlong forms, surrogates and code points past U+10FFFF included), code
// points the grammar does not allow here, and partial sequences that no
// allowed code point can complete.
func (t *stateTable) step(c cursor, b byte) (cursor, bool) {
	if c.need == 0 {
		if b < 0x80 {
			n := t.transition(c.state, rune(b))
			return cursor{state: n}, n != transitionDead
		}
		next := cursor{state: c.state, lo: 0x80, hi: 0xBF}
		switch {
		case 0xC2 <= b && b <= 0xDF:
			next.need, next.partial = 1, rune(b&0x1F)
		case 0xE0 <= b && b <= 0xEF:
			next.need, next.partial = 2, rune(b&0x0F)
			if b == 0xE0 {
				next.lo = 0xA0 // below is overlong
			} else if b == 0xED {
				next.hi = 0x9F // above are surrogates
			}
		case 0xF0 <= b && b <= 0xF4:
			next.need, next.partial = 3, rune(b&0x07)
			if b == 0xF0 {
				next.lo = 0x90 // below is overlong
			} else if b == 0xF4 {
				next.hi = 0x8F // above is past U+10FFFF
			}
		default:
			return c, false
		}
		return next, t.completable(next)
	}
	if b < c.lo || b > c.hi {
		return c, false
	}
	cp := c.partial<<6 | rune(b&0x3F)
	if c.need == 1 {
		n := t.transition(c.state, cp)
		return cursor{state: n}, n != transitionDead
	}
	next := cursor{state: c.state, partial: cp, need: c.need - 1, lo: 0x80, hi: 0xBF}
	return next, t.completable(next)
}

// completable reports whether the unfinished sequence at c can still end in
// a code point the state allows.
func (t *stateTable) completable(c cursor) bool {
	// The code points reachable are those whose next 6 bits lie in [lo, hi]
	// (as a continuation byte's payload) and whose remaining bits are free.
	rest := 6 * (int(c.need) - 1)
	base := c.partial << (6 * c.need)
	lo := base | rune(c.lo&0x3F)<<rest
	hi := base | rune(c.hi&0x3F)<<rest | (1<<rest - 1)
	return t.viable(c.state, lo, hi)
}

// Matcher follows text through a grammar, byte by byte, the way llama.cpp's
// sampler does: it keeps every parse stack the text so far allows. A Matcher
// is not safe for concurrent use; Clone it for each goroutine.
type Matcher struct {
	g     *Grammar
	table *stateTable
	cur   cursor
}

// NewMatcher returns a matcher at the start of the grammar's root rule. It
// starts from the states and transitions a released matcher of the grammar
// computed, if there is one (see Release).
func (g *Grammar) NewMatcher() *Matcher {
	t := g.spare.take()
	if t == nil {
		t = newStateTable(g)
	}
	id, err := t.intern(g.initial)
	if err != nil {
		// The initial stacks were checked against smaller limits in Parse.
		panic("grammar: initial state does not fit a fresh table: " + err.Error())
	}
	return &Matcher{g: g, table: t, cur: cursor{state: id}}
}

// Clone returns an independent matcher at the same position. The clone has
// its own transition cache, so the two may be used from different goroutines.
func (m *Matcher) Clone() *Matcher {
	c := &Matcher{g: m.g, table: newStateTable(m.g)}
	c.cur = m.cur
	c.cur.state = c.rehome(m.table.states[m.cur.state].stacks)
	c.table.err = m.table.err
	return c
}

// Release hands the matcher's cache of states and transitions to its grammar,
// for a later NewMatcher: a grammar matched again and again (a server's
// schema, the same in every request) then finds the transitions of the
// positions it has been through computed, where a fresh matcher computes
// each once more. The matcher must not be used after Release.
func (m *Matcher) Release() {
	t := m.table
	m.table = nil
	if t != nil && t.err == nil && !t.oversized() {
		m.g.spare.put(t)
	}
}

// spareTables are the caches released matchers left, at most maxSpareTables:
// as many matchers as run at once can each take one.
type spareTables struct {
	mu     sync.Mutex
	tables []*stateTable
}

const maxSpareTables = 8

func (s *spareTables) take() *stateTable {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.tables); n > 0 {
		t := s.tables[n-1]
		s.tables = s.tables[:n-1]
		return t
	}
	return nil
}

func (s *spareTables) put(t *stateTable) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.tables) < maxSpareTables {
		s.tables = append(s.tables, t)
	}
}

// rehome interns stacks (held by a state of another, or an outgrown, table)
// into m.table. A state that already existed fits: the table is fresh.
func (m *Matcher) rehome(stacks [][]int32) int32 {
	id, err := m.table.intern(stacks)
	if err != nil {
		panic("grammar: a live state does not fit a fresh table: " + err.Error())
	}
	return id
}

// trimCache starts a fresh transition cache holding only the current state
// when the cache has outgrown its soft bounds, so that a long generation
// through many distinct positions (deep nesting) uses bounded memory.
func (m *Matcher) trimCache() {
	t := m.table
	if !t.oversized() {
		return
	}
	stacks := t.states[m.cur.state].stacks
	err := t.err
	m.table = newStateTable(m.g)
	m.table.err = err
	m.cur.state = m.rehome(stacks)
}

// AcceptBytes advances the matcher over b and reports true, or reports false
// and leaves the matcher unchanged when the grammar does not allow b here.
// b may end inside a UTF-8 sequence: the partial code point is kept and the
// next call continues it, and it is allowed only if some allowed code point
// can complete it. An empty b is accepted and changes nothing.
func (m *Matcher) AcceptBytes(b []byte) bool {
	c, ok := m.feed(b)
	if ok {
		m.cur = c
	}
	return ok
}

// feed runs b through the byte-level transitions from the current position.
func (m *Matcher) feed(b []byte) (cursor, bool) {
	m.trimCache()
	t := m.table
	id, err := t.byteState(m.cur)
	if err != nil {
		// The table was just trimmed, so this is unreachable in practice;
		// refuse rather than guess.
		t.fail(err)
		return m.cur, false
	}
	for _, x := range b {
		if id = t.advance(id, x); id == byteDead {
			return m.cur, false
		}
	}
	return t.cursors[id], true
}

// Allows reports whether AcceptBytes(piece) would succeed, without changing
// the matcher. This is the test that masks a token during sampling. An empty
// piece is not allowed: like llama.cpp, which masks tokens whose text is
// empty, this keeps sampling from choosing a token that makes no progress.
func (m *Matcher) Allows(piece []byte) bool {
	if len(piece) == 0 {
		return false
	}
	_, ok := m.feed(piece)
	return ok
}

// CanEnd reports whether the text so far is a complete match of the root
// rule, so an end-of-generation token may be sampled. It is false while a
// UTF-8 sequence is unfinished (llama.cpp looks only at the stacks).
func (m *Matcher) CanEnd() bool {
	return m.cur.need == 0 && m.table.states[m.cur.state].canEnd
}

// Err reports the first matching limit (MaxStacks, MaxExpansion, or the
// bound on cached parse stacks) this matcher ran into, or nil. When it is not
// nil, some text may have been refused because of the limit rather than the
// grammar.
func (m *Matcher) Err() error { return m.table.err }
