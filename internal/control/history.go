package control

// changeHistory is how many level changes a Controller remembers for
// Changes: the latest, over every upstream. Each is a few hundred bytes.
const changeHistory = 50

// LevelChange is one upstream's level change, as Changes lists it and
// /admin/state serves it (the Cause's fields beside the upstream's name).
type LevelChange struct {
	Upstream string `json:"upstream"`
	Cause
}

// history holds the latest ChangeHistory level changes in a ring; the zero
// value is empty. Its owner guards it.
type history struct {
	ring [changeHistory]LevelChange
	next int // where the next change goes
	n    int // how many the ring holds
}

func (h *history) add(c LevelChange) {
	h.ring[h.next] = c
	h.next = (h.next + 1) % len(h.ring)
	h.n = min(h.n+1, len(h.ring))
}

// list returns the changes h holds, newest first, in a new slice.
func (h *history) list() []LevelChange {
	out := make([]LevelChange, h.n)
	for i := range out {
		out[i] = h.ring[(h.next-1-i+len(h.ring))%len(h.ring)]
	}
	return out
}
