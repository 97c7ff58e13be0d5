//go:build unix

package podconn

import "syscall"

// initIdleCheck readies idleAlive: c's raw connection (none if its
// connection hides it, as a wrapper may: then no check) and peek as a func
// value, made once.
func (c *conn) initIdleCheck() {
	sc, ok := c.nc.(syscall.Conn)
	if !ok {
		return
	}
	if rc, err := sc.SyscallConn(); err == nil {
		c.raw, c.peekFn = rc, c.peek
	}
}

// idleAlive reports whether an idle connection may carry a request: one
// non-blocking read of its socket finds nothing to read. End of file (the
// pod closed it), an error (a reset) or bytes (nothing is owed to an idle
// connection: a 408, garbage) mean it may not, and the connection is then
// closed, so a byte read is lost with it and a peek (MSG_PEEK) is not
// needed.
func (c *conn) idleAlive() bool {
	if c.raw == nil {
		return true
	}
	c.alive = false
	if err := c.raw.Read(c.peekFn); err != nil {
		return false
	}
	return c.alive
}

// peek is idleAlive's look at the socket (Go's sockets are non-blocking):
// done after one read, whatever it found.
func (c *conn) peek(fd uintptr) bool {
	for {
		n, err := syscall.Read(int(fd), c.peekBuf[:])
		if err == syscall.EINTR {
			continue
		}
		c.alive = n < 0 && (err == syscall.EAGAIN || err == syscall.EWOULDBLOCK)
		return true
	}
}
