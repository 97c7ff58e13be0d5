package breaker

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// clientSet holds the per-client token buckets, keyed by the hash of the
// client key, in least-recently-used order. Keys are 64-bit maphash values:
// two clients whose keys collide (odds 2⁻⁶⁴ per pair) share a bucket.
type clientSet struct {
	// mu guards every field below and the list links of every entry.
	mu        sync.Mutex
	on        bool // ClientQPS > 0
	limit     rate.Limit
	burst     int
	max       int
	idleAfter time.Duration
	byKey     map[uint64]*clientEntry
	head      clientEntry // sentinel: head.next is the most recent, head.prev the least
}

type clientEntry struct {
	key        uint64
	bucket     *rate.Limiter
	lastUsed   time.Time
	prev, next *clientEntry
}

func (c *clientSet) init(s LimiterSettings) {
	c.byKey = make(map[uint64]*clientEntry)
	c.head.next, c.head.prev = &c.head, &c.head
	c.set(s)
}

// set copies the client settings; c.mu must be held (or c unshared).
func (c *clientSet) set(s LimiterSettings) {
	c.on = s.ClientQPS > 0
	c.limit = rate.Limit(s.ClientQPS)
	c.burst = s.ClientBurst
	c.max = s.MaxClients
	c.idleAfter = s.IdleAfter
}

// get returns the bucket for key, creating it if needed, or nil when
// per-client buckets are off. It evicts idle buckets on the way.
func (c *clientSet) get(now time.Time, key uint64) *rate.Limiter {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.on {
		return nil
	}
	c.evictIdle(now)
	e, ok := c.byKey[key]
	if ok {
		c.unlink(e)
	} else {
		for len(c.byKey) >= c.max {
			c.remove(c.head.prev)
		}
		e = &clientEntry{key: key, bucket: rate.NewLimiter(c.limit, c.burst)}
		c.byKey[key] = e
	}
	e.lastUsed = now
	c.pushFront(e)
	return e.bucket
}

// evictIdle drops buckets unused for idleAfter, oldest first.
func (c *clientSet) evictIdle(now time.Time) {
	for e := c.head.prev; e != &c.head && now.Sub(e.lastUsed) >= c.idleAfter; e = c.head.prev {
		c.remove(e)
	}
}

func (c *clientSet) update(now time.Time, s LimiterSettings) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.set(s)
	if !c.on {
		clear(c.byKey)
		c.head.next, c.head.prev = &c.head, &c.head
		return
	}
	for len(c.byKey) > c.max {
		c.remove(c.head.prev)
	}
	c.evictIdle(now)
	for e := c.head.next; e != &c.head; e = e.next {
		e.bucket.SetLimitAt(now, c.limit)
		e.bucket.SetBurstAt(now, c.burst)
	}
}

func (c *clientSet) len(now time.Time) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.evictIdle(now)
	return len(c.byKey)
}

func (c *clientSet) remove(e *clientEntry) {
	c.unlink(e)
	delete(c.byKey, e.key)
}

func (c *clientSet) unlink(e *clientEntry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
}

func (c *clientSet) pushFront(e *clientEntry) {
	e.prev, e.next = &c.head, c.head.next
	c.head.next.prev = e
	c.head.next = e
}
