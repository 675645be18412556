package tokenizer

import "sync"

// symbol is one node of a pre-token's doubly linked list of symbols.
type symbol struct {
	id         int32 // -1 once merged into its left neighbour
	prev, next int32 // indices; -1 at the ends
}

// candidate is a possible merge of the symbol at pos with its right
// neighbour. left and right are the ids when it was queued: a candidate is
// stale (skipped when popped) if either side has changed since.
type candidate struct {
	rank, pos   int32
	left, right int32
	merged      int32
}

// before orders candidates by rank, then leftmost first (Hugging Face's and
// the JavaScript reference's tie-break).
func (c candidate) before(d candidate) bool {
	return c.rank < d.rank || (c.rank == d.rank && c.pos < d.pos)
}

// mergeHeap is a binary min-heap of candidates (no container/heap
// interface calls in the hot loop).
type mergeHeap []candidate

func (h *mergeHeap) push(c candidate) {
	*h = append(*h, c)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !s[i].before(s[p]) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *mergeHeap) pop() candidate {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s = s[:n]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && s[l].before(s[m]) {
			m = l
		}
		if r < n && s[r].before(s[m]) {
			m = r
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}

// bpeScratch holds the buffers of one merge loop, reused across calls.
type bpeScratch struct {
	syms []symbol
	heap mergeHeap
}

var scratchPool = sync.Pool{New: func() any { return new(bpeScratch) }}

// appendBPE appends the ids of one pre-token, from the cache when it was
// seen before.
func (t *Tokenizer) appendBPE(ids []int, word string) []int {
	if len(word) == 1 {
		if id := t.byteIDs[word[0]]; id >= 0 {
			return append(ids, int(id))
		}
		return ids // a byte the vocabulary has no symbol for
	}
	if len(word) <= maxCachedLen {
		t.cacheMu.RLock()
		cached, ok := t.cache[word]
		t.cacheMu.RUnlock()
		if ok {
			for _, id := range cached {
				ids = append(ids, int(id))
			}
			return ids
		}
	}
	if t.ignoreMerges {
		if id, ok := t.ids[byteLevel(word)]; ok && !t.isAdded[id] {
			return append(ids, id)
		}
	}
	start := len(ids)
	ids = t.merge(ids, word)
	if len(word) <= maxCachedLen {
		out := make([]int32, len(ids)-start)
		for i, id := range ids[start:] {
			out[i] = int32(id)
		}
		t.cacheMu.Lock()
		if len(t.cache) >= cacheLimit {
			clear(t.cache)
		}
		t.cache[word] = out
		t.cacheMu.Unlock()
	}
	return ids
}

// merge runs BPE on word's bytes: start from one symbol per byte, then
// repeatedly apply the lowest-ranked merge present, via a heap of candidate
// pairs (O(n log n) per word instead of a full rescan per merge). A byte
// with no symbol is left out, so that its neighbours are adjacent and may
// merge ("!\x04!" is "!!" in SmolLM2's vocabulary), as in Hugging Face's
// BPE without an unk_token.
func (t *Tokenizer) merge(ids []int, word string) []int {
	sc := scratchPool.Get().(*bpeScratch)
	defer scratchPool.Put(sc)
	syms := sc.syms[:0]
	for i := 0; i < len(word); i++ {
		if id := t.byteIDs[word[i]]; id >= 0 {
			k := int32(len(syms))
			syms = append(syms, symbol{id: id, prev: k - 1, next: k + 1})
		}
	}
	n := len(syms)
	if n == 0 {
		sc.syms = syms
		return ids
	}
	syms[n-1].next = -1
	h := sc.heap[:0]
	queue := func(pos int32) {
		next := syms[pos].next
		if next < 0 {
			return
		}
		l, r := syms[pos].id, syms[next].id
		if v, ok := t.merges[uint64(l)<<32|uint64(r)]; ok {
			h.push(candidate{rank: int32(v >> 32), pos: pos, left: l, right: r, merged: int32(uint32(v))})
		}
	}
	for i := range int32(n - 1) {
		queue(i)
	}
	for len(h) > 0 {
		c := h.pop()
		s := &syms[c.pos]
		if s.id != c.left || s.next < 0 || syms[s.next].id != c.right {
			continue // stale: one side was merged since it was queued
		}
		right := s.next
		s.id = c.merged
		s.next = syms[right].next
		syms[right].id = -1
		if s.next >= 0 {
			syms[s.next].prev = c.pos
		}
		if s.prev >= 0 {
			queue(s.prev)
		}
		queue(c.pos)
	}
	for i := int32(0); i >= 0; i = syms[i].next {
		ids = append(ids, int(syms[i].id))
	}
	sc.syms, sc.heap = syms, h
	return ids
}
