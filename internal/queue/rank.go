package queue

import (
	"slices"
	"strings"
)

// Candidate is a window that could take a request now, as Ranked ranks it.
type Candidate struct {
	// Upstream names the window.
	Upstream string
	// Score is the Scorer's score for the request there; 0 without a
	// Scorer.
	Score float64
	// Room is how many more slots the window may start now.
	Room int
}

// Ranked appends to dst, best first, at most n windows other than chosen
// that could take r now, and returns the extended slice: those available
// with room whose bounds r's cost fits, that no waiter has reserved and
// that r does not exclude. They come in the order choose prefers: the
// Scorer's score for r.Prefix, then the most room, then the name; without
// a Scorer, by room.
//
// Ranked changes nothing: no slot is taken, no window reserved, the Scorer
// is not told. It is for the endpoint picker's fallbacks, which Envoy tries
// only when it cannot use the pod that holds the request's slot (chosen):
// a fallback holds nothing, so a tenant's share is not checked here.
func (c *Core) Ranked(dst []Candidate, r Request, chosen string, n int) []Candidate {
	start := len(dst)
	if n <= 0 {
		return dst
	}
	cost := r.cost()
	for _, w := range c.windows {
		room := c.room(w)
		if room == 0 || w.name == chosen || !w.fits(cost) || w.reserved || slices.Contains(r.Exclude, w.name) {
			continue
		}
		cand := Candidate{Upstream: w.name, Room: room}
		if c.scorer != nil {
			cand.Score = c.scorer.Score(w.name, w.inflight, w.limit, r.Prefix)
		}
		dst = insertRanked(dst, start, cand, n)
	}
	return dst
}

// insertRanked puts cand into dst[start:], kept sorted best first and at
// most n long: in O(n) a step, so that ranking a few fallbacks among many
// pods sorts no more than those few.
func insertRanked(dst []Candidate, start int, cand Candidate, n int) []Candidate {
	top := dst[start:]
	i := len(top)
	for i > 0 && ranksBefore(cand, top[i-1]) {
		i--
	}
	if i == n {
		return dst // worse than every one of n
	}
	if len(top) < n {
		dst = append(dst, Candidate{})
		top = dst[start:]
	}
	copy(top[i+1:], top[i:len(top)-1])
	top[i] = cand
	return dst
}

// ranksBefore reports whether a comes before b: the higher score, then the
// most room, then the first name (choose's order).
func ranksBefore(a, b Candidate) bool {
	switch {
	case a.Score != b.Score:
		return a.Score > b.Score
	case a.Room != b.Room:
		return a.Room > b.Room
	}
	return strings.Compare(a.Upstream, b.Upstream) < 0
}

// Ranked is Core.Ranked under the queue's lock.
func (q *Queue) Ranked(dst []Candidate, r Request, chosen string, n int) []Candidate {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.core.Ranked(dst, r, chosen, n)
}
