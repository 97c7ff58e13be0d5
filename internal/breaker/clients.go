package breaker

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// clientSet holds token buckets of one size keyed by a hash, in
// least-recently-used order: the per-client buckets (keyed by the client
// key), and the capped buckets of the tenants a share does not name (keyed
// by the tenant). Keys are 64-bit maphash values: two clients whose keys
// collide (odds 2⁻⁶⁴ per pair) share a bucket.
type clientSet struct {
	// mu guards every field below and the list links of every entry.
	mu    sync.Mutex
	spec  bucketSpec
	byKey map[uint64]*clientEntry
	head  clientEntry // sentinel: head.next is the most recent, head.prev the least
}

// bucketSpec is what every bucket of a clientSet is, and how many are kept.
type bucketSpec struct {
	on        bool // buckets are kept; off, get returns nil
	limit     rate.Limit
	burst     int
	max       int           // buckets kept at most; the least recently used go first
	idleAfter time.Duration // a bucket unused this long is dropped
}

// clientSpec is the per-client buckets' spec of normalized settings.
func clientSpec(s LimiterSettings) bucketSpec {
	return bucketSpec{on: s.ClientQPS > 0, limit: rate.Limit(s.ClientQPS), burst: s.ClientBurst, max: s.MaxClients, idleAfter: s.IdleAfter}
}

type clientEntry struct {
	key        uint64
	bucket     *rate.Limiter
	lastUsed   time.Time
	prev, next *clientEntry
}

func (c *clientSet) init(spec bucketSpec) {
	c.byKey = make(map[uint64]*clientEntry)
	c.head.next, c.head.prev = &c.head, &c.head
	c.spec = spec
}

// get returns the bucket for key, creating it if needed, or nil when
// per-client buckets are off. It evicts idle buckets on the way.
func (c *clientSet) get(now time.Time, key uint64) *rate.Limiter {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.spec.on {
		return nil
	}
	c.evictIdle(now)
	e, ok := c.byKey[key]
	if ok {
		c.unlink(e)
	} else {
		for len(c.byKey) >= c.spec.max {
			c.remove(c.head.prev)
		}
		e = &clientEntry{key: key, bucket: rate.NewLimiter(c.spec.limit, c.spec.burst)}
		c.byKey[key] = e
	}
	e.lastUsed = now
	c.pushFront(e)
	return e.bucket
}

// evictIdle drops buckets unused for idleAfter, oldest first.
func (c *clientSet) evictIdle(now time.Time) {
	for e := c.head.prev; e != &c.head && now.Sub(e.lastUsed) >= c.spec.idleAfter; e = c.head.prev {
		c.remove(e)
	}
}

// update applies a new spec: the buckets kept take its size from now, with
// the tokens they hold.
func (c *clientSet) update(now time.Time, spec bucketSpec) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.spec = spec
	if !c.spec.on {
		clear(c.byKey)
		c.head.next, c.head.prev = &c.head, &c.head
		return
	}
	for len(c.byKey) > c.spec.max {
		c.remove(c.head.prev)
	}
	c.evictIdle(now)
	for e := c.head.next; e != &c.head; e = e.next {
		e.bucket.SetLimitAt(now, c.spec.limit)
		e.bucket.SetBurstAt(now, c.spec.burst)
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
