package quota

import (
	"cmp"
	"slices"
	"time"
)

// maxHeaviest is how many client keys a Snapshot lists at most.
const maxHeaviest = 64

// Snapshot is the state of a Quotas at one instant, for /admin/state and
// gauges.
type Snapshot struct {
	// Classes and Models hold every class and model that has a quota.
	Classes map[string]Usage `json:"classes"`
	Models  map[string]Usage `json:"models"`
	// Clients are the client keys.
	Clients ClientsUsage `json:"clients"`
}

// Usage is one key's counts and quota in each window.
type Usage struct {
	Minute WindowUsage `json:"minute"`
	Day    WindowUsage `json:"day"`
}

// WindowUsage is one window of one key: the tokens it counts now and its
// quota (0: none).
type WindowUsage struct {
	Used  int64 `json:"used"`
	Limit int64 `json:"limit"`
}

// ClientsUsage is the client keys in a Snapshot.
type ClientsUsage struct {
	// Count is how many client keys are remembered.
	Count int `json:"count"`
	// Heaviest are at most MaxHeaviest of them, by tokens counted in the
	// day window, then in the minute window, most first.
	Heaviest []ClientUsage `json:"heaviest"`
}

// ClientUsage is one client key's Usage.
type ClientUsage struct {
	// Name is "sha256:" and the first 12 hex digits of the key's hash.
	Name string `json:"name"`
	Usage
}

// Snapshot returns the counts now. It holds the lock for one pass over the
// keys.
func (q *Quotas) Snapshot() Snapshot {
	now := q.now()
	q.mu.Lock()
	defer q.mu.Unlock()
	now = q.clockLocked(now)
	s := Snapshot{
		Classes: usages(q.classes, q.lim.classes, now),
		Models:  usages(q.models, q.lim.models, now),
		Clients: ClientsUsage{Count: len(q.clients), Heaviest: []ClientUsage{}},
	}
	heavier := func(a, b ClientUsage) int {
		return cmp.Or(cmp.Compare(b.Day.Used, a.Day.Used), cmp.Compare(b.Minute.Used, a.Minute.Used),
			cmp.Compare(a.Name, b.Name))
	}
	top := s.Clients.Heaviest
	for e := q.lru.next; e != &q.lru; e = e.next {
		c := ClientUsage{Name: e.name, Usage: usage(e, q.lim.client(e.hash), now)}
		if len(top) == maxHeaviest && heavier(c, top[len(top)-1]) >= 0 {
			continue
		}
		i, _ := slices.BinarySearchFunc(top, c, heavier)
		if len(top) == maxHeaviest {
			top = top[:len(top)-1]
		}
		top = slices.Insert(top, i, c)
	}
	s.Clients.Heaviest = top
	return s
}

func usages(entries map[string]*entry, limits map[string]Limit, now time.Time) map[string]Usage {
	m := make(map[string]Usage, len(limits))
	for name, l := range limits {
		m[name] = usage(entries[name], l, now)
	}
	return m
}

// usage is e's counts (e may be nil: nothing counted) with its quota l.
func usage(e *entry, l Limit, now time.Time) Usage {
	var used [2]int64
	if e != nil {
		for w, g := range windows {
			used[w] = e.w[w].usedFrom(g.oldest(g.index(now)))
		}
	}
	return Usage{Minute: WindowUsage{used[0], l.PerMinute}, Day: WindowUsage{used[1], l.PerDay}}
}
