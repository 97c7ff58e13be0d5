package quota

import "time"

// evictScan is how many of the least recently charged client keys eviction
// looks at for one whose windows are empty.
const evictScan = 16

// rememberLocked creates the entry of t, a key with nothing counted yet; a
// client key goes to the front of the recency list, after another is
// forgotten when MaxClients are remembered. q.mu is held.
func (q *Quotas) rememberLocked(t target, now time.Time) *entry {
	switch t.kind {
	case 1:
		e := &entry{name: t.name}
		q.classes[t.name] = e
		return e
	case 2:
		e := &entry{name: t.name}
		q.models[t.name] = e
		return e
	}
	for len(q.clients) >= q.maxClients {
		q.evictLocked(now)
	}
	e := &entry{name: shortName(t.hash), hash: t.hash}
	q.clients[t.hash] = e
	q.pushFront(e)
	return e
}

// evictLocked forgets one client key: among the evictScan least recently
// charged, the least recent whose windows are empty at now, else the least
// recently charged. q.mu is held.
func (q *Quotas) evictLocked(now time.Time) {
	victim := q.lru.prev
	e := victim
	for range evictScan {
		if e == &q.lru {
			break
		}
		if e.empty(now) {
			victim = e
			break
		}
		e = e.prev
	}
	q.unlink(victim)
	victim.gone = true
	delete(q.clients, victim.hash)
}

// touch moves a client's entry to the front of the recency list.
func (q *Quotas) touch(e *entry) {
	if q.lru.next == e {
		return
	}
	q.unlink(e)
	q.pushFront(e)
}

func (q *Quotas) pushFront(e *entry) {
	e.prev, e.next = &q.lru, q.lru.next
	q.lru.next.prev = e
	q.lru.next = e
}

func (q *Quotas) unlink(e *entry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
}
