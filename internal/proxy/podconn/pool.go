package podconn

import (
	"sync"
	"time"
)

// pool holds the idle connections, per host a stack: put pushes, take pops
// the newest (last in, first out, so that the fewest connections stay
// warm), and the oldest are at the bottom. All of a host's connections have
// the same idle timeout, so the bottom is always the first to expire: one
// timer per host, armed for the bottom's expiry, pops from the bottom what
// has expired and re-arms for the next (where http.Transport has a timer
// per connection, reset on every put). The zero value is ready to use.
type pool struct {
	mu    sync.Mutex
	hosts map[string]*idleList
}

// idleList is one host's idle connections, oldest first.
type idleList struct {
	conns []*conn
	timer *time.Timer // nil until first armed
	armed bool
}

// take pops key's newest idle connection; nil if it has none. One idle
// longer than timeout (a timer running late) is closed.
func (p *pool) take(key string, timeout time.Duration) *conn {
	p.mu.Lock()
	l := p.hosts[key]
	if l == nil || len(l.conns) == 0 {
		p.mu.Unlock()
		return nil
	}
	c := l.conns[len(l.conns)-1]
	l.conns[len(l.conns)-1] = nil
	l.conns = l.conns[:len(l.conns)-1]
	expired := timeout > 0 && time.Since(c.idleSince) >= timeout
	p.mu.Unlock()
	if expired {
		c.close()
		return nil
	}
	return c
}

// put pushes c onto its host's stack; false if the stack is full (limit).
func (p *pool) put(c *conn, limit int, timeout time.Duration) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hosts == nil {
		p.hosts = make(map[string]*idleList)
	}
	l := p.hosts[c.key]
	if l == nil {
		l = &idleList{}
		p.hosts[c.key] = l
	}
	if len(l.conns) >= limit {
		return false
	}
	c.idleSince = time.Now() // under the lock: the stack stays in order
	l.conns = append(l.conns, c)
	if timeout > 0 && !l.armed {
		l.armed = true
		if l.timer == nil {
			key := c.key
			l.timer = time.AfterFunc(timeout, func() { p.expire(key, l, timeout) })
		} else {
			l.timer.Reset(timeout)
		}
	}
	return true
}

// expire closes l's connections idle for timeout or longer and re-arms the
// timer for the next; a host left with none is dropped from the map.
func (p *pool) expire(key string, l *idleList, timeout time.Duration) {
	p.mu.Lock()
	if p.hosts[key] != l { // CloseIdleConnections came first
		p.mu.Unlock()
		return
	}
	now := time.Now()
	n := 0
	for n < len(l.conns) && now.Sub(l.conns[n].idleSince) >= timeout {
		n++
	}
	dead := make([]*conn, n)
	copy(dead, l.conns)
	m := copy(l.conns, l.conns[n:])
	clear(l.conns[m:])
	l.conns = l.conns[:m]
	if m > 0 {
		l.timer.Reset(l.conns[0].idleSince.Add(timeout).Sub(now))
	} else {
		l.armed = false
		delete(p.hosts, key)
	}
	p.mu.Unlock()
	for _, c := range dead {
		c.close()
	}
}

// closeAll closes every idle connection.
func (p *pool) closeAll() {
	p.mu.Lock()
	hosts := p.hosts
	p.hosts = nil
	for _, l := range hosts {
		if l.timer != nil {
			l.timer.Stop()
		}
	}
	p.mu.Unlock()
	for _, l := range hosts {
		for _, c := range l.conns {
			c.close()
		}
	}
}

// idle is how many idle connections key has (tests).
func (p *pool) idle(key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if l := p.hosts[key]; l != nil {
		return len(l.conns)
	}
	return 0
}
